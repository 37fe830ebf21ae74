//! Synthetic histories for tests and benchmarks.
//!
//! [`generate`] simulates clients running against a correct sequential
//! object: each operation is invoked, takes effect (or not) at one instant
//! chosen at random while it is in flight, and completes later, so
//! invoke/complete windows overlap at random around the true linearization
//! points. Outcomes are consistent with the effect: `ok` took effect, `fail`
//! did not, `info` either did or did not; operations still in flight at the
//! end may be left without completion. Such histories are linearizable by
//! construction.
//!
//! [`inject`] then plants an anomaly that makes a history non-linearizable
//! for certain (see [`Anomaly`] for why each one is guaranteed).

use std::collections::HashMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::history::{EventKind, Function, HistoryEvent, Value};
use crate::ops::{pair_events, Operation, Outcome};

/// Which object the simulated clients use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SynthModel {
    /// CAS register: read / write / cas.
    Register,
    /// Key-value map: get / put / append.
    Kv,
}

/// Parameters of [`generate`].
#[derive(Debug, Clone)]
pub struct SynthConfig {
    /// Object type.
    pub model: SynthModel,
    /// Concurrent client slots.
    pub processes: usize,
    /// Operations to invoke.
    pub operations: usize,
    /// Number of keys; 0 = unkeyed history.
    pub keys: usize,
    /// Register values / put values drawn from `0..n`; `None` = unique.
    pub value_range: Option<i64>,
    /// Probability that an operation fails (no effect).
    pub fail_rate: f64,
    /// Probability that an operation ends `info` (effect or not).
    pub info_rate: f64,
    /// Leave some operations still in flight at the end uncompleted.
    pub leave_pending: bool,
    /// After an `info`, keep the process id (instead of Jepsen's new id).
    pub reuse_process_after_info: bool,
    /// Random seed.
    pub seed: u64,
}

impl Default for SynthConfig {
    fn default() -> Self {
        SynthConfig {
            model: SynthModel::Register,
            processes: 5,
            operations: 100,
            keys: 0,
            value_range: Some(5),
            fail_rate: 0.1,
            info_rate: 0.05,
            leave_pending: true,
            reuse_process_after_info: false,
            seed: 0,
        }
    }
}

enum Decision {
    Ok(Value),
    Fail,
    Info,
}

struct InFlight {
    f: Function,
    key: Option<String>,
    value: Value,
    decided: Option<Decision>,
}

struct Sim {
    rng: StdRng,
    cfg: SynthConfig,
    time: u64,
    counter: i64,
    state: HashMap<Option<String>, Value>,
    events: Vec<HistoryEvent>,
}

impl Sim {
    fn emit(
        &mut self,
        process: u64,
        kind: EventKind,
        f: Function,
        key: &Option<String>,
        value: Value,
    ) {
        self.time += 1 + self.rng.gen_range(0..3);
        let mut e = HistoryEvent::new(process, kind, f, value).at(self.time);
        e.key = key.clone();
        self.events.push(e);
    }

    fn fresh(&mut self) -> i64 {
        self.counter += 1;
        self.counter
    }

    fn value(&mut self) -> Value {
        match self.cfg.value_range {
            Some(n) => Value::Int(self.rng.gen_range(0..n.max(1))),
            None => Value::Int(self.fresh()),
        }
    }

    fn new_op(&mut self) -> InFlight {
        let key = (self.cfg.keys > 0).then(|| format!("k{}", self.rng.gen_range(0..self.cfg.keys)));
        let roll = self.rng.gen_range(0..10);
        let (f, value) = match (self.cfg.model, roll) {
            (SynthModel::Register, 0..=3) => (Function::Read, Value::Nil),
            (SynthModel::Register, 4..=6) => (Function::Write, self.value()),
            (SynthModel::Register, _) => {
                let current = self.state.get(&key).cloned().unwrap_or(Value::Nil);
                let from = if self.rng.gen_bool(0.5) {
                    current
                } else {
                    self.value()
                };
                (Function::Cas, Value::pair(from, self.value()))
            }
            (SynthModel::Kv, 0..=4) => (Function::Get, Value::Nil),
            (SynthModel::Kv, 5) => {
                let n = match self.value() {
                    Value::Int(n) => n,
                    _ => 0,
                };
                (Function::Put, Value::Str(format!("({n})")))
            }
            (SynthModel::Kv, _) => {
                let n = self.fresh();
                (Function::Append, Value::Str(format!("<{n}>")))
            }
        };
        InFlight {
            f,
            key,
            value,
            decided: None,
        }
    }

