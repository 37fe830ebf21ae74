//! Checker for Keelson's watch workload.
//!
//! # Recording (JSON Lines, see [`crate::history`])
//! * Writes are ordinary client operations: `invoke` / `ok` / `fail` /
//!   `info` of `f` = `put` (with `value`) or `delete`, with a `key`; the `ok`
//!   completion carries the commit `revision`.
//! * Watcher observations are single `ok` events with a `watcher` id:
//!   - `watch`: the watcher starts; its filter is `key` alone, or the range
//!     [`key`, `range_end`) (`range_end` = `"\u0000"`: every key from `key`
//!     on); an optional `revision` R means it will deliver every change with
//!     revision > R;
//!   - `watch-event`: one change: `key`, `event` (`put` / `delete`),
//!     `value` (for puts) and `revision`;
//!   - `watch-resume`: the stream was re-established to deliver every change
//!     with revision > `revision`;
//!   - `watch-progress`: bookmark: every change with revision <= `revision`
//!     has been delivered.
//!
//! # What is checked
//! Per watcher, a *segment* is the part of its stream between a start or
//! resume and the next resume; its observed window is (R, U] where R is the
//! start/resume revision (if a start has none, the first event's revision
//! minus one) and U the highest revision it delivered or bookmarked.
//! * order: within a segment revisions never decrease; several keys may
//!   change at one revision (one txn) and may arrive in any key order, but a
//!   (revision, key) pair appears once (else *duplicate*), and nothing at or
//!   below a bookmark or the resume revision arrives later;
//! * filter: every event's key is in the watcher's range;
//! * agreement: all watchers and all `ok` writes agree on the content (kind
//!   and value) at each (revision, key);
//! * no gaps: the committed history is the union of all observations and
//!   `ok` writes; every committed change in a watcher's range and inside one
//!   of its segment windows must have been delivered in that segment;
//! * resumption: resuming after revision R, when the previous segment only
//!   reached U < R, loses the changes in (U, R];
//! * acknowledged writes: every `ok` write is delivered to each watcher
//!   whose range covers its key and whose stream extends to its revision
//!   (after the watcher's start);
//! * provenance: every delivered put matches the key and value of some write
//!   that was not `fail` (skipped if the history records no writes).
//!
//! Writes with unknown outcome may or may not appear; if they appear they
//! are part of the committed history like any other change.

mod check;

use std::fmt;

pub use check::check_watch;

use crate::formats::{FormatError, LoadedHistory};
use crate::history::{ChangeKind, Value};

/// Malformed watch-workload input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WatchError {
    /// A watch record lacks a required field.
    #[error("{f} record lacks `{field}`")]
    MissingField {
        /// Index of the event.
        event: usize,
        /// Its function name.
        f: &'static str,
        /// The missing field.
        field: &'static str,
    },
    /// An observation refers to a watcher that was never started.
    #[error("watcher {watcher} was not started with a `watch` record")]
    UnknownWatcher {
        /// Index of the event.
        event: usize,
        /// Watcher id.
        watcher: u64,
    },
    /// A watcher id was started twice.
    #[error("watcher {watcher} started twice (use watch-resume)")]
    WatcherRestarted {
        /// Index of the event.
        event: usize,
        /// Watcher id.
        watcher: u64,
    },
    /// Client operations do not pair up.
    #[error(transparent)]
    Pair(#[from] crate::ops::PairError),
}

impl WatchError {
    /// Index of the offending event.
    pub fn event(&self) -> usize {
        match self {
            WatchError::MissingField { event, .. }
            | WatchError::UnknownWatcher { event, .. }
            | WatchError::WatcherRestarted { event, .. } => *event,
            WatchError::Pair(e) => e.event(),
        }
    }
}

/// A watcher's key filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRange {
    /// First key.
    pub start: String,
    /// Exclusive end; `None` = only `start`; `Some("\0")` = unbounded.
    pub end: Option<String>,
}

impl KeyRange {
    /// Only `key`.
    pub fn single(key: impl Into<String>) -> KeyRange {
        KeyRange {
            start: key.into(),
            end: None,
        }
    }

