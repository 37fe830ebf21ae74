use super::*;
use serde_json::{json, Value};

fn now() -> jiff::Timestamp {
    "2026-01-01T00:10:00Z".parse().unwrap()
}

fn ds(extra: Value) -> DaemonSet {
    let mut d = json!({
        "metadata": {"name": "agent", "namespace": "d", "uid": "ds-uid", "generation": 2},
        "spec": {"selector": {"matchLabels": {"app": "agent"}}, "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
                 "template": {"metadata": {"labels": {"app": "agent"}}, "spec": {"containers": [{"name": "c", "image": "agent:1"}]}}},
    });
    for (k, v) in extra.as_object().unwrap() {
        d["spec"][k.as_str()] = v.clone();
    }
    serde_json::from_value(d).unwrap()
}

fn node(name: &str, labels: Value, taints: Value) -> Node {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}, "spec": {"taints": taints}})).unwrap()
}

/// A daemon pod on `node` of template hash `hash`, Running and ready (`ready`) since long.
fn pod(name: &str, node: &str, hash: &str, ready: bool) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "d", "creationTimestamp": "2026-01-01T00:00:00Z", "labels": {"app": "agent", REVISION_HASH: hash},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "ds-uid", "controller": true}]},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}, "lastTransitionTime": "2026-01-01T00:01:00Z"}]},
    }))
    .unwrap()
}

fn with_image(d: &DaemonSet, image: &str) -> DaemonSet {
    let mut d = d.clone();
    d.spec.as_mut().unwrap().template.spec.as_mut().unwrap().containers[0].image = Some(image.into());
    d
}

#[test]
fn one_pod_per_eligible_node() {
    let d = ds(json!({}));
    let (a, b) = (node("a", json!({}), json!([])), node("b", json!({}), json!([])));
    let plan = reconcile(&d, &[&a, &b], &[], now());
    assert_eq!(plan.create, vec!["a", "b"]);
    assert_eq!(plan.status.desired_number_scheduled, 2);
    let hash = revision_hash(&d);
    let on_a = pod("agent-x", "a", &hash, true);
    let plan = reconcile(&d, &[&a, &b], &[&on_a], now());
    assert_eq!(plan.create, vec!["b"]);
    assert_eq!((plan.status.current_number_scheduled, plan.status.number_ready, plan.status.number_available), (1, 1, Some(1)));
    assert_eq!(plan.status.updated_number_scheduled, Some(1));
    assert_eq!(plan.status.number_unavailable, Some(1));
    assert_eq!(plan.status.observed_generation, Some(2));
}

