//! Tables of nodes and pods through DefaultPreemption, without I/O.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde_json::{json, Value};

use super::*;
use crate::framework::{schedule, Decision};
use crate::plugins::default_profile;

fn node(name: &str, cpu: &str, taints: Value) -> Arc<Node> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {"taints": taints},
            "status": {"allocatable": {"cpu": cpu, "memory": "4Gi", "pods": "110"}},
        }))
        .unwrap(),
    )
}

/// A pod of `priority` asking for `cpu`, on `node` (or pending), started at second `started`.
fn pod(name: &str, priority: i32, cpu: &str, node: Option<&str>, started: u32) -> Arc<Pod> {
    pod_with(name, priority, cpu, node, started, json!({}))
}

fn pod_with(name: &str, priority: i32, cpu: &str, node: Option<&str>, started: u32, extra: Value) -> Arc<Pod> {
    let mut p = json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"), "labels": {"app": name}},
        "spec": {"nodeName": node, "priority": priority, "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu}}}]},
        "status": {"startTime": format!("2026-01-01T00:00:{started:02}Z")},
    });
    for (k, v) in extra.as_object().unwrap() {
        for (kk, vv) in v.as_object().unwrap() {
            p[k][kk] = vv.clone();
        }
    }
    Arc::new(serde_json::from_value(p).unwrap())
}

fn pdb(app: &str, allowed: i32, disrupted: &[&str]) -> Arc<PodDisruptionBudget> {
    let disrupted: serde_json::Map<String, Value> = disrupted.iter().map(|n| (n.to_string(), json!("2026-01-01T00:00:00Z"))).collect();
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": format!("pdb-{app}"), "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": app}}},
            "status": {"disruptionsAllowed": allowed, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1, "disruptedPods": disrupted},
        }))
        .unwrap(),
    )
}

fn names(pods: &[Arc<Pod>]) -> Vec<&str> {
    pods.iter().map(|p| p.metadata.name.as_deref().unwrap()).collect()
}

/// The cycle, then preemption if no node fit: (node, victims) or the full message.
fn run(snapshot: &Snapshot, p: &Pod) -> Result<(String, Vec<String>), String> {
    let profile = default_profile();
    match schedule(&profile, p, snapshot, 0, 0) {
        Decision::Bind { node, .. } => panic!("bound to {node}"),
        Decision::Unschedulable { message, resolvable, .. } => match preempt(&profile, p, snapshot, &resolvable, 0) {
            PostFilter::Preempt { node, victims, .. } => Ok((node, names(&victims).into_iter().map(String::from).collect())),
            PostFilter::Fail(why) | PostFilter::NoCandidate(why) => Err(crate::framework::with_post_filter(&message, &why)),
        },
    }
}

#[test]
fn the_fewest_victims_are_chosen_sparing_the_most_important() {
    let nodes = vec![node("a", "3", json!([]))];
    let placed = vec![pod("low", 10, "1", Some("a"), 1), pod("mid", 20, "1", Some("a"), 2), pod("top", 30, "1", Some("a"), 3)];
    let s = Snapshot::build(nodes, placed);
    assert_eq!(run(&s, &pod("p", 100, "2", None, 0)), Ok(("a".into(), vec!["mid".into(), "low".into()])));
    // Only pods of strictly lower priority are victims.
    assert_eq!(run(&s, &pod("p", 20, "2", None, 0)).unwrap_err(), "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 Insufficient cpu.");
    assert_eq!(run(&s, &pod("p", 20, "1", None, 0)), Ok(("a".into(), vec!["low".into()])));
}

