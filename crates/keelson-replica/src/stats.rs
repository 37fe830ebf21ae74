//! Counters this replica exports as Prometheus metrics (`metrics`).

/// A Prometheus counter (shared: clones count together).
pub use prometheus_client::metrics::counter::Counter;

pub use prometheus_client::metrics::histogram::Histogram;

/// Request and watch counters of one replica, and its Raft proposals.
pub struct ReplicaStats {
    pub reads: Counter,
    pub writes: Counter,
    pub forwarded: Counter,
    pub read_index_rounds: Counter,
    pub watches_started: Counter,
    pub watch_events_sent: Counter,
    pub watches_canceled_slow: Counter,
    pub compactions: Counter,
    /// Entries this replica appended as leader that were committed and applied here.
    pub proposals_committed: Counter,
    /// Entries this replica tried to append as leader that failed (leader changed, the
    /// entry was discarded, the log refused it).
    pub proposals_failed: Counter,
    /// How long a committed proposal took, from the append to its apply here.
    pub proposal_duration: Histogram,
    /// Times this replica saw the leader change to another one.
    pub leader_changes: Counter,
    /// Scheduled backups this server saved, and those that failed.
    pub backups_saved: Counter,
    pub backups_failed: Counter,
    /// Corruption checks this replica completed as leader.
    pub corruption_checks: Counter,
    /// Members the leader's last corruption check found divergent (0 elsewhere).
    pub corrupt_members: prometheus_client::metrics::gauge::Gauge,
}

impl Default for ReplicaStats {
    fn default() -> Self {
        Self {
            reads: Counter::default(),
            writes: Counter::default(),
            forwarded: Counter::default(),
            read_index_rounds: Counter::default(),
            watches_started: Counter::default(),
            watch_events_sent: Counter::default(),
            watches_canceled_slow: Counter::default(),
            compactions: Counter::default(),
            proposals_committed: Counter::default(),
            proposals_failed: Counter::default(),
            // 0.5 ms doubling to 4 s, as etcd's commit and apply latencies.
            proposal_duration: Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(0.0005, 2.0, 14)),
            leader_changes: Counter::default(),
            backups_saved: Counter::default(),
            backups_failed: Counter::default(),
            corruption_checks: Counter::default(),
            corrupt_members: Default::default(),
        }
    }
}

/// Counts leader changes as this replica sees them, until `shutdown`.
pub(crate) async fn count_leader_changes(replica: crate::Replica, shutdown: tokio_util::sync::CancellationToken) {
    use openraft::async_runtime::WatchReceiver;
    let mut rx = replica.raft().metrics();
    let mut last = rx.borrow_watched().current_leader;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            changed = rx.changed() => if changed.is_err() { return },
        }
        let now = rx.borrow_watched().current_leader;
        if now.is_some() && now != last {
            replica.stats().leader_changes.inc();
        }
        if now.is_some() {
            last = now;
        }
    }
}
