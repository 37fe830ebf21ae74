//! Keelson's MVCC key-value state machine.
//!
//! A global revision increases with every mutating transaction; each key carries
//! create/mod revision and version; reads can target a past revision until it is
//! compacted; transactions compare and then branch. This is what every replica applies
//! from the Raft log, so [`MvccStore::apply`] is deterministic: the same commands on the
//! same state give the same state, responses and events on every replica.
//!
//! Architecture invariant: nothing here knows about Raft, gRPC or RocksDB.

mod backend;
mod compact;
mod hash;
mod layout;
mod mem_backend;
mod pending_view;
mod read;
mod store;
mod txn;
mod types;

pub mod backend_suite;
pub mod mvcc_suite;

pub use backend::{BackendError, BatchOp, KvBackend, ReadView, WriteBatch};
pub use hash::KvHash;
pub use mem_backend::{MemBackend, MemView};
pub use store::{Applied, EventPage, MvccError, MvccStore};
pub use types::*;

/// The most operations (and, separately, compares) one transaction may have in its taken
/// branch; more is rejected with [`RejectReason::InvalidTxn`] (etcd's `--max-txn-ops`
/// default).
pub const MAX_TXN_OPS: usize = 1024;
