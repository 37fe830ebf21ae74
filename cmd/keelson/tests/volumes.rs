//! Volumes end to end on real `keelson server` processes with hollow nodes: the default
//! StorageClass `local-path` exists and new claims get it; a claim of it waits for its
//! first consumer, then (once the scheduler has placed the pod) is bound to a volume the
//! built-in provisioner made on that pod's node; a static volume is bound by size;
//! deleting a claim under reclaim Delete removes the volume (the hollow node records
//! the directory removal) and under Retain leaves it Released; a StatefulSet's claims
//! are bound. Assertions are on stored state, polled with generous overall timeouts.

mod cluster_support;

use std::time::Duration;

use cluster_support::{client_without_retries, eventually, start_short_elections};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Event, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

async fn events_of(client: &kube::Client, ns: &str, name: &str) -> Vec<String> {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let mut out: Vec<String> = match events.list(&ListParams::default()).await {
        Ok(l) => l.items.into_iter().filter(|e| e.involved_object.name.as_deref() == Some(name)).map(|e| format!("{} {}", e.reason.unwrap_or_default(), e.message.unwrap_or_default())).collect(),
        Err(_) => Vec::new(),
    };
    out.sort();
    out
}

fn phase(c: &PersistentVolumeClaim) -> &str {
    c.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

fn annotation<'a>(m: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, k: &str) -> Option<&'a str> {
    m.annotations.as_ref()?.get(k).map(String::as_str)
}

fn claim(name: &str, size: &str, class: Option<&str>) -> PersistentVolumeClaim {
    let mut spec = json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}});
    if let Some(c) = class {
        spec["storageClassName"] = json!(c);
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claims_are_bound_provisioned_and_reclaimed() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let tmp = tempfile::tempdir().unwrap();
    let cluster = start_short_elections(&tmp.path().join("c")).await;
    let admin = client_without_retries(&cluster, "keelson-1").await;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let hollow = tokio::spawn(keelson_agent::hollow::run(admin.clone(), keelson_agent::hollow::HollowConfig::new("hollow", 3), shutdown.clone()));
    let pp = PostParams::default();

    // The default class, made by the controller manager.
    let classes: Api<StorageClass> = Api::all(admin.clone());
    let sc = eventually("the local-path StorageClass", Duration::from_secs(60), || async { classes.get_opt("local-path").await.ok().flatten().ok_or("not yet".to_string()) }).await;
    assert_eq!((sc.provisioner.as_str(), sc.volume_binding_mode.as_deref(), sc.reclaim_policy.as_deref()), ("keelson.io/local-path", Some("WaitForFirstConsumer"), Some("Delete")));
    assert_eq!(annotation(&sc.metadata, "storageclass.kubernetes.io/is-default-class"), Some("true"));

    // A claim without a class gets the default one and waits for its first consumer.
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(admin.clone(), "default");
    let created = claims.create(&pp, &claim("data", "2Gi", None)).await.unwrap();
    assert_eq!(created.spec.as_ref().and_then(|s| s.storage_class_name.as_deref()), Some("local-path"), "DefaultStorageClass admission");
    eventually("the WaitForFirstConsumer event", Duration::from_secs(60), || async {
        let evs = events_of(&admin, "default", "data").await;
        evs.iter().any(|e| e == "WaitForFirstConsumer waiting for first consumer to be created before binding").then_some(()).ok_or(format!("{evs:?}"))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let waiting = claims.get("data").await.unwrap();
    assert_eq!(phase(&waiting), "Pending");
    assert!(waiting.spec.as_ref().and_then(|s| s.volume_name.as_deref()).is_none(), "no volume before a consumer: {waiting:?}");
    let volumes: Api<PersistentVolume> = Api::all(admin.clone());
    assert!(volumes.list(&ListParams::default()).await.unwrap().items.is_empty(), "nothing provisioned before a consumer");

    // A pod of a missing claim is not scheduled, with Kubernetes' message.
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let pod = |name: &str, claim: &str| -> Pod {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "example.com/app:1", "volumeMounts": [{"name": "d", "mountPath": "/data"}]}],
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": claim}}]}}))
        .unwrap()
    };
    pods.create(&pp, &pod("orphan", "nope")).await.unwrap();
    eventually("FailedScheduling for the missing claim", Duration::from_secs(60), || async {
        let evs = events_of(&admin, "default", "orphan").await;
        evs.iter().any(|e| e == "FailedScheduling 0/3 nodes are available: persistentvolumeclaim \"nope\" not found. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.").then_some(()).ok_or(format!("{evs:?}"))
    })
    .await;

    // Its first consumer: scheduled, then the claim is provisioned for and bound on that node.
    pods.create(&pp, &pod("app", "data")).await.unwrap();
    let node = eventually("app scheduled", Duration::from_secs(60), || async {
        pods.get("app").await.ok().and_then(|p| p.spec.and_then(|s| s.node_name)).ok_or("not yet".to_string())
    })
    .await;
    let bound = eventually("data bound", Duration::from_secs(60), || async {
        let c = claims.get("data").await.map_err(|e| e.to_string())?;
        (phase(&c) == "Bound").then_some(c.clone()).ok_or(format!("{:?} {:?}", c.metadata.annotations, c.status))
    })
    .await;
    let uid = created.metadata.uid.clone().unwrap();
    let pv_name = format!("pvc-{uid}");
    assert_eq!(bound.spec.as_ref().and_then(|s| s.volume_name.as_deref()), Some(pv_name.as_str()));
    assert_eq!(annotation(&bound.metadata, "volume.kubernetes.io/selected-node"), Some(node.as_str()));
    assert_eq!(annotation(&bound.metadata, "pv.kubernetes.io/bind-completed"), Some("yes"));
    assert_eq!(bound.status.as_ref().and_then(|s| s.capacity.as_ref()).map(|c| c["storage"].0.clone()).as_deref(), Some("2Gi"));
    let pv = volumes.get(&pv_name).await.unwrap();
    let spec = pv.spec.clone().unwrap();
    let affinity = spec.node_affinity.as_ref().and_then(|a| a.required.as_ref()).map(|r| r.node_selector_terms[0].match_expressions.clone().unwrap_or_default()).unwrap_or_default();
    assert_eq!((affinity[0].key.as_str(), affinity[0].values.clone().unwrap_or_default()), ("kubernetes.io/hostname", vec![node.clone()]), "node affinity to the pod's node");
    assert_eq!(spec.host_path.as_ref().map(|h| h.path.clone()), Some(format!("/var/lib/keelson-hollow/{node}/storage/{pv_name}_default_data")));
    assert_eq!(spec.persistent_volume_reclaim_policy.as_deref(), Some("Delete"));
    assert_eq!(spec.claim_ref.as_ref().and_then(|r| r.uid.as_deref()), Some(uid.as_str()));
    eventually("the volume is Bound", Duration::from_secs(30), || async {
        let v = volumes.get(&pv_name).await.map_err(|e| e.to_string())?;
        (v.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")).then_some(()).ok_or(format!("{:?}", v.status))
    })
    .await;
    let want = format!("ProvisioningSucceeded Successfully provisioned volume {pv_name}");
    eventually("the ProvisioningSucceeded event", Duration::from_secs(30), || async {
        let evs = events_of(&admin, "default", "data").await;
        evs.contains(&want).then_some(()).ok_or(format!("{evs:?}"))
    })
    .await;

    // Static volumes of a class without a provisioner: the smallest that fits is bound.
    for (name, size) in [("small", "1Gi"), ("medium", "5Gi"), ("large", "10Gi")] {
        let pv: PersistentVolume = serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
            "storageClassName": "manual", "hostPath": {"path": format!("/srv/{name}")}}})).unwrap();
        volumes.create(&pp, &pv).await.unwrap();
    }
    claims.create(&pp, &claim("static", "3Gi", Some("manual"))).await.unwrap();
    let st = eventually("static bound", Duration::from_secs(60), || async {
        let c = claims.get("static").await.map_err(|e| e.to_string())?;
        (phase(&c) == "Bound").then_some(c.clone()).ok_or(format!("{:?}", c.status))
    })
    .await;
    assert_eq!(st.spec.as_ref().and_then(|s| s.volume_name.as_deref()), Some("medium"), "the smallest volume of at least 3Gi");
    assert_eq!(annotation(&st.metadata, "pv.kubernetes.io/bound-by-controller"), Some("yes"));
    let medium = volumes.get("medium").await.unwrap();
    assert_eq!(medium.spec.as_ref().and_then(|s| s.claim_ref.as_ref()).and_then(|r| r.name.as_deref()), Some("static"));
    assert_eq!(annotation(&medium.metadata, "pv.kubernetes.io/bound-by-controller"), Some("yes"));
    for free in ["small", "large"] {
        let v = volumes.get(free).await.unwrap();
        assert!(v.spec.as_ref().and_then(|s| s.claim_ref.as_ref()).is_none(), "{free} stays unclaimed");
    }

    // Reclaim Delete: the provisioned volume goes and its node records the directory removal.
    pods.delete("app", &DeleteParams::default()).await.unwrap();
    claims.delete("data", &DeleteParams::default()).await.unwrap();
    eventually("the provisioned volume deleted", Duration::from_secs(60), || async {
        match volumes.get_opt(&pv_name).await {
            Ok(None) => Ok(()),
            other => Err(format!("{:?}", other.map(|v| v.and_then(|v| v.status)))),
        }
    })
    .await;
    let expected = format!("LocalVolumeRemoved Simulated (hollow node): would remove directory /var/lib/keelson-hollow/{node}/storage/{pv_name}_default_data of deleted PersistentVolume {pv_name}");
    eventually("the node records the directory removal", Duration::from_secs(30), || async {
        let evs = events_of(&admin, "default", &node).await;
        evs.contains(&expected).then_some(()).ok_or(format!("{evs:?}"))
    })
    .await;

    // Reclaim Retain (static volumes' default): Released and kept.
    claims.delete("static", &DeleteParams::default()).await.unwrap();
    eventually("medium Released", Duration::from_secs(60), || async {
        let v = volumes.get("medium").await.map_err(|e| e.to_string())?;
        (v.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released")).then_some(()).ok_or(format!("{:?}", v.status))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(volumes.get_opt("medium").await.unwrap().is_some(), "a retained volume stays");

    // A StatefulSet's claims (from its templates, default class) are bound on their pods' nodes.
    let sts: StatefulSet = serde_json::from_value(json!({"metadata": {"name": "db"}, "spec": {"replicas": 2, "podManagementPolicy": "Parallel", "serviceName": "db",
        "selector": {"matchLabels": {"app": "db"}},
        "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "c", "image": "example.com/db:1", "volumeMounts": [{"name": "data", "mountPath": "/var/lib/db"}]}]}},
        "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}}))
    .unwrap();
    Api::<StatefulSet>::namespaced(admin.clone(), "default").create(&pp, &sts).await.unwrap();
    for i in 0..2 {
        let (pod_name, claim_name) = (format!("db-{i}"), format!("data-db-{i}"));
        let c = eventually(&format!("{claim_name} bound"), Duration::from_secs(90), || async {
            let c = claims.get(&claim_name).await.map_err(|e| e.to_string())?;
            (phase(&c) == "Bound").then_some(c.clone()).ok_or(format!("{:?}", c.status))
        })
        .await;
        let on = pods.get(&pod_name).await.unwrap().spec.and_then(|s| s.node_name).expect("scheduled");
        let v = volumes.get(c.spec.as_ref().and_then(|s| s.volume_name.as_deref()).unwrap()).await.unwrap();
        let values = v.spec.and_then(|s| s.node_affinity).and_then(|a| a.required).map(|r| r.node_selector_terms[0].match_expressions.clone().unwrap_or_default()[0].values.clone().unwrap_or_default()).unwrap_or_default();
        assert_eq!(values, vec![on], "{claim_name}'s volume is on {pod_name}'s node");
    }

    shutdown.cancel();
    let _ = hollow.await;
    drop(cluster);
}
