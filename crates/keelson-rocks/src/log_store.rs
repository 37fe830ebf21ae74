//! The durable Raft log in RocksDB.
//!
//! Entries live in the `raft_log` column family keyed by big-endian index; vote, committed
//! log id and last purged log id in `raft_meta`.
//!
//! # Guarantees
//! - An append is acknowledged to openraft (its `IOFlushed` callback) only after the WAL
//!   holding it was fsynced. One fsync covers every append queued while the previous one
//!   ran (group commit), so throughput grows with concurrency instead of being capped at
//!   one write per fsync.
//! - A vote is fsynced before `save_vote` returns.
//! - Stored entries start with a format byte, so a newer binary can read an older log.
//! - Every entry written carries a CRC32 of its encoding (format 2), checked whenever it
//!   is read: a flipped byte on disk fails the read (and with it this replica's Raft,
//!   which stops rather than apply or send a corrupt entry) instead of being applied.

use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::sync::mpsc;
use std::sync::Arc;

use keelson_raft::{Entry, KeelsonRaft, LogId, Vote};
use openraft::storage::{IOFlushed, LogState, RaftLogStorage};
use openraft::{OptionalSend, RaftLogReader};
use rocksdb::{ColumnFamily, Direction, IteratorMode, WriteBatch, WriteOptions, DB};

/// Column family of log entries.
pub const LOG_CF: &str = "raft_log";
/// Column family of vote / committed / purged ids.
pub const META_CF: &str = "raft_meta";

/// Format 1: the postcard encoding, no checksum (still read).
const ENTRY_FORMAT_V1: u8 = 1;
/// Format 2: a little-endian CRC32 of the postcard encoding, then the encoding.
const ENTRY_FORMAT_V2: u8 = 2;
const KEY_VOTE: &[u8] = b"vote";
const KEY_COMMITTED: &[u8] = b"committed";
const KEY_LAST_PURGED: &[u8] = b"last_purged";

/// The Raft log store over a shared RocksDB instance. Clones share the DB and the fsync
/// thread.
#[derive(Clone)]
pub struct RocksLogStore {
    db: Arc<DB>,
    syncer: mpsc::Sender<IOFlushed<KeelsonRaft>>,
}

impl RocksLogStore {
    /// Opens the log store on `db`, which must have the [`LOG_CF`] and [`META_CF`] column
    /// families (see [`crate::open_db`]). Starts the group-commit fsync thread, which ends
    /// when the last clone is dropped.
    pub fn new(db: Arc<DB>) -> io::Result<Self> {
        for cf in [LOG_CF, META_CF] {
            if db.cf_handle(cf).is_none() {
                return Err(io::Error::other(format!("column family {cf} missing")));
            }
        }
        let (syncer, rx) = mpsc::channel::<IOFlushed<KeelsonRaft>>();
        let sync_db = db.clone();
        std::thread::Builder::new().name("raft-log-fsync".into()).spawn(move || group_commit(sync_db, rx))?;
        Ok(Self { db, syncer })
    }

    fn cf(&self, name: &str) -> &ColumnFamily {
        self.db.cf_handle(name).expect("column family checked in RocksLogStore::new")
    }

    fn get_meta<T: serde::de::DeserializeOwned>(&self, key: &[u8]) -> io::Result<Option<T>> {
        match self.db.get_cf(self.cf(META_CF), key).map_err(io::Error::other)? {
            None => Ok(None),
            Some(b) => postcard::from_bytes(&b).map(Some).map_err(invalid),
        }
    }

    fn put_meta<T: serde::Serialize>(&self, key: &[u8], value: &T, sync: bool) -> io::Result<()> {
        let bytes = postcard::to_stdvec(value).map_err(invalid)?;
        let mut opts = WriteOptions::default();
        opts.set_sync(sync);
        self.db.put_cf_opt(self.cf(META_CF), key, bytes, &opts).map_err(io::Error::other)
    }
}

