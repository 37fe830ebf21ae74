//! Counters this replica exports as Prometheus metrics (`metrics`).

/// A Prometheus counter (shared: clones count together).
pub use prometheus_client::metrics::counter::Counter;

/// Request and watch counters of one replica.
#[derive(Default)]
pub struct ReplicaStats {
    pub reads: Counter,
    pub writes: Counter,
    pub forwarded: Counter,
    pub read_index_rounds: Counter,
    pub watches_started: Counter,
    pub watch_events_sent: Counter,
    pub watches_canceled_slow: Counter,
    pub compactions: Counter,
}
