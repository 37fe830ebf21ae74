//! A local cluster of `keelson server` processes on loopback.
//!
//! Used by `keelson up`, `keelson bench store` and the multi-process tests. The cluster's
//! directory holds one data directory per server and `cluster.json`, rewritten whenever a
//! process starts or stops, so scripts can find (and kill) a given replica:
//!
//! ```json
//! {"servers": [{"name": "keelson-1", "pid": 4242, "raft_addr": "127.0.0.1:23791",
//!               "metrics_addr": "127.0.0.1:23891", "data_dir": "...", "running": true}]}
//! ```

mod ports;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use keelson_client::StoreClient;
pub use ports::free_loopback_port;
use serde::{Deserialize, Serialize};
use tokio::process::{Child, Command};
use tokio::time::Instant;

/// A failure to run the local cluster.
#[derive(Debug, thiserror::Error)]
pub enum LocalClusterError {
    #[error("{path}: {source}")]
    Io { path: String, #[source] source: std::io::Error },
    #[error("cluster.json is unreadable: {0}")]
    Manifest(String),
    #[error("starting {name}: {source}")]
    Spawn { name: String, #[source] source: std::io::Error },
    #[error("{0}")]
    NotReady(String),
    #[error("no server number {0}")]
    NoSuchServer(usize),
    #[error("cluster certificates: {0}")]
    Pki(String),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> LocalClusterError + '_ {
    move |source| LocalClusterError::Io { path: path.display().to_string(), source }
}

/// One server process as `cluster.json` records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerEntry {
    pub name: String,
    pub pid: Option<u32>,
    pub raft_addr: String,
    pub metrics_addr: String,
    /// The Kubernetes API (HTTPS) address.
    #[serde(default)]
    pub api_addr: String,
    pub data_dir: PathBuf,
    pub running: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub servers: Vec<ServerEntry>,
}

/// What cluster to run.
#[derive(Clone, Debug)]
pub struct LocalClusterSpec {
    pub servers: usize,
    pub dir: PathBuf,
    /// The `keelson` binary to run.
    pub binary: PathBuf,
    /// First port; server i uses `base_port + i` for gRPC and `base_port + 100 + i` for
    /// metrics. 0 = pick free ports.
    pub base_port: u16,
    /// Extra arguments for every `keelson server`.
    pub extra_args: Vec<String>,
}

/// A running local cluster. Dropping it kills its processes.
pub struct LocalCluster {
    spec: LocalClusterSpec,
    manifest: Manifest,
    children: Vec<Option<Child>>,
}

/// The cluster CA (created once in `DIR/pki`) and `DIR/kubeconfig`: one context per
/// server (`keelson-1` …), admin credentials, current context `keelson-1`.
fn write_kubeconfig(dir: &Path, manifest: &Manifest) -> Result<(), LocalClusterError> {
    let pki = dir.join("pki");
    let pki_err = |e: keelson_pki::PkiError| LocalClusterError::Pki(e.to_string());
    let ca = keelson_pki::ClusterMaterial::load_or_create(&pki, "keelson").map_err(pki_err)?.ca;
    let admin = ca
        .load_or_issue(&pki, "admin", |ca| ca.issue_client(keelson_pki::ADMIN_USER, &[keelson_pki::ADMIN_GROUP]))
        .map_err(pki_err)?;
    let contexts: Vec<_> = manifest
        .servers
        .iter()
        .map(|s| keelson_pki::KubeconfigContext { name: s.name.clone(), server: format!("https://{}", s.api_addr) })
        .collect();
    let text = keelson_pki::kubeconfig(&contexts, ca.cert_pem(), "admin", &admin);
    let path = dir.join("kubeconfig");
    std::fs::write(&path, text).map_err(io_err(&path))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).map_err(io_err(&path))
}

fn free_port() -> Result<u16, LocalClusterError> {
    free_loopback_port().map_err(io_err(Path::new("127.0.0.1")))
}

