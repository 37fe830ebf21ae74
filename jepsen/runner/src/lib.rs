//! Jepsen-style runs: start a cluster with the chaos harness, run a workload whose
//! clients each talk to a replica of their own while the nemesis injects faults, heal,
//! let the cluster settle, and check the recorded history.
//!
//! Workloads (compare-and-set registers; watchers following writers) today drive the
//! replicated store directly (`keelson_client::StoreClient`); the Kubernetes API
//! versions (ConfigMaps, API watches) come with the API server.

mod register;
mod run;
mod watch;

pub use register::{RegisterWorkload, REGISTER_PREFIX};
pub use run::{run, RunError, RunOptions, RunVerdict, Workload};
pub use watch::{WatchWorkload, WATCH_PREFIX};
