//! Property test: random puts, deletes, transactions and compactions applied to the
//! MVCC store and to a naive reference model (a full snapshot per revision) must agree
//! on every response, every event, every read at every retained revision, and on
//! `events_since` (with filters and paging).

use std::collections::BTreeMap;

use keelson_mvcc::*;
use proptest::prelude::*;

const KEYS: [&[u8]; 6] = [b"a", b"a\0", b"b", b"ba", b"c", b"d"];

#[derive(Clone, Debug)]
enum GenOp {
    Put(usize, u8),
    Del(usize),
    DelRange(usize, usize),
    DelPrefix(usize),
    Range(usize, usize),
}

#[derive(Clone, Debug)]
enum GenCmd {
    Txn { compares: Vec<(usize, u8, CompareOp, i64)>, success: Vec<GenOp>, failure: Vec<GenOp> },
    Compact(i64),
}

fn key(i: usize) -> Vec<u8> {
    KEYS[i % KEYS.len()].to_vec()
}

fn range_of(a: usize, b: usize) -> KeyRange {
    match b % 4 {
        0 => KeyRange::single(key(a)),
        1 => KeyRange { key: key(a), range_end: vec![0] },
        _ => KeyRange { key: key(a), range_end: key(b) },
    }
}

fn to_op(g: &GenOp) -> Op {
    match g {
        GenOp::Put(k, v) => {
            Op::Put(PutRequest { key: key(*k), value: vec![*v], prev_kv: *v % 2 == 0 })
        }
        GenOp::Del(k) => {
            Op::DeleteRange(DeleteRangeRequest { range: KeyRange::single(key(*k)), prev_kv: true })
        }
        GenOp::DelRange(a, b) => {
            Op::DeleteRange(DeleteRangeRequest { range: range_of(*a, *b), prev_kv: false })
        }
        GenOp::DelPrefix(k) => {
            Op::DeleteRange(DeleteRangeRequest { range: KeyRange::prefix(key(*k)), prev_kv: true })
        }
        GenOp::Range(a, b) => {
            Op::Range(RangeRequest { range: range_of(*a, *b), ..Default::default() })
        }
    }
}

fn to_compare(&(k, t, op, n): &(usize, u8, CompareOp, i64)) -> Compare {
    let target = match t % 4 {
        0 => CompareTarget::Version(n),
        1 => CompareTarget::CreateRevision(n),
        2 => CompareTarget::ModRevision(n),
        _ => CompareTarget::Value(vec![n as u8]),
    };
    Compare { key: key(k), op, target }
}

fn gen_op() -> impl Strategy<Value = GenOp> {
    prop_oneof![
        4 => (0..6usize, 0..5u8).prop_map(|(k, v)| GenOp::Put(k, v)),
        1 => (0..6usize).prop_map(GenOp::Del),
        1 => (0..6usize, 0..6usize).prop_map(|(a, b)| GenOp::DelRange(a, b)),
        1 => (0..6usize).prop_map(GenOp::DelPrefix),
        1 => (0..6usize, 0..6usize).prop_map(|(a, b)| GenOp::Range(a, b)),
    ]
}

fn gen_cmd() -> impl Strategy<Value = GenCmd> {
    let cmp_op = prop_oneof![
        Just(CompareOp::Equal),
        Just(CompareOp::NotEqual),
        Just(CompareOp::Less),
        Just(CompareOp::Greater)
    ];
    prop_oneof![
        8 => (
            prop::collection::vec((0..6usize, 0..4u8, cmp_op, 0..4i64), 0..3),
            prop::collection::vec(gen_op(), 0..5),
            prop::collection::vec(gen_op(), 0..3),
        )
            .prop_map(|(compares, success, failure)| GenCmd::Txn { compares, success, failure }),
        1 => (0..6i64).prop_map(GenCmd::Compact),
    ]
}

/// The reference model: the full state at every revision, and each revision's events.
struct Model {
    snaps: Vec<BTreeMap<Vec<u8>, KeyValue>>,
    events: Vec<Vec<Event>>,
    compacted: Revision,
}

impl Model {
    fn current(&self) -> Revision {
        self.snaps.len() as Revision - 1
    }

