//! The compare-and-set register model.

use std::collections::{HashMap, HashSet};

use super::{Model, ModelError, Simplification};
use crate::history::{Function, Value};
use crate::ops::{Operation, Outcome};

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

    /// A due read of `v` (or cas from `v`) needs the register to hold `v`
    /// already or some pending write / cas to install `v`; reads change
    /// nothing.
    fn viable(&self, state: &Value, due: &RegisterOp, pending: &[&RegisterOp]) -> bool {
        let needed = match due {
            RegisterOp::Read(v) | RegisterOp::Cas(v, _) => v,
            RegisterOp::Write(_) => return true,
        };
        needed == state
            || pending
                .iter()
                .any(|op| matches!(op, RegisterOp::Write(v) | RegisterOp::Cas(_, v) if v == needed))
    }

    /// An indeterminate write of `v` (or cas to `v`) is dropped if no read
    /// returns `v` and no cas expects `v`: in any linearization, the next
    /// operation after it can then only be a write, which is legal in any
    /// state, so removing it keeps the linearization valid.
    fn simplify(&self, ops: &[(&RegisterOp, bool)]) -> Vec<Simplification<RegisterOp>> {
        let observed: HashSet<&Value> = ops
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
                    RegisterOp::Read(_) => return Simplification::Keep,
                };
                if *indeterminate && !observed.contains(&installs) {
                    Simplification::Drop
                } else {
                    Simplification::Keep
                }
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
        let mut producers: HashMap<Value, usize> = HashMap::new();
        for (op, _) in ops {
            if let Some(v) = installs(op) {
                *producers.entry(v).or_default() += 1;
            }
        }
        let mut readers: HashMap<&Value, Vec<usize>> = HashMap::new();
        for (i, (op, indeterminate)) in ops.iter().enumerate() {
            if let (RegisterOp::Read(v) | RegisterOp::Cas(v, _), false) = (op, indeterminate) {
                readers.entry(v).or_default().push(i);
            }
        }
        ops.iter()
            .map(|(op, indeterminate)| match installs(op) {
                Some(v) if *indeterminate && v != Value::Nil && producers[&v] == 1 => {
                    readers.get(&v).cloned().unwrap_or_default()
                }
                _ => Vec::new(),
            })
            .collect()
    }
}
