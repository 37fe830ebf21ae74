//! Keelson's own history format: one [`HistoryEvent`] per line, as JSON
//! (JSON Lines), plus a thread-safe [`HistoryWriter`] and a reader.
//!
//! A line looks like
//! `{"process":3,"type":"invoke","f":"cas","key":"k1","value":[1,2],"time":123}`.
//!
//! Contract of a recorded history:
//! * every client operation is an `invoke` event followed (later, same
//!   `process`) by at most one completion: `ok` (it took effect between the
//!   two events), `fail` (it definitely did not take effect) or `info` (the
//!   outcome is unknown, e.g. a timeout). An invoke without a completion is
//!   treated like `info`;
//! * `time` is a monotonic timestamp in nanoseconds; events are ordered by it
//!   (ties keep file order). [`HistoryWriter`] assigns it under its lock, so
//!   file order always equals time order;
//! * watch observations (`f` = `watch`, `watch-resume`, `watch-event`,
//!   `watch-progress`) are single `ok` events, see [`crate::watch`].
//!
//! Unknown JSON fields are ignored so that newer recorders stay readable.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// Errors of reading or writing JSON Lines histories.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The history file could not be opened, read, written or flushed.
    #[error("{path}: {source}")]
    Io {
        /// File that was being accessed.
        path: PathBuf,
        /// Underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A non-blank line is not a valid [`HistoryEvent`].
    #[error("line {line}: {message}")]
    Parse {
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        message: String,
    },
    /// An event could not be serialized (should not happen for valid values).
    #[error("cannot serialize event: {0}")]
    Serialize(String),
    /// The writer's lock was poisoned by a panicking recorder thread.
    #[error("history writer lock poisoned")]
    Poisoned,
}

/// Kind of a history event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventKind {
    /// The client started an operation.
    Invoke,
    /// The operation completed and took effect.
    Ok,
    /// The operation definitely did not take effect.
    Fail,
    /// The outcome is unknown (timeout, crash): it may or may not have taken
    /// effect, at any time after its invocation.
    Info,
}

/// The function of an operation (`f`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Function {
    /// Register read; the completion's value is the value read (`nil` = unset).
    Read,
    /// Register write of `value`.
    Write,
    /// Register compare-and-set; `value` is `[from, to]`.
    Cas,
    /// Key-value get; the completion's value is the string read.
    Get,
    /// Key-value put of `value`.
    Put,
    /// Key-value append of `value` onto the key's string.
    Append,
    /// Key deletion (watch workload).
    Delete,
    /// A watcher was started (watch workload observation).
    Watch,
    /// A watcher resumed after `revision` (watch workload observation).
    WatchResume,
    /// A watcher received one change (watch workload observation).
    WatchEvent,
    /// A watcher received a bookmark / progress notification.
    WatchProgress,
}

impl Function {
    /// Parses a Jepsen function name (without the leading `:`).
    pub fn from_name(name: &str) -> Option<Function> {
        Some(match name {
            "read" => Function::Read,
            "write" => Function::Write,
            "cas" => Function::Cas,
            "get" => Function::Get,
            "put" => Function::Put,
            "append" => Function::Append,
            "delete" => Function::Delete,
            "watch" => Function::Watch,
            "watch-resume" => Function::WatchResume,
            "watch-event" => Function::WatchEvent,
            "watch-progress" => Function::WatchProgress,
            _ => return None,
        })
    }

    /// The name used in histories.
    pub fn name(self) -> &'static str {
        match self {
            Function::Read => "read",
            Function::Write => "write",
            Function::Cas => "cas",
            Function::Get => "get",
            Function::Put => "put",
            Function::Append => "append",
            Function::Delete => "delete",
            Function::Watch => "watch",
            Function::WatchResume => "watch-resume",
            Function::WatchEvent => "watch-event",
            Function::WatchProgress => "watch-progress",
        }
    }

    /// True for watcher observations, which are single events rather than
    /// invoke/completion pairs.
    pub fn is_watch_observation(self) -> bool {
        matches!(
            self,
            Function::Watch
                | Function::WatchResume
                | Function::WatchEvent
                | Function::WatchProgress
        )
    }
}