    /// The linearization point: decides the outcome and applies the effect.
    fn decide(&mut self, op: &InFlight) -> Decision {
        let roll: f64 = self.rng.gen();
        let fail = roll < self.cfg.fail_rate;
        let info = !fail && roll < self.cfg.fail_rate + self.cfg.info_rate;
        if fail {
            return Decision::Fail;
        }
        let apply = !info || self.rng.gen_bool(0.5);
        let current = self
            .state
            .get(&op.key)
            .cloned()
            .unwrap_or(match self.cfg.model {
                SynthModel::Register => Value::Nil,
                SynthModel::Kv => Value::Str(String::new()),
            });
        let (next, output, possible) = match (op.f, &op.value) {
            (Function::Write | Function::Put, v) => (Some(v.clone()), Value::Nil, true),
            (Function::Append, Value::Str(s)) => match &current {
                Value::Str(cur) => (Some(Value::Str(format!("{cur}{s}"))), Value::Nil, true),
                _ => (None, Value::Nil, false),
            },
            (Function::Cas, Value::List(pair)) if pair.len() == 2 => {
                if pair[0] == current {
                    (Some(pair[1].clone()), Value::Nil, true)
                } else {
                    (None, Value::Nil, false)
                }
            }
            _ => (None, current, true),
        };
        if info {
            if apply && possible {
                if let Some(next) = next {
                    self.state.insert(op.key.clone(), next);
                }
            }
            return Decision::Info;
        }
        if !possible {
            return Decision::Fail;
        }
        if let Some(next) = next {
            self.state.insert(op.key.clone(), next);
        }
        Decision::Ok(output)
    }
}

/// Simulates a linearizable history (see the module docs).
pub fn generate(cfg: &SynthConfig) -> Vec<HistoryEvent> {
    let processes = cfg.processes.max(1);
    let mut sim = Sim {
        rng: StdRng::seed_from_u64(cfg.seed),
        cfg: cfg.clone(),
        time: 0,
        counter: 1_000,
        state: HashMap::new(),
        events: Vec::new(),
    };
    let mut ids: Vec<u64> = (0..processes as u64).collect();
    let mut slots: Vec<Option<InFlight>> = (0..processes).map(|_| None).collect();
    let mut invoked = 0;
    while invoked < cfg.operations {
        let s = sim.rng.gen_range(0..processes);
        match slots[s].take() {
            None => {
                let op = sim.new_op();
                sim.emit(ids[s], EventKind::Invoke, op.f, &op.key, op.value.clone());
                invoked += 1;
                slots[s] = Some(op);
            }
            Some(mut op) if op.decided.is_none() => {
                op.decided = Some(sim.decide(&op));
                slots[s] = Some(op);
            }
            Some(op) => complete(&mut sim, &mut ids, s, processes, op),
        }
    }
    for (s, slot) in slots.iter_mut().enumerate() {
        let Some(mut op) = slot.take() else {
            continue;
        };
        if cfg.leave_pending && sim.rng.gen_bool(0.5) {
            if op.decided.is_none() && sim.rng.gen_bool(0.5) {
                sim.decide(&op);
            }
            continue;
        }
        if op.decided.is_none() {
            op.decided = Some(sim.decide(&op));
        }
        complete(&mut sim, &mut ids, s, processes, op);
    }
    sim.events
}

