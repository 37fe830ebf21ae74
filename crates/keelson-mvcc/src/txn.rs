//! Transaction execution: compares, validation, and the taken branch run against an
//! in-memory overlay so that later ops see earlier ones and a rejection costs nothing.

use std::collections::HashSet;

use crate::backend::{ReadView, WriteBatch};
use crate::layout::{self, CurrentRecord, HistRecord, RevLogRecord, META_REV};
use crate::read::{self, Overlay};
use crate::store::MvccError;
use crate::types::{
    Compare, CompareOp, CompareTarget, DeleteRangeResponse, Event, EventKind, KeyValue, Op,
    OpResponse, PutResponse, RangeRequest, RejectReason, Revision, TxnRequest, TxnResponse,
};
use crate::MAX_TXN_OPS;

/// What applying a transaction produced.
pub(crate) enum TxnOutcome {
    /// Deterministic rejection: nothing to write but the applied bytes.
    Rejected(RejectReason),
    /// The transaction ran; `batch` is empty (and `revision` unchanged) if it mutated
    /// nothing.
    Done { response: TxnResponse, batch: WriteBatch, events: Vec<Event>, revision: Revision },
}

/// One mutation, in sub-revision order.
struct Mutation {
    key: Vec<u8>,
    hist: HistRecord,
    current: Option<CurrentRecord>,
    /// The key's state before this mutation, if it was live.
    prev_kv: Option<KeyValue>,
}

fn holds<T: Ord + ?Sized>(actual: &T, op: CompareOp, target: &T) -> bool {
    match op {
        CompareOp::Equal => actual == target,
        CompareOp::NotEqual => actual != target,
        CompareOp::Less => actual < target,
        CompareOp::Greater => actual > target,
    }
}

fn compare_holds<V: ReadView>(view: &V, c: &Compare) -> Result<bool, MvccError> {
    let cur = read::get_current(view, &c.key)?;
    Ok(match &c.target {
        CompareTarget::Version(t) => holds(&cur.as_ref().map_or(0, |r| r.version), c.op, t),
        CompareTarget::CreateRevision(t) => {
            holds(&cur.as_ref().map_or(0, |r| r.create_revision), c.op, t)
        }
        CompareTarget::ModRevision(t) => {
            holds(&cur.as_ref().map_or(0, |r| r.mod_revision), c.op, t)
        }
        CompareTarget::Value(t) => match &cur {
            None => false,
            Some(r) => holds(r.value.as_slice(), c.op, t.as_slice()),
        },
    })
}

/// etcd's static checks on the taken branch: op count, duplicate put keys, and deletes
/// overlapping puts.
fn validate(compares: usize, ops: &[Op]) -> Option<RejectReason> {
    if compares > MAX_TXN_OPS {
        return Some(RejectReason::InvalidTxn(format!(
            "too many compares: {compares} > {MAX_TXN_OPS}"
        )));
    }
    if ops.len() > MAX_TXN_OPS {
        return Some(RejectReason::InvalidTxn(format!(
            "too many operations: {} > {MAX_TXN_OPS}",
            ops.len()
        )));
    }
    let mut puts: HashSet<&[u8]> = HashSet::new();
    for op in ops {
        if let Op::Put(p) = op {
            if !puts.insert(&p.key) {
                return Some(RejectReason::InvalidTxn("duplicate key given in txn request".into()));
            }
        }
    }
    for op in ops {
        if let Op::DeleteRange(d) = op {
            if puts.iter().any(|k| d.range.contains(k)) {
                return Some(RejectReason::InvalidTxn(
                    "delete range overlaps a put in the same txn".into(),
                ));
            }
        }
    }
    None
}

