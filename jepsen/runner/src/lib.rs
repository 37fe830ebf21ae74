//! Jepsen-style runs: start a cluster with the chaos harness, run a workload whose
//! clients each talk to a replica of their own while the nemesis injects faults, heal,
//! let the cluster settle, and check the recorded history.
//!
//! Workloads (compare-and-set registers; watchers following writers) drive either the
//! replicated store directly (`keelson_client::StoreClient`: [`Workload::Register`],
//! [`Workload::Watch`]) or the Kubernetes API of every server through kube-rs
//! (ConfigMaps as registers, API watches checked against the store's own watch:
//! [`Workload::KubeRegister`], [`Workload::KubeWatch`]), so consistency is proven end
//! to end through the API servers. [`Workload::Lease`] runs the real Lease elector
//! (`keelson_component`) on every server and checks that its fenced writes never go back
//! a term, and times failovers. [`Workload::SelfHeal`] runs a Deployment, a DaemonSet
//! and a Job on real nodes while nodes lose power, freeze or are cut off and component
//! Lease holders' servers die, and judges the cluster's self-healing.

mod kube_api;
mod kube_register;
mod kube_watch;
mod lease;
mod lease_nemesis;
mod register;
mod run;
pub mod self_heal;
mod watch;

pub use kube_api::KubeTarget;
pub use kube_register::{KubeRegisterWorkload, CAS_CONFLICT};
pub use kube_watch::{KubeWatchResult, KubeWatchWorkload, REFERENCE_WATCHER};
pub use lease::{HolderCell, LeaseRun, LeaseWorkload, LEASE_NAME, LEASE_NAMESPACE};
pub use lease_nemesis::{fault_log, run_targeted_nemesis};
pub use register::{RegisterWorkload, CAS_MISMATCH, REGISTER_PREFIX};
pub use run::{run, RunError, RunOptions, RunVerdict, Workload};
pub use watch::{WatchWorkload, WATCH_PREFIX};
