//! Linearizability checking (Wing–Gong / Lowe search with memoization of
//! (linearized set, state)) with per-key decomposition (P-compositionality).
//!
//! Semantics of outcomes:
//! * `ok`: took effect at one instant between its invoke and completion;
//! * `fail`: did not take effect; dropped entirely;
//! * `info` / never completed: its return is at +infinity: it may take
//!   effect at any instant after its invoke, or never. Its result is
//!   unknown, so indeterminate reads constrain nothing and are dropped.
//!
//! Keyed histories (a `key` on the operations) are split by key and every
//! key is checked on its own: linearizability is compositional, so the
//! history is linearizable iff every key is. Keys are searched round-robin
//! in slices of steps and the check stops at the first key that fails.
//!
//! Before the search, the model may simplify a key's operations
//! ([`Model::simplify`]) and give indeterminate operations deadlines
//! ([`Model::observers`]); during it, it prunes steps after which an
//! operation due soon can no longer succeed ([`Model::viable`]). All three
//! are exact: they never change the verdict.

mod cache;
mod report;
mod search;

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// Search steps per key per round-robin turn.
const SLICE: usize = 20_000;

pub use report::{KeyFailure, LinearizedStep};

use crate::model::{CasRegister, KvMap, Model, ModelError, Simplification};
use crate::ops::{Operation, Outcome};
use search::{KeySearch, Progress, SearchOp};

/// The models selectable by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelKind {
    /// [`CasRegister`] (per key if keyed).
    CasRegister,
    /// [`KvMap`] (per key).
    Kv,
}

impl ModelKind {
    /// The model's name as used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::CasRegister => "cas-register",
            ModelKind::Kv => "kv",
        }
    }
}

impl FromStr for ModelKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "cas-register" => Ok(ModelKind::CasRegister),
            "kv" => Ok(ModelKind::Kv),
            other => Err(format!(
                "unknown model `{other}` (expected cas-register or kv)"
            )),
        }
    }
}

/// Result of a linearizability check.
#[derive(Debug, Clone)]
pub struct LinearReport {
    /// Model name.
    pub model: &'static str,
    /// Operations in the history (all outcomes).
    pub operations: usize,
    /// Operations that completed `ok`.
    pub ok: usize,
    /// Indeterminate operations (`info` or never completed).
    pub indeterminate: usize,
    /// Failed operations (dropped: they did not happen).
    pub failed: usize,
    /// Indeterminate reads (dropped: they constrain nothing).
    pub unknown_reads: usize,
    /// Indeterminate writes dropped because nothing could observe them
    /// (see [`Model::simplify`]).
    pub unobservable: usize,
    /// Number of distinct keys (1 for an unkeyed history).
    pub keys: usize,
    /// Largest number of configurations memoized for one key.
    pub configurations: usize,
    /// Keys found not linearizable. The check stops at the first one, so
    /// this holds at most one key.
    pub failures: Vec<KeyFailure>,
    /// Keys whose check was abandoned once another key failed.
    pub unchecked_keys: usize,
}

impl LinearReport {
    /// True if every key is linearizable.
    pub fn is_linearizable(&self) -> bool {
        self.failures.is_empty()
    }

    /// One-line verdict with counts.
    pub fn summary(&self) -> String {
        let verdict = if self.is_linearizable() {
            "linearizable".to_owned()
        } else {
            let keys: Vec<String> = self
                .failures
                .iter()
                .map(|f| {
                    f.key
                        .as_ref()
                        .map_or_else(|| "history".to_owned(), |k| format!("key {k:?}"))
                })
                .collect();
            format!(
                "NOT linearizable ({} failed; {} of {} keys left unchecked after that)",
                keys.join(", "),
                self.unchecked_keys,
                self.keys
            )
        };
        format!(
            "{verdict}: model {}, {} ops ({} ok, {} indeterminate, {} failed), {} keys, {} configurations",
            self.model, self.operations, self.ok, self.indeterminate, self.failed, self.keys, self.configurations
        )
    }
}

impl fmt::Display for LinearReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.summary())?;
        for failure in &self.failures {
            write!(f, "{}", failure.render_text())?;
        }
        Ok(())
    }
}

/// Checks `ops` (as produced by [`crate::ops::pair_events`]) against the
/// named model.
pub fn check(kind: ModelKind, ops: &[Operation]) -> Result<LinearReport, ModelError> {
    match kind {
        ModelKind::CasRegister => check_operations(&CasRegister, ops),
        ModelKind::Kv => check_operations(&KvMap, ops),
    }
}

