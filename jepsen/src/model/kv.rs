//! The key-value model (one key's string): get, put, append.

use std::collections::{HashMap, HashSet};

use super::{Model, ModelError, Simplification};
use crate::history::{Function, Value};
use crate::ops::{Operation, Outcome};

/// Above this many (write × result byte) comparisons, simplification that
/// needs substring searches is skipped (it is only an optimization).
const SEARCH_BUDGET: usize = 50_000_000;

/// A compiled key-value step (for one key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvOp {
    /// A get that returned this string.
    Get(String),
    /// A put of this string.
    Put(String),
    /// An append of this string.
    Append(String),
    /// A put or append whose effect no get ever saw (see
    /// [`KvMap::simplify`]): it makes the state [`KvState::Unobservable`].
    Unseen,
}

/// State of one key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KvState {
    /// The key holds this string.
    Known(String),
    /// The key holds a string that contains the effect of a write no get
    /// ever returned; no get can succeed before the next put. All such
    /// strings are one state for the search.
    Unobservable,
}

/// Key-value map with `get`, `put` and `append` (string concatenation); a
/// missing key reads as the empty string. Keys are independent, so the
/// model describes a single key's string.
#[derive(Debug, Clone, Copy, Default)]
pub struct KvMap;

impl KvMap {
    fn string_of(op: &Operation, v: &Value) -> Result<String, ModelError> {
        match v {
            Value::Str(s) => Ok(s.clone()),
            Value::Int(i) => Ok(i.to_string()),
            Value::Nil => Ok(String::new()),
            other => Err(ModelError::BadValue {
                index: op.index,
                f: op.f,
                expected: "a string",
                found: other.clone(),
            }),
        }
    }
}

/// What the gets of one key returned, indexed for cheap "was this write
/// ever seen" questions.
struct Seen<'a> {
    results: Vec<&'a str>,
    /// When every written string is a self-delimiting token (characters
    /// that start a written string occur in written strings only at their
    /// start, characters that end one only at their end; e.g. Jepsen's
    /// `"x 4 0 y"`), every state is a sequence of whole tokens: then the
    /// tokens of each result, and each result's first token.
    tokens: Option<(HashSet<&'a str>, HashSet<&'a str>)>,
}

