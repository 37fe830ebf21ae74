//! The MVCC store over a [`KvBackend`].
//!
//! # Key layout (one backend keyspace)
//!
//! User keys are written `enc(key)`: every 0x00 byte becomes 0x00 0xFF and the key ends
//! with 0x00 0x01. This encoding preserves order and is prefix-free, so a revision suffix
//! never disturbs key order and keys may contain any byte.
//!
//! | backend key                         | value                                        |
//! |-------------------------------------|----------------------------------------------|
//! | `c/{enc(key)}`                      | postcard `CurrentRecord`: live value + meta |
//! | `h/{enc(key)}{rev BE8}{sub BE4}`    | postcard `HistRecord`: one mutation (put or tombstone) with a pointer to the key's previous mutation |
//! | `r/{rev BE8}{sub BE4}`              | postcard `RevLogRecord`: key mutated at (rev, sub), its previous mutation, deletion flag |
//! | `m/rev`                             | current revision, i64 BE                     |
//! | `m/compacted`                       | compacted revision, i64 BE                   |
//! | `m/applied`                         | opaque applied bytes of the Raft layer       |
//! | `m/compacting`                      | marker of an unfinished compaction           |
//! | `m/import`                          | marker of an unfinished import               |
//!
//! Reads at the current revision use `c/`; reads at a past revision pick, per key, the
//! newest `h/` entry at or before it; watch replay walks `r/`. Every transaction writes
//! its `h/`, `r/`, `c/` changes, `m/rev` and `m/applied` in one atomic batch. Nothing
//! per key is kept in memory: only the current and compacted revisions are cached.
//!
//! Everything is deterministic: the same commands on the same state produce the same
//! backend contents, responses and events.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::backend::{BackendError, BatchOp, KvBackend, ReadView, WriteBatch};
use crate::compact;
use crate::layout::{
    self, CompactionMarker, HistRecord, RevLogRecord, ALL_END, META_APPLIED, META_COMPACTED,
    META_COMPACTING, META_IMPORT, META_REV, REVLOG,
};
use crate::pending_view::PendingView;
use crate::read;
use crate::txn::{self, TxnOutcome};
use crate::types::{
    Command, CommandResponse, Event, EventKind, KeyRange, RangeRequest, RangeResponse,
    RejectReason, Revision,
};

/// Import batches are written when they reach about this many bytes.
const IMPORT_BATCH_BYTES: usize = 4 << 20;

/// Errors of the MVCC store. Everything but `Compacted` and `FutureRevision` (which are
/// answers to a read) means the replica cannot go on with this state.
#[derive(Debug, thiserror::Error)]
pub enum MvccError {
    /// The backend failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// A read asked for a revision older than the compacted one.
    #[error("revision {requested} is compacted (compacted revision {compacted})")]
    Compacted { requested: Revision, compacted: Revision },
    /// A read asked for a revision after the current one.
    #[error("revision {requested} is in the future (current revision {current})")]
    FutureRevision { requested: Revision, current: Revision },
    /// Stored data is malformed, or an operation met a state it cannot handle.
    #[error("corrupt MVCC state: {0}")]
    Corrupt(String),
    /// The export sink or the import source failed.
    #[error("snapshot stream I/O error: {0}")]
    Io(#[from] std::io::Error),
}

/// The result of [`MvccStore::apply`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    pub response: CommandResponse,
    /// The changes made, in (revision, sub-revision) order. Each carries `prev_kv` when
    /// the key was live before (watchers that did not ask for it must strip it).
    pub events: Vec<Event>,
    /// The store revision after the command.
    pub revision: Revision,
}

/// A page of history returned by [`MvccStore::events_since`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventPage {
    pub events: Vec<Event>,
    /// Resume from here next time (the first revision not covered by this page).
    pub next_revision: Revision,
    /// The store revision seen by this read.
    pub current_revision: Revision,
}

/// The MVCC state machine. Mutations (`apply`, `set_applied`, `import`) must come from
/// one applier at a time (they are also serialized internally); reads take `&self` and
/// may run from many threads, each through one consistent backend view.
pub struct MvccStore<B: KvBackend> {
    backend: B,
    current: AtomicI64,
    compacted: AtomicI64,
    /// A compaction's physical clean-up is unfinished (`m/compacting` exists).
    compaction_pending: AtomicBool,
    compaction_batch_ops: AtomicUsize,
    write_lock: Mutex<()>,
}

