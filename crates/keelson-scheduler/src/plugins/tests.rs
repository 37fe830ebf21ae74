//! Tables of nodes and pods through each plugin and the whole cycle, without I/O.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{json, Value};

use crate::framework::{schedule, Decision};
use crate::plugins::default_profile;
use crate::snapshot::Snapshot;

fn node(name: &str, cpu: &str, extra: Value) -> Arc<Node> {
    let mut n = json!({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": {"cpu": cpu, "memory": "4Gi", "pods": "110"}},
    });
    merge(&mut n, extra);
    Arc::new(serde_json::from_value(n).unwrap())
}

fn pod(name: &str, extra: Value) -> Arc<Pod> {
    let mut p = json!({
        "metadata": {"name": name, "namespace": "default", "labels": {}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    });
    merge(&mut p, extra);
    Arc::new(serde_json::from_value(p).unwrap())
}

fn merge(base: &mut Value, extra: Value) {
    match (base, extra) {
        (Value::Object(b), Value::Object(e)) => {
            for (k, v) in e {
                merge(b.entry(k).or_insert(Value::Null), v);
            }
        }
        (b, e) => *b = e,
    }
}

fn cpu(c: &str) -> Value {
    json!({"spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": c}}}]}})
}

fn decide(nodes: Vec<Arc<Node>>, placed: Vec<Arc<Pod>>, p: &Pod) -> Decision {
    schedule(&default_profile(), p, &Snapshot::build(nodes, placed), 0, 0)
}

fn bound_to(d: &Decision) -> &str {
    match d {
        Decision::Bind { node, .. } => node,
        Decision::Unschedulable { message, .. } => panic!("unschedulable: {message}"),
    }
}

fn message(d: &Decision) -> &str {
    match d {
        Decision::Unschedulable { message, .. } => message,
        Decision::Bind { node, .. } => panic!("bound to {node}"),
    }
}

fn on(node: &str, p: Value) -> Value {
    merge_into(p, json!({"spec": {"nodeName": node}}))
}

fn merge_into(mut a: Value, b: Value) -> Value {
    merge(&mut a, b);
    a
}

#[test]
fn resources_fit_and_least_allocated_prefers_the_emptier_node() {
    let nodes = vec![node("a", "2", json!({})), node("b", "2", json!({}))];
    let placed = vec![pod("x", on("a", cpu("1500m")))];
    assert_eq!(bound_to(&decide(nodes.clone(), placed.clone(), &pod("p", cpu("400m")))), "b");
    let d = decide(nodes, placed, &pod("big", cpu("2500m")));
    assert_eq!(message(&d), "0/2 nodes are available: 2 Insufficient cpu.");
}

