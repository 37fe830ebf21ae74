//! The shared conformance suites on the in-memory backend.

use keelson_mvcc::{backend_suite, mvcc_suite, MemBackend};

#[test]
fn backend_suite_on_mem_backend() {
    backend_suite::run_all(&mut MemBackend::new);
}

#[test]
fn mvcc_suite_on_mem_backend() {
    mvcc_suite::run_all(&mut MemBackend::new);
}
