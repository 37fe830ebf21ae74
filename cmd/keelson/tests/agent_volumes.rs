//! A claim's volume on a real node (`keelson agent` on containerd): a pod writes a file
//! into a claim of the default `local-path` class, is deleted, and a new pod with the
//! same claim reads it back; deleting the claim (reclaim Delete) removes the volume and
//! the agent removes its directory under `<data dir>/storage`.
//!
//! Needs root and containerd, runc, the CNI plugins and busybox-static (the README's test
//! command installs them as root; CI runs as root). Skipped loudly otherwise.

use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

mod node_support;
use node_support::{node_ready, node_tests_possible, poll, start_server, NodeNet};

const IMG: &str = "keelson.local/busybox:stable";

fn pod(name: &str, script: &str) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "c", "image": IMG, "command": ["sh", "-c", script], "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]}}))
    .unwrap()
}

fn phase(p: &Pod) -> &str {
    p.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

/// Waits for pod `name` to succeed; on timeout, fails with its status and Events.
async fn finished(client: &kube::Client, pods: &Api<Pod>, name: &str) -> Pod {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let p = pods.get_opt(name).await.ok().flatten();
        if let Some(p) = p.as_ref().filter(|p| phase(p) == "Succeeded") {
            return p.clone();
        }
        if std::time::Instant::now() > deadline {
            let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), "default");
            let evs: Vec<String> = events.list(&Default::default()).await.map(|l| l.items.into_iter().map(|e| format!("{:?} {:?} {:?}", e.involved_object.name, e.reason, e.message)).collect()).unwrap_or_default();
            panic!("{name} did not succeed: {:?}\nevents: {evs:#?}", p.map(|p| p.status));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_keeps_its_data_across_pods_on_a_real_node() {
    if !node_tests_possible("a claim's volume on a real node") {
        return;
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let net = NodeNet::create(3);
    let cluster = start_server(&net, &dir).await;
    let (_server, client, token, server) = (cluster.proc, cluster.client, cluster.token, cluster.url);
    let mut agent = node_support::start_agent(&net, &dir, &server, &token, "n1", "10.42.9.0/24", "agent.log");
    node_ready(&client, "n1").await;

    let pp = PostParams::default();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "64Mi"}}}})).unwrap();
    let uid = claims.create(&pp, &claim).await.unwrap().metadata.uid.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

    // The writer, placed by the scheduler: the claim is provisioned on n1 and bound.
    pods.create(&pp, &pod("writer", "echo kept-across-pods > /data/note && sync")).await.unwrap();
    finished(&client, &pods, "writer").await;
    let volume_dir = dir.join(format!("n1/storage/pvc-{uid}_default_data"));
    assert_eq!(std::fs::read_to_string(volume_dir.join("note")).unwrap(), "kept-across-pods\n", "the file is in the volume's directory on the node");
    pods.delete("writer", &DeleteParams::default()).await.unwrap();
    poll("writer gone", Duration::from_secs(60), || async { pods.get_opt("writer").await.ok()?.is_none().then_some(()) }).await;

    // A new pod with the same claim reads it.
    pods.create(&pp, &pod("reader", "cat /data/note")).await.unwrap();
    let reader = finished(&client, &pods, "reader").await;
    let reader_uid = reader.metadata.uid.clone().unwrap();
    let log = std::fs::read_to_string(dir.join(format!("n1/logs/pods/default_reader_{reader_uid}/c/0.log"))).unwrap();
    assert!(log.contains("stdout F kept-across-pods"), "{log}");

    // Reclaim Delete: the volume goes, and the agent removes the directory.
    pods.delete("reader", &DeleteParams::default()).await.unwrap();
    poll("reader gone", Duration::from_secs(60), || async { pods.get_opt("reader").await.ok()?.is_none().then_some(()) }).await;
    claims.delete("data", &DeleteParams::default()).await.unwrap();
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    poll("the volume deleted", Duration::from_secs(60), || async { volumes.get_opt(&format!("pvc-{uid}")).await.ok()?.is_none().then_some(()) }).await;
    poll("the directory removed", Duration::from_secs(30), || async { (!volume_dir.exists()).then_some(()) }).await;

    agent.terminate(Duration::from_secs(60));
}
