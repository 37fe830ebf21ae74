use super::*;
use crate::self_heal::{Declared, FinalState, NodeFaultKind, PodFinal};

fn seen(at_ms: u64, server: usize, uid: &str, workload: &str, node: &str, ready: bool, rev: u64) -> PodSeen {
    PodSeen {
        at_ms,
        server,
        kind: SeenKind::Apply,
        uid: uid.into(),
        name: format!("pod-{uid}"),
        workload: workload.into(),
        node: (!node.is_empty()).then(|| node.to_string()),
        phase: if node.is_empty() { "Pending" } else { "Running" }.into(),
        ready,
        terminating: false,
        revision: rev,
    }
}

fn marker(at_ms: u64, server: usize, kind: SeenKind) -> PodSeen {
    PodSeen { kind, uid: String::new(), workload: String::new(), node: None, phase: String::new(), ..seen(at_ms, server, "", "", "", false, 0) }
}

fn final_pod(name: &str, workload: &str, node: &str) -> PodFinal {
    let ip = Some(format!("10.42.0.{}", name.len() + node.len()));
    let claims = if workload == STATEFULSET { vec![format!("data-{name}")] } else { vec![] };
    PodFinal { name: name.into(), workload: workload.into(), node: Some(node.into()), phase: "Running".into(), ready: true, terminating: false, ip, claims }
}

fn healthy_final() -> FinalState {
    FinalState {
        pods: vec![
            final_pod("web-b", DEPLOYMENT, "node-2"),
            final_pod("web-c", DEPLOYMENT, "node-3"),
            final_pod("ds-1", DAEMONSET, "node-1"),
            final_pod("ds-2", DAEMONSET, "node-2"),
            final_pod("ds-3", DAEMONSET, "node-3"),
            final_pod("db-0", STATEFULSET, "node-1"),
        ],
        ready_nodes: vec!["node-1".into(), "node-2".into(), "node-3".into()],
        nodes: vec!["node-1".into(), "node-2".into(), "node-3".into()],
        job_succeeded: 6,
        job_complete: true,
        acknowledged_missing: vec![],
        acknowledged: 40,
        bound_claims: vec!["data-db-0".into()],
        service_endpoints: vec!["10.42.0.11".into(), "10.42.0.11".into()],
        client_calls_ok: 90,
        client_calls_failed: 10,
    }
}

fn power_off(node: &str, start_ms: u64, end_ms: u64) -> NodeFault {
    NodeFault { start_ms, end_ms: Some(end_ms), node: node.into(), kind: NodeFaultKind::PowerOff, what: format!("power off {node}") }
}

/// Two replicas on node-1 and node-2; node-1 loses power at 1 s (healed at 20 s); its pod
/// is evicted at 8 s and replaced on node-3, Ready at 9.5 s.
fn healed_run() -> SelfHealHistory {
    let mut evicted = seen(8_000, 0, "a", DEPLOYMENT, "node-1", true, 20);
    evicted.terminating = true;
    SelfHealHistory {
        declared: Declared { replicas: 2, max_surge: 1, job_completions: 6, statefulset_replicas: 1 },
        pods: vec![
            seen(100, 0, "a", DEPLOYMENT, "node-1", true, 10),
            seen(110, 1, "a", DEPLOYMENT, "node-1", true, 10),
            seen(120, 0, "b", DEPLOYMENT, "node-2", true, 11),
            evicted,
            seen(8_100, 0, "c", DEPLOYMENT, "", false, 21),
            seen(8_200, 0, "c", DEPLOYMENT, "node-3", false, 22),
            seen(9_500, 1, "c", DEPLOYMENT, "node-3", true, 23),
        ],
        faults: vec![power_off("node-1", 1_000, 20_000)],
        final_state: healthy_final(),
        end_ms: 30_000,
    }
}