/// Fsyncs the WAL once for every group of appends waiting, then acknowledges them all.
fn group_commit(db: Arc<DB>, rx: mpsc::Receiver<IOFlushed<KeelsonRaft>>) {
    while let Ok(first) = rx.recv() {
        let mut waiting = vec![first];
        waiting.extend(rx.try_iter());
        let res = db.flush_wal(true).map_err(|e| e.to_string());
        for cb in waiting {
            cb.io_completed(res.clone().map_err(io::Error::other));
        }
    }
}

fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

fn encode_entry(entry: &Entry) -> io::Result<Vec<u8>> {
    let mut out = vec![ENTRY_FORMAT_V2, 0, 0, 0, 0];
    postcard::to_io(entry, &mut out).map_err(invalid)?;
    let crc = crc32fast::hash(&out[5..]);
    out[1..5].copy_from_slice(&crc.to_le_bytes());
    Ok(out)
}

fn decode_entry(bytes: &[u8]) -> io::Result<Entry> {
    match bytes.split_first() {
        Some((&ENTRY_FORMAT_V2, rest)) if rest.len() >= 4 => {
            let (crc, encoded) = rest.split_at(4);
            let (stored, computed) = (u32::from_le_bytes(crc.try_into().expect("4 bytes")), crc32fast::hash(encoded));
            if stored != computed {
                return Err(invalid(format!("checksum mismatch (stored {stored:08x}, computed {computed:08x})")));
            }
            postcard::from_bytes(encoded).map_err(invalid)
        }
        Some((&ENTRY_FORMAT_V1, rest)) => postcard::from_bytes(rest).map_err(invalid),
        Some((v, _)) => Err(invalid(format!("unknown log entry format {v}"))),
        None => Err(invalid("empty log entry")),
    }
}

/// [`decode_entry`] of the entry stored at `index`, its failure naming the entry and what
/// to do about it.
fn decode_stored(index: u64, bytes: &[u8]) -> io::Result<Entry> {
    decode_entry(bytes).map_err(|e| {
        tracing::error!(index, error = %e, "raft log entry is corrupt: this replica stops; rebuild it from its peers (README: Rebuilding a replica)");
        invalid(format!("raft log entry {index} is corrupt: {e}; rebuild this replica from its peers"))
    })
}

fn invalid(e: impl ToString) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}

impl RaftLogReader<KeelsonRaft> for RocksLogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        let start = match range.start_bound() {
            Bound::Included(x) => *x,
            Bound::Excluded(x) => x + 1,
            Bound::Unbounded => 0,
        };
        let mut out = Vec::new();
        let iter = self.db.iterator_cf(self.cf(LOG_CF), IteratorMode::From(&index_key(start), Direction::Forward));
        for item in iter {
            let (key, value) = item.map_err(io::Error::other)?;
            let index = u64::from_be_bytes(key.as_ref().try_into().map_err(invalid)?);
            if !range.contains(&index) {
                break;
            }
            out.push(decode_stored(index, &value)?);
        }
        Ok(out)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        self.get_meta(KEY_VOTE)
    }
}