impl LocalCluster {
    /// Starts the cluster, or resumes it if `spec.dir` holds one. Returns once every
    /// server is a voter of one cluster with a leader.
    pub async fn start(spec: LocalClusterSpec, mut progress: impl FnMut(&str)) -> Result<Self, LocalClusterError> {
        std::fs::create_dir_all(&spec.dir).map_err(io_err(&spec.dir))?;
        let manifest_path = spec.dir.join("cluster.json");
        let resumed = manifest_path.exists();
        let manifest = if resumed {
            let bytes = std::fs::read(&manifest_path).map_err(io_err(&manifest_path))?;
            let m: Manifest = serde_json::from_slice(&bytes).map_err(|e| LocalClusterError::Manifest(e.to_string()))?;
            progress(&format!("resuming the {}-server cluster in {}", m.servers.len(), spec.dir.display()));
            m
        } else {
            let mut servers = Vec::new();
            for i in 1..=spec.servers {
                let (raft_port, metrics_port) = if spec.base_port == 0 {
                    (free_port()?, free_port()?)
                } else {
                    (spec.base_port + i as u16, spec.base_port + 100 + i as u16)
                };
                let api_port = if spec.base_port == 0 { free_port()? } else { spec.base_port + 200 + i as u16 };
                let name = format!("keelson-{i}");
                servers.push(ServerEntry {
                    data_dir: spec.dir.join(&name),
                    name,
                    pid: None,
                    raft_addr: format!("127.0.0.1:{raft_port}"),
                    metrics_addr: format!("127.0.0.1:{metrics_port}"),
                    api_addr: format!("127.0.0.1:{api_port}"),
                    running: false,
                });
            }
            Manifest { servers }
        };
        let mut manifest = manifest;
        for s in manifest.servers.iter_mut().filter(|s| s.api_addr.is_empty()) {
            s.api_addr = format!("127.0.0.1:{}", free_port()?);
        }
        write_kubeconfig(&spec.dir, &manifest)?;
        let n = manifest.servers.len();
        let mut cluster = Self { spec, manifest, children: (0..n).map(|_| None).collect() };
        if resumed {
            for i in 0..n {
                cluster.spawn(i, None)?;
            }
            cluster.wait_ready(Duration::from_secs(60)).await?;
        } else {
            cluster.spawn(0, Some(vec!["--cluster-init".into()]))?;
            progress(&format!("started {} (initializing the cluster)", cluster.manifest.servers[0].name));
            cluster.wait_members(1, Duration::from_secs(30)).await?;
            let seed = cluster.manifest.servers[0].raft_addr.clone();
            for i in 1..n {
                cluster.spawn(i, Some(vec!["--join".into(), seed.clone()]))?;
                progress(&format!("started {} (joining via {seed})", cluster.manifest.servers[i].name));
                cluster.wait_members(i + 1, Duration::from_secs(60)).await?;
            }
        }
        cluster.wait_api(Duration::from_secs(60)).await?;
        progress("all servers are voters and serve the Kubernetes API; cluster ready");
        Ok(cluster)
    }

