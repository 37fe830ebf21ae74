//! Prometheus exposition of Raft, storage and request metrics (the Prometheus
//! project's `prometheus-client`): gauges read from the replica's status at each
//! scrape, and the request counters of [`ReplicaStats`](crate::ReplicaStats).

use keelson_client::api::MemberStatus;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use crate::replica::Replica;
use crate::stats::ReplicaStats;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ColumnFamily {
    cf: &'static str,
}

type Pick<T, V> = fn(&T) -> V;

/// A column family's name, live SST bytes, memtable bytes and estimated keys.
type EngineSize = (&'static str, u64, u64, u64);

const STATUS_GAUGES: [(&str, &str, Pick<MemberStatus, i64>); 12] = [
    ("keelson_raft_is_leader", "1 if this replica leads", |st| i64::from(st.role == "leader")),
    ("keelson_raft_term", "Current Raft term", |st| st.term as i64),
    ("keelson_raft_last_log_index", "Index of the last log entry", |st| st.last_log_index as i64),
    ("keelson_raft_committed_index", "Index of the last committed entry known here", |st| st.committed_index as i64),
    ("keelson_raft_applied_index", "Index of the last applied entry", |st| st.applied_index as i64),
    ("keelson_raft_snapshot_index", "Last log index covered by the current snapshot", |st| st.snapshot_index as i64),
    ("keelson_raft_purged_index", "Last purged log index", |st| st.purged_index as i64),
    ("keelson_raft_members", "Members in the membership config", |st| st.members.len() as i64),
    ("keelson_store_revision", "Current store revision", |st| st.revision),
    ("keelson_store_compacted_revision", "Revision history is compacted up to", |st| st.compacted_revision),
    ("keelson_raft_log_format", "Newest Raft log entry format this binary decodes", |st| i64::from(st.log_format)),
    ("keelson_raft_cluster_log_format", "Newest log entry format every member decodes, as this replica last checked while leading (1 otherwise)", |st| i64::from(st.cluster_log_format)),
];

/// Per column family: name, help, and which of `engine_sizes`' numbers.
const ENGINE_GAUGES: [(&str, &str, Pick<EngineSize, u64>); 3] = [
    ("keelson_rocksdb_live_sst_bytes", "Live SST file bytes per column family", |s| s.1),
    ("keelson_rocksdb_memtable_bytes", "Memtable bytes per column family", |s| s.2),
    ("keelson_rocksdb_estimated_keys", "Estimated keys per column family", |s| s.3),
];

// Help texts without their final full stop: the encoder adds one.

/// Counters, named without the `_total` the encoder appends to their samples.
const COUNTERS: [(&str, &str, Pick<ReplicaStats, crate::stats::Counter>); 14] = [
    ("keelson_store_reads", "Range reads served", |s| s.reads.clone()),
    ("keelson_store_writes", "Writes committed through this replica", |s| s.writes.clone()),
    ("keelson_store_forwarded", "Writes forwarded to the leader", |s| s.forwarded.clone()),
    ("keelson_read_index_rounds", "ReadIndex rounds (each serves a batch of reads)", |s| s.read_index_rounds.clone()),
    ("keelson_watches_started", "Watches started", |s| s.watches_started.clone()),
    ("keelson_watch_events_sent", "Watch events sent", |s| s.watch_events_sent.clone()),
    ("keelson_watches_canceled_slow", "Watches canceled for being too slow", |s| s.watches_canceled_slow.clone()),
    ("keelson_compactions", "Compactions proposed by this replica", |s| s.compactions.clone()),
    ("keelson_raft_proposals_committed", "Entries this replica appended as leader that were committed and applied", |s| s.proposals_committed.clone()),
    ("keelson_raft_proposals_failed", "Entries this replica tried to append as leader that failed", |s| s.proposals_failed.clone()),
    ("keelson_raft_leader_changes_seen", "Leader changes this replica saw", |s| s.leader_changes.clone()),
    ("keelson_backups_saved", "Scheduled backups this server saved", |s| s.backups_saved.clone()),
    ("keelson_backups_failed", "Scheduled backups this server failed to save", |s| s.backups_failed.clone()),
    ("keelson_corruption_checks", "Corruption checks this replica completed as leader", |s| s.corruption_checks.clone()),
];

/// Renders this replica's metrics in the Prometheus text format (without the
/// OpenMetrics `# EOF` line, so other components' metrics can follow on the page).
pub fn render(replica: &Replica) -> String {
    let disk = &replica.inner.disk;
    let space = DiskSpace { free: disk.free_bytes(), reserve: disk.reserve_bytes(), low: disk.is_low(), refused: disk.refused() };
    encode(&replica.status(), &replica.state().store.backend().engine_sizes(), replica.stats(), replica.snapshot_bytes(), space)
}

/// The data directory's free-space figures at render time.
#[derive(Clone, Copy, Debug)]
struct DiskSpace {
    free: u64,
    reserve: u64,
    low: bool,
    refused: u64,
}

fn encode(status: &MemberStatus, sizes: &[EngineSize], stats: &ReplicaStats, snapshot_bytes: u64, space: DiskSpace) -> String {
    let mut registry = Registry::default();
    for (name, help, value) in [
        ("keelson_storage_free_bytes", "Free bytes on the data directory's file system (at the last measurement)", space.free.min(i64::MAX as u64) as i64),
        ("keelson_storage_reserve_bytes", "Free bytes the replica keeps on its data directory; below that it appends nothing", space.reserve.min(i64::MAX as u64) as i64),
        ("keelson_storage_space_low", "1 while the data directory is below its reserve and the replica appends nothing", i64::from(space.low)),
        ("keelson_storage_appends_refused", "Appends, votes and snapshots this replica refused for want of disk space", space.refused as i64),
        ("keelson_storage_writes_waiting_for_space", "Snapshot writes the file system refused for space, waiting to be retried", keelson_raft::out_of_space::waiting() as i64),
        ("keelson_storage_space_retries", "Snapshot writes retried after the file system refused them for space", keelson_raft::out_of_space::retries() as i64),
    ] {
        let gauge = Gauge::<i64>::default();
        gauge.set(value);
        registry.register(name, help, gauge);
    }
    let snapshot = Gauge::<i64>::default();
    snapshot.set(snapshot_bytes as i64);
    registry.register("keelson_raft_snapshot_bytes", "Size of this replica's current snapshot file", snapshot);
    registry.register("keelson_corrupt_members", "Members whose history differed from the others' at the leader's last corruption check", stats.corrupt_members.clone());
    registry.register("keelson_raft_proposal_duration_seconds", "Time from appending an entry as leader to its apply here", stats.proposal_duration.clone());
    for (name, help, pick) in STATUS_GAUGES {
        let gauge = Gauge::<i64>::default();
        gauge.set(pick(status));
        registry.register(name, help, gauge);
    }
    for (name, help, pick) in ENGINE_GAUGES {
        let family = Family::<ColumnFamily, Gauge>::default();
        for size in sizes {
            family.get_or_create(&ColumnFamily { cf: size.0 }).set(pick(size) as i64);
        }
        registry.register(name, help, family);
    }
    for (name, help, pick) in COUNTERS {
        registry.register(name, help, pick(stats));
    }
    let mut out = String::new();
    prometheus_client::encoding::text::encode_registry(&mut out, &registry).expect("writing to a String cannot fail");
    out
}

/// Serves `GET /metrics` until shutdown.
pub(crate) async fn serve(replica: Replica, extra: Option<crate::config::ExtraMetrics>, listener: tokio::net::TcpListener, shutdown: CancellationToken) {
    use axum::{routing::get, Router};
    let app = Router::new().route(
        "/metrics",
        get(move || {
            let r = replica.clone();
            let extra = extra.clone();
            async move {
                let mut page = render(&r);
                if let Some(e) = extra {
                    page.push_str(&(e.0)());
                }
                ([("content-type", "text/plain; version=0.0.4")], page)
            }
        }),
    );
    if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(shutdown.cancelled_owned()).await {
        tracing::warn!(error = %e, "metrics server failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gauges_per_column_family_and_counters() {
        let status = MemberStatus {
            id: 1,
            name: "a".into(),
            addr: "127.0.0.1:1".into(),
            role: "leader".into(),
            term: 3,
            leader: Some(1),
            last_log_index: 9,
            committed_index: 9,
            applied_index: 9,
            snapshot_index: 0,
            purged_index: 0,
            revision: 42,
            compacted_revision: 0,
            members: Vec::new(),
            log_format: 2,
            cluster_log_format: 2,
        };
        let stats = ReplicaStats::default();
        stats.writes.inc_by(7);
        stats.proposals_committed.inc();
        stats.proposal_duration.observe(0.003);
        let text = encode(&status, &[("state", 10, 20, 30), ("raft_log", 1, 2, 3)], &stats, 4096, DiskSpace { free: 1 << 30, reserve: 64 << 20, low: true, refused: 3 });
        for line in [
            "# TYPE keelson_raft_is_leader gauge\nkeelson_raft_is_leader 1\n",
            "\nkeelson_raft_term 3\n",
            "\nkeelson_store_revision 42\n",
            "\nkeelson_storage_space_low 1\n",
            "\nkeelson_storage_free_bytes 1073741824\n",
            "\nkeelson_storage_appends_refused 3\n",
            "\nkeelson_raft_cluster_log_format 2\n",
            "\nkeelson_raft_snapshot_bytes 4096\n",
            "\nkeelson_raft_proposals_committed_total 1\n",
            "\nkeelson_raft_proposal_duration_seconds_count 1\n",
            "\nkeelson_raft_leader_changes_seen_total 0\n",
            "keelson_rocksdb_memtable_bytes{cf=\"state\"} 20\n",
            "keelson_rocksdb_estimated_keys{cf=\"raft_log\"} 3\n",
            "# HELP keelson_store_writes Writes committed through this replica.\n# TYPE keelson_store_writes counter\nkeelson_store_writes_total 7\n",
            "\nkeelson_compactions_total 0\n",
        ] {
            assert!(text.contains(line), "{line:?} missing from\n{text}");
        }
        assert!(!text.contains("# EOF"), "{text}");
    }
}
