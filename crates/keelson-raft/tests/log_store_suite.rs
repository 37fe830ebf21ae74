//! openraft's storage test suite against the in-memory log store and the MVCC state
//! machine (keelson-rocks runs the same suite against RocksDB).

use keelson_mvcc::{MemBackend, MvccStore};
use keelson_raft::{KeelsonRaft, KeelsonStateMachine, MemLogStore};
use openraft::testing::log::{StoreBuilder, Suite};
use openraft::StorageError;

struct MemBuilder;

impl StoreBuilder<KeelsonRaft, MemLogStore, KeelsonStateMachine<MemBackend>, tempfile::TempDir> for MemBuilder {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, MemLogStore, KeelsonStateMachine<MemBackend>), StorageError<KeelsonRaft>> {
        // Snapshots are files even with an in-memory backend.
        let dir = tempfile::tempdir().expect("tempdir");
        let store = MvccStore::open(MemBackend::new()).expect("open store");
        let (sm, _handle) = KeelsonStateMachine::open(store, dir.path()).expect("state machine");
        Ok((dir, MemLogStore::new(), sm))
    }
}

#[tokio::test]
async fn mem_log_store_passes_the_openraft_storage_suite() {
    Suite::test_all(MemBuilder).await.expect("suite");
}