#[test]
fn the_node_is_chosen_in_kubernetes_order() {
    let profile = default_profile();
    let p = pod("p", 100, "2", None, 0);
    let case = |placed: Vec<Arc<Pod>>, pdbs: Vec<Arc<PodDisruptionBudget>>| {
        let s = Snapshot::build([node("x", "2", json!([])), node("y", "2", json!([]))], placed).with_pdbs(pdbs);
        match preempt(&profile, &p, &s, &[0, 1], 0) {
            PostFilter::Preempt { node, victims, pdb_violations } => (node, names(&victims).join(","), pdb_violations),
            PostFilter::Fail(why) | PostFilter::NoCandidate(why) => panic!("{why}"),
        }
    };
    // Lowest highest-victim priority.
    assert_eq!(case(vec![pod("x1", 50, "2", Some("x"), 1), pod("y1", 10, "2", Some("y"), 1)], vec![]), ("y".into(), "y1".into(), 0));
    // Then the smallest sum of priorities.
    let placed = vec![pod("x1", 10, "1", Some("x"), 1), pod("x2", 10, "1", Some("x"), 1), pod("y1", 10, "1", Some("y"), 1), pod("y2", 5, "1", Some("y"), 1)];
    assert_eq!(case(placed, vec![]).0, "y");
    // Then the fewest victims (the sum is shifted per victim, so fewer victims weigh less).
    let placed = vec![pod("x1", 10, "2", Some("x"), 1), pod("y1", 10, "1", Some("y"), 1), pod("y2", 10, "1", Some("y"), 1)];
    assert_eq!(case(placed, vec![]).0, "x");
    // Then the latest start among the highest-priority victims.
    let placed = vec![pod("x1", 10, "2", Some("x"), 5), pod("y1", 10, "2", Some("y"), 9)];
    assert_eq!(case(placed, vec![]).0, "y");
    // Before all that: fewest budget violations.
    let placed = vec![pod("x1", 50, "2", Some("x"), 1), pod("y1", 10, "2", Some("y"), 1)];
    assert_eq!(case(placed, vec![pdb("y1", 0, &[])]), ("x".into(), "x1".into(), 0));
    // A budget that still allows a disruption is no violation.
    let placed = vec![pod("x1", 50, "2", Some("x"), 1), pod("y1", 10, "2", Some("y"), 1)];
    assert_eq!(case(placed, vec![pdb("y1", 1, &[])]), ("y".into(), "y1".into(), 0));
    // Violations only where nothing else works.
    let placed = vec![pod("x1", 10, "2", Some("x"), 1), pod("y1", 10, "2", Some("y"), 1)];
    assert_eq!(case(placed, vec![pdb("x1", 0, &[]), pdb("y1", 0, &[])]).2, 1);
}

#[test]
fn budget_violations_are_spent_pod_by_pod() {
    let pods = vec![
        pod_with("a", 1, "1", Some("n"), 1, json!({"metadata": {"labels": {"app": "web"}}})),
        pod_with("b", 1, "1", Some("n"), 2, json!({"metadata": {"labels": {"app": "web"}}})),
        pod_with("c", 1, "1", Some("n"), 3, json!({"metadata": {"labels": {"app": "web"}}})),
        pod("other", 1, "1", Some("n"), 4),
    ];
    let (violating, fine) = split_by_pdb_violation(&pods, &[pdb("web", 1, &[])]);
    assert_eq!((names(&violating), names(&fine)), (vec!["b", "c"], vec!["a", "other"]));
    // A pod already disrupted does not spend the budget.
    let (violating, _) = split_by_pdb_violation(&pods, &[pdb("web", 1, &["a"])]);
    assert_eq!(names(&violating), ["c"]);
    // An empty selector matches nothing.
    let mut empty = (*pdb("web", 0, &[])).clone();
    empty.spec.as_mut().unwrap().selector = Some(Default::default());
    assert!(split_by_pdb_violation(&pods, &[Arc::new(empty)]).0.is_empty());
}

#[test]
fn victims_that_violate_budgets_are_spared_first() {
    // Freeing 1 cpu takes one of two equal pods: the one without a budget goes.
    let placed = vec![pod("guarded", 10, "1", Some("a"), 1), pod("free", 10, "1", Some("a"), 2)];
    let s = Snapshot::build([node("a", "2", json!([]))], placed).with_pdbs(vec![pdb("guarded", 0, &[])]);
    assert_eq!(run(&s, &pod("p", 100, "1", None, 0)), Ok(("a".into(), vec!["free".into()])));
}

