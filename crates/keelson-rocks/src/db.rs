//! Opening the replica's RocksDB instance.

use std::path::Path;
use std::sync::Arc;

use rocksdb::{BlockBasedOptions, Cache, ColumnFamilyDescriptor, DBCompressionType, Options, DB};

/// Column family of Raft log entries.
pub const RAFT_LOG_CF: &str = "raft_log";
/// Column family of Raft metadata (vote, committed, purged).
pub const RAFT_META_CF: &str = "raft_meta";
/// Column family of the MVCC state machine (see [`crate::RocksBackend`]).
pub const STATE_CF: &str = "state";
/// Every column family [`open_db`] creates.
pub const ALL_CFS: [&str; 3] = [RAFT_LOG_CF, RAFT_META_CF, STATE_CF];

/// Block cache shared by all column families.
const BLOCK_CACHE_BYTES: usize = 64 << 20;

/// Errors of the RocksDB layer.
#[derive(Debug, thiserror::Error)]
pub enum RocksError {
    /// RocksDB reported an error (I/O, corruption, invalid options, lock held...).
    #[error("rocksdb: {0}")]
    Rocks(#[from] rocksdb::Error),
    /// A column family that must exist was not found in the open database.
    #[error("missing column family {0:?}")]
    MissingColumnFamily(String),
}

fn cf_options(cache: &Cache) -> Options {
    let mut block = BlockBasedOptions::default();
    block.set_block_cache(cache);
    block.set_bloom_filter(10.0, false);
    block.set_cache_index_and_filter_blocks(true);
    let mut opts = Options::default();
    opts.set_block_based_table_factory(&block);
    opts.set_compression_type(DBCompressionType::Lz4);
    opts
}

/// Opens (creating if missing) the RocksDB database at `path` with the column families
/// [`RAFT_LOG_CF`], [`RAFT_META_CF`] and [`STATE_CF`] (created if missing), LZ4
/// compression, a 64 MiB block cache and two background jobs. Fails if the database is
/// already open (RocksDB's lock file), unreadable, or of incompatible options.
pub fn open_db(path: &Path) -> Result<Arc<DB>, RocksError> {
    let cache = Cache::new_lru_cache(BLOCK_CACHE_BYTES);
    let mut opts = cf_options(&cache);
    opts.create_if_missing(true);
    opts.create_missing_column_families(true);
    opts.set_max_background_jobs(2);
    opts.set_bytes_per_sync(1 << 20);
    opts.set_keep_log_file_num(4);
    // A rarely written column family must not pin old WAL files forever.
    opts.set_max_total_wal_size(256 << 20);
    let cfs = ALL_CFS.iter().map(|name| ColumnFamilyDescriptor::new(*name, cf_options(&cache)));
    let db = DB::open_cf_descriptors(&opts, path, cfs)?;
    for name in ALL_CFS {
        if db.cf_handle(name).is_none() {
            return Err(RocksError::MissingColumnFamily(name.to_string()));
        }
    }
    Ok(Arc::new(db))
}
