//! The API's limits, each answered with the Kubernetes code and a `Status`: request bodies
//! over 3 MiB (413), objects the store will not hold (over 1.5 MiB once encoded: 413,
//! nothing stored), ConfigMap and Secret data over 1 MiB and annotations over 256 KiB
//! (422), JSON nested too deep (400), header blocks over 1 MiB (431, where 600 KiB is
//! served), and a request that outlives its `timeout` (504), or names one that does not
//! parse (400). The writes go to a follower's API so the store's limit is met where a
//! follower forwards.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use keelson_tests::api::ApiCluster;
use keelson_tests::ClusterOptions;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A request sent as the kube client sends it, answered as is: status and body.
async fn send(client: &kube::Client, method: &str, path: &str, body: Vec<u8>) -> (u16, Value) {
    let req = http::Request::builder().method(method).uri(path).header("content-type", "application/json").body(kube::client::Body::from(body)).unwrap();
    let resp = client.send(req).await.expect("a response");
    let status = resp.status().as_u16();
    let bytes = http_body_util::BodyExt::collect(resp.into_body()).await.map(|b| b.to_bytes()).unwrap_or_default();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

fn assert_status(got: &(u16, Value), code: u16, reason: &str) {
    let (status, body) = got;
    assert_eq!(*status, code, "{body}");
    assert_eq!((body["kind"].as_str(), body["reason"].as_str(), body["code"].as_u64()), (Some("Status"), Some(reason), Some(u64::from(code))), "{body}");
}

fn pod_with_env(name: &str, bytes: usize) -> Vec<u8> {
    serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "busybox", "env": [{"name": "BIG", "value": "x".repeat(bytes)}]}]}}))
    .unwrap()
}

fn configmap(name: &str, data: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})).unwrap()
}

/// The API server of `cluster` whose replica does not lead.
async fn follower(cluster: &ApiCluster) -> usize {
    let leader = cluster.store.leader().await.expect("a leader");
    (leader + 1) % 3
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_objects_data_and_nesting_are_held_to_kubernetes_limits() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cluster = ApiCluster::start(3, ClusterOptions::default()).await.expect("cluster");
    let client = cluster.kube_client(follower(&cluster).await).await.unwrap();
    let pods = "/api/v1/namespaces/default/pods";
    let maps = "/api/v1/namespaces/default/configmaps";

    // The store takes an object of 1.2 MiB, refuses one of 2 MiB and keeps nothing of it.
    assert_eq!(send(&client, "POST", pods, pod_with_env("big", 1200 << 10)).await.0, 201);
    let refused = send(&client, "POST", pods, pod_with_env("huge", 2 << 20)).await;
    assert_status(&refused, 413, "RequestEntityTooLarge");
    assert!(refused.1["message"].as_str().unwrap().contains("too large to store"), "{}", refused.1);
    assert_status(&send(&client, "GET", &format!("{pods}/huge"), Vec::new()).await, 404, "NotFound");
    // An update that would grow an object past the limit is refused the same way (a
    // 2.2 MiB body: under the body limit, over the store's).
    let (_, mut big) = send(&client, "GET", &format!("{pods}/big"), Vec::new()).await;
    big["status"]["message"] = json!("y".repeat(1 << 20));
    let refused = send(&client, "PUT", &format!("{pods}/big/status"), serde_json::to_vec(&big).unwrap()).await;
    assert_status(&refused, 413, "RequestEntityTooLarge");
    assert!(refused.1["message"].as_str().unwrap().contains("too large to store"), "{}", refused.1);

    // A body over 3 MiB is refused before it is decoded, and answered, not cut off: the
    // server reads the rest (here 5 MiB) so the client can finish sending.
    let refused = send(&client, "POST", pods, pod_with_env("body", 8 << 20)).await;
    assert_status(&refused, 413, "RequestEntityTooLarge");
    assert!(refused.1["message"].as_str().unwrap().contains("request body is larger"), "{}", refused.1);

    // ConfigMap data: 1 MiB exactly is taken, a byte more is invalid.
    let half = "x".repeat(512 << 10);
    assert_eq!(send(&client, "POST", maps, configmap("full", json!({"a": half, "b": half}))).await.0, 201);
    let over = send(&client, "POST", maps, configmap("over", json!({"a": half, "b": format!("{half}!")}))).await;
    assert_status(&over, 422, "Invalid");
    assert_eq!(over.1["details"]["causes"][0]["reason"], "FieldValueTooLong", "{}", over.1);
    // Annotations over 256 KiB.
    let annotated = serde_json::to_vec(&json!({"metadata": {"name": "annotated", "annotations": {"note": "n".repeat(256 << 10)}}})).unwrap();
    let over = send(&client, "POST", maps, annotated).await;
    assert_status(&over, 422, "Invalid");
    assert_eq!(over.1["details"]["causes"][0]["field"], "metadata.annotations", "{}", over.1);

    // JSON nested deeper than the decoder goes.
    let deep = format!("{{\"metadata\": {{\"name\": \"deep\"}}, \"data\": {{\"a\": {}1{}}}}}", "[".repeat(500), "]".repeat(500));
    assert_status(&send(&client, "POST", maps, deep.into_bytes()).await, 400, "BadRequest");

    // Nothing of the refused objects was stored.
    let (_, list) = send(&client, "GET", maps, Vec::new()).await;
    let names: Vec<&str> = list["items"].as_array().unwrap().iter().filter_map(|i| i["metadata"]["name"].as_str()).collect();
    assert!(names.contains(&"full") && !names.iter().any(|n| ["over", "annotated", "deep"].contains(n)), "{names:?}");
    cluster.shutdown().await;
}

