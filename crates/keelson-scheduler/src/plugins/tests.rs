//! Tables of nodes and pods through each plugin and the whole cycle, without I/O.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{json, Value};

use crate::framework::{schedule, schedule_timed, CycleTimes, Decision};
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

fn volume_state(claims: Vec<Value>, volumes: Vec<Value>) -> crate::plugins::volume::VolumeState {
    let classes = [
        json!({"metadata": {"name": "local-path"}, "provisioner": "keelson.io/local-path", "volumeBindingMode": "WaitForFirstConsumer"}),
        json!({"metadata": {"name": "manual"}, "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "WaitForFirstConsumer"}),
        json!({"metadata": {"name": "now"}, "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "Immediate"}),
    ];
    crate::plugins::volume::VolumeState {
        claims: claims.into_iter().map(|c| {
            let c: k8s_openapi::api::core::v1::PersistentVolumeClaim = serde_json::from_value(c).unwrap();
            (format!("default/{}", c.metadata.name.clone().unwrap()), Arc::new(c))
        }).collect(),
        volumes: volumes.into_iter().map(|v| {
            let v: k8s_openapi::api::core::v1::PersistentVolume = serde_json::from_value(v).unwrap();
            (v.metadata.name.clone().unwrap(), Arc::new(v))
        }).collect(),
        classes: classes.into_iter().map(|c| {
            let c: k8s_openapi::api::storage::v1::StorageClass = serde_json::from_value(c).unwrap();
            (c.metadata.name.clone().unwrap(), Arc::new(c))
        }).collect(),
    }
}

fn claim(name: &str, class: &str, volume: Option<&str>) -> Value {
    json!({"metadata": {"name": name, "namespace": "default"}, "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}}, "volumeName": volume}})
}

fn on_node(name: &str, node: &str, claim_ref: Option<&str>) -> Value {
    json!({"metadata": {"name": name}, "spec": {"storageClassName": "manual", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}, "hostPath": {"path": "/x"},
        "claimRef": claim_ref.map(|c| json!({"namespace": "default", "name": c})),
        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}}})
}

fn with_claim(name: &str, claim: &str) -> Arc<Pod> {
    pod(name, json!({"spec": {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]}}))
}

#[test]
fn volume_binding_checks_claims_and_volume_node_affinity() {
    let nodes = || vec![node("n1", "2", json!({})), node("n2", "2", json!({})), node("n3", "2", json!({}))];
    let state = volume_state(
        vec![claim("bound", "manual", Some("pv-n2")), claim("dangling", "manual", Some("gone")), claim("later", "local-path", None),
             claim("static", "manual", None), claim("immediate", "now", None),
             json!({"metadata": {"name": "deleting", "namespace": "default", "deletionTimestamp": "2026-01-01T00:00:00Z"}, "spec": {"storageClassName": "local-path"}})],
        vec![on_node("pv-n2", "n2", Some("bound")), on_node("free-n3", "n3", None)],
    );
    let decide_v = |p: &Pod| schedule(&default_profile(), p, &Snapshot::build(nodes(), Vec::<Arc<Pod>>::new()).with_volumes(state.clone()), 0, 0);

    assert_eq!(message(&decide_v(&with_claim("p", "missing"))), "0/3 nodes are available: persistentvolumeclaim \"missing\" not found.");
    assert_eq!(message(&decide_v(&with_claim("p", "deleting"))), "0/3 nodes are available: persistentvolumeclaim \"deleting\" is being deleted.");
    assert_eq!(message(&decide_v(&with_claim("p", "immediate"))), "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims.");
    // A bound claim's volume lives on n2 only.
    assert_eq!(bound_to(&decide_v(&with_claim("p", "bound"))), "n2");
    let pinned = pod("p", json!({"spec": {"nodeName": null, "nodeSelector": {"kubernetes.io/hostname": "n1"}, "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "bound"}}]}}));
    assert_eq!(message(&decide_v(&pinned)), "0/3 nodes are available: 1 node(s) had volume node affinity conflict, 2 node(s) didn't match Pod's node affinity/selector.");
    assert_eq!(message(&decide_v(&with_claim("p", "dangling"))), "0/3 nodes are available: 3 node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s).");
    // Unbound WaitForFirstConsumer: local-path can provision anywhere; a static class
    // needs an available volume the node reaches.
    assert!(matches!(decide_v(&with_claim("p", "later")), Decision::Bind { .. }));
    assert_eq!(bound_to(&decide_v(&with_claim("p", "static"))), "n3");
    let no_static = volume_state(vec![claim("static", "manual", None)], vec![on_node("taken", "n1", Some("someone"))]);
    let d = schedule(&default_profile(), &with_claim("p", "static"), &Snapshot::build(nodes(), Vec::<Arc<Pod>>::new()).with_volumes(no_static), 0, 0);
    assert_eq!(message(&d), "0/3 nodes are available: 3 node(s) didn't find available persistent volumes to bind.");

    // The claims the scheduler annotates at bind time: unbound WaitForFirstConsumer ones.
    let both = pod("p", json!({"spec": {"volumes": [{"name": "a", "persistentVolumeClaim": {"claimName": "later"}}, {"name": "b", "persistentVolumeClaim": {"claimName": "bound"}}]}}));
    let delayed: Vec<_> = crate::plugins::volume::delayed_claims(&state, &both).iter().map(|c| c.metadata.name.clone().unwrap()).collect();
    assert_eq!(delayed, ["later"]);
}

#[test]
fn a_timed_cycle_records_every_plugin_at_prefilter_and_the_scorers() {
    let profile = default_profile();
    let nodes = vec![node("a", "2", json!({})), node("b", "2", json!({})), node("c", "2", json!({}))];
    let mut times = CycleTimes::default();
    let d = schedule_timed(&profile, &pod("p", cpu("100m")), &Snapshot::build(nodes.clone(), vec![]), 0, 0, &mut times);
    assert!(matches!(d, Decision::Bind { .. }), "{d:?}");
    let at = |point: &str| times.plugins.iter().filter(|(_, p, _)| *p == point).map(|(name, _, _)| *name).collect::<Vec<_>>();
    let all: Vec<&str> = profile.plugins.iter().map(|(p, _)| p.name()).collect();
    assert_eq!(at("PreFilter"), all, "every plugin ran PreFilter");
    assert!(at("Score").contains(&"NodeResourcesFit"), "{:?}", times.plugins);
    assert!(times.pre_filter.is_some() && times.filter.is_some() && times.score.is_some(), "{times:?}");

    // A missing claim is rejected at the volume plugin's PreFilter: the plugins after it
    // did not run, and no node was filtered or scored.
    let mut times = CycleTimes::default();
    let missing_claim = json!({"spec": {"volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "missing"}}]}});
    let d = schedule_timed(&profile, &pod("q", missing_claim), &Snapshot::build(nodes, vec![]), 0, 0, &mut times);
    assert!(message(&d).contains("persistentvolumeclaim \"missing\" not found"), "{d:?}");
    let ran = at_prefilter(&times);
    let volume_at = all.iter().position(|n| *n == *ran.last().expect("some plugin ran")).unwrap();
    assert_eq!(ran, all[..=volume_at].to_vec());
    assert!(times.pre_filter.is_some() && times.filter.is_none() && times.score.is_none() && !times.plugins.iter().any(|(_, p, _)| *p == "Score"), "{times:?}");
}

fn at_prefilter(times: &CycleTimes) -> Vec<&'static str> {
    times.plugins.iter().filter(|(_, p, _)| *p == "PreFilter").map(|(name, _, _)| *name).collect()
}
