//! The thread-safe history writer.

use std::sync::Arc;

use keelson_jepsen::formats::{load, Format};
use keelson_jepsen::history::{
    read_jsonl, EventKind, Function, HistoryEvent, HistoryWriter, Value,
};
use keelson_jepsen::linear::{check, ModelKind};

#[test]
fn concurrent_recording_is_ordered_and_checkable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("history.jsonl");
    let writer = Arc::new(HistoryWriter::create(&path).expect("create"));
    let register = Arc::new(std::sync::Mutex::new(Value::Nil));
    let threads: Vec<_> = (0..8u64)
        .map(|p| {
            let writer = Arc::clone(&writer);
            let register = Arc::clone(&register);
            std::thread::spawn(move || {
                for i in 0..200i64 {
                    let key = Some("r");
                    if i % 2 == 0 {
                        let v = Value::Int(p as i64 * 1000 + i);
                        writer
                            .invoke(p, Function::Write, key, v.clone())
                            .expect("invoke");
                        *register.lock().expect("lock") = v.clone();
                        writer
                            .complete(p, EventKind::Ok, Function::Write, key, v)
                            .expect("complete");
                    } else {
                        writer
                            .invoke(p, Function::Read, key, Value::Nil)
                            .expect("invoke");
                        let v = register.lock().expect("lock").clone();
                        writer
                            .complete(p, EventKind::Ok, Function::Read, key, v)
                            .expect("complete");
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("thread");
    }
    writer.flush().expect("flush");

    let events = read_jsonl(&path).expect("reads");
    assert_eq!(events.len(), 8 * 200 * 2);
    assert!(
        events.windows(2).all(|w| w[0].1.time <= w[1].1.time),
        "file order is time order"
    );
    let loaded = load(Format::Keelson, &path).expect("loads");
    let ops = loaded.operations().expect("pairs");
    assert_eq!(ops.len(), 1600);
    let report = check(ModelKind::CasRegister, &ops).expect("fits");
    assert!(report.is_linearizable(), "{report}");
}

#[test]
fn record_keeps_given_time_and_append_adds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("h.jsonl");
    {
        let writer = HistoryWriter::create(&path).expect("create");
        writer
            .record(&HistoryEvent::new(1, EventKind::Invoke, Function::Read, Value::Nil).at(42))
            .expect("record");
    }
    {
        let writer = HistoryWriter::append(&path).expect("append");
        writer
            .record(&HistoryEvent::new(1, EventKind::Ok, Function::Read, Value::Nil).at(43))
            .expect("record");
        writer.flush().expect("flush");
    }
    let events = read_jsonl(&path).expect("reads");
    assert_eq!(
        events.iter().map(|(l, e)| (*l, e.time)).collect::<Vec<_>>(),
        vec![(1, 42), (2, 43)]
    );
}
