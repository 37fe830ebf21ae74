//! Client of Keelson's replicated store and the store API's message types.
//!
//! API boundary: [`api`] is the only definition of what the store and cluster services
//! exchange; the server side (`keelson-replica`) uses the same types.

pub mod api;
mod client;

pub use client::{never_sent, ClientError, StoreClient};

