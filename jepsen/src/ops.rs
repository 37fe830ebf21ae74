//! Pairing of history events into [`Operation`]s (invoke + completion).
//!
//! Rules (Jepsen semantics):
//! * events are taken in `time` order (ties keep input order);
//! * a process has at most one outstanding operation; its next completion
//!   closes it. After an `info` completion the process is free again, so a
//!   later invoke by the same process is simply a new operation (Jepsen
//!   itself would have switched to a fresh process id);
//! * an invoke while the process still has an outstanding operation makes the
//!   outstanding one indeterminate (as if it had completed with `info`);
//! * an invoke never completed by the end of the history is indeterminate
//!   ([`Outcome::Info`] with no completion time);
//! * watch observations (see [`Function::is_watch_observation`]) are not
//!   client operations and are skipped.

use std::collections::HashMap;
use std::fmt;

use crate::history::{EventKind, Function, HistoryEvent, Value};

/// Errors of pairing events into operations. Event positions are 0-based
/// indices into the slice given to [`pair_events`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PairError {
    /// A completion arrived for a process that has no outstanding invoke.
    #[error("{kind:?} {f} of process {process} has no matching invoke")]
    CompletionWithoutInvoke {
        /// Index of the completion event.
        event: usize,
        /// Its process.
        process: u64,
        /// Its kind.
        kind: EventKind,
        /// Its function.
        f: Function,
    },
    /// The completion's function or key differs from the invoke's.
    #[error(
        "completion {found} does not match the outstanding invoke {expected} of process {process}"
    )]
    Mismatch {
        /// Index of the completion event.
        event: usize,
        /// Its process.
        process: u64,
        /// Function/key of the outstanding invoke.
        expected: String,
        /// Function/key of the completion.
        found: String,
    },
}

impl PairError {
    /// Index of the offending event.
    pub fn event(&self) -> usize {
        match self {
            PairError::CompletionWithoutInvoke { event, .. }
            | PairError::Mismatch { event, .. } => *event,
        }
    }
}

/// How an operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Took effect between invoke and completion.
    Ok,
    /// Definitely did not take effect.
    Fail,
    /// Unknown: may take effect at any time after the invoke, or never.
    Info,
}

/// One client operation: an invoke and its completion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation {
    /// Position in invoke order (0-based, unique within a history).
    pub index: usize,
    /// Client process.
    pub process: u64,
    /// Function.
    pub f: Function,
    /// Key (keyed histories) or `None`.
    pub key: Option<String>,
    /// The invoke's value (the argument).
    pub value: Value,
    /// The completion's value for `ok` operations (the result, e.g. the value
    /// read); `Nil` otherwise.
    pub output: Value,
    /// How the operation ended.
    pub outcome: Outcome,
    /// Time of the invoke.
    pub invoke_time: u64,
    /// Time of the completion event, if there was one. For `info` it is only
    /// when the client gave up: the operation may take effect even later.
    pub complete_time: Option<u64>,
    /// Index of the invoke event in the paired slice.
    pub invoke_event: usize,
    /// Index of the completion event, if any.
    pub complete_event: Option<usize>,
}

impl Operation {
    /// Time after which the operation certainly no longer takes effect:
    /// the completion time of `ok`/`fail`, `None` (= +infinity) for `info`.
    pub fn deadline(&self) -> Option<u64> {
        match self.outcome {
            Outcome::Info => None,
            Outcome::Ok | Outcome::Fail => self.complete_time,
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{} p{} {}", self.index, self.process, self.f)?;
        if let Some(key) = &self.key {
            write!(f, " {key:?}")?;
        }
        match (self.f, self.outcome) {
            (Function::Read | Function::Get, Outcome::Ok) => write!(f, " -> {}", self.output)?,
            (Function::Read | Function::Get, _) => {}
            _ => write!(f, " {}", self.value)?,
        }
        let outcome = match self.outcome {
            Outcome::Ok => "ok",
            Outcome::Fail => "fail",
            Outcome::Info if self.complete_time.is_some() => "info",
            Outcome::Info => "pending",
        };
        write!(f, " ({outcome}, t={}..", self.invoke_time)?;
        match self.complete_time {
            Some(t) => write!(f, "{t})"),
            None => write!(f, ")"),
        }
    }
}

/// Pairs events into operations ordered by invoke time (see module docs).
pub fn pair_events(events: &[HistoryEvent]) -> Result<Vec<Operation>, PairError> {
    let mut order: Vec<usize> = (0..events.len()).collect();
    order.sort_by_key(|&i| events[i].time);

    let mut ops: Vec<Operation> = Vec::new();
    let mut outstanding: HashMap<u64, usize> = HashMap::new();
    for &ei in &order {
        let event = &events[ei];
        if event.f.is_watch_observation() {
            continue;
        }
        match event.kind {
            EventKind::Invoke => {
                // A second invoke leaves the previous operation indeterminate:
                // it stays Info with no completion.
                outstanding.insert(event.process, ops.len());
                ops.push(Operation {
                    index: ops.len(),
                    process: event.process,
                    f: event.f,
                    key: event.key.clone(),
                    value: event.value.clone(),
                    output: Value::Nil,
                    outcome: Outcome::Info,
                    invoke_time: event.time,
                    complete_time: None,
                    invoke_event: ei,
                    complete_event: None,
                });
            }
            kind => {
                let Some(oi) = outstanding.remove(&event.process) else {
                    return Err(PairError::CompletionWithoutInvoke {
                        event: ei,
                        process: event.process,
                        kind,
                        f: event.f,
                    });
                };
                let op = &mut ops[oi];
                // A completion may omit the key; if present it must agree.
                let key_ok = event.key.is_none() || event.key == op.key;
                if op.f != event.f || !key_ok {
                    return Err(PairError::Mismatch {
                        event: ei,
                        process: event.process,
                        expected: describe(op.f, op.key.as_deref()),
                        found: describe(event.f, event.key.as_deref()),
                    });
                }
                op.complete_time = Some(event.time);
                op.complete_event = Some(ei);
                op.outcome = match kind {
                    EventKind::Ok => {
                        op.output = event.value.clone();
                        Outcome::Ok
                    }
                    EventKind::Fail => Outcome::Fail,
                    _ => Outcome::Info,
                };
            }
        }
    }
    Ok(ops)
}

fn describe(f: Function, key: Option<&str>) -> String {
    match key {
        Some(k) => format!("{f} {k:?}"),
        None => f.to_string(),
    }
}
