//! The node agent, as Kubernetes' kubelet: it registers its Node, heartbeats its Lease in
//! `kube-node-lease`, and reports the pods bound to it.
//!
//! - [`status`]: the Node and pod status an agent reports (pure);
//! - [`hollow`]: hollow nodes (as kubemark's): Nodes with capacity and heartbeats whose
//!   bound pods are reported Running and Ready without containers, so tests and
//!   benchmarks can run thousands of nodes on one machine.

pub mod hollow;
pub mod status;