    /// Every key starting with `prefix` (etcd's prefix range end: the
    /// prefix with its last character incremented).
    pub fn prefix(prefix: &str) -> KeyRange {
        let mut chars: Vec<char> = prefix.chars().collect();
        while let Some(last) = chars.pop() {
            if let Some(next) = char::from_u32(last as u32 + 1) {
                chars.push(next);
                return KeyRange {
                    start: prefix.to_owned(),
                    end: Some(chars.into_iter().collect()),
                };
            }
        }
        KeyRange {
            start: prefix.to_owned(),
            end: Some("\0".to_owned()),
        }
    }

    /// True if `key` is in the range.
    pub fn contains(&self, key: &str) -> bool {
        match &self.end {
            None => key == self.start,
            Some(end) if end == "\0" => key >= self.start.as_str(),
            Some(end) => key >= self.start.as_str() && key < end.as_str(),
        }
    }
}

impl fmt::Display for KeyRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.end {
            None => write!(f, "{:?}", self.start),
            Some(end) if end == "\0" => write!(f, "[{:?}, ∞)", self.start),
            Some(end) => write!(f, "[{:?}, {:?})", self.start, end),
        }
    }
}

/// Content of a change at one (revision, key).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Change {
    /// Put or delete.
    pub kind: ChangeKind,
    /// New value of a put (`Nil` for deletes).
    pub value: Value,
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            ChangeKind::Put => write!(f, "put {}", self.value),
            ChangeKind::Delete => f.write_str("delete"),
        }
    }
}

/// Who established a committed change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// An acknowledged write of this process.
    Write {
        /// Client process.
        process: u64,
    },
    /// A watcher's observation.
    Watcher(u64),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Write { process } => write!(f, "ok write of p{process}"),
            Source::Watcher(w) => write!(f, "watcher {w}"),
        }
    }
}

/// One watch-correctness violation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchViolation {
    /// An event outside the watcher's key range.
    OutsideFilter {
        /// Watcher.
        watcher: u64,
        /// Revision.
        revision: u64,
        /// Key.
        key: String,
    },
    /// An event with a lower revision than one delivered or bookmarked
    /// before it in the same segment.
    OutOfOrder {
        /// Watcher.
        watcher: u64,
        /// Revision of the late event.
        revision: u64,
        /// Key.
        key: String,
        /// The higher revision seen before.
        after: u64,
    },
    /// The same (revision, key) delivered twice in one segment.
    Duplicate {
        /// Watcher.
        watcher: u64,
        /// Revision.
        revision: u64,
        /// Key.
        key: String,
    },
    /// An event at or below the revision the segment started after.
    BeforeStart {
        /// Watcher.
        watcher: u64,
        /// Revision.
        revision: u64,
        /// Key.
        key: String,
        /// Start / resume revision.
        start: u64,
    },
    /// Two sources disagree on the change at (revision, key).
    Disagreement {
        /// Revision.
        revision: u64,
        /// Key.
        key: String,
        /// First source and its content.
        first: (Source, Change),
        /// Conflicting source and its content.
        second: (Source, Change),
    },
    /// A committed change inside a segment window that the watcher missed.
    Gap {
        /// Watcher.
        watcher: u64,
        /// Missed revision.
        revision: u64,
        /// Key.
        key: String,
        /// The segment window (exclusive low, inclusive high).
        window: (u64, u64),
    },
    /// Changes lost because a resume skipped past what had been delivered.
    LostAcrossResume {
        /// Watcher.
        watcher: u64,
        /// Lost revision.
        revision: u64,
        /// Key.
        key: String,
        /// Highest revision of the previous segment.
        reached: u64,
        /// Resume revision.
        resumed_after: u64,
    },
    /// An acknowledged write never delivered to a covering watcher.
    MissingAckedWrite {
        /// Watcher.
        watcher: u64,
        /// Revision of the write.
        revision: u64,
        /// Key.
        key: String,
    },
    /// A delivered put whose value only a failed write had.
    FailedWriteObserved {
        /// Watcher.
        watcher: u64,
        /// Revision.
        revision: u64,
        /// Key.
        key: String,
        /// Value.
        value: Value,
    },
    /// A delivered put whose value no write had.
    Phantom {
        /// Watcher.
        watcher: u64,
        /// Revision.
        revision: u64,
        /// Key.
        key: String,
        /// Value.
        value: Value,
    },
}

