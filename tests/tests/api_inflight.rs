//! The max-in-flight filter on a real API server: with one mutating slot, a create whose
//! body is still coming holds it; another mutating request gets 429 with Retry-After (a
//! Kubernetes Status), while reads, and the same create by system:masters, are served; the
//! slot comes back when the slow request ends.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use keelson_tests::api::{ApiCluster, ApiOptions};
use keelson_tests::ClusterOptions;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use tokio::io::AsyncWriteExt;

fn configmap(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap()
}

/// A create sent as the kube client would, answered as is (no retries): status, Retry-After, body.
async fn create_raw(client: &kube::Client, name: &str) -> (u16, Option<String>, serde_json::Value) {
    let body = serde_json::to_vec(&configmap(name)).unwrap();
    let req = http::Request::post("/api/v1/namespaces/default/configmaps").header("content-type", "application/json").body(kube::client::Body::from(body)).unwrap();
    let resp = client.send(req).await.expect("a response");
    let (status, retry) = (resp.status().as_u16(), resp.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_string));
    let bytes = http_body_util::BodyExt::collect(resp.into_body()).await.map(|b| b.to_bytes()).unwrap_or_default();
    (status, retry, serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_mutating_pool_answers_429_with_retry_after_and_spares_reads_and_masters() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cluster = ApiCluster::start_with(1, ClusterOptions::default(), ApiOptions { inflight: Some((0, 1)), ..Default::default() }).await.expect("cluster");
    let admin = cluster.kube_client(0).await.unwrap();
    let addr = cluster.api_addr(0);
    // A user who may create ConfigMaps, outside system:masters.
    let bindings: Api<k8s_openapi::api::rbac::v1::ClusterRoleBinding> = Api::all(admin.clone());
    bindings
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "flooder"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "User", "name": "flooder", "apiGroup": "rbac.authorization.k8s.io"}]})).unwrap())
        .await
        .unwrap();
    // Without kube-rs's own retries of 429: each refusal is seen as it comes.
    let (_, mut config) = cluster.kube_config_as(addr, "flooder", &[]).await.unwrap();
    config.default_retry = false;
    let flooder = kube::Client::try_from(config.clone()).unwrap();
    // The first create after the binding may still be refused by RBAC: wait until it is not.
    let mut tries = 0;
    while create_raw(&flooder, &format!("warm-{tries}")).await.0 != 201 {
        tries += 1;
        assert!(tries < 100, "flooder never allowed to create");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The slow create: its headers, and a body that stops halfway.
    let tls = Arc::new(kube::client::ConfigExt::rustls_client_config(&config).expect("TLS config"));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let server_name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
    let mut slow = tokio_rustls::TlsConnector::from(tls).connect(server_name, tcp).await.expect("TLS handshake");
    let body = serde_json::to_vec(&configmap("slow")).unwrap();
    let head = format!("POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n", body.len());
    slow.write_all(head.as_bytes()).await.unwrap();
    slow.write_all(&body[..body.len() / 2]).await.unwrap();
    slow.flush().await.unwrap();

    // Once the server counts it in flight, another mutating request finds the pool full.
    let metrics = || async {
        let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
        admin.request_text(req).await.unwrap_or_default()
    };
    let mut held = false;
    for _ in 0..100 {
        if metrics().await.lines().any(|l| l == "apiserver_current_inflight_requests{request_kind=\"mutating\"} 1") {
            held = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(held, "the slow create never counted in flight:\n{}", metrics().await);
    let (code, retry_after, status) = create_raw(&flooder, "second").await;
    assert_eq!(code, 429, "{status}");
    assert_eq!(retry_after.as_deref(), Some("1"));
    assert_eq!((status["kind"].as_str(), status["reason"].as_str(), status["code"].as_i64()), (Some("Status"), Some("TooManyRequests"), Some(429)), "{status}");
    assert_eq!(status["message"], "Too many requests, please try again later.");
    // Reads have their own pool; system:masters is never refused.
    let flooder_maps: Api<ConfigMap> = Api::namespaced(flooder.clone(), "default");
    flooder_maps.list(&ListParams::default()).await.expect("a read while the mutating pool is full");
    assert_eq!(create_raw(&admin, "by-admin").await.0, 201, "system:masters passes a full pool");
    assert!(metrics().await.lines().any(|l| l == "apiserver_dropped_requests_total{request_kind=\"mutating\"} 1"), "{}", metrics().await);

    // The slow request ends (its client goes away): the slot is free again.
    drop(slow);
    let mut served = false;
    for i in 0..100 {
        if create_raw(&flooder, &format!("after-{i}")).await.0 == 201 {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(served, "the slot never came back");
    cluster.shutdown().await;
}
