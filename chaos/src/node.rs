//! One server process: spawn (inside its namespace when there is one), kill, stop,
//! pause, resume, and asking it for its status.

use std::fs::OpenOptions;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use keelson_client::api::MemberStatus;
use keelson_client::{PeerTls, StoreClient};

use crate::cmd;
use crate::ChaosError;

/// How long one status call may take.
pub(crate) const STATUS_TIMEOUT: Duration = Duration::from_secs(1);

/// One server of the cluster.
#[derive(Debug)]
pub(crate) struct Node {
    pub index: usize,
    pub name: String,
    /// Network namespace to run in (Netns mode).
    pub ns: Option<String>,
    /// `ip:port` it listens on, advertises and clients use.
    pub addr: String,
    /// `ip:port` of its Kubernetes API (HTTPS).
    pub api_addr: String,
    /// The cluster CA directory, shared by all nodes of the harness.
    pub pki_dir: PathBuf,
    pub data_dir: PathBuf,
    pub log: PathBuf,
    pub child: Option<Child>,
    pub paused: bool,
    /// Raft member id, once known.
    pub id: Option<u64>,
    /// The data directory was wiped: the next start must `--join`.
    pub needs_join: bool,
}

impl Node {
    /// The process was started and has not exited.
    pub fn running(&self) -> bool {
        self.pid().is_some_and(cmd::alive)
    }

