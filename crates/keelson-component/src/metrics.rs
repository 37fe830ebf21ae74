//! The metrics of every component in a process, in Prometheus' text format (the
//! Prometheus project's `prometheus-client`), on one registry: leader election here
//! (whether it leads, how often it came to lead, how long renewals take); components add
//! their own with [`ElectionMetrics::register`].

use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ComponentLabel {
    name: String,
}

/// Shared by the electors of one process; cheap to clone.
#[derive(Clone)]
pub struct ElectionMetrics {
    registry: Arc<Mutex<Registry>>,
    leading: Family<ComponentLabel, Gauge>,
    transitions: Family<ComponentLabel, Counter>,
    renew: Family<ComponentLabel, Histogram>,
}

impl Default for ElectionMetrics {
    fn default() -> Self {
        let leading = Family::<ComponentLabel, Gauge>::default();
        let transitions = Family::<ComponentLabel, Counter>::default();
        // Kubernetes' request-latency buckets, in seconds.
        let renew = Family::<ComponentLabel, Histogram>::new_with_constructor(|| {
            Histogram::new([0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0])
        });
        let mut registry = Registry::default();
        registry.register("leader_election_master_status", "1 if this instance of the component holds its lease", leading.clone());
        registry.register("leader_election_transitions", "Times this instance of the component came to hold its lease", transitions.clone());
        registry.register("leader_election_renew_duration_seconds", "Time a successful lease renewal took", renew.clone());
        Self { registry: Arc::new(Mutex::new(registry)), leading, transitions, renew }
    }
}

impl ElectionMetrics {
    pub fn set_leading(&self, component: &str, leading: bool) {
        let label = ComponentLabel { name: component.into() };
        self.leading.get_or_create(&label).set(i64::from(leading));
        if leading {
            self.transitions.get_or_create(&label).inc();
        }
    }

    pub fn observe_renew(&self, component: &str, took: Duration) {
        self.renew.get_or_create(&ComponentLabel { name: component.into() }).observe(took.as_secs_f64());
    }

    /// Adds a component's own metrics to the process's registry (once per process: call
    /// it when the component starts, not per term).
    pub fn register(&self, add: impl FnOnce(&mut Registry)) {
        add(&mut self.registry.lock().expect("metrics lock"));
    }

    /// The text exposition (without the OpenMetrics `# EOF` line, so it can be joined to
    /// other metrics on one page).
    pub fn render(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode_registry(&mut out, &self.registry.lock().expect("metrics lock")).expect("writing to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_leadership_transitions_and_renewals() {
        let m = ElectionMetrics::default();
        m.set_leading("kube-scheduler", true);
        m.observe_renew("kube-scheduler", Duration::from_millis(30));
        m.set_leading("kube-scheduler", false);
        m.set_leading("kube-controller-manager", true);
        let text = m.render();
        assert!(text.contains("leader_election_master_status{name=\"kube-scheduler\"} 0"), "{text}");
        assert!(text.contains("leader_election_master_status{name=\"kube-controller-manager\"} 1"), "{text}");
        assert!(text.contains("leader_election_transitions_total{name=\"kube-scheduler\"} 1"), "{text}");
        assert!(text.contains("leader_election_renew_duration_seconds_count{name=\"kube-scheduler\"} 1"), "{text}");
        assert!(!text.contains("# EOF"));
    }
}