    pub fn dir(&self) -> &Path {
        &self.spec.dir
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// gRPC endpoints of every server, in order.
    pub fn endpoints(&self) -> Vec<String> {
        self.manifest.servers.iter().map(|s| s.raft_addr.clone()).collect()
    }

    /// The admin identity the servers' mutual TLS accepts.
    pub fn tls(&self) -> Option<keelson_client::PeerTls> {
        keelson_client::tls::admin_tls(&self.spec.dir.join("pki")).ok().flatten()
    }

    pub fn client(&self) -> StoreClient {
        StoreClient::with_transport(&self.endpoints(), self.tls().as_ref()).expect("manifest endpoints are valid")
    }

    fn spawn(&mut self, i: usize, bootstrap: Option<Vec<String>>) -> Result<(), LocalClusterError> {
        let entry = self.manifest.servers.get(i).cloned().ok_or(LocalClusterError::NoSuchServer(i))?;
        std::fs::create_dir_all(&entry.data_dir).map_err(io_err(&entry.data_dir))?;
        let log_path = entry.data_dir.join("server.log");
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&log_path).map_err(io_err(&log_path))?;
        let log2 = log.try_clone().map_err(io_err(&log_path))?;
        let mut cmd = Command::new(&self.spec.binary);
        cmd.arg("server")
            .arg("--name")
            .arg(&entry.name)
            .arg("--data-dir")
            .arg(&entry.data_dir)
            .arg("--listen")
            .arg(&entry.raft_addr)
            .arg("--metrics-addr")
            .arg(&entry.metrics_addr)
            .arg("--api-listen")
            .arg(&entry.api_addr)
            .arg("--pki-dir")
            .arg(self.spec.dir.join("pki"))
            .args(bootstrap.unwrap_or_default())
            .args(&self.spec.extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log2))
            .kill_on_drop(true);
        // SAFETY: prctl is async-signal-safe; it only asks the kernel to SIGTERM the child
        // if this supervisor dies, so no server outlives a killed `keelson up`.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(|source| LocalClusterError::Spawn { name: entry.name.clone(), source })?;
        let s = &mut self.manifest.servers[i];
        s.pid = child.id();
        s.running = true;
        self.children[i] = Some(child);
        self.save()
    }

    fn save(&self) -> Result<(), LocalClusterError> {
        let path = self.spec.dir.join("cluster.json");
        let tmp = self.spec.dir.join("cluster.json.tmp");
        let bytes = serde_json::to_vec_pretty(&self.manifest).map_err(|e| LocalClusterError::Manifest(e.to_string()))?;
        std::fs::write(&tmp, bytes).map_err(io_err(&tmp))?;
        std::fs::rename(&tmp, &path).map_err(io_err(&path))
    }

    /// Waits until the cluster has a leader and `n` voters.
    async fn wait_members(&self, n: usize, timeout: Duration) -> Result<(), LocalClusterError> {
        let deadline = Instant::now() + timeout;
        let client = self.client();
        loop {
            for _ in 0..self.manifest.servers.len() {
                if let Ok(list) = client.member_list().await {
                    if list.leader.is_some() && list.members.iter().filter(|m| m.voter).count() >= n {
                        return Ok(());
                    }
                }
                client.rotate();
            }
            if Instant::now() >= deadline {
                return Err(LocalClusterError::NotReady(format!(
                    "cluster did not reach {n} voters with a leader within {timeout:?}; the server.log files under {} end with:{}",
                    self.spec.dir.display(),
                    self.log_tails(8)
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The last `lines` lines of every server's log, one block per server (so an error
    /// says why a server did not come up even after its directory is gone).
    fn log_tails(&self, lines: usize) -> String {
        let mut out = String::new();
        for s in &self.manifest.servers {
            let text = std::fs::read_to_string(s.data_dir.join("server.log")).unwrap_or_else(|e| format!("(unreadable: {e})"));
            let all: Vec<&str> = text.lines().collect();
            out.push_str(&format!("\n--- {} ---", s.name));
            for l in &all[all.len().saturating_sub(lines)..] {
                out.push_str("\n  ");
                out.push_str(l);
            }
        }
        out
    }

    /// Waits until every running server accepts connections on its API address.
    pub async fn wait_api(&self, timeout: Duration) -> Result<(), LocalClusterError> {
        let deadline = Instant::now() + timeout;
        for s in self.manifest.servers.iter().filter(|s| s.running) {
            while tokio::net::TcpStream::connect(&s.api_addr).await.is_err() {
                if Instant::now() >= deadline {
                    return Err(LocalClusterError::NotReady(format!("{} does not serve the API at {} within {timeout:?}", s.name, s.api_addr)));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(())
    }

    /// The kubeconfig with one context per server.
    pub fn kubeconfig_path(&self) -> PathBuf {
        self.spec.dir.join("kubeconfig")
    }

    /// Waits until every running server answers and agrees on a leader.
    pub async fn wait_ready(&self, timeout: Duration) -> Result<(), LocalClusterError> {
        let deadline = Instant::now() + timeout;
        'retry: loop {
            if Instant::now() >= deadline {
                return Err(LocalClusterError::NotReady(format!("cluster not ready within {timeout:?}")));
            }
            let mut leader = None;
            for s in self.manifest.servers.iter().filter(|s| s.running) {
                let c = StoreClient::with_transport(&[s.raft_addr.as_str()], self.tls().as_ref()).expect("valid endpoint");
                match c.status().await {
                    Ok(st) if st.leader.is_some() && (leader.is_none() || leader == st.leader) => leader = st.leader,
                    _ => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue 'retry;
                    }
                }
            }
            return Ok(());
        }
    }

    /// Sends `signal` to server `i` (0-based).
    pub fn signal(&self, i: usize, signal: i32) -> Result<(), LocalClusterError> {
        let pid = self.manifest.servers.get(i).and_then(|s| s.pid).ok_or(LocalClusterError::NoSuchServer(i))?;
        // SAFETY: plain kill(2) on a child we spawned.
        unsafe { libc::kill(pid as i32, signal) };
        Ok(())
    }

    /// `kill -9` server `i` and reap it.
    pub async fn kill(&mut self, i: usize) -> Result<(), LocalClusterError> {
        if let Some(mut child) = self.children.get_mut(i).and_then(Option::take) {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
        let s = &mut self.manifest.servers[i];
        s.running = false;
        s.pid = None;
        self.save()
    }

    /// Restarts server `i` from its data directory.
    pub fn restart(&mut self, i: usize) -> Result<(), LocalClusterError> {
        self.spawn(i, None)
    }

    /// Index of the server that currently leads, asking the servers that run.
    pub async fn leader_index(&self) -> Option<usize> {
        for s in self.manifest.servers.iter().filter(|s| s.running) {
            let c = StoreClient::with_transport(&[s.raft_addr.as_str()], self.tls().as_ref()).ok()?;
            if let Ok(st) = c.status().await {
                if st.role == "leader" {
                    return self.manifest.servers.iter().position(|x| x.name == s.name);
                }
            }
        }
        None
    }

    /// Stops every server with SIGTERM (SIGKILL after `grace`) and records it.
    pub async fn stop(mut self, grace: Duration) -> Result<(), LocalClusterError> {
        for (i, child) in self.children.iter_mut().enumerate() {
            if let Some(c) = child {
                if let Some(pid) = c.id() {
                    // SAFETY: kill(2) on our own child.
                    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
                }
            }
            self.manifest.servers[i].running = false;
        }
        for child in self.children.iter_mut() {
            if let Some(mut c) = child.take() {
                if tokio::time::timeout(grace, c.wait()).await.is_err() {
                    let _ = c.start_kill();
                    let _ = c.wait().await;
                }
            }
        }
        for s in &mut self.manifest.servers {
            s.pid = None;
        }
        self.save()
    }
}