    fn holds(&self, c: &Compare) -> bool {
        let kv = self.snaps.last().unwrap().get(&c.key);
        let ord = |a: i64, b: i64| a.cmp(&b);
        let o = match &c.target {
            CompareTarget::Version(n) => ord(kv.map_or(0, |k| k.version), *n),
            CompareTarget::CreateRevision(n) => ord(kv.map_or(0, |k| k.create_revision), *n),
            CompareTarget::ModRevision(n) => ord(kv.map_or(0, |k| k.mod_revision), *n),
            CompareTarget::Value(v) => match kv {
                None => return false,
                Some(k) => k.value.cmp(v),
            },
        };
        match c.op {
            CompareOp::Equal => o.is_eq(),
            CompareOp::NotEqual => o.is_ne(),
            CompareOp::Less => o.is_lt(),
            CompareOp::Greater => o.is_gt(),
        }
    }

    fn apply(&mut self, cmd: &Command) -> (CommandResponse, Vec<Event>, Revision) {
        let cur = self.current();
        match cmd {
            Command::Compact { revision } => {
                let r = *revision;
                if r > cur {
                    (
                        CommandResponse::Rejected(RejectReason::FutureRevision { current: cur }),
                        vec![],
                        cur,
                    )
                } else if r < self.compacted {
                    let c = self.compacted;
                    (
                        CommandResponse::Rejected(RejectReason::Compacted { compacted: c }),
                        vec![],
                        cur,
                    )
                } else {
                    self.compacted = r;
                    (CommandResponse::Compacted { revision: r }, vec![], cur)
                }
            }
            Command::Txn(t) => {
                let ok = t.compare.iter().all(|c| self.holds(c));
                let ops = if ok { &t.success } else { &t.failure };
                let puts: Vec<&Vec<u8>> = ops
                    .iter()
                    .filter_map(|o| if let Op::Put(p) = o { Some(&p.key) } else { None })
                    .collect();
                let dup = puts.iter().enumerate().any(|(i, k)| puts[..i].contains(k));
                let overlap = ops.iter().any(
                    |o| matches!(o, Op::DeleteRange(d) if puts.iter().any(|k| d.range.contains(k))),
                );
                if dup || overlap {
                    let r = CommandResponse::Rejected(RejectReason::InvalidTxn(String::new()));
                    return (r, vec![], cur);
                }
                let mut state = self.snaps.last().unwrap().clone();
                let new_rev = cur + 1;
                let mut events = Vec::new();
                let mut responses = Vec::new();
                for op in ops {
                    match op {
                        Op::Put(p) => {
                            let prev = state.get(&p.key).cloned();
                            let kv = KeyValue {
                                key: p.key.clone(),
                                value: p.value.clone(),
                                create_revision: prev
                                    .as_ref()
                                    .map_or(new_rev, |k| k.create_revision),
                                mod_revision: new_rev,
                                version: prev.as_ref().map_or(1, |k| k.version + 1),
                            };
                            state.insert(p.key.clone(), kv.clone());
                            responses.push(OpResponse::Put(PutResponse {
                                prev_kv: if p.prev_kv { prev.clone() } else { None },
                            }));
                            events.push(Event { kind: EventKind::Put, kv, prev_kv: prev });
                        }
                        Op::DeleteRange(d) => {
                            let victims: Vec<KeyValue> = state
                                .values()
                                .filter(|kv| d.range.contains(&kv.key))
                                .cloned()
                                .collect();
                            for v in &victims {
                                state.remove(&v.key);
                                let kv = KeyValue {
                                    key: v.key.clone(),
                                    value: vec![],
                                    create_revision: 0,
                                    mod_revision: new_rev,
                                    version: 0,
                                };
                                events.push(Event {
                                    kind: EventKind::Delete,
                                    kv,
                                    prev_kv: Some(v.clone()),
                                });
                            }
                            responses.push(OpResponse::DeleteRange(DeleteRangeResponse {
                                deleted: victims.len() as i64,
                                prev_kvs: if d.prev_kv { victims } else { vec![] },
                            }));
                        }
                        Op::Range(r) => {
                            let kvs: Vec<KeyValue> = state
                                .values()
                                .filter(|kv| r.range.contains(&kv.key))
                                .cloned()
                                .collect();
                            responses.push(OpResponse::Range(RangeResponse {
                                count: kvs.len() as i64,
                                kvs,
                                more: false,
                            }));
                        }
                    }
                }
                let revision = if events.is_empty() { cur } else { new_rev };
                if !events.is_empty() {
                    self.snaps.push(state);
                    self.events.push(events.clone());
                }
                (
                    CommandResponse::Txn(TxnResponse { succeeded: ok, responses, revision }),
                    events,
                    revision,
                )
            }
        }
    }
}

