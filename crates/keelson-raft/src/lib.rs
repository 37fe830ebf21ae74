//! Keelson's Raft layer: openraft wired to the MVCC state machine.
//!
//! - [`types`]: the openraft type configuration and versioned log payloads;
//! - [`state_machine`]: applies entries to [`keelson_mvcc::MvccStore`], publishes changes
//!   to local watchers, builds and installs streamed file snapshots;
//! - [`backup_file`]: the self-checking backup file around a snapshot;
//! - [`disk_guard`]: the free-space reserve that keeps a replica off a full disk;
//! - [`mem_log_store`]: a non-durable log store for tests (`keelson-rocks` has the real one);
//! - [`network`] / [`transport_service`]: the replica-to-replica transport over gRPC.
//!
//! Architecture invariant: this crate does not depend on RocksDB; storage engines come in
//! through [`keelson_mvcc::KvBackend`] and openraft's `RaftLogStorage`.

pub mod backup_file;
pub mod disk_guard;
pub mod mem_log_store;
pub mod network;
pub mod out_of_space;
pub mod snapshot_file;
pub mod state_machine;
pub mod transport_service;
pub mod types;
pub mod wire;

pub use mem_log_store::MemLogStore;
pub use state_machine::{AppliedChange, AppliedPosition, KeelsonStateMachine, StateHandle};
pub use types::*;

/// A running Raft node over a state machine with backend `B`.
pub type KeelsonRaftNode<B> = openraft::Raft<KeelsonRaft, KeelsonStateMachine<B>>;

/// Errors of the Raft layer that callers handle.
#[derive(Debug, thiserror::Error)]
pub enum RaftLayerError {
    /// The node is shutting down; its state machine no longer advances.
    #[error("the replica is shutting down")]
    Shutdown,
}

/// When to snapshot and how much log to keep behind a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogRetention {
    /// Build a snapshot after this many entries were applied since the last one.
    pub snapshot_every: u64,
    /// Keep this many entries behind the snapshot, so briefly lagging followers catch up
    /// from the log instead of a snapshot.
    pub keep_behind_snapshot: u64,
}

impl Default for LogRetention {
    fn default() -> Self {
        Self { snapshot_every: 100_000, keep_behind_snapshot: 5_000 }
    }
}

/// Raft configuration for replicas on one LAN: 50 ms heartbeats, elections after 250–500
/// ms of silence.
///
/// Openraft's followers refuse votes for `election_timeout_max` after they last heard
/// the leader (the leader lease), so a candidate whose timer fires earlier is refused and
/// wins on its next try: after a leader crash writes resume in about `max` to `2 × max`
/// (measured by `keelson bench failover`: p50 ≈ 0.95 s here; with 500–1000 ms it was
/// ≈ 1.9 s, slower than etcd's ≈ 1.05 s with its 1 s election timeout). `min = max / 2`
/// makes the second try always late enough.
///
/// Pre-Vote is on: a node whose election timer fires first asks whether a quorum would
/// vote for it at the next term, and bumps its term only if so. Without it a follower
/// that lost contact with a live leader (restarted before the leader's next heartbeat got
/// through, or partitioned) raised its term alone; the leader then saw the higher term in
/// that follower's next answer and stepped down, costing an election (≈ 0.9 s of writes)
/// for a follower fault. Peers without the `PreVote` RPC count as granting.
pub fn default_config(cluster_name: &str, retention: LogRetention) -> openraft::Config {
    openraft::Config {
        cluster_name: cluster_name.to_string(),
        heartbeat_interval: 50,
        election_timeout_min: 250,
        election_timeout_max: 500,
        snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(retention.snapshot_every),
        max_in_snapshot_log_to_keep: retention.keep_behind_snapshot,
        // A follower further behind than the log kept gets a snapshot; closer, the log.
        replication_lag_threshold: retention.snapshot_every + retention.keep_behind_snapshot,
        purge_batch_size: (retention.snapshot_every / 4).clamp(1, 1024),
        max_payload_entries: 512,
        enable_pre_vote: Some(true),
        ..Default::default()
    }
}
