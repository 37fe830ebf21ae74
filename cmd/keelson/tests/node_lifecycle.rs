//! The node controllers end to end on real `keelson server` processes with hollow nodes
//! run one by one (so one can die alone): every Node gets its own pod CIDR; a
//! Deployment's pods spread over the nodes; one node stops heartbeating, goes
//! Ready=Unknown and is tainted unreachable; its pods are marked not Ready, evicted once
//! their (short) tolerations run out, and the ReplicaSet replaces them on the healthy
//! nodes; the node comes back and its taints go. Every check polls stored state under a
//! generous overall timeout: nothing here depends on how fast a step is.

mod cluster_support;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::Duration;

use cluster_support::{client, start_short_elections_with};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use keelson_agent::hollow::{HollowConfig, HollowError};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const NODES: usize = 4;
const REPLICAS: usize = 8;
const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
const NOT_READY: &str = "node.kubernetes.io/not-ready";

/// Node heartbeats every 500 ms; a node unheard for 4 s is Unknown.
const NODE_FLAGS: [&str; 8] = ["--node-monitor-period", "500ms", "--node-monitor-grace-period", "4s", "--cluster-cidr", "10.99.0.0/16,fd99::/56", "--node-cidr-mask-size-ipv4", "24"];

/// Polls `probe` until it gives `Some`, failing with the last `Err` after 120 s.
async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        match probe().await {
            Ok(v) => return v,
            Err(last) => assert!(tokio::time::Instant::now() < deadline, "{what}: {last}"),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Hollow node `i` alone, heartbeating every 500 ms, until its token is cancelled.
fn hollow_node(admin: &kube::Client, i: usize) -> (CancellationToken, tokio::task::JoinHandle<Result<(), HollowError>>) {
    let mut cfg = HollowConfig::new("hollow", 1);
    cfg.first = i;
    cfg.heartbeat = Duration::from_millis(500);
    let stop = CancellationToken::new();
    (stop.clone(), tokio::spawn(keelson_agent::hollow::run(admin.clone(), cfg, stop)))
}

fn ready_of(node: &Node) -> Option<(String, Option<String>, Option<String>)> {
    let c = node.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "Ready")?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

fn taints_of(node: &Node) -> BTreeSet<(String, String)> {
    node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default().into_iter().map(|t| (t.key, t.effect)).collect()
}

fn node_of(pod: &Pod) -> String {
    pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default()
}

fn running(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

fn condition(pod: &Pod, type_: &str) -> Option<String> {
    pod.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_).map(|c| c.status.clone())
}

async fn web_pods(pods: &Api<Pod>) -> Result<Vec<Pod>, String> {
    Ok(pods.list(&ListParams::default().labels("app=web")).await.map_err(|e| e.to_string())?.items)
}

async fn events(api: &Api<Event>, reason: &str) -> Vec<Event> {
    api.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default().into_iter().filter(|e| e.reason.as_deref() == Some(reason)).collect()
}

fn deployment() -> Deployment {
    let toleration = |key: &str| json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 2});
    serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": REPLICAS,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [{"name": "c", "image": "example.com/web:1", "resources": {"requests": {"cpu": "1"}}}],
                    "tolerations": [toleration(UNREACHABLE), toleration(NOT_READY)],
                },
            },
        },
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_node_is_tainted_its_pods_evicted_and_replaced_and_it_recovers() {
    let tmp = tempfile::tempdir().unwrap();
    let cluster = start_short_elections_with(&tmp.path().join("c"), &NODE_FLAGS).await;
    let admin = client(&cluster, "keelson-1").await;
    let mut hollow: Vec<_> = (0..NODES).map(|i| hollow_node(&admin, i)).collect();
    let nodes: Api<Node> = Api::all(admin.clone());
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let event_api: Api<Event> = Api::namespaced(admin.clone(), "default");

    // Every node gets its own block of each cluster CIDR (the cluster is dual-stack).
    let cidrs: BTreeMap<String, String> = eventually("every node has a pod CIDR", || async {
        let list = nodes.list(&ListParams::default()).await.map_err(|e| e.to_string())?.items;
        let cidrs: BTreeMap<String, String> = list
            .iter()
            .filter_map(|n| {
                let spec = n.spec.as_ref()?;
                let all = spec.pod_cidrs.clone()?;
                (all.len() == 2 && spec.pod_cidr.as_ref() == all.first()).then(|| (n.metadata.name.clone().unwrap_or_default(), all.join(",")))
            })
            .collect();
        if cidrs.len() == NODES { Ok(cidrs) } else { Err(format!("pod CIDRs so far: {cidrs:?} of {} nodes", list.len())) }
    })
    .await;
    let distinct: BTreeSet<&String> = cidrs.values().collect();
    assert_eq!(distinct.len(), NODES, "no two nodes share a CIDR: {cidrs:?}");
    assert!(cidrs.values().all(|c| c.starts_with("10.99.") && c.contains(".0/24,fd99:") && c.ends_with("::/64")), "an IPv4 /24 and an IPv6 /64 each: {cidrs:?}");

    // DefaultTolerationSeconds: a pod without tolerations gets both for 300 s (this one
    // stays Pending: no node matches its selector).
    let bare: Pod = serde_json::from_value(json!({"metadata": {"name": "bare"}, "spec": {"nodeSelector": {"nowhere": "true"}, "containers": [{"name": "c", "image": "i"}]}})).unwrap();
    let bare = pods.create(&PostParams::default(), &bare).await.unwrap();
    let defaults: BTreeSet<(String, Option<i64>)> = bare.spec.unwrap().tolerations.unwrap_or_default().into_iter().map(|t| (t.key.unwrap_or_default(), t.toleration_seconds)).collect();
    assert_eq!(defaults, BTreeSet::from([(NOT_READY.to_string(), Some(300)), (UNREACHABLE.to_string(), Some(300))]));

    // The Deployment spreads over the nodes; its own 2 s tolerations are kept, not doubled.
    Api::<Deployment>::namespaced(admin.clone(), "default").create(&PostParams::default(), &deployment()).await.unwrap();
    let placed = eventually("all replicas Running", || async {
        let live: Vec<Pod> = web_pods(&pods).await?.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect();
        if live.len() == REPLICAS && live.iter().all(running) { Ok(live) } else { Err(format!("{} live pods, {} running", live.len(), live.iter().filter(|p| running(p)).count())) }
    })
    .await;
    let tolerations = placed[0].spec.as_ref().unwrap().tolerations.clone().unwrap_or_default();
    assert_eq!(tolerations.iter().filter(|t| t.key.as_deref() == Some(UNREACHABLE)).map(|t| t.toleration_seconds).collect::<Vec<_>>(), [Some(2)]);
    let mut per_node: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in &placed {
        per_node.entry(node_of(p)).or_default().push(p.metadata.name.clone().unwrap_or_default());
    }
    assert!(per_node.len() >= 3, "the pods spread over the nodes: {per_node:?}");
    let (victim, doomed) = per_node.iter().max_by_key(|(_, p)| p.len()).map(|(n, p)| (n.clone(), p.clone())).unwrap();
    let victim_index: usize = victim.strip_prefix("hollow-").unwrap().parse().unwrap();
    eprintln!("pod CIDRs {cidrs:?}; pods by node {per_node:?}; stopping {victim}");

    // The victim stops: no more Lease renewals, nobody serving its pods.
    hollow[victim_index].0.cancel();
    let _ = (&mut hollow[victim_index].1).await;
    eventually("the victim is Unknown and tainted unreachable", || async {
        let n = nodes.get(&victim).await.map_err(|e| e.to_string())?;
        let ready = ready_of(&n);
        let taints = taints_of(&n);
        let want_taints = BTreeSet::from([(UNREACHABLE.to_string(), "NoExecute".to_string()), (UNREACHABLE.to_string(), "NoSchedule".to_string())]);
        if ready == Some(("Unknown".into(), Some("NodeStatusUnknown".into()), Some("Kubelet stopped posting node status.".into()))) && want_taints.is_subset(&taints) {
            Ok(())
        } else {
            Err(format!("Ready {ready:?}, taints {taints:?}"))
        }
    })
    .await;
    let n = nodes.get(&victim).await.unwrap();
    let pressure: Vec<_> = n.status.unwrap().conditions.unwrap().into_iter().filter(|c| c.type_.ends_with("Pressure")).map(|c| (c.status, c.reason)).collect();
    assert_eq!(pressure, vec![("Unknown".to_string(), Some("NodeStatusUnknown".to_string())); 3]);

    // Its pods are marked not Ready, evicted after their 2 s, and replaced elsewhere.
    eventually("the victim's pods are evicted (Terminating, not Ready, DisruptionTarget)", || async {
        let all = web_pods(&pods).await?;
        let old: Vec<&Pod> = all.iter().filter(|p| doomed.contains(p.metadata.name.as_ref().unwrap())).collect();
        let done = old.iter().all(|p| p.metadata.deletion_timestamp.is_some() && condition(p, "Ready").as_deref() == Some("False") && condition(p, "DisruptionTarget").as_deref() == Some("True"));
        if done { Ok(()) } else { Err(format!("old pods: {:?}", old.iter().map(|p| (p.metadata.name.clone(), p.metadata.deletion_timestamp.is_some(), condition(p, "Ready"), condition(p, "DisruptionTarget"))).collect::<Vec<_>>())) }
    })
    .await;
    eventually("all replicas Running again on the healthy nodes", || async {
        let live: Vec<Pod> = web_pods(&pods).await?.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect();
        let ok = live.len() == REPLICAS && live.iter().all(|p| running(p) && node_of(p) != victim);
        if ok { Ok(()) } else { Err(format!("live: {:?}", live.iter().map(|p| (node_of(p), running(p))).collect::<Vec<_>>())) }
    })
    .await;

    // The Events Kubernetes records.
    let evictions: BTreeSet<String> = events(&event_api, "TaintManagerEviction").await.into_iter().filter_map(|e| e.message).collect();
    for name in &doomed {
        assert!(evictions.contains(&format!("Marking for deletion Pod default/{name}")), "{evictions:?}");
    }
    let node_not_ready: Vec<Event> = events(&event_api, "NodeNotReady").await;
    assert!(node_not_ready.iter().any(|e| e.involved_object.kind.as_deref() == Some("Node") && e.message.as_deref() == Some(format!("Node {victim} status is now: NodeNotReady").as_str())), "{node_not_ready:?}");
    assert!(node_not_ready.iter().any(|e| e.involved_object.kind.as_deref() == Some("Pod") && e.type_.as_deref() == Some("Warning") && e.message.as_deref() == Some("Node is not ready")), "{node_not_ready:?}");
    let registered: BTreeSet<String> = events(&event_api, "RegisteredNode").await.into_iter().filter_map(|e| e.message).collect();
    assert!(registered.contains(&format!("Registered Node {victim} in Controller")), "{registered:?}");

    eprintln!("{victim}'s pods evicted and replaced; restarting it");
    // The node comes back: Ready again, its taints gone, its old pods confirmed deleted.
    hollow[victim_index] = hollow_node(&admin, victim_index);
    eventually("the victim is Ready and untainted", || async {
        let n = nodes.get(&victim).await.map_err(|e| e.to_string())?;
        let (ready, taints) = (ready_of(&n), taints_of(&n));
        if ready.as_ref().is_some_and(|r| r.0 == "True") && taints.is_empty() { Ok(()) } else { Err(format!("Ready {ready:?}, taints {taints:?}")) }
    })
    .await;
    eventually("the evicted pods are gone", || async {
        let names: Vec<String> = web_pods(&pods).await?.into_iter().filter_map(|p| p.metadata.name).filter(|n| doomed.contains(n)).collect();
        if names.is_empty() { Ok(()) } else { Err(format!("still there: {names:?}")) }
    })
    .await;
    assert_eq!(nodes.get(&victim).await.unwrap().spec.unwrap().pod_cidrs.map(|c| c.join(",")).as_ref(), cidrs.get(&victim), "a node keeps its CIDRs");

    for (stop, task) in hollow {
        stop.cancel();
        let _ = task.await;
    }
    cluster.stop(Duration::from_secs(10)).await.unwrap();
}
