//! The proxy's metrics, named as kube-proxy names them: how long syncing the rules
//! takes (every sync, and full and partial ones apart), when the last one succeeded, and
//! how many `nft` transactions failed. They join the registry of the process running the
//! proxy (the agent's `/metrics`).

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// Cheap to clone; every clone adds to the same series.
#[derive(Clone, Debug)]
pub struct ProxyMetrics {
    sync: Histogram,
    full: Histogram,
    partial: Histogram,
    last_synced: Gauge<f64, AtomicU64>,
    failures: Counter,
}

impl ProxyMetrics {
    /// Creates the metrics and adds them to `registry`.
    pub fn new(registry: &mut Registry) -> Self {
        // kube-proxy's buckets: 1 ms doubling, 15 of them.
        let buckets = || Histogram::new(exponential_buckets(0.001, 2.0, 15));
        let m = Self { sync: buckets(), full: buckets(), partial: buckets(), last_synced: Gauge::default(), failures: Counter::default() };
        registry.register("kubeproxy_sync_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds", m.sync.clone());
        registry.register("kubeproxy_sync_full_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds for full resyncs", m.full.clone());
        registry.register("kubeproxy_sync_partial_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds for partial resyncs", m.partial.clone());
        registry.register("kubeproxy_sync_proxy_rules_last_timestamp_seconds", "The last time proxy rules were successfully synced", m.last_synced.clone());
        registry.register("kubeproxy_sync_proxy_rules_nftables_sync_failures", "Number of failures of an nftables sync", m.failures.clone());
        m
    }

    /// A sync was applied: `full` when it wrote the whole table; `took` from reading the
    /// Services to `nft` returning; `at` when it returned (Unix seconds).
    pub fn synced(&self, full: bool, took: Duration, at: f64) {
        let secs = took.as_secs_f64();
        self.sync.observe(secs);
        if full { &self.full } else { &self.partial }.observe(secs);
        self.last_synced.set(at);
    }

    /// `nft` refused a sync.
    pub fn failed(&self) {
        self.failures.inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_syncs_under_kube_proxy_names() {
        let mut registry = Registry::default();
        let m = ProxyMetrics::new(&mut registry);
        m.synced(true, Duration::from_millis(12), 1_700_000_000.0);
        m.synced(false, Duration::from_millis(2), 1_700_000_005.0);
        m.failed();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains("kubeproxy_sync_proxy_rules_duration_seconds_count 2"), "{text}");
        assert!(text.contains("kubeproxy_sync_full_proxy_rules_duration_seconds_sum 0.012"), "{text}");
        assert!(text.contains("kubeproxy_sync_partial_proxy_rules_duration_seconds_count 1"), "{text}");
        assert!(text.contains("kubeproxy_sync_proxy_rules_last_timestamp_seconds 1700000005"), "{text}");
        assert!(text.contains("kubeproxy_sync_proxy_rules_nftables_sync_failures_total 1"), "{text}");
    }
}
