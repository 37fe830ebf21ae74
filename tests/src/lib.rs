//! An in-process cluster of real replicas (RocksDB on temp dirs, gRPC on loopback) for
//! cluster tests: start, kill (shut down), restart, find the leader, add members.
//! With [`ClusterOptions::tls`] every replica serves and dials its peers over mutual TLS
//! with certificates from a per-cluster test CA, and [`TestCluster::client`] gives TLS
//! clients; [`TestCluster::rotate_peer_certs`] renews the replicas' certificates while
//! they run, as `keelson server` does.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use keelson_client::api::MemberStatus;
use keelson_client::{PeerIdentity, PeerTls, StoreClient};
use keelson_pki::rotation::CertRotation;
use keelson_pki::ClusterCa;
use keelson_replica::{Bootstrap, CompactionPolicy, LogRetention, ReplicaConfig, RunningReplica};
use tempfile::TempDir;

/// The value of `key` read linearizably through `client` (`None`: absent). Panics if the
/// read fails.
pub async fn read_value(client: &StoreClient, key: &str) -> Option<Vec<u8>> {
    let reply = client.get(key.as_bytes()).await.expect("linearizable read");
    reply.response.kvs.first().map(|kv| kv.value.clone())
}

/// Longest [`TestCluster`] waits for one replica to start or to shut down.
pub const REPLICA_START_STOP_LIMIT: Duration = Duration::from_secs(60);

/// Longest one store call from the test support may take (status, reads, writes).
pub const CALL_LIMIT: Duration = Duration::from_secs(30);

/// Runs `f`, failing with a message naming `what` if it takes longer than `limit`: a
/// hang becomes a failure that says what it waited for (never a timed assertion: limits
/// are far above what the operation needs).
pub async fn within<F: std::future::Future>(what: impl std::fmt::Display, limit: Duration, f: F) -> anyhow::Result<F::Output> {
    match tokio::time::timeout(limit, f).await {
        Ok(out) => Ok(out),
        Err(_) => bail!("{what}: still waiting after {limit:?}"),
    }
}

/// Installs a test tracing subscriber once (RUST_LOG controls it).
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_test_writer()
        .try_init();
}

/// Options for a test cluster.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    pub log_retention: LogRetention,
    pub compaction: CompactionPolicy,
    pub slow_watcher_timeout: Duration,
    /// Mutual TLS for all gRPC traffic (default off): a fresh CA per cluster, a serving
    /// certificate per replica for `127.0.0.1` and `localhost`, TLS clients.
    pub tls: bool,
    /// With `tls`: how long each replica's first certificate is valid (default a year).
    pub peer_cert_validity: Option<Duration>,
    /// How often the leader runs the corruption check (default: the replica's default).
    pub corruption_check: Option<Duration>,
    /// Where the replicas' data directories go (`<dir>/keelson-<n>`), instead of a fresh
    /// temporary directory: a test can mount a small file system at one of them first.
    pub base_dir: Option<std::path::PathBuf>,
    /// Each replica's free-space reserve (default: the replica's default).
    pub disk_reserve: Option<u64>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        Self {
            log_retention: LogRetention::default(),
            // Tests compact explicitly; keep the automatic compactor out of the way.
            compaction: CompactionPolicy { retention: Duration::from_secs(3600), keep_revisions: None, interval: Duration::from_secs(3600) },
            slow_watcher_timeout: Duration::from_secs(30),
            tls: false,
            peer_cert_validity: None,
            corruption_check: None,
            base_dir: None,
            disk_reserve: None,
        }
    }
}

struct Slot {
    config: ReplicaConfig,
    running: Option<RunningReplica>,
}

/// The certificates of a TLS test cluster.
struct TestPki {
    ca: ClusterCa,
    /// What [`TestCluster::client`] presents: a client-only certificate of the CA.
    client: PeerTls,
}

impl TestPki {
    fn new() -> anyhow::Result<Self> {
        let ca = ClusterCa::generate("keelson-test")?;
        let cert = ca.issue_client("keelson-test-client", &[])?;
        let client = PeerTls::new(ca.cert_pem(), cert.cert_pem, cert.key_pem);
        Ok(Self { ca, client })
    }

    /// A replica's identity: a serving (and client) certificate for [`REPLICA_NAMES`],
    /// valid for `validity` (default a year).
    fn replica(&self, name: &str, validity: Option<Duration>) -> anyhow::Result<Arc<PeerIdentity>> {
        let names = REPLICA_NAMES.map(String::from);
        let cert = match validity {
            Some(v) => self.ca.issue_serving_valid_for(name, &names, keelson_pki::Duration::seconds(v.as_secs() as i64))?,
            None => self.ca.issue_serving(name, &names)?,
        };
        Ok(PeerTls::new(self.ca.cert_pem(), cert.cert_pem, cert.key_pem).identity()?)
    }
}