/// Runs `req` against `view` (whose current revision is `current`, compacted revision
/// `compacted`). Reads only; the caller writes the returned batch.
pub(crate) fn execute<V: ReadView>(
    view: &V,
    current: Revision,
    compacted: Revision,
    req: &TxnRequest,
) -> Result<TxnOutcome, MvccError> {
    let mut succeeded = true;
    for c in &req.compare {
        if !compare_holds(view, c)? {
            succeeded = false;
            break;
        }
    }
    let ops = if succeeded { &req.success } else { &req.failure };
    if let Some(reason) = validate(req.compare.len(), ops) {
        return Ok(TxnOutcome::Rejected(reason));
    }

    let new_rev = current + 1;
    let mut overlay = Overlay::new();
    let mut muts: Vec<Mutation> = Vec::new();
    let mut responses = Vec::with_capacity(ops.len());

    for op in ops {
        match op {
            Op::Range(r) => {
                let txn_rev = if muts.is_empty() { current } else { new_rev };
                match range_in_txn(view, r, current, compacted, txn_rev, &overlay)? {
                    Ok(resp) => responses.push(OpResponse::Range(resp)),
                    Err(reason) => return Ok(TxnOutcome::Rejected(reason)),
                }
            }
            Op::Put(p) => {
                let prev = match overlay.get(&p.key) {
                    Some(o) => o.clone(),
                    None => read::get_current(view, &p.key)?,
                };
                let sub = muts.len() as u32;
                let cur = CurrentRecord {
                    value: p.value.clone(),
                    create_revision: prev.as_ref().map_or(new_rev, |r| r.create_revision),
                    mod_revision: new_rev,
                    mod_sub: sub,
                    version: prev.as_ref().map_or(1, |r| r.version + 1),
                };
                let hist = HistRecord {
                    deleted: false,
                    value: p.value.clone(),
                    create_revision: cur.create_revision,
                    version: cur.version,
                    prev: prev.as_ref().map(|r| (r.mod_revision, r.mod_sub)),
                };
                let prev_kv = prev.as_ref().map(|r| r.to_kv(&p.key));
                responses.push(OpResponse::Put(PutResponse {
                    prev_kv: if p.prev_kv { prev_kv.clone() } else { None },
                }));
                overlay.insert(p.key.clone(), Some(cur.clone()));
                muts.push(Mutation { key: p.key.clone(), hist, current: Some(cur), prev_kv });
            }
            Op::DeleteRange(d) => {
                let mut victims: Vec<(Vec<u8>, CurrentRecord)> = Vec::new();
                read::scan_current(view, &d.range, Some(&overlay), &mut |live| {
                    victims.push((live.key()?, live.record()?));
                    Ok(true)
                })?;
                let mut resp =
                    DeleteRangeResponse { deleted: victims.len() as i64, prev_kvs: Vec::new() };
                for (key, rec) in victims {
                    let prev_kv = rec.to_kv(&key);
                    if d.prev_kv {
                        resp.prev_kvs.push(prev_kv.clone());
                    }
                    let hist = HistRecord {
                        deleted: true,
                        value: Vec::new(),
                        create_revision: 0,
                        version: 0,
                        prev: Some((rec.mod_revision, rec.mod_sub)),
                    };
                    overlay.insert(key.clone(), None);
                    muts.push(Mutation { key, hist, current: None, prev_kv: Some(prev_kv) });
                }
                responses.push(OpResponse::DeleteRange(resp));
            }
        }
    }

    if muts.is_empty() {
        return Ok(TxnOutcome::Done {
            response: TxnResponse { succeeded, responses, revision: current },
            batch: WriteBatch::default(),
            events: Vec::new(),
            revision: current,
        });
    }

    let mut batch = WriteBatch::default();
    let mut events = Vec::with_capacity(muts.len());
    for (sub, m) in muts.into_iter().enumerate() {
        let sub = sub as u32;
        let kind = if m.hist.deleted { EventKind::Delete } else { EventKind::Put };
        batch.put(layout::hist_key(&m.key, new_rev, sub), read::encode(&m.hist)?);
        let log = RevLogRecord { key: m.key.clone(), prev: m.hist.prev, deleted: m.hist.deleted };
        batch.put(layout::rev_key(new_rev, sub), read::encode(&log)?);
        match &m.current {
            Some(c) => batch.put(layout::cur_key(&m.key), read::encode(c)?),
            None => batch.delete(layout::cur_key(&m.key)),
        }
        events.push(Event { kind, kv: m.hist.to_kv(&m.key, new_rev), prev_kv: m.prev_kv });
    }
    batch.put(META_REV.to_vec(), layout::encode_rev(new_rev));
    Ok(TxnOutcome::Done {
        response: TxnResponse { succeeded, responses, revision: new_rev },
        batch,
        events,
        revision: new_rev,
    })
}

/// A range inside a transaction. `txn_rev` is the revision the transaction's own changes
/// would have (the current one if it changed nothing yet).
fn range_in_txn<V: ReadView>(
    view: &V,
    r: &RangeRequest,
    current: Revision,
    compacted: Revision,
    txn_rev: Revision,
    overlay: &Overlay,
) -> Result<Result<crate::types::RangeResponse, RejectReason>, MvccError> {
    let rev = if r.revision <= 0 { txn_rev } else { r.revision };
    if rev > txn_rev {
        return Ok(Err(RejectReason::FutureRevision { current: txn_rev }));
    }
    if rev < compacted {
        return Ok(Err(RejectReason::Compacted { compacted }));
    }
    let resp = if rev == txn_rev {
        read::range_current(view, r, Some(overlay))?
    } else if rev == current {
        read::range_current(view, r, None)?
    } else {
        read::range_at(view, r, rev)?
    };
    Ok(Ok(resp))
}