#[test]
fn extended_resources_and_pod_counts() {
    let gpu = node("gpu", "4", json!({"status": {"allocatable": {"example.com/gpu": "1", "pods": "1"}}}));
    let plain = node("plain", "4", json!({}));
    let wants_gpu = pod("g", json!({"spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"example.com/gpu": "1"}}}]}}));
    assert_eq!(bound_to(&decide(vec![gpu.clone(), plain.clone()], vec![], &wants_gpu)), "gpu");
    let full = vec![pod("o", on("gpu", json!({})))];
    assert_eq!(message(&decide(vec![gpu, plain], full, &wants_gpu)), "0/2 nodes are available: 1 Insufficient example.com/gpu, 1 Too many pods.");
}

#[test]
fn taints_filter_unless_tolerated() {
    let cp = node("cp", "4", json!({"spec": {"taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]}}));
    let w = node("w", "1", json!({}));
    let d = decide(vec![cp.clone(), w.clone()], vec![], &pod("big", cpu("2")));
    assert_eq!(message(&d), "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }.");
    let tolerant = pod("t", merge_into(cpu("2"), json!({"spec": {"tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}]}})));
    assert_eq!(bound_to(&decide(vec![cp, w], vec![], &tolerant)), "cp");
}

#[test]
fn prefer_no_schedule_taints_only_lower_the_score() {
    let soft = node("soft", "4", json!({"spec": {"taints": [{"key": "spot", "value": "yes", "effect": "PreferNoSchedule"}]}}));
    let clean = node("clean", "4", json!({}));
    assert_eq!(bound_to(&decide(vec![soft.clone(), clean], vec![], &pod("p", json!({})))), "clean");
    assert_eq!(bound_to(&decide(vec![soft], vec![], &pod("p", json!({})))), "soft");
}

#[test]
fn cordoned_nodes_and_requested_node_names() {
    let cordoned = node("c", "4", json!({"spec": {"unschedulable": true}}));
    let other = node("o", "4", json!({}));
    assert_eq!(bound_to(&decide(vec![cordoned.clone(), other.clone()], vec![], &pod("p", json!({})))), "o");
    let d = decide(vec![cordoned.clone()], vec![], &pod("p", json!({})));
    assert_eq!(message(&d), "0/1 nodes are available: 1 node(s) were unschedulable.");
    let pinned = pod("p", json!({"spec": {"nodeName": "o"}}));
    assert_eq!(bound_to(&decide(vec![cordoned, other], vec![], &pinned)), "o");
}

#[test]
fn node_selector_and_required_and_preferred_node_affinity() {
    let a = node("a", "4", json!({"metadata": {"labels": {"disk": "ssd", "zone": "z1"}}}));
    let b = node("b", "4", json!({"metadata": {"labels": {"disk": "hdd", "zone": "z2"}}}));
    let by_selector = pod("s", json!({"spec": {"nodeSelector": {"disk": "ssd"}}}));
    assert_eq!(bound_to(&decide(vec![a.clone(), b.clone()], vec![], &by_selector)), "a");
    let required = pod("r", json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["z1"]}]}]}}}}}));
    assert_eq!(bound_to(&decide(vec![a.clone(), b.clone()], vec![], &required)), "b");
    let preferred = pod("f", json!({"spec": {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 50, "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["hdd"]}]}}]}}}}));
    assert_eq!(bound_to(&decide(vec![a.clone(), b.clone()], vec![], &preferred)), "b");
    let nowhere = pod("n", json!({"spec": {"nodeSelector": {"disk": "nvme"}}}));
    assert_eq!(message(&decide(vec![a, b], vec![], &nowhere)), "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector.");
}

#[test]
fn host_ports_conflict() {
    let nodes = vec![node("a", "4", json!({})), node("b", "4", json!({}))];
    let with_port = |name: &str| json!({"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "x", "ports": [{"containerPort": 80, "hostPort": 8080}]}]}});
    let placed = vec![pod("x", on("a", with_port("x")))];
    assert_eq!(bound_to(&decide(nodes.clone(), placed.clone(), &pod("p", with_port("p")))), "b");
    let placed = vec![pod("x", on("a", with_port("x"))), pod("y", on("b", with_port("y")))];
    assert_eq!(message(&decide(nodes, placed, &pod("p", with_port("p")))), "0/2 nodes are available: 2 node(s) didn't have free ports for the requested pod ports.");
}

fn zoned(name: &str, zone: &str) -> Arc<Node> {
    node(name, "8", json!({"metadata": {"labels": {"topology.kubernetes.io/zone": zone}}}))
}

#[test]
fn pod_anti_affinity_keeps_replicas_apart_and_affinity_brings_them_together() {
    let nodes = vec![zoned("a", "z1"), zoned("b", "z1"), zoned("c", "z2")];
    let web = |name: &str| json!({"metadata": {"name": name, "labels": {"app": "web"}}});
    let anti = json!({"spec": {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "topology.kubernetes.io/zone"}]}}}});
    let placed = vec![pod("w1", on("a", web("w1")))];
    let p = pod("w2", merge_into(web("w2"), anti.clone()));
    assert_eq!(bound_to(&decide(nodes.clone(), placed.clone(), &p)), "c");
    let placed2 = vec![pod("w1", on("a", web("w1"))), pod("w3", on("c", web("w3")))];
    assert_eq!(message(&decide(nodes.clone(), placed2, &p)), "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules.");
    // An existing pod's anti-affinity repels the newcomer it selects.
    let repelling = pod("r", on("c", merge_into(json!({"metadata": {"name": "r", "labels": {"app": "db"}}}), anti)));
    let newcomer = pod("n", web("n"));
    assert_ne!(bound_to(&decide(nodes.clone(), vec![repelling.clone()], &newcomer)), "c");
    // Affinity: next to a cache pod; the first pod of a self-selecting group goes anywhere.
    let near_cache = json!({"spec": {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "topology.kubernetes.io/zone"}]}}}});
    let cache = pod("cache", on("c", json!({"metadata": {"name": "cache", "labels": {"app": "cache"}}})));
    assert_eq!(bound_to(&decide(nodes.clone(), vec![cache], &pod("p", near_cache.clone()))), "c");
    let lonely = decide(nodes.clone(), vec![], &pod("p", near_cache.clone()));
    assert_eq!(message(&lonely), "0/3 nodes are available: 3 node(s) didn't match pod affinity rules.");
    let first_cache = pod("c1", merge_into(json!({"metadata": {"name": "c1", "labels": {"app": "cache"}}}), near_cache));
    assert!(matches!(decide(nodes, vec![], &first_cache), Decision::Bind { .. }));
}

