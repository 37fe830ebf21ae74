//! Input formats: Keelson's JSON Lines, Jepsen's plain-text log (CAS
//! register) and Jepsen's EDN history (one map per line).
//!
//! Jepsen formats carry no usable timestamps, so an event's `time` is its
//! 1-based line number: the file order is the history order.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use crate::edn::{self, Edn};
use crate::history::{self, EventKind, Function, HistoryError, HistoryEvent, Value};
use crate::ops::{pair_events, Operation};

/// Errors of loading a history; all are "unreadable input".
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// The file could not be read.
    #[error("{name}: {source}")]
    Io {
        /// File name.
        name: String,
        /// Underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A line looks like a history line but is malformed, or events do not
    /// pair up.
    #[error("{name}:{line}: {message}")]
    Line {
        /// File name.
        name: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
}

/// Supported input formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `INFO  jepsen.util - 3\t:invoke\t:cas\t[3 0]` lines.
    JepsenLog,
    /// `{:process 4, :type :invoke, :f :append, :key "1", :value "x"}` lines.
    JepsenEdn,
    /// Keelson's JSON Lines ([`crate::history`]).
    Keelson,
}

impl Format {
    /// Name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Format::JepsenLog => "jepsen-log",
            Format::JepsenEdn => "jepsen-edn",
            Format::Keelson => "keelson",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Format {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "jepsen-log" => Ok(Format::JepsenLog),
            "jepsen-edn" => Ok(Format::JepsenEdn),
            "keelson" => Ok(Format::Keelson),
            other => Err(format!(
                "unknown format `{other}` (expected jepsen-log, jepsen-edn or keelson)"
            )),
        }
    }
}

/// Events read from a file, with their line numbers.
#[derive(Debug, Clone, Default)]
pub struct LoadedHistory {
    /// File name used in messages.
    pub name: String,
    /// The events, in file order.
    pub events: Vec<HistoryEvent>,
    /// `lines[i]` is the 1-based line of `events[i]`.
    pub lines: Vec<usize>,
    /// Lines skipped because they are not history lines (other log output,
    /// blank lines, comments).
    pub ignored_lines: usize,
    /// History lines skipped because their process is not a client
    /// (`:nemesis`).
    pub nemesis_lines: usize,
}

impl LoadedHistory {
    /// Pairs the events into operations (see [`pair_events`]); pairing
    /// errors are reported with their line.
    pub fn operations(&self) -> Result<Vec<Operation>, FormatError> {
        pair_events(&self.events).map_err(|e| FormatError::Line {
            name: self.name.clone(),
            line: self.lines.get(e.event()).copied().unwrap_or(0),
            message: e.to_string(),
        })
    }

    fn push(&mut self, line: usize, event: HistoryEvent) {
        self.events.push(event);
        self.lines.push(line);
    }
}

/// Reads and parses a history file.
pub fn load(format: Format, path: &Path) -> Result<LoadedHistory, FormatError> {
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| FormatError::Io {
        name: name.clone(),
        source,
    })?;
    let text = String::from_utf8(bytes).map_err(|e| {
        let line = 1 + e.as_bytes()[..e.utf8_error().valid_up_to()]
            .iter()
            .filter(|&&b| b == b'\n')
            .count();
        FormatError::Line {
            name: name.clone(),
            line,
            message: "invalid UTF-8".to_owned(),
        }
    })?;
    parse(format, &text, &name)
}

/// Parses history text; `name` is used in error messages.
pub fn parse(format: Format, text: &str, name: &str) -> Result<LoadedHistory, FormatError> {
    match format {
        Format::JepsenLog => parse_jepsen_log(text, name),
        Format::JepsenEdn => parse_jepsen_edn(text, name),
        Format::Keelson => {
            let events = history::parse_jsonl(text).map_err(|e| match e {
                HistoryError::Parse { line, message } => FormatError::Line {
                    name: name.to_owned(),
                    line,
                    message,
                },
                other => FormatError::Line {
                    name: name.to_owned(),
                    line: 0,
                    message: other.to_string(),
                },
            })?;
            let total = text.lines().count();
            let mut loaded = LoadedHistory {
                name: name.to_owned(),
                ..LoadedHistory::default()
            };
            loaded.ignored_lines = total - events.len();
            for (line, event) in events {
                loaded.push(line, event);
            }
            Ok(loaded)
        }
    }
}

fn line_error(name: &str, line: usize, message: impl Into<String>) -> FormatError {
    FormatError::Line {
        name: name.to_owned(),
        line,
        message: message.into(),
    }
}

fn kind_of(keyword: &str) -> Option<EventKind> {
    Some(match keyword {
        "invoke" => EventKind::Invoke,
        "ok" => EventKind::Ok,
        "fail" => EventKind::Fail,
        "info" => EventKind::Info,
        _ => return None,
    })
}

