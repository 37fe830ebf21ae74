//! The scheduler on real `keelson server` processes, with hollow nodes (Node objects with
//! capacity, no agent): pending pods are bound by the active scheduler with Kubernetes'
//! conditions and Events; taints, node affinity, anti-affinity and spread constraints
//! are honoured; a pod that fits nowhere gets `PodScheduled=False`/`Unschedulable` and a
//! `FailedScheduling` Event worded as Kubernetes words it; a pod of a higher
//! PriorityClass preempts a full node's lower-priority pod (nominated there, the victim
//! marked, evented and deleted, then bound there) and an unknown class is refused;
//! killing the scheduler's server mid-burst leaves the rest to the next holder, and no
//! pod is bound twice.

mod cluster_support;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use cluster_support::{client, metrics_page, server_of, start_short_elections_with};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{json, Value};

fn hollow_node(name: &str, cpu: &str, labels: Value, taints: Value) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints},
        "status": {
            "capacity": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
            "allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "hollow node"}],
        },
    }))
    .unwrap()
}

fn pod(name: &str, extra: Value) -> Pod {
    let mut p = json!({"metadata": {"name": name, "labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
    if let (Some(o), Value::Object(e)) = (p.as_object_mut(), extra) {
        for (k, v) in e {
            match (o.get_mut(&k), v) {
                (Some(Value::Object(base)), Value::Object(more)) => base.extend(more),
                (_, v) => {
                    o.insert(k, v);
                }
            }
        }
    }
    serde_json::from_value(p).unwrap()
}

fn node_of(p: &Pod) -> Option<String> {
    p.spec.as_ref().and_then(|s| s.node_name.clone()).filter(|n| !n.is_empty())
}

/// Waits until `done` holds for the pods, or fails with what they are.
async fn wait_pods(api: &Api<Pod>, what: &str, done: impl Fn(&[Pod]) -> bool) -> Vec<Pod> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        if let Ok(list) = api.list(&ListParams::default()).await {
            if done(&list.items) {
                return list.items;
            }
            if tokio::time::Instant::now() > deadline {
                let states: Vec<(String, Option<String>)> = list.items.iter().map(|p| (p.metadata.name.clone().unwrap_or_default(), node_of(p))).collect();
                panic!("{what}: pods are {states:?}");
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn bound(pods: &[Pod], name: &str) -> Option<String> {
    pods.iter().find(|p| p.metadata.name.as_deref() == Some(name)).and_then(node_of)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_binds_pods_explains_failures_and_survives_its_server_dying() {
    let tmp = tempfile::tempdir().unwrap();
    // These Nodes are plain objects that never heartbeat: keep the node lifecycle
    // controller from finding them Unknown (and tainting them) during the test.
    let mut cluster = start_short_elections_with(&tmp.path().join("c"), &["--node-monitor-grace-period", "10m"]).await;
    let admin = client(&cluster, "keelson-1").await;
    let nodes: Api<Node> = Api::all(admin.clone());
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let pp = PostParams::default();
    let zone = |z: &str, name: &str| json!({"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": z});
    let control_plane = json!([{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]);
    nodes.create(&pp, &hollow_node("cp-1", "8", zone("z1", "cp-1"), control_plane)).await.unwrap();
    nodes.create(&pp, &hollow_node("w-1", "2", zone("z1", "w-1"), json!([]))).await.unwrap();
    nodes.create(&pp, &hollow_node("w-2", "2", zone("z2", "w-2"), json!([]))).await.unwrap();

    // Taints and requests: a 1.5-cpu pod goes to a worker; one of 4 cpus fits nowhere.
    pods.create(&pp, &pod("small", json!({"spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1500m"}}}]}}))).await.unwrap();
    pods.create(&pp, &pod("huge", json!({"spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "4"}}}]}}))).await.unwrap();
    // Node affinity, and a toleration that allows the control plane.
    pods.create(&pp, &pod("on-cp", json!({"spec": {"nodeSelector": {"kubernetes.io/hostname": "cp-1"}, "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}]}}))).await.unwrap();
    // Two replicas kept apart by zone anti-affinity.
    let apart = |name: &str| pod(name, json!({"metadata": {"labels": {"app": "apart"}}, "spec": {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {"matchLabels": {"app": "apart"}}, "topologyKey": "topology.kubernetes.io/zone"}]}}}}));
    pods.create(&pp, &apart("apart-1")).await.unwrap();
    pods.create(&pp, &apart("apart-2")).await.unwrap();
    // A pod for another scheduler is left alone.
    pods.create(&pp, &pod("other-scheduler", json!({"spec": {"schedulerName": "someone-else"}}))).await.unwrap();

    let names = ["small", "on-cp", "apart-1", "apart-2"];
    let listed = wait_pods(&pods, "first pods bound", |ps| names.iter().all(|n| bound(ps, n).is_some())).await;
    assert!(matches!(bound(&listed, "small").as_deref(), Some("w-1" | "w-2")));
    assert_eq!(bound(&listed, "on-cp").as_deref(), Some("cp-1"));
    let zone_of = |n: &str| if n == "w-2" { "z2" } else { "z1" };
    assert_ne!(zone_of(&bound(&listed, "apart-1").unwrap()), zone_of(&bound(&listed, "apart-2").unwrap()), "anti-affinity keeps them in different zones");
    assert_eq!(bound(&listed, "other-scheduler"), None);
    let small = listed.iter().find(|p| p.metadata.name.as_deref() == Some("small")).unwrap();
    let scheduled = small.status.as_ref().and_then(|s| s.conditions.as_ref()).and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled")).expect("PodScheduled condition");
    assert_eq!(scheduled.status, "True");

    // The pod that fits nowhere says why, in Kubernetes' words.
    let huge = wait_pods(&pods, "huge marked unschedulable", |ps| {
        ps.iter().find(|p| p.metadata.name.as_deref() == Some("huge")).and_then(|p| p.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "PodScheduled").cloned()).is_some_and(|c| c.status == "False")
    })
    .await;
    let cond = huge.iter().find(|p| p.metadata.name.as_deref() == Some("huge")).unwrap().status.as_ref().unwrap().conditions.as_ref().unwrap().iter().find(|c| c.type_ == "PodScheduled").unwrap().clone();
    assert_eq!(cond.reason.as_deref(), Some("Unschedulable"));
    let expected = "0/3 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, 2 Insufficient cpu. preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, 2 No preemption victims found for incoming pod.";
    assert_eq!(cond.message.as_deref(), Some(expected));
    // Events are written after the bind or the failed attempt, on their own: look until
    // both are there.
    let events: Api<Event> = Api::namespaced(admin.clone(), "default");
    let scheduled = format!("Successfully assigned default/small to {}", bound(&listed, "small").unwrap());
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let all = events.list(&ListParams::default()).await.unwrap().items;
        let failed = all.iter().any(|e| e.reason.as_deref() == Some("FailedScheduling") && e.involved_object.name.as_deref() == Some("huge") && e.message.as_deref() == Some(expected) && e.type_.as_deref() == Some("Warning"));
        let assigned = all.iter().any(|e| e.reason.as_deref() == Some("Scheduled") && e.message.as_deref() == Some(scheduled.as_str()));
        if failed && assigned {
            break;
        }
        let seen: Vec<_> = all.iter().map(|e| (e.reason.clone(), e.message.clone())).collect();
        assert!(std::time::Instant::now() < deadline, "FailedScheduling of huge ({failed}) and Scheduled of small ({assigned}) within 30 s: {seen:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // A node large enough arrives: the unschedulable pod is retried and bound there.
    nodes.create(&pp, &hollow_node("big-1", "16", zone("z2", "big-1"), json!([]))).await.unwrap();
    wait_pods(&pods, "huge bound to the new node", |ps| bound(ps, "huge").as_deref() == Some("big-1")).await;

    // Priority and preemption: the built-in classes exist; a node full of priority-0 pods;
    // a pod of a higher class preempts one of them.
    let classes: Api<PriorityClass> = Api::all(admin.clone());
    assert_eq!(classes.get("system-node-critical").await.unwrap().value, 2_000_001_000);
    assert_eq!(classes.get("system-cluster-critical").await.unwrap().value, 2_000_000_000);
    let high: PriorityClass = serde_json::from_value(json!({"metadata": {"name": "high"}, "value": 1000})).unwrap();
    classes.create(&pp, &high).await.unwrap();
    nodes.create(&pp, &hollow_node("full-1", "1", zone("z3", "full-1"), json!([]))).await.unwrap();
    let on_full = |name: &str, extra: Value| {
        let mut spec = json!({"nodeSelector": {"kubernetes.io/hostname": "full-1"}, "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "500m"}}}]});
        spec.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        pod(name, json!({"spec": spec}))
    };
    pods.create(&pp, &on_full("low-1", json!({}))).await.unwrap();
    pods.create(&pp, &on_full("low-2", json!({}))).await.unwrap();
    wait_pods(&pods, "low pods bound to the full node", |ps| bound(ps, "low-1").is_some() && bound(ps, "low-2").is_some()).await;
    let vip = pods.create(&pp, &on_full("vip", json!({"priorityClassName": "high"}))).await.unwrap();
    assert_eq!(vip.spec.as_ref().unwrap().priority, Some(1000), "admission resolved the class");
    assert_eq!(vip.spec.as_ref().unwrap().preemption_policy.as_deref(), Some("PreemptLowerPriority"));
    let vip_uid = vip.metadata.uid.clone().unwrap();
    let find = |ps: &[Pod], n: &str| ps.iter().find(|p| p.metadata.name.as_deref() == Some(n)).cloned();
    let terminating = |ps: &[Pod], n: &str| find(ps, n).is_some_and(|p| p.metadata.deletion_timestamp.is_some());
    let seen = wait_pods(&pods, "vip nominated and one low pod preempted", |ps| {
        let nominated = find(ps, "vip").and_then(|p| p.status?.nominated_node_name).as_deref() == Some("full-1");
        nominated && (terminating(ps, "low-1") || terminating(ps, "low-2"))
    })
    .await;
    assert!(!(terminating(&seen, "low-1") && terminating(&seen, "low-2")), "one victim is enough");
    let victim = if terminating(&seen, "low-1") { "low-1" } else { "low-2" };
    let spared = if victim == "low-1" { "low-2" } else { "low-1" };
    // While the victim terminates (no kubelet here confirms it), the room is not free yet.
    assert_eq!(bound(&seen, "vip"), None);
    let victim_pod = find(&seen, victim).unwrap();
    let disruption = victim_pod.status.as_ref().and_then(|s| s.conditions.as_ref()).and_then(|c| c.iter().find(|c| c.type_ == "DisruptionTarget").cloned()).expect("DisruptionTarget on the victim");
    assert_eq!((disruption.status.as_str(), disruption.reason.as_deref()), ("True", Some("PreemptionByScheduler")));
    let all = events.list(&ListParams::default()).await.unwrap().items;
    let preempted = format!("Preempted by pod {vip_uid} on node full-1");
    assert!(
        all.iter().any(|e| e.reason.as_deref() == Some("Preempted") && e.involved_object.name.as_deref() == Some(victim) && e.message.as_deref() == Some(preempted.as_str())),
        "no Preempted Event on {victim}: {:?}",
        all.iter().filter(|e| e.involved_object.name.as_deref() == Some(victim)).map(|e| (&e.reason, &e.message)).collect::<Vec<_>>()
    );
    // The kubelet's confirmation: the victim goes, and vip is bound where it was nominated.
    pods.delete(victim, &DeleteParams { grace_period_seconds: Some(0), ..Default::default() }).await.unwrap();
    let after = wait_pods(&pods, "vip bound to its nominated node", |ps| bound(ps, "vip").as_deref() == Some("full-1")).await;
    assert!(find(&after, victim).is_none());
    assert_eq!(bound(&after, spared).as_deref(), Some("full-1"), "the other low pod was spared");
    // A pod naming a class that does not exist is refused as Kubernetes refuses it.
    let refused = pods.create(&pp, &pod("bad-class", json!({"spec": {"priorityClassName": "nope", "containers": [{"name": "c", "image": "busybox"}]}}))).await.unwrap_err();
    match refused {
        kube::Error::Api(s) => {
            assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"));
            assert_eq!(s.message, "pods \"bad-class\" is forbidden: no PriorityClass with name nope was found");
        }
        e => panic!("unexpected error: {e}"),
    }

    // Burst, with the scheduler's server killed in the middle of it.
    let leases: Api<Lease> = Api::namespaced(admin.clone(), "kube-system");
    let holder = leases.get("kube-scheduler").await.unwrap().spec.unwrap().holder_identity.unwrap();
    let victim = server_of(&holder).unwrap();
    // Schedulers count their attempts as kube-scheduler does (summed over the servers, in
    // case the lease moved during the test).
    let mut pages = String::new();
    for s in cluster.manifest().servers() {
        pages += &metrics_page(&s.metrics_addr).await;
    }
    let sum = |series: &str| -> f64 { pages.lines().filter(|l| l.starts_with(series)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum() };
    let count = |result: &str| sum(&format!("scheduler_schedule_attempts_total{{result=\"{result}\""));
    assert!(count("scheduled") >= 5.0 && count("unschedulable") >= 1.0, "attempts on the metrics pages:\n{pages}");
    // Bindings end the e2e latency; cycles time their extension points and plugins.
    assert!(sum("scheduler_e2e_scheduling_duration_seconds_count{result=\"scheduled\"") >= 5.0, "{pages}");
    assert!(sum("scheduler_framework_extension_point_duration_seconds_count{extension_point=\"Filter\",status=\"Success\"") >= 5.0, "{pages}");
    assert!(sum("scheduler_plugin_execution_duration_seconds_count{plugin=\"NodeResourcesFit\",extension_point=\"PreFilter\"") >= 5.0, "{pages}");
    // The controller manager's queues (a ServiceAccount per namespace was synced).
    assert!(sum("workqueue_adds_total{name=\"serviceaccount\"}") >= 1.0 && sum("workqueue_work_duration_seconds_count{name=\"serviceaccount\"}") >= 1.0, "{pages}");
    assert!(pages.contains("scheduler_pending_pods{queue=\"active\"}"), "{pages}");
    let survivor = (victim + 1) % 3;
    let writer = client(&cluster, &format!("keelson-{}", survivor + 1)).await;
    let burst_api: Api<Pod> = Api::namespaced(writer.clone(), "default");
    for i in 0..60 {
        if i == 20 {
            eprintln!("kill -9 server {victim} (scheduler holder {holder})");
            cluster.kill(victim).await.unwrap();
        }
        let p = pod(&format!("burst-{i}"), json!({"spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "10m"}}}]}}));
        let mut tries = 0;
        while let Err(e) = burst_api.create(&pp, &p).await {
            tries += 1;
            assert!(tries < 50, "creating burst-{i}: {e}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let survivor_pods: Api<Pod> = Api::namespaced(writer.clone(), "default");
    let done = wait_pods(&survivor_pods, "burst bound after the failover", |ps| (0..60).all(|i| bound(ps, &format!("burst-{i}")).is_some())).await;
    assert_eq!(done.iter().filter(|p| p.metadata.name.as_deref().is_some_and(|n| n.starts_with("burst-"))).count(), 60);
    let new_holder = Api::<Lease>::namespaced(writer.clone(), "kube-system").get("kube-scheduler").await.unwrap().spec.unwrap().holder_identity.unwrap();
    assert_ne!(new_holder, holder);
    // No pod was bound twice: one Scheduled Event per pod.
    let events: Api<Event> = Api::namespaced(writer, "default");
    let mut per_pod: BTreeMap<String, usize> = BTreeMap::new();
    let mut by_new_holder = 0;
    for e in events.list(&ListParams::default()).await.unwrap().items.into_iter().filter(|e| e.reason.as_deref() == Some("Scheduled")) {
        by_new_holder += usize::from(e.reporting_instance.as_deref() == Some(new_holder.as_str()));
        // Repeats of one Event are folded into its count.
        *per_pod.entry(e.involved_object.name.unwrap_or_default()).or_default() += e.count.unwrap_or(1).max(1) as usize;
    }
    assert!(per_pod.values().all(|&n| n == 1), "a pod was bound twice: {per_pod:?}");
    assert!(by_new_holder > 0, "the new holder bound none of the burst");
    cluster.stop(Duration::from_secs(10)).await.unwrap();
}
