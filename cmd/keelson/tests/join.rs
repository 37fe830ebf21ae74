//! Joining with a token, real processes: a wrong token, a token for another CA and an
//! expired token are refused; a valid one makes the server a member.

use std::path::{Path, PathBuf};
use std::time::Duration;

use keelson_client::StoreClient;

mod cluster_support;
use cluster_support::spawn_server as spawn;

/// Runs a joining server that must fail; returns its log.
fn join_refused(dir: &Path, name: &str, url: &str, token: &str) -> String {
    let mut s = spawn(dir, name, &["--join", url, "--token", token]);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(st) = s.child.try_wait().unwrap() {
            break st;
        }
        assert!(std::time::Instant::now() < deadline, "{name} with a bad token did not give up");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(!status.success(), "{name} must fail");
    std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap()
}

async fn wait_for(path: &Path) -> String {
    for _ in 0..300 {
        if let Ok(t) = std::fs::read_to_string(path) {
            if !t.trim().is_empty() {
                return t.trim().to_string();
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{} never appeared", path.display());
}

async fn admin_client(pki: &Path) -> kube::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kc = kube::config::Kubeconfig::read_from(pki.join("admin.kubeconfig")).unwrap();
    kube::Client::try_from(kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_with_tokens() {
    let tmp = tempfile::tempdir().unwrap();
    let dir: PathBuf = tmp.path().to_path_buf();
    let first = spawn(&dir, "s1", &["--cluster-init"]);
    let pki = dir.join("s1").join("pki");
    let token = wait_for(&pki.join("server-token")).await;
    // The admin kubeconfig written by --cluster-init points at the API port.
    let kc = std::fs::read_to_string(pki.join("admin.kubeconfig")).unwrap();
    assert!(kc.contains(&first.api), "admin kubeconfig names the API address");
    let url = format!("https://{}", first.api);

    // The API must be up and the initial token registered before anyone can join.
    let admin = admin_client(&pki).await;
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> = kube::Api::namespaced(admin, "kube-system");
    let id = token.split("::").nth(1).unwrap().split('.').next().unwrap().to_string();
    for _ in 0..300 {
        if secrets.get(&format!("bootstrap-token-{id}")).await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A wrong secret.
    let (hash_part, cred) = token.split_once("::").unwrap();
    let wrong = format!("{hash_part}::{id}.zzzzzzzzzzzzzzzz");
    let log = join_refused(&dir, "wrong", &url, &wrong);
    assert!(log.contains("wrong join token"), "{log}");
    // A token for another cluster's CA.
    let other_ca = format!("K10{}::{cred}", "0".repeat(64));
    let log = join_refused(&dir, "otherca", &url, &other_ca);
    assert!(log.contains("does not match the token"), "{log}");
    // An expired token.
    let expired: k8s_openapi::api::core::v1::Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "bootstrap-token-exp123"}, "type": "bootstrap.kubernetes.io/token",
        "stringData": {"token-id": "exp123", "token-secret": "0123456789abcdef", "expiration": "2020-01-01T00:00:00Z", "usage-bootstrap-server": "true"}
    }))
    .unwrap();
    secrets.create(&Default::default(), &expired).await.unwrap();
    let log = join_refused(&dir, "expired", &url, &format!("{hash_part}::exp123.0123456789abcdef"));
    assert!(log.contains("expired"), "{log}");
    // None of them became a member; the valid token works.
    let tls = keelson_client::tls::admin_tls(&pki).unwrap().expect("admin certificate from --cluster-init");
    let client = StoreClient::with_tls(&[first.store.as_str()], &tls).unwrap();
    // The store/Raft port of a real server refuses peers without a cluster certificate.
    let plain = StoreClient::new(&[first.store.as_str()]).unwrap();
    assert!(plain.member_list().await.is_err(), "plaintext is refused");
    let stranger_ca = keelson_pki::ClusterCa::generate("other").unwrap();
    let stranger = stranger_ca.issue_client("intruder", &[]).unwrap();
    let foreign = keelson_client::PeerTls::new(tls.ca_pem.clone(), stranger.cert_pem, stranger.key_pem);
    assert!(StoreClient::with_tls(&[first.store.as_str()], &foreign).unwrap().member_list().await.is_err(), "a certificate from another CA is refused");
    assert_eq!(client.member_list().await.unwrap().members.len(), 1);
    let second = spawn(&dir, "s2", &["--join", &url, "--token", &token]);
    let mut voters = 0;
    for _ in 0..300 {
        if let Ok(l) = client.member_list().await {
            voters = l.members.iter().filter(|m| m.voter).count();
            if voters == 2 {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(voters, 2, "the server with a valid token joined");
    // It received the cluster's material: same CA, and it serves the API with it.
    let s2_pki = dir.join("s2").join("pki");
    assert_eq!(std::fs::read(s2_pki.join("ca.crt")).unwrap(), std::fs::read(pki.join("ca.crt")).unwrap());
    assert_eq!(std::fs::read(s2_pki.join("secrets.key")).unwrap(), std::fs::read(pki.join("secrets.key")).unwrap());

    // A node joins with a token too: it gets a node identity, which may write its own
    // Node object and nothing of another node's.
    let node = keelson_apiserver::join_client::join_node(&url, &keelson_pki::JoinToken::parse(&token).unwrap(), "worker-1").await.unwrap();
    let (_, cn) = keelson_pki::certificate_expiry(&node.client_cert).unwrap();
    assert_eq!(cn, "system:node:worker-1");
    let node_cert = keelson_pki::IssuedCert { cert_pem: node.client_cert, key_pem: node.client_key };
    let kc = keelson_pki::kubeconfig(&[keelson_pki::KubeconfigContext { name: "n".into(), server: url.clone() }], &node.ca_cert, "node", &node_cert);
    let cfg = kube::Config::from_custom_kubeconfig(kube::config::Kubeconfig::from_yaml(&kc).unwrap(), &Default::default()).await.unwrap();
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(kube::Client::try_from(cfg).unwrap());
    let mk = |n: &str| serde_json::from_value::<k8s_openapi::api::core::v1::Node>(serde_json::json!({"metadata": {"name": n}})).unwrap();
    nodes.create(&Default::default(), &mk("worker-1")).await.expect("a node registers itself");
    match nodes.create(&Default::default(), &mk("worker-2")).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 403, "{s:?}"),
        other => panic!("a node may not create another node: {other:?}"),
    }

    // Mutating requests are in the audit log, with who made them and the outcome.
    let audit = std::fs::read_to_string(dir.join("s1").join("audit.log")).unwrap();
    let entries: Vec<serde_json::Value> = audit.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(entries.iter().any(|e| e["user"] == "kubernetes-admin" && e["verb"] == "create" && e["resource"] == "secrets" && e["name"].is_null() && e["code"] == 201), "admin's secret creation audited");
    assert!(entries.iter().any(|e| e["user"] == "system:node:worker-1" && e["resource"] == "nodes" && e["code"] == 403), "the refused node write audited");
    drop(second);
    drop(first);
}