#[test]
fn node_selector_affinity_and_taints_decide_eligibility() {
    let d = ds(json!({"template": {"metadata": {"labels": {"app": "agent"}}, "spec": {"nodeSelector": {"disk": "ssd"}, "containers": [{"name": "c", "image": "x"}]}}}));
    assert_eq!(node_should_run(&d, &node("a", json!({"disk": "ssd"}), json!([]))), (true, true));
    assert_eq!(node_should_run(&d, &node("b", json!({"disk": "hdd"}), json!([]))), (false, false));
    let affine = ds(json!({"template": {"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}]}}}, "containers": [{"name": "c", "image": "x"}]}}}));
    assert!(node_should_run(&affine, &node("a", json!({"zone": "z1"}), json!([]))).0);
    assert!(!node_should_run(&affine, &node("a", json!({"zone": "z2"}), json!([]))).0);
    let plain = ds(json!({}));
    let control_plane = node("cp", json!({}), json!([{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]));
    assert_eq!(node_should_run(&plain, &control_plane), (false, true), "not started there, but not evicted either");
    let draining = node("n", json!({}), json!([{"key": "dedicated", "value": "db", "effect": "NoExecute"}]));
    assert_eq!(node_should_run(&plain, &draining), (false, false));
    // The daemon defaults: cordoned, not-ready and unreachable nodes still run them.
    for taint in [json!({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}), json!({"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}), json!({"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"})] {
        assert_eq!(node_should_run(&plain, &node("n", json!({}), json!([taint]))), (true, true));
    }
    let tolerant = ds(json!({"template": {"spec": {"tolerations": [{"operator": "Exists"}], "containers": [{"name": "c", "image": "x"}]}}}));
    assert_eq!(node_should_run(&tolerant, &draining), (true, true));
}

#[test]
fn pods_target_their_node_by_affinity_and_carry_the_daemon_tolerations() {
    let d = ds(json!({"template": {"metadata": {"labels": {"app": "agent"}}, "spec": {"hostNetwork": true,
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "Exists"}]}]}}},
        "containers": [{"name": "c", "image": "x"}]}}}));
    let p = pod_for(&d, "node-7", "abc");
    assert_eq!(p.metadata.generate_name.as_deref(), Some("agent-"));
    assert_eq!(p.metadata.labels.as_ref().unwrap()[REVISION_HASH], "abc");
    assert_eq!(p.metadata.labels.as_ref().unwrap()[TEMPLATE_GENERATION], "2");
    let spec = p.spec.as_ref().unwrap();
    assert!(spec.node_name.is_none(), "the scheduler binds it");
    let terms = &spec.affinity.as_ref().unwrap().node_affinity.as_ref().unwrap().required_during_scheduling_ignored_during_execution.as_ref().unwrap().node_selector_terms;
    assert_eq!(terms.len(), 1, "the node's name replaces the template's terms");
    assert_eq!(serde_json::to_value(&terms[0]).unwrap(), json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-7"]}]}));
    assert_eq!(target_node(&p).as_deref(), Some("node-7"));
    let keys: Vec<_> = spec.tolerations.iter().flatten().filter_map(|t| t.key.clone()).collect();
    assert!(keys.contains(&"node.kubernetes.io/not-ready".to_string()) && keys.contains(&"node.kubernetes.io/network-unavailable".to_string()), "{keys:?}");
}

#[test]
fn extra_failed_and_misplaced_pods_go() {
    let d = ds(json!({}));
    let hash = revision_hash(&d);
    let a = node("a", json!({}), json!([]));
    let (first, second) = (pod("agent-1", "a", &hash, true), pod("agent-2", "a", &hash, true));
    let mut failed = pod("agent-f", "b", &hash, false);
    failed.status.as_mut().unwrap().phase = Some("Failed".into());
    let b = node("b", json!({}), json!([]));
    let mut stranded = pod("agent-s", "gone", &hash, false);
    stranded.spec.as_mut().unwrap().node_name = None;
    stranded.spec.as_mut().unwrap().affinity = pod_for(&d, "gone", &hash).spec.unwrap().affinity;
    let plan = reconcile(&d, &[&a, &b], &[&first, &second, &failed, &stranded], now());
    assert_eq!(plan.delete, vec!["agent-2", "agent-f", "agent-s"]);
    assert!(plan.create.is_empty(), "the failed pod's node gets a new one once it is gone");
    // A node that no longer matches the selector loses its pod and counts as misscheduled.
    let picky = ds(json!({"template": {"metadata": {"labels": {"app": "agent"}}, "spec": {"nodeSelector": {"disk": "ssd"}, "containers": [{"name": "c", "image": "x"}]}}}));
    let plan = reconcile(&picky, &[&a], &[&first], now());
    assert_eq!(plan.delete, vec!["agent-1"]);
    assert_eq!(plan.status.number_misscheduled, 1);
}

#[test]
fn rolling_update_keeps_at_most_max_unavailable_nodes_down() {
    let old = ds(json!({}));
    let new = with_image(&old, "agent:2");
    let (old_hash, new_hash) = (revision_hash(&old), revision_hash(&new));
    assert_ne!(old_hash, new_hash);
    let nodes: Vec<Node> = ["a", "b", "c"].iter().map(|n| node(n, json!({}), json!([]))).collect();
    let nodes: Vec<&Node> = nodes.iter().collect();
    let pods: Vec<Pod> = ["a", "b", "c"].iter().map(|n| pod(&format!("agent-{n}"), n, &old_hash, true)).collect();
    let refs: Vec<&Pod> = pods.iter().collect();
    let plan = reconcile(&new, &nodes, &refs, now());
    assert_eq!(plan.delete, vec!["agent-a"], "one node at a time");
    // a is replaced but its new pod is not ready yet: nothing more goes.
    let fresh = pod("agent-a2", "a", &new_hash, false);
    let plan = reconcile(&new, &nodes, &[&fresh, refs[1], refs[2]], now());
    assert!(plan.delete.is_empty(), "{plan:?}");
    assert_eq!(plan.status.updated_number_scheduled, Some(1));
    let fresh = pod("agent-a2", "a", &new_hash, true);
    assert_eq!(reconcile(&new, &nodes, &[&fresh, refs[1], refs[2]], now()).delete, vec!["agent-b"]);
    // OnDelete: nothing is replaced.
    let mut on_delete = new.clone();
    on_delete.spec.as_mut().unwrap().update_strategy = serde_json::from_value(json!({"type": "OnDelete"})).unwrap();
    assert!(reconcile(&on_delete, &nodes, &refs, now()).delete.is_empty());
}

#[test]
fn rolling_update_with_surge_starts_the_new_pod_beside_the_old() {
    let old = ds(json!({"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}}));
    let new = with_image(&old, "agent:2");
    let (old_hash, new_hash) = (revision_hash(&old), revision_hash(&new));
    let (a, b) = (node("a", json!({}), json!([])), node("b", json!({}), json!([])));
    let (pa, pb) = (pod("agent-a", "a", &old_hash, true), pod("agent-b", "b", &old_hash, true));
    let plan = reconcile(&new, &[&a, &b], &[&pa, &pb], now());
    assert_eq!((plan.create.clone(), plan.delete.clone()), (vec!["a".to_string()], vec![]));
    let starting = pod("agent-a2", "a", &new_hash, false);
    let plan = reconcile(&new, &[&a, &b], &[&pa, &starting, &pb], now());
    assert!(plan.create.is_empty() && plan.delete.is_empty(), "surge used up; the old pod waits for the new: {plan:?}");
    let ready = pod("agent-a2", "a", &new_hash, true);
    let plan = reconcile(&new, &[&a, &b], &[&pa, &ready, &pb], now());
    assert_eq!(plan.delete, vec!["agent-a"]);
}