impl fmt::Display for Function {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A value in a history: `null`, an integer, a string or a list (e.g. the
/// `[from, to]` of a cas).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Value {
    /// Absent / unset (`null` in JSON, `nil` in EDN).
    #[default]
    Nil,
    /// An integer.
    Int(i64),
    /// A string.
    Str(String),
    /// A list of values.
    List(Vec<Value>),
}

impl Value {
    /// Shorthand for a string value.
    pub fn str(s: impl Into<String>) -> Value {
        Value::Str(s.into())
    }

    /// Shorthand for the `[from, to]` pair of a cas.
    pub fn pair(from: Value, to: Value) -> Value {
        Value::List(vec![from, to])
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Value {
        Value::Int(v)
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::Str(v.to_owned())
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Nil => f.write_str("nil"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Str(s) => write!(f, "{s:?}"),
            Value::List(items) => {
                f.write_str("[")?;
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(" ")?;
                    }
                    write!(f, "{v}")?;
                }
                f.write_str("]")
            }
        }
    }
}

/// Kind of change delivered to a watcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    /// The key was created or modified; `value` is the new value.
    Put,
    /// The key was deleted.
    Delete,
}

/// One line of a history.
///
/// The watch-workload fields (`revision`, `watcher`, `range_end`, `event`)
/// are optional and omitted from the JSON when absent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEvent {
    /// Client process id (after an `info`, Jepsen-style clients use a new id).
    pub process: u64,
    /// invoke / ok / fail / info.
    #[serde(rename = "type")]
    pub kind: EventKind,
    /// The operation's function.
    pub f: Function,
    /// Key for keyed histories (kv map, independent registers, watch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Argument (invoke) or result (completion).
    #[serde(default)]
    pub value: Value,
    /// Monotonic timestamp in nanoseconds.
    pub time: u64,
    /// Store revision: of an `ok` write, or of a watch event/resume/progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<u64>,
    /// Watcher id of watch observations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watcher: Option<u64>,
    /// Exclusive end of a watcher's key range (`watch` events); absent means
    /// the single key `key`, `"\u0000"` means every key from `key` on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range_end: Option<String>,
    /// Kind of change of a `watch-event`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<ChangeKind>,
    /// Free-form error description of `fail` / `info` completions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl HistoryEvent {
    /// A client event with no key and `time` 0 (the writer stamps it).
    pub fn new(process: u64, kind: EventKind, f: Function, value: Value) -> HistoryEvent {
        HistoryEvent {
            process,
            kind,
            f,
            key: None,
            value,
            time: 0,
            revision: None,
            watcher: None,
            range_end: None,
            event: None,
            error: None,
        }
    }

    /// Builder: sets the key.
    pub fn with_key(mut self, key: impl Into<String>) -> HistoryEvent {
        self.key = Some(key.into());
        self
    }

    /// Builder: sets the timestamp.
    pub fn at(mut self, time: u64) -> HistoryEvent {
        self.time = time;
        self
    }

    /// Builder: sets the revision.
    pub fn with_revision(mut self, revision: u64) -> HistoryEvent {
        self.revision = Some(revision);
        self
    }

    /// Builder: sets the watcher id.
    pub fn with_watcher(mut self, watcher: u64) -> HistoryEvent {
        self.watcher = Some(watcher);
        self
    }

    /// Serializes the event as one JSON line (without the newline).
    pub fn to_json_line(&self) -> Result<String, HistoryError> {
        serde_json::to_string(self).map_err(|e| HistoryError::Serialize(e.to_string()))
    }
}

/// Parses JSON Lines text. Blank lines are skipped; returns each event with
/// its 1-based line number.
pub fn parse_jsonl(text: &str) -> Result<Vec<(usize, HistoryEvent)>, HistoryError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        let event: HistoryEvent =
            serde_json::from_str(trimmed).map_err(|e| HistoryError::Parse {
                line: i + 1,
                message: e.to_string(),
            })?;
        out.push((i + 1, event));
    }
    Ok(out)
}