/// Converts an EDN value of an invoke or `ok` completion. Keywords become
/// strings with their colon.
pub fn edn_to_value(value: &Edn) -> Result<Value, String> {
    Ok(match value {
        Edn::Nil => Value::Nil,
        Edn::Int(i) => Value::Int(*i),
        Edn::Str(s) => Value::Str(s.clone()),
        Edn::Keyword(k) => Value::Str(format!(":{k}")),
        Edn::Vector(items) | Edn::List(items) => {
            Value::List(items.iter().map(edn_to_value).collect::<Result<_, _>>()?)
        }
        other => return Err(format!("unsupported value {other}")),
    })
}

/// Value of an event: converted for invokes and `ok` completions; ignored
/// (nil) for `fail` / `info`, whose value is not informative.
fn event_value(kind: EventKind, value: &Edn) -> Result<Value, String> {
    match kind {
        EventKind::Invoke | EventKind::Ok => edn_to_value(value),
        EventKind::Fail | EventKind::Info => Ok(Value::Nil),
    }
}

/// Splits off the first whitespace-separated token.
fn next_token(s: &str) -> (&str, &str) {
    let s = s.trim_start();
    let end = s.find(char::is_whitespace).unwrap_or(s.len());
    (&s[..end], &s[end..])
}

/// Parses a Jepsen plain-text log. History lines have the shape
/// `... jepsen.util - PROCESS TYPE F VALUE` (tab or space separated);
/// lines without `jepsen.util -` followed by an integer (or keyword)
/// process and a keyword type are other log output and are ignored.
/// `independent` `[key value]` tuples are split as for EDN.
pub fn parse_jepsen_log(text: &str, name: &str) -> Result<LoadedHistory, FormatError> {
    let mut loaded = LoadedHistory {
        name: name.to_owned(),
        ..LoadedHistory::default()
    };
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let Some(rest) = raw
            .find("jepsen.util")
            .map(|at| raw[at + "jepsen.util".len()..].trim_start())
            .and_then(|r| r.strip_prefix('-'))
        else {
            loaded.ignored_lines += 1;
            continue;
        };
        let (process, rest) = next_token(rest);
        let (kind, rest) = next_token(rest);
        let looks_like_history = kind.starts_with(':')
            && (process.starts_with(':')
                || (!process.is_empty() && process.chars().all(|c| c.is_ascii_digit())));
        if !looks_like_history {
            loaded.ignored_lines += 1;
            continue;
        }
        if process.starts_with(':') {
            loaded.nemesis_lines += 1;
            continue;
        }
        let process: u64 = process
            .parse()
            .map_err(|_| line_error(name, line, format!("bad process {process:?}")))?;
        let kind = kind_of(&kind[1..])
            .ok_or_else(|| line_error(name, line, format!("unknown type {kind}")))?;
        let (f, rest) = next_token(rest);
        let f = f
            .strip_prefix(':')
            .and_then(Function::from_name)
            .ok_or_else(|| line_error(name, line, format!("unknown function {f:?}")))?;
        let value_text = rest.trim();
        let edn = if value_text.is_empty() {
            Edn::Nil
        } else {
            edn::parse(value_text)
                .map_err(|e| line_error(name, line, format!("bad value {value_text:?}: {e}")))?
        };
        let value = event_value(kind, &edn).map_err(|m| line_error(name, line, m))?;
        let mut event = HistoryEvent::new(process, kind, f, value).at(line as u64);
        if kind != EventKind::Invoke && !matches!(edn, Edn::Nil) && event.value == Value::Nil {
            event.error = Some(edn.to_string());
        }
        loaded.push(line, event);
    }
    unwrap_independent(&mut loaded.events);
    Ok(loaded)
}

fn edn_key(value: &Edn) -> Result<Option<String>, String> {
    Ok(match value {
        Edn::Nil => None,
        Edn::Str(s) => Some(s.clone()),
        Edn::Int(i) => Some(i.to_string()),
        Edn::Keyword(k) | Edn::Symbol(k) => Some(k.clone()),
        other => return Err(format!("unsupported key {other}")),
    })
}

