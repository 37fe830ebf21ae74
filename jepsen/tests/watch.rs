//! Hand-made watch streams for the watch checker.

use keelson_jepsen::history::{ChangeKind, EventKind, Function, HistoryEvent, Value};
use keelson_jepsen::watch::{check_watch, KeyRange, WatchError, WatchReport, WatchViolation};

#[derive(Default)]
struct H {
    events: Vec<HistoryEvent>,
    t: u64,
}

impl H {
    fn push(&mut self, mut e: HistoryEvent) -> &mut Self {
        self.t += 10;
        e.time = self.t;
        self.events.push(e);
        self
    }

    /// An acknowledged put committed at `rev`.
    fn put(&mut self, p: u64, key: &str, value: &str, rev: u64) -> &mut Self {
        self.put_outcome(p, key, value, EventKind::Ok, Some(rev))
    }

    fn put_outcome(
        &mut self,
        p: u64,
        key: &str,
        value: &str,
        kind: EventKind,
        rev: Option<u64>,
    ) -> &mut Self {
        self.push(
            HistoryEvent::new(p, EventKind::Invoke, Function::Put, Value::str(value)).with_key(key),
        );
        let mut done = HistoryEvent::new(p, kind, Function::Put, Value::str(value)).with_key(key);
        done.revision = rev;
        self.push(done)
    }

    fn watch(
        &mut self,
        w: u64,
        key: &str,
        range_end: Option<&str>,
        start: Option<u64>,
    ) -> &mut Self {
        let mut e = HistoryEvent::new(100 + w, EventKind::Ok, Function::Watch, Value::Nil)
            .with_key(key)
            .with_watcher(w);
        e.range_end = range_end.map(str::to_owned);
        e.revision = start;
        self.push(e)
    }

    fn ev(&mut self, w: u64, key: &str, value: &str, rev: u64) -> &mut Self {
        let mut e = HistoryEvent::new(
            100 + w,
            EventKind::Ok,
            Function::WatchEvent,
            Value::str(value),
        )
        .with_key(key)
        .with_watcher(w)
        .with_revision(rev);
        e.event = Some(ChangeKind::Put);
        self.push(e)
    }

    fn resume(&mut self, w: u64, rev: u64) -> &mut Self {
        self.push(
            HistoryEvent::new(100 + w, EventKind::Ok, Function::WatchResume, Value::Nil)
                .with_watcher(w)
                .with_revision(rev),
        )
    }

    fn progress(&mut self, w: u64, rev: u64) -> &mut Self {
        self.push(
            HistoryEvent::new(100 + w, EventKind::Ok, Function::WatchProgress, Value::Nil)
                .with_watcher(w)
                .with_revision(rev),
        )
    }

    fn check(&self) -> WatchReport {
        check_watch(&self.events).expect("well-formed")
    }
}

/// Three acknowledged writes to "a" at revisions 2, 3, 4.
fn three_writes() -> H {
    let mut h = H::default();
    h.put(1, "a", "v2", 2)
        .put(1, "a", "v3", 3)
        .put(1, "a", "v4", 4);
    h
}

#[test]
fn valid_streams() {
    let mut h = three_writes();
    h.put(2, "b", "b5", 5);
    h.watch(1, "a", None, Some(1))
        .watch(2, "a", Some("c"), Some(1));
    h.ev(1, "a", "v2", 2)
        .ev(2, "a", "v2", 2)
        .ev(1, "a", "v3", 3)
        .ev(2, "a", "v3", 3);
    h.ev(1, "a", "v4", 4)
        .ev(2, "a", "v4", 4)
        .ev(2, "b", "b5", 5)
        .progress(1, 5);
    let report = h.check();
    assert!(report.is_valid(), "{report}");
    assert_eq!(
        (
            report.watchers,
            report.events,
            report.ok_writes,
            report.committed
        ),
        (2, 7, 4, 4)
    );
}

#[test]
fn several_keys_in_one_revision_any_key_order() {
    let mut h = H::default();
    h.put(1, "a", "x", 7).put(2, "b", "y", 7);
    h.watch(1, "a", Some("z"), Some(6))
        .ev(1, "b", "y", 7)
        .ev(1, "a", "x", 7);
    assert!(h.check().is_valid());
}

#[test]
fn gap_against_another_watcher() {
    let mut h = H::default();
    h.put(1, "a", "v2", 2);
    h.put_outcome(1, "a", "v3", EventKind::Info, None);
    h.put(2, "a", "v4", 4);
    h.watch(1, "a", None, Some(1)).watch(2, "a", None, Some(1));
    h.ev(1, "a", "v2", 2)
        .ev(1, "a", "v3", 3)
        .ev(1, "a", "v4", 4);
    h.ev(2, "a", "v2", 2).ev(2, "a", "v4", 4);
    let report = h.check();
    assert_eq!(
        report.violations,
        vec![WatchViolation::Gap {
            watcher: 2,
            revision: 3,
            key: "a".into(),
            window: (1, 4)
        }],
        "{report}"
    );
}

