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
//!
//! The namespace controllers ([`namespace`] deletion, [`serviceaccount`], [`rootcacert`])
//! share the reflectors of `namespaces`.
//!
//! The [`volume`] controller (PersistentVolume binder and the built-in local-path
//! provisioner) has its own reflectors and queues (`volumes`).
//!
//! The node controllers ([`nodeipam`], [`nodelifecycle`], [`tainteviction`]) share the
//! Node and node-Lease reflectors of `node_informers` and the pod reflector above; their
//! settings are the [`ControllerConfig`] the process gives.

pub mod cronjob;
pub mod daemonset;
pub mod deployment;
pub mod disruption;
pub mod endpoints;
pub mod endpointslice;
pub mod expectations;
pub mod garbage;
mod informers;
pub mod ingressservice;
pub mod ingressstatus;
pub mod job;
pub mod namespace;
mod namespaces;
mod node_informers;
pub mod nodeipam;
pub mod nodelifecycle;
pub mod pod_creation;
pub mod podgc;
pub mod pods;
pub mod replicaset;
pub mod revisions;
pub mod rootcacert;
pub mod selector;
pub mod serviceaccount;
pub mod servicelb;
mod services;
mod shared_reflectors;
pub mod statefulset;
pub mod tainteviction;
pub mod volume;
mod volumes;
pub mod work;
mod workloads;

use keelson_component::{ComponentSpec, ControlPlaneAccess, Leadership, KUBE_CONTROLLER_MANAGER};
use tokio_util::sync::CancellationToken;

/// Settings of the controllers (kube-controller-manager's flags that Keelson has).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ControllerConfig {
    /// `--cluster-cidr` and `--node-cidr-mask-size(-ipv4|-ipv6)`.
    pub node_ipam: nodeipam::IpamConfig,
    /// `--node-monitor-period`, `--node-monitor-grace-period`, `--node-startup-grace-period`.
    pub node_lifecycle: nodelifecycle::LifecycleConfig,
    /// The cluster CA certificate (PEM) published as `kube-root-ca.crt` in every namespace
    /// (`--root-ca-file`); the process's own CA when empty.
    pub root_ca_pem: String,
}

/// Runs the controller manager component until `shutdown`.
pub async fn run(access: ControlPlaneAccess, mut config: ControllerConfig, shutdown: CancellationToken) {
    if config.root_ca_pem.is_empty() {
        config.root_ca_pem = access.ca.cert_pem().to_string();
    }
    keelson_component::run_elected(access, KUBE_CONTROLLER_MANAGER, shutdown, move |term| lead(term, config.clone())).await;
}

/// Runs the controllers, with the default settings, under another component identity and
/// Lease (tests of what a component does when its role does not allow something).
pub async fn run_as(access: ControlPlaneAccess, spec: ComponentSpec, shutdown: CancellationToken) {
    let config = ControllerConfig { root_ca_pem: access.ca.cert_pem().to_string(), ..Default::default() };
    keelson_component::run_elected(access, spec, shutdown, move |term| lead(term, config.clone())).await;
}

/// One term as the active controller manager: every controller runs until it ends.
async fn lead(term: Leadership, config: ControllerConfig) {
    let span = tracing::info_span!("controller-manager", token = term.token);
    tracing::Instrument::instrument(informers::run_controllers(term, config), span).await;
}
