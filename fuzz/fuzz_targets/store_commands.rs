//! The store's replicated commands as they arrive in Raft log entries: postcard-decoded
//! `Command`s applied to an in-memory MVCC store, one by one on one replica and as one
//! batch on another. Never a panic (a panic in apply would stop every replica at the same
//! entry); the revision never goes back; the two replicas give the same replies and end
//! with the same state and the same history digest.
#![no_main]

use keelson_mvcc::{Command, KeyRange, MemBackend, MvccStore, RangeRequest};
use libfuzzer_sys::fuzz_target;

fn everything(store: &MvccStore<MemBackend>) -> Option<Vec<(Vec<u8>, Vec<u8>, i64)>> {
    let all = RangeRequest { range: KeyRange { key: Vec::new(), range_end: vec![0] }, ..Default::default() };
    let (resp, _) = store.range(&all).ok()?;
    Some(resp.kvs.into_iter().map(|kv| (kv.key, kv.value, kv.mod_revision)).collect())
}

fuzz_target!(|data: &[u8]| {
    let Ok(commands) = postcard::from_bytes::<Vec<Command>>(data) else { return };
    let one_by_one = MvccStore::open(MemBackend::new()).expect("an empty store opens");
    let batched = MvccStore::open(MemBackend::new()).expect("an empty store opens");

    let mut replies = Vec::new();
    let mut revision = one_by_one.current_revision();
    for (i, cmd) in commands.iter().enumerate() {
        let applied = one_by_one.apply(cmd, &(i as u64).to_be_bytes());
        let now = one_by_one.current_revision();
        assert!(now >= revision, "the revision went back from {revision} to {now} applying {cmd:?}");
        assert!(one_by_one.compacted_revision() <= now, "compacted past the current revision");
        revision = now;
        replies.push(applied.ok());
    }

    let indexes: Vec<[u8; 8]> = (0..commands.len() as u64).map(u64::to_be_bytes).collect();
    let entries: Vec<(Option<&Command>, &[u8])> = commands.iter().zip(&indexes).map(|(c, i)| (Some(c), &i[..])).collect();
    let Ok(batch) = batched.apply_batch(&entries) else { return };
    if replies.iter().all(Option::is_some) {
        let batch: Vec<_> = batch.into_iter().collect();
        assert_eq!(batch, replies, "apply_batch and apply one by one disagree");
        assert_eq!(batched.current_revision(), one_by_one.current_revision());
        assert_eq!(everything(&batched), everything(&one_by_one), "the two replicas' states differ");
        let at = one_by_one.current_revision();
        assert_eq!(batched.hash_kv(at).ok(), one_by_one.hash_kv(at).ok(), "the two replicas' digests differ");
    }
});
