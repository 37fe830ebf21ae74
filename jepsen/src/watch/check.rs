//! The watch checker's algorithm (see the module docs of [`super`]).

use std::collections::{BTreeMap, HashMap, HashSet};

use super::{Change, KeyRange, Source, WatchError, WatchReport, WatchViolation};
use crate::history::{ChangeKind, EventKind, Function, HistoryEvent, Value};
use crate::ops::{pair_events, Outcome};

/// Part of a watcher's stream between a start/resume and the next resume.
#[derive(Default)]
struct Segment {
    /// Changes with revision > `start` are expected.
    start: Option<u64>,
    /// Revision of the first delivered event.
    first_event: Option<u64>,
    /// Highest revision delivered or bookmarked.
    high: Option<u64>,
    /// Highest revision delivered.
    last_event: Option<u64>,
    /// Highest bookmark.
    progress: Option<u64>,
    /// (revision, key) delivered in this segment.
    observed: HashSet<(u64, String)>,
}

impl Segment {
    /// Exclusive low end of the observed window.
    fn low(&self) -> Option<u64> {
        self.start.or(self.first_event.map(|r| r.saturating_sub(1)))
    }

    /// Observed window (low exclusive, high inclusive), if not empty.
    fn window(&self) -> Option<(u64, u64)> {
        let (lo, hi) = (self.low()?, self.high?);
        (hi > lo).then_some((lo, hi))
    }
}

struct Watcher {
    range: KeyRange,
    segments: Vec<Segment>,
}

type Committed = BTreeMap<u64, BTreeMap<String, (Change, Source)>>;

struct State {
    committed: Committed,
    disagreed: HashSet<(u64, String)>,
    violations: Vec<WatchViolation>,
}

impl State {
    fn commit(&mut self, revision: u64, key: &str, change: Change, source: Source) {
        let at = self.committed.entry(revision).or_default();
        match at.get(key) {
            None => {
                at.insert(key.to_owned(), (change, source));
            }
            Some((existing, first)) => {
                if *existing != change && self.disagreed.insert((revision, key.to_owned())) {
                    self.violations.push(WatchViolation::Disagreement {
                        revision,
                        key: key.to_owned(),
                        first: (*first, existing.clone()),
                        second: (source, change),
                    });
                }
            }
        }
    }
}

fn need<T>(
    value: Option<T>,
    event: usize,
    f: Function,
    field: &'static str,
) -> Result<T, WatchError> {
    value.ok_or(WatchError::MissingField {
        event,
        f: f.name(),
        field,
    })
}

fn change_of(f: Function, value: &Value) -> Option<Change> {
    match f {
        Function::Put | Function::Write => Some(Change {
            kind: ChangeKind::Put,
            value: value.clone(),
        }),
        Function::Delete => Some(Change {
            kind: ChangeKind::Delete,
            value: Value::Nil,
        }),
        _ => None,
    }
}