impl<'a> Seen<'a> {
    fn new(ops: &[(&'a KvOp, bool)]) -> Seen<'a> {
        let results: Vec<&str> = ops
            .iter()
            .filter_map(|(op, _)| match op {
                KvOp::Get(v) => Some(v.as_str()),
                _ => None,
            })
            .collect();
        let tokens = token_starts(ops).map(|firsts| {
            let mut all = HashSet::new();
            let mut first = HashSet::new();
            for r in &results {
                for (k, token) in split_tokens(r, &firsts).enumerate() {
                    if k == 0 {
                        first.insert(token);
                    }
                    all.insert(token);
                }
            }
            (all, first)
        });
        Seen { results, tokens }
    }

    /// Some result contains `s` (never for the empty string).
    fn contains(&self, s: &str, budget: &mut usize) -> Option<bool> {
        if let Some((all, _)) = &self.tokens {
            return Some(all.contains(s));
        }
        let cost: usize = self.results.iter().map(|r| r.len()).sum::<usize>().max(1);
        *budget = budget.checked_sub(cost)?;
        Some(self.results.iter().any(|r| r.contains(s)))
    }

    /// Some result starts with `s`.
    fn starts(&self, s: &str) -> bool {
        match &self.tokens {
            Some((_, first)) if !s.is_empty() => first.contains(s),
            _ => self.results.iter().any(|r| r.starts_with(s)),
        }
    }
}

/// The characters that start written strings, if the written strings are
/// self-delimiting tokens (see [`Seen::tokens`]).
fn token_starts(ops: &[(&KvOp, bool)]) -> Option<HashSet<char>> {
    let written: Vec<&str> = ops
        .iter()
        .filter_map(|(op, _)| match op {
            KvOp::Put(v) | KvOp::Append(v) => Some(v.as_str()),
            KvOp::Get(_) | KvOp::Unseen => None,
        })
        .collect();
    let firsts: HashSet<char> = written.iter().filter_map(|w| w.chars().next()).collect();
    let lasts: HashSet<char> = written.iter().filter_map(|w| w.chars().last()).collect();
    let delimited = written.iter().all(|w| {
        let n = w.chars().count();
        n > 0
            && w.chars().enumerate().all(|(i, c)| {
                (i == 0 || !firsts.contains(&c)) && (i + 1 == n || !lasts.contains(&c))
            })
    });
    delimited.then_some(firsts)
}

/// Splits a result into tokens, each starting at a token-start character.
fn split_tokens<'s>(s: &'s str, firsts: &HashSet<char>) -> impl Iterator<Item = &'s str> + 's {
    let starts: Vec<usize> = s
        .char_indices()
        .filter(|(_, c)| firsts.contains(c))
        .map(|(at, _)| at)
        .collect();
    (0..starts.len()).map(move |k| &s[starts[k]..starts.get(k + 1).copied().unwrap_or(s.len())])
}

impl Model for KvMap {
    type State = KvState;
    type Op = KvOp;

    fn name(&self) -> &'static str {
        "kv"
    }

    fn init(&self) -> KvState {
        KvState::Known(String::new())
    }

    fn compile(&self, op: &Operation) -> Result<Option<KvOp>, ModelError> {
        match op.f {
            Function::Get => match op.outcome {
                Outcome::Ok => Ok(Some(KvOp::Get(Self::string_of(op, &op.output)?))),
                Outcome::Info | Outcome::Fail => Ok(None),
            },
            Function::Put => Ok(Some(KvOp::Put(Self::string_of(op, &op.value)?))),
            Function::Append => Ok(Some(KvOp::Append(Self::string_of(op, &op.value)?))),
            f => Err(ModelError::UnsupportedFunction {
                index: op.index,
                model: self.name(),
                f,
            }),
        }
    }

    fn step(&self, state: &KvState, op: &KvOp) -> Option<KvState> {
        match (op, state) {
            (KvOp::Get(v), KvState::Known(s)) => (v == s).then(|| state.clone()),
            (KvOp::Get(_), KvState::Unobservable) => None,
            (KvOp::Put(v), _) => Some(KvState::Known(v.clone())),
            (KvOp::Append(v), KvState::Known(s)) => {
                let mut next = String::with_capacity(s.len() + v.len());
                next.push_str(s);
                next.push_str(v);
                Some(KvState::Known(next))
            }
            (KvOp::Append(_), KvState::Unobservable) | (KvOp::Unseen, _) => {
                Some(KvState::Unobservable)
            }
        }
    }

    fn describe_state(&self, state: &KvState) -> String {
        match state {
            KvState::Known(s) => format!("{s:?}"),
            KvState::Unobservable => "<a string no get returned>".to_owned(),
        }
    }

    /// A put of `v` is unseen if no get returned a string starting with
    /// `v`, an append of a non-empty `s` if no get returned one containing
    /// `s`: every state it produces keeps that mark until the next put, so
    /// no get can succeed in between. Unseen indeterminate writes are
    /// dropped (they may as well never happen); unseen completed ones
    /// become [`KvOp::Unseen`], which merges all the states they lead to.
    fn simplify(&self, ops: &[(&KvOp, bool)]) -> Vec<Simplification<KvOp>> {
        let seen = Seen::new(ops);
        let mut budget = SEARCH_BUDGET;
        ops.iter()
            .map(|(op, indeterminate)| {
                let unseen = match op {
                    KvOp::Put(v) => !seen.starts(v),
                    KvOp::Append(s) if !s.is_empty() => {
                        seen.contains(s, &mut budget) == Some(false)
                    }
                    KvOp::Append(_) | KvOp::Get(_) | KvOp::Unseen => false,
                };
                match (unseen, indeterminate) {
                    (false, _) => Simplification::Keep,
                    (true, true) => Simplification::Drop,
                    (true, false) => Simplification::Replace(KvOp::Unseen),
                }
            })
            .collect()
    }

    /// When the written strings are self-delimiting tokens, any state is a
    /// sequence of whole tokens, so a get whose result contains a token
    /// written by a single indeterminate operation needs that operation to
    /// have taken effect first.
    fn observers(&self, ops: &[(&KvOp, bool)]) -> Vec<Vec<usize>> {
        let mut observers = vec![Vec::new(); ops.len()];
        let Some(firsts) = token_starts(ops) else {
            return observers;
        };
        let mut count: HashMap<&str, usize> = HashMap::new();
        for (op, _) in ops {
            if let KvOp::Put(v) | KvOp::Append(v) = op {
                *count.entry(v).or_default() += 1;
            }
        }
        let mut readers: HashMap<&str, Vec<usize>> = HashMap::new();
        for (j, (op, indeterminate)) in ops.iter().enumerate() {
            let (KvOp::Get(r), false) = (op, indeterminate) else {
                continue;
            };
            for token in split_tokens(r, &firsts) {
                let list = readers.entry(token).or_default();
                if list.last() != Some(&j) {
                    list.push(j);
                }
            }
        }
        for (i, (op, indeterminate)) in ops.iter().enumerate() {
            if let (KvOp::Put(v) | KvOp::Append(v), true) = (op, indeterminate) {
                if count[v.as_str()] == 1 {
                    observers[i] = readers.get(v.as_str()).cloned().unwrap_or_default();
                }
            }
        }
        observers
    }

    /// A due get of `out`: appends only extend the state, so `out` must
    /// start with the current state or with the value of a pending put.
    fn viable(&self, state: &KvState, due: &KvOp, pending: &[&KvOp]) -> bool {
        let KvOp::Get(out) = due else { return true };
        matches!(state, KvState::Known(s) if out.starts_with(s.as_str()))
            || pending
                .iter()
                .any(|op| matches!(op, KvOp::Put(v) if out.starts_with(v.as_str())))
    }
}
