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
//! history is linearizable iff every key is.

mod cache;
mod report;
mod search;

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

pub use report::{KeyFailure, LinearizedStep};

use crate::model::{CasRegister, KvMap, Model, ModelError};
use crate::ops::{Operation, Outcome};
use search::{search, SearchOp, SearchResult};

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
            other => Err(format!("unknown model `{other}` (expected cas-register or kv)")),
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
    /// Number of distinct keys (1 for an unkeyed history).
    pub keys: usize,
    /// Largest number of configurations memoized for one key.
    pub configurations: usize,
    /// Keys that are not linearizable, in key order.
    pub failures: Vec<KeyFailure>,
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
            format!("NOT linearizable ({} of {} keys failed)", self.failures.len(), self.keys)
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

/// Checks `ops` against `model`, key by key. Fails only if an operation
/// does not fit the model (wrong function or value shape).
pub fn check_operations<M: Model>(model: &M, ops: &[Operation]) -> Result<LinearReport, ModelError> {
    let mut report = LinearReport {
        model: model.name(),
        operations: ops.len(),
        ok: 0,
        indeterminate: 0,
        failed: 0,
        unknown_reads: 0,
        keys: 0,
        configurations: 0,
        failures: Vec::new(),
    };
    // Per key: every operation (for reports) and the compiled ones.
    let mut keys: BTreeMap<Option<&str>, (Vec<&Operation>, Vec<(&Operation, M::Op)>)> = BTreeMap::new();
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
    for (key, (all, mut compiled)) in keys {
        compiled.sort_by_key(|(op, _)| (op.invoke_time, op.index));
        let search_ops: Vec<SearchOp<M::Op>> = compiled
            .iter()
            .map(|(op, c)| SearchOp {
                op: c.clone(),
                call: op.invoke_time,
                ret: match op.outcome {
                    Outcome::Ok => Some(op.complete_time.unwrap_or(op.invoke_time)),
                    Outcome::Info | Outcome::Fail => None,
                },
            })
            .collect();
        let (result, configurations) = search(model, &search_ops);
        report.configurations = report.configurations.max(configurations);
        if let SearchResult::Illegal(blocked) = result {
            let sources: Vec<&Operation> = compiled.iter().map(|(op, _)| *op).collect();
            report
                .failures
                .push(report::build_failure(model, key, &all, &sources, &search_ops, &blocked));
        }
    }
    Ok(report)
}
