//! Sequential specifications ("models") that histories are checked against.
//!
//! A [`Model`] turns each [`Operation`] into a model-specific step and says
//! whether that step is possible in a given state. Both models here are
//! per-key: keyed histories are split by key and every key is checked
//! independently (P-compositionality), with the model describing one key.

use std::fmt::Debug;
use std::hash::Hash;

use crate::history::{Function, Value};
use crate::ops::{Operation, Outcome};

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
    /// which indeterminate ones may be dropped because no operation could
    /// ever observe their effect. Must be sound: dropping an operation may
    /// never turn a linearizable history into a non-linearizable one. The
    /// default drops nothing.
    fn unobservable(&self, ops: &[(&Self::Op, bool)]) -> Vec<bool> {
        vec![false; ops.len()]
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
}

/// A compiled compare-and-set register step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegisterOp {
    /// A read that returned this value (`Nil` = unset).
    Read(Value),
    /// A write.
    Write(Value),
    /// A cas from the first value to the second.
    Cas(Value, Value),
}

/// Compare-and-set register: `read` → value or nil, `write v`,
/// `cas [from to]`; initially nil (unset).
#[derive(Debug, Clone, Copy, Default)]
pub struct CasRegister;

impl Model for CasRegister {
    type State = Value;
    type Op = RegisterOp;

    fn name(&self) -> &'static str {
        "cas-register"
    }

    fn init(&self) -> Value {
        Value::Nil
    }

    fn compile(&self, op: &Operation) -> Result<Option<RegisterOp>, ModelError> {
        match op.f {
            Function::Read => Ok(match op.outcome {
                Outcome::Ok => Some(RegisterOp::Read(op.output.clone())),
                // An unknown read constrains nothing.
                Outcome::Info | Outcome::Fail => None,
            }),
            Function::Write => Ok(Some(RegisterOp::Write(op.value.clone()))),
            Function::Cas => match &op.value {
                Value::List(items) if items.len() == 2 => {
                    Ok(Some(RegisterOp::Cas(items[0].clone(), items[1].clone())))
                }
                other => Err(ModelError::BadValue {
                    index: op.index,
                    f: op.f,
                    expected: "[from to]",
                    found: other.clone(),
                }),
            },
            f => Err(ModelError::UnsupportedFunction {
                index: op.index,
                model: self.name(),
                f,
            }),
        }
    }

    fn step(&self, state: &Value, op: &RegisterOp) -> Option<Value> {
        match op {
            RegisterOp::Read(v) => (v == state).then(|| state.clone()),
            RegisterOp::Write(v) => Some(v.clone()),
            RegisterOp::Cas(from, to) => (from == state).then(|| to.clone()),
        }
    }

    fn describe_state(&self, state: &Value) -> String {
        state.to_string()
    }

    /// An indeterminate write of `v` (or cas to `v`) is unobservable if no
    /// read returns `v` and no cas expects `v`: in any linearization, the
    /// next operation after it can then only be a write, which is legal in
    /// any state, so removing it keeps the linearization valid.
    fn unobservable(&self, ops: &[(&RegisterOp, bool)]) -> Vec<bool> {
        let observed: std::collections::HashSet<&Value> = ops
            .iter()
            .filter_map(|(op, _)| match op {
                RegisterOp::Read(v) | RegisterOp::Cas(v, _) => Some(v),
                RegisterOp::Write(_) => None,
            })
            .collect();
        ops.iter()
            .map(|(op, indeterminate)| {
                let installs = match op {
                    RegisterOp::Write(v) | RegisterOp::Cas(_, v) => v,
                    RegisterOp::Read(_) => return false,
                };
                *indeterminate && !observed.contains(&installs)
            })
            .collect()
    }

    /// If an indeterminate operation is the only one that installs `v`
    /// (and `v` is not the initial nil), every completed read of `v` and
    /// every completed cas from `v` needs it to have taken effect first.
    fn observers(&self, ops: &[(&RegisterOp, bool)]) -> Vec<Vec<usize>> {
        let installs = |op: &RegisterOp| match op {
            RegisterOp::Write(v) | RegisterOp::Cas(_, v) => Some(v.clone()),
            RegisterOp::Read(_) => None,
        };
        let mut producers: std::collections::HashMap<Value, usize> =
            std::collections::HashMap::new();
        for (op, _) in ops {
            if let Some(v) = installs(op) {
                *producers.entry(v).or_default() += 1;
            }
        }
        ops.iter()
            .map(|(op, indeterminate)| {
                let Some(v) = installs(op).filter(|v| *indeterminate && *v != Value::Nil && producers[v] == 1) else {
                    return Vec::new();
                };
                ops.iter()
                    .enumerate()
                    .filter(|(_, (other, ind))| {
                        !ind && matches!(other, RegisterOp::Read(r) | RegisterOp::Cas(r, _) if *r == v)
                    })
                    .map(|(i, _)| i)
                    .collect()
            })
            .collect()
    }
}

