//! [`KvBackend`] over one RocksDB column family.

use std::sync::Arc;

use keelson_mvcc::{BackendError, BatchOp, KvBackend, ReadView, WriteBatch};
use rocksdb::{ColumnFamily, ReadOptions, SnapshotWithThreadMode, WriteOptions, DB};

use crate::db::RocksError;

fn engine(e: rocksdb::Error) -> BackendError {
    BackendError::Engine(e.into_string())
}

fn missing_cf(cf: &str) -> BackendError {
    BackendError::Engine(format!("missing column family {cf:?}"))
}

/// The MVCC store's engine: one column family of a shared RocksDB instance.
///
/// Views are RocksDB snapshots; writes go through the WAL without fsync (the Raft log
/// is the durable record), and [`KvBackend::sync`] fsyncs the WAL.
#[derive(Clone)]
pub struct RocksBackend {
    db: Arc<DB>,
    cf: &'static str,
}

impl RocksBackend {
    /// A backend over column family `cf` of `db`. If the column family does not exist,
    /// every operation fails with a [`BackendError`] (use [`RocksBackend::try_new`] to
    /// find out at once).
    pub fn new(db: Arc<DB>, cf: &'static str) -> Self {
        Self { db, cf }
    }

    /// Like [`RocksBackend::new`], but fails if the column family does not exist.
    pub fn try_new(db: Arc<DB>, cf: &'static str) -> Result<Self, RocksError> {
        if db.cf_handle(cf).is_none() {
            return Err(RocksError::MissingColumnFamily(cf.to_string()));
        }
        Ok(Self::new(db, cf))
    }

    /// The shared database.
    /// Size figures of the engine, per column family: `(cf, live SST bytes, memtable
    /// bytes, estimated keys)`, for metrics.
    pub fn engine_sizes(&self) -> Vec<(&'static str, u64, u64, u64)> {
        crate::db::ALL_CFS
            .iter()
            .filter_map(|name| {
                let cf = self.db.cf_handle(name)?;
                let prop = |p: &str| self.db.property_int_value_cf(cf, p).ok().flatten().unwrap_or(0);
                Some((
                    *name,
                    prop("rocksdb.live-sst-files-size"),
                    prop("rocksdb.cur-size-all-mem-tables"),
                    prop("rocksdb.estimate-num-keys"),
                ))
            })
            .collect()
    }

    pub fn db(&self) -> &Arc<DB> {
        &self.db
    }

    /// The column family name.
    pub fn cf_name(&self) -> &'static str {
        self.cf
    }

    fn cf(&self) -> Result<&ColumnFamily, BackendError> {
        self.db.cf_handle(self.cf).ok_or_else(|| missing_cf(self.cf))
    }
}

/// A consistent read view of a [`RocksBackend`]: a RocksDB snapshot.
pub struct RocksView<'a> {
    snapshot: SnapshotWithThreadMode<'a, DB>,
    cf: Option<&'a ColumnFamily>,
    cf_name: &'static str,
}

impl RocksView<'_> {
    fn cf(&self) -> Result<&ColumnFamily, BackendError> {
        self.cf.ok_or_else(|| missing_cf(self.cf_name))
    }
}

impl ReadView for RocksView<'_> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, BackendError> {
        self.snapshot.get_cf(self.cf()?, key).map_err(engine)
    }

    fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), BackendError> {
        if !end.is_empty() && end <= start {
            return Ok(());
        }
        let mut opts = ReadOptions::default();
        if !end.is_empty() {
            opts.set_iterate_upper_bound(end.to_vec());
        }
        let mut it = self.snapshot.raw_iterator_cf_opt(self.cf()?, opts);
        it.seek(start);
        while it.valid() {
            let (Some(k), Some(v)) = (it.key(), it.value()) else { break };
            if !visit(k, v) {
                return Ok(());
            }
            it.next();
        }
        it.status().map_err(engine)
    }
}

impl KvBackend for RocksBackend {
    type View<'a>
        = RocksView<'a>
    where
        Self: 'a;

    fn view(&self) -> RocksView<'_> {
        RocksView { snapshot: self.db.snapshot(), cf: self.db.cf_handle(self.cf), cf_name: self.cf }
    }

    fn write(&self, batch: WriteBatch) -> Result<(), BackendError> {
        let cf = self.cf()?;
        let mut wb = rocksdb::WriteBatch::default();
        for op in batch.ops {
            match op {
                BatchOp::Put { key, value } => wb.put_cf(cf, key, value),
                BatchOp::Delete { key } => wb.delete_cf(cf, key),
                BatchOp::DeleteRange { start, end } => {
                    if start < end {
                        wb.delete_range_cf(cf, start, end);
                    }
                }
            }
        }
        // No WAL: the Raft log is the state's write-ahead log. After a crash the state is
        // what was last flushed, with the applied log id of that moment, and Raft applies
        // the rest again from its log (which is never purged past a `sync`).
        let mut opts = WriteOptions::default();
        opts.set_sync(false);
        opts.disable_wal(true);
        self.db.write_opt(wb, &opts).map_err(engine)
    }

    /// Flushes the column family's memtables to SST files (the writes have no WAL).
    fn sync(&self) -> Result<(), BackendError> {
        let cf = self.cf()?;
        let mut opts = rocksdb::FlushOptions::default();
        opts.set_wait(true);
        self.db.flush_cf_opt(cf, &opts).map_err(engine)
    }
}
