//! Shared by the multi-process tests of the control-plane components: a 3-server
//! cluster of the real binary with short leader-election timings, and kube clients to
//! one server each, and their metrics pages.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use keelson_runner::{Cluster, ClusterSpec};

/// Lease 3 s, renew deadline 2 s, retry 500 ms: failovers in seconds, not a quarter minute.
pub const SHORT_ELECTIONS: [&str; 6] = ["--leader-elect-lease-duration", "3s", "--leader-elect-renew-deadline", "2s", "--leader-elect-retry-period", "500ms"];

/// Three servers in `dir`, their APIs up.
pub async fn start_short_elections(dir: &Path) -> Cluster {
    start_short_elections_with(dir, &[]).await
}

/// The same, every server also given `more` flags.
pub async fn start_short_elections_with(dir: &Path, more: &[&str]) -> Cluster {
    let mut spec = ClusterSpec::loopback(3, PathBuf::from(env!("CARGO_BIN_EXE_keelson")), dir);
    spec.server_args = SHORT_ELECTIONS.iter().chain(more).map(|s| s.to_string()).collect();
    let cluster = Cluster::start(spec, |m| eprintln!("cluster: {m}")).await.unwrap();
    cluster.wait_api(Duration::from_secs(60)).await.unwrap();
    cluster
}

/// An admin kube client to the server of kubeconfig context `context` (`keelson-N`).
pub async fn client(cluster: &Cluster, context: &str) -> kube::Client {
    kube::Client::try_from(config(cluster, context).await).unwrap()
}

/// The same without kube-rs's default retries of 429, 503 and 504 (which would wait out
/// minutes of back-off on a refusal the test expects).
pub async fn client_without_retries(cluster: &Cluster, context: &str) -> kube::Client {
    let mut config = config(cluster, context).await;
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

async fn config(cluster: &Cluster, context: &str) -> kube::Config {
    let kc = kube::config::Kubeconfig::read_from(cluster.kubeconfig_path()).unwrap();
    let opts = kube::config::KubeConfigOptions { context: Some(context.into()), ..Default::default() };
    kube::Config::from_custom_kubeconfig(kc, &opts).await.unwrap()
}

/// The server index (0-based) of a holder identity `keelson-N_<uuid>`.
pub fn server_of(holder: &str) -> Option<usize> {
    holder.split_once('_')?.0.strip_prefix("keelson-")?.parse::<usize>().ok().map(|n| n - 1)
}

/// The Prometheus page a server serves at `addr` (`--metrics-addr`).
pub async fn metrics_page(addr: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

/// Polls `check` every 500 ms until it gives a value, failing after `within`.
pub async fn eventually<T, F, Fut>(what: &str, within: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match check().await {
            Ok(v) => return v,
            Err(last) => {
                assert!(tokio::time::Instant::now() < deadline, "{what}: not within {within:?}; last seen: {last}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// A `keelson server` process of its own (outside a runner cluster), killed on drop.
pub struct LoneServer {
    pub child: std::process::Child,
    /// Its store (gRPC) and API `127.0.0.1:port`.
    pub store: String,
    pub api: String,
}

impl Drop for LoneServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `keelson server --name NAME` on free loopback ports with data in `dir/NAME`
/// and its log in `dir/NAME.log`, with `args` added.
pub fn spawn_server(dir: &Path, name: &str, args: &[&str]) -> LoneServer {
    let port = || keelson_runner::free_loopback_port().expect("a free loopback port");
    let store = format!("127.0.0.1:{}", port());
    let api = format!("127.0.0.1:{}", port());
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_keelson"))
        .args(["server", "--name", name, "--listen", &store, "--api-listen", &api])
        .arg("--data-dir")
        .arg(dir.join(name))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::from(log))
        .spawn()
        .unwrap();
    LoneServer { child, store, api }
}
