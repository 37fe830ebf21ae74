//! The one resource catalog, seen from a client: discovery lists exactly the catalog's
//! resources with their verbs and subresources, each listable resource answers a Table with
//! its printer's columns, answered resources (reviews) are answered, and the create-only
//! `bindings` resource binds the pod its body names.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use keelson_apiserver::catalog;
use keelson_tests::api::ApiCluster;
use keelson_tests::ClusterOptions;
use kube::api::{Api, PostParams};
use kube::discovery::Discovery;
use serde_json::{json, Value};

/// `(status, body)` of a raw request through `client`.
async fn call(client: &kube::Client, method: &str, path: &str, body: Option<Value>, accept: &str) -> (u16, Value) {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("accept", accept)
        .header("content-type", "application/json")
        .body(body.map(|b| b.to_string().into_bytes()).unwrap_or_default())
        .expect("request");
    let resp = client.send(req.map(kube::client::Body::from)).await.expect("send");
    let status = resp.status().as_u16();
    let bytes = body_bytes(resp).await;
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

async fn body_bytes(resp: http::Response<kube::client::Body>) -> Vec<u8> {
    use http_body_util::BodyExt;
    resp.into_body().collect().await.expect("body").to_bytes().to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn discovery_tables_reviews_and_bindings_all_come_from_the_catalog() {
    let c = ApiCluster::start(1, ClusterOptions::default()).await.expect("cluster");
    let client = c.kube_client(0).await.expect("client");

    // Discovery: every group version's resource list is the catalog's, verbs included.
    for gv in catalog::group_versions() {
        let path = format!("/{}", gv.path());
        let (code, list) = call(&client, "GET", &path, None, "application/json").await;
        assert_eq!(code, 200, "{path}: {list}");
        let served: BTreeSet<(String, String)> = list["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .map(|r| (r["name"].as_str().unwrap().to_string(), r["verbs"].to_string()))
            .collect();
        let mut want = BTreeSet::new();
        for d in catalog::resources_in(gv.group, gv.version) {
            want.insert((d.plural.to_string(), json!(d.verbs).to_string()));
            for s in d.subresources {
                want.insert((format!("{}/{}", d.plural, s.name()), json!(s.verbs).to_string()));
            }
        }
        assert_eq!(served, want, "{path}");
    }
    // kube-rs discovery agrees, and sees bindings as create-only.
    let disc = Discovery::new(client.clone()).run().await.expect("kube-rs discovery");
    let (_, caps) = disc.groups().find(|g| g.name().is_empty()).expect("core group").recommended_resources().into_iter().find(|(r, _)| r.plural == "bindings").expect("bindings discovered");
    assert!(caps.supports_operation("create") && !caps.supports_operation("list"));

    // Tables: each listable resource answers with its printer's columns.
    let table = "application/json;as=Table;v=v1;g=meta.k8s.io";
    for d in catalog::resources().iter().filter(|d| d.list_kind.is_some()) {
        let path = if d.group.is_empty() { format!("/api/v1/{}", d.plural) } else { format!("/apis/{}/{}/{}", d.group, d.version, d.plural) };
        let (code, t) = call(&client, "GET", &path, None, table).await;
        assert_eq!(code, 200, "{path}: {t}");
        let want = serde_json::to_value(keelson_apimachinery::table::columns(d.printer)).unwrap();
        assert_eq!(t["columnDefinitions"], want, "{path} columns");
    }

    // An answered resource is answered, never stored, and has no other verbs.
    let review = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": {"resourceAttributes": {"verb": "list", "resource": "pods"}}});
    let (code, out) = call(&client, "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", Some(review), "application/json").await;
    assert_eq!((code, out["status"]["allowed"].as_bool()), (201, Some(true)), "{out}");
    let (code, _) = call(&client, "GET", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", None, "application/json").await;
    assert_eq!(code, 405);

    // `bindings`: binds the pod its body names, once; other verbs are refused.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "bind-me"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}})).unwrap();
    pods.create(&PostParams::default(), &pod).await.expect("pod");
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "bind-me"}, "target": {"kind": "Node", "name": "node-7"}});
    let (code, out) = call(&client, "POST", "/api/v1/namespaces/default/bindings", Some(binding.clone()), "application/json").await;
    assert_eq!(code, 201, "{out}");
    let bound = pods.get("bind-me").await.expect("get");
    assert_eq!(bound.spec.as_ref().and_then(|s| s.node_name.as_deref()), Some("node-7"));
    let scheduled = bound.status.and_then(|s| s.conditions).unwrap_or_default().into_iter().find(|c| c.type_ == "PodScheduled").expect("PodScheduled");
    assert_eq!(scheduled.status, "True");
    let (code, out) = call(&client, "POST", "/api/v1/namespaces/default/bindings", Some(binding), "application/json").await;
    assert_eq!(code, 409, "a second binding conflicts: {out}");
    assert!(out["message"].as_str().unwrap_or("").contains("is already assigned to node \"node-7\""), "{out}");
    let nameless = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {}, "target": {"name": "node-7"}});
    let (code, out) = call(&client, "POST", "/api/v1/namespaces/default/bindings", Some(nameless), "application/json").await;
    assert_eq!((code, out["reason"].as_str()), (422, Some("Invalid")), "{out}");
    let (code, _) = call(&client, "GET", "/api/v1/namespaces/default/bindings", None, "application/json").await;
    assert_eq!(code, 405);
    c.shutdown().await;
}
