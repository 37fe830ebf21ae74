//! Authentication and authorization through the API: 401 without credentials, RBAC
//! grants and denials (Role, ClusterRole, the aggregated default roles), ServiceAccount
//! tokens, impersonation, access reviews and node restriction.

use std::time::Duration;

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::authorization::v1::SelfSubjectAccessReview;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use keelson_tests::api::ApiCluster;
use keelson_tests::ClusterOptions;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde::de::DeserializeOwned;
use serde_json::json;

fn obj<T: DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).unwrap()
}

fn code<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> u16 {
    match r {
        Ok(_) => 200,
        Err(kube::Error::Api(s)) => s.code,
        Err(e) => panic!("not an API error: {e}"),
    }
}

fn message<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> String {
    match r {
        Err(kube::Error::Api(s)) => s.message,
        other => panic!("expected an API error, got {other:?}"),
    }
}

async fn cluster() -> ApiCluster {
    let dir = tempfile::tempdir().unwrap().keep();
    let tokens = dir.join("tokens.csv");
    std::fs::write(&tokens, "alice-token,alice,1001\nbob-token,bob,1002,\"qa\"\ncarol-token,carol,1003\n").unwrap();
    let c = ApiCluster::start_with_tokens(3, ClusterOptions::default(), Some(tokens)).await.unwrap();
    // Wait for the built-in namespaces and default roles.
    let admin = c.kube_client(0).await.unwrap();
    let bindings: Api<ClusterRoleBinding> = Api::all(admin);
    let want = keelson_rbac_binding_count();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while bindings.list(&ListParams::default()).await.map(|l| l.items.len()).unwrap_or(0) < want {
        assert!(tokio::time::Instant::now() < deadline, "default roles never appeared");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn requests_without_valid_credentials_get_401() {
    let c = cluster().await;
    // No client certificate, no token.
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile_certs(c.ca_pem()) {
        roots.add(cert).unwrap();
    }
    let cfg = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let (status, body) = raw_get(cfg, &c.api_addr(0).to_string(), "/api/v1/namespaces/default/pods", None).await;
    assert_eq!(status, 401, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!((v["kind"].as_str(), v["reason"].as_str()), (Some("Status"), Some("Unauthorized")));
    let cfg2 = client_cfg(c.ca_pem());
    assert_eq!(raw_get(cfg2.clone(), &c.api_addr(1).to_string(), "/api/v1/pods", Some("not-a-token")).await.0, 401);
    assert_eq!(raw_get(cfg2.clone(), &c.api_addr(1).to_string(), "/api/v1/pods", Some("alice-token")).await.0, 403, "a known token authenticates");
    assert_eq!(raw_get(cfg2, &c.api_addr(2).to_string(), "/livez", None).await.0, 200, "health needs no credentials");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn token_guessing_locks_the_source_out_and_denials_are_audited() {
    let dir = tempfile::tempdir().unwrap().keep();
    let tokens = dir.join("tokens.csv");
    std::fs::write(&tokens, "alice-token,alice,1001\n").unwrap();
    let audit = dir.join("audit");
    let api = keelson_tests::api::ApiOptions { token_file: Some(tokens), audit_dir: Some(audit.clone()), ..Default::default() };
    let c = ApiCluster::start_with(3, ClusterOptions::default(), api).await.unwrap();
    let cfg = client_cfg(c.ca_pem());
    let first = c.api_addr(0).to_string();
    // Alice authenticates, and may not list Secrets.
    assert_eq!(raw_get(cfg.clone(), &first, "/api/v1/secrets", Some("alice-token")).await.0, 403);
    // Ten guesses are told 401; the eleventh is not even looked at.
    let burst = keelson_apiserver::auth::lockout::AuthFailureLimits::default().burst;
    for i in 0..burst {
        assert_eq!(raw_get(cfg.clone(), &first, "/api/v1/pods", Some(&format!("guess-{i}"))).await.0, 401, "guess {i}");
    }
    let (status, head, body) = raw_response(cfg.clone(), &first, "/api/v1/pods", Some("guess-last")).await;
    assert_eq!(status, 429, "{head}\n{body}");
    let retry_after: u64 = head
        .lines()
        .find_map(|l| l.strip_prefix("retry-after: ").or_else(|| l.strip_prefix("Retry-After: ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no Retry-After in\n{head}"));
    assert!((1..=6).contains(&retry_after), "{retry_after}");
    let st: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(st["reason"], "TooManyRequests", "{st}");
    assert!(st["message"].as_str().unwrap().contains("too many failed authentication attempts from 127.0.0.1"), "{st}");
    // While locked out, even a valid token from that source is refused, and so is no
    // credential at all: guessing stops paying.
    assert_eq!(raw_get(cfg.clone(), &first, "/api/v1/secrets", Some("alice-token")).await.0, 429);
    assert_eq!(raw_get(cfg.clone(), &first, "/api/v1/pods", None).await.0, 429);
    assert_eq!(raw_get(cfg.clone(), &first, "/livez", None).await.0, 200, "health stays public");
    // Client certificates are never limited; other servers count their own failures.
    let admin = c.kube_client(0).await.unwrap();
    Api::<ServiceAccount>::namespaced(admin, "default").list(&ListParams::default()).await.expect("the admin's certificate still works");
    assert_eq!(raw_get(cfg, &c.api_addr(1).to_string(), "/api/v1/secrets", Some("alice-token")).await.0, 403);

    // The first server's audit log has every denial, of any verb: Alice's 403 under
    // her name, the guesses' 401s and the lockout's 429s as system:anonymous.
    let log = std::fs::read_to_string(audit.join("audit-0.log")).unwrap();
    let entries: Vec<serde_json::Value> = log.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let count = |code: u64, user: &str| entries.iter().filter(|e| e["code"] == code && e["user"] == user).count();
    assert!(entries.iter().any(|e| e["code"] == 403 && e["user"] == "alice" && e["verb"] == "list" && e["resource"] == "secrets" && e["source"].as_str().is_some_and(|s| s.starts_with("127.0.0.1:"))), "{log}");
    assert_eq!(count(401, "system:anonymous"), burst as usize, "{log}");
    assert_eq!(count(429, "system:anonymous"), 3, "{log}");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rbac_grants_and_denials() {
    let c = cluster().await;
    let admin = c.kube_client(0).await.unwrap();
    let alice = c.kube_client_with_token(1, "alice-token").await.unwrap();
    let bob = c.kube_client_with_token(2, "bob-token").await.unwrap();
    let carol = c.kube_client_with_token(1, "carol-token").await.unwrap();
    let pp = PostParams::default();

    // Nothing is granted yet: exact Kubernetes 403 text.
    let alice_pods: Api<Pod> = Api::namespaced(alice.clone(), "default");
    assert_eq!(
        message(alice_pods.list(&ListParams::default()).await),
        "pods is forbidden: User \"alice\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
    );

    // A Role + RoleBinding: alice may read pods in default only.
    Api::<Role>::namespaced(admin.clone(), "default")
        .create(&pp, &obj(json!({"metadata": {"name": "pod-reader"}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]})))
        .await
        .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), "default")
        .create(&pp, &obj(json!({"metadata": {"name": "alice-reads-pods"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"}, "subjects": [{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}]})))
        .await
        .unwrap();
    // The grant is visible at once, through another replica than the one that wrote it.
    assert_eq!(code(alice_pods.list(&ListParams::default()).await), 200);
    assert_eq!(code(Api::<Pod>::namespaced(alice.clone(), "kube-system").list(&ListParams::default()).await), 403);
    let pod: Pod = obj(json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}));
    assert_eq!(code(alice_pods.create(&pp, &pod).await), 403);
    assert_eq!(code(Api::<Secret>::namespaced(alice.clone(), "default").list(&ListParams::default()).await), 403);

    // A ClusterRole + ClusterRoleBinding to a group: bob (group qa) may list nodes.
    Api::<ClusterRole>::all(admin.clone())
        .create(&pp, &obj(json!({"metadata": {"name": "node-lister"}, "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}]})))
        .await
        .unwrap();
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&pp, &obj(json!({"metadata": {"name": "qa-lists-nodes"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "node-lister"}, "subjects": [{"kind": "Group", "name": "qa", "apiGroup": "rbac.authorization.k8s.io"}]})))
        .await
        .unwrap();
    let bob_nodes: Api<Node> = Api::all(bob.clone());
    assert_eq!(code(bob_nodes.list(&ListParams::default()).await), 200);
    assert_eq!(
        message(bob_nodes.delete("x", &Default::default()).await),
        "nodes \"x\" is forbidden: User \"bob\" cannot delete resource \"nodes\" in API group \"\" at the cluster scope"
    );

    // The aggregated default roles: view (no secrets), then aggregation adds to it.
    Api::<RoleBinding>::namespaced(admin.clone(), "default")
        .create(&pp, &obj(json!({"metadata": {"name": "carol-view"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}, "subjects": [{"kind": "User", "name": "carol"}]})))
        .await
        .unwrap();
    let carol_cms: Api<ConfigMap> = Api::namespaced(carol.clone(), "default");
    assert_eq!(code(carol_cms.list(&ListParams::default()).await), 200, "view reads configmaps");
    assert_eq!(code(carol_cms.create(&pp, &obj(json!({"metadata": {"name": "x"}}))).await), 403, "view does not write");
    let carol_secrets: Api<Secret> = Api::namespaced(carol.clone(), "default");
    assert_eq!(code(carol_secrets.list(&ListParams::default()).await), 403, "view does not read secrets");
    Api::<ClusterRole>::all(admin.clone())
        .create(&pp, &obj(json!({"metadata": {"name": "secrets-viewer", "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}}, "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}]})))
        .await
        .unwrap();
    assert_eq!(code(carol_secrets.list(&ListParams::default()).await), 200, "aggregated into view");
    // edit writes workloads but not RBAC.
    Api::<RoleBinding>::namespaced(admin.clone(), "default")
        .create(&pp, &obj(json!({"metadata": {"name": "carol-edit"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"}, "subjects": [{"kind": "User", "name": "carol"}]})))
        .await
        .unwrap();
    assert_eq!(code(carol_cms.create(&pp, &obj(json!({"metadata": {"name": "x"}}))).await), 200);
    assert_eq!(code(Api::<RoleBinding>::namespaced(carol.clone(), "default").create(&pp, &obj(json!({"metadata": {"name": "escalate"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"}, "subjects": [{"kind": "User", "name": "carol"}]}))).await), 403);

    // SelfSubjectAccessReview (kubectl auth can-i).
    let ssar: Api<SelfSubjectAccessReview> = Api::all(alice.clone());
    let ask = |verb: &str, resource: &str| obj::<SelfSubjectAccessReview>(json!({"spec": {"resourceAttributes": {"namespace": "default", "verb": verb, "resource": resource}}}));
    assert!(ssar.create(&pp, &ask("list", "pods")).await.unwrap().status.unwrap().allowed);
    assert!(!ssar.create(&pp, &ask("delete", "pods")).await.unwrap().status.unwrap().allowed);

    // Impersonation: the admin may act as alice; alice may not act as bob.
    let mut as_alice = kube::Config::from_custom_kubeconfig(kube::config::Kubeconfig::from_yaml(&c.kubeconfig(&format!("https://{}", c.api_addr(0)))).unwrap(), &Default::default()).await.unwrap();
    as_alice.auth_info.impersonate = Some("alice".into());
    let as_alice = kube::Client::try_from(as_alice).unwrap();
    assert_eq!(code(Api::<Pod>::namespaced(as_alice.clone(), "default").list(&ListParams::default()).await), 200);
    assert_eq!(code(Api::<Secret>::namespaced(as_alice, "default").list(&ListParams::default()).await), 403);
    let mut alice_as_bob = kube::Config::from_custom_kubeconfig(kube::config::Kubeconfig::from_yaml(&c.kubeconfig(&format!("https://{}", c.api_addr(0)))).unwrap(), &Default::default()).await.unwrap();
    alice_as_bob.auth_info.client_certificate_data = None;
    alice_as_bob.auth_info.client_key_data = None;
    alice_as_bob.auth_info.token = Some("alice-token".to_string().into());
    alice_as_bob.auth_info.impersonate = Some("bob".into());
    let alice_as_bob = kube::Client::try_from(alice_as_bob).unwrap();
    let m = message(Api::<Node>::all(alice_as_bob).list(&ListParams::default()).await);
    assert!(m.contains("cannot impersonate resource \"users\""), "{m}");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn service_account_tokens() {
    let c = cluster().await;
    let admin = c.kube_client(0).await.unwrap();
    let pp = PostParams::default();
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), "default");
    sas.create(&pp, &obj(json!({"metadata": {"name": "build"}}))).await.unwrap();
    let tr = sas.create_token_request("build", &pp, &obj(json!({"spec": {"expirationSeconds": 3600}}))).await.unwrap();
    let token = tr.status.unwrap().token;
    let sa_client = c.kube_client_with_token(2, &token).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(sa_client.clone(), "default");
    assert_eq!(
        message(pods.list(&ListParams::default()).await),
        "pods is forbidden: User \"system:serviceaccount:default:build\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
    );
    Api::<RoleBinding>::namespaced(admin.clone(), "default")
        .create(&pp, &obj(json!({"metadata": {"name": "build-view"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}, "subjects": [{"kind": "ServiceAccount", "name": "build", "namespace": "default"}]})))
        .await
        .unwrap();
    assert_eq!(code(pods.list(&ListParams::default()).await), 200);
    // A token signed by the cluster but altered is rejected; so is the token of a
    // deleted ServiceAccount.
    let mut forged = token.clone();
    forged.pop();
    forged.push(if token.ends_with('A') { 'B' } else { 'A' });
    assert_eq!(code(Api::<Pod>::namespaced(c.kube_client_with_token(1, &forged).await.unwrap(), "default").list(&ListParams::default()).await), 401);
    sas.delete("build", &Default::default()).await.unwrap();
    assert_eq!(code(pods.list(&ListParams::default()).await), 401);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_may_only_touch_its_own_objects() {
    let c = cluster().await;
    let admin = c.kube_client(0).await.unwrap();
    let pp = PostParams::default();
    let n1 = c.kube_client_as(1, "system:node:n1", &["system:nodes"]).await.unwrap();
    let nodes: Api<Node> = Api::all(n1.clone());
    assert_eq!(code(nodes.create(&pp, &obj(json!({"metadata": {"name": "n1"}}))).await), 200);
    let m = message(nodes.create(&pp, &obj(json!({"metadata": {"name": "n2"}}))).await);
    assert!(m.contains("n2"), "{m}");
    Api::<Node>::all(admin.clone()).create(&pp, &obj(json!({"metadata": {"name": "n2"}}))).await.unwrap();
    let status = Patch::Merge(json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}));
    assert_eq!(code(nodes.patch_status("n1", &PatchParams::default(), &status).await), 200);
    assert_eq!(code(nodes.patch_status("n2", &PatchParams::default(), &status).await), 403);
    // Pods: status of pods bound to itself only.
    let admin_pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    for (name, node) in [("on-n1", "n1"), ("on-n2", "n2")] {
        admin_pods.create(&pp, &obj(json!({"metadata": {"name": name}, "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}}))).await.unwrap();
    }
    let pods: Api<Pod> = Api::namespaced(n1.clone(), "default");
    let running = Patch::Merge(json!({"status": {"phase": "Running"}}));
    assert_eq!(code(pods.patch_status("on-n1", &PatchParams::default(), &running).await), 200);
    assert_eq!(code(pods.patch_status("on-n2", &PatchParams::default(), &running).await), 403);
    // Leases: only its own heartbeat lease.
    let leases: Api<Lease> = Api::namespaced(n1.clone(), "kube-node-lease");
    assert_eq!(code(leases.create(&pp, &obj(json!({"metadata": {"name": "n1"}, "spec": {"holderIdentity": "n1"}}))).await), 200);
    assert_eq!(code(leases.create(&pp, &obj(json!({"metadata": {"name": "n2"}, "spec": {"holderIdentity": "n2"}}))).await), 403);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_group_of_a_client_certificate_counts() {
    let c = cluster().await;
    let admin = c.kube_client(0).await.unwrap();
    let pp = PostParams::default();
    // dave's certificate names two groups; only the second one is bound to anything.
    let dave = c.kube_client_as(1, "dave", &["dev", "auditors"]).await.unwrap();
    let dave_cms: Api<ConfigMap> = Api::namespaced(dave.clone(), "default");
    let dave_nodes: Api<Node> = Api::all(dave.clone());
    assert_eq!(code(dave_cms.list(&ListParams::default()).await), 403, "nothing granted yet");
    assert_eq!(code(dave_nodes.list(&ListParams::default()).await), 403, "nothing granted yet");

    Api::<Role>::namespaced(admin.clone(), "default")
        .create(&pp, &obj(json!({"metadata": {"name": "cm-reader"}, "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]})))
        .await
        .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), "default")
        .create(&pp, &obj(json!({"metadata": {"name": "auditors-read-cms"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader"}, "subjects": [{"kind": "Group", "name": "auditors", "apiGroup": "rbac.authorization.k8s.io"}]})))
        .await
        .unwrap();
    Api::<ClusterRole>::all(admin.clone())
        .create(&pp, &obj(json!({"metadata": {"name": "node-reader"}, "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}]})))
        .await
        .unwrap();
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&pp, &obj(json!({"metadata": {"name": "auditors-read-nodes"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "node-reader"}, "subjects": [{"kind": "Group", "name": "auditors", "apiGroup": "rbac.authorization.k8s.io"}]})))
        .await
        .unwrap();
    assert_eq!(code(dave_cms.list(&ListParams::default()).await), 200, "RoleBinding to the second group");
    assert_eq!(code(dave_nodes.list(&ListParams::default()).await), 200, "ClusterRoleBinding to the second group");
    assert_eq!(code(dave_cms.create(&pp, &obj(json!({"metadata": {"name": "x"}}))).await), 403, "only what was granted");
    // A certificate with the first group only gets nothing.
    let dev_only = c.kube_client_as(2, "erin", &["dev"]).await.unwrap();
    assert_eq!(code(Api::<ConfigMap>::namespaced(dev_only, "default").list(&ListParams::default()).await), 403);

    // `kubectl auth whoami`: both groups, in the certificate's order.
    let review = Api::<SelfSubjectReview>::all(dave).create(&pp, &SelfSubjectReview::default()).await.unwrap();
    let user = review.status.and_then(|s| s.user_info).expect("userInfo");
    assert_eq!(user.username.as_deref(), Some("dave"));
    let groups = user.groups.unwrap_or_default();
    assert_eq!(groups.iter().filter(|g| *g != "system:authenticated").collect::<Vec<_>>(), ["dev", "auditors"], "{groups:?}");
    c.shutdown().await;
}

/// Bootstrap creates roles first and bindings last: all bindings present = all defaults.
fn keelson_rbac_binding_count() -> usize {
    keelson_rbac::bootstrap_policy().iter().filter(|o| o["kind"] == "ClusterRoleBinding").count()
}

fn rustls_pemfile_certs(pem: &str) -> Vec<rustls::pki_types::CertificateDer<'static>> {
    rustls_pemfile::certs(&mut pem.as_bytes()).map(|c| c.unwrap()).collect()
}

fn client_cfg(ca: &str) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile_certs(ca) {
        roots.add(cert).unwrap();
    }
    rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth()
}

/// One HTTPS/1.1 GET; returns (status, body).
async fn raw_get(cfg: rustls::ClientConfig, addr: &str, path: &str, bearer: Option<&str>) -> (u16, String) {
    let (status, _, body) = raw_response(cfg, addr, path, bearer).await;
    (status, body)
}

/// One HTTPS/1.1 GET; returns (status, headers, body).
async fn raw_response(cfg: rustls::ClientConfig, addr: &str, path: &str, bearer: Option<&str>) -> (u16, String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(cfg)).connect(name, tcp).await.unwrap();
    let auth = bearer.map(|b| format!("Authorization: Bearer {b}\r\n")).unwrap_or_default();
    tls.write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n").as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tls.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (status, head.to_string(), body.to_string())
}
