//! Jepsen-style runs through the Kubernetes API against a 3-replica cluster: ConfigMap
//! registers must stay linearizable, API watches must deliver exactly the store's
//! changes, in order, and lease holders' fenced writes must never go back a term, across
//! kills, pauses and (as root) partitions. They fail on any
//! anomaly. Partitions need root (network namespaces); without root the partition run is
//! skipped loudly (CI runs as root).
//!
//! The runs in this file take turns (one cluster at a time), so each one's timing does
//! not depend on how many others share the machine.

mod common;

use std::sync::Mutex;
use std::time::Duration;

use common::{is_root, keelson_bin};
use keelson_chaos::{Isolation, NemesisFamily};
use keelson_jepsen::lease::{LeaseHistory, WriteOutcome};
use keelson_jepsen::{linear, pair_events, synth, Function, ModelKind};
use keelson_jepsen_runner::{run, RunOptions, RunVerdict, Workload, REFERENCE_WATCHER};

static ONE_CLUSTER_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A 20 s run (faults every 3 s) that must be valid, inject faults and get real work done.
async fn kube_run(workload: Workload, family: NemesisFamily, seed: u64, min_ok: usize) -> RunVerdict {
    kube_run_with(workload, family, Duration::from_secs(3), seed, min_ok).await
}

#[allow(clippy::await_holding_lock)] // one run at a time, across test threads
/// One line of counts per run (and `extra`, then the summary), for the test log.
fn print_verdict(what: &str, started: std::time::Instant, verdict: &RunVerdict, extra: &str) {
    eprintln!(
        "{what} ({:.1}s): valid={} ops={} ok={} fail={} info={} faults={} availability={:?}\n{extra}{}",
        started.elapsed().as_secs_f64(),
        verdict.valid,
        verdict.invoked,
        verdict.ok,
        verdict.fail,
        verdict.info,
        verdict.faults,
        verdict.availability_during_faults,
        verdict.summary
    );
}

async fn kube_run_with(workload: Workload, family: NemesisFamily, interval: Duration, seed: u64, min_ok: usize) -> RunVerdict {
    let _turn = ONE_CLUSTER_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("tmp").keep();
    let opts = RunOptions {
        servers: 3,
        nodes: 0,
        node_args: Vec::new(),
        converge: Duration::ZERO,
        workload,
        nemesis: vec![family],
        time_limit: Duration::from_secs(20),
        nemesis_interval: interval,
        seed,
        clients: 8,
        dir: dir.clone(),
        keelson_bin: keelson_bin(),
        isolation: Isolation::Auto,
        lease: Default::default(),
    };
    let started = std::time::Instant::now();
    let verdict = run(opts).await.expect("the run itself must complete");
    print_verdict(&format!("{workload:?} under {family:?}"), started, &verdict, "");
    assert!(verdict.valid, "anomaly found by {workload:?} under {family:?}; artifacts in {}", dir.display());
    assert!(verdict.faults > 0, "no fault was injected");
    assert!(verdict.ok >= min_ok, "too few successful operations to mean anything: {} < {min_ok}", verdict.ok);
    verdict
}

