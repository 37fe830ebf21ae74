//! `keelson server`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use keelson_replica::{Bootstrap, CompactionPolicy, ReplicaConfig};

#[derive(Args)]
pub struct ServerArgs {
    /// This replica's name (kept in its data directory on first start).
    #[arg(long, default_value = "keelson-1")]
    name: String,
    #[arg(long, default_value = "keelson-data")]
    data_dir: PathBuf,
    /// Address of the replica's gRPC endpoint (Raft, store, cluster services).
    #[arg(long, default_value = "127.0.0.1:2380")]
    listen: SocketAddr,
    /// `host:port` other replicas reach this one at (default: the listen address).
    #[arg(long)]
    advertise: Option<String>,
    /// Create a new cluster with this replica as its first member.
    #[arg(long, conflicts_with = "join")]
    cluster_init: bool,
    /// Join the cluster the replica at this `host:port` belongs to.
    #[arg(long)]
    join: Option<String>,
    /// Serve Prometheus metrics at this address.
    #[arg(long)]
    metrics_addr: Option<SocketAddr>,
    /// Keep every revision younger than this many seconds.
    #[arg(long, default_value_t = 300)]
    compaction_retention_secs: u64,
    /// Also keep at least this many latest revisions.
    #[arg(long)]
    compaction_keep_revisions: Option<i64>,
    /// Snapshot the state after this many applied log entries.
    #[arg(long, default_value_t = 100_000)]
    snapshot_every: u64,
    /// Log entries kept behind a snapshot for lagging followers.
    #[arg(long, default_value_t = 5_000)]
    keep_logs: u64,
    /// How often the leader considers compacting, in seconds.
    #[arg(long, default_value_t = 10)]
    compaction_interval_secs: u64,
}

pub async fn run(args: ServerArgs) -> anyhow::Result<()> {
    let bootstrap = match (args.cluster_init, args.join) {
        (true, _) => Bootstrap::ClusterInit,
        (false, Some(peer)) => Bootstrap::Join(peer),
        (false, None) => Bootstrap::Resume,
    };
    let mut cfg = ReplicaConfig::new(args.name, args.data_dir, args.listen, bootstrap);
    cfg.advertise_addr = args.advertise;
    cfg.metrics_addr = args.metrics_addr;
    cfg.log_retention = keelson_raft::LogRetention { snapshot_every: args.snapshot_every.max(1), keep_behind_snapshot: args.keep_logs };
    cfg.compaction = CompactionPolicy {
        retention: Duration::from_secs(args.compaction_retention_secs),
        keep_revisions: args.compaction_keep_revisions,
        interval: Duration::from_secs(args.compaction_interval_secs.max(1)),
    };
    let running = keelson_replica::start(cfg).await.context("starting the replica")?;
    tracing::info!(id = format!("{:x}", running.replica.id()), addr = running.replica.addr(), "serving");
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutting down");
    running.shutdown().await;
    Ok(())
}
