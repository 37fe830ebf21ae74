//! Request, response and event types of the MVCC store.
//!
//! These types travel inside Raft log entries (postcard-encoded), so every change to them
//! must keep old encodings readable: add new variants at the end of enums, never reorder.

use serde::{Deserialize, Serialize};

/// A store revision. Revision 0 means "none"; the first mutation creates revision 1.
pub type Revision = i64;

/// One live key with its metadata, as etcd reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyValue {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    /// Revision of the mutation that created this incarnation of the key.
    pub create_revision: Revision,
    /// Revision of the last mutation of the key.
    pub mod_revision: Revision,
    /// Number of puts since creation (1 after the creating put). 0 for a deleted key.
    pub version: i64,
}

/// The key range addressed by a request, etcd-style:
/// `range_end` empty → the single key `key`; `range_end == [0]` → every key `>= key`;
/// otherwise the half-open range `[key, range_end)`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRange {
    pub key: Vec<u8>,
    pub range_end: Vec<u8>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RangeRequest {
    pub range: KeyRange,
    /// Maximum number of keys returned; 0 = no limit.
    pub limit: u64,
    /// Read at this revision; 0 = the current revision.
    pub revision: Revision,
    pub keys_only: bool,
    pub count_only: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RangeResponse {
    pub kvs: Vec<KeyValue>,
    /// True when `limit` cut the result short.
    pub more: bool,
    /// Number of keys in the range at that revision (ignoring `limit`).
    pub count: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PutRequest {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub prev_kv: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PutResponse {
    pub prev_kv: Option<KeyValue>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteRangeRequest {
    pub range: KeyRange,
    pub prev_kv: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteRangeResponse {
    pub deleted: i64,
    pub prev_kvs: Vec<KeyValue>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CompareOp {
    Equal,
    NotEqual,
    Less,
    Greater,
}

/// What a compare looks at. A missing key has version, create and mod revision 0 and
/// no value (a `Value` compare on a missing key is false whatever the operator).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CompareTarget {
    Version(i64),
    CreateRevision(Revision),
    ModRevision(Revision),
    Value(Vec<u8>),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compare {
    pub key: Vec<u8>,
    pub op: CompareOp,
    pub target: CompareTarget,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    Range(RangeRequest),
    Put(PutRequest),
    DeleteRange(DeleteRangeRequest),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpResponse {
    Range(RangeResponse),
    Put(PutResponse),
    DeleteRange(DeleteRangeResponse),
}

/// An etcd-style transaction: if every compare holds, run `success`, else `failure`.
/// A plain put or delete is a transaction without compares.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnRequest {
    pub compare: Vec<Compare>,
    pub success: Vec<Op>,
    pub failure: Vec<Op>,
}

impl TxnRequest {
    /// Roughly how many bytes the request takes encoded (its keys and values), for
    /// callers that bound the size of what they send at once.
    pub fn wire_size(&self) -> usize {
        let range = |r: &KeyRange| r.key.len() + r.range_end.len();
        let op = |o: &Op| {
            16 + match o {
                Op::Range(r) => range(&r.range),
                Op::Put(p) => p.key.len() + p.value.len(),
                Op::DeleteRange(d) => range(&d.range),
            }
        };
        let compare = |c: &Compare| {
            24 + c.key.len() + if let CompareTarget::Value(v) = &c.target { v.len() } else { 0 }
        };
        16 + self.compare.iter().map(compare).sum::<usize>()
            + self.success.iter().chain(&self.failure).map(op).sum::<usize>()
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnResponse {
    pub succeeded: bool,
    pub responses: Vec<OpResponse>,
    /// The store revision after the transaction (unchanged if it mutated nothing).
    pub revision: Revision,
}

/// A command replicated through the Raft log and applied by every replica.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    Txn(TxnRequest),
    /// Forget history older than `revision` (keeping, for each key, its value at `revision`).
    Compact { revision: Revision },
}

/// The outcome of applying one [`Command`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CommandResponse {
    Txn(TxnResponse),
    Compacted { revision: Revision },
    /// The command was rejected deterministically (same on every replica); nothing changed.
    Rejected(RejectReason),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RejectReason {
    /// A range inside a transaction named an already compacted revision.
    Compacted { compacted: Revision },
    /// A range or compaction named a revision after the current one.
    FutureRevision { current: Revision },
    /// A transaction had more operations than [`crate::MAX_TXN_OPS`], or a delete inside a
    /// transaction overlapped a put of the same transaction (etcd forbids both).
    InvalidTxn(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventKind {
    Put,
    Delete,
}

/// One change of one key, as watchers see it. For a delete, `kv` has the key, the
/// deletion's `mod_revision`, version 0 and an empty value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub kind: EventKind,
    pub kv: KeyValue,
    pub prev_kv: Option<KeyValue>,
}

impl KeyRange {
    pub fn single(key: impl Into<Vec<u8>>) -> Self {
        Self { key: key.into(), range_end: Vec::new() }
    }

    /// Every key that starts with `prefix`.
    pub fn prefix(prefix: impl Into<Vec<u8>>) -> Self {
        let key = prefix.into();
        let range_end = prefix_end(&key);
        Self { key, range_end }
    }

    /// True if `k` lies in this range.
    pub fn contains(&self, k: &[u8]) -> bool {
        if self.range_end.is_empty() {
            return k == self.key.as_slice();
        }
        if k < self.key.as_slice() {
            return false;
        }
        self.range_end.as_slice() == [0] || k < self.range_end.as_slice()
    }
}

/// The smallest key greater than every key with this prefix (`[0]` = no upper bound).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}
