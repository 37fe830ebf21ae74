//! The metrics of every component in a process, in Prometheus' text format (the
//! Prometheus project's `prometheus-client`), on one registry: leader election here
//! (whether it leads, how often it came to lead, how long renewals take), and client-go's
//! `workqueue_*` for the controllers' work queues ([`ElectionMetrics::queue`]); components
//! add their own with [`ElectionMetrics::register`].

use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// How a rendered page ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageEnd {
    /// With OpenMetrics' `# EOF` line: the whole page.
    Eof,
    /// Without it, so other metrics can follow on the same page.
    Open,
}

/// One process's metrics registry, shared by every part that adds series to it; cheap to
/// clone (every clone is the same registry).
#[derive(Clone, Default)]
pub struct ProcessRegistry(Arc<Mutex<Registry>>);

impl ProcessRegistry {
    /// Adds series (once per process: call it when the part starts, not per term).
    pub fn register(&self, add: impl FnOnce(&mut Registry)) {
        add(&mut self.0.lock().expect("metrics lock"));
    }

    /// The text exposition.
    pub fn render(&self, end: PageEnd) -> String {
        let registry = self.0.lock().expect("metrics lock");
        let mut out = String::new();
        let written = match end {
            PageEnd::Eof => prometheus_client::encoding::text::encode(&mut out, &registry),
            PageEnd::Open => prometheus_client::encoding::text::encode_registry(&mut out, &registry),
        };
        written.expect("writing to a String cannot fail");
        out
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ComponentLabel {
    name: String,
}

/// Shared by the electors of one process; cheap to clone.
#[derive(Clone)]
pub struct ElectionMetrics {
    registry: ProcessRegistry,
    leading: Family<ComponentLabel, Gauge>,
    transitions: Family<ComponentLabel, Counter>,
    renew: Family<ComponentLabel, Histogram>,
    queues: WorkQueueFamilies,
}

/// client-go's work queue metrics, labelled by the queue's `name`.
#[derive(Clone)]
struct WorkQueueFamilies {
    adds: Family<ComponentLabel, Counter>,
    depth: Family<ComponentLabel, Gauge>,
    queue_duration: Family<ComponentLabel, Histogram>,
    work_duration: Family<ComponentLabel, Histogram>,
    retries: Family<ComponentLabel, Counter>,
}

impl WorkQueueFamilies {
    fn new(registry: &mut Registry) -> Self {
        // client-go's buckets: 10 ns, ten times each, ten of them.
        let buckets = || Histogram::new(exponential_buckets(10e-9, 10.0, 10));
        let families = Self {
            adds: Family::default(),
            depth: Family::default(),
            queue_duration: Family::new_with_constructor(buckets),
            work_duration: Family::new_with_constructor(buckets),
            retries: Family::default(),
        };
        registry.register("workqueue_adds", "Total number of adds handled by workqueue", families.adds.clone());
        registry.register("workqueue_depth", "Current depth of workqueue", families.depth.clone());
        registry.register("workqueue_queue_duration_seconds", "How long in seconds an item stays in workqueue before being requested", families.queue_duration.clone());
        registry.register("workqueue_work_duration_seconds", "How long in seconds processing an item from workqueue takes", families.work_duration.clone());
        registry.register("workqueue_retries", "Total number of retries handled by workqueue", families.retries.clone());
        families
    }
}

/// One work queue's metrics (cheap to clone; every clone adds to the same series).
#[derive(Clone)]
pub struct QueueMetrics {
    adds: Counter,
    depth: Gauge,
    queue_duration: Histogram,
    work_duration: Histogram,
    retries: Counter,
}

impl QueueMetrics {
    /// A key was queued (not counted when it was already waiting).
    pub fn added(&self) {
        self.adds.inc();
        self.depth.inc();
    }

    /// A key was taken after waiting `waited`.
    pub fn taken(&self, waited: Duration) {
        self.depth.dec();
        self.queue_duration.observe(waited.as_secs_f64());
    }

    /// A key's sync took `took`.
    pub fn worked(&self, took: Duration) {
        self.work_duration.observe(took.as_secs_f64());
    }

    /// A key's sync failed and it was queued again.
    pub fn retried(&self) {
        self.retries.inc();
    }
}

impl Default for ElectionMetrics {
    fn default() -> Self {
        let leading = Family::<ComponentLabel, Gauge>::default();
        let transitions = Family::<ComponentLabel, Counter>::default();
        // Kubernetes' request-latency buckets, in seconds.
        let renew = Family::<ComponentLabel, Histogram>::new_with_constructor(|| {
            Histogram::new([0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0])
        });
        let registry = ProcessRegistry::default();
        let mut queues = None;
        registry.register(|r| {
            r.register("leader_election_master_status", "1 if this instance of the component holds its lease", leading.clone());
            r.register("leader_election_transitions", "Times this instance of the component came to hold its lease", transitions.clone());
            r.register("leader_election_renew_duration_seconds", "Time a successful lease renewal took", renew.clone());
            queues = Some(WorkQueueFamilies::new(r));
        });
        let queues = queues.expect("registered above");
        Self { registry, leading, transitions, renew, queues }
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

    /// The metrics of the work queue called `name` (`replicaset`, `deployment`, …); a
    /// queue made again in a later term adds to the same series.
    pub fn queue(&self, name: &str) -> QueueMetrics {
        let label = ComponentLabel { name: name.into() };
        let q = &self.queues;
        QueueMetrics {
            adds: q.adds.get_or_create(&label).clone(),
            depth: q.depth.get_or_create(&label).clone(),
            queue_duration: q.queue_duration.get_or_create(&label).clone(),
            work_duration: q.work_duration.get_or_create(&label).clone(),
            retries: q.retries.get_or_create(&label).clone(),
        }
    }

    /// Adds a component's own metrics to the process's registry (once per process: call
    /// it when the component starts, not per term).
    pub fn register(&self, add: impl FnOnce(&mut Registry)) {
        self.registry.register(add);
    }

    /// The text exposition (without the OpenMetrics `# EOF` line, so it can be joined to
    /// other metrics on one page).
    pub fn render(&self) -> String {
        self.registry.render(PageEnd::Open)
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

    #[test]
    fn work_queues_report_client_go_names() {
        let m = ElectionMetrics::default();
        let q = m.queue("replicaset");
        q.added();
        q.added();
        q.taken(Duration::from_millis(2));
        q.worked(Duration::from_millis(5));
        q.retried();
        // A later term's queue of the same name adds to the same series.
        m.queue("replicaset").added();
        let text = m.render();
        assert!(text.contains("workqueue_adds_total{name=\"replicaset\"} 3"), "{text}");
        assert!(text.contains("workqueue_depth{name=\"replicaset\"} 2"), "{text}");
        assert!(text.contains("workqueue_queue_duration_seconds_count{name=\"replicaset\"} 1"), "{text}");
        assert!(text.contains("workqueue_work_duration_seconds_sum{name=\"replicaset\"} 0.005"), "{text}");
        assert!(text.contains("workqueue_retries_total{name=\"replicaset\"} 1"), "{text}");
    }
}