impl RaftLogStorage<KeelsonRaft> for RocksLogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<KeelsonRaft>, io::Error> {
        let last_purged: Option<LogId> = self.get_meta(KEY_LAST_PURGED)?;
        let last = match self.db.iterator_cf(self.cf(LOG_CF), IteratorMode::End).next() {
            None => None,
            Some(item) => {
                let (key, value) = item.map_err(io::Error::other)?;
                let index = u64::from_be_bytes(key.as_ref().try_into().map_err(invalid)?);
                Some(decode_stored(index, &value)?.log_id)
            }
        };
        Ok(LogState { last_purged_log_id: last_purged, last_log_id: last.or(last_purged) })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        self.put_meta(KEY_VOTE, vote, true)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        // Not fsynced: the committed id only speeds up recovery; losing it is safe.
        self.put_meta(KEY_COMMITTED, &committed, false)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        Ok(self.get_meta::<Option<LogId>>(KEY_COMMITTED)?.flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<KeelsonRaft>) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut batch = WriteBatch::default();
        let cf = self.cf(LOG_CF);
        for entry in entries {
            batch.put_cf(cf, index_key(entry.log_id.index), encode_entry(&entry)?);
        }
        // Written (readable) now; durable once the fsync thread has run.
        self.db.write(batch).map_err(io::Error::other)?;
        self.syncer
            .send(callback)
            .map_err(|_| io::Error::other("raft log fsync thread is gone"))
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        let from = last_log_id.map(|l| l.index + 1).unwrap_or(0);
        self.db
            .delete_range_cf(self.cf(LOG_CF), index_key(from), index_key(u64::MAX))
            .map_err(io::Error::other)?;
        // u64::MAX itself is excluded by the half-open range; no index ever gets there.
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        // Record the purge point first: entries at or before it are ignored from then on,
        // so the deletion below needs no atomicity with it.
        self.put_meta(KEY_LAST_PURGED, &log_id, true)?;
        self.db
            .delete_range_cf(self.cf(LOG_CF), index_key(0), index_key(log_id.index + 1))
            .map_err(io::Error::other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keelson_mvcc::{Command, Op, PutRequest, TxnRequest};
    use keelson_raft::LogCommand;
    use openraft::entry::RaftEntry;
    use openraft::vote::RaftLeaderIdExt;

    fn sample() -> Entry {
        let cmd = Command::Txn(TxnRequest {
            success: vec![Op::Put(PutRequest { key: b"/k".to_vec(), value: b"v".to_vec(), prev_kv: false })],
            ..Default::default()
        });
        let leader = <openraft::alias::LeaderIdOf<KeelsonRaft> as RaftLeaderIdExt>::new_committed(3, 7);
        let log_id = openraft::alias::LogIdOf::<KeelsonRaft>::new(leader, 42);
        Entry::new_normal(log_id, LogCommand::V1(cmd))
    }

    /// The stored bytes of a V1 entry, as earlier versions wrote them: still read.
    const V1_ENTRY: &[u8] = &[1, 3, 7, 42, 1, 0, 0, 0, 1, 1, 2, 47, 107, 1, 118, 0, 0];

    /// The stored bytes of a V2 entry, as this version writes them. If this test fails
    /// the on-disk log format changed: existing logs would no longer decode. Add a new
    /// format (byte or `LogCommand` variant) instead of changing this one.
    const V2_ENTRY: &[u8] = &[2, 0xb7, 0x0c, 0x21, 0x20, 3, 7, 42, 1, 0, 0, 0, 1, 1, 2, 47, 107, 1, 118, 0, 0];

    #[test]
    fn entries_keep_their_encodings() {
        let bytes = encode_entry(&sample()).expect("encode");
        assert_eq!(bytes, V2_ENTRY, "log entry encoding changed");
        for stored in [V1_ENTRY, V2_ENTRY] {
            let decoded = decode_entry(stored).expect("decode");
            assert_eq!(decoded.log_id, sample().log_id);
            assert_eq!(format!("{:?}", decoded.payload), format!("{:?}", sample().payload));
        }
    }

    #[test]
    fn a_flipped_byte_anywhere_in_an_entry_is_caught() {
        // Every bit of every byte after the format byte (the checksum itself included).
        for at in 1..V2_ENTRY.len() {
            for bit in 0..8 {
                let mut corrupt = V2_ENTRY.to_vec();
                corrupt[at] ^= 1 << bit;
                let err = decode_stored(42, &corrupt).expect_err("a flipped bit must not decode");
                assert!(err.to_string().contains("raft log entry 42 is corrupt"), "{err}");
            }
        }
        assert!(decode_entry(&[2, 1, 2]).is_err(), "too short for its checksum");
    }

    #[test]
    fn unknown_formats_are_refused() {
        assert!(decode_entry(&[9, 1, 2]).is_err());
        assert!(decode_entry(&[]).is_err());
    }
}
