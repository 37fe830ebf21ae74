//! The Kubernetes REST API, served over HTTPS by every replica from the replicated store.
//!
//! - [`catalog`]: the served resources (one table drives routing, discovery, storage);
//! - [`meta`] and [`strategy`]: what happens to an object on create/update (pure);
//! - [`admission`]: the default mutating admission plugins (DefaultTolerationSeconds; pure);
//! - [`registry`]: generic create/get/update/delete over [`storage::ObjectStore`];
//! - [`http`]: routing, content negotiation, list/watch/patch, discovery, TLS;
//! - [`allocator`]: Service ClusterIPs and NodePorts, allocated transactionally;
//! - `ui`: the status page at `/ui` (members, leases, nodes, a timeline of faults).
//!
//! Architecture invariants: the API server reaches the store only through
//! `keelson_client::StoreClient` (its own replica's store API), so it holds no state of
//! its own and any replica serves any request; resourceVersion is the store revision.

pub mod admission;
pub mod allocator;
pub mod component_leases;
pub mod encryption;
pub mod error;
pub mod fieldset;
pub mod audit;
pub mod auth;
pub mod http;
pub mod identity_lease;
pub mod inflight;
pub mod join;
pub mod kubernetes_service;
pub mod join_client;
pub mod lease_fence;
pub mod meta;
pub mod metrics;
mod namespaces;
mod prune;
pub mod protobuf;
pub mod registry;
pub mod resource_metrics;
pub mod storage;
pub mod strategy;
mod ui;
pub mod watch_cache;

/// The one table of served resources (routing, discovery, storage keys, strategies).
pub use keelson_schema::catalog;

use std::net::SocketAddr;

pub use error::ApiError;
pub use http::tls::Identity;
pub use http::{serve, ApiServerConfig, AuditConfig, ServingApi};

/// Starting the API server failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiServerError {
    /// The TLS material is unusable.
    #[error("TLS: {0}")]
    Tls(String),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen { addr: SocketAddr, #[source] source: std::io::Error },
    /// The Secrets encryption key is unusable.
    #[error("secrets encryption: {0}")]
    Encryption(String),
    /// Authentication or audit setup failed.
    #[error("{0}")]
    Auth(String),
    /// The store client could not be created.
    #[error("store client: {0}")]
    Store(String),
}
