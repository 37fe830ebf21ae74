//! Checks of [`MvccStore`] over a given [`KvBackend`]: engine crates run them on their
//! engine, exactly as `keelson-mvcc`'s own tests run them on [`crate::MemBackend`].
//! Each check panics with its name on failure.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::backend::{BackendError, KvBackend, WriteBatch};
use crate::layout::{HIST, META_IMPORT, REVLOG};
use crate::store::{Applied, MvccError, MvccStore};
use crate::types::*;

type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// Runs every check, each on fresh backends from `make`.
pub fn run_all<B: KvBackend>(make: &mut dyn FnMut() -> B) {
    type Check<B> = fn(&mut dyn FnMut() -> B);
    let checks: Vec<(&str, Check<B>)> = vec![
        ("revisions_and_versions", revisions_and_versions::<B>),
        ("compares", compares::<B>),
        ("txn_semantics", txn_semantics::<B>),
        ("ranges", ranges::<B>),
        ("past_revisions", past_revisions::<B>),
        ("compaction", compaction::<B>),
        ("compaction_crash", compaction_crash::<B>),
        ("events", events::<B>),
        ("export_import", export_import::<B>),
        ("reopen", reopen::<B>),
        ("interrupted_import", interrupted_import::<B>),
        ("rejections", rejections::<B>),
        ("applied_bytes", applied_bytes::<B>),
    ];
    for (name, check) in checks {
        tracing::info!("mvcc_suite: {name}");
        check(make);
    }
}

// ---- helpers -------------------------------------------------------------------------

/// A backend wrapper whose writes start failing after a number of successful ones
/// (simulates a crash between two batches).
struct FailAfter<B> {
    inner: B,
    writes_left: AtomicUsize,
}

impl<B: KvBackend> KvBackend for FailAfter<B> {
    type View<'a>
        = B::View<'a>
    where
        Self: 'a;
    fn view(&self) -> B::View<'_> {
        self.inner.view()
    }
    fn write(&self, batch: WriteBatch) -> Result<(), BackendError> {
        let left = self.writes_left.load(Ordering::SeqCst);
        if left == 0 {
            return Err(BackendError::Engine("injected failure".into()));
        }
        self.writes_left.store(left - 1, Ordering::SeqCst);
        self.inner.write(batch)
    }
    fn sync(&self) -> Result<(), BackendError> {
        self.inner.sync()
    }
}

fn open<B: KvBackend>(b: B) -> MvccStore<B> {
    MvccStore::open(b).expect("MvccStore::open failed")
}

fn ap<B: KvBackend>(s: &MvccStore<B>, cmd: Command) -> Applied {
    let tag = format!("applied-{}", s.current_revision());
    s.apply(&cmd, tag.as_bytes()).expect("apply failed")
}

fn txn(compare: Vec<Compare>, success: Vec<Op>, failure: Vec<Op>) -> Command {
    Command::Txn(TxnRequest { compare, success, failure })
}

fn put_op(k: &[u8], v: &[u8]) -> Op {
    Op::Put(PutRequest { key: k.to_vec(), value: v.to_vec(), prev_kv: true })
}

fn del_op(range: KeyRange) -> Op {
    Op::DeleteRange(DeleteRangeRequest { range, prev_kv: true })
}

fn all_keys() -> KeyRange {
    KeyRange { key: Vec::new(), range_end: vec![0] }
}

fn range_op(range: KeyRange, revision: Revision) -> Op {
    Op::Range(RangeRequest { range, revision, ..Default::default() })
}

fn put<B: KvBackend>(s: &MvccStore<B>, k: &[u8], v: &[u8]) -> Applied {
    ap(s, txn(vec![], vec![put_op(k, v)], vec![]))
}

fn del<B: KvBackend>(s: &MvccStore<B>, range: KeyRange) -> Applied {
    ap(s, txn(vec![], vec![del_op(range)], vec![]))
}

fn txn_resp(a: &Applied) -> &TxnResponse {
    match &a.response {
        CommandResponse::Txn(t) => t,
        other => panic!("expected a txn response, got {other:?}"),
    }
}

fn range<B: KvBackend>(s: &MvccStore<B>, range: KeyRange, rev: Revision) -> RangeResponse {
    s.range(&RangeRequest { range, revision: rev, ..Default::default() }).expect("range failed").0
}

fn get<B: KvBackend>(s: &MvccStore<B>, k: &[u8], rev: Revision) -> Option<KeyValue> {
    let r = range(s, KeyRange::single(k), rev);
    assert!(r.kvs.len() <= 1 && r.count == r.kvs.len() as i64, "single-key range: {r:?}");
    r.kvs.into_iter().next()
}

fn snapshot<B: KvBackend>(s: &MvccStore<B>, rev: Revision) -> Vec<KeyValue> {
    range(s, all_keys(), rev).kvs
}

