//! The agent's own metrics, named as the kubelet names them, served at `/metrics` on the
//! kubelet API (`nodes/metrics`): how long pods took from the agent first seeing them to
//! running, and how long pod syncs take. The node's services add theirs (the proxy's)
//! with [`AgentMetrics::register`].

use std::time::Duration;

use keelson_component::metrics::{PageEnd, ProcessRegistry};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Operation {
    operation: &'static str,
}

/// What a pod worker's pass did (the kubelet's `operation` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodWork {
    /// A sync of a live pod.
    Sync,
    /// Stopping a pod being deleted or removed from the node.
    Kill,
}

impl PodWork {
    fn label(self) -> &'static str {
        match self {
            PodWork::Sync => "sync",
            PodWork::Kill => "kill",
        }
    }
}

/// Cheap to clone; every clone adds to the same series.
#[derive(Clone)]
pub struct AgentMetrics {
    registry: ProcessRegistry,
    pod_start: Histogram,
    pods_started: Counter,
    pod_worker: Family<Operation, Histogram>,
}

/// The kubelet's pod start buckets, in seconds.
const POD_START_BUCKETS: [f64; 22] = [0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 20.0, 30.0, 45.0, 60.0, 120.0, 180.0, 240.0, 300.0, 360.0, 480.0, 600.0, 900.0, 1200.0];

impl Default for AgentMetrics {
    fn default() -> Self {
        let pod_start = Histogram::new(POD_START_BUCKETS);
        let pods_started = Counter::default();
        // Kubernetes' default buckets (prometheus.DefBuckets).
        let pod_worker = Family::<Operation, Histogram>::new_with_constructor(|| Histogram::new([0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]));
        let registry = ProcessRegistry::default();
        registry.register(|r| {
            r.register("kubelet_pod_start_duration_seconds", "Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run", pod_start.clone());
            r.register("kubelet_started_pods", "Cumulative number of pods started", pods_started.clone());
            r.register("kubelet_pod_worker_duration_seconds", "Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync", pod_worker.clone());
        });
        Self { registry, pod_start, pods_started, pod_worker }
    }
}

impl AgentMetrics {
    /// A pod first reported Running `took` after its worker began.
    pub fn pod_started(&self, took: Duration) {
        self.pods_started.inc();
        self.pod_start.observe(took.as_secs_f64());
    }

    pub fn pod_worked(&self, work: PodWork, took: Duration) {
        self.pod_worker.get_or_create(&Operation { operation: work.label() }).observe(took.as_secs_f64());
    }

    /// Adds a node service's metrics to the agent's registry (once per agent).
    pub fn register(&self, add: impl FnOnce(&mut Registry)) {
        self.registry.register(add);
    }

    /// The text exposition, OpenMetrics' `# EOF` included.
    pub fn render(&self) -> String {
        self.registry.render(PageEnd::Eof)
    }
}

/// Whether a pod status the worker wrote says Running (the first such status of a worker
/// that began before the pod ran is its start).
pub fn is_running(status: &serde_json::Value) -> bool {
    status.get("phase").and_then(|p| p.as_str()) == Some("Running")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reports_pod_starts_and_syncs_under_kubelet_names() {
        let m = AgentMetrics::default();
        m.pod_started(Duration::from_millis(1500));
        m.pod_worked(PodWork::Sync, Duration::from_millis(7));
        m.pod_worked(PodWork::Sync, Duration::from_millis(3));
        m.pod_worked(PodWork::Kill, Duration::from_millis(40));
        let text = m.render();
        assert!(text.contains("kubelet_pod_start_duration_seconds_count 1"), "{text}");
        assert!(text.contains("kubelet_pod_start_duration_seconds_sum 1.5"), "{text}");
        assert!(text.contains("kubelet_pod_start_duration_seconds_bucket{le=\"2.0\"} 1") && text.contains("kubelet_pod_start_duration_seconds_bucket{le=\"1.0\"} 0"), "{text}");
        assert!(text.contains("kubelet_started_pods_total 1"), "{text}");
        assert!(text.contains("kubelet_pod_worker_duration_seconds_count{operation=\"sync\"} 2"), "{text}");
        assert!(text.contains("kubelet_pod_worker_duration_seconds_count{operation=\"kill\"} 1"), "{text}");
        assert!(text.trim_end().ends_with("# EOF"));
    }

    #[test]
    fn a_node_services_metrics_join_the_page() {
        let m = AgentMetrics::default();
        let mut extra = None;
        m.register(|r| {
            let c: Counter = Counter::default();
            r.register("kubeproxy_test_syncs", "A node service's counter", c.clone());
            extra = Some(c);
        });
        extra.unwrap().inc();
        assert!(m.render().contains("kubeproxy_test_syncs_total 1"));
    }

    #[test]
    fn a_status_is_running_by_its_phase() {
        assert!(is_running(&json!({"phase": "Running"})));
        assert!(!is_running(&json!({"phase": "Pending"})));
        assert!(!is_running(&json!({})));
    }
}
