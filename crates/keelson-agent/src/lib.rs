//! The node agent, as Kubernetes' kubelet: it registers its Node, heartbeats its Lease in
//! `kube-node-lease`, runs the pods bound to it and reports their state.
//!
//! - [`agent`]: the real agent — its Node and Lease, and one [`pod::worker`] per pod;
//! - [`runtime`]: the container runtime it drives (CRI on containerd);
//! - [`pod`]: what to do for one pod (pure), and doing it;
//! - [`containerd`], [`cni`], [`images`]: the node's own containerd, pod network and
//!   offline images;
//! - [`kubelet_api`]: the HTTPS API the API server reaches on port 10250 (logs, exec,
//!   port-forward, `/stats/summary`, `/metrics/resource`);
//! - [`stats`]: node and container usage sampled from `/proc` and CRI stats, as the
//!   kubelet's Summary API (rates and shapes pure);
//! - [`node_lease`]: the node's Lease, renewed by updates as the kubelet renews it;
//! - [`status`]: the Node and pod status an agent reports (pure);
//! - [`hollow`]: hollow nodes (as kubemark's): Nodes with capacity and heartbeats whose
//!   bound pods are reported Running and Ready without containers (simulated), so tests
//!   and benchmarks can run thousands of nodes on one machine.

pub mod agent;
pub mod cni;
pub mod containerd;
pub mod hollow;
pub mod images;
pub mod kubelet_api;
pub mod local_path;
pub mod metrics;
pub mod node_lease;
pub mod pod;
pub mod runtime;
pub mod stats;
pub mod status;