impl<B: KvBackend> MvccStore<B> {
    /// Opens the store over `backend` and loads the cached revisions. If an interrupted
    /// import is found, everything is deleted first: the state becomes empty and
    /// [`MvccStore::applied`] returns `None`.
    pub fn open(backend: B) -> Result<Self, MvccError> {
        let store = Self {
            backend,
            current: AtomicI64::new(0),
            compacted: AtomicI64::new(0),
            compaction_pending: AtomicBool::new(false),
            compaction_batch_ops: AtomicUsize::new(compact::BATCH_OPS),
            write_lock: Mutex::new(()),
        };
        let interrupted = store.backend.view().get(META_IMPORT)?.is_some();
        if interrupted {
            tracing::warn!("interrupted snapshot import found: clearing the MVCC state");
            let mut batch = WriteBatch::default();
            batch.delete_range(Vec::new(), ALL_END.to_vec());
            store.backend.write(batch)?;
            store.backend.sync()?;
        }
        store.reload()?;
        Ok(store)
    }

    /// The underlying backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Gives the backend back (e.g. to reopen the store on it).
    pub fn into_backend(self) -> B {
        self.backend
    }

    /// Tuning knob: a compaction writes batches of at most about `ops` operations
    /// (default 50 000; batches are also cut at about 4 MiB). Has no effect on results.
    pub fn set_compaction_batch_ops(&self, ops: usize) {
        self.compaction_batch_ops.store(ops.max(1), Ordering::Relaxed);
    }

    /// The current revision (0 before the first mutation). Cheap: a cached counter.
    pub fn current_revision(&self) -> Revision {
        self.current.load(Ordering::Acquire)
    }

    /// The compacted revision (0 if never compacted): reads below it fail.
    pub fn compacted_revision(&self) -> Revision {
        self.compacted.load(Ordering::Acquire)
    }

