//! The ordered key-value engine under the MVCC store.
//!
//! Architecture invariant: this module knows no engine. `keelson-rocks` implements
//! [`KvBackend`] over RocksDB, [`crate::MemBackend`] over a `BTreeMap`; both must pass
//! [`crate::backend_suite`].

/// An engine failure. Always fatal for the replica: the state machine cannot go on
/// after a write it could not make.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The engine reported an I/O or corruption error.
    #[error("storage engine error: {0}")]
    Engine(String),
}

/// One mutation inside a [`WriteBatch`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BatchOp {
    Put { key: Vec<u8>, value: Vec<u8> },
    Delete { key: Vec<u8> },
    /// Deletes every key in `[start, end)`.
    DeleteRange { start: Vec<u8>, end: Vec<u8> },
}

/// Mutations applied atomically, in order, by [`KvBackend::write`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteBatch {
    pub ops: Vec<BatchOp>,
}

impl WriteBatch {
    pub fn put(&mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        self.ops.push(BatchOp::Put { key: key.into(), value: value.into() });
    }
    pub fn delete(&mut self, key: impl Into<Vec<u8>>) {
        self.ops.push(BatchOp::Delete { key: key.into() });
    }
    pub fn delete_range(&mut self, start: impl Into<Vec<u8>>, end: impl Into<Vec<u8>>) {
        self.ops.push(BatchOp::DeleteRange { start: start.into(), end: end.into() });
    }
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
    pub fn len(&self) -> usize {
        self.ops.len()
    }
}

/// A consistent, point-in-time read view: later writes are invisible through it.
pub trait ReadView {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, BackendError>;

    /// Calls `visit(key, value)` for every key in `[start, end)` in ascending order
    /// (`end` empty = no upper bound) until it returns `false`.
    fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), BackendError>;
}

/// An ordered byte-key engine with atomic batches and snapshot reads.
pub trait KvBackend: Send + Sync + 'static {
    type View<'a>: ReadView
    where
        Self: 'a;

    /// A consistent view of the current contents.
    fn view(&self) -> Self::View<'_>;

    /// Applies the batch atomically. Need not be durable before [`KvBackend::sync`]
    /// (the Raft log is), but must survive a process crash once `sync` returned.
    fn write(&self, batch: WriteBatch) -> Result<(), BackendError>;

    /// Makes every write so far durable (fsync).
    fn sync(&self) -> Result<(), BackendError>;
}