fn kv(k: &[u8], v: &[u8], create: Revision, modr: Revision, version: i64) -> KeyValue {
    KeyValue {
        key: k.to_vec(),
        value: v.to_vec(),
        create_revision: create,
        mod_revision: modr,
        version,
    }
}

fn export<B: KvBackend>(s: &MvccStore<B>) -> (Pairs, Option<Vec<u8>>) {
    let mut pairs = Vec::new();
    let applied = s
        .export(&mut |k, v| {
            pairs.push((k.to_vec(), v.to_vec()));
            Ok(())
        })
        .expect("export failed");
    (pairs, applied)
}

fn import<B: KvBackend>(s: &MvccStore<B>, pairs: &Pairs) {
    s.import(&mut pairs.iter().cloned().map(Ok)).expect("import failed");
}

fn without_applied(p: Pairs) -> Pairs {
    p.into_iter().filter(|(k, _)| k.as_slice() != b"m/applied").collect()
}

fn all_events<B: KvBackend>(s: &MvccStore<B>, start: Revision) -> Vec<Event> {
    s.events_since(start, &all_keys(), true, 0).expect("events_since failed").events
}

/// A history with puts, overwrites, deletes, recreation and a multi-op transaction.
fn build_history<B: KvBackend>(s: &MvccStore<B>) {
    for round in 0..4u8 {
        for k in 0..6u8 {
            if (k + round) % 3 == 0 {
                put(s, &[b'k', k], &[round, k]);
            }
        }
        del(s, KeyRange::single([b'k', round]));
        ap(s, txn(vec![], vec![put_op(b"t/a", &[round]), put_op(b"t/b", &[round])], vec![]));
    }
    del(s, KeyRange::prefix("t/"));
    put(s, b"t/a", b"again");
    for i in 0..300u32 {
        put(s, b"hot", &i.to_be_bytes());
    }
}

/// Every snapshot from revision 1 to the current one.
fn all_snapshots<B: KvBackend>(s: &MvccStore<B>) -> Vec<Vec<KeyValue>> {
    (1..=s.current_revision()).map(|r| snapshot(s, r)).collect()
}

fn count_prefix<B: KvBackend>(s: &MvccStore<B>, prefix: &[u8]) -> usize {
    export(s).0.iter().filter(|(k, _)| k.starts_with(prefix)).count()
}

// ---- checks --------------------------------------------------------------------------

fn revisions_and_versions<B: KvBackend>(make: &mut dyn FnMut() -> B) {
    let s = open(make());
    assert_eq!((s.current_revision(), s.compacted_revision()), (0, 0), "fresh store revisions");
    assert_eq!(range(&s, all_keys(), 0).count, 0, "fresh store not empty");
    let a = put(&s, b"a", b"1");
    assert_eq!(a.revision, 1, "first mutation is revision 1");
    assert_eq!(txn_resp(&a).revision, 1);
    assert_eq!(txn_resp(&a).responses, vec![OpResponse::Put(PutResponse { prev_kv: None })]);
    assert_eq!(
        a.events,
        vec![Event { kind: EventKind::Put, kv: kv(b"a", b"1", 1, 1, 1), prev_kv: None }]
    );
    let a2 = put(&s, b"a", b"2");
    assert_eq!(
        txn_resp(&a2).responses,
        vec![OpResponse::Put(PutResponse { prev_kv: Some(kv(b"a", b"1", 1, 1, 1)) })],
        "put prev_kv"
    );
    assert_eq!(a2.events[0].prev_kv, Some(kv(b"a", b"1", 1, 1, 1)), "event prev_kv");
    assert_eq!(get(&s, b"a", 0), Some(kv(b"a", b"2", 1, 2, 2)), "overwrite bumps version");
    put(&s, b"b", b"x");
    let d = del(&s, KeyRange::single("a"));
    assert_eq!(d.revision, 4);
    assert_eq!(
        txn_resp(&d).responses,
        vec![OpResponse::DeleteRange(DeleteRangeResponse {
            deleted: 1,
            prev_kvs: vec![kv(b"a", b"2", 1, 2, 2)]
        })]
    );
    assert_eq!(
        d.events,
        vec![Event {
            kind: EventKind::Delete,
            kv: kv(b"a", b"", 0, 4, 0),
            prev_kv: Some(kv(b"a", b"2", 1, 2, 2))
        }],
        "delete event"
    );
    assert_eq!(get(&s, b"a", 0), None, "deleted key still visible");
    // Deleting nothing does not create a revision.
    let nothing = del(&s, KeyRange::single("a"));
    assert_eq!((nothing.revision, txn_resp(&nothing).revision), (4, 4), "no-op delete bumped");
    assert!(nothing.events.is_empty());
    let re = put(&s, b"a", b"3");
    assert_eq!(re.revision, 5);
    assert_eq!(get(&s, b"a", 0), Some(kv(b"a", b"3", 5, 5, 1)), "recreate resets version");
    assert_eq!(re.events[0].prev_kv, None, "recreate has no prev_kv");
    assert_eq!(s.current_revision(), 5);
    let (_, header) = s.range(&RangeRequest { range: all_keys(), ..Default::default() }).unwrap();
    assert_eq!(header, 5, "range header revision");
    match s.range(&RangeRequest { range: all_keys(), revision: 6, ..Default::default() }) {
        Err(MvccError::FutureRevision { requested: 6, current: 5 }) => {}
        other => panic!("future read: {other:?}"),
    }
}

