//! The scheduler component. Every server runs one copy; the copy on the holder of
//! `kube-system/kube-scheduler` is active, and every binding it makes is fenced on that
//! Lease, so a deposed copy can never bind a pod.
//!
//! - [`cache`]: the snapshot kept current from events and assumptions;
//! - [`framework`]: the cycle for one pod, a pure function of (pod, [`snapshot::Snapshot`]);
//! - [`plugins`]: Kubernetes' default profile (filters and weighted scores);
//! - [`preemption`]: DefaultPreemption (PostFilter), victims and the node to nominate;
//! - [`metrics`]: attempts, attempt latency and queue lengths, as kube-scheduler's;
//! - [`queue`]: active / backoff / unschedulable pods;
//! - [`resources`], [`selectors`]: quantities, requests, label and node selectors;
//! - `run`: reflectors of pods, nodes and namespaces, the loop, bindings and Events.

pub mod cache;
pub mod framework;
pub mod metrics;
pub mod plugins;
pub mod preemption;
pub mod queue;
pub mod resources;
mod run;
pub mod selectors;
pub mod snapshot;

use keelson_component::{ControlPlaneAccess, KUBE_SCHEDULER};
use tokio_util::sync::CancellationToken;

/// The scheduler name this scheduler serves (`spec.schedulerName`).
pub const SCHEDULER_NAME: &str = "default-scheduler";

/// Runs the scheduler component until `shutdown`.
pub async fn run(access: ControlPlaneAccess, shutdown: CancellationToken) {
    let mut metrics = None;
    access.metrics.register(|r| metrics = Some(metrics::SchedulerMetrics::new(r)));
    let metrics = metrics.expect("registered");
    keelson_component::run_elected(access, KUBE_SCHEDULER, shutdown, move |term| run::lead(term, metrics.clone())).await;
}