/// The names in every test replica's certificate.
const REPLICA_NAMES: [&str; 2] = ["127.0.0.1", "localhost"];

/// Renewing the replicas' peer certificates while they run; see
/// [`TestCluster::rotate_peer_certs`].
#[derive(Clone, Debug)]
pub struct PeerRotation {
    /// Validity of each new certificate.
    pub validity: Duration,
    /// Renew when less than this is left.
    pub renew_before: Duration,
    pub check_every: Duration,
}

pub struct TestCluster {
    _dir: TempDir,
    slots: Vec<Slot>,
    opts: ClusterOptions,
    dir_path: std::path::PathBuf,
    pki: Option<TestPki>,
    rotation: Option<PeerRotation>,
}

/// A loopback address free now, for a server that binds it later (and again after a
/// restart); see [`keelson_runner::free_loopback_port`].
fn free_addr() -> anyhow::Result<SocketAddr> {
    Ok(SocketAddr::from(([127, 0, 0, 1], keelson_runner::free_loopback_port()?)))
}

impl TestCluster {
    /// Starts `n` replicas: the first initializes the cluster, the others join it.
    /// Returns once all are voters with a leader.
    pub async fn start(n: usize, opts: ClusterOptions) -> anyhow::Result<Self> {
        init_tracing();
        let dir = tempfile::tempdir()?;
        let dir_path = opts.base_dir.clone().unwrap_or_else(|| dir.path().to_path_buf());
        let pki = if opts.tls { Some(TestPki::new()?) } else { None };
        let mut c = Self { _dir: dir, slots: Vec::new(), opts, dir_path, pki, rotation: None };
        c.add(Bootstrap::ClusterInit).await?;
        c.wait_voters(1).await?;
        for i in 1..n {
            let seed = c.addr(0);
            c.add(Bootstrap::Join(seed)).await?;
            c.wait_voters(i + 1).await?;
        }
        Ok(c)
    }

    /// Starts one more replica with the given bootstrap; returns its index.
    pub async fn add(&mut self, bootstrap: Bootstrap) -> anyhow::Result<usize> {
        let i = self.slots.len();
        let name = format!("keelson-{}", i + 1);
        let mut config = ReplicaConfig::new(&name, self.dir_path.join(&name), free_addr()?, bootstrap);
        config.log_retention = self.opts.log_retention;
        config.compaction = self.opts.compaction.clone();
        config.slow_watcher_timeout = self.opts.slow_watcher_timeout;
        if let Some(every) = self.opts.corruption_check {
            config.corruption_check = Some(every);
        }
        if let Some(reserve) = self.opts.disk_reserve {
            config.disk_reserve = reserve;
        }
        config.metrics_addr = Some("127.0.0.1:0".parse().expect("address"));
        if let Some(pki) = &self.pki {
            config.tls = Some(pki.replica(&name, self.opts.peer_cert_validity)?);
        }
        let running = within(format!("starting {name}"), REPLICA_START_STOP_LIMIT, keelson_replica::start(config.clone()))
            .await?
            .with_context(|| format!("starting {name}"))?;
        self.slots.push(Slot { config, running: Some(running) });
        self.spawn_rotation(i);
        Ok(i)
    }

    /// From now on, renews every replica's peer certificate as `keelson server` does
    /// (`keelson_pki::rotation`), also for replicas added or restarted later. TLS
    /// clusters only.
    pub fn rotate_peer_certs(&mut self, rotation: PeerRotation) {
        self.rotation = Some(rotation);
        for i in 0..self.len() {
            self.spawn_rotation(i);
        }
    }

    /// Starts replica `i`'s rotation task, if rotating; it stops when the replica does.
    fn spawn_rotation(&self, i: usize) {
        let (Some(rot), Some(pki), Some(identity), Some(running)) =
            (&self.rotation, &self.pki, self.peer_identity(i), self.running(i))
        else {
            return;
        };
        let rotation = CertRotation {
            purpose: "peer",
            ca_cert_pem: pki.ca.cert_pem().to_string(),
            ca_key_pem: pki.ca.key_pem(),
            common_name: self.slots[i].config.name.clone(),
            names: REPLICA_NAMES.map(String::from).to_vec(),
            validity: rot.validity,
            renew_before: rot.renew_before,
            check_every: rot.check_every,
            save_as: None,
        };
        tokio::spawn(keelson_pki::rotation::run(identity, rotation, running.shutdown_token()));
    }

    /// In a TLS cluster, replica `i`'s live identity (what it presents as server and
    /// client).
    pub fn peer_identity(&self, i: usize) -> Option<Arc<PeerIdentity>> {
        self.slots[i].config.tls.clone()
    }

    /// The directory holding every replica's data directory.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir_path
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    pub fn addr(&self, i: usize) -> String {
        self.slots[i].config.listen_addr.to_string()
    }