fn compares<B: KvBackend>(make: &mut dyn FnMut() -> B) {
    let s = open(make());
    put(&s, b"other", b"o"); // rev 1
    put(&s, b"k", b"m"); // rev 2: create 2
    put(&s, b"k", b"m"); // rev 3: mod 3, version 2
    use CompareOp::*;
    use CompareTarget::*;
    let c = |key: &str, op: CompareOp, target: CompareTarget| Compare {
        key: key.as_bytes().to_vec(),
        op,
        target,
    };
    let cases: Vec<(Vec<Compare>, bool)> = vec![
        (vec![c("k", Equal, Version(2))], true),
        (vec![c("k", NotEqual, Version(2))], false),
        (vec![c("k", Less, Version(3))], true),
        (vec![c("k", Less, Version(2))], false),
        (vec![c("k", Greater, Version(1))], true),
        (vec![c("k", Greater, Version(2))], false),
        (vec![c("k", Equal, CreateRevision(2))], true),
        (vec![c("k", Equal, CreateRevision(3))], false),
        (vec![c("k", Less, CreateRevision(3))], true),
        (vec![c("k", Greater, CreateRevision(2))], false),
        (vec![c("k", NotEqual, CreateRevision(0))], true),
        (vec![c("k", Equal, ModRevision(3))], true),
        (vec![c("k", Greater, ModRevision(2))], true),
        (vec![c("k", Less, ModRevision(3))], false),
        (vec![c("k", NotEqual, ModRevision(3))], false),
        (vec![c("k", Equal, Value(b"m".to_vec()))], true),
        (vec![c("k", Equal, Value(b"n".to_vec()))], false),
        (vec![c("k", NotEqual, Value(b"n".to_vec()))], true),
        (vec![c("k", Less, Value(b"n".to_vec()))], true),
        (vec![c("k", Less, Value(b"m".to_vec()))], false),
        (vec![c("k", Greater, Value(b"a".to_vec()))], true),
        (vec![c("k", Greater, Value(b"mm".to_vec()))], false),
        // A missing key: version/create/mod 0, value compares false.
        (vec![c("nope", Equal, Version(0))], true),
        (vec![c("nope", Greater, Version(0))], false),
        (vec![c("nope", Equal, CreateRevision(0))], true),
        (vec![c("nope", Less, ModRevision(1))], true),
        (vec![c("nope", Equal, Value(Vec::new()))], false),
        (vec![c("nope", NotEqual, Value(b"x".to_vec()))], false),
        (vec![c("nope", Less, Value(b"x".to_vec()))], false),
        // All compares must hold.
        (vec![c("k", Equal, Version(2)), c("other", Equal, Value(b"o".to_vec()))], true),
        (vec![c("k", Equal, Version(2)), c("other", Equal, Value(b"x".to_vec()))], false),
        (vec![], true),
    ];
    for (i, (cmp, expect)) in cases.into_iter().enumerate() {
        let before = s.current_revision();
        let a = ap(
            &s,
            txn(
                cmp.clone(),
                vec![put_op(b"branch", format!("s{i}").as_bytes())],
                vec![put_op(b"branch", format!("f{i}").as_bytes())],
            ),
        );
        let t = txn_resp(&a);
        assert_eq!(t.succeeded, expect, "compare case {i}: {cmp:?}");
        assert_eq!(t.revision, before + 1, "compare case {i}: revision");
        let want = format!("{}{i}", if expect { "s" } else { "f" });
        assert_eq!(get(&s, b"branch", 0).unwrap().value, want.as_bytes(), "case {i}: branch");
    }
}