fn history(v: &RunVerdict) -> Vec<keelson_jepsen::HistoryEvent> {
    keelson_jepsen::history::read_jsonl(&v.dir.join("history.jsonl")).expect("history").into_iter().map(|(_, e)| e).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn configmap_registers_stay_linearizable_under_kill_9_and_a_planted_anomaly_is_caught() {
    let v = kube_run(Workload::KubeRegister, NemesisFamily::Kill, 11, 100).await;
    let mut events = history(&v);
    // Every kind of operation completed through the API, not just reads.
    for f in [Function::Read, Function::Write, Function::Cas] {
        let ok = events.iter().filter(|e| e.f == f && e.kind == keelson_jepsen::EventKind::Ok).count();
        assert!(ok > 0, "no {f:?} completed");
    }
    // The same pipeline must fail once the recorded history is made non-linearizable.
    assert!(synth::inject(&mut events, synth::Anomaly::NeverWrittenRead, 3), "could not plant an anomaly");
    let report = linear::check(ModelKind::CasRegister, &pair_events(&events).expect("pairs")).expect("check");
    assert!(!report.is_linearizable(), "a read of a never-written value went unnoticed");
    let _ = std::fs::remove_dir_all(&v.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn configmap_registers_stay_linearizable_under_pause() {
    // Pauses longer than the clients' operation timeout: requests stuck in a paused API
    // server are given up on (info) and may still take effect after the resume.
    let v = kube_run_with(Workload::KubeRegister, NemesisFamily::Pause, Duration::from_secs(6), 12, 100).await;
    let _ = std::fs::remove_dir_all(&v.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn configmap_registers_stay_linearizable_while_members_are_removed_and_re_added() {
    let v = kube_run(Workload::KubeRegister, NemesisFamily::Membership, 16, 100).await;
    let _ = std::fs::remove_dir_all(&v.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn configmap_registers_stay_linearizable_under_partitions() {
    if !is_root() {
        eprintln!("SKIPPED (needs root): partitions need network namespaces; CI runs this as root");
        return;
    }
    let v = kube_run(Workload::KubeRegister, NemesisFamily::Partition, 13, 100).await;
    let _ = std::fs::remove_dir_all(&v.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn api_watches_deliver_the_stores_changes_exactly_across_kills_and_resumes() {
    let v = kube_run(Workload::KubeWatch, NemesisFamily::Kill, 14, 50).await;
    let mut events = history(&v);
    let is_event = |e: &keelson_jepsen::HistoryEvent| e.f == Function::WatchEvent;
    // The store's own sequence was recorded, and API watchers resumed across servers.
    assert!(events.iter().any(|e| is_event(e) && e.watcher == Some(REFERENCE_WATCHER)), "no reference sequence");
    assert!(events.iter().any(|e| e.f == Function::WatchResume), "no watcher ever resumed");
    // A dropped API watch event (one from the middle, so later events or resumes cover
    // its revision) must be caught by the same checker.
    let api_events: Vec<usize> =
        (0..events.len()).filter(|&i| is_event(&events[i]) && events[i].watcher != Some(REFERENCE_WATCHER)).collect();
    let idx = api_events[api_events.len() / 2];
    // An API event whose content differs from the store's must be caught too.
    let mut altered = events.clone();
    altered[idx].event = Some(keelson_jepsen::ChangeKind::Put);
    altered[idx].value = keelson_jepsen::Value::str("never-written");
    let report = keelson_jepsen::check_watch(&altered).expect("check");
    assert!(!report.is_valid(), "altering {:?} went unnoticed", events[idx]);
    let dropped = events.remove(idx);
    let report = keelson_jepsen::check_watch(&events).expect("check");
    assert!(!report.is_valid(), "dropping {dropped:?} went unnoticed");
    let _ = std::fs::remove_dir_all(&v.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn api_watches_deliver_the_stores_changes_exactly_across_partitions() {
    if !is_root() {
        eprintln!("SKIPPED (needs root): partitions need network namespaces; CI runs this as root");
        return;
    }
    let v = kube_run(Workload::KubeWatch, NemesisFamily::Partition, 15, 50).await;
    let _ = std::fs::remove_dir_all(&v.dir);
}

/// A 20 s lease run (faults every 5 s, each outlasting the 3 s lease) that must be
/// valid, inject faults that hit the holder (the seeds are chosen so that the first
/// faults target the leader, which for this workload means the lease holder's server),
/// recover from each within the bound, and get real work done. With `failover`, it must
/// also fail over at least once, with acknowledged writes in two terms or more.
///
/// Pauses and partitions do not require a failover: while the Raft leader is paused or
/// cut off, the other servers' linearizable reads wait up to 5 s for read-index answers
/// from it (even after one of them has become the Raft leader), so when the holder's
/// server is also the Raft leader no candidate can take over during a 5 s fault, and
/// the holder may go on after the heal (it "survived": valid, and reported as such).
#[allow(clippy::await_holding_lock)] // one run at a time, across test threads
async fn lease_run(family: NemesisFamily, seed: u64, failover: bool) -> (RunVerdict, LeaseHistory) {
    let _turn = ONE_CLUSTER_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("tmp").keep();
    let opts = RunOptions {
        servers: 3,
        nodes: 0,
        node_args: Vec::new(),
        converge: Duration::ZERO,
        workload: Workload::Lease,
        nemesis: vec![family],
        time_limit: Duration::from_secs(20),
        nemesis_interval: Duration::from_secs(5),
        seed,
        clients: 3,
        dir: dir.clone(),
        keelson_bin: keelson_bin(),
        isolation: Isolation::Auto,
        lease: Default::default(),
    };
    let started = std::time::Instant::now();
    let verdict = run(opts).await.expect("the run itself must complete");
    let f = verdict.failover.clone().expect("lease runs report failover figures");
    print_verdict(&format!("Lease under {family:?}"), started, &verdict, &format!("failover: p50={:?} ms max={:?} ms ({f})\n", f.p50_ms(), f.max_ms()));
    assert!(verdict.valid, "anomaly found by the lease workload under {family:?}; artifacts in {}", dir.display());
    assert!(verdict.faults > 0, "no fault was injected");
    assert!(verdict.ok >= 50, "too few acknowledged writes to mean anything: {}", verdict.ok);
    assert!(f.holder_hits > 0, "no fault hit the lease holder");
    assert!(f.failovers_ms.len() + f.survived > 0, "no recovery after a fault on the holder: {f}");
    let text = std::fs::read_to_string(dir.join("lease-history.json")).expect("lease history");
    let history: LeaseHistory = serde_json::from_str(&text).expect("lease history parses");
    if failover {
        assert!(!f.failovers_ms.is_empty(), "no failover after a fault on the holder: {f}");
        let terms: std::collections::HashSet<i64> =
            history.writes.iter().filter(|w| matches!(w.outcome, WriteOutcome::Ok { .. })).map(|w| w.token).collect();
        assert!(terms.len() >= 2, "acknowledged writes of only {} term(s)", terms.len());
    }
    (verdict, history)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lease_holders_never_go_back_a_term_under_kill_9_and_planted_anomalies_are_caught() {
    let (v, history) = lease_run(NemesisFamily::Kill, 6, true).await;
    let check = |h: &LeaseHistory| keelson_jepsen::check_lease(h).expect("well-formed");
    assert!(check(&history).is_valid());
    // An acknowledged write lost from the final state must be caught.
    let mut lost = history.clone();
    let i = lost.stored.len() / 2;
    let gone = lost.stored.remove(i);
    assert!(!check(&lost).is_valid(), "losing {gone:?} went unnoticed");
    // A write of the first term stored after the last term's writes: the term went back.
    let mut back = history.clone();
    let first_token = back.stored.iter().map(|s| s.token).min().expect("stored writes");
    let top = back.stored.iter().map(|s| s.revision).max().expect("stored writes");
    let stale = back.stored.iter_mut().find(|s| s.token == first_token).expect("a write of the first term");
    stale.revision = top + 1;
    let stale = *stale;
    if let Some(w) = back.writes.iter_mut().find(|w| (w.contender, w.seq) == (stale.contender, stale.seq)) {
        w.outcome = WriteOutcome::Unknown;
    }
    let report = check(&back);
    assert!(!report.is_valid() && report.to_string().contains("terms went back"), "a stale write at the end went unnoticed: {report}");
    // A write refused as fenced (or, failing that, one that failed) found stored.
    let mut refused = history.clone();
    let w = refused
        .writes
        .iter()
        .find(|w| matches!(w.outcome, WriteOutcome::Fenced | WriteOutcome::Failed))
        .expect("some write was refused or failed under kill -9")
        .clone();
    refused.stored.push(keelson_jepsen::lease::StoredWrite { contender: w.contender, token: w.token, seq: w.seq, revision: top + 5 });
    assert!(!check(&refused).is_valid(), "a stored {:?} write went unnoticed", w.outcome);
    let _ = std::fs::remove_dir_all(&v.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lease_holders_never_go_back_a_term_under_pause() {
    let (v, _) = lease_run(NemesisFamily::Pause, 8, false).await;
    let _ = std::fs::remove_dir_all(&v.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lease_holders_never_go_back_a_term_under_partitions() {
    if !is_root() {
        eprintln!("SKIPPED (needs root): partitions need network namespaces; CI runs this as root");
        return;
    }
    let (v, _) = lease_run(NemesisFamily::Partition, 34, false).await;
    let _ = std::fs::remove_dir_all(&v.dir);
}
