//! One Keelson server replica.
//!
//! - [`server::start`] opens RocksDB (log + state), starts openraft and serves the Raft
//!   transport, store and cluster gRPC services on one port, plaintext or mutual TLS
//!   ([`ReplicaConfig::tls`]);
//! - [`Replica`] holds the operations every replica serves: writes (forwarded to the
//!   leader), linearizable or serializable reads, watches, compaction, membership;
//! - [`backup`]: consistent backups streamed from a running replica, and the restore of
//!   a new cluster's first replica from one;
//! - [`disk_space`]: a replica low on disk appends nothing and hands leadership over;
//! - background tasks: batched ReadIndex, the leader's compactor, the metrics endpoint.
//!
//! Architecture invariant: every long-running task takes the replica's shutdown token.

pub mod backup;
mod batch_stream;
pub mod config;
mod compactor;
mod corruption;
pub mod disk_space;
mod forward;
mod grpc;
pub mod identity;
mod log_format;
pub mod metrics;
pub use stats::ReplicaStats;
mod read_index;
mod replica;
pub mod server;
pub mod stats;
mod watch;

pub use config::{Bootstrap, CompactionPolicy, ExtraMetrics, ReplicaConfig};
pub use corruption::divergent;
pub use keelson_client::tls::{PeerIdentity, PeerTls};
pub use keelson_raft::LogRetention;
pub use replica::Replica;
pub use server::{start, RunningReplica, StartError};
