//! What every control-plane component of Keelson stands on: it reaches the cluster only
//! through the Kubernetes API, like any other client.
//!
//! - [`balancer`]: the client-side API balancer (own server first, failover to the
//!   others, health from `/readyz`), which node agents use too;
//! - [`client`]: component identities (client certificates from the cluster CA) and
//!   kube-rs clients through the balancer;
//! - [`election`]: Lease-based leader election with Kubernetes' rules and timings, each
//!   term carrying a fencing token;
//! - [`fence`]: fenced clients (`Keelson-Fence` on every request) and recognising a
//!   fenced refusal;
//! - [`events`], [`metrics`]: Events and leader-election metrics as Kubernetes'
//!   components report them;
//! - [`denied`]: a denied request is logged and recorded as an Event, never retried
//!   under another identity;
//! - [`discovery`]: learning the other servers' API addresses from their identity Leases;
//! - [`mirror`]: a reflector that pings one notifier per change (node components that
//!   rebuild a whole view).

pub mod balancer;
pub mod client;
pub mod component;
pub mod denied;
pub mod discovery;
pub mod election;
pub mod events;
pub mod fence;
pub mod metrics;
pub mod mirror;

pub use balancer::{ApiBalancer, HealthTimings};
pub use component::run_elected;
pub use client::{ComponentSpec, ControlPlaneAccess, KUBE_CONTROLLER_MANAGER, KUBE_SCHEDULER};
pub use election::{ElectionConfig, ElectionStatus, ElectionTimings, Elector, Leadership};
pub use metrics::ElectionMetrics;