/// Parses a Jepsen EDN history: one map per line with `:process`, `:type`,
/// `:f`, optional `:key` and `:value`; other keys are ignored. Blank lines,
/// `;` comments and a wrapping `[` ... `]` or `(` ... `)` are skipped, and
/// a map may continue over several lines; operations of
/// non-integer processes (`:nemesis`) are skipped. Register histories of
/// Jepsen's `independent` workloads (`:value [key value]`) are split by key.
pub fn parse_jepsen_edn(text: &str, name: &str) -> Result<LoadedHistory, FormatError> {
    let mut loaded = LoadedHistory {
        name: name.to_owned(),
        ..LoadedHistory::default()
    };
    let lines: Vec<&str> = text.lines().collect();
    let mut next = 0;
    while next < lines.len() {
        let line = next + 1;
        next += 1;
        let mut body = lines[line - 1].trim();
        // A history printed as one vector or list: `[{...}` first,
        // `{...}]` last (or `(` ... `)`).
        if let Some(rest) = body
            .strip_prefix(['[', '('])
            .map(str::trim_start)
            .filter(|r| r.starts_with('{'))
        {
            body = rest;
        }
        if body.is_empty() || body.starts_with(';') || body == "]" || body == ")" {
            loaded.ignored_lines += 1;
            continue;
        }
        // A pretty-printed map may span several lines: extend it until it
        // is complete.
        let mut buf = body.to_owned();
        let map = loop {
            let form = if buf.starts_with('{') {
                buf.trim_end().strip_suffix([']', ')']).unwrap_or(&buf)
            } else {
                &buf
            };
            match edn::parse(form) {
                Ok(map) => break map,
                Err(edn::EdnError::UnexpectedEnd { .. })
                    if buf.starts_with('{') && next < lines.len() =>
                {
                    buf.push('\n');
                    buf.push_str(lines[next]);
                    next += 1;
                }
                Err(e) => return Err(line_error(name, line, format!("bad EDN: {e}"))),
            }
        };
        if !matches!(map, Edn::Map(_)) {
            return Err(line_error(name, line, "expected a map per line"));
        }
        let process = match map.get("process") {
            Some(Edn::Int(p)) if *p >= 0 => *p as u64,
            Some(Edn::Keyword(_)) => {
                loaded.nemesis_lines += 1;
                continue;
            }
            Some(other) => return Err(line_error(name, line, format!("bad :process {other}"))),
            None => return Err(line_error(name, line, "missing :process")),
        };
        let kind = match map.get("type") {
            Some(Edn::Keyword(k)) => {
                kind_of(k).ok_or_else(|| line_error(name, line, format!("unknown :type :{k}")))?
            }
            Some(other) => return Err(line_error(name, line, format!("bad :type {other}"))),
            None => return Err(line_error(name, line, "missing :type")),
        };
        let f = match map.get("f") {
            Some(Edn::Keyword(f) | Edn::Str(f) | Edn::Symbol(f)) => Function::from_name(f)
                .ok_or_else(|| line_error(name, line, format!("unknown :f {f}")))?,
            Some(other) => return Err(line_error(name, line, format!("bad :f {other}"))),
            None => return Err(line_error(name, line, "missing :f")),
        };
        let value = event_value(kind, map.get("value").unwrap_or(&Edn::Nil))
            .map_err(|m| line_error(name, line, format!(":value: {m}")))?;
        let key =
            edn_key(map.get("key").unwrap_or(&Edn::Nil)).map_err(|m| line_error(name, line, m))?;
        let mut event = HistoryEvent::new(process, kind, f, value).at(line as u64);
        event.key = key;
        loaded.push(line, event);
    }
    unwrap_independent(&mut loaded.events);
    Ok(loaded)
}

/// Register histories of Jepsen's `independent` workloads carry no `:key`
/// but `[key value]` tuples: reads `[k nil]`, writes `[k v]`, cas
/// `[k [from to]]`. If every register invoke has that shape (plain ones
/// never do: plain reads are nil, writes scalars, cas pairs of scalars),
/// the tuples are split into key and value.
fn unwrap_independent(events: &mut [HistoryEvent]) {
    let tuple = |e: &HistoryEvent| -> bool {
        match (&e.value, e.f) {
            (Value::List(kv), Function::Read | Function::Write) => kv.len() == 2,
            (Value::List(kv), Function::Cas) => {
                kv.len() == 2 && matches!(&kv[1], Value::List(pair) if pair.len() == 2)
            }
            _ => false,
        }
    };
    let register =
        |e: &HistoryEvent| matches!(e.f, Function::Read | Function::Write | Function::Cas);
    let mut invokes = events
        .iter()
        .filter(|e| e.kind == EventKind::Invoke && register(e))
        .peekable();
    if invokes.peek().is_none() || events.iter().any(|e| e.key.is_some()) || !invokes.all(tuple) {
        return;
    }
    for e in events.iter_mut().filter(|e| register(e)) {
        if let Value::List(kv) = &mut e.value {
            if kv.len() == 2 {
                let value = kv.pop().unwrap_or_default();
                e.key = Some(match kv.pop().unwrap_or_default() {
                    Value::Str(s) => s,
                    other => other.to_string(),
                });
                e.value = value;
            }
        }
    }
}
