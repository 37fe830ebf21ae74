//! The scheduler's metrics, named as kube-scheduler names them: attempts by result, how
//! long an attempt took, and the pods waiting in each queue.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::framework::CycleTimes;
use crate::queue::Lengths;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Attempt {
    result: &'static str,
    profile: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ExtensionPoint {
    extension_point: &'static str,
    status: &'static str,
    profile: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginRun {
    plugin: &'static str,
    extension_point: &'static str,
    status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Queue {
    queue: &'static str,
}

/// What a scheduling attempt came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptResult {
    Scheduled,
    Unschedulable,
    Error,
}

impl AttemptResult {
    fn label(self) -> &'static str {
        match self {
            AttemptResult::Scheduled => "scheduled",
            AttemptResult::Unschedulable => "unschedulable",
            AttemptResult::Error => "error",
        }
    }

    /// kube-scheduler's `status` label: the framework's status code.
    fn status(self) -> &'static str {
        match self {
            AttemptResult::Scheduled => "Success",
            AttemptResult::Unschedulable => "Unschedulable",
            AttemptResult::Error => "Error",
        }
    }
}

#[derive(Clone)]
pub struct SchedulerMetrics {
    attempts: Family<Attempt, Counter>,
    duration: Family<Attempt, Histogram>,
    e2e: Family<Attempt, Histogram>,
    extension_points: Family<ExtensionPoint, Histogram>,
    plugins: Family<PluginRun, Histogram>,
    pending: Family<Queue, Gauge>,
    preemption_attempts: Counter,
    preemption_victims: Histogram,
}

impl SchedulerMetrics {
    /// Creates the metrics and adds them to `registry`.
    pub fn new(registry: &mut Registry) -> Self {
        let attempts = Family::<Attempt, Counter>::default();
        // kube-scheduler's buckets: 1 ms doubling, 15 of them.
        let duration = Family::<Attempt, Histogram>::new_with_constructor(|| Histogram::new(exponential_buckets(0.001, 2.0, 15)));
        let e2e = Family::<Attempt, Histogram>::new_with_constructor(|| Histogram::new(exponential_buckets(0.001, 2.0, 15)));
        // kube-scheduler's buckets: 0.1 ms doubling, 12 of them; plugins 10 µs, 1.5 times, 20.
        let extension_points = Family::<ExtensionPoint, Histogram>::new_with_constructor(|| Histogram::new(exponential_buckets(0.0001, 2.0, 12)));
        let plugins = Family::<PluginRun, Histogram>::new_with_constructor(|| Histogram::new(exponential_buckets(0.00001, 1.5, 20)));
        let pending = Family::<Queue, Gauge>::default();
        registry.register("scheduler_e2e_scheduling_duration_seconds", "E2e scheduling latency in seconds (scheduling algorithm + binding)", e2e.clone());
        registry.register("scheduler_framework_extension_point_duration_seconds", "Latency for running all plugins of a specific extension point", extension_points.clone());
        registry.register("scheduler_plugin_execution_duration_seconds", "Duration for running a plugin at a specific extension point", plugins.clone());
        registry.register("scheduler_schedule_attempts", "Attempts to schedule pods, by result", attempts.clone());
        registry.register("scheduler_scheduling_attempt_duration_seconds", "Scheduling attempt latency (algorithm and binding decision)", duration.clone());
        registry.register("scheduler_pending_pods", "Pending pods, by queue", pending.clone());
        let preemption_attempts = Counter::default();
        // kube-scheduler's buckets: 1 doubling, 7 of them.
        let preemption_victims = Histogram::new(exponential_buckets(1.0, 2.0, 7));
        registry.register("scheduler_preemption_attempts", "Preemption attempts in the cluster till now", preemption_attempts.clone());
        registry.register("scheduler_preemption_victims", "Number of selected preemption victims", preemption_victims.clone());
        Self { attempts, duration, e2e, extension_points, plugins, pending, preemption_attempts, preemption_victims }
    }

    pub fn attempt(&self, result: AttemptResult, took: Duration) {
        let label = Attempt { result: result.label(), profile: crate::SCHEDULER_NAME };
        self.attempts.get_or_create(&label).inc();
        self.duration.get_or_create(&label).observe(took.as_secs_f64());
    }

    /// A pod's scheduling ended (bound, or found unschedulable) `took` after its cycle began.
    pub fn e2e(&self, result: AttemptResult, took: Duration) {
        self.e2e.get_or_create(&Attempt { result: result.label(), profile: crate::SCHEDULER_NAME }).observe(took.as_secs_f64());
    }