fn txn_semantics<B: KvBackend>(make: &mut dyn FnMut() -> B) {
    let s = open(make());
    put(&s, b"a", b"1"); // rev 1
                         // A read-only transaction does not create a revision.
    let ro = ap(&s, txn(vec![], vec![range_op(KeyRange::single("a"), 0)], vec![]));
    assert_eq!((ro.revision, txn_resp(&ro).revision), (1, 1), "read-only txn bumped revision");
    assert!(ro.events.is_empty());
    // A failed compare with an empty failure branch does nothing.
    let f = ap(
        &s,
        txn(
            vec![Compare {
                key: b"a".to_vec(),
                op: CompareOp::Equal,
                target: CompareTarget::Version(9),
            }],
            vec![put_op(b"x", b"x")],
            vec![],
        ),
    );
    let t = txn_resp(&f);
    assert!(!t.succeeded && t.responses.is_empty() && t.revision == 1, "failed txn: {t:?}");
    assert_eq!(get(&s, b"x", 0), None);
    // Later ops see earlier ones: range, put, range, delete, range.
    let a = ap(
        &s,
        txn(
            vec![],
            vec![
                range_op(KeyRange::prefix("a"), 0),
                put_op(b"a2", b"2"),
                range_op(KeyRange::prefix("a"), 0),
                del_op(KeyRange::single("a")),
                range_op(KeyRange::prefix("a"), 0),
                range_op(KeyRange::prefix("a"), 1),
                put_op(b"b", b"3"),
            ],
            vec![],
        ),
    );
    assert_eq!(a.revision, 2);
    let r = &txn_resp(&a).responses;
    let kvs = |i: usize| match &r[i] {
        OpResponse::Range(rr) => rr.kvs.clone(),
        other => panic!("expected range response, got {other:?}"),
    };
    assert_eq!(kvs(0), vec![kv(b"a", b"1", 1, 1, 1)], "range before put");
    assert_eq!(
        kvs(2),
        vec![kv(b"a", b"1", 1, 1, 1), kv(b"a2", b"2", 2, 2, 1)],
        "range after put sees it at the new revision"
    );
    assert_eq!(kvs(4), vec![kv(b"a2", b"2", 2, 2, 1)], "range after delete");
    assert_eq!(kvs(5), vec![kv(b"a", b"1", 1, 1, 1)], "range at the old revision");
    let kinds: Vec<(EventKind, Vec<u8>)> =
        a.events.iter().map(|e| (e.kind, e.kv.key.clone())).collect();
    assert_eq!(
        kinds,
        vec![
            (EventKind::Put, b"a2".to_vec()),
            (EventKind::Delete, b"a".to_vec()),
            (EventKind::Put, b"b".to_vec())
        ],
        "events in sub-revision order"
    );
    assert_eq!(all_events(&s, 2), a.events, "stored events equal applied events");
    // Two overlapping deletes: the second sees the first.
    put(&s, b"c1", b"");
    put(&s, b"c2", b"");
    let d = ap(
        &s,
        txn(vec![], vec![del_op(KeyRange::prefix("c")), del_op(KeyRange::single("c1"))], vec![]),
    );
    match &txn_resp(&d).responses[1] {
        OpResponse::DeleteRange(dr) => assert_eq!(dr.deleted, 0, "second delete saw the first"),
        other => panic!("{other:?}"),
    }
    assert_eq!(d.events.len(), 2);
}

fn ranges<B: KvBackend>(make: &mut dyn FnMut() -> B) {
    let s = open(make());
    let keys: Vec<&[u8]> =
        vec![b"e", b"a", b"a\0", b"a\0b", b"ab", b"b", b"c", b"d/1", b"d/2", b"d0", b"\0z"];
    for k in &keys {
        put(&s, k, &[k.len() as u8]);
    }
    let rev_all = s.current_revision();
    put(&s, b"zz", b"late");
    del(&s, KeyRange::single("zz"));
    let names = |kvs: &[KeyValue]| kvs.iter().map(|kv| kv.key.clone()).collect::<Vec<_>>();
    let v = |ks: &[&[u8]]| ks.iter().map(|k| k.to_vec()).collect::<Vec<_>>();
    let r = |key: &[u8], end: &[u8]| KeyRange { key: key.to_vec(), range_end: end.to_vec() };
    // Same answers at the current revision (index) and at a past one (history).
    for rev in [0, rev_all] {
        let q = |range: KeyRange| names(&range_resp(&s, range, rev, 0, false, false).kvs);
        assert_eq!(q(KeyRange::single("a")), v(&[b"a"]), "single key @{rev}");
        assert_eq!(q(KeyRange::single("zz")), v(&[]), "missing key @{rev}");
        assert_eq!(q(r(b"a", b"b")), v(&[b"a", b"a\0", b"a\0b", b"ab"]), "[a,b) @{rev}");
        assert_eq!(q(KeyRange::prefix("d/")), v(&[b"d/1", b"d/2"]), "prefix @{rev}");
        assert_eq!(q(r(b"c", &[0])), v(&[b"c", b"d/1", b"d/2", b"d0", b"e"]), ">= c @{rev}");
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(q(r(b"", &[0])), v(&sorted), "all keys @{rev}");
        assert_eq!(q(r(&[0], &[0])), v(&sorted), "all keys from \\0 @{rev}");
        assert_eq!(q(r(b"c", b"b")), v(&[]), "inverted range @{rev}");
        let lim = range_resp(&s, r(b"a", b"b"), rev, 2, false, false);
        assert_eq!((names(&lim.kvs), lim.more, lim.count), (v(&[b"a", b"a\0"]), true, 4), "limit");
        let lim = range_resp(&s, r(b"a", b"b"), rev, 4, false, false);
        assert_eq!((lim.kvs.len(), lim.more, lim.count), (4, false, 4), "limit == count");
        let ko = range_resp(&s, r(b"a", b"b"), rev, 0, true, false);
        assert!(ko.kvs.iter().all(|kv| kv.value.is_empty() && kv.version == 1), "keys_only");
        assert_eq!(ko.kvs.len(), 4, "keys_only count");
        let co = range_resp(&s, r(b"a", b"b"), rev, 1, false, true);
        assert_eq!((co.kvs.len(), co.count, co.more), (0, 4, false), "count_only");
    }
    let full = range_resp(&s, KeyRange::single("d/1"), 0, 0, false, false);
    assert_eq!(full.kvs, vec![kv(b"d/1", &[3], 8, 8, 1)], "full kv fields");
}

