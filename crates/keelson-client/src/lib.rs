//! Client of Keelson's replicated store and the store API's message types.
//!
//! API boundary: [`api`] is the only definition of what the store and cluster services
//! exchange; the server side (`keelson-replica`) uses the same types.

pub mod api;
mod client;

pub use client::{ClientError, StoreClient};

/// gRPC status codes, as carried in [`ClientError::Transport`].
pub use tonic::Code as TonicCode;