#[test]
fn a_replaced_replica_is_a_valid_recovery_timed_from_the_fault() {
    let r = check_self_heal(&healed_run());
    assert!(r.is_valid(), "{r}");
    assert_eq!(r.recoveries.len(), 1);
    assert!(r.recoveries[0].affected);
    assert_eq!(r.recoveries[0].after_ms, Some(8_500));
    assert!(r.recoveries[0].by_replacement);
    assert_eq!(r.recovery_percentile(50.0), Some(8_500));
    assert_eq!(r.max_running, 2);
    assert_eq!(r.client_success_rate, Some(0.9));
}

#[test]
fn a_pod_still_marked_ready_on_a_lost_node_does_not_count() {
    // Without the replacement, node-1's pod stays "Ready" in the API: no recovery.
    let mut h = healed_run();
    h.pods.retain(|p| p.uid != "c");
    h.faults[0].end_ms = None;
    let r = check_self_heal(&h);
    assert!(r.violations.iter().any(|v| v.property == "no-recovery"), "{r}");
}

#[test]
fn a_stale_ready_state_from_before_the_heal_does_not_count() {
    // node-1 comes back at 5 s; its pod's last state (Ready, from before the power loss)
    // is not evidence that it runs; a fresh Ready state after the heal is.
    let mut h = healed_run();
    h.pods.retain(|p| p.uid != "c" && !(p.uid == "a" && p.terminating));
    h.faults[0].end_ms = Some(5_000);
    let r = check_self_heal(&h);
    assert!(r.violations.iter().any(|v| v.property == "no-recovery"), "{r}");
    h.pods.push(seen(6_000, 2, "a", DEPLOYMENT, "node-1", true, 30));
    let r = check_self_heal(&h);
    assert!(r.is_valid(), "{r}");
    assert_eq!(r.recoveries[0].after_ms, Some(5_000));
    assert!(!r.recoveries[0].by_replacement, "healed, not replaced");
}

#[test]
fn a_fault_on_a_node_without_replicas_needs_no_recovery() {
    let mut h = healed_run();
    h.pods.retain(|p| p.uid != "c" && !p.terminating);
    h.faults = vec![power_off("node-3", 1_000, 2_000)];
    let r = check_self_heal(&h);
    assert!(r.is_valid(), "{r}");
    assert!(!r.recoveries[0].affected);
    assert_eq!(r.recovery_percentile(50.0), None);
}

#[test]
fn a_pod_bound_to_two_nodes_is_caught() {
    let mut h = healed_run();
    h.pods.push(seen(9_600, 2, "c", DEPLOYMENT, "node-2", true, 24));
    let r = check_self_heal(&h);
    let v: Vec<_> = r.violations.iter().filter(|v| v.property == "bound-twice").collect();
    assert_eq!(v.len(), 1, "{r}");
    assert!(v[0].detail.contains("node-2 and node-3"), "{}", v[0].detail);
}

#[test]
fn too_many_running_pods_in_one_view_is_a_surge_and_a_relist_forgets_what_was_missed() {
    let mut h = healed_run();
    // Server 1 missed a's eviction and d's deletion; its relist shows b and c only.
    h.pods.push(seen(9_550, 1, "b", DEPLOYMENT, "node-2", true, 11));
    h.pods.push(seen(9_600, 1, "d", DEPLOYMENT, "node-2", true, 25));
    h.pods.push(marker(9_700, 1, SeenKind::RelistStart));
    let item = |uid: &str, node: &str, rev| {
        let mut p = seen(9_800, 1, uid, DEPLOYMENT, node, true, rev);
        p.kind = SeenKind::RelistItem;
        p
    };
    let (b, c) = (item("b", "node-2", 11), item("c", "node-3", 23));
    h.pods.extend([b, c, marker(9_900, 1, SeenKind::RelistDone)]);
    // a, b, c, d: 4 > 2 + 1 in server 1's view before the relist.
    let r = check_self_heal(&h);
    let surges: Vec<_> = r.violations.iter().filter(|v| v.property == "surge").collect();
    assert_eq!(surges.len(), 1, "{r}");
    assert!(surges[0].detail.contains("server n1") && surges[0].detail.contains("4 Running"), "{}", surges[0].detail);
    // Without d, server 1 saw a, b, c at most (3 = bound): valid.
    h.pods.retain(|p| p.uid != "d");
    assert!(check_self_heal(&h).is_valid());
}