fn range_resp<B: KvBackend>(
    s: &MvccStore<B>,
    range: KeyRange,
    revision: Revision,
    limit: u64,
    keys_only: bool,
    count_only: bool,
) -> RangeResponse {
    s.range(&RangeRequest { range, revision, limit, keys_only, count_only }).expect("range").0
}

fn past_revisions<B: KvBackend>(make: &mut dyn FnMut() -> B) {
    let s = open(make());
    let mut expected: Vec<Vec<KeyValue>> = Vec::new();
    build_history(&s);
    // Rebuild each revision's expected state from the events.
    let mut state: std::collections::BTreeMap<Vec<u8>, KeyValue> = Default::default();
    let events = all_events(&s, 1);
    let mut i = 0;
    for rev in 1..=s.current_revision() {
        while i < events.len() && events[i].kv.mod_revision == rev {
            let e = &events[i];
            match e.kind {
                EventKind::Put => state.insert(e.kv.key.clone(), e.kv.clone()),
                EventKind::Delete => state.remove(&e.kv.key),
            };
            i += 1;
        }
        expected.push(state.values().cloned().collect());
    }
    assert_eq!(i, events.len(), "past_revisions: events beyond the current revision");
    assert_eq!(all_snapshots(&s), expected, "past_revisions: snapshots differ from event replay");
    assert_eq!(get(&s, b"hot", 50).unwrap().version, get(&s, b"hot", 49).unwrap().version + 1);
}

fn compaction<B: KvBackend>(make: &mut dyn FnMut() -> B) {
    let s = open(make());
    build_history(&s);
    let cur = s.current_revision();
    let before = all_snapshots(&s);
    let mid = 14;
    let events_after = all_events(&s, mid + 1);
    let c = ap(&s, Command::Compact { revision: mid });
    assert_eq!(c.response, CommandResponse::Compacted { revision: mid });
    assert_eq!((c.revision, s.current_revision(), s.compacted_revision()), (cur, cur, mid));
    match s.range(&RangeRequest { range: all_keys(), revision: mid - 1, ..Default::default() }) {
        Err(MvccError::Compacted { requested, compacted }) => {
            assert_eq!((requested, compacted), (mid - 1, mid))
        }
        other => panic!("read below compaction: {other:?}"),
    }
    for rev in mid..=cur {
        assert_eq!(snapshot(&s, rev), before[rev as usize - 1], "read at {rev} after compaction");
    }
    assert!(matches!(
        s.events_since(mid, &all_keys(), false, 0),
        Err(MvccError::Compacted { compacted, .. }) if compacted == mid
    ));
    assert_eq!(all_events(&s, mid + 1), events_after, "events after compaction");
    // Idempotent at the same revision, rejected below it or in the future.
    let again = ap(&s, Command::Compact { revision: mid });
    assert_eq!(again.response, CommandResponse::Compacted { revision: mid });
    let low = ap(&s, Command::Compact { revision: mid - 1 });
    assert_eq!(low.response, CommandResponse::Rejected(RejectReason::Compacted { compacted: mid }));
    let fut = ap(&s, Command::Compact { revision: cur + 1 });
    assert_eq!(
        fut.response,
        CommandResponse::Rejected(RejectReason::FutureRevision { current: cur })
    );
    assert_eq!(s.compacted_revision(), mid);
    // Compacting at the current revision leaves one history entry per live key and no
    // revision log (tombstones and superseded versions are gone).
    let c = ap(&s, Command::Compact { revision: cur });
    assert_eq!(c.response, CommandResponse::Compacted { revision: cur });
    assert_eq!(snapshot(&s, cur), before[cur as usize - 1], "read at the compaction revision");
    let live = snapshot(&s, 0).len();
    assert_eq!(count_prefix(&s, HIST), live, "history entries left after full compaction");
    assert_eq!(count_prefix(&s, REVLOG), 0, "revision log left after full compaction");
    // Later writes still work, with correct prev_kv from the compacted history.
    let a = put(&s, b"hot", b"after");
    assert_eq!(a.events[0].prev_kv.as_ref().unwrap().value, 299u32.to_be_bytes());
    let ev = s.events_since(cur + 1, &all_keys(), true, 0).unwrap();
    assert_eq!(ev.events, a.events, "event after compaction");
}

