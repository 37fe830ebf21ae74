//! Messages of the store and cluster services (postcard inside `keelson.v1.Envelope`).
//!
//! Every reply is `Result<Reply, StoreError>`; gRPC status codes are used only for
//! transport failures. Versioning: add enum variants at the end, fields never change.

use keelson_mvcc::{Event, KeyRange, RangeRequest, RangeResponse, Revision, TxnRequest, TxnResponse};
use serde::{Deserialize, Serialize};

/// Facts about the replica that answered, attached to every reply.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResponseHeader {
    /// Raft id of the answering replica.
    pub member_id: u64,
    /// The store revision the reply reflects.
    pub revision: Revision,
    pub raft_term: u64,
}

/// How fresh a read must be.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReadConsistency {
    /// Reflects every write acknowledged before the read started (ReadIndex), on any replica.
    #[default]
    Linearizable,
    /// The replica's local state, possibly stale.
    Serializable,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RangeCall {
    pub request: RangeRequest,
    pub consistency: ReadConsistency,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RangeReply {
    pub header: ResponseHeader,
    pub response: RangeResponse,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnReply {
    pub header: ResponseHeader,
    pub response: TxnResponse,
}

/// One call on a `Store.Batch` stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StoreCall {
    Range(RangeCall),
    Txn(TxnRequest),
    /// A call made inside a recorded trace; `traceparent` (W3C) names the caller's span,
    /// which the replica's spans for the call continue. Sent only while traces are
    /// exported; a replica of a release before this variant refuses the frame.
    Traced { traceparent: String, call: Box<StoreCall> },
}

/// The answer to one [`StoreCall`], of the same kind.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StoreCallReply {
    Range(Result<RangeReply, StoreError>),
    Txn(Result<TxnReply, StoreError>),
}

/// Client → server message on a `Store.Batch` stream: calls, each with an id the client
/// chose, unique on the stream.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallFrame {
    pub calls: Vec<(u64, StoreCall)>,
}

/// Server → client message on a `Store.Batch` stream: replies by call id, in the order
/// they completed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplyFrame {
    pub replies: Vec<(u64, StoreCallReply)>,
    /// The leader's address (`host:port`) as the replica knows it when the frame leaves,
    /// so a client that can reach it may send writes there directly.
    pub leader: Option<String>,
}

impl StoreCall {
    /// Roughly how many bytes the call takes on the wire (keys and values), to keep
    /// frames bounded.
    pub fn wire_size(&self) -> usize {
        match self {
            StoreCall::Range(r) => 32 + r.request.range.key.len() + r.request.range.range_end.len(),
            StoreCall::Txn(t) => t.wire_size(),
            StoreCall::Traced { traceparent, call } => traceparent.len() + call.wire_size(),
        }
    }

    /// `range` or `txn`, for spans and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreCall::Range(_) => "range",
            StoreCall::Txn(_) => "txn",
            StoreCall::Traced { call, .. } => call.kind(),
        }
    }
}

