//! The max-in-flight filter on a real API server: with one mutating slot, a create whose
//! body is still coming holds it; another mutating request gets 429 with Retry-After (a
//! Kubernetes Status), while reads, and the same create by system:masters, are served; the
//! slot comes back when the slow request ends. With priority and fairness: a flooding
//! user takes only what its level may borrow, the nodes and the scheduler keep their seats,
//! and another user of the same level gets its fair share of it.

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

/// Opens a create of ConfigMap `name` whose body stops halfway: the server holds it (or
/// refuses it) until the stream is dropped.
async fn slow_create(config: &kube::Config, addr: std::net::SocketAddr, name: &str) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let tls = Arc::new(kube::client::ConfigExt::rustls_client_config(config).expect("TLS config"));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let server_name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
    let mut slow = tokio_rustls::TlsConnector::from(tls).connect(server_name, tcp).await.expect("TLS handshake");
    let body = serde_json::to_vec(&configmap(name)).unwrap();
    let head = format!("POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n", body.len());
    slow.write_all(head.as_bytes()).await.unwrap();
    slow.write_all(&body[..body.len() / 2]).await.unwrap();
    slow.flush().await.unwrap();
    slow
}

/// The value of one metric line (0 when absent).
fn metric(text: &str, series: &str) -> u64 {
    text.lines().find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse::<f64>().ok())).map_or(0, |v| v as u64)
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
    let slow = slow_create(&config, addr, "slow").await;

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

/// Creates sent by `client` until one is answered; the code of that one.
async fn create_code(client: &kube::Client, name: &str) -> u16 {
    create_raw(client, name).await.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_user_leaves_the_nodes_and_the_scheduler_their_seats_and_other_users_their_share() {
    use keelson_apiserver::inflight::priority::PriorityLevel;
    const SEATS: usize = 50;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cluster = ApiCluster::start_with(1, ClusterOptions::default(), ApiOptions { inflight: Some((0, SEATS)), ..Default::default() }).await.expect("cluster");
    let admin = cluster.kube_client(0).await.unwrap();
    let addr = cluster.api_addr(0);
    let bindings: Api<k8s_openapi::api::rbac::v1::ClusterRoleBinding> = Api::all(admin.clone());
    bindings
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "users"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "User", "name": "flooder", "apiGroup": "rbac.authorization.k8s.io"},
                         {"kind": "User", "name": "bob", "apiGroup": "rbac.authorization.k8s.io"}]})).unwrap())
        .await
        .unwrap();
    let client_as = |user: &'static str, groups: &'static [&'static str]| {
        let cluster = &cluster;
        async move {
            let (_, mut config) = cluster.kube_config_as(addr, user, groups).await.unwrap();
            config.default_retry = false;
            (kube::Client::try_from(config.clone()).unwrap(), config)
        }
    };
    let (flooder, flooder_config) = client_as("flooder", &[]).await;
    let (bob, _) = client_as("bob", &[]).await;
    let (node, _) = client_as("system:node:n1", &["system:nodes"]).await;
    let (scheduler, _) = client_as("system:kube-scheduler", &[]).await;
    for (who, client) in [("flooder", &flooder), ("bob", &bob)] {
        let mut tries = 0;
        while create_code(client, &format!("warm-{who}-{tries}")).await != 201 {
            tries += 1;
            assert!(tries < 100, "{who} never allowed to create");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // Bob's warm-up must be out of the fairness window: the flooder starts alone.
    tokio::time::sleep(keelson_apiserver::inflight::seats::FLOW_WINDOW).await;
    let metrics = || async {
        let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
        admin.request_text(req).await.unwrap_or_default()
    };
    let executing = "apiserver_flowcontrol_current_executing_requests{priority_level=\"global-default\",flow_schema=\"global-default\"}";
    let refused = |reason: &str| format!("apiserver_flowcontrol_rejected_requests_total{{priority_level=\"global-default\",flow_schema=\"global-default\",reason=\"{reason}\"}}");
    // What the flooder's level may hold: the pool less the seats kept for the other levels.
    let ledger = keelson_apiserver::inflight::seats::SeatLedger::new(SEATS);
    let level_cap = SEATS - PriorityLevel::LIMITED.iter().filter(|l| **l != PriorityLevel::GlobalDefault).map(|l| ledger.kept(*l)).sum::<usize>();
    assert!(level_cap < SEATS);

    // The flooder opens slow creates, one at a time, until one is refused.
    let mut held = Vec::new();
    loop {
        let before = metrics().await;
        let (was_held, was_refused) = (metric(&before, executing), metric(&before, &refused("concurrency-limit")));
        let stream = slow_create(&flooder_config, addr, &format!("slow-{}", held.len())).await;
        let mut outcome = None;
        for _ in 0..200 {
            let now = metrics().await;
            if metric(&now, &refused("concurrency-limit")) > was_refused {
                outcome = Some(false);
                break;
            }
            if metric(&now, executing) > was_held {
                outcome = Some(true);
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        match outcome.expect("a slow create neither held nor refused") {
            true => held.push(stream),
            false => break,
        }
        assert!(held.len() <= SEATS, "never refused");
    }
    assert_eq!(held.len(), level_cap, "the flooder holds what its level may borrow");

    // The pool is full for the flooder's level, not for the node's and the scheduler's.
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "n1", "namespace": "kube-node-lease"}, "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40}});
    let req = http::Request::post("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases").header("content-type", "application/json").body(kube::client::Body::from(serde_json::to_vec(&lease).unwrap())).unwrap();
    let resp = node.send(req).await.expect("a response");
    assert_eq!(resp.status().as_u16(), 201, "the node's heartbeat Lease is created while the flooder holds its level");
    let event = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "scheduled.1", "namespace": "default"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"}, "reason": "Scheduled", "message": "bound", "type": "Normal",
        "source": {"component": "default-scheduler"}});
    let req = http::Request::post("/api/v1/namespaces/default/events").header("content-type", "application/json").body(kube::client::Body::from(serde_json::to_vec(&event).unwrap())).unwrap();
    let resp = scheduler.send(req).await.expect("a response");
    assert_eq!(resp.status().as_u16(), 201, "the scheduler's Event is created while the flooder holds its level");
    // Bob shares the flooder's level: nothing is left in it for now.
    assert_eq!(create_code(&bob, "bob-refused").await, 429);

    // The flooder's requests end until it holds its fair share of two flows: its next
    // create is refused for holding its share, and bob's are served.
    let share = level_cap.div_ceil(2);
    held.truncate(share);
    let mut settled = false;
    for _ in 0..200 {
        if metric(&metrics().await, executing) == share as u64 {
            settled = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(settled, "the dropped slow creates never gave their seats back:\n{}", metrics().await);
    assert_eq!(create_code(&bob, "bob-served").await, 201, "bob gets a seat of his share");
    assert_eq!(create_code(&flooder, "flooder-over-share").await, 429, "the flooder holds its share");
    assert_eq!(metric(&metrics().await, &refused("fair-share")), 1, "{}", metrics().await);
    assert_eq!(create_code(&bob, "bob-again").await, 201);
    drop(held);
    cluster.shutdown().await;
}
