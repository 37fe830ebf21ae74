//! Many writers of one object at once, through every server: an update without a
//! resourceVersion precondition (a server-side apply, a merge patch) lands however many
//! race it, as Kubernetes retries such an update until it does; one pinned to an old
//! version still gets 409 Conflict.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use keelson_tests::api::ApiCluster;
use keelson_tests::ClusterOptions;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

const WRITERS: usize = 48;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_unpinned_updates_of_one_object_all_land_and_a_stale_pinned_one_conflicts() {
    let cluster = ApiCluster::start(3, ClusterOptions::default()).await.expect("cluster");
    let mut clients = Vec::new();
    for i in 0..3 {
        clients.push(cluster.kube_client(i).await.expect("client"));
    }
    let leases: Vec<Api<Lease>> = clients.iter().map(|c| Api::namespaced(c.clone(), "default")).collect();
    let maps: Vec<Api<ConfigMap>> = clients.iter().map(|c| Api::namespaced(c.clone(), "default")).collect();
    maps[0].create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "shared"}})).unwrap()).await.expect("create the ConfigMap");

    // A node's Lease renewed by many renewals in flight at once (as after a stall).
    let renewals = (0..WRITERS).map(|i| {
        let api = leases[i % 3].clone();
        async move {
            let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "node-1"},
                "spec": {"holderIdentity": "node-1", "leaseDurationSeconds": 40, "renewTime": format!("2026-01-01T00:00:{:02}.000000Z", i % 60)}});
            api.patch("node-1", &PatchParams::apply("kubelet").force(), &Patch::Apply(lease)).await
        }
    });
    // Merge patches, each adding a key of its own: none may be lost.
    let patches = (0..WRITERS).map(|i| {
        let api = maps[i % 3].clone();
        async move { api.patch("shared", &PatchParams::default(), &Patch::Merge(json!({"data": {format!("k{i}"): "v"}}))).await }
    });
    let (renewed, patched) = tokio::join!(futures::future::join_all(renewals), futures::future::join_all(patches));
    let failed: Vec<String> = renewed.iter().filter_map(|r| r.as_ref().err()).chain(patched.iter().filter_map(|r| r.as_ref().err())).map(|e| e.to_string()).collect();
    assert!(failed.is_empty(), "{} of {} racing updates failed: {failed:?}", failed.len(), 2 * WRITERS);

    let map = maps[1].get("shared").await.expect("get");
    let data = map.data.clone().unwrap_or_default();
    let missing: Vec<usize> = (0..WRITERS).filter(|i| !data.contains_key(&format!("k{i}"))).collect();
    assert!(missing.is_empty(), "merge patches acknowledged but lost: {missing:?}");

    // An update pinned to a version another writer has passed is refused.
    let mut stale = map.clone();
    maps[2].patch("shared", &PatchParams::default(), &Patch::Merge(json!({"data": {"later": "v"}}))).await.expect("a later write");
    stale.data.get_or_insert_with(Default::default).insert("stale".into(), "v".into());
    match maps[0].replace("shared", &PostParams::default(), &stale).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 409, "{s:?}"),
        other => panic!("a stale pinned update must conflict: {other:?}"),
    }
    cluster.shutdown().await;
}
