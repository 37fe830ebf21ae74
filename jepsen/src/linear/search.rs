//! The Wing–Gong / Lowe linearizability search for one key, iterative.
//!
//! Call and return entries of all operations form a doubly linked list in
//! time order (calls before returns at equal times, so touching operations
//! count as concurrent). From the list head, the search tries to linearize
//! each call entry in turn; a call that is legal in the current model state
//! and leads to an unseen (linearized set, state) configuration is removed
//! ("lifted") from the list together with its return entry and pushed on an
//! explicit stack, and the scan restarts from the head. Reaching a return
//! entry means its operation had to be linearized by then: the search
//! backtracks by popping the stack. Indeterminate operations have no return
//! entry (their return is at +infinity), so they may be linearized at any
//! later point or never. The history is linearizable once every operation
//! with a return entry is linearized.

use std::collections::HashMap;

use super::cache::{Bitset, Cache, FastBuild};
use crate::model::Model;

const NONE: usize = usize::MAX;
const HEAD: usize = 0;

/// An operation prepared for the search.
#[derive(Debug, Clone)]
pub(crate) struct SearchOp<O> {
    /// Compiled model step.
    pub op: O,
    /// Invoke time.
    pub call: u64,
    /// Completion time of `ok` operations; `None` for indeterminate ones.
    pub ret: Option<u64>,
}

/// A configuration where the search got furthest before failing.
#[derive(Debug, Clone)]
pub(crate) struct Blocked<S> {
    /// Operation whose return entry could not be passed.
    pub blocked: usize,
    /// The linearization that reached it (operation indices, in order).
    pub path: Vec<usize>,
    /// Model state after `path`.
    pub state: S,
}

/// Result of checking one key.
#[derive(Debug, Clone)]
pub(crate) enum SearchResult<S> {
    /// A linearization exists.
    Linearizable,
    /// None exists; the deepest configuration reached.
    Illegal(Blocked<S>),
}

enum Run {
    Linearizable,
    /// Failed; the furthest return node reached.
    Illegal(usize),
    /// Stopped on reaching the given return node.
    Stopped(usize, Vec<usize>, u32),
}

struct Machine<'a, M: Model> {
    model: &'a M,
    ops: &'a [SearchOp<M::Op>],
    next: Vec<usize>,
    prev: Vec<usize>,
    node_op: Vec<usize>,
    node_is_call: Vec<bool>,
    call_node: Vec<usize>,
    ret_node: Vec<usize>,
    states: Vec<M::State>,
    state_ids: HashMap<M::State, u32, FastBuild>,
    transitions: HashMap<u64, u32, FastBuild>,
    configurations: usize,
}

/// Checks one key's operations, which must be sorted by `call` time.
/// Returns the result and the number of configurations explored.
pub(crate) fn search<M: Model>(model: &M, ops: &[SearchOp<M::Op>]) -> (SearchResult<M::State>, usize) {
    debug_assert!(ops.windows(2).all(|w| w[0].call <= w[1].call));
    let mut machine = Machine::new(model, ops);
    match machine.run(None) {
        Run::Linearizable => (SearchResult::Linearizable, machine.configurations),
        Run::Illegal(best) => {
            // Replay the (deterministic) search up to the moment it first
            // reached its furthest return entry, to capture that path.
            let explored = machine.configurations;
            match machine.run(Some(best)) {
                Run::Stopped(node, path, state) => (
                    SearchResult::Illegal(Blocked {
                        blocked: machine.node_op[node],
                        path,
                        state: machine.states[state as usize].clone(),
                    }),
                    explored,
                ),
                // Unreachable for a deterministic search; report without a path.
                Run::Linearizable | Run::Illegal(_) => (
                    SearchResult::Illegal(Blocked {
                        blocked: machine.node_op.get(best).copied().filter(|&op| op != NONE).unwrap_or(0),
                        path: Vec::new(),
                        state: model.init(),
                    }),
                    explored,
                ),
            }
        }
        Run::Stopped(..) => (SearchResult::Linearizable, machine.configurations),
    }
}

