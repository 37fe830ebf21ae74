//! Secrets are encrypted at rest: their values never appear in the replicas' data
//! directories (Raft log, state, snapshots), yet read back correctly through the API.

use std::path::Path;

use base64::Engine;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use keelson_tests::api::ApiCluster;
use keelson_tests::ClusterOptions;
use kube::api::{Api, PostParams};
use serde_json::json;

fn files_containing(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut hits = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(bytes) = std::fs::read(&p) {
                if bytes.windows(needle.len()).any(|w| w == needle) {
                    hits.push(p.display().to_string());
                }
            }
        }
    }
    hits
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn secret_values_are_not_stored_in_plaintext() {
    let c = ApiCluster::start(3, ClusterOptions::default()).await.unwrap();
    let client = c.kube_client(1).await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let value = format!("s3cret-{}", std::process::id());
    let cm_value = format!("visible-{}", std::process::id());
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    let secret: Secret = serde_json::from_value(json!({"metadata": {"name": "db"}, "stringData": {"password": value}, "data": {"user": base64::engine::general_purpose::STANDARD.encode("admin")}})).unwrap();
    loop {
        match secrets.create(&PostParams::default(), &secret).await {
            Ok(_) => break,
            Err(e) => {
                assert!(tokio::time::Instant::now() < deadline, "creating the secret: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        }
    }
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "plain"}, "data": {"v": cm_value}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();

    // Read back through another replica.
    let other: Api<Secret> = Api::namespaced(c.kube_client(2).await.unwrap(), "default");
    let got = other.get("db").await.unwrap();
    let data = got.data.unwrap();
    assert_eq!(data["password"].0, value.as_bytes());
    assert_eq!(data["user"].0, b"admin");
    assert!(got.string_data.is_none(), "stringData is write-only");

    // Make sure everything reached the files, then scan every replica's directory.
    let mut c = c;
    for i in 0..3 {
        c.kill(i).await;
    }
    let dir = c.store.dir().to_path_buf();
    assert!(!files_containing(&dir, cm_value.as_bytes()).is_empty(), "the scan finds stored plaintext (control)");
    let b64 = base64::engine::general_purpose::STANDARD.encode(&value);
    assert_eq!(files_containing(&dir, value.as_bytes()), Vec::<String>::new(), "secret value in plaintext");
    assert_eq!(files_containing(&dir, b64.as_bytes()), Vec::<String>::new(), "secret value in base64");
    c.shutdown().await;
}