    pub fn is_running(&self, i: usize) -> bool {
        self.slots[i].running.is_some()
    }

    pub fn running(&self, i: usize) -> Option<&RunningReplica> {
        self.slots[i].running.as_ref()
    }

    /// A client that talks only to replica `i` (over TLS in a TLS cluster).
    pub fn client(&self, i: usize) -> StoreClient {
        StoreClient::with_transport(&[self.addr(i)], self.client_tls()).expect("valid address")
    }

    /// A client over every replica, starting at replica `start` (over TLS in a TLS
    /// cluster).
    pub fn client_all(&self, start: usize) -> StoreClient {
        let eps: Vec<String> = (0..self.len()).map(|i| self.addr(i)).collect();
        StoreClient::with_transport(&eps, self.client_tls()).expect("valid addresses").starting_at(start)
    }

    /// In a TLS cluster, the material [`TestCluster::client`] uses: the cluster CA and a
    /// client certificate it issued.
    pub fn client_tls(&self) -> Option<&PeerTls> {
        self.pki.as_ref().map(|p| &p.client)
    }

    /// In a TLS cluster, its CA (to issue more certificates).
    pub fn ca(&self) -> Option<&ClusterCa> {
        self.pki.as_ref().map(|p| &p.ca)
    }

    /// Replica `i`'s data directory.
    pub fn data_dir(&self, i: usize) -> std::path::PathBuf {
        self.slots[i].config.data_dir.clone()
    }

    /// Shuts replica `i` down (its data directory stays). Panics if that takes longer
    /// than [`REPLICA_START_STOP_LIMIT`].
    pub async fn kill(&mut self, i: usize) {
        if let Some(r) = self.slots[i].running.take() {
            if let Err(e) = within(format!("shutting replica {i} down"), REPLICA_START_STOP_LIMIT, r.shutdown()).await {
                panic!("{e:#}");
            }
        }
    }

    /// Restarts replica `i` from its data directory, on its old address.
    pub async fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        let mut cfg = self.slots[i].config.clone();
        cfg.bootstrap = Bootstrap::Resume;
        // The previous incarnation releases RocksDB's lock as its last handles drop.
        let mut last = None;
        for _ in 0..100 {
            match within(format!("restarting replica {i}"), REPLICA_START_STOP_LIMIT, keelson_replica::start(cfg.clone())).await? {
                Ok(r) => {
                    self.slots[i].running = Some(r);
                    self.spawn_rotation(i);
                    return Ok(());
                }
                Err(e) => {
                    last = Some(e);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        bail!("restarting replica {i}: {:?}", last)
    }

    /// Replica `i`'s status, asked over gRPC (failing after [`CALL_LIMIT`]).
    pub async fn status(&self, i: usize) -> anyhow::Result<MemberStatus> {
        Ok(within(format!("status of replica {i}"), CALL_LIMIT, self.client(i).status()).await??)
    }

    /// Waits until some running replica leads and all running replicas agree on it.
    pub async fn leader(&self) -> anyhow::Result<usize> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let mut leader = None;
            let mut agree = true;
            for i in 0..self.len() {
                let Some(r) = self.running(i) else { continue };
                let st = r.replica.status();
                match (st.leader, leader) {
                    (Some(l), None) => leader = Some(l),
                    (Some(l), Some(m)) if l == m => {}
                    _ => agree = false,
                }
            }
            if agree {
                if let Some(l) = leader {
                    if let Some(i) = (0..self.len()).find(|&i| self.running(i).is_some_and(|r| r.replica.id() == l)) {
                        return Ok(i);
                    }
                }
            }
            if tokio::time::Instant::now() >= deadline {
                bail!("no agreed leader among running replicas");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until the membership has `n` voters and a leader. A member being added
    /// counts once its promotion has left the joint phase (see
    /// [`keelson_replica::Replica::members`]), so any minority of the voters may be
    /// stopped as soon as this returns.
    pub async fn wait_voters(&self, n: usize) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            for i in (0..self.len()).filter(|&i| self.is_running(i)) {
                let l = self.running(i).expect("running").replica.members();
                if l.leader.is_some() && l.members.iter().filter(|m| m.voter).count() == n {
                    return Ok(());
                }
            }
            if tokio::time::Instant::now() >= deadline {
                bail!("cluster did not reach {n} voters");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until replica `i` has applied at least `index`.
    pub async fn wait_applied(&self, i: usize, index: u64) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let st = self.running(i).context("not running")?.replica.status();
            if st.applied_index >= index {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                bail!("replica {i} stuck at applied {} < {index}", st.applied_index);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn shutdown(mut self) {
        for i in 0..self.len() {
            self.kill(i).await;
        }
    }
}

pub mod api;
pub mod pause_proxy;
