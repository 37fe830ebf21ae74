//! The controller manager component. Every server runs one copy; the copy on the holder
//! of `kube-system/kube-controller-manager` runs the controllers, each writing only
//! through the term's fenced client, so a deposed copy can never change the cluster.
//!
//! Each controller has a folder: a pure `reconcile` (what to do, given the object, what
//! it owns and the time) and a thin loop performing it. Shared here: [`informers`] (one
//! reflector per resource for all controllers, feeding their [`work`] queues),
//! [`expectations`], [`pods`] and [`selector`]. The [`garbage`] collector handles the
//! ownerReferences of the objects these controllers make. The workload controllers
//! ([`job`], …) have their own reflectors and queues (`workloads`), and so do the service
//! controllers ([`endpointslice`], [`endpoints`], [`servicelb`]: `services`).

pub mod cronjob;
pub mod daemonset;
pub mod deployment;
pub mod endpoints;
pub mod endpointslice;
pub mod expectations;
pub mod garbage;
mod informers;
pub mod job;
pub mod pods;
pub mod replicaset;
pub mod revisions;
pub mod selector;
pub mod servicelb;
mod services;
pub mod statefulset;
pub mod work;
mod workloads;

use keelson_component::{ComponentSpec, ControlPlaneAccess, Leadership, KUBE_CONTROLLER_MANAGER};
use tokio_util::sync::CancellationToken;

/// Runs the controller manager component until `shutdown`.
pub async fn run(access: ControlPlaneAccess, shutdown: CancellationToken) {
    run_as(access, KUBE_CONTROLLER_MANAGER, shutdown).await;
}

/// Runs the controllers under another component identity and Lease (tests of what a
/// component does when its role does not allow something).
pub async fn run_as(access: ControlPlaneAccess, spec: ComponentSpec, shutdown: CancellationToken) {
    keelson_component::run_elected(access, spec, shutdown, lead).await;
}

/// One term as the active controller manager: every controller runs until it ends.
async fn lead(term: Leadership) {
    let span = tracing::info_span!("controller-manager", token = term.token);
    tracing::Instrument::instrument(informers::run_controllers(term), span).await;
}