/// Reads a JSON Lines history file (see [`parse_jsonl`]).
pub fn read_jsonl(path: &Path) -> Result<Vec<(usize, HistoryEvent)>, HistoryError> {
    let text = std::fs::read_to_string(path).map_err(|source| HistoryError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse_jsonl(&text)
}

struct WriterInner {
    out: BufWriter<File>,
    last_time: u64,
}

/// Appends events to a JSON Lines file; cheap and safe to share between
/// threads and tasks (`Arc<HistoryWriter>`; all methods take `&self`).
///
/// Each call takes one short mutex-protected critical section. Methods named
/// `*_now` / [`HistoryWriter::invoke`] / [`HistoryWriter::complete`] stamp the
/// event's `time` inside that section with nanoseconds since the writer was
/// created (never decreasing), so file order equals time order. Output is
/// buffered: call [`HistoryWriter::flush`] before reading the file (dropping
/// the writer flushes too, ignoring errors).
pub struct HistoryWriter {
    path: PathBuf,
    epoch: Instant,
    inner: Mutex<WriterInner>,
}

impl HistoryWriter {
    /// Creates (truncating) the history file.
    pub fn create(path: impl AsRef<Path>) -> Result<HistoryWriter, HistoryError> {
        let path = path.as_ref().to_path_buf();
        let file = File::create(&path).map_err(|source| HistoryError::Io {
            path: path.clone(),
            source,
        })?;
        Ok(Self::from_file(path, file))
    }

    /// Opens the history file for appending, creating it if needed. Times of
    /// the new events restart from this writer's creation.
    pub fn append(path: impl AsRef<Path>) -> Result<HistoryWriter, HistoryError> {
        let path = path.as_ref().to_path_buf();
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|source| HistoryError::Io {
                path: path.clone(),
                source,
            })?;
        Ok(Self::from_file(path, file))
    }

    fn from_file(path: PathBuf, file: File) -> HistoryWriter {
        HistoryWriter {
            path,
            epoch: Instant::now(),
            inner: Mutex::new(WriterInner {
                out: BufWriter::new(file),
                last_time: 0,
            }),
        }
    }

    /// The file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `event` exactly as given (its `time` is kept).
    pub fn record(&self, event: &HistoryEvent) -> Result<(), HistoryError> {
        let line = event.to_json_line()?;
        let mut inner = self.inner.lock().map_err(|_| HistoryError::Poisoned)?;
        inner.last_time = inner.last_time.max(event.time);
        self.write_line(&mut inner, &line)
    }

    /// Appends `event` with `time` set to now; returns the time used.
    pub fn record_now(&self, mut event: HistoryEvent) -> Result<u64, HistoryError> {
        let mut inner = self.inner.lock().map_err(|_| HistoryError::Poisoned)?;
        let now = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let time = now.max(inner.last_time);
        inner.last_time = time;
        event.time = time;
        let line = event.to_json_line()?;
        self.write_line(&mut inner, &line)?;
        Ok(time)
    }

    /// Records an invocation now.
    pub fn invoke(
        &self,
        process: u64,
        f: Function,
        key: Option<&str>,
        value: Value,
    ) -> Result<u64, HistoryError> {
        let mut event = HistoryEvent::new(process, EventKind::Invoke, f, value);
        event.key = key.map(str::to_owned);
        self.record_now(event)
    }

    /// Records a completion (`ok` / `fail` / `info`) now.
    pub fn complete(
        &self,
        process: u64,
        kind: EventKind,
        f: Function,
        key: Option<&str>,
        value: Value,
    ) -> Result<u64, HistoryError> {
        let mut event = HistoryEvent::new(process, kind, f, value);
        event.key = key.map(str::to_owned);
        self.record_now(event)
    }

    /// Flushes buffered events to the file.
    pub fn flush(&self) -> Result<(), HistoryError> {
        let mut inner = self.inner.lock().map_err(|_| HistoryError::Poisoned)?;
        inner.out.flush().map_err(|source| HistoryError::Io {
            path: self.path.clone(),
            source,
        })
    }

    fn write_line(&self, inner: &mut WriterInner, line: &str) -> Result<(), HistoryError> {
        let io_err = |source| HistoryError::Io {
            path: self.path.clone(),
            source,
        };
        inner.out.write_all(line.as_bytes()).map_err(io_err)?;
        inner.out.write_all(b"\n").map_err(io_err)
    }
}

impl fmt::Debug for HistoryWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HistoryWriter")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}
