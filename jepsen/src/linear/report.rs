//! Explaining a non-linearizable key: the operation that cannot be
//! linearized, the linearization the search had built when it got stuck,
//! and a small sub-history.
//!
//! What "smallest failing sub-history" means here: the search fails at the
//! return of some operation X: every way of ordering the operations that
//! precede it got stuck there. So the *minimal failing prefix* of the key's
//! history is every event up to X's completion (operations still in flight
//! at that instant count as indeterminate): it is already not linearizable,
//! while every shorter prefix is. A prefix is a sound witness (unlike an
//! arbitrary subset of operations, since dropping a write can turn a valid
//! history invalid). Reports show the tail of that prefix: X, every
//! operation overlapping X, and the last steps of the linearization the
//! search had built when it reached X's completion, plus any operation invoked in between.

use std::collections::HashMap;
use std::fmt::Write as _;

use super::search::{Blocked, SearchOp};
use crate::model::Model;
use crate::ops::{Operation, Outcome};
use crate::timeline;

/// How many of the last linearized operations a report shows.
const TAIL: usize = 8;

/// One step of a linearization.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinearizedStep {
    /// Operation index ([`Operation::index`]).
    pub op: usize,
    /// Model state after the step.
    pub state_after: String,
}

/// Why one key is not linearizable.
#[derive(Debug, Clone)]
pub struct KeyFailure {
    /// The key (`None` for an unkeyed history).
    pub key: Option<String>,
    /// The operation that cannot be linearized: the search could not get
    /// past its completion.
    pub blocked: Operation,
    /// The linearization the search had built when it got furthest (a
    /// legal order of operations before X's completion, after which X, or
    /// an operation due right after, could not be satisfied), in order.
    pub linearization: Vec<LinearizedStep>,
    /// Model state after `linearization`.
    pub final_state: String,
    /// Operations (not failed) of the key in the minimal failing prefix.
    pub prefix_operations: usize,
    /// Operations (not failed) of the key in the whole history.
    pub key_operations: usize,
    /// The sub-history shown: operations of the key around the failure,
    /// sorted by invoke time (failed ones included, for context).
    pub window: Vec<Operation>,
    /// Indeterminate operations invoked before the window that were not
    /// linearized (they could still take effect); not shown.
    pub older_pending: usize,
}

pub(super) fn build_failure<M: Model>(
    model: &M,
    key: Option<&str>,
    all: &[&Operation],
    sources: &[&Operation],
    ops: &[SearchOp<M::Op>],
    blocked: &Blocked<M::State>,
) -> KeyFailure {
    let x = sources[blocked.blocked];
    let x_end = x.complete_time.unwrap_or(u64::MAX);

    let mut state = model.init();
    let mut linearization = Vec::with_capacity(blocked.path.len());
    for &i in &blocked.path {
        if let Some(next) = model.step(&state, &ops[i].op) {
            state = next;
        }
        linearization.push(LinearizedStep {
            op: sources[i].index,
            state_after: model.describe_state(&state),
        });
    }

    let tail_start = linearization.len().saturating_sub(TAIL);
    let tail: Vec<usize> = linearization[tail_start..].iter().map(|s| s.op).collect();
    let by_index: HashMap<usize, &Operation> = all.iter().map(|op| (op.index, *op)).collect();
    let t_start = tail
        .iter()
        .filter_map(|i| by_index.get(i).map(|op| op.invoke_time))
        .chain(std::iter::once(x.invoke_time))
        .min()
        .unwrap_or(x.invoke_time);
    let linearized: std::collections::HashSet<usize> = linearization.iter().map(|s| s.op).collect();

    let mut window = Vec::new();
    let mut older_pending = 0;
    for op in all {
        if op.invoke_time > x_end {
            continue;
        }
        let in_tail = tail.contains(&op.index);
        let overlaps = op.invoke_time >= t_start
            || (op.outcome != Outcome::Info && op.complete_time.is_some_and(|t| t >= t_start));
        if in_tail || overlaps || op.index == x.index {
            window.push((*op).clone());
        } else if op.outcome == Outcome::Info && !linearized.contains(&op.index) {
            older_pending += 1;
        }
    }
    window.sort_by_key(|op| (op.invoke_time, op.index));

    KeyFailure {
        key: key.map(str::to_owned),
        blocked: x.clone(),
        linearization,
        final_state: model.describe_state(&blocked.state),
        prefix_operations: all
            .iter()
            .filter(|op| op.outcome != Outcome::Fail && op.invoke_time <= x_end)
            .count(),
        key_operations: all.iter().filter(|op| op.outcome != Outcome::Fail).count(),
        window,
        older_pending,
    }
}

impl KeyFailure {
    fn key_label(&self) -> String {
        match &self.key {
            Some(k) => format!("key {k:?}"),
            None => "the history".to_owned(),
        }
    }

    /// Multi-line explanation for humans.
    pub fn render_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "{} is not linearizable", self.key_label());
        let _ = writeln!(s, "  cannot linearize: {}", self.blocked);
        let _ = writeln!(
            s,
            "  no order of the operations before its completion is legal. Minimal failing prefix: the \
             key's history up to that completion ({} of {} operations; operations in flight there may \
             or may not have taken effect)",
            self.prefix_operations, self.key_operations
        );
        let _ = writeln!(
            s,
            "  linearization reached before getting stuck: {} operations, ending in state {}",
            self.linearization.len(),
            self.final_state
        );
        let tail_start = self.linearization.len().saturating_sub(TAIL);
        let by_index: HashMap<usize, &Operation> =
            self.window.iter().map(|op| (op.index, op)).collect();
        for step in &self.linearization[tail_start..] {
            match by_index.get(&step.op) {
                Some(op) => {
                    let _ = writeln!(s, "    {op}  => {}", step.state_after);
                }
                None => {
                    let _ = writeln!(s, "    #{}  => {}", step.op, step.state_after);
                }
            }
        }
        let _ = writeln!(
            s,
            "  sub-history around the failure ({} operations{}):",
            self.window.len(),
            if self.older_pending > 0 {
                format!(
                    "; {} older indeterminate operations not shown",
                    self.older_pending
                )
            } else {
                String::new()
            }
        );
        let order = self.order();
        for op in &self.window {
            let mark = if op.index == self.blocked.index {
                "  <== cannot be linearized".to_owned()
            } else if let Some(pos) = order.get(&op.index) {
                format!("  [linearized {}]", pos + 1)
            } else {
                String::new()
            };
            let _ = writeln!(s, "    {op}{mark}");
        }
        s
    }

    /// Position of each linearized operation in the linearization.
    fn order(&self) -> HashMap<usize, usize> {
        self.linearization
            .iter()
            .enumerate()
            .map(|(i, s)| (s.op, i))
            .collect()
    }

    /// Self-contained HTML timeline of the sub-history (one lane per process,
    /// the blocked operation highlighted).
    pub fn timeline_html(&self) -> String {
        let title = format!("{} is not linearizable", self.key_label());
        let note = format!(
            "Cannot linearize {}. Linearization reached before getting stuck: {} operations, final state {}. \
             Numbers on bars give their position in it. Shown: the end of the minimal failing prefix \
             ({} of {} operations){}.",
            self.blocked,
            self.linearization.len(),
            self.final_state,
            self.prefix_operations,
            self.key_operations,
            if self.older_pending > 0 {
                format!("; {} older indeterminate operations omitted", self.older_pending)
            } else {
                String::new()
            }
        );
        timeline::render_html(
            &title,
            &note,
            &self.window,
            Some(self.blocked.index),
            &self.order(),
        )
    }
}