#[test]
fn indeterminate_write_may_be_invisible() {
    let mut h = H::default();
    h.put(1, "a", "v2", 2);
    h.put_outcome(1, "a", "lost", EventKind::Info, None);
    h.watch(1, "a", None, Some(1))
        .ev(1, "a", "v2", 2)
        .progress(1, 9);
    assert!(h.check().is_valid());
}

#[test]
fn missing_acknowledged_write() {
    let mut h = three_writes();
    h.watch(1, "a", None, Some(1))
        .ev(1, "a", "v2", 2)
        .ev(1, "a", "v4", 4);
    let report = h.check();
    assert_eq!(
        report.violations,
        vec![WatchViolation::MissingAckedWrite {
            watcher: 1,
            revision: 3,
            key: "a".into()
        }]
    );
}

#[test]
fn bookmark_extends_the_window() {
    let mut h = three_writes();
    h.watch(1, "a", None, Some(1))
        .ev(1, "a", "v2", 2)
        .progress(1, 4);
    let report = h.check();
    assert_eq!(report.violations.len(), 2, "{report}");
    assert!(report.violations.iter().all(|v| matches!(
        v,
        WatchViolation::MissingAckedWrite {
            watcher: 1,
            revision: 3 | 4,
            ..
        }
    )));
    // Without the bookmark the stream simply has not reached 3 yet.
    let mut h = three_writes();
    h.watch(1, "a", None, Some(1)).ev(1, "a", "v2", 2);
    assert!(h.check().is_valid());
}

#[test]
fn duplicate_event() {
    let mut h = three_writes();
    h.watch(1, "a", None, Some(1))
        .ev(1, "a", "v2", 2)
        .ev(1, "a", "v2", 2)
        .ev(1, "a", "v3", 3)
        .ev(1, "a", "v4", 4);
    assert_eq!(
        h.check().violations,
        vec![WatchViolation::Duplicate {
            watcher: 1,
            revision: 2,
            key: "a".into()
        }]
    );
}

#[test]
fn out_of_order_event() {
    let mut h = three_writes();
    h.watch(1, "a", None, Some(1))
        .ev(1, "a", "v3", 3)
        .ev(1, "a", "v2", 2)
        .ev(1, "a", "v4", 4);
    assert_eq!(
        h.check().violations,
        vec![WatchViolation::OutOfOrder {
            watcher: 1,
            revision: 2,
            key: "a".into(),
            after: 3
        }]
    );
    let mut h = three_writes();
    h.watch(1, "a", None, Some(1))
        .ev(1, "a", "v2", 2)
        .progress(1, 3)
        .ev(1, "a", "v3", 3)
        .ev(1, "a", "v4", 4);
    assert!(matches!(
        h.check().violations[..],
        [WatchViolation::OutOfOrder {
            revision: 3,
            after: 3,
            ..
        }]
    ));
}

#[test]
fn disagreement_between_watchers() {
    let mut h = H::default();
    h.put_outcome(1, "a", "x", EventKind::Info, None);
    h.put_outcome(2, "a", "y", EventKind::Info, None);
    h.watch(1, "a", None, Some(1)).watch(2, "a", None, Some(1));
    h.ev(1, "a", "x", 2).ev(2, "a", "y", 2);
    let report = h.check();
    assert!(
        matches!(
            &report.violations[..],
            [WatchViolation::Disagreement { revision: 2, .. }]
        ),
        "{report}"
    );
}

#[test]
fn disagreement_with_acknowledged_write() {
    let mut h = three_writes();
    h.put_outcome(2, "a", "other", EventKind::Info, None);
    h.watch(1, "a", None, Some(1))
        .ev(1, "a", "v2", 2)
        .ev(1, "a", "other", 3)
        .ev(1, "a", "v4", 4);
    assert!(matches!(
        h.check().violations[..],
        [WatchViolation::Disagreement { revision: 3, .. }]
    ));
}