fn compaction_crash<B: KvBackend>(make: &mut dyn FnMut() -> B) {
    // Reference: the same history compacted without interruption.
    let reference = open(make());
    build_history(&reference);
    let target = reference.current_revision() - 5;
    let applied = b"compact-entry".to_vec();
    reference.apply(&Command::Compact { revision: target }, &applied).unwrap();
    let want = export(&reference).0;

    for fail_after in [1usize, 2, 4] {
        let s = open(FailAfter { inner: make(), writes_left: AtomicUsize::new(usize::MAX) });
        build_history(&s);
        let before = all_snapshots(&s);
        s.set_compaction_batch_ops(7);
        s.backend().writes_left.store(fail_after, Ordering::SeqCst);
        let err = s.apply(&Command::Compact { revision: target }, &applied);
        assert!(err.is_err(), "compaction_crash: injected failure not reported");
        let s = open(s.into_backend().inner);
        assert_eq!(s.compacted_revision(), target, "compaction_crash: compacted after crash");
        for rev in target..=s.current_revision() {
            assert_eq!(snapshot(&s, rev), before[rev as usize - 1], "crash point {fail_after}");
        }
        // Replaying the command finishes the clean-up; the result is what an
        // uninterrupted compaction gives.
        let a = s.apply(&Command::Compact { revision: target }, &applied).unwrap();
        assert_eq!(a.response, CommandResponse::Compacted { revision: target });
        assert_eq!(export(&s).0, want, "compaction_crash: state after resume ({fail_after})");
    }
}

fn events<B: KvBackend>(make: &mut dyn FnMut() -> B) {
    let s = open(make());
    put(&s, b"a/1", b"x"); // 1
    put(&s, b"a/2", b"x"); // 2
    put(&s, b"b", b"x"); // 3
    ap(
        &s,
        txn(vec![], vec![put_op(b"a/1", b"y"), put_op(b"a/3", b"y"), put_op(b"c", b"y")], vec![]),
    ); // 4
    let d = del(&s, KeyRange::prefix("a/")); // 5
    put(&s, b"a/1", b"z"); // 6
    let full = s.events_since(1, &KeyRange::prefix("a/"), true, 0).unwrap();
    assert_eq!((full.next_revision, full.current_revision), (7, 6));
    let summary: Vec<(EventKind, &[u8], Revision, i64)> = full
        .events
        .iter()
        .map(|e| (e.kind, e.kv.key.as_slice(), e.kv.mod_revision, e.kv.version))
        .collect();
    use EventKind::{Delete as D, Put as P};
    assert_eq!(
        summary,
        vec![
            (P, &b"a/1"[..], 1, 1),
            (P, b"a/2", 2, 1),
            (P, b"a/1", 4, 2),
            (P, b"a/3", 4, 1),
            (D, b"a/1", 5, 0),
            (D, b"a/2", 5, 0),
            (D, b"a/3", 5, 0),
            (P, b"a/1", 6, 1),
        ],
        "events: prefix filter and order"
    );
    assert_eq!(full.events[4].kv, kv(b"a/1", b"", 0, 5, 0), "delete event kv");
    assert_eq!(full.events[4].prev_kv, Some(kv(b"a/1", b"y", 1, 4, 2)), "delete prev_kv");
    assert_eq!(full.events[2].prev_kv, Some(kv(b"a/1", b"x", 1, 1, 1)), "put prev_kv");
    assert_eq!(full.events[7].prev_kv, None, "recreate prev_kv");
    assert_eq!(full.events[4..7], d.events[..], "stored delete events equal applied ones");
    let no_prev = s.events_since(1, &KeyRange::prefix("a/"), false, 0).unwrap();
    assert!(no_prev.events.iter().all(|e| e.prev_kv.is_none()), "prev_kv not asked");
    // Paging: whole revisions only; an oversized revision comes alone.
    let mut pages = Vec::new();
    let mut next = 1;
    loop {
        let p = s.events_since(next, &KeyRange::prefix("a/"), true, 2).unwrap();
        if p.events.is_empty() {
            assert_eq!(p.next_revision, 7, "events: final next_revision");
            break;
        }
        let revs: Vec<Revision> = p.events.iter().map(|e| e.kv.mod_revision).collect();
        pages.push(revs);
        assert!(p.next_revision > next, "events: paging makes progress");
        next = p.next_revision;
    }
    assert_eq!(pages, vec![vec![1, 2], vec![4, 4], vec![5, 5, 5], vec![6]], "events: pages");
    let single = s.events_since(3, &KeyRange::single("b"), false, 0).unwrap();
    assert_eq!(single.events.len(), 1, "events: single key");
    assert_eq!(single.events[0].kv, kv(b"b", b"x", 3, 3, 1));
    let future = s.events_since(10, &all_keys(), false, 0).unwrap();
    assert_eq!((future.events.len(), future.next_revision), (0, 10), "events: future start");
    assert_eq!(all_events(&s, 4).len(), 7, "events: all keys from 4");
}