    /// Running and not paused: expected to answer.
    pub fn live(&self) -> bool {
        self.running() && !self.paused
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Starts `keelson server` with `bootstrap` flags (`--cluster-init`, `--join A` or
    /// none to resume) and `extra` arguments; output goes to the node's log (appended).
    /// The process gets SIGKILL when the harness process dies.
    pub fn spawn(&mut self, binary: &Path, bootstrap: &[String], extra: &[String]) -> Result<u32, ChaosError> {
        if let Some(mut old) = self.child.take() {
            // Reap an exited predecessor.
            let _ = old.kill();
            let _ = old.wait();
        }
        std::fs::create_dir_all(&self.data_dir).map_err(ChaosError::io(self.data_dir.display().to_string()))?;
        let open = || {
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.log)
                .map_err(ChaosError::io(self.log.display().to_string()))
        };
        let (out, err) = (open()?, open()?);
        let mut c = match &self.ns {
            Some(ns) => {
                // `ip netns exec` execs the binary in place: the pid is the server's.
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(binary);
                c
            }
            None => Command::new(binary),
        };
        c.arg("server")
            .args(["--name", &self.name])
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(["--listen", &self.addr])
            .args(["--api-listen", &self.api_addr])
            .arg("--pki-dir")
            .arg(&self.pki_dir)
            .args(bootstrap)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            // Its own process group: a terminal's Ctrl-C reaches the harness, which decides.
            .process_group(0);
        // SAFETY: prctl is async-signal-safe; it only asks the kernel to SIGKILL the child
        // when its parent dies, so no server outlives the harness process.
        unsafe {
            c.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = spawn_from_spawner_thread(c).map_err(ChaosError::io(format!(
            "starting {} ({})",
            self.name,
            binary.display()
        )))?;
        let pid = child.id();
        self.child = Some(child);
        self.paused = false;
        Ok(pid)
    }

    /// SIGKILL and reap (≤ 10 s). Returns the pid it had, if it ran.
    pub async fn kill(&mut self) -> Option<u32> {
        let mut child = self.child.take()?;
        let pid = child.id();
        let _ = child.kill();
        reap(&mut child, Duration::from_secs(10)).await;
        self.paused = false;
        Some(pid)
    }

    /// SIGTERM (after SIGCONT if paused), SIGKILL if still there after `grace`; reaps.
    pub async fn stop(&mut self, grace: Duration) -> Option<u32> {
        let mut child = self.child.take()?;
        let pid = child.id();
        if self.paused {
            cmd::signal(pid, libc::SIGCONT);
        }
        cmd::signal(pid, libc::SIGTERM);
        if !reap(&mut child, grace).await {
            let _ = child.kill();
            reap(&mut child, Duration::from_secs(10)).await;
        }
        self.paused = false;
        Some(pid)
    }

    /// SIGKILL and reap synchronously (≤ 5 s), for `Drop`.
    pub fn kill_sync(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let deadline = Instant::now() + Duration::from_secs(5);
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }

    /// SIGSTOP; returns once the process is stopped (≤ 2 s; the signal is asynchronous).
    pub async fn pause(&mut self) -> Result<u32, ChaosError> {
        let pid = self
            .pid()
            .filter(|p| cmd::alive(*p))
            .ok_or_else(|| ChaosError::Cluster(format!("{} is not running", self.name)))?;
        cmd::signal(pid, libc::SIGSTOP);
        self.paused = true;
        let deadline = Instant::now() + Duration::from_secs(2);
        while cmd::state(pid) != Some('T') {
            if Instant::now() >= deadline {
                return Err(ChaosError::NotReady(format!(
                    "{} (pid {pid}) did not stop within 2 s of SIGSTOP",
                    self.name
                )));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(pid)
    }

    /// SIGCONT (harmless when not paused).
    pub fn resume(&mut self) -> Option<u32> {
        let pid = self.pid()?;
        cmd::signal(pid, libc::SIGCONT);
        self.paused = false;
        Some(pid)
    }
}

type SpawnRequest = (Command, std::sync::mpsc::Sender<std::io::Result<Child>>);

/// Spawns `c` from one thread that lives as long as the process. `PR_SET_PDEATHSIG`
/// fires when the *thread* that forked the child exits, and async runtimes retire threads
/// (Tokio's blocking pool, `block_in_place`); forking from a retiring thread would kill
/// live servers.
fn spawn_from_spawner_thread(c: Command) -> std::io::Result<Child> {
    use std::sync::mpsc::{channel, Sender};
    use std::sync::{Mutex, OnceLock};
    static SPAWNER: OnceLock<Mutex<Sender<SpawnRequest>>> = OnceLock::new();
    let tx = SPAWNER.get_or_init(|| {
        let (tx, rx) = channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("keelson-chaos-spawner".into())
            .spawn(move || {
                for (mut c, reply) in rx {
                    let _ = reply.send(c.spawn());
                }
            })
            .expect("spawning the keelson-chaos spawner thread");
        Mutex::new(tx)
    });
    let (reply_tx, reply_rx) = channel();
    let sent = tx.lock().unwrap_or_else(|p| p.into_inner()).send((c, reply_tx));
    sent.map_err(|_| std::io::Error::other("the spawner thread is gone"))?;
    reply_rx.recv().map_err(|_| std::io::Error::other("the spawner thread is gone"))?
}

/// Waits (≤ `timeout`) for `child` to exit; true when it did.
async fn reap(child: &mut Child, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(_)) | Err(_) => return true,
            Ok(None) if Instant::now() >= deadline => return false,
            Ok(None) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

/// The server at `addr`'s own status, or `None` if it does not answer within
/// [`STATUS_TIMEOUT`].
pub(crate) async fn status(addr: &str, tls: &PeerTls) -> Option<MemberStatus> {
    let client = StoreClient::with_tls(&[addr], tls).ok()?;
    tokio::time::timeout(STATUS_TIMEOUT, client.status()).await.ok()?.ok()
}

/// Statuses of `(index, addr)` servers, asked concurrently.
pub(crate) async fn statuses(targets: Vec<(usize, String)>, tls: PeerTls) -> Vec<(usize, Option<MemberStatus>)> {
    let mut set = tokio::task::JoinSet::new();
    for (i, addr) in targets {
        let tls = tls.clone();
        set.spawn(async move { (i, status(&addr, &tls).await) });
    }
    let mut out = Vec::new();
    while let Some(r) = set.join_next().await {
        if let Ok(x) = r {
            out.push(x);
        }
    }
    out.sort_by_key(|(i, _)| *i);
    out
}