#[test]
fn what_must_hold_after_healing() {
    let mut h = healed_run();
    h.final_state.pods.retain(|p| p.name != "ds-2");
    h.final_state.pods.push(PodFinal { terminating: true, ..final_pod("web-a", DEPLOYMENT, "node-1") });
    h.final_state.job_succeeded = 7;
    h.final_state.acknowledged_missing = vec!["ack-17".into()];
    h.final_state.ready_nodes.retain(|n| n != "node-3");
    let r = check_self_heal(&h);
    let props: BTreeSet<&str> = r.violations.iter().map(|v| v.property.as_str()).collect();
    assert_eq!(
        props,
        ["acknowledged-lost", "converged", "daemonset", "job", "node-not-ready"].into_iter().collect(),
        "{r}"
    );
    assert!(r.violations.iter().any(|v| v.detail.contains("node node-2 has 0 DaemonSet pod(s)")), "{r}");
    assert!(r.violations.iter().any(|v| v.detail.contains("7 succeeded of 6")), "{r}");
    assert!(r.violations.iter().any(|v| v.detail.contains("web-a (Terminating on node-1)")), "{r}");
}

#[test]
fn a_statefulset_pod_deleted_while_its_node_is_cut_off_is_two_pods_of_one_identity() {
    let mut h = healed_run();
    h.faults.push(NodeFault {
        start_ms: 21_000,
        end_ms: Some(40_000),
        node: "node-1".into(),
        kind: NodeFaultKind::CutFromServers,
        what: "isolate node-1 from the servers".into(),
    });
    let mut gone = seen(30_000, 0, "s", STATEFULSET, "node-1", true, 40);
    gone.kind = SeenKind::Delete;
    gone.name = "db-0".into();
    h.pods.push(gone.clone());
    let r = check_self_heal(&h);
    let v: Vec<_> = r.violations.iter().filter(|v| v.property == "identity").collect();
    assert_eq!(v.len(), 1, "{r}");
    assert!(v[0].detail.contains("db-0") && v[0].detail.contains("node node-1"), "{}", v[0].detail);
    // Deleted once the node was back (it confirmed the pod dead): fine.
    gone.at_ms = 41_000;
    h.pods.pop();
    h.pods.push(gone.clone());
    assert!(check_self_heal(&h).is_valid());
    // Deleted while its node had no power: its containers died with it.
    h.faults.last_mut().unwrap().kind = NodeFaultKind::PowerOff;
    gone.at_ms = 30_000;
    h.pods.pop();
    h.pods.push(gone);
    let r = check_self_heal(&h);
    assert!(!r.violations.iter().any(|v| v.property == "identity"), "{r}");
}

#[test]
fn statefulset_identities_and_service_endpoints_after_healing() {
    let mut h = healed_run();
    h.final_state.bound_claims.clear();
    h.final_state.service_endpoints.pop();
    let r = check_self_heal(&h);
    let props: BTreeSet<&str> = r.violations.iter().map(|v| v.property.as_str()).collect();
    assert_eq!(props, ["endpoints", "statefulset"].into_iter().collect(), "{r}");
    assert!(r.violations.iter().any(|v| v.detail.contains("data-db-0 not Bound")), "{r}");
    h.final_state.pods.retain(|p| p.workload != STATEFULSET);
    let r = check_self_heal(&h);
    assert!(r.violations.iter().any(|v| v.detail == "db-0 does not exist after healing"), "{r}");
}