fn export_import<B: KvBackend>(make: &mut dyn FnMut() -> B) {
    let a = open(make());
    build_history(&a);
    ap(&a, Command::Compact { revision: 10 });
    put(&a, b"last", b"1");
    let (pairs, applied) = export(&a);
    assert_eq!(applied, a.applied().unwrap(), "export returns the applied bytes");
    assert!(applied.is_some());
    let b = open(make());
    put(&b, b"stale", b"gone"); // replaced by the import
    import(&b, &pairs);
    assert_eq!(
        (b.current_revision(), b.compacted_revision()),
        (a.current_revision(), a.compacted_revision()),
        "revisions after import"
    );
    assert_eq!(b.applied().unwrap(), applied, "applied after import");
    for rev in 10..=a.current_revision() {
        assert_eq!(snapshot(&b, rev), snapshot(&a, rev), "import: read at {rev}");
    }
    assert_eq!(all_events(&b, 11), all_events(&a, 11), "import: events");
    assert_eq!(export(&b).0, pairs, "import: export round trip");
    // Both go on identically.
    assert_eq!(put(&a, b"z", b"1"), put(&b, b"z", b"1"), "import: next apply differs");
    // A failing source leaves an empty store.
    let mut bad = pairs
        .iter()
        .cloned()
        .map(Ok)
        .take(3)
        .chain(std::iter::once(Err(std::io::Error::other("source broke"))));
    assert!(matches!(b.import(&mut bad), Err(MvccError::Io(_))), "import: source error");
    assert_eq!((b.current_revision(), b.applied().unwrap()), (0, None), "import: failed → empty");
    assert!(export(&b).0.is_empty(), "import: failed import left data");
}

fn reopen<B: KvBackend>(make: &mut dyn FnMut() -> B) {
    let s = open(make());
    build_history(&s);
    let snaps = all_snapshots(&s);
    ap(&s, Command::Compact { revision: 7 });
    let (cur, applied) = (s.current_revision(), s.applied().unwrap());
    let s = open(s.into_backend());
    assert_eq!((s.current_revision(), s.compacted_revision()), (cur, 7), "reopen revisions");
    assert_eq!(s.applied().unwrap(), applied, "reopen applied");
    for rev in 7..=cur {
        assert_eq!(snapshot(&s, rev), snaps[rev as usize - 1], "reopen: read at {rev}");
    }
    assert_eq!(put(&s, b"n", b"1").revision, cur + 1, "reopen: next revision");
}

fn interrupted_import<B: KvBackend>(make: &mut dyn FnMut() -> B) {
    // A marker left behind is cleared on open.
    let s = open(make());
    build_history(&s);
    let mut batch = WriteBatch::default();
    batch.put(META_IMPORT.to_vec(), vec![1]);
    s.backend().write(batch).unwrap();
    let s = open(s.into_backend());
    assert_eq!((s.current_revision(), s.compacted_revision()), (0, 0), "cleared revisions");
    assert_eq!(s.applied().unwrap(), None, "cleared applied");
    assert!(export(&s).0.is_empty(), "cleared state");
    // A crash in the middle of an import (after the marker, before the end). Big
    // values force several import batches.
    let src = open(make());
    build_history(&src);
    let mut pairs = export(&src).0;
    for i in 0..3u8 {
        pairs.push((vec![b'x', b'/', i], vec![i; 3 << 20]));
    }
    for fail_after in [1usize, 2] {
        let s = open(FailAfter { inner: make(), writes_left: AtomicUsize::new(usize::MAX) });
        put(&s, b"old", b"1");
        s.backend().writes_left.store(fail_after, Ordering::SeqCst);
        assert!(s.import(&mut pairs.iter().cloned().map(Ok)).is_err(), "injected failure");
        let s = open(s.into_backend().inner);
        assert_eq!(s.current_revision(), 0, "interrupted import ({fail_after}) not cleared");
        assert_eq!(s.applied().unwrap(), None);
        assert!(export(&s).0.is_empty(), "interrupted import ({fail_after}) left data");
        import(&s, &pairs);
        assert_eq!(export(&s).0, pairs, "import after an interrupted one");
        assert_eq!(s.current_revision(), src.current_revision());
    }
}