/// Checks a watch-workload history (events in any order; they are sorted by
/// time). Returns the violations found, or an error for malformed input.
pub fn check_watch(events: &[HistoryEvent]) -> Result<WatchReport, WatchError> {
    let mut report = WatchReport::default();
    let mut st = State {
        committed: BTreeMap::new(),
        disagreed: HashSet::new(),
        violations: Vec::new(),
    };

    // Writes, and which outcomes each (key, change) was written with.
    let ops = pair_events(events)?;
    let mut written: HashMap<(String, Change), Vec<Outcome>> = HashMap::new();
    let mut acked: Vec<(u64, String)> = Vec::new();
    for op in &ops {
        let (Some(change), Some(key)) = (change_of(op.f, &op.value), op.key.as_ref()) else {
            continue;
        };
        written
            .entry((key.clone(), change.clone()))
            .or_default()
            .push(op.outcome);
        match op.outcome {
            Outcome::Ok => {
                report.ok_writes += 1;
                let revision = op.complete_event.and_then(|e| events[e].revision);
                match revision {
                    Some(r) => {
                        st.commit(
                            r,
                            key,
                            change,
                            Source::Write {
                                process: op.process,
                            },
                        );
                        acked.push((r, key.clone()));
                    }
                    None => report.ok_writes_without_revision += 1,
                }
            }
            Outcome::Info => report.indeterminate_writes += 1,
            Outcome::Fail => report.failed_writes += 1,
        }
    }

    // Watcher streams, in time order.
    let mut order: Vec<usize> = (0..events.len())
        .filter(|&i| events[i].f.is_watch_observation() && events[i].kind == EventKind::Ok)
        .collect();
    order.sort_by_key(|&i| events[i].time);
    let mut watchers: BTreeMap<u64, Watcher> = BTreeMap::new();
    let mut provenance_reported: HashSet<(u64, String)> = HashSet::new();
    for i in order {
        let e = &events[i];
        let id = need(e.watcher, i, e.f, "watcher")?;
        if e.f == Function::Watch {
            if watchers.contains_key(&id) {
                return Err(WatchError::WatcherRestarted {
                    event: i,
                    watcher: id,
                });
            }
            let start = need(e.key.clone(), i, e.f, "key")?;
            let range = KeyRange {
                start,
                end: e.range_end.clone(),
            };
            let segment = Segment {
                start: e.revision,
                ..Segment::default()
            };
            watchers.insert(
                id,
                Watcher {
                    range,
                    segments: vec![segment],
                },
            );
            continue;
        }
        let watcher = watchers.get_mut(&id).ok_or(WatchError::UnknownWatcher {
            event: i,
            watcher: id,
        })?;
        let revision = need(e.revision, i, e.f, "revision")?;
        match e.f {
            Function::WatchResume => {
                watcher.segments.push(Segment {
                    start: Some(revision),
                    ..Segment::default()
                });
            }
            Function::WatchProgress => {
                if let Some(seg) = watcher.segments.last_mut() {
                    seg.progress = seg.progress.max(Some(revision));
                    seg.high = seg.high.max(Some(revision));
                }
            }
            _ => {
                let key = need(e.key.clone(), i, e.f, "key")?;
                let kind = need(e.event, i, e.f, "event")?;
                let value = if kind == ChangeKind::Put {
                    e.value.clone()
                } else {
                    Value::Nil
                };
                let change = Change { kind, value };
                report.events += 1;
                let Some(seg) = watcher.segments.last_mut() else {
                    continue;
                };
                let (w, r) = (id, revision);
                if !watcher.range.contains(&key) {
                    st.violations.push(WatchViolation::OutsideFilter {
                        watcher: w,
                        revision: r,
                        key: key.clone(),
                    });
                }
                if seg.observed.contains(&(r, key.clone())) {
                    st.violations.push(WatchViolation::Duplicate {
                        watcher: w,
                        revision: r,
                        key: key.clone(),
                    });
                } else if let Some(start) = seg.start.filter(|&s| r <= s) {
                    st.violations.push(WatchViolation::BeforeStart {
                        watcher: w,
                        revision: r,
                        key: key.clone(),
                        start,
                    });
                } else if let Some(after) = seg
                    .progress
                    .filter(|&p| r <= p)
                    .or(seg.last_event.filter(|&l| r < l))
                {
                    st.violations.push(WatchViolation::OutOfOrder {
                        watcher: w,
                        revision: r,
                        key: key.clone(),
                        after,
                    });
                }
                seg.observed.insert((r, key.clone()));
                seg.first_event = seg.first_event.or(Some(r));
                seg.last_event = seg.last_event.max(Some(r));
                seg.high = seg.high.max(Some(r));
                if !written.is_empty() && provenance_reported.insert((r, key.clone())) {
                    let outcomes = written.get(&(key.clone(), change.clone()));
                    match outcomes {
                        None => st.violations.push(WatchViolation::Phantom {
                            watcher: w,
                            revision: r,
                            key: key.clone(),
                            value: change.value.clone(),
                        }),
                        Some(o) if o.iter().all(|&x| x == Outcome::Fail) => {
                            st.violations.push(WatchViolation::FailedWriteObserved {
                                watcher: w,
                                revision: r,
                                key: key.clone(),
                                value: change.value.clone(),
                            })
                        }
                        Some(_) => {}
                    }
                }
                st.commit(r, &key, change, Source::Watcher(w));
            }
        }
    }
    report.watchers = watchers.len();
    report.committed = st.committed.values().map(BTreeMap::len).sum();

    let mut missing: HashSet<(u64, u64, String)> = HashSet::new();
    for (&w, watcher) in &watchers {
        let mut reached: Option<u64> = None;
        for (n, seg) in watcher.segments.iter().enumerate() {
            // Holes between what earlier segments reached and a resume point.
            let hole = match (n > 0, reached, seg.start) {
                (true, Some(reached), Some(resumed_after)) if resumed_after > reached => {
                    Some((reached, resumed_after))
                }
                _ => None,
            };
            if let Some((reached, resumed_after)) = hole {
                for (&r, changes) in st.committed.range(reached + 1..=resumed_after) {
                    for key in changes.keys().filter(|k| watcher.range.contains(k)) {
                        if missing.insert((w, r, key.clone())) {
                            st.violations.push(WatchViolation::LostAcrossResume {
                                watcher: w,
                                revision: r,
                                key: key.clone(),
                                reached,
                                resumed_after,
                            });
                        }
                    }
                }
            }
            if let Some((lo, hi)) = seg.window() {
                for (&r, changes) in st.committed.range(lo + 1..=hi) {
                    for (key, (_, source)) in
                        changes.iter().filter(|(k, _)| watcher.range.contains(k))
                    {
                        if seg.observed.contains(&(r, key.clone()))
                            || !missing.insert((w, r, key.clone()))
                        {
                            continue;
                        }
                        st.violations.push(match source {
                            Source::Write { .. } => WatchViolation::MissingAckedWrite {
                                watcher: w,
                                revision: r,
                                key: key.clone(),
                            },
                            Source::Watcher(_) => WatchViolation::Gap {
                                watcher: w,
                                revision: r,
                                key: key.clone(),
                                window: (lo, hi),
                            },
                        });
                    }
                }
            }
            reached = reached.max(seg.high).max(seg.low());
        }
        // Acknowledged writes inside the watcher's overall span.
        let begin = watcher.segments.first().and_then(Segment::low);
        let end = watcher.segments.iter().filter_map(|s| s.high).max();
        if let (Some(begin), Some(end)) = (begin, end) {
            for (r, key) in &acked {
                let covered = *r > begin && *r <= end && watcher.range.contains(key);
                let seen = watcher
                    .segments
                    .iter()
                    .any(|s| s.observed.contains(&(*r, key.clone())));
                if covered && !seen && missing.insert((w, *r, key.clone())) {
                    st.violations.push(WatchViolation::MissingAckedWrite {
                        watcher: w,
                        revision: *r,
                        key: key.clone(),
                    });
                }
            }
        }
    }
    report.violations = st.violations;
    Ok(report)
}
