//! PodDisruptionBudgets and the pod garbage collector end to end on real `keelson
//! server` processes with hollow nodes:
//! the disruption controller keeps a budget's status (over a Deployment's scale for a
//! percentage), the eviction subresource takes one disruption per eviction and refuses
//! the next with 429 while the budget is spent; a finished pod needs none. A Node
//! deleted under its pods has them collected after the quarantine, and their
//! ReplicaSet replaces them elsewhere. The garbage collector follows owner references
//! of any kind (ConfigMaps owned by pods). Assertions are on stored state, polled with
//! generous overall timeouts.

mod cluster_support;

use std::time::Duration;

use cluster_support::{client_without_retries, eventually, start_short_elections};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, EvictParams, ListParams, PostParams};
use serde_json::json;

fn ready(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn disruption_budgets_are_kept_and_bound_evictions() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let tmp = tempfile::tempdir().unwrap();
    let cluster = start_short_elections(&tmp.path().join("c")).await;
    let admin = client_without_retries(&cluster, "keelson-1").await;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let hollow = tokio::spawn(keelson_agent::hollow::run(admin.clone(), keelson_agent::hollow::HollowConfig::new("hollow", 2), shutdown.clone()));

    let pp = PostParams::default();
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), "default");
    deployments
        .create(&pp, &serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "example.com/web:1"}]}}}})).unwrap())
        .await
        .unwrap();
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(admin.clone(), "default");
    budgets.create(&pp, &serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": {"minAvailable": "60%", "selector": {"matchLabels": {"app": "web"}}}})).unwrap()).await.unwrap();
    budgets.create(&pp, &serde_json::from_value(json!({"metadata": {"name": "bare"}, "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "bare"}}}})).unwrap()).await.unwrap();

    // 60% of the Deployment's 3 replicas, rounded up: 2 must stay healthy, 1 may go.
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    eventually("the budget counts 3 healthy pods of 3 expected", Duration::from_secs(60), || async {
        let s = budgets.get("web").await.map_err(|e| e.to_string())?.status.unwrap_or_default();
        let c = s.conditions.clone().unwrap_or_default();
        let sufficient = c.iter().any(|c| c.type_ == "DisruptionAllowed" && c.status == "True" && c.reason == "SufficientPods");
        (s.expected_pods == 3 && s.desired_healthy == 2 && s.current_healthy == 3 && s.disruptions_allowed == 1 && sufficient && s.observed_generation == Some(1)).then_some(()).ok_or(format!("{s:?}"))
    })
    .await;
    let names: Vec<String> = pods.list(&ListParams::default().labels("app=web")).await.unwrap().items.into_iter().filter(ready).filter_map(|p| p.metadata.name).collect();
    assert_eq!(names.len(), 3, "{names:?}");

    // An eviction takes the one disruption; once the ReplicaSet's replacement is
    // healthy, one is allowed again.
    pods.evict(&names[0], &EvictParams::default()).await.expect("the first eviction is allowed");
    eventually("the replacement restores the budget", Duration::from_secs(60), || async {
        let s = budgets.get("web").await.map_err(|e| e.to_string())?.status.unwrap_or_default();
        (s.current_healthy == 3 && s.disruptions_allowed == 1 && s.disrupted_pods.as_ref().is_none_or(|d| d.is_empty())).then_some(()).ok_or(format!("{s:?}"))
    })
    .await;
    pods.evict(&names[1], &EvictParams::default()).await.expect("allowed again");

    // Pods nothing replaces, under minAvailable 2 of 3: one eviction is allowed, the
    // next is refused with 429 and its pod stays.
    for n in ["bare-1", "bare-2", "bare-3"] {
        pods.create(&pp, &serde_json::from_value(json!({"metadata": {"name": n, "labels": {"app": "bare"}}, "spec": {"containers": [{"name": "c", "image": "example.com/bare:1"}]}})).unwrap()).await.unwrap();
    }
    eventually("the bare pods run and their budget is kept", Duration::from_secs(60), || async {
        let s = budgets.get("bare").await.map_err(|e| e.to_string())?.status.unwrap_or_default();
        (s.current_healthy == 3 && s.expected_pods == 3 && s.disruptions_allowed == 1).then_some(()).ok_or(format!("{s:?}"))
    })
    .await;
    pods.evict("bare-1", &EvictParams::default()).await.expect("one of three may go");
    match pods.evict("bare-2", &EvictParams::default()).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (429, "TooManyRequests"), "{s:?}");
            assert!(s.message.starts_with("Cannot evict pod as it would violate the pod's disruption budget."), "{}", s.message);
        }
        other => panic!("a second eviction while the budget is spent: {other:?}"),
    }
    assert!(pods.get_opt("bare-2").await.unwrap().is_some_and(|p| p.metadata.deletion_timestamp.is_none()), "the refused pod stays");
    let spent = budgets.get("bare").await.unwrap().status.unwrap_or_default();
    assert_eq!(spent.disruptions_allowed, 0, "{spent:?}");

    // Concurrent evictions through every server: a budget with one disruption allowed
    // lets exactly one of them through (the disruption is taken by a conditional write of
    // the budget's status), the others get 429.
    budgets.create(&pp, &serde_json::from_value(json!({"metadata": {"name": "race"}, "spec": {"minAvailable": 3, "selector": {"matchLabels": {"app": "race"}}}})).unwrap()).await.unwrap();
    let racers = ["race-1", "race-2", "race-3", "race-4"];
    for n in racers {
        pods.create(&pp, &serde_json::from_value(json!({"metadata": {"name": n, "labels": {"app": "race"}}, "spec": {"containers": [{"name": "c", "image": "example.com/race:1"}]}})).unwrap()).await.unwrap();
    }
    eventually("the racing pods run and their budget allows one disruption", Duration::from_secs(60), || async {
        let s = budgets.get("race").await.map_err(|e| e.to_string())?.status.unwrap_or_default();
        (s.current_healthy == 4 && s.expected_pods == 4 && s.disruptions_allowed == 1).then_some(()).ok_or(format!("{s:?}"))
    })
    .await;
    let mut evictors = Vec::new();
    for server in ["keelson-1", "keelson-2", "keelson-3"] {
        evictors.push(Api::<Pod>::namespaced(client_without_retries(&cluster, server).await, "default"));
    }
    let attempts = racers.iter().enumerate().map(|(i, n)| {
        let api = evictors[i % evictors.len()].clone();
        async move { (n.to_string(), api.evict(n, &EvictParams::default()).await) }
    });
    let outcomes = futures::future::join_all(attempts).await;
    let allowed: Vec<&String> = outcomes.iter().filter(|(_, r)| r.is_ok()).map(|(n, _)| n).collect();
    let refused = outcomes.iter().filter(|(_, r)| matches!(r, Err(kube::Error::Api(s)) if s.code == 429)).count();
    assert_eq!((allowed.len(), refused), (1, 3), "one eviction of four races through: {outcomes:?}");
    for n in racers.iter().filter(|n| allowed[0] != *n) {
        assert!(pods.get_opt(n).await.unwrap().is_some_and(|p| p.metadata.deletion_timestamp.is_none()), "refused {n} stays");
    }

    // A finished pod needs no disruption.
    pods.create(&pp, &serde_json::from_value(json!({"metadata": {"name": "bare-done", "labels": {"app": "bare"}, "annotations": {"keelson.io/hollow-exit-code": "0"}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "example.com/bare:1"}]}})).unwrap()).await.unwrap();
    eventually("bare-done finishes", Duration::from_secs(60), || async {
        let p = pods.get("bare-done").await.map_err(|e| e.to_string())?;
        (p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded")).then_some(()).ok_or(format!("{:?}", p.status))
    })
    .await;
    pods.evict("bare-done", &EvictParams::default()).await.expect("a finished pod is evicted whatever the budget");

    // The garbage collector judges owners of any kind: a ConfigMap owned by a pod goes
    // with the pod; one whose owner never existed goes too; one owned by a live pod stays.
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(admin.clone(), "default");
    let owned_by = |name: &str, pod: &str, uid: &str| -> k8s_openapi::api::core::v1::ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": name, "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid}]}})).unwrap()
    };
    let bare3_uid = pods.get("bare-3").await.unwrap().metadata.uid.unwrap();
    let solo_uid = pods.get("bare-2").await.unwrap().metadata.uid.unwrap();
    cms.create(&pp, &owned_by("of-bare-3", "bare-3", &bare3_uid)).await.unwrap();
    cms.create(&pp, &owned_by("of-nobody", "never", "00000000-0000-4000-8000-000000000000")).await.unwrap();
    cms.create(&pp, &owned_by("of-bare-2", "bare-2", &solo_uid)).await.unwrap();
    pods.delete("bare-3", &kube::api::DeleteParams { grace_period_seconds: Some(0), ..Default::default() }).await.unwrap();
    eventually("the ConfigMaps of gone owners are collected", Duration::from_secs(60), || async {
        let names: Vec<String> = cms.list(&ListParams::default()).await.map_err(|e| e.to_string())?.items.into_iter().filter_map(|c| c.metadata.name).filter(|n| n.starts_with("of-")).collect();
        (names == ["of-bare-2"]).then_some(()).ok_or(format!("{names:?}"))
    })
    .await;

    // The pods of a deleted Node are collected once it has been gone for 40 s (checked
    // every 20 s), and the Deployment's replacements run on the other node.
    let web_pods = pods.list(&ListParams::default().labels("app=web")).await.unwrap().items;
    let victim = web_pods.iter().find_map(|p| p.spec.as_ref()?.node_name.clone()).expect("a web pod on a node");
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(admin.clone());
    nodes.delete(&victim, &Default::default()).await.unwrap();
    eventually("the deleted node's pods are collected and replaced", Duration::from_secs(120), || async {
        let all = pods.list(&ListParams::default().labels("app=web")).await.map_err(|e| e.to_string())?.items;
        let on_victim = all.iter().filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(victim.as_str())).count();
        let ready_elsewhere = all.iter().filter(|p| ready(p) && p.spec.as_ref().and_then(|s| s.node_name.as_deref()) != Some(victim.as_str())).count();
        (on_victim == 0 && ready_elsewhere == 3).then_some(()).ok_or(format!("{on_victim} left on {victim}, {ready_elsewhere} ready elsewhere"))
    })
    .await;

    shutdown.cancel();
    let _ = hollow.await;
    drop(cluster);
}
