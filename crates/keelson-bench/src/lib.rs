//! `keelson bench api`: the Kubernetes API under load, and the pod-shaped load of the
//! scheduler and node agents (see [`api`], `api_pods`).
//!
//! `keelson bench scheduler`: hollow nodes and a burst of pods (see `scheduler`).
//!
//! `keelson bench proxy`: keelson-proxy's full and incremental syncs with the real `nft`
//! (see `proxy`).
//!
//! `keelson bench ingress`: requests through keelson-ingress, side by side with the same
//! backend reached directly and through nginx (see `ingress`).
//!
//! `keelson bench logs`: `pods/log` throughput of a large log, and the agent's memory
//! while many `logs -f` followers stream (see `logs`).
//!
//! `keelson bench stalled-watchers`: the servers' memory while many watchers stop reading
//! (see `stalled_watchers`).
//!
//! `keelson bench failover`: writes stalled by leader kills, Keelson and etcd side by
//! side (see `failover`).
//!
//! `keelson bench store`: the same closed-loop load against Keelson and etcd.
//!
//! Each phase runs N concurrent clients for a fixed time; every client issues one request
//! at a time and records its latency. Clients are spread over all replicas (client i talks
//! to replica i mod n), for Keelson and for etcd alike. Phases: puts of random keys,
//! linearizable gets, serializable gets, over a pre-loaded key space.

mod agent_process;
mod api;
mod api_pods;
pub use api_pods::LeaseRenewal;
mod controllers;
mod failover;
mod ingress;
mod load;
mod logs;
mod outage;
mod percentile;
mod pods;
mod proxy;
mod report;
mod scheduler;
mod stalled_watchers;

pub use api::{run_api_bench, ApiBenchArgs};
pub use controllers::{run_controllers_bench, ControllersBenchArgs, ControllersReport};
pub use failover::{run_failover_bench, FailoverBenchArgs, SystemFailover};
pub use ingress::{run_ingress_bench, IngressBenchArgs, IngressReport};
pub use load::{run_store_bench, StoreBenchArgs};
pub use logs::{run_logs_bench, LogsBenchArgs, LogsReport};
pub use pods::{run_pods_bench, PodsBenchArgs, PodsReport};
pub use proxy::{run_proxy_bench, ProxyBenchArgs, ProxyReport};
pub use report::{PhaseResult, SystemReport};
pub use scheduler::{run_scheduler_bench, SchedulerBenchArgs, SchedulerReport};
pub use stalled_watchers::{run_stalled_watchers_bench, StalledWatchersBenchArgs, StalledWatchersReport};