fn normalize(r: CommandResponse) -> CommandResponse {
    match r {
        CommandResponse::Rejected(RejectReason::InvalidTxn(_)) => {
            CommandResponse::Rejected(RejectReason::InvalidTxn(String::new()))
        }
        other => other,
    }
}

fn check_reads(store: &MvccStore<MemBackend>, model: &Model) -> Result<(), TestCaseError> {
    let cur = model.current();
    prop_assert_eq!(store.current_revision(), cur);
    prop_assert_eq!(store.compacted_revision(), model.compacted);
    let ranges = [
        KeyRange { key: vec![], range_end: vec![0] },
        KeyRange::prefix("a"),
        KeyRange::single("b"),
        KeyRange { key: b"a\0".to_vec(), range_end: b"c".to_vec() },
    ];
    for rev in 1..=cur {
        for (i, range) in ranges.iter().enumerate() {
            let req = RangeRequest {
                range: range.clone(),
                revision: rev,
                limit: (i as u64) % 3,
                ..Default::default()
            };
            let res = store.range(&req);
            if rev < model.compacted {
                let compacted = matches!(res, Err(MvccError::Compacted { .. }));
                prop_assert!(compacted, "read at {} below {}", rev, model.compacted);
                continue;
            }
            let (resp, header) = res.map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(header, cur);
            let all: Vec<KeyValue> = model.snaps[rev as usize]
                .values()
                .filter(|kv| range.contains(&kv.key))
                .cloned()
                .collect();
            let limit = req.limit as usize;
            let want: Vec<KeyValue> =
                if limit == 0 { all.clone() } else { all.iter().take(limit).cloned().collect() };
            prop_assert_eq!(&resp.kvs, &want, "range {:?} at {}", range, rev);
            prop_assert_eq!(resp.count, all.len() as i64);
            prop_assert_eq!(resp.more, limit > 0 && all.len() > limit);
        }
    }
    let start = model.compacted + 1;
    for (i, range) in ranges.iter().enumerate() {
        let want: Vec<Event> = model.events[start as usize..]
            .iter()
            .flatten()
            .filter(|e| range.contains(&e.kv.key))
            .cloned()
            .collect();
        // Paged reads must concatenate to the full list, never splitting a revision.
        let max = i % 3;
        let mut got = Vec::new();
        let mut next = start;
        loop {
            let page = store
                .events_since(next, range, true, max)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(page.current_revision, cur);
            if page.events.is_empty() {
                prop_assert_eq!(page.next_revision, cur + 1);
                break;
            }
            prop_assert!(page.next_revision > next);
            let first_rev = page.events[0].kv.mod_revision;
            if max > 0 && page.events.len() > max {
                prop_assert!(page.events.iter().all(|e| e.kv.mod_revision == first_rev));
            }
            prop_assert!(page.events.iter().all(|e| e.kv.mod_revision < page.next_revision));
            next = page.next_revision;
            got.extend(page.events);
        }
        prop_assert_eq!(got, want, "events_since({}) on {:?}", start, range);
    }
    if model.compacted > 0 {
        let compacted = matches!(
            store.events_since(model.compacted, &ranges[0], false, 0),
            Err(MvccError::Compacted { .. })
        );
        prop_assert!(compacted);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn store_matches_reference_model(cmds in prop::collection::vec(gen_cmd(), 1..40)) {
        let store = MvccStore::open(MemBackend::new()).unwrap();
        let mut model = Model { snaps: vec![BTreeMap::new()], events: vec![vec![]], compacted: 0 };
        for (i, g) in cmds.iter().enumerate() {
            let cmd = match g {
                GenCmd::Txn { compares, success, failure } => Command::Txn(TxnRequest {
                    compare: compares.iter().map(to_compare).collect(),
                    success: success.iter().map(to_op).collect(),
                    failure: failure.iter().map(to_op).collect(),
                }),
                GenCmd::Compact(back) => Command::Compact { revision: model.current() - back + 1 },
            };
            let applied = store.apply(&cmd, format!("entry-{i}").as_bytes()).unwrap();
            let (resp, events, rev) = model.apply(&cmd);
            prop_assert_eq!(normalize(applied.response), resp, "command {}: {:?}", i, cmd);
            prop_assert_eq!(applied.events, events, "command {}", i);
            prop_assert_eq!(applied.revision, rev);
            prop_assert_eq!(store.applied().unwrap(), Some(format!("entry-{i}").into_bytes()));
            check_reads(&store, &model)?;
        }
        // A round trip through export/import and a reopen change nothing.
        let mut pairs = Vec::new();
        store.export(&mut |k, v| { pairs.push((k.to_vec(), v.to_vec())); Ok(()) }).unwrap();
        let copy = MvccStore::open(MemBackend::new()).unwrap();
        copy.import(&mut pairs.into_iter().map(Ok)).unwrap();
        let copy = MvccStore::open(copy.into_backend()).unwrap();
        check_reads(&copy, &model)?;
        // Compacting everything leaves exactly one history entry per live key and no
        // revision log: nothing superseded survives any sequence of compactions.
        let cur = model.current();
        if cur >= model.compacted {
            let a = store.apply(&Command::Compact { revision: cur }, b"final").unwrap();
            prop_assert_eq!(a.response, CommandResponse::Compacted { revision: cur });
            let (mut hist, mut revlog) = (0, 0);
            store
                .export(&mut |k, _| {
                    hist += k.starts_with(b"h/") as usize;
                    revlog += k.starts_with(b"r/") as usize;
                    Ok(())
                })
                .unwrap();
            prop_assert_eq!((hist, revlog), (model.snaps[cur as usize].len(), 0));
        }
    }
}

fn dump(store: &MvccStore<MemBackend>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut pairs = Vec::new();
    store
        .export(&mut |k, v| {
            pairs.push((k.to_vec(), v.to_vec()));
            Ok(())
        })
        .unwrap();
    pairs
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Applying entries in batches (`apply_batch`, with command-less entries mixed in)
    /// gives the same responses, events and final state as applying them one by one.
    #[test]
    fn batched_apply_equals_one_by_one(
        cmds in prop::collection::vec(gen_cmd(), 1..40),
        blanks in prop::collection::vec(any::<bool>(), 40),
        cuts in prop::collection::vec(1..8usize, 1..40),
    ) {
        let one = MvccStore::open(MemBackend::new()).unwrap();
        // Fix the commands (compaction targets depend on the revision reached so far).
        let mut entries: Vec<(Option<Command>, Vec<u8>)> = Vec::new();
        let mut expected: Vec<Option<Applied>> = Vec::new();
        for (i, g) in cmds.iter().enumerate() {
            if blanks[i] {
                let applied = format!("blank-{i}").into_bytes();
                one.set_applied(&applied).unwrap();
                entries.push((None, applied));
                expected.push(None);
            }
            let cmd = match g {
                GenCmd::Txn { compares, success, failure } => Command::Txn(TxnRequest {
                    compare: compares.iter().map(to_compare).collect(),
                    success: success.iter().map(to_op).collect(),
                    failure: failure.iter().map(to_op).collect(),
                }),
                GenCmd::Compact(back) => Command::Compact { revision: one.current_revision() - back + 1 },
            };
            let applied = format!("entry-{i}").into_bytes();
            expected.push(Some(one.apply(&cmd, &applied).unwrap()));
            entries.push((Some(cmd), applied));
        }
        let batched = MvccStore::open(MemBackend::new()).unwrap();
        let mut got: Vec<Option<Applied>> = Vec::new();
        let mut start = 0;
        let mut c = 0;
        while start < entries.len() {
            let end = (start + cuts[c % cuts.len()]).min(entries.len());
            c += 1;
            let run: Vec<(Option<&Command>, &[u8])> =
                entries[start..end].iter().map(|(cmd, a)| (cmd.as_ref(), a.as_slice())).collect();
            got.extend(batched.apply_batch(&run).unwrap());
            prop_assert_eq!(batched.applied().unwrap(), Some(entries[end - 1].1.clone()));
            start = end;
        }
        prop_assert_eq!(got.len(), expected.len());
        for (i, (g, e)) in got.into_iter().zip(expected).enumerate() {
            match (g, e) {
                (None, None) => {}
                (Some(g), Some(e)) => {
                    prop_assert_eq!(g.response, e.response, "entry {}", i);
                    prop_assert_eq!(g.events, e.events, "entry {}", i);
                    prop_assert_eq!(g.revision, e.revision, "entry {}", i);
                }
                (g, e) => prop_assert!(false, "entry {}: {:?} vs {:?}", i, g.is_some(), e.is_some()),
            }
        }
        prop_assert_eq!(batched.current_revision(), one.current_revision());
        prop_assert_eq!(batched.compacted_revision(), one.compacted_revision());
        prop_assert_eq!(dump(&batched), dump(&one));
    }
}