fn rejections<B: KvBackend>(make: &mut dyn FnMut() -> B) {
    let s = open(make());
    build_history(&s);
    ap(&s, Command::Compact { revision: 5 });
    let cur = s.current_revision();
    let state = without_applied(export(&s).0);
    let many: Vec<Op> =
        (0..=crate::MAX_TXN_OPS).map(|i| put_op(format!("m{i}").as_bytes(), b"")).collect();
    let invalid =
        |r: &CommandResponse| matches!(r, CommandResponse::Rejected(RejectReason::InvalidTxn(_)));
    let missing =
        Compare { key: b"nope".to_vec(), op: CompareOp::Equal, target: CompareTarget::Version(1) };
    let dup = vec![put_op(b"d", b"1"), put_op(b"d", b"2")];
    let cases: Vec<(&str, Command)> = vec![
        ("too many ops", txn(vec![], many.clone(), vec![])),
        ("duplicate put", txn(vec![], dup.clone(), vec![])),
        (
            "delete overlaps put",
            txn(vec![], vec![put_op(b"k\x01", b"1"), del_op(KeyRange::prefix("k"))], vec![]),
        ),
        (
            "delete before put",
            txn(vec![], vec![del_op(KeyRange::single("k\x01")), put_op(b"k\x01", b"1")], vec![]),
        ),
        ("invalid failure branch", txn(vec![missing], vec![], dup)),
        ("range compacted", txn(vec![], vec![put_op(b"q", b"1"), range_op(all_keys(), 4)], vec![])),
        ("range future", txn(vec![], vec![range_op(all_keys(), 10_000)], vec![])),
    ];
    for (i, (name, cmd)) in cases.into_iter().enumerate() {
        let tag = format!("reject-{i}");
        let a = s.apply(&cmd, tag.as_bytes()).unwrap();
        let expected = match name {
            "range compacted" => {
                a.response == CommandResponse::Rejected(RejectReason::Compacted { compacted: 5 })
            }
            "range future" => matches!(
                a.response,
                CommandResponse::Rejected(RejectReason::FutureRevision { current }) if current == cur
            ),
            _ => invalid(&a.response),
        };
        assert!(expected, "{name}: {:.300}", format!("{:?}", a.response));
        assert_eq!((a.revision, s.current_revision()), (cur, cur), "{name}: revision changed");
        assert!(a.events.is_empty(), "{name}: events");
        assert_eq!(without_applied(export(&s).0), state, "{name}: state changed");
        assert_eq!(s.applied().unwrap(), Some(tag.into_bytes()), "{name}: applied not written");
    }
    // The limit itself is fine; a range at the compacted revision and at the txn's own
    // new revision are fine.
    let ok = ap(&s, txn(vec![], many[..crate::MAX_TXN_OPS].to_vec(), vec![]));
    assert_eq!(ok.events.len(), crate::MAX_TXN_OPS, "MAX_TXN_OPS ops must be accepted");
    let ok = ap(
        &s,
        txn(
            vec![],
            vec![range_op(all_keys(), 5), put_op(b"q", b""), range_op(all_keys(), cur + 2)],
            vec![],
        ),
    );
    assert!(txn_resp(&ok).succeeded && ok.revision == cur + 2, "ranges at valid revisions");
}

fn applied_bytes<B: KvBackend>(make: &mut dyn FnMut() -> B) {
    let s = open(make());
    assert_eq!(s.applied().unwrap(), None, "fresh store has no applied bytes");
    s.apply(&txn(vec![], vec![put_op(b"a", b"1")], vec![]), b"log-1").unwrap();
    assert_eq!(s.applied().unwrap(), Some(b"log-1".to_vec()));
    s.set_applied(b"log-2").unwrap();
    assert_eq!(s.applied().unwrap(), Some(b"log-2".to_vec()));
    s.apply(&txn(vec![], vec![range_op(all_keys(), 0)], vec![]), b"log-3").unwrap();
    assert_eq!(s.applied().unwrap(), Some(b"log-3".to_vec()), "read-only txn applied");
    // The applied bytes are written with the mutation: a failed write stores neither.
    let s = open(FailAfter { inner: s.into_backend(), writes_left: AtomicUsize::new(0) });
    assert!(s.apply(&txn(vec![], vec![put_op(b"b", b"1")], vec![]), b"log-4").is_err());
    let s = open(s.into_backend().inner);
    assert_eq!(s.applied().unwrap(), Some(b"log-3".to_vec()), "applied without its mutation");
    assert_eq!(get(&s, b"b", 0), None, "mutation without its applied bytes");
    assert_eq!(s.current_revision(), 1);
}
