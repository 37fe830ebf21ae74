//! Timing of the linearizability checker on synthetic histories.
//!
//! Run with `cargo bench -p keelson-jepsen --bench check` (release build).
//! Prints the best and median wall time of several checks per scenario; it
//! asserts only the verdicts, never the timings.

use std::time::{Duration, Instant};

use keelson_jepsen::linear::{check, ModelKind};
use keelson_jepsen::ops::pair_events;
use keelson_jepsen::synth::{generate, SynthConfig, SynthModel};

struct Scenario {
    name: &'static str,
    model: ModelKind,
    cfg: SynthConfig,
}

fn main() {
    let runs: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7);
    let base = SynthConfig {
        processes: 10,
        operations: 10_000,
        seed: 42,
        ..SynthConfig::default()
    };
    let scenarios = [
        Scenario {
            name: "register, 10k ops, 10 clients, values 0..5, 10% fail, 5% info",
            model: ModelKind::CasRegister,
            cfg: base.clone(),
        },
        Scenario {
            name: "register, 10k ops, 10 clients, unique values, all ok",
            model: ModelKind::CasRegister,
            cfg: SynthConfig {
                value_range: None,
                fail_rate: 0.0,
                info_rate: 0.0,
                leave_pending: false,
                ..base.clone()
            },
        },
        Scenario {
            name: "register, 10k ops, 10 clients, values 0..5, 20% info",
            model: ModelKind::CasRegister,
            cfg: SynthConfig {
                info_rate: 0.2,
                ..base.clone()
            },
        },
        Scenario {
            name: "kv, 10k ops, 10 clients, 1 key, 5% info",
            model: ModelKind::Kv,
            cfg: SynthConfig {
                model: SynthModel::Kv,
                keys: 1,
                ..base.clone()
            },
        },
        Scenario {
            name: "kv, 10k ops, 10 clients, 10 keys, 5% info",
            model: ModelKind::Kv,
            cfg: SynthConfig {
                model: SynthModel::Kv,
                keys: 10,
                ..base.clone()
            },
        },
    ];
    for scenario in &scenarios {
        let events = generate(&scenario.cfg);
        let ops = pair_events(&events).expect("synthetic history pairs");
        let mut times: Vec<Duration> = Vec::with_capacity(runs);
        for _ in 0..runs {
            let start = Instant::now();
            let report = check(scenario.model, &ops).expect("synthetic history fits the model");
            times.push(start.elapsed());
            assert!(report.is_linearizable(), "{}: {}", scenario.name, report);
        }
        times.sort();
        println!(
            "{:<66} {:>6} ops: best {:>8.2} ms, median {:>8.2} ms",
            scenario.name,
            ops.len(),
            times[0].as_secs_f64() * 1e3,
            times[times.len() / 2].as_secs_f64() * 1e3
        );
    }
}
