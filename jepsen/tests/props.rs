//! Property tests: simulated histories are linearizable, planted anomalies
//! are caught, and the checker agrees with a brute-force search on small
//! histories.

use keelson_jepsen::history::{EventKind, Function, HistoryEvent, Value};
use keelson_jepsen::linear::{check, ModelKind};
use keelson_jepsen::model::{CasRegister, KvMap, Model};
use keelson_jepsen::ops::{pair_events, Operation, Outcome};
use keelson_jepsen::synth::{generate, inject, Anomaly, SynthConfig, SynthModel};
use proptest::prelude::*;
use proptest::sample::select;

fn kind_of(model: SynthModel) -> ModelKind {
    match model {
        SynthModel::Register => ModelKind::CasRegister,
        SynthModel::Kv => ModelKind::Kv,
    }
}

fn verdict(model: SynthModel, events: &[HistoryEvent]) -> bool {
    let ops = pair_events(events).expect("pairs");
    let report = check(kind_of(model), &ops).expect("fits the model");
    report.is_linearizable()
}

fn config() -> impl Strategy<Value = SynthConfig> {
    (
        any::<u64>(),
        1usize..6,
        0usize..150,
        select(vec![SynthModel::Register, SynthModel::Kv]),
        0usize..4,
        prop_oneof![Just(None), (1i64..6).prop_map(Some)],
        0.0f64..0.3,
        0.0f64..0.3,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(
                seed,
                processes,
                operations,
                model,
                keys,
                value_range,
                fail,
                info,
                pending,
                reuse,
            )| {
                SynthConfig {
                    model,
                    processes,
                    operations,
                    keys,
                    value_range,
                    fail_rate: fail,
                    info_rate: info,
                    leave_pending: pending,
                    reuse_process_after_info: reuse,
                    seed,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn simulated_histories_are_linearizable(cfg in config()) {
        let events = generate(&cfg);
        prop_assert!(verdict(cfg.model, &events), "{cfg:?}");
    }

    #[test]
    fn planted_anomalies_are_detected(
        seed in any::<u64>(),
        processes in 2usize..5,
        operations in 20usize..100,
        model in select(vec![SynthModel::Register, SynthModel::Kv]),
        anomaly in select(vec![
            Anomaly::NeverWrittenRead,
            Anomaly::FailedWriteVisible,
            Anomaly::WrongCas,
            Anomaly::StaleRead,
            Anomaly::SwappedReads,
        ]),
        info in 0.0f64..0.2,
    ) {
        // Exhaustive searches of kv histories with long unobserved runs of
        // appends grow factorially; keep failing kv histories short.
        let operations = if model == SynthModel::Kv { operations.min(60) } else { operations };
        let cfg = SynthConfig {
            model,
            processes,
            operations,
            keys: 0,
            value_range: None,
            fail_rate: 0.15,
            info_rate: info,
            leave_pending: true,
            reuse_process_after_info: false,
            seed,
        };
        // The kv model has no cas and no register-style stale read.
        let anomaly = match (model, anomaly) {
            (SynthModel::Kv, Anomaly::WrongCas) => Anomaly::SwappedReads,
            (SynthModel::Kv, Anomaly::StaleRead) => Anomaly::FailedWriteVisible,
            (_, a) => a,
        };
        let mut events = generate(&cfg);
        prop_assume!(inject(&mut events, anomaly, seed));
        prop_assert!(!verdict(model, &events), "{anomaly:?} not detected in {cfg:?}");
    }

    #[test]
    fn agrees_with_brute_force(
        seed in any::<u64>(),
        processes in 1usize..5,
        operations in 0usize..8,
        model in select(vec![SynthModel::Register, SynthModel::Kv]),
        mutations in proptest::collection::vec((any::<prop::sample::Index>(), 0i64..4), 0..3),
    ) {
        let cfg = SynthConfig {
            model,
            processes,
            operations,
            keys: 0,
            value_range: Some(3),
            fail_rate: 0.15,
            info_rate: 0.2,
            leave_pending: true,
            reuse_process_after_info: false,
            seed,
        };
        let mut events = generate(&cfg);
        // Randomly change some ok read results: yields both verdicts.
        let reads: Vec<usize> = (0..events.len())
            .filter(|&i| events[i].kind == EventKind::Ok && matches!(events[i].f, Function::Read | Function::Get))
            .collect();
        for (index, v) in mutations {
            if reads.is_empty() {
                break;
            }
            let i = reads[index.index(reads.len())];
            events[i].value = match model {
                SynthModel::Register if v == 3 => Value::Nil,
                SynthModel::Register => Value::Int(v),
                SynthModel::Kv => Value::Str(["", "(0)", "(1)", "(0)<1001>"][v as usize].to_owned()),
            };
        }
        let ops = pair_events(&events).expect("pairs");
        let expected = match model {
            SynthModel::Register => brute_force(&CasRegister, &ops),
            SynthModel::Kv => brute_force(&KvMap, &ops),
        };
        prop_assert_eq!(verdict(model, &events), expected, "{:?}", ops);
    }
}

/// Linearizability by definition: some order of all `ok` operations and any
/// subset of indeterminate ones that respects real time and the model.
fn brute_force<M: Model>(model: &M, ops: &[Operation]) -> bool {
    let compiled: Vec<(&Operation, M::Op)> = ops
        .iter()
        .filter(|op| op.outcome != Outcome::Fail)
        .filter_map(|op| model.compile(op).expect("fits").map(|c| (op, c)))
        .collect();
    let mut used = vec![false; compiled.len()];
    explore(model, &compiled, &mut used, &model.init())
}

fn explore<M: Model>(
    model: &M,
    ops: &[(&Operation, M::Op)],
    used: &mut [bool],
    state: &M::State,
) -> bool {
    let all_ok_done = ops
        .iter()
        .zip(used.iter())
        .all(|((op, _), &u)| u || op.outcome != Outcome::Ok);
    if all_ok_done {
        return true;
    }
    for i in 0..ops.len() {
        if used[i] {
            continue;
        }
        let candidate = ops[i].0;
        // Minimal: no unused ok op completed before this one was invoked.
        let minimal = ops.iter().zip(used.iter()).all(|((op, _), &u)| {
            u || op.outcome != Outcome::Ok
                || op.complete_time.is_none_or(|t| t >= candidate.invoke_time)
        });
        if !minimal {
            continue;
        }
        if let Some(next) = model.step(state, &ops[i].1) {
            used[i] = true;
            let found = explore(model, ops, used, &next);
            used[i] = false;
            if found {
                return true;
            }
        }
    }
    false
}

#[test]
fn anomaly_injection_is_not_vacuous() {
    for (model, anomalies) in [
        (
            SynthModel::Register,
            vec![
                Anomaly::NeverWrittenRead,
                Anomaly::FailedWriteVisible,
                Anomaly::WrongCas,
                Anomaly::StaleRead,
                Anomaly::SwappedReads,
            ],
        ),
        (
            SynthModel::Kv,
            vec![
                Anomaly::NeverWrittenRead,
                Anomaly::FailedWriteVisible,
                Anomaly::SwappedReads,
            ],
        ),
    ] {
        for anomaly in anomalies {
            let mut planted = 0;
            for seed in 0..40 {
                let cfg = SynthConfig {
                    model,
                    processes: 4,
                    operations: 80,
                    value_range: None,
                    fail_rate: 0.15,
                    seed,
                    ..SynthConfig::default()
                };
                let mut events = generate(&cfg);
                assert!(verdict(model, &events), "clean history {seed} must pass");
                if inject(&mut events, anomaly, seed) {
                    planted += 1;
                    assert!(
                        !verdict(model, &events),
                        "{anomaly:?} seed {seed} not detected"
                    );
                }
            }
            assert!(
                planted >= 20,
                "{model:?} {anomaly:?}: planted only {planted} of 40"
            );
        }
    }
}
