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
//!
//! Lookahead: before accepting a step, the model is asked whether the
//! resulting state can still satisfy each of the operations due soonest
//! (the first return entries), given the operations that may still come
//! before them ([`Model::viable`]); if not, the step is pruned at once
//! instead of after exploring every interleaving up to that return.

use std::collections::HashMap;

use super::cache::{Bitset, Cache, FastBuild};
use crate::model::Model;

const NONE: usize = usize::MAX;
const HEAD: usize = 0;
/// How many of the operations due soonest the lookahead checks.
const LOOKAHEAD: usize = 8;

/// An operation prepared for the search.
#[derive(Debug, Clone)]
pub(crate) struct SearchOp<O> {
    /// Compiled model step.
    pub op: O,
    /// Invoke time.
    pub call: u64,
    /// Deadline: the completion time of `ok` operations, or of the first
    /// observer of an indeterminate one; `None` (= +infinity: optional)
    /// for other indeterminate operations.
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
    /// Scratch buffers of [`Machine::doomed`].
    pending: Vec<usize>,
    others: Vec<&'a M::Op>,
}

/// A resumable search over one key's operations.
pub(crate) struct KeySearch<'a, M: Model> {
    machine: Machine<'a, M>,
    run: RunState,
    finished: Option<Run>,
}

/// Progress of [`KeySearch::advance`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Progress {
    /// The step budget ran out; call again.
    Running,
    /// A linearization exists.
    Linearizable,
    /// No linearization exists.
    Illegal,
}

impl<'a, M: Model> KeySearch<'a, M> {
    /// Prepares the search; `ops` must be sorted by `call` time.
    pub(crate) fn new(model: &'a M, ops: &'a [SearchOp<M::Op>]) -> Self {
        debug_assert!(ops.windows(2).all(|w| w[0].call <= w[1].call));
        let mut machine = Machine::new(model, ops);
        let run = RunState::new(&mut machine, None);
        KeySearch {
            machine,
            run,
            finished: None,
        }
    }

    /// Runs at most `budget` search steps.
    pub(crate) fn advance(&mut self, budget: usize) -> Progress {
        if self.finished.is_none() {
            self.finished = self.run.advance(&mut self.machine, budget);
        }
        match self.finished {
            None => Progress::Running,
            Some(Run::Illegal(_)) => Progress::Illegal,
            Some(_) => Progress::Linearizable,
        }
    }

    /// Configurations memoized so far.
    pub(crate) fn configurations(&self) -> usize {
        self.run.cache.len()
    }