fn complete(sim: &mut Sim, ids: &mut [u64], slot: usize, processes: usize, op: InFlight) {
    let process = ids[slot];
    match op.decided {
        Some(Decision::Ok(output)) => {
            let value = if matches!(op.f, Function::Read | Function::Get) {
                output
            } else {
                op.value
            };
            sim.emit(process, EventKind::Ok, op.f, &op.key, value);
        }
        Some(Decision::Fail) => sim.emit(process, EventKind::Fail, op.f, &op.key, op.value),
        Some(Decision::Info) | None => {
            sim.emit(process, EventKind::Info, op.f, &op.key, op.value);
            if !sim.cfg.reuse_process_after_info {
                ids[slot] += processes as u64;
            }
        }
    }
}

/// Anomalies that [`inject`] can plant. Each is non-linearizable for
/// certain, whatever the rest of the history:
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Anomaly {
    /// An `ok` read returns a value no operation ever wrote (register: an
    /// integer above every value in the history; kv: a string with a
    /// character no value contains).
    NeverWrittenRead,
    /// A failed write's value is made unique and an `ok` read returns it:
    /// its only producer did not happen.
    FailedWriteVisible,
    /// An `ok` cas's expected value is made one never written.
    WrongCas,
    /// Register: an `ok` read R returns a value `a` although an `ok` write of
    /// another value completed before R's invoke and every operation that
    /// can produce `a` completed `ok` before that write's invoke or was
    /// invoked after R completed.
    StaleRead,
    /// Two `ok` reads exchange results, where the earlier read R1 then
    /// returns a value whose producers (kv: the append of a token in it) were
    /// all invoked after R1 completed.
    SwappedReads,
}

fn is_read(op: &Operation) -> bool {
    matches!(op.f, Function::Read | Function::Get) && op.outcome == Outcome::Ok
}

fn max_int(events: &[HistoryEvent]) -> i64 {
    fn walk(v: &Value, m: &mut i64) {
        match v {
            Value::Int(i) => *m = (*m).max(*i),
            Value::List(items) => items.iter().for_each(|x| walk(x, m)),
            _ => {}
        }
    }
    let mut m = 0;
    events.iter().for_each(|e| walk(&e.value, &mut m));
    m
}

/// Values an operation may install (writes and cas targets, any outcome).
fn produces(op: &Operation) -> Option<&Value> {
    match (op.f, &op.value) {
        (Function::Write | Function::Put, v) => Some(v),
        (Function::Cas, Value::List(pair)) if pair.len() == 2 => Some(&pair[1]),
        _ => None,
    }
}

fn set_output(events: &mut [HistoryEvent], op: &Operation, value: Value) {
    if let Some(c) = op.complete_event {
        events[c].value = value;
    }
}

fn set_input(events: &mut [HistoryEvent], op: &Operation, value: Value) {
    events[op.invoke_event].value = value.clone();
    if let Some(c) = op.complete_event {
        events[c].value = value;
    }
}

/// Plants `anomaly` at a random suitable place; returns false (leaving the
/// history unchanged) if the history has no suitable place.
pub fn inject(events: &mut [HistoryEvent], anomaly: Anomaly, seed: u64) -> bool {
    let Ok(ops) = pair_events(events) else {
        return false;
    };
    let mut rng = StdRng::seed_from_u64(seed);
    let kv = ops
        .iter()
        .any(|op| matches!(op.f, Function::Get | Function::Put | Function::Append));
    let fresh = max_int(events) + 1_000_000;
    let fresh_value = if kv {
        Value::str("\u{2620}")
    } else {
        Value::Int(fresh)
    };
    let pick = |candidates: Vec<&Operation>, rng: &mut StdRng| -> Option<Operation> {
        (!candidates.is_empty()).then(|| candidates[rng.gen_range(0..candidates.len())].clone())
    };
    match anomaly {
        Anomaly::NeverWrittenRead => {
            let Some(r) = pick(ops.iter().filter(|o| is_read(o)).collect(), &mut rng) else {
                return false;
            };
            set_output(events, &r, fresh_value);
            true
        }
        Anomaly::FailedWriteVisible => {
            let writes: Vec<&Operation> = ops
                .iter()
                .filter(|o| {
                    o.outcome == Outcome::Fail
                        && matches!(o.f, Function::Write | Function::Put | Function::Append)
                })
                .collect();
            let Some(w) = pick(writes, &mut rng) else {
                return false;
            };
            let Some(r) = pick(
                ops.iter()
                    .filter(|o| is_read(o) && o.key == w.key)
                    .collect(),
                &mut rng,
            ) else {
                return false;
            };
            set_input(events, &w, fresh_value.clone());
            set_output(events, &r, fresh_value);
            true
        }
        Anomaly::WrongCas => {
            let cas: Vec<&Operation> = ops
                .iter()
                .filter(|o| o.f == Function::Cas && o.outcome == Outcome::Ok)
                .collect();
            let Some(c) = pick(cas, &mut rng) else {
                return false;
            };
            let Value::List(pair) = &c.value else {
                return false;
            };
            set_input(events, &c, Value::pair(fresh_value, pair[1].clone()));
            true
        }
        Anomaly::StaleRead => inject_stale(events, &ops, &mut rng),
        Anomaly::SwappedReads => inject_swap(events, &ops, &mut rng),
    }
}

