//! Prometheus text exposition of Raft, storage and request metrics.

use std::fmt::Write;

use tokio_util::sync::CancellationToken;

use crate::replica::Replica;

/// Renders this replica's metrics in the Prometheus text format.
pub fn render(replica: &Replica) -> String {
    let st = replica.status();
    let s = replica.stats();
    let mut out = String::new();
    let mut gauge = |name: &str, help: &str, v: f64| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
    };
    gauge("keelson_raft_is_leader", "1 if this replica leads.", f64::from(u8::from(st.role == "leader")));
    gauge("keelson_raft_term", "Current Raft term.", st.term as f64);
    gauge("keelson_raft_last_log_index", "Index of the last log entry.", st.last_log_index as f64);
    gauge("keelson_raft_committed_index", "Index of the last committed entry known here.", st.committed_index as f64);
    gauge("keelson_raft_applied_index", "Index of the last applied entry.", st.applied_index as f64);
    gauge("keelson_raft_snapshot_index", "Last log index covered by the current snapshot.", st.snapshot_index as f64);
    gauge("keelson_raft_purged_index", "Last purged log index.", st.purged_index as f64);
    gauge("keelson_raft_members", "Members in the membership config.", st.members.len() as f64);
    gauge("keelson_store_revision", "Current store revision.", st.revision as f64);
    gauge("keelson_store_compacted_revision", "Revision history is compacted up to.", st.compacted_revision as f64);
    let sizes = replica.state().store.backend().engine_sizes();
    type Size = fn(&(&str, u64, u64, u64)) -> u64;
    let families: [(&str, &str, Size); 3] = [
        ("keelson_rocksdb_live_sst_bytes", "Live SST file bytes per column family.", |s| s.1),
        ("keelson_rocksdb_memtable_bytes", "Memtable bytes per column family.", |s| s.2),
        ("keelson_rocksdb_estimated_keys", "Estimated keys per column family.", |s| s.3),
    ];
    for (name, help, pick) in families {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for size in &sizes {
            let _ = writeln!(out, "{name}{{cf=\"{}\"}} {}", size.0, pick(size));
        }
    }
    let mut counter = |name: &str, help: &str, v: u64| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}");
    };
    counter("keelson_store_reads_total", "Range reads served.", s.reads.get());
    counter("keelson_store_writes_total", "Writes committed through this replica.", s.writes.get());
    counter("keelson_store_forwarded_total", "Writes forwarded to the leader.", s.forwarded.get());
    counter("keelson_read_index_rounds_total", "ReadIndex rounds (each serves a batch of reads).", s.read_index_rounds.get());
    counter("keelson_watches_started_total", "Watches started.", s.watches_started.get());
    counter("keelson_watch_events_sent_total", "Watch events sent.", s.watch_events_sent.get());
    counter("keelson_watches_canceled_slow_total", "Watches canceled for being too slow.", s.watches_canceled_slow.get());
    counter("keelson_compactions_total", "Compactions proposed by this replica.", s.compactions.get());
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