#[test]
fn never_preempts_and_unhelpful_nodes_are_said_so() {
    let placed = vec![pod("low", 0, "2", Some("a"), 1)];
    let s = Snapshot::build([node("a", "2", json!([]))], placed.clone());
    let never = pod_with("p", 100, "1", None, 0, json!({"spec": {"preemptionPolicy": "Never"}}));
    assert_eq!(run(&s, &never).unwrap_err(), "0/1 nodes are available: 1 Insufficient cpu. preemption: not eligible due to preemptionPolicy=Never.");
    // A tainted node: removing pods cannot help; nodes without lower-priority pods: no victims.
    let taint = json!([{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]);
    let nodes = vec![node("a", "2", json!([])), node("b", "2", json!([])), node("t", "8", taint)];
    let placed = vec![pod("a1", 100, "2", Some("a"), 1), pod("b1", 200, "2", Some("b"), 1)];
    let s = Snapshot::build(nodes, placed);
    assert_eq!(
        run(&s, &pod("p", 100, "1", None, 0)).unwrap_err(),
        "0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: db}, 2 Insufficient cpu. preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, 2 No preemption victims found for incoming pod."
    );
    // Removing every lower-priority pod still leaves too little: the filter's reason.
    let s = Snapshot::build([node("a", "2", json!([]))], placed_low());
    assert_eq!(run(&s, &pod("p", 100, "3", None, 0)).unwrap_err(), "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 Insufficient cpu.");
}

#[test]
fn only_a_pod_that_may_preempt_but_finds_no_node_loses_its_nomination() {
    let profile = default_profile();
    let outcome = |s: &Snapshot, p: &Pod| match schedule(&profile, p, s, 0, 0) {
        Decision::Bind { node, .. } => panic!("bound to {node}"),
        Decision::Unschedulable { resolvable, .. } => match preempt(&profile, p, s, &resolvable, 0) {
            PostFilter::Preempt { node, .. } => format!("preempt on {node}"),
            PostFilter::Fail(_) => "fail, nomination kept".to_string(),
            PostFilter::NoCandidate(_) => "no candidate, nomination withdrawn".to_string(),
        },
    };
    // Nominated to a, whose low-priority pod has since been replaced by a more important one.
    let nominated = pod_with("p", 100, "2", None, 0, json!({"status": {"nominatedNodeName": "a"}}));
    let s = Snapshot::build([node("a", "2", json!([]))], [pod("top", 200, "2", Some("a"), 1)]).with_nominated([nominated.clone()]);
    assert_eq!(outcome(&s, &nominated), "no candidate, nomination withdrawn");
    // Its victim is still terminating: the preemption is under way, the nomination stays.
    let mut victim = (*pod("low", 0, "2", Some("a"), 1)).clone();
    victim.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH));
    let s = Snapshot::build([node("a", "2", json!([]))], [Arc::new(victim)]).with_nominated([nominated.clone()]);
    assert_eq!(outcome(&s, &nominated), "fail, nomination kept");
    // preemptionPolicy Never: not eligible, nothing to withdraw.
    let never = pod_with("n", 100, "2", None, 0, json!({"spec": {"preemptionPolicy": "Never"}}));
    let s = Snapshot::build([node("a", "2", json!([]))], [pod("low", 0, "2", Some("a"), 1)]);
    assert_eq!(outcome(&s, &never), "fail, nomination kept");
    // And with a lower-priority pod to evict: preemption.
    assert_eq!(outcome(&s, &nominated), "preempt on a");
}

fn placed_low() -> Vec<Arc<Pod>> {
    vec![pod("low", 0, "2", Some("a"), 1)]
}

#[test]
fn a_terminating_victim_on_the_nominated_node_holds_further_preemption() {
    let mut victim = (*pod("low", 0, "2", Some("a"), 1)).clone();
    victim.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH));
    let nominated = pod_with("p", 100, "2", None, 0, json!({"status": {"nominatedNodeName": "a"}}));
    let s = Snapshot::build([node("a", "2", json!([])), node("b", "2", json!([]))], [Arc::new(victim), pod("b1", 0, "2", Some("b"), 1)]).with_nominated([nominated.clone()]);
    assert_eq!(run(&s, &nominated).unwrap_err(), "0/2 nodes are available: 2 Insufficient cpu. preemption: not eligible due to a terminating pod on the nominated node.");
}

#[test]
fn nominated_pods_hold_their_room_against_lower_priority_pods() {
    let nominated = pod_with("big", 100, "2", None, 0, json!({"status": {"nominatedNodeName": "a"}}));
    let s = Snapshot::build([node("a", "2", json!([]))], []).with_nominated([nominated.clone()]);
    let profile = default_profile();
    // A lower-priority pod does not take the room; one of equal priority counts it too.
    for (priority, fits) in [(50, false), (100, false), (150, true)] {
        let d = schedule(&profile, &pod("other", priority, "1", None, 0), &s, 0, 0);
        assert_eq!(matches!(d, Decision::Bind { .. }), fits, "priority {priority}: {d:?}");
    }
    // The nominated pod itself goes there.
    assert!(matches!(schedule(&profile, &nominated, &s, 0, 0), Decision::Bind { node, .. } if node == "a"));
    // The lower pod preempts nothing: the room it lacks is a nominated pod's.
    assert_eq!(run(&s, &pod("other", 50, "1", None, 0)).unwrap_err(), "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.");
}

#[test]
fn a_nominated_pod_prefers_its_nominated_node() {
    let nominated = pod_with("p", 100, "1", None, 0, json!({"status": {"nominatedNodeName": "z"}}));
    // "a" scores better (empty), but "z" fits and is the nomination.
    let s = Snapshot::build([node("a", "8", json!([])), node("z", "2", json!([]))], [pod("z1", 0, "1", Some("z"), 1)]);
    assert!(matches!(schedule(&default_profile(), &nominated, &s, 0, 0), Decision::Bind { node, .. } if node == "z"));
}

#[test]
fn candidate_counts() {
    assert_eq!(candidates_to_find(3), 3);
    assert_eq!(candidates_to_find(500), 100);
    assert_eq!(candidates_to_find(5000), 500);
}