impl StoreCallReply {
    /// Roughly how many bytes the reply takes on the wire (keys and values).
    pub fn wire_size(&self) -> usize {
        let kv = |k: &keelson_mvcc::KeyValue| 48 + k.key.len() + k.value.len();
        match self {
            StoreCallReply::Range(Ok(r)) => 48 + r.response.kvs.iter().map(kv).sum::<usize>(),
            StoreCallReply::Txn(Ok(t)) => {
                48 + t
                    .response
                    .responses
                    .iter()
                    .map(|r| match r {
                        keelson_mvcc::OpResponse::Range(r) => r.kvs.iter().map(kv).sum::<usize>(),
                        keelson_mvcc::OpResponse::Put(p) => p.prev_kv.as_ref().map_or(0, kv),
                        keelson_mvcc::OpResponse::DeleteRange(d) => d.prev_kvs.iter().map(kv).sum::<usize>(),
                    })
                    .sum::<usize>()
            }
            StoreCallReply::Range(Err(_)) | StoreCallReply::Txn(Err(_)) => 128,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactCall {
    pub revision: Revision,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadIndexReply {
    /// The log index a linearizable read must wait for.
    pub index: u64,
    pub leader_id: u64,
}

/// A store-level failure, the same on every replica for the same cause.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum StoreError {
    /// The requested revision was compacted away; the caller must re-list.
    #[error("revision has been compacted (compacted up to {compacted})")]
    Compacted { compacted: Revision },
    /// The requested revision is after the store's current revision.
    #[error("revision is in the future (current revision {current})")]
    FutureRevision { current: Revision },
    /// The request itself is invalid (too many ops, overlapping keys, bad range).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// No leader could be reached in time (election in progress, or no quorum).
    #[error("no leader available: {0}")]
    NoLeader(String),
    /// This replica is not (or no longer) a leader for a leader-only request.
    #[error("not the leader (leader: {leader:?})")]
    NotLeader { leader: Option<u64> },
    /// The replica is shutting down or its storage failed; try another replica.
    #[error("replica unavailable: {0}")]
    Unavailable(String),
    /// A membership change could not be made.
    #[error("membership change failed: {0}")]
    Membership(String),
    /// The request is larger than a replica takes in one entry (`size` and `limit` in
    /// bytes, as [`TxnRequest::wire_size`](keelson_mvcc::TxnRequest::wire_size) counts).
    #[error("request is too large ({size} bytes; the limit is {limit})")]
    RequestTooLarge { size: u64, limit: u64 },
    /// The leader's data directory, or a majority of the voters', is below its free-space
    /// reserve; writes resume when space returns (or leadership moves to a replica with
    /// space).
    #[error("insufficient disk space: {0}")]
    NoSpace(String),
}

/// Client → server messages on a watch stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WatchRequest {
    Create(WatchCreate),
    /// Ask every watch on this stream for a progress notification now.
    Progress,
    Cancel { watch_id: u64 },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchCreate {
    /// Chosen by the client, unique on its stream.
    pub watch_id: u64,
    pub range: KeyRange,
    /// First revision to deliver; 0 = "from now", established linearizably.
    pub start_revision: Revision,
    pub prev_kv: bool,
    /// Send periodic progress notifications (bookmarks) while idle.
    pub progress_notify: bool,
}

/// Server → client messages on a watch stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchResponse {
    pub watch_id: u64,
    pub header: ResponseHeader,
    pub kind: WatchResponseKind,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WatchResponseKind {
    /// The watch exists; events from `start_revision` follow.
    Created { start_revision: Revision },
    /// Events in revision order; the watcher has now seen everything up to the header
    /// revision for its range.
    Events(Vec<Event>),
    /// Nothing new in range up to the header revision (a bookmark).
    Progress,
    /// The start revision is compacted; re-list and watch from the new revision.
    Compacted { compacted: Revision },
    /// The watch ended; resume on any replica from `resume_revision` to lose nothing.
    Canceled { reason: String, resume_revision: Revision },
}

/// One member as the cluster's membership config knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberInfo {
    pub id: u64,
    pub name: String,
    pub addr: String,
    pub voter: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberAddCall {
    pub id: u64,
    pub name: String,
    pub addr: String,
}

/// Asks a member for the digest of its history at `revision` (`Cluster.HashKv`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HashKvCall {
    pub revision: Revision,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberRemoveCall {
    pub id: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberListReply {
    pub leader: Option<u64>,
    pub members: Vec<MemberInfo>,
}

/// One replica's own view of its Raft and storage state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberStatus {
    pub id: u64,
    pub name: String,
    pub addr: String,
    /// "leader", "follower", "candidate", "learner" or "shutdown".
    pub role: String,
    pub term: u64,
    pub leader: Option<u64>,
    pub last_log_index: u64,
    pub committed_index: u64,
    pub applied_index: u64,
    pub snapshot_index: u64,
    pub purged_index: u64,
    pub revision: Revision,
    pub compacted_revision: Revision,
    pub members: Vec<MemberInfo>,
    /// The newest Raft log entry format this replica's binary decodes (1: plain entries;
    /// 2: also traced ones). Last, so replicas too old to send it are told apart by a
    /// reply that ends before it.
    pub log_format: u32,
    /// The newest format every member decodes, as this replica found when it last checked
    /// them (it checks while it leads; 1 otherwise): the newest it writes.
    pub cluster_log_format: u32,
}
