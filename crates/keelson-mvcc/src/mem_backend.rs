//! An in-memory [`KvBackend`]: a `BTreeMap` behind a `RwLock`.
//!
//! Meant for tests and for tools that need no durability. A view holds the read lock,
//! so writers wait until every view is dropped: keep views short-lived, and never call
//! [`KvBackend::write`] while holding a view on the same thread (it would deadlock).

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{RwLock, RwLockReadGuard};

use crate::backend::{BackendError, BatchOp, KvBackend, ReadView, WriteBatch};

type Map = BTreeMap<Vec<u8>, Vec<u8>>;
type Guard<'a> = RwLockReadGuard<'a, Map>;

/// An in-memory ordered key-value engine. `sync` is a no-op: nothing survives the
/// process, but a dropped `MemBackend` is the only way to lose data.
#[derive(Debug, Default)]
pub struct MemBackend {
    map: RwLock<Map>,
}

impl MemBackend {
    /// An empty backend.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of stored pairs (diagnostics and tests).
    pub fn len(&self) -> usize {
        self.read_guard().map(|m| m.len()).unwrap_or(0)
    }

    /// True if no pair is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn read_guard(&self) -> Result<Guard<'_>, BackendError> {
        self.map.read().map_err(|_| BackendError::Engine("MemBackend lock poisoned".into()))
    }
}

/// A read view of a [`MemBackend`]: holds its read lock, so it sees no later write.
pub struct MemView<'a> {
    guard: Result<Guard<'a>, BackendError>,
}

impl MemView<'_> {
    fn map(&self) -> Result<&Map, BackendError> {
        match &self.guard {
            Ok(g) => Ok(g),
            Err(e) => Err(BackendError::Engine(e.to_string())),
        }
    }
}

impl ReadView for MemView<'_> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, BackendError> {
        Ok(self.map()?.get(key).cloned())
    }

    fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), BackendError> {
        let map = self.map()?;
        let upper = if end.is_empty() { Bound::Unbounded } else { Bound::Excluded(end) };
        if !end.is_empty() && end <= start {
            return Ok(());
        }
        for (k, v) in map.range::<[u8], _>((Bound::Included(start), upper)) {
            if !visit(k, v) {
                break;
            }
        }
        Ok(())
    }
}

impl KvBackend for MemBackend {
    type View<'a>
        = MemView<'a>
    where
        Self: 'a;

    fn view(&self) -> MemView<'_> {
        MemView { guard: self.read_guard() }
    }

    fn write(&self, batch: WriteBatch) -> Result<(), BackendError> {
        let mut map = self
            .map
            .write()
            .map_err(|_| BackendError::Engine("MemBackend lock poisoned".into()))?;
        for op in batch.ops {
            match op {
                BatchOp::Put { key, value } => {
                    map.insert(key, value);
                }
                BatchOp::Delete { key } => {
                    map.remove(&key);
                }
                BatchOp::DeleteRange { start, end } => {
                    if end <= start {
                        continue;
                    }
                    // Cut out [start, end) and glue the tail back on.
                    let mut middle = map.split_off(&start[..]);
                    let mut tail = middle.split_off(&end[..]);
                    map.append(&mut tail);
                }
            }
        }
        Ok(())
    }

    fn sync(&self) -> Result<(), BackendError> {
        Ok(())
    }
}
