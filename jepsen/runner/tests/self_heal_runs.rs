//! Self-healing under node faults, on real nodes (each a `keelson agent` with its own
//! containerd in a network namespace): short runs of the self-heal workload, one per
//! nemesis family, must be valid, have injected faults, and show the Deployment recovered
//! after every fault that took replicas away. A run with an injected agent bug must be
//! found invalid. They need root and the node tools (containerd, runc, CNI plugins, nft);
//! without them they are skipped loudly, and under KEELSON_REQUIRE_NODE_TESTS (CI) they
//! fail instead.
//!
//! The runs take turns (one cluster at a time).

mod common;

use std::sync::Mutex;
use std::time::Duration;

use common::{is_root, keelson_bin};
use keelson_chaos::{Isolation, NemesisFamily};
use keelson_jepsen_runner::{run, RunOptions, RunVerdict, Workload};

static ONE_CLUSTER_AT_A_TIME: Mutex<()> = Mutex::new(());

fn missing_tools() -> Vec<&'static str> {
    ["/usr/bin/containerd", "/usr/bin/ctr", "/usr/sbin/runc", "/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/bin/busybox", "/usr/bin/nsenter", "/usr/sbin/nft"]
        .into_iter()
        .filter(|p| !std::path::Path::new(p).exists())
        .collect()
}

/// Whether real nodes can run here; when not, says so loudly, and fails under
/// KEELSON_REQUIRE_NODE_TESTS.
fn nodes_possible(what: &str) -> bool {
    if is_root() && missing_tools().is_empty() {
        return true;
    }
    assert!(
        std::env::var_os("KEELSON_REQUIRE_NODE_TESTS").is_none(),
        "node tests required but root={} missing={:?}",
        is_root(),
        missing_tools()
    );
    eprintln!("SKIPPED (needs root and {:?}): {what}; CI runs this as root", missing_tools());
    false
}

#[allow(clippy::await_holding_lock)] // one run at a time, across test threads
async fn self_heal_run(families: Vec<NemesisFamily>, seed: u64, node_args: &[&str], converge: Duration) -> RunVerdict {
    let _turn = ONE_CLUSTER_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("tmp").keep();
    let opts = RunOptions {
        servers: 3,
        nodes: 3,
        node_args: node_args.iter().map(|a| a.to_string()).collect(),
        converge,
        workload: Workload::SelfHeal,
        nemesis: families.clone(),
        time_limit: Duration::from_secs(40),
        nemesis_interval: Duration::from_secs(13),
        seed,
        clients: 1,
        dir: dir.clone(),
        keelson_bin: keelson_bin(),
        isolation: Isolation::Netns,
        lease: Default::default(),
    };
    let started = std::time::Instant::now();
    let verdict = run(opts).await.expect("the run itself must complete");
    eprintln!(
        "self-heal {families:?} seed {seed} ({:.1}s): valid={} faults={} acknowledged={} lost={}\n{}",
        started.elapsed().as_secs_f64(),
        verdict.valid,
        verdict.faults,
        verdict.ok + verdict.fail,
        verdict.fail,
        verdict.summary
    );
    verdict
}

/// A valid run with faults injected, work acknowledged and every fault that took replicas
/// away recovered from.
async fn heals(families: Vec<NemesisFamily>, seed: u64) {
    if !nodes_possible(&format!("self-heal under {families:?}")) {
        return;
    }
    let v = self_heal_run(families.clone(), seed, &[], Duration::from_secs(120)).await;
    assert!(v.valid, "self-heal under {families:?} found an anomaly:\n{}", v.summary);
    assert!(v.faults >= 2, "only {} faults were injected:\n{}", v.faults, v.summary);
    assert!(v.ok > 20, "only {} writes were acknowledged:\n{}", v.ok, v.summary);
    let report = v.self_heal.as_ref().expect("a self-heal report");
    assert!(report.observations > 50, "only {} pod states were recorded", report.observations);
    assert!(report.recoveries.iter().filter(|r| r.affected).all(|r| r.after_ms.is_some()), "{report}");
    // The in-cluster clients reached the Service through it all, most of the time.
    let rate = report.client_success_rate.expect("the clients' calls were counted");
    assert!(rate > 0.5, "only {:.1}% of the clients' calls were answered:\n{report}", rate * 100.0);
    let _ = std::fs::remove_dir_all(&v.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_come_back_after_nodes_lose_power() {
    heals(vec![NemesisFamily::NodeKill], 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_come_back_after_nodes_freeze() {
    heals(vec![NemesisFamily::NodePause], 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_come_back_after_nodes_are_cut_off() {
    heals(vec![NemesisFamily::NodePartition], 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_come_back_after_nodes_are_drained_during_rollouts() {
    heals(vec![NemesisFamily::NodeDrain], 5).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pods_are_bound_once_and_replaced_while_component_lease_holders_die_freeze_or_are_cut_off() {
    heals(vec![NemesisFamily::LeaseKill, NemesisFamily::LeasePause, NemesisFamily::LeasePartition], 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_agent_that_never_rewrites_a_status_it_already_wrote_is_caught() {
    if !nodes_possible("self-heal with an injected agent bug") {
        return;
    }
    // Frozen past the node grace period, a node's pods are marked not Ready by the node
    // lifecycle controller; an agent that only writes statuses it did not write before
    // never says Ready again, so its DaemonSet pod stays not Ready after the heal.
    let v = self_heal_run(vec![NemesisFamily::NodePause], 2, &["--inject-bug", "stale-pod-status"], Duration::from_secs(30)).await;
    assert!(!v.valid, "the injected bug went unnoticed:\n{}", v.summary);
    let report = v.self_heal.as_ref().expect("a self-heal report");
    assert!(
        report.violations.iter().any(|x| x.property == "daemonset" && x.detail.contains("not exactly one Ready")),
        "the run was invalid, but not for the DaemonSet pod left not Ready:\n{report}"
    );
    let _ = std::fs::remove_dir_all(&v.dir);
}