#[test]
fn loss_across_resumption() {
    let mut h = three_writes();
    h.put(1, "a", "v5", 5);
    h.watch(1, "a", None, Some(1))
        .ev(1, "a", "v2", 2)
        .resume(1, 3)
        .ev(1, "a", "v4", 4)
        .ev(1, "a", "v5", 5);
    let report = h.check();
    assert_eq!(
        report.violations,
        vec![WatchViolation::LostAcrossResume {
            watcher: 1,
            revision: 3,
            key: "a".into(),
            reached: 2,
            resumed_after: 3
        }],
        "{report}"
    );
    // Resuming after the last delivered revision loses nothing, and a
    // resumed stream must deliver everything after its resume point.
    let mut h = three_writes();
    h.watch(1, "a", None, Some(1))
        .ev(1, "a", "v2", 2)
        .resume(1, 2)
        .ev(1, "a", "v3", 3)
        .ev(1, "a", "v4", 4);
    assert!(h.check().is_valid());
    let mut h = three_writes();
    h.watch(1, "a", None, Some(1))
        .ev(1, "a", "v2", 2)
        .resume(1, 2)
        .ev(1, "a", "v4", 4);
    assert!(matches!(
        h.check().violations[..],
        [WatchViolation::MissingAckedWrite { revision: 3, .. }]
    ));
}

#[test]
fn redelivery_after_earlier_resume_point() {
    let mut h = three_writes();
    h.watch(1, "a", None, Some(1))
        .ev(1, "a", "v2", 2)
        .ev(1, "a", "v3", 3);
    h.resume(1, 2).ev(1, "a", "v3", 3).ev(1, "a", "v4", 4);
    assert!(h.check().is_valid());
    let mut h = three_writes();
    h.watch(1, "a", None, Some(1))
        .ev(1, "a", "v2", 2)
        .resume(1, 2)
        .ev(1, "a", "v2", 2)
        .ev(1, "a", "v3", 3);
    assert!(matches!(
        h.check().violations[..],
        [WatchViolation::BeforeStart {
            revision: 2,
            start: 2,
            ..
        }]
    ));
}

#[test]
fn event_outside_filter() {
    let mut h = H::default();
    h.put(1, "b", "x", 2);
    h.watch(1, "a", None, Some(1)).ev(1, "b", "x", 2);
    assert!(matches!(
        h.check().violations[..],
        [WatchViolation::OutsideFilter { revision: 2, .. }]
    ));
}

#[test]
fn failed_and_phantom_writes() {
    let mut h = H::default();
    h.put_outcome(1, "a", "failed", EventKind::Fail, None);
    h.put(1, "a", "v3", 3);
    h.watch(1, "a", None, Some(1))
        .ev(1, "a", "failed", 2)
        .ev(1, "a", "v3", 3)
        .ev(1, "a", "ghost", 4);
    let report = h.check();
    assert!(
        matches!(
            report.violations[..],
            [
                WatchViolation::FailedWriteObserved { revision: 2, .. },
                WatchViolation::Phantom { revision: 4, .. }
            ]
        ),
        "{report}"
    );
}

#[test]
fn deletes_and_prefix_ranges() {
    let mut h = H::default();
    h.put(1, "/reg/a", "1", 2);
    h.push(
        HistoryEvent::new(1, EventKind::Invoke, Function::Delete, Value::Nil).with_key("/reg/a"),
    );
    h.push(
        HistoryEvent::new(1, EventKind::Ok, Function::Delete, Value::Nil)
            .with_key("/reg/a")
            .with_revision(3),
    );
    h.put(1, "/other", "x", 4);
    let range = KeyRange::prefix("/reg/");
    assert!(range.contains("/reg/a") && !range.contains("/other") && !range.contains("/reg0"));
    h.watch(1, &range.start, range.end.as_deref(), Some(1))
        .ev(1, "/reg/a", "1", 2);
    let mut del = HistoryEvent::new(101, EventKind::Ok, Function::WatchEvent, Value::Nil)
        .with_key("/reg/a")
        .with_watcher(1)
        .with_revision(3);
    del.event = Some(ChangeKind::Delete);
    h.push(del).progress(1, 4);
    let report = h.check();
    assert!(report.is_valid(), "{report}");
}

#[test]
fn malformed_watch_input() {
    let mut h = H::default();
    h.ev(7, "a", "x", 2);
    assert!(matches!(
        check_watch(&h.events),
        Err(WatchError::UnknownWatcher {
            watcher: 7,
            event: 0
        })
    ));
    let mut h = H::default();
    h.watch(1, "a", None, None);
    h.push(
        HistoryEvent::new(101, EventKind::Ok, Function::WatchEvent, Value::str("x"))
            .with_key("a")
            .with_watcher(1),
    );
    assert!(matches!(
        check_watch(&h.events),
        Err(WatchError::MissingField {
            field: "revision",
            event: 1,
            ..
        })
    ));
    let mut h = H::default();
    h.watch(1, "a", None, None).watch(1, "a", None, None);
    assert!(matches!(
        check_watch(&h.events),
        Err(WatchError::WatcherRestarted { .. })
    ));
}
