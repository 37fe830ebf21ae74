//! Sequential specifications ("models") that histories are checked against.
//!
//! A [`Model`] turns each [`Operation`] into a model-specific step and says
//! whether that step is possible in a given state. Both models here are
//! per-key: keyed histories are split by key and every key is checked
//! independently (P-compositionality), with the model describing one key.

mod kv;
mod register;

use std::fmt::Debug;
use std::hash::Hash;

pub use kv::{KvMap, KvOp, KvState};
pub use register::{CasRegister, RegisterOp};

use crate::history::{Function, Value};
use crate::ops::Operation;

/// Errors of translating operations into model steps.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// The model has no such function.
    #[error("op #{index}: the {model} model has no function `{f}`")]
    UnsupportedFunction {
        /// Operation index.
        index: usize,
        /// Model name.
        model: &'static str,
        /// The function found.
        f: Function,
    },
    /// The operation's argument or result has the wrong shape.
    #[error("op #{index}: {f} expects {expected}, got {found}")]
    BadValue {
        /// Operation index.
        index: usize,
        /// Function.
        f: Function,
        /// What the model expects.
        expected: &'static str,
        /// What was found.
        found: Value,
    },
}

/// A sequential specification of one object (one key).
pub trait Model {
    /// Model state. Cheap to hash; the checker interns states.
    type State: Clone + Eq + Hash + Debug;
    /// One compiled operation (argument plus, for completed reads, result).
    type Op: Clone + Debug;

    /// Short model name for messages.
    fn name(&self) -> &'static str;

    /// The initial state.
    fn init(&self) -> Self::State;

    /// Translates an `ok` or `info` operation (failed operations never reach
    /// the model). Returns `Ok(None)` when the operation constrains nothing
    /// and can be dropped, e.g. a read whose result is unknown.
    fn compile(&self, op: &Operation) -> Result<Option<Self::Op>, ModelError>;

    /// Applies `op` in `state`: `Some(next)` if `op`, with its recorded
    /// result, can take effect in `state`, `None` otherwise. For an
    /// indeterminate operation returning `None` just means it does not take
    /// effect at that point.
    fn step(&self, state: &Self::State, op: &Self::Op) -> Option<Self::State>;

    /// Human-readable state for reports.
    fn describe_state(&self, state: &Self::State) -> String;

    /// Given one key's compiled operations (`true` = indeterminate), says
    /// how to simplify each before the search, typically because no
    /// operation can ever observe its effect. Must be sound: the simplified
    /// history must be linearizable exactly when the original is. Applied
    /// repeatedly until everything is [`Simplification::Keep`], so a
    /// replacement must itself be kept. The default keeps everything.
    fn simplify(&self, ops: &[(&Self::Op, bool)]) -> Vec<Simplification<Self::Op>> {
        vec![Simplification::Keep; ops.len()]
    }

    /// Given one key's compiled operations (`true` = indeterminate), lists
    /// for each indeterminate operation the definite operations whose
    /// results can only be explained if it took effect before them (e.g. a
    /// read of a value only it wrote). The checker then requires it to take
    /// effect before the earliest of their completions. Must be sound: the
    /// constraint must hold in every linearization. The default lists none.
    fn observers(&self, ops: &[(&Self::Op, bool)]) -> Vec<Vec<usize>> {
        vec![Vec::new(); ops.len()]
    }

    /// Lookahead used to prune the search: `due` is the definite operation
    /// that must take effect next-soonest, `pending` every other operation
    /// that may still take effect before it (in any order, any subset).
    /// Returns false only if, from `state`, `due` can certainly not succeed
    /// whatever `pending` does. Must be sound; the default says true.
    fn viable(&self, state: &Self::State, due: &Self::Op, pending: &[&Self::Op]) -> bool {
        let _ = (state, due, pending);
        true
    }
}

/// How [`Model::simplify`] treats one operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Simplification<O> {
    /// Search with the operation as it is.
    Keep,
    /// Remove the (indeterminate) operation: it may as well never happen.
    Drop,
    /// Search with an equivalent operation instead.
    Replace(O),
}