fn inject_stale(events: &mut [HistoryEvent], ops: &[Operation], rng: &mut StdRng) -> bool {
    let mut reads: Vec<&Operation> = ops
        .iter()
        .filter(|o| is_read(o) && o.f == Function::Read)
        .collect();
    // Random order of attempts.
    for i in (1..reads.len()).rev() {
        reads.swap(i, rng.gen_range(0..=i));
    }
    for r in reads {
        let r_end = r.complete_time.unwrap_or(u64::MAX);
        let same_key: Vec<&Operation> = ops.iter().filter(|o| o.key == r.key).collect();
        // Candidate overwrites: ok writes/cas completed before R's invoke.
        for w in same_key.iter().filter(|o| {
            o.outcome == Outcome::Ok
                && matches!(o.f, Function::Write | Function::Cas)
                && o.complete_time.is_some_and(|t| t < r.invoke_time)
        }) {
            let Some(b) = produces(w) else { continue };
            let mut values: Vec<Value> = same_key
                .iter()
                .filter_map(|o| produces(o).cloned())
                .collect();
            values.push(Value::Nil);
            for a in values.into_iter().filter(|a| a != b && *a != r.output) {
                let safe = same_key.iter().all(|p| {
                    if produces(p) != Some(&a) || p.outcome == Outcome::Fail {
                        return true;
                    }
                    let before = p.outcome == Outcome::Ok
                        && p.complete_time.is_some_and(|t| t < w.invoke_time);
                    before || p.invoke_time > r_end
                });
                if safe && (a != Value::Nil || w.invoke_time > 0) {
                    set_output(events, r, a);
                    return true;
                }
            }
        }
    }
    false
}

fn inject_swap(events: &mut [HistoryEvent], ops: &[Operation], rng: &mut StdRng) -> bool {
    let reads: Vec<&Operation> = ops.iter().filter(|o| is_read(o)).collect();
    let start = if reads.is_empty() {
        0
    } else {
        rng.gen_range(0..reads.len())
    };
    for k in 0..reads.len() {
        let r1 = reads[(start + k) % reads.len()];
        let r1_end = r1.complete_time.unwrap_or(u64::MAX);
        for r2 in reads
            .iter()
            .filter(|o| o.key == r1.key && o.output != r1.output && o.output != Value::Nil)
        {
            let b = &r2.output;
            let impossible = match (b, r1.f) {
                (Value::Str(s), Function::Get) => {
                    // A token `<n>` in b whose append was invoked after R1.
                    ops.iter().any(|o| {
                        o.f == Function::Append
                            && o.key == r1.key
                            && o.invoke_time > r1_end
                            && matches!(&o.value, Value::Str(t) if t.starts_with('<') && s.contains(t.as_str()))
                    })
                }
                (_, Function::Read) => ops
                    .iter()
                    .filter(|p| {
                        p.key == r1.key && p.outcome != Outcome::Fail && produces(p) == Some(b)
                    })
                    .all(|p| p.invoke_time > r1_end),
                _ => false,
            };
            if impossible {
                let (v1, v2) = (r1.output.clone(), r2.output.clone());
                set_output(events, r1, v2);
                set_output(events, r2, v1);
                return true;
            }
        }
    }
    false
}