impl<'a, M: Model> Machine<'a, M> {
    fn new(model: &'a M, ops: &'a [SearchOp<M::Op>]) -> Self {
        let mut entries: Vec<(u64, u8, usize)> = Vec::with_capacity(ops.len() * 2);
        for (i, op) in ops.iter().enumerate() {
            entries.push((op.call, 0, i));
            if let Some(ret) = op.ret {
                entries.push((ret.max(op.call), 1, i));
            }
        }
        entries.sort_unstable();
        let n = entries.len() + 1;
        let mut m = Machine {
            model,
            ops,
            next: (1..=n).map(|i| if i == n { NONE } else { i }).collect(),
            prev: (0..n).map(|i| if i == 0 { NONE } else { i - 1 }).collect(),
            node_op: vec![NONE; n],
            node_is_call: vec![false; n],
            call_node: vec![NONE; ops.len()],
            ret_node: vec![NONE; ops.len()],
            states: Vec::new(),
            state_ids: HashMap::default(),
            transitions: HashMap::default(),
            configurations: 0,
        };
        for (pos, &(_, kind, op)) in entries.iter().enumerate() {
            let node = pos + 1;
            m.node_op[node] = op;
            m.node_is_call[node] = kind == 0;
            if kind == 0 {
                m.call_node[op] = node;
            } else {
                m.ret_node[op] = node;
            }
        }
        m
    }

    fn intern(&mut self, state: M::State) -> u32 {
        if let Some(&id) = self.state_ids.get(&state) {
            return id;
        }
        let id = self.states.len() as u32;
        self.states.push(state.clone());
        self.state_ids.insert(state, id);
        id
    }

    /// Memoized model step on interned states.
    fn transition(&mut self, state: u32, op: usize) -> Option<u32> {
        let key = (u64::from(state) << 32) ^ op as u64;
        if let Some(&next) = self.transitions.get(&key) {
            return (next != u32::MAX).then_some(next);
        }
        let next = self
            .model
            .step(&self.states[state as usize], &self.ops[op].op)
            .map(|s| self.intern(s));
        self.transitions.insert(key, next.unwrap_or(u32::MAX));
        next
    }

    fn unlink(&mut self, node: usize) {
        let (p, n) = (self.prev[node], self.next[node]);
        self.next[p] = n;
        if n != NONE {
            self.prev[n] = p;
        }
    }

    fn relink(&mut self, node: usize) {
        let (p, n) = (self.prev[node], self.next[node]);
        self.next[p] = node;
        if n != NONE {
            self.prev[n] = node;
        }
    }

    fn lift(&mut self, op: usize) {
        self.unlink(self.call_node[op]);
        if self.ret_node[op] != NONE {
            self.unlink(self.ret_node[op]);
        }
    }

    fn unlift(&mut self, op: usize) {
        if self.ret_node[op] != NONE {
            self.relink(self.ret_node[op]);
        }
        self.relink(self.call_node[op]);
    }

    fn run(&mut self, stop_at: Option<usize>) -> Run {
        let init = self.model.init();
        let mut state = self.intern(init);
        let mut remaining = self.ops.iter().filter(|o| o.ret.is_some()).count();
        let mut bits = Bitset::new(self.ops.len());
        let mut cache = Cache::default();
        let mut stack: Vec<(usize, u32)> = Vec::new();
        let mut best = 0;
        let mut entry = self.next[HEAD];
        let outcome = loop {
            if remaining == 0 {
                break Run::Linearizable;
            }
            if entry != NONE && self.node_is_call[entry] {
                let op = self.node_op[entry];
                if let Some(next_state) = self.transition(state, op) {
                    bits.set(op);
                    let first_pending = self.node_op[self.next[HEAD]];
                    if cache.insert(&bits, first_pending, next_state) {
                        stack.push((op, state));
                        state = next_state;
                        self.lift(op);
                        if self.ops[op].ret.is_some() {
                            remaining -= 1;
                        }
                        entry = self.next[HEAD];
                        continue;
                    }
                    bits.clear(op);
                }
                entry = self.next[entry];
                continue;
            }
            // A return entry: its operation should have been linearized.
            if entry != NONE {
                if stop_at == Some(entry) {
                    break Run::Stopped(entry, stack.iter().map(|&(op, _)| op).collect(), state);
                }
                best = best.max(entry);
            }
            let Some((top, prev_state)) = stack.pop() else {
                break Run::Illegal(best);
            };
            bits.clear(top);
            state = prev_state;
            self.unlift(top);
            if self.ops[top].ret.is_some() {
                remaining += 1;
            }
            entry = self.next[self.call_node[top]];
        };
        self.configurations = self.configurations.max(cache.len());
        // Restore the list for a possible second run.
        while let Some((top, _)) = stack.pop() {
            self.unlift(top);
        }
        outcome
    }
}