    fn lock(&self) -> Result<MutexGuard<'_, ()>, MvccError> {
        self.write_lock.lock().map_err(|_| MvccError::Corrupt("applier lock poisoned".into()))
    }

    fn reload(&self) -> Result<(), MvccError> {
        let view = self.backend.view();
        let cur = read::read_rev_meta(&view, META_REV)?;
        let comp = read::read_rev_meta(&view, META_COMPACTED)?;
        let pending = view.get(META_COMPACTING)?.is_some();
        drop(view);
        self.current.store(cur, Ordering::Release);
        self.compacted.store(comp, Ordering::Release);
        self.compaction_pending.store(pending, Ordering::Release);
        Ok(())
    }

    /// Applies one command deterministically and stores `applied` (opaque Raft bytes)
    /// in the same atomic write as the mutation. A rejected command changes nothing but
    /// still stores `applied`.
    ///
    /// `Compact { revision }`: `revision > current` is rejected (`FutureRevision`),
    /// `revision < compacted` is rejected (`Compacted`), `revision == compacted` is an
    /// idempotent success (it finishes an interrupted compaction, if any). A large
    /// compaction is written in several bounded batches (see `compact.rs`), `applied`
    /// in the last one.
    pub fn apply(&self, cmd: &Command, applied: &[u8]) -> Result<Applied, MvccError> {
        let _guard = self.lock()?;
        if self.compaction_pending.load(Ordering::Acquire) {
            self.finish_compaction(None)?;
        }
        match cmd {
            Command::Txn(req) => {
                let current = self.current_revision();
                let outcome = {
                    let view = self.backend.view();
                    txn::execute(&view, current, self.compacted_revision(), req)?
                };
                match outcome {
                    TxnOutcome::Rejected(reason) => self.reject(reason, applied),
                    TxnOutcome::Done { response, mut batch, events, revision } => {
                        batch.put(META_APPLIED.to_vec(), applied.to_vec());
                        self.backend.write(batch)?;
                        self.current.store(revision, Ordering::Release);
                        Ok(Applied { response: CommandResponse::Txn(response), events, revision })
                    }
                }
            }
            Command::Compact { revision } => self.compact(*revision, applied),
        }
    }

    /// Applies a run of log entries with as few backend writes as possible: consecutive
    /// transactions go into one atomic write (each sees the effects of those before it),
    /// together with the `applied` bytes of the last entry of the run. An entry without
    /// a command (`None`) only advances `applied`. Results are in input order (`None` for
    /// entries without a command) and equal what [`MvccStore::apply`] would give one by
    /// one; a compaction is applied on its own.
    pub fn apply_batch(&self, entries: &[(Option<&Command>, &[u8])]) -> Result<Vec<Option<Applied>>, MvccError> {
        let _guard = self.lock()?;
        if self.compaction_pending.load(Ordering::Acquire) {
            self.finish_compaction(None)?;
        }
        let mut out = Vec::with_capacity(entries.len());
        let mut i = 0;
        while i < entries.len() {
            if let (Some(Command::Compact { revision }), applied) = entries[i] {
                out.push(Some(self.compact(*revision, applied)?));
                i += 1;
                continue;
            }
            // A run of transactions and command-less entries, up to the next compaction.
            let view = self.backend.view();
            let mut pending = PendingView::new(&view);
            let mut batch = WriteBatch::default();
            let mut current = self.current_revision();
            let compacted = self.compacted_revision();
            let mut last_applied: &[u8] = entries[i].1;
            while i < entries.len() {
                let (cmd, applied) = entries[i];
                let applied_entry = match cmd {
                    Some(Command::Compact { .. }) => break,
                    None => None,
                    Some(Command::Txn(req)) => match txn::execute(&pending, current, compacted, req)? {
                        TxnOutcome::Rejected(reason) => Some(Applied {
                            response: CommandResponse::Rejected(reason),
                            events: Vec::new(),
                            revision: current,
                        }),
                        TxnOutcome::Done { response, batch: b, events, revision } => {
                            if !pending.absorb(&b) {
                                return Err(MvccError::Corrupt("transaction produced a range delete".into()));
                            }
                            // Each transaction records the store revision; within one
                            // write only the last of those matters, so it is written once
                            // below instead of once per transaction.
                            batch.ops.extend(b.ops.into_iter().filter(|op| !is_rev_meta_put(op)));
                            current = revision;
                            Some(Applied { response: CommandResponse::Txn(response), events, revision })
                        }
                    },
                };
                out.push(applied_entry);
                last_applied = applied;
                i += 1;
            }
            drop(pending);
            drop(view);
            if current != self.current_revision() {
                batch.put(META_REV.to_vec(), layout::encode_rev(current));
            }
            batch.put(META_APPLIED.to_vec(), last_applied.to_vec());
            self.backend.write(batch)?;
            self.current.store(current, Ordering::Release);
        }
        Ok(out)
    }

    fn reject(&self, reason: RejectReason, applied: &[u8]) -> Result<Applied, MvccError> {
        self.write_applied(applied)?;
        Ok(Applied {
            response: CommandResponse::Rejected(reason),
            events: Vec::new(),
            revision: self.current_revision(),
        })
    }

    fn write_applied(&self, applied: &[u8]) -> Result<(), MvccError> {
        let mut batch = WriteBatch::default();
        batch.put(META_APPLIED.to_vec(), applied.to_vec());
        self.backend.write(batch)?;
        Ok(())
    }

    fn compact(&self, revision: Revision, applied: &[u8]) -> Result<Applied, MvccError> {
        let current = self.current_revision();
        let compacted = self.compacted_revision();
        if revision > current {
            return self.reject(RejectReason::FutureRevision { current }, applied);
        }
        if revision < compacted {
            return self.reject(RejectReason::Compacted { compacted }, applied);
        }
        if revision > compacted {
            let compacted_cell = &self.compacted;
            self.compaction_pending.store(true, Ordering::Release);
            let ops = self.compaction_batch_ops.load(Ordering::Relaxed);
            // Revision-log entries <= compacted are already gone: start after them.
            let start = layout::rev_key(compacted + 1, 0);
            compact::run(&self.backend, revision, true, start, Some(applied), ops, &mut || {
                compacted_cell.store(revision, Ordering::Release)
            })?;
            self.compaction_pending.store(false, Ordering::Release);
        } else {
            self.write_applied(applied)?;
        }
        Ok(Applied {
            response: CommandResponse::Compacted { revision },
            events: Vec::new(),
            revision: current,
        })
    }

    /// Finishes the clean-up of an interrupted compaction.
    fn finish_compaction(&self, applied: Option<&[u8]>) -> Result<(), MvccError> {
        let marker = self.backend.view().get(META_COMPACTING)?;
        if let Some(raw) = marker {
            let m: CompactionMarker = read::decode("compaction marker", &raw)?;
            let ops = self.compaction_batch_ops.load(Ordering::Relaxed);
            compact::run(&self.backend, m.target, false, m.resume, applied, ops, &mut || {})?;
        }
        self.compaction_pending.store(false, Ordering::Release);
        Ok(())
    }

    /// Stores `applied` for a log entry that carries no command.
    pub fn set_applied(&self, applied: &[u8]) -> Result<(), MvccError> {
        let _guard = self.lock()?;
        self.write_applied(applied)
    }

    /// The applied bytes last stored, if any.
    pub fn applied(&self) -> Result<Option<Vec<u8>>, MvccError> {
        Ok(self.backend.view().get(META_APPLIED)?)
    }

    /// A range read through one backend view. Returns the response and the store's
    /// current revision as seen by that view. `req.revision <= 0` reads at that current
    /// revision; below the compacted revision → [`MvccError::Compacted`]; above the
    /// current one → [`MvccError::FutureRevision`].
    pub fn range(&self, req: &RangeRequest) -> Result<(RangeResponse, Revision), MvccError> {
        let view = self.backend.view();
        let current = read::read_rev_meta(&view, META_REV)?;
        let compacted = read::read_rev_meta(&view, META_COMPACTED)?;
        let rev = if req.revision <= 0 { current } else { req.revision };
        if rev > current {
            return Err(MvccError::FutureRevision { requested: rev, current });
        }
        if rev < compacted {
            return Err(MvccError::Compacted { requested: rev, compacted });
        }
        let resp = if rev == current {
            read::range_current(&view, req, None)?
        } else {
            read::range_at(&view, req, rev)?
        };
        Ok((resp, current))
    }

    /// Every event with revision `>= start` on keys in `range`, in (revision,
    /// sub-revision) order, read through one view.
    ///
    /// Paging: whole revisions are returned while they fit in `max_events` (0 = no
    /// limit). A revision's events are never split: if the first revision of a page alone
    /// has more than `max_events` matching events, the page holds all of them (and
    /// nothing else). `next_revision` is the revision to pass next time: the first one
    /// not returned, or `max(start, current + 1)` when everything was returned.
    ///
    /// `start <= compacted` (with compacted > 0) → [`MvccError::Compacted`]; a `start`
    /// below 1 is treated as 1. Deletions have `kv` = key, deletion revision, version 0,
    /// empty value. `prev_kv` is filled when asked and the key was live before.
    pub fn events_since(
        &self,
        start: Revision,
        range: &KeyRange,
        prev_kv: bool,
        max_events: usize,
    ) -> Result<EventPage, MvccError> {
        let view = self.backend.view();
        let current = read::read_rev_meta(&view, META_REV)?;
        let compacted = read::read_rev_meta(&view, META_COMPACTED)?;
        let start = start.max(1);
        if start <= compacted {
            return Err(MvccError::Compacted { requested: start, compacted });
        }
        let max = if max_events == 0 { usize::MAX } else { max_events };
        let mut page: Vec<Event> = Vec::new();
        let mut group: Vec<Event> = Vec::new();
        let mut group_rev: Revision = 0;
        // Some(rev) once the page is closed before revision `rev`.
        let mut stop_at: Option<Revision> = None;
        let mut err: Option<MvccError> = None;
        let end = layout::bytes_prefix_end(REVLOG);
        view.scan(&layout::rev_key(start, 0), &end, &mut |rk, rv| {
            let step = (|| -> Result<bool, MvccError> {
                let (rev, sub) = layout::parse_rev_key(rk)
                    .ok_or_else(|| MvccError::Corrupt(format!("bad revision-log key {rk:?}")))?;
                let log: RevLogRecord = read::decode("revision-log record", rv)?;
                let key = log.key.as_slice();
                if !range.contains(key) {
                    return Ok(true);
                }
                if rev != group_rev && !group.is_empty() {
                    if page.len() + group.len() <= max {
                        page.append(&mut group);
                    } else {
                        if page.is_empty() {
                            page.append(&mut group);
                            stop_at = Some(rev);
                        } else {
                            stop_at = Some(group_rev);
                        }
                        return Ok(false);
                    }
                }
                group_rev = rev;
                group.push(load_event(&view, key, rev, sub, prev_kv)?);
                Ok(true)
            })();
            match step {
                Ok(go) => go,
                Err(e) => {
                    err = Some(e);
                    false
                }
            }
        })?;
        if let Some(e) = err {
            return Err(e);
        }
        let next_revision = match stop_at {
            Some(r) => r,
            None => {
                if !group.is_empty() {
                    if page.is_empty() || page.len() + group.len() <= max {
                        page.append(&mut group);
                    } else {
                        return Ok(EventPage {
                            events: page,
                            next_revision: group_rev,
                            current_revision: current,
                        });
                    }
                }
                start.max(current + 1)
            }
        };
        Ok(EventPage { events: page, next_revision, current_revision: current })
    }

    /// Streams every backend pair of one consistent view to `sink`, in key order, and
    /// returns the applied bytes of that same view. Fails if that view holds an
    /// unfinished import.
    #[allow(clippy::type_complexity)]
    pub fn export(
        &self,
        sink: &mut dyn FnMut(&[u8], &[u8]) -> std::io::Result<()>,
    ) -> Result<Option<Vec<u8>>, MvccError> {
        let view = self.backend.view();
        if view.get(META_IMPORT)?.is_some() {
            return Err(MvccError::Corrupt("cannot export while an import is unfinished".into()));
        }
        let applied = view.get(META_APPLIED)?;
        let mut err: Option<std::io::Error> = None;
        view.scan(&[], &[], &mut |k, v| match sink(k, v) {
            Ok(()) => true,
            Err(e) => {
                err = Some(e);
                false
            }
        })?;
        if let Some(e) = err {
            return Err(MvccError::Io(e));
        }
        Ok(applied)
    }

    /// Replaces the whole state with `pairs` (as produced by [`MvccStore::export`]),
    /// crash-safely: an "import in progress" marker is written atomically with the
    /// deletion of everything, pairs follow in batches of about 4 MiB, the marker is
    /// removed last, and the backend is synced before the caches are reloaded. A crash
    /// before the end leaves the marker, and [`MvccStore::open`] then clears the state.
    /// If `pairs` fails, the state is cleared (empty, no applied bytes) and the error
    /// returned. Concurrent readers may see a partial state while this runs.
    pub fn import(
        &self,
        pairs: &mut dyn Iterator<Item = std::io::Result<(Vec<u8>, Vec<u8>)>>,
    ) -> Result<(), MvccError> {
        let _guard = self.lock()?;
        let mut batch = WriteBatch::default();
        batch.delete_range(Vec::new(), ALL_END.to_vec());
        batch.put(META_IMPORT.to_vec(), vec![1]);
        self.backend.write(batch)?;
        let result = self.import_pairs(pairs);
        if result.is_err() {
            let mut batch = WriteBatch::default();
            batch.delete_range(Vec::new(), ALL_END.to_vec());
            // If this fails too, the marker stays and `open` clears the state.
            let _ = self.backend.write(batch);
        }
        let reloaded = self.reload();
        result?;
        reloaded
    }

    fn import_pairs(
        &self,
        pairs: &mut dyn Iterator<Item = std::io::Result<(Vec<u8>, Vec<u8>)>>,
    ) -> Result<(), MvccError> {
        let mut batch = WriteBatch::default();
        let mut bytes = 0usize;
        for pair in pairs {
            let (k, v) = pair?;
            if k.as_slice() == META_IMPORT {
                continue;
            }
            if k.as_slice() >= ALL_END {
                return Err(MvccError::Corrupt(format!("imported key {k:?} outside the keyspace")));
            }
            bytes += k.len() + v.len() + 16;
            batch.put(k, v);
            if bytes >= IMPORT_BATCH_BYTES {
                self.backend.write(std::mem::take(&mut batch))?;
                bytes = 0;
            }
        }
        batch.delete(META_IMPORT.to_vec());
        self.backend.write(batch)?;
        self.backend.sync()?;
        Ok(())
    }
}