/// A TLS connection to `addr` with the credentials of `config`.
async fn connect(config: &kube::Config, addr: SocketAddr) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let tls = Arc::new(kube::client::ConfigExt::rustls_client_config(config).expect("TLS config"));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let server_name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
    tokio_rustls::TlsConnector::from(tls).connect(server_name, tcp).await.expect("TLS handshake")
}

/// Reads from `conn` until `until` holds of what came (or the connection ends): the text.
async fn read_until(conn: &mut tokio_rustls::client::TlsStream<tokio::net::TcpStream>, until: impl Fn(&str) -> bool) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    let read = async {
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
            if until(&String::from_utf8_lossy(&got)) {
                break;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), read).await.expect("an answer within 30 s");
    String::from_utf8_lossy(&got).into_owned()
}

/// One GET with a header `X-Filler` of `filler` bytes: the status line's code, or None
/// when the server ends the connection without one.
async fn get_with_header(config: &kube::Config, addr: SocketAddr, filler: usize) -> Option<u16> {
    let mut conn = connect(config, addr).await;
    let head = format!("GET /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: {addr}\r\nX-Filler: {}\r\nConnection: close\r\n\r\n", "f".repeat(filler));
    let _ = conn.write_all(head.as_bytes()).await;
    let _ = conn.flush().await;
    let text = read_until(&mut conn, |t| t.contains("\r\n\r\n")).await;
    text.strip_prefix("HTTP/1.1 ").and_then(|t| t.get(..3)).and_then(|c| c.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_and_request_timeouts() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cluster = ApiCluster::start(1, ClusterOptions::default()).await.expect("cluster");
    let addr = cluster.api_addr(0);
    let (client, config) = cluster.kube_config_as(addr, "admin", &["system:masters"]).await.unwrap();

    // Headers: 600 KiB are served (as Go's 1 MiB limit serves them), 2 MiB are not.
    assert_eq!(get_with_header(&config, addr, 600 << 10).await, Some(200));
    let refused = get_with_header(&config, addr, 2 << 20).await;
    assert!(matches!(refused, Some(431) | None), "a 2 MiB header block was answered {refused:?}");
    assert_eq!(get_with_header(&config, addr, 10).await, Some(200), "the server serves on after refusing one");

    // A create whose body stops halfway outlives its one-second timeout: 504 and a Status.
    let mut slow = connect(&config, addr).await;
    let body = configmap("slow", json!({"k": "v"}));
    let head = format!("POST /api/v1/namespaces/default/configmaps?timeout=1s HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n", body.len());
    slow.write_all(head.as_bytes()).await.unwrap();
    slow.write_all(&body[..body.len() / 2]).await.unwrap();
    slow.flush().await.unwrap();
    let answer = read_until(&mut slow, |t| t.contains("\"code\":504")).await;
    assert!(answer.starts_with("HTTP/1.1 504"), "{answer}");
    assert!(answer.contains("\"reason\":\"Timeout\"") && answer.contains("request did not complete within requested timeout"), "{answer}");
    drop(slow);

    // A timeout that does not parse is a bad request; one that does is honoured.
    let maps = "/api/v1/namespaces/default/configmaps";
    let bad = send(&client, "GET", &format!("{maps}?timeout=soon"), Vec::new()).await;
    assert_status(&bad, 400, "BadRequest");
    assert_eq!(send(&client, "POST", &format!("{maps}?timeout=30s"), configmap("quick", json!({"k": "v"}))).await.0, 201);
    cluster.shutdown().await;
}