    /// After [`Progress::Illegal`]: replays the (deterministic) search up to
    /// the moment it first reached its furthest return entry and captures
    /// that configuration. Returns `None` if the search did not fail.
    pub(crate) fn explain(self) -> Option<Blocked<M::State>> {
        let KeySearch {
            mut machine,
            run,
            finished,
        } = self;
        let Some(Run::Illegal(best)) = finished else {
            return None;
        };
        // Free the first run's memo before the replay builds its own.
        drop(run);
        let mut replay = RunState::new(&mut machine, Some(best));
        Some(match replay.advance(&mut machine, usize::MAX) {
            Some(Run::Stopped(node, path, state)) => Blocked {
                blocked: machine.node_op[node],
                path,
                state: machine.states[state as usize].clone(),
            },
            // Unreachable for a deterministic search: report without a path.
            _ => Blocked {
                blocked: machine
                    .node_op
                    .get(best)
                    .copied()
                    .filter(|&op| op != NONE)
                    .unwrap_or(0),
                path: Vec::new(),
                state: machine.model.init(),
            },
        })
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
            pending: Vec::new(),
            others: Vec::new(),
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

    /// Lookahead: the return node of one of the [`LOOKAHEAD`] operations
    /// due soonest (the first return entries in the list) that the model
    /// says `state` can no longer satisfy, whatever the operations invoked
    /// before that return do first (see [`Model::viable`]); `None` if none.
    fn doomed(&mut self, state: u32) -> Option<usize> {
        let ops = self.ops;
        let mut node = self.next[HEAD];
        let mut checked = 0;
        self.pending.clear();
        // Operations due soonest, in deadline order; each may be preceded by
        // any operation invoked before its return.
        while node != NONE && checked < LOOKAHEAD {
            if self.node_is_call[node] {
                self.pending.push(self.node_op[node]);
            } else {
                checked += 1;
                let due = self.node_op[node];
                self.others.clear();
                self.others.extend(
                    self.pending
                        .iter()
                        .filter(|&&p| p != due)
                        .map(|&p| &ops[p].op),
                );
                if !self
                    .model
                    .viable(&self.states[state as usize], &ops[due].op, &self.others)
                {
                    return Some(node);
                }
            }
            node = self.next[node];
        }
        None
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
}

/// The mutable part of one search run, so that it can be suspended.
struct RunState {
    stop_at: Option<usize>,
    state: u32,
    remaining: usize,
    bits: Bitset,
    cache: Cache,
    stack: Vec<(usize, u32)>,
    best: usize,
    entry: usize,
}

impl RunState {
    /// Starts a run; the machine's list must be fully linked.
    fn new<M: Model>(machine: &mut Machine<'_, M>, stop_at: Option<usize>) -> RunState {
        let init = machine.model.init();
        RunState {
            stop_at,
            state: machine.intern(init),
            remaining: machine.ops.iter().filter(|o| o.ret.is_some()).count(),
            bits: Bitset::new(machine.ops.len()),
            cache: Cache::default(),
            stack: Vec::new(),
            best: 0,
            entry: machine.next[HEAD],
        }
    }

    /// Runs up to `budget` steps; `None` if the run is not finished. A
    /// finished run leaves the machine's list fully linked again.
    fn advance<M: Model>(&mut self, m: &mut Machine<'_, M>, budget: usize) -> Option<Run> {
        let mut steps = 0usize;
        let outcome = loop {
            if self.remaining == 0 {
                break Run::Linearizable;
            }
            if steps == budget {
                return None;
            }
            steps += 1;
            let entry = self.entry;
            if entry != NONE && m.node_is_call[entry] {
                let op = m.node_op[entry];
                if let Some(next_state) = m.transition(self.state, op) {
                    m.lift(op);
                    if let Some(observer) = m.doomed(next_state) {
                        // Linearizing `op` here makes the next operation due
                        // impossible: the search got as far as its return.
                        m.unlift(op);
                        if self.stop_at == Some(observer) {
                            let mut path: Vec<usize> = self.stack.iter().map(|&(o, _)| o).collect();
                            path.push(op);
                            break Run::Stopped(observer, path, next_state);
                        }
                        self.best = self.best.max(observer);
                        self.entry = m.next[entry];
                        continue;
                    }
                    self.bits.set(op);
                    let first_pending = match m.next[HEAD] {
                        NONE => m.ops.len(),
                        node => m.node_op[node],
                    };
                    if self.cache.insert(&self.bits, first_pending, next_state) {
                        self.stack.push((op, self.state));
                        self.state = next_state;
                        if m.ops[op].ret.is_some() {
                            self.remaining -= 1;
                        }
                        self.entry = m.next[HEAD];
                        continue;
                    }
                    self.bits.clear(op);
                    m.unlift(op);
                }
                self.entry = m.next[entry];
                continue;
            }
            // A return entry: its operation should have been linearized.
            if entry != NONE {
                if self.stop_at == Some(entry) {
                    break Run::Stopped(
                        entry,
                        self.stack.iter().map(|&(op, _)| op).collect(),
                        self.state,
                    );
                }
                self.best = self.best.max(entry);
            }
            let Some((top, prev_state)) = self.stack.pop() else {
                break Run::Illegal(self.best);
            };
            self.bits.clear(top);
            self.state = prev_state;
            m.unlift(top);
            if m.ops[top].ret.is_some() {
                self.remaining += 1;
            }
            self.entry = m.next[m.call_node[top]];
        };
        // Restore the list for a possible replay.
        while let Some((top, _)) = self.stack.pop() {
            m.unlift(top);
        }
        Some(outcome)
    }
}
