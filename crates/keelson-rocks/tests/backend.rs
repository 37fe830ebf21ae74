//! The shared backend and MVCC conformance suites, run against RocksDB.

use keelson_mvcc::{backend_suite, mvcc_suite, KvBackend, MvccStore, ReadView, WriteBatch};
use keelson_rocks::{open_db, RocksBackend, RAFT_LOG_CF, STATE_CF};

/// Makes fresh backends, each on its own temporary database (kept until the end).
fn maker(dirs: &mut Vec<tempfile::TempDir>) -> impl FnMut() -> RocksBackend + '_ {
    move || {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = open_db(dir.path()).expect("open_db");
        dirs.push(dir);
        RocksBackend::try_new(db, STATE_CF).expect("state column family")
    }
}

#[test]
fn backend_suite_on_rocksdb() {
    let mut dirs = Vec::new();
    backend_suite::run_all(&mut maker(&mut dirs));
}

#[test]
fn mvcc_suite_on_rocksdb() {
    let mut dirs = Vec::new();
    mvcc_suite::run_all(&mut maker(&mut dirs));
}

#[test]
fn state_survives_reopening_the_database() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (rev, applied) = {
        let db = open_db(dir.path()).expect("open_db");
        let store = MvccStore::open(RocksBackend::new(db, STATE_CF)).expect("open store");
        let cmd = keelson_mvcc::Command::Txn(keelson_mvcc::TxnRequest {
            success: vec![keelson_mvcc::Op::Put(keelson_mvcc::PutRequest {
                key: b"k".to_vec(),
                value: b"v".to_vec(),
                prev_kv: false,
            })],
            ..Default::default()
        });
        store.apply(&cmd, b"idx-1").expect("apply");
        store.backend().sync().expect("sync");
        (store.current_revision(), store.applied().expect("applied"))
    };
    let db = open_db(dir.path()).expect("reopen db");
    let store = MvccStore::open(RocksBackend::new(db.clone(), STATE_CF)).expect("reopen store");
    assert_eq!(store.current_revision(), rev);
    assert_eq!(rev, 1);
    assert_eq!(store.applied().expect("applied"), applied);
    // The state column family is separate from the others.
    let log = RocksBackend::new(db, RAFT_LOG_CF);
    let mut n = 0;
    log.view()
        .scan(b"", b"", &mut |_, _| {
            n += 1;
            true
        })
        .expect("scan");
    assert_eq!(n, 0, "MVCC state leaked into the raft_log column family");
    let mut wb = WriteBatch::default();
    wb.put(b"x".to_vec(), b"y".to_vec());
    log.write(wb).expect("write to raft_log");
}

#[test]
fn missing_column_family_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = open_db(dir.path()).expect("open_db");
    assert!(RocksBackend::try_new(db.clone(), "nope").is_err());
    let b = RocksBackend::new(db, "nope");
    assert!(b.view().get(b"k").is_err());
    assert!(b.write(WriteBatch::default()).is_err());
}

#[test]
fn database_is_locked_while_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _db = open_db(dir.path()).expect("open_db");
    assert!(open_db(dir.path()).is_err(), "a second open of the same path must fail");
}
