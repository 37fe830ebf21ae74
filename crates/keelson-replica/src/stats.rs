//! Counters this replica exports as Prometheus metrics.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

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