/// Loads the event of mutation (rev, sub) of `key`.
fn load_event<V: ReadView>(
    view: &V,
    key: &[u8],
    rev: Revision,
    sub: u32,
    want_prev: bool,
) -> Result<Event, MvccError> {
    let raw = view.get(&layout::hist_key(key, rev, sub))?.ok_or_else(|| {
        MvccError::Corrupt(format!("revision log names {key:?}@{rev}.{sub} without history"))
    })?;
    let rec: HistRecord = read::decode("history record", &raw)?;
    let prev_kv = match (want_prev, rec.prev) {
        (true, Some((pr, ps))) => match view.get(&layout::hist_key(key, pr, ps))? {
            // Gone only if compaction removed a tombstone: then there is no previous value.
            None => None,
            Some(praw) => {
                let p: HistRecord = read::decode("history record", &praw)?;
                (!p.deleted).then(|| p.to_kv(key, pr))
            }
        },
        _ => None,
    };
    let kind = if rec.deleted { EventKind::Delete } else { EventKind::Put };
    Ok(Event { kind, kv: rec.to_kv(key, rev), prev_kv })
}

fn is_rev_meta_put(op: &BatchOp) -> bool {
    matches!(op, BatchOp::Put { key, .. } if key.as_slice() == META_REV)
}
