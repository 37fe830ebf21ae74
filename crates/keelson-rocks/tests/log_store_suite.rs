//! openraft's storage test suite against `RocksLogStore` and the MVCC state machine on
//! `RocksBackend` (keelson-raft runs the same suite against the in-memory log store).

use keelson_mvcc::MvccStore;
use keelson_raft::{KeelsonRaft, KeelsonStateMachine};
use keelson_rocks::{open_db, RocksBackend, RocksLogStore, STATE_CF};
use openraft::testing::log::{StoreBuilder, Suite};
use openraft::StorageError;

struct RocksBuilder;

impl StoreBuilder<KeelsonRaft, RocksLogStore, KeelsonStateMachine<RocksBackend>, tempfile::TempDir> for RocksBuilder {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, RocksLogStore, KeelsonStateMachine<RocksBackend>), StorageError<KeelsonRaft>> {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = open_db(&dir.path().join("db")).expect("open db");
        let log = RocksLogStore::new(db.clone()).expect("log store");
        let store = MvccStore::open(RocksBackend::new(db, STATE_CF)).expect("open store");
        let (sm, _handle) = KeelsonStateMachine::open(store, &dir.path().join("snapshots")).expect("state machine");
        Ok((dir, log, sm))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rocks_log_store_passes_the_openraft_storage_suite() {
    Suite::test_all(RocksBuilder).await.expect("suite");
}
