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
    let kc = kube::config::Kubeconfig::read_from(cluster.kubeconfig_path()).unwrap();
    let opts = kube::config::KubeConfigOptions { context: Some(context.into()), ..Default::default() };
    kube::Client::try_from(kube::Config::from_custom_kubeconfig(kc, &opts).await.unwrap()).unwrap()
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
