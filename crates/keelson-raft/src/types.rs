//! The openraft type configuration and the payloads that travel in Keelson's Raft log.

use std::fmt;

use keelson_mvcc::{Command, CommandResponse};
use serde::{Deserialize, Serialize};

/// A replica's identity in Raft. Chosen at random when a replica is first created and
/// kept in its data directory, so ids never collide across joins and re-joins.
pub type NodeId = u64;

/// What the cluster knows about a member: carried in the membership config, so every
/// replica can reach every other one.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberNode {
    /// Human name, e.g. `keelson-1`.
    pub name: String,
    /// `host:port` of the replica's gRPC endpoint (Raft transport, store and cluster services).
    pub raft_addr: String,
}

/// The newest [`LogCommand`] format this binary decodes: 1 is [`LogCommand::V1`], 2 adds
/// [`LogCommand::Traced`]. A leader writes an entry in a format only once every member
/// has said it decodes it (see `keelson-replica`'s log format gate).
pub const LOG_FORMAT: u32 = 2;
/// The format that brought [`LogCommand::Traced`].
pub const TRACED_LOG_FORMAT: u32 = 2;

/// A log entry's application payload. Versioned: a newer binary must keep decoding every
/// older variant, so new formats are added as new variants, never by changing old ones.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LogCommand {
    V1(Command),
    /// A command proposed inside a recorded trace: `traceparent` (W3C) names the proposer's
    /// span, so each replica's apply of the entry joins that trace. Written only while
    /// traces are exported.
    Traced { command: Command, traceparent: String },
}

impl LogCommand {
    /// `command` as an entry, traced when the current span is recorded and every member
    /// decodes traced entries (`cluster_format` at least [`TRACED_LOG_FORMAT`]).
    pub fn proposed(command: Command, cluster_format: u32) -> Self {
        Self::in_trace(command, keelson_tracecontext::TraceParent::current_sampled(), cluster_format)
    }

    /// `command` as an entry in the trace `parent`, when there is one and every member
    /// decodes traced entries; else plain.
    pub fn in_trace(command: Command, parent: Option<keelson_tracecontext::TraceParent>, cluster_format: u32) -> Self {
        match parent.filter(|_| cluster_format >= TRACED_LOG_FORMAT) {
            Some(p) => LogCommand::Traced { command, traceparent: p.to_string() },
            None => LogCommand::V1(command),
        }
    }

    pub fn command(&self) -> &Command {
        match self {
            LogCommand::V1(c) | LogCommand::Traced { command: c, .. } => c,
        }
    }

    /// The proposer's trace context, for entries that carry one.
    pub fn trace(&self) -> Option<keelson_tracecontext::TraceParent> {
        match self {
            LogCommand::V1(_) => None,
            LogCommand::Traced { traceparent, .. } => traceparent.parse().ok(),
        }
    }
}

impl fmt::Display for LogCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.command() {
            Command::Txn(t) => write!(
                f,
                "txn(compares={}, success={}, failure={})",
                t.compare.len(),
                t.success.len(),
                t.failure.len()
            ),
            Command::Compact { revision } => write!(f, "compact({revision})"),
        }
    }
}

/// What applying an entry returns to the proposer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApplyOutcome {
    /// The store revision after the entry was applied.
    pub revision: keelson_mvcc::Revision,
    /// `None` for entries without a command (blank or membership entries).
    pub response: Option<CommandResponse>,
}

openraft::declare_raft_types!(
    /// Keelson's Raft types.
    pub KeelsonRaft:
        D = LogCommand,
        R = ApplyOutcome,
        NodeId = NodeId,
        Node = MemberNode,
);

pub type LogId = openraft::alias::LogIdOf<KeelsonRaft>;
pub type Vote = openraft::alias::VoteOf<KeelsonRaft>;
pub type Entry = openraft::alias::EntryOf<KeelsonRaft>;
pub type StoredMembership = openraft::alias::StoredMembershipOf<KeelsonRaft>;
pub type SnapshotMeta = openraft::alias::SnapshotMetaOf<KeelsonRaft>;
pub type Membership = openraft::Membership<NodeId, MemberNode>;
pub type RaftMetrics = openraft::RaftMetrics<KeelsonRaft>;