#[test]
fn topology_spread_limits_skew() {
    let nodes = vec![zoned("a", "z1"), zoned("b", "z2")];
    let spread = |name: &str| json!({"metadata": {"name": name, "labels": {"app": "s"}}, "spec": {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "s"}}}]}});
    let placed = vec![pod("s1", on("a", spread("s1")))];
    assert_eq!(bound_to(&decide(nodes.clone(), placed, &pod("s2", spread("s2")))), "b");
    // With b cordoned, z1 would get skew 2 > 1; only b could take it.
    let cordoned_b = vec![zoned("a", "z1"), node("b", "8", json!({"metadata": {"labels": {"topology.kubernetes.io/zone": "z2"}}, "spec": {"unschedulable": true}}))];
    let placed = vec![pod("s1", on("a", spread("s1")))];
    let d = decide(cordoned_b, placed, &pod("s2", spread("s2")));
    assert_eq!(message(&d), "0/2 nodes are available: 1 node(s) didn't match pod topology spread constraints, 1 node(s) were unschedulable.");
    // A node without the key cannot take a constrained pod.
    let unlabeled = vec![node("x", "8", json!({}))];
    assert_eq!(message(&decide(unlabeled, vec![], &pod("s", spread("s")))), "0/1 nodes are available: 1 node(s) didn't match pod topology spread constraints (missing required label).");
}

#[test]
fn schedule_anyway_spread_and_image_locality_score() {
    let nodes = vec![zoned("a", "z1"), zoned("b", "z2")];
    let soft = |name: &str| json!({"metadata": {"name": name, "labels": {"app": "s"}}, "spec": {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": "s"}}}]}});
    let placed = vec![pod("s1", on("b", soft("s1"))), pod("s2", on("b", soft("s2")))];
    assert_eq!(bound_to(&decide(nodes, placed, &pod("s3", soft("s3")))), "a");
    let with_image = node("img", "4", json!({"status": {"images": [{"names": ["docker.io/library/app:1"], "sizeBytes": 800_000_000i64}]}}));
    let without = node("none", "4", json!({}));
    let p = pod("p", json!({"spec": {"containers": [{"name": "c", "image": "docker.io/library/app:1"}]}}));
    assert_eq!(bound_to(&decide(vec![without, with_image], vec![], &p)), "img");
}

#[test]
fn finished_pods_free_their_resources_and_no_nodes_is_its_own_message() {
    let nodes = vec![node("a", "1", json!({}))];
    let done = pod("done", merge_into(on("a", cpu("900m")), json!({"status": {"phase": "Succeeded"}})));
    assert_eq!(bound_to(&decide(nodes, vec![done], &pod("p", cpu("900m")))), "a");
    assert_eq!(message(&decide(vec![], vec![], &pod("p", json!({})))), "no nodes available to schedule pods");
}
