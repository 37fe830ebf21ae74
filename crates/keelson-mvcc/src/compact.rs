//! Compaction: forgetting history older than a revision, in bounded batches.
//!
//! Compacting at `C` (previously compacted at `P < C`) keeps, for every key, its newest
//! history entry at or before `C` (unless that entry is a deletion) and everything after
//! `C`; it deletes revision-log entries `<= C`. The work is a scan of the revision log
//! over `(P, C]` (no other reads), never proportional to the number of keys: walking it over
//! `(P, C]`, each mutation `m` of key `k` makes the mutation it superseded (`m.prev`,
//! the key's previous live state) garbage, since `m <= C` answers every read at `>= C`;
//! and a tombstone `<= C` is garbage itself (absence needs no record). Every entry that
//! is not the newest `<= C` of its key has a successor `<= C` that points at it, or is a
//! tombstone, so nothing superseded survives. Deleting an already deleted entry is
//! harmless, which makes resuming idempotent.
//!
//! Crash safety: the first batch records `compacted = C` together with a
//! [`CompactionMarker`]. From then on the logical state is final: reads at `>= C` never
//! look at entries a compaction removes, so any crash point is consistent. Each batch
//! deletes the revision-log entries it processed and moves the marker's resume point;
//! the last batch removes the marker and (when given) writes the applied bytes. A
//! compaction interrupted by a crash is finished by the next `apply` (typically the
//! replay of the same `Compact` command, which is accepted as `revision == compacted`).

use crate::backend::{KvBackend, ReadView, WriteBatch};
use crate::layout::{
    self, CompactionMarker, RevLogRecord, META_APPLIED, META_COMPACTED, META_COMPACTING, REVLOG,
};
use crate::read;
use crate::store::MvccError;
use crate::types::Revision;

/// Stop adding to a batch once it holds about this many bytes...
const BATCH_BYTES: usize = 4 << 20;
/// ...or this many operations (the default of [`crate::MvccStore::set_compaction_batch_ops`]).
pub(crate) const BATCH_OPS: usize = 50_000;

/// Approximate byte and op size of a batch being built.
struct Budget {
    bytes: usize,
    max_ops: usize,
}

impl Budget {
    fn add(&mut self, batch: &mut WriteBatch, key: Vec<u8>) {
        self.bytes += key.len() + 16;
        batch.delete(key);
    }
    fn full(&self, batch: &WriteBatch) -> bool {
        self.bytes >= BATCH_BYTES || batch.len() >= self.max_ops
    }
}

/// Runs (or resumes) the compaction at `target`. `first` = `compacted` must still be
/// raised to `target` (a fresh compaction); otherwise one is being resumed from
/// `resume`. `applied`, if given, is written in the last batch.
pub(crate) fn run<B: KvBackend>(
    backend: &B,
    target: Revision,
    mut first: bool,
    mut resume: Vec<u8>,
    applied: Option<&[u8]>,
    max_ops: usize,
    on_first_write: &mut dyn FnMut(),
) -> Result<(), MvccError> {
    let end = layout::rev_key(target + 1, 0);
    loop {
        let mut batch = WriteBatch::default();
        let mut budget = Budget { bytes: 0, max_ops: max_ops.max(1) };
        if first {
            batch.put(META_COMPACTED.to_vec(), layout::encode_rev(target));
        }
        let next = {
            let view = backend.view();
            fill_batch(&view, &resume, &end, &mut batch, &mut budget)?
        };
        match next {
            None => {
                batch.delete(META_COMPACTING.to_vec());
                if let Some(a) = applied {
                    batch.put(META_APPLIED.to_vec(), a.to_vec());
                }
                backend.write(batch)?;
                if first {
                    on_first_write();
                }
                return Ok(());
            }
            Some(next) => {
                let marker = CompactionMarker { target, resume: next.clone() };
                batch.put(META_COMPACTING.to_vec(), read::encode(&marker)?);
                backend.write(batch)?;
                if first {
                    on_first_write();
                }
                first = false;
                resume = next;
            }
        }
    }
}

/// Adds the clean-up of revision-log entries `[resume, end)` to `batch` until the budget
/// is spent. Returns where to resume, or `None` if the range is done.
fn fill_batch<V: ReadView>(
    view: &V,
    resume: &[u8],
    end: &[u8],
    batch: &mut WriteBatch,
    budget: &mut Budget,
) -> Result<Option<Vec<u8>>, MvccError> {
    let start = if resume.is_empty() { REVLOG.to_vec() } else { resume.to_vec() };
    let mut next: Option<Vec<u8>> = None;
    let mut err: Option<MvccError> = None;
    view.scan(&start, end, &mut |rk, rv| {
        if budget.full(batch) {
            next = Some(rk.to_vec());
            return false;
        }
        if let Err(e) = clean_mutation(rk, rv, batch, budget) {
            err = Some(e);
            return false;
        }
        budget.add(batch, rk.to_vec());
        true
    })?;
    if let Some(e) = err {
        return Err(e);
    }
    Ok(next)
}

/// Deletes what the mutation logged under revision-log key `rk` makes garbage: the entry
/// it superseded and, for a deletion, its own tombstone.
fn clean_mutation(
    rk: &[u8],
    rv: &[u8],
    batch: &mut WriteBatch,
    budget: &mut Budget,
) -> Result<(), MvccError> {
    let (rev, sub) = layout::parse_rev_key(rk)
        .ok_or_else(|| MvccError::Corrupt(format!("bad revision-log key {rk:?}")))?;
    let log: RevLogRecord = read::decode("revision-log record", rv)?;
    if let Some((pr, ps)) = log.prev {
        budget.add(batch, layout::hist_key(&log.key, pr, ps));
    }
    if log.deleted {
        budget.add(batch, layout::hist_key(&log.key, rev, sub));
    }
    Ok(())
}