/// One key's operations: all of them (for reports) and the compiled ones.
type KeyOps<'a, O> = (Vec<&'a Operation>, Vec<(&'a Operation, O)>);

/// Checks `ops` against `model`, key by key. Fails only if an operation
/// does not fit the model (wrong function or value shape).
pub fn check_operations<M: Model>(
    model: &M,
    ops: &[Operation],
) -> Result<LinearReport, ModelError> {
    let mut report = LinearReport {
        model: model.name(),
        operations: ops.len(),
        ok: 0,
        indeterminate: 0,
        failed: 0,
        unknown_reads: 0,
        unobservable: 0,
        keys: 0,
        configurations: 0,
        failures: Vec::new(),
        unchecked_keys: 0,
    };
    // Per key: every operation (for reports) and the compiled ones.
    let mut keys: BTreeMap<Option<&str>, KeyOps<'_, M::Op>> = BTreeMap::new();
    for op in ops {
        let slot = keys.entry(op.key.as_deref()).or_default();
        slot.0.push(op);
        match op.outcome {
            Outcome::Fail => {
                report.failed += 1;
                continue;
            }
            Outcome::Ok => report.ok += 1,
            Outcome::Info => report.indeterminate += 1,
        }
        match model.compile(op)? {
            Some(compiled) => slot.1.push((op, compiled)),
            None => report.unknown_reads += 1,
        }
    }
    report.keys = keys.len();

    struct Key<'a, O> {
        key: Option<&'a str>,
        all: Vec<&'a Operation>,
        sources: Vec<&'a Operation>,
        ops: Vec<SearchOp<O>>,
    }
    let prepared: Vec<Key<'_, M::Op>> = keys
        .into_iter()
        .map(|(key, (all, mut compiled))| {
            report.unobservable += simplify(model, &mut compiled);
            compiled.sort_by_key(|(op, _)| (op.invoke_time, op.index));
            let ops = search_ops(model, &compiled);
            let sources = compiled.into_iter().map(|(op, _)| op).collect();
            Key {
                key,
                all,
                sources,
                ops,
            }
        })
        .collect();

    // Search all keys round-robin, a slice of steps at a time, and stop at
    // the first key that fails: a cheap failing key is found even when
    // another failing key would need an exhaustive search.
    let mut searches: Vec<Option<KeySearch<'_, M>>> = prepared
        .iter()
        .map(|k| Some(KeySearch::new(model, &k.ops)))
        .collect();
    let mut active = searches.len();
    while active > 0 && report.failures.is_empty() {
        for (i, slot) in searches.iter_mut().enumerate() {
            let Some(search) = slot else { continue };
            let progress = search.advance(SLICE);
            report.configurations = report.configurations.max(search.configurations());
            match progress {
                Progress::Running => continue,
                Progress::Linearizable => {}
                Progress::Illegal => {
                    let k = &prepared[i];
                    if let Some(search) = slot.take() {
                        if let Some(blocked) = search.explain() {
                            report.failures.push(report::build_failure(
                                model, k.key, &k.all, &k.sources, &k.ops, &blocked,
                            ));
                        }
                    }
                    active -= 1;
                    break;
                }
            }
            *slot = None;
            active -= 1;
        }
    }
    report.unchecked_keys = active;
    Ok(report)
}

/// Applies [`Model::simplify`] until it keeps everything; returns how many
/// operations were dropped.
fn simplify<M: Model>(model: &M, compiled: &mut Vec<(&Operation, M::Op)>) -> usize {
    let mut dropped = 0;
    loop {
        let view: Vec<(&M::Op, bool)> = compiled
            .iter()
            .map(|(op, c)| (c, op.outcome != Outcome::Ok))
            .collect();
        let plan = model.simplify(&view);
        if plan.iter().all(|p| matches!(p, Simplification::Keep)) {
            return dropped;
        }
        let mut kept = Vec::with_capacity(compiled.len());
        for ((op, c), p) in compiled.drain(..).zip(plan) {
            match p {
                Simplification::Keep => kept.push((op, c)),
                Simplification::Replace(with) => kept.push((op, with)),
                Simplification::Drop => dropped += 1,
            }
        }
        *compiled = kept;
    }
}

/// Builds the search input: `ok` operations get their completion as
/// deadline; indeterminate ones none, unless the model shows that some
/// completed operation observed their effect (then the earliest such
/// completion, see [`Model::observers`]).
fn search_ops<M: Model>(model: &M, compiled: &[(&Operation, M::Op)]) -> Vec<SearchOp<M::Op>> {
    let definite_ret = |op: &Operation| match op.outcome {
        Outcome::Ok => Some(op.complete_time.unwrap_or(op.invoke_time)),
        Outcome::Info | Outcome::Fail => None,
    };
    let view: Vec<(&M::Op, bool)> = compiled
        .iter()
        .map(|(op, c)| (c, op.outcome != Outcome::Ok))
        .collect();
    let observers = model.observers(&view);
    compiled
        .iter()
        .zip(observers)
        .map(|((op, c), seen_by)| SearchOp {
            op: c.clone(),
            call: op.invoke_time,
            ret: definite_ret(op).or_else(|| {
                seen_by
                    .iter()
                    .filter_map(|&j| definite_ret(compiled[j].0))
                    .min()
            }),
        })
        .collect()
}
