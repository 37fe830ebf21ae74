//! An in-memory Raft log store. Not durable: for tests and simulations only. It passes
//! the same openraft storage suite as `keelson_rocks::RocksLogStore`.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io;
use std::ops::RangeBounds;
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::storage::{IOFlushed, LogState, RaftLogStorage};
use openraft::{OptionalSend, RaftLogReader};

use crate::types::{Entry, KeelsonRaft, LogId, Vote};

#[derive(Default)]
struct MemLog {
    entries: BTreeMap<u64, Entry>,
    vote: Option<Vote>,
    committed: Option<LogId>,
    last_purged: Option<LogId>,
}

/// A cloneable handle to one in-memory log; clones share it.
#[derive(Clone, Default)]
pub struct MemLogStore {
    inner: Arc<Mutex<MemLog>>,
}

impl MemLogStore {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, MemLog> {
        // A panic while holding this lock leaves plain data behind; keep using it.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl RaftLogReader<KeelsonRaft> for MemLogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        Ok(self.lock().entries.range(range).map(|(_, e)| e.clone()).collect())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        Ok(self.lock().vote)
    }
}

impl RaftLogStorage<KeelsonRaft> for MemLogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<KeelsonRaft>, io::Error> {
        let log = self.lock();
        let last = log.entries.values().next_back().map(|e| e.log_id).or(log.last_purged);
        Ok(LogState { last_purged_log_id: log.last_purged, last_log_id: last })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        self.lock().vote = Some(*vote);
        Ok(())
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        self.lock().committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        Ok(self.lock().committed)
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<KeelsonRaft>) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        {
            let mut log = self.lock();
            for e in entries {
                log.entries.insert(e.log_id.index, e);
            }
        }
        callback.io_completed(Ok(()));
        Ok(())
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        let from = last_log_id.map(|l| l.index + 1).unwrap_or(0);
        self.lock().entries.split_off(&from);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        let mut log = self.lock();
        log.last_purged = Some(log_id);
        log.entries = log.entries.split_off(&(log_id.index + 1));
        Ok(())
    }
}
