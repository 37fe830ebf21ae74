//! Short Jepsen-style runs against a 3-replica cluster, one per nemesis family. They
//! fail on any anomaly. Partitions need root (network namespaces); without root the
//! partition run is skipped loudly (CI runs as root).

mod common;

use std::time::Duration;

use common::{is_root, keelson_bin};
use keelson_chaos::{Isolation, NemesisFamily};
use keelson_jepsen::{linear, pair_events, synth, ModelKind};
use keelson_jepsen_runner::{run, RunOptions, Workload};

async fn short_run(family: NemesisFamily, seed: u64) -> keelson_jepsen_runner::RunVerdict {
    short_run_on(3, Workload::Register, family, seed).await
}

/// A 15 s run that must be valid, inject faults and get real work done.
async fn short_run_on(
    servers: usize,
    workload: Workload,
    family: NemesisFamily,
    seed: u64,
) -> keelson_jepsen_runner::RunVerdict {
    let dir = tempfile::tempdir().expect("tmp").keep();
    let opts = RunOptions {
        servers,
        nodes: 0,
        node_args: Vec::new(),
        converge: Duration::ZERO,
        workload,
        nemesis: vec![family],
        time_limit: Duration::from_secs(15),
        nemesis_interval: Duration::from_secs(3),
        seed,
        clients: 8,
        dir: dir.clone(),
        keelson_bin: keelson_bin(),
        isolation: Isolation::Auto,
        lease: Default::default(),
    };
    let verdict = run(opts).await.expect("the run itself must complete");
    eprintln!(
        "{family:?}: valid={} ops={} ok={} fail={} info={} faults={} availability={:?}\n{}",
        verdict.valid, verdict.invoked, verdict.ok, verdict.fail, verdict.info, verdict.faults, verdict.availability_during_faults, verdict.summary
    );
    assert!(verdict.valid, "anomaly found under {family:?}; artifacts in {}", dir.display());
    assert!(verdict.faults > 0, "no fault was injected");
    assert!(verdict.ok > 100, "too few successful operations to mean anything: {}", verdict.ok);
    verdict
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn register_stays_linearizable_under_kill_9_and_the_checker_sees_a_planted_anomaly() {
    let verdict = short_run(NemesisFamily::Kill, 1).await;
    // The same pipeline must fail once the recorded history is made non-linearizable.
    let path = verdict.dir.join("history.jsonl");
    let mut events: Vec<_> =
        keelson_jepsen::history::read_jsonl(&path).expect("history").into_iter().map(|(_, e)| e).collect();
    assert!(synth::inject(&mut events, synth::Anomaly::NeverWrittenRead, 3), "could not plant an anomaly");
    let report = linear::check(ModelKind::CasRegister, &pair_events(&events).expect("pairs")).expect("check");
    assert!(!report.is_linearizable(), "a read of a never-written value went unnoticed");
    let _ = std::fs::remove_dir_all(&verdict.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn register_stays_linearizable_under_pause() {
    let v = short_run(NemesisFamily::Pause, 2).await;
    let _ = std::fs::remove_dir_all(&v.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn register_stays_linearizable_under_partitions() {
    if !is_root() {
        eprintln!("SKIPPED (needs root): partitions need network namespaces; CI runs this as root");
        return;
    }
    let v = short_run(NemesisFamily::Partition, 3).await;
    let _ = std::fs::remove_dir_all(&v.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn register_stays_linearizable_while_members_are_removed_and_re_added() {
    let v = short_run(NemesisFamily::Membership, 6).await;
    let _ = std::fs::remove_dir_all(&v.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn five_replicas_stay_linearizable_under_partitions() {
    if !is_root() {
        eprintln!("SKIPPED (needs root): partitions need network namespaces; CI runs this as root");
        return;
    }
    let v = short_run_on(5, Workload::Register, NemesisFamily::Partition, 5).await;
    let _ = std::fs::remove_dir_all(&v.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watches_stay_ordered_gap_free_and_lossless_across_kills_and_resumes() {
    let v = short_run_on(3, Workload::Watch, NemesisFamily::Kill, 4).await;
    // A dropped event must be caught by the same checker.
    let path = v.dir.join("history.jsonl");
    let mut events: Vec<_> =
        keelson_jepsen::history::read_jsonl(&path).expect("history").into_iter().map(|(_, e)| e).collect();
    // One from the middle of the stream, so later events or resumes cover its revision.
    let watch_events: Vec<usize> =
        (0..events.len()).filter(|&i| events[i].f == keelson_jepsen::Function::WatchEvent).collect();
    let idx = watch_events[watch_events.len() / 2];
    let dropped = events.remove(idx);
    let report = keelson_jepsen::check_watch(&events).expect("check");
    assert!(!report.is_valid(), "dropping {dropped:?} went unnoticed");
    let _ = std::fs::remove_dir_all(&v.dir);
}
