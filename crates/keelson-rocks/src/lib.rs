//! RocksDB implementations of Keelson storage traits.
//!
//! One RocksDB instance per replica ([`open_db`]) holds three column families: the Raft
//! log (`raft_log`), Raft metadata (`raft_meta`) and the MVCC state (`state`, used
//! through [`RocksBackend`]).

mod backend;
mod db;
mod log_store;

pub use backend::{RocksBackend, RocksView};
pub use db::{open_db, RocksError, ALL_CFS, RAFT_LOG_CF, RAFT_META_CF, STATE_CF};
pub use log_store::{RocksLogStore, LOG_CF, META_CF};