    /// Where a cycle that came to `result` spent its time. The extension point that
    /// rejected an unschedulable pod carries its status; the others ran to success.
    pub fn cycle(&self, result: AttemptResult, times: &CycleTimes) {
        // PreFilter rejected the pod when Filter never ran; Filter did when the pod was
        // found unschedulable after it (an error comes later, from the binding).
        let pre_filter_status = if times.filter.is_some() { "Success" } else { result.status() };
        let filter_status = if result == AttemptResult::Unschedulable { result.status() } else { "Success" };
        let points = [("PreFilter", times.pre_filter, pre_filter_status), ("Filter", times.filter, filter_status), ("Score", times.score, "Success")];
        for (extension_point, took, status) in points {
            if let Some(took) = took {
                let label = ExtensionPoint { extension_point, status, profile: crate::SCHEDULER_NAME };
                self.extension_points.get_or_create(&label).observe(took.as_secs_f64());
            }
        }
        for &(plugin, extension_point, took) in &times.plugins {
            self.plugins.get_or_create(&PluginRun { plugin, extension_point, status: "Success" }).observe(took.as_secs_f64());
        }
    }

    /// PostFilter ran for an unschedulable pod: `victims` when it chose some.
    pub fn preemption_attempt(&self, victims: Option<usize>) {
        self.preemption_attempts.inc();
        if let Some(n) = victims {
            self.preemption_victims.observe(n as f64);
        }
    }

    pub fn queues(&self, l: Lengths) {
        for (queue, n) in [("active", l.active), ("backoff", l.backoff), ("unschedulable", l.unschedulable)] {
            self.pending.get_or_create(&Queue { queue }).set(n as i64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposes_kube_scheduler_names() {
        let mut registry = Registry::default();
        let m = SchedulerMetrics::new(&mut registry);
        m.attempt(AttemptResult::Scheduled, Duration::from_millis(3));
        m.attempt(AttemptResult::Unschedulable, Duration::from_millis(1));
        m.queues(Lengths { active: 2, backoff: 1, unschedulable: 4 });
        m.preemption_attempt(Some(2));
        m.preemption_attempt(None);
        m.e2e(AttemptResult::Scheduled, Duration::from_millis(20));
        let times = CycleTimes { pre_filter: Some(Duration::from_micros(5)), filter: Some(Duration::from_micros(40)), score: Some(Duration::from_micros(30)), plugins: vec![("NodeResourcesFit", "Score", Duration::from_micros(12))] };
        m.cycle(AttemptResult::Scheduled, &times);
        // Rejected at PreFilter: only PreFilter is counted, with the rejection.
        m.cycle(AttemptResult::Unschedulable, &CycleTimes { pre_filter: Some(Duration::from_micros(2)), ..Default::default() });
        // Rejected by the filters: PreFilter succeeded, Filter did not, nothing was scored.
        m.cycle(AttemptResult::Unschedulable, &CycleTimes { pre_filter: Some(Duration::ZERO), filter: Some(Duration::ZERO), ..Default::default() });
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains(r#"scheduler_schedule_attempts_total{result="scheduled",profile="default-scheduler"} 1"#), "{text}");
        assert!(text.contains(r#"scheduler_scheduling_attempt_duration_seconds_count{result="unschedulable",profile="default-scheduler"} 1"#), "{text}");
        assert!(text.contains(r#"scheduler_pending_pods{queue="unschedulable"} 4"#), "{text}");
        assert!(text.contains("scheduler_preemption_attempts_total 2"), "{text}");
        assert!(text.contains(r#"scheduler_e2e_scheduling_duration_seconds_sum{result="scheduled",profile="default-scheduler"} 0.02"#), "{text}");
        assert!(text.contains(r#"scheduler_framework_extension_point_duration_seconds_count{extension_point="Filter",status="Success",profile="default-scheduler"} 1"#), "{text}");
        assert!(text.contains(r#"scheduler_framework_extension_point_duration_seconds_count{extension_point="Score",status="Success",profile="default-scheduler"} 1"#), "{text}");
        assert!(text.contains(r#"scheduler_framework_extension_point_duration_seconds_count{extension_point="PreFilter",status="Success",profile="default-scheduler"} 2"#), "{text}");
        assert!(text.contains(r#"scheduler_framework_extension_point_duration_seconds_count{extension_point="PreFilter",status="Unschedulable",profile="default-scheduler"} 1"#), "{text}");
        assert!(text.contains(r#"scheduler_framework_extension_point_duration_seconds_count{extension_point="Filter",status="Unschedulable",profile="default-scheduler"} 1"#), "{text}");
        assert!(text.contains(r#"scheduler_plugin_execution_duration_seconds_count{plugin="NodeResourcesFit",extension_point="Score",status="Success"} 1"#), "{text}");
        assert!(text.contains("scheduler_preemption_victims_count 1") && text.contains("scheduler_preemption_victims_sum 2.0"), "{text}");
    }
}