/// A compiled key-value step (for one key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvOp {
    /// A get that returned this string.
    Get(String),
    /// A put of this string.
    Put(String),
    /// An append of this string.
    Append(String),
}

/// Key-value map with `get`, `put` and `append` (string concatenation); a
/// missing key reads as the empty string. Keys are independent, so the
/// model describes a single key's string.
#[derive(Debug, Clone, Copy, Default)]
pub struct KvMap;

impl KvMap {
    fn string_of(op: &Operation, v: &Value, nil_ok: bool) -> Result<String, ModelError> {
        match v {
            Value::Str(s) => Ok(s.clone()),
            Value::Int(i) => Ok(i.to_string()),
            Value::Nil if nil_ok => Ok(String::new()),
            other => Err(ModelError::BadValue {
                index: op.index,
                f: op.f,
                expected: "a string",
                found: other.clone(),
            }),
        }
    }
}

impl Model for KvMap {
    type State = String;
    type Op = KvOp;

    fn name(&self) -> &'static str {
        "kv"
    }

    fn init(&self) -> String {
        String::new()
    }

    fn compile(&self, op: &Operation) -> Result<Option<KvOp>, ModelError> {
        match op.f {
            Function::Get => match op.outcome {
                Outcome::Ok => Ok(Some(KvOp::Get(Self::string_of(op, &op.output, true)?))),
                Outcome::Info | Outcome::Fail => Ok(None),
            },
            Function::Put => Ok(Some(KvOp::Put(Self::string_of(op, &op.value, true)?))),
            Function::Append => Ok(Some(KvOp::Append(Self::string_of(op, &op.value, true)?))),
            f => Err(ModelError::UnsupportedFunction {
                index: op.index,
                model: self.name(),
                f,
            }),
        }
    }

    fn step(&self, state: &String, op: &KvOp) -> Option<String> {
        match op {
            KvOp::Get(v) => (v == state).then(|| state.clone()),
            KvOp::Put(v) => Some(v.clone()),
            KvOp::Append(v) => {
                let mut next = String::with_capacity(state.len() + v.len());
                next.push_str(state);
                next.push_str(v);
                Some(next)
            }
        }
    }

    fn describe_state(&self, state: &String) -> String {
        format!("{state:?}")
    }

    /// An indeterminate put or append of a non-empty string `s` is
    /// unobservable if no get returned a string containing `s`: every state
    /// it influences contains `s` until the next put, so no get can follow
    /// it before that put, and puts and appends are legal in any state.
    fn unobservable(&self, ops: &[(&KvOp, bool)]) -> Vec<bool> {
        let reads: Vec<&str> = ops
            .iter()
            .filter_map(|(op, _)| match op {
                KvOp::Get(v) => Some(v.as_str()),
                KvOp::Put(_) | KvOp::Append(_) => None,
            })
            .collect();
        ops.iter()
            .map(|(op, indeterminate)| match op {
                KvOp::Put(s) | KvOp::Append(s) => {
                    *indeterminate && !s.is_empty() && !reads.iter().any(|r| r.contains(s.as_str()))
                }
                KvOp::Get(_) => false,
            })
            .collect()
    }

    /// When every written string of the key is a self-delimiting token
    /// (first characters of written strings occur in them only at the
    /// start, last characters only at the end; Jepsen's `"x 4 0 y"`
    /// values), any state is a sequence of whole tokens, so a get whose
    /// result contains a token written by a single indeterminate operation
    /// needs that operation to have taken effect first.
    fn observers(&self, ops: &[(&KvOp, bool)]) -> Vec<Vec<usize>> {
        let mut none = vec![Vec::new(); ops.len()];
        let written: Vec<&str> = ops
            .iter()
            .filter_map(|(op, _)| match op {
                KvOp::Put(v) | KvOp::Append(v) => Some(v.as_str()),
                KvOp::Get(_) => None,
            })
            .collect();
        let firsts: std::collections::HashSet<char> =
            written.iter().filter_map(|w| w.chars().next()).collect();
        let lasts: std::collections::HashSet<char> =
            written.iter().filter_map(|w| w.chars().last()).collect();
        let self_delimiting = written.iter().all(|w| {
            let n = w.chars().count();
            n > 0
                && w.chars().enumerate().all(|(i, c)| {
                    (i == 0 || !firsts.contains(&c)) && (i + 1 == n || !lasts.contains(&c))
                })
        });
        if !self_delimiting {
            return none;
        }
        let mut count: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for w in &written {
            *count.entry(w).or_default() += 1;
        }
        for (i, (op, indeterminate)) in ops.iter().enumerate() {
            let (KvOp::Put(v) | KvOp::Append(v)) = op else {
                continue;
            };
            if !indeterminate || count[v.as_str()] != 1 {
                continue;
            }
            none[i] = ops
                .iter()
                .enumerate()
                .filter(|(_, (other, ind))| {
                    !ind && matches!(other, KvOp::Get(r) if r.contains(v.as_str()))
                })
                .map(|(j, _)| j)
                .collect();
        }
        none
    }
}