impl fmt::Display for WatchViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use WatchViolation as V;
        match self {
            V::OutsideFilter { watcher, revision, key } => {
                write!(f, "watcher {watcher}: event {key:?}@{revision} is outside its filter")
            }
            V::OutOfOrder { watcher, revision, key, after } => {
                write!(f, "watcher {watcher}: event {key:?}@{revision} arrived after revision {after}")
            }
            V::Duplicate { watcher, revision, key } => {
                write!(f, "watcher {watcher}: event {key:?}@{revision} delivered twice")
            }
            V::BeforeStart { watcher, revision, key, start } => write!(
                f,
                "watcher {watcher}: event {key:?}@{revision} delivered although the stream starts after {start}"
            ),
            V::Disagreement { revision, key, first, second } => write!(
                f,
                "disagreement at {key:?}@{revision}: {} says {}, {} says {}",
                first.0, first.1, second.0, second.1
            ),
            V::Gap { watcher, revision, key, window } => write!(
                f,
                "watcher {watcher}: missed {key:?}@{revision} inside its observed window ({}, {}]",
                window.0, window.1
            ),
            V::LostAcrossResume { watcher, revision, key, reached, resumed_after } => write!(
                f,
                "watcher {watcher}: lost {key:?}@{revision}: stream reached {reached}, resumed after {resumed_after}"
            ),
            V::MissingAckedWrite { watcher, revision, key } => write!(
                f,
                "watcher {watcher}: acknowledged write {key:?}@{revision} never delivered"
            ),
            V::FailedWriteObserved { watcher, revision, key, value } => write!(
                f,
                "watcher {watcher}: {key:?}@{revision} = {value} was only written by failed operations"
            ),
            V::Phantom { watcher, revision, key, value } => {
                write!(f, "watcher {watcher}: {key:?}@{revision} = {value} was never written")
            }
        }
    }
}

/// Result of the watch check.
#[derive(Debug, Clone, Default)]
pub struct WatchReport {
    /// Watchers seen.
    pub watchers: usize,
    /// Watch events delivered (all watchers).
    pub events: usize,
    /// Acknowledged writes.
    pub ok_writes: usize,
    /// Acknowledged writes without a revision (not checked for delivery).
    pub ok_writes_without_revision: usize,
    /// Writes with unknown outcome.
    pub indeterminate_writes: usize,
    /// Failed writes.
    pub failed_writes: usize,
    /// Distinct committed (revision, key) changes.
    pub committed: usize,
    /// Violations found.
    pub violations: Vec<WatchViolation>,
}

impl WatchReport {
    /// True if no violation was found.
    pub fn is_valid(&self) -> bool {
        self.violations.is_empty()
    }

    /// One-line verdict with counts.
    pub fn summary(&self) -> String {
        format!(
            "{}: {} watchers, {} events, {} committed changes, {} ok writes ({} without revision), {} indeterminate, {} failed",
            if self.is_valid() {
                "watch streams valid".to_owned()
            } else {
                format!("watch streams INVALID ({} violations)", self.violations.len())
            },
            self.watchers,
            self.events,
            self.committed,
            self.ok_writes,
            self.ok_writes_without_revision,
            self.indeterminate_writes,
            self.failed_writes
        )
    }
}

impl fmt::Display for WatchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.summary())?;
        for v in &self.violations {
            writeln!(f, "  {v}")?;
        }
        Ok(())
    }
}

/// Runs [`check_watch`] on a loaded file, reporting input errors with
/// their line.
pub fn check_loaded(history: &LoadedHistory) -> Result<WatchReport, FormatError> {
    check_watch(&history.events).map_err(|e| FormatError::Line {
        name: history.name.clone(),
        line: history.lines.get(e.event()).copied().unwrap_or(0),
        message: e.to_string(),
    })
}
