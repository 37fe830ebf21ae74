//! Client of Keelson's replicated store and the store API's message types.
//!
//! [`tls`] holds the mutual-TLS material ([`PeerTls`]) and its live form
//! ([`PeerIdentity`], whose certificate can be replaced while in use), shared by store
//! clients and replicas (which use it for their server and for calls to peers).
//!
//! API boundary: [`api`] is the only definition of what the store and cluster services
//! exchange; the server side (`keelson-replica`) uses the same types.

pub mod api;
mod call_mux;
mod client;
pub mod tls;

pub use call_mux::NOT_SENT;
pub use client::{never_sent, ClientError, StoreClient};
pub use tls::{PeerIdentity, PeerTls, TlsError};

