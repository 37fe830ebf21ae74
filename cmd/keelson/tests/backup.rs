//! Backup and restore with real processes: `keelson backup` of a running 3-server
//! cluster; a damaged copy and a used data directory refused by `keelson restore`; the
//! good backup restored into a new cluster (its own CA) whose first server serves, at
//! once, every object written before the backup and none written after, Secrets
//! included; a second server joining the restored cluster gets the restored data; and
//! the servers' scheduled backups keep only the newest ones.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, PostParams};

mod cluster_support;
use cluster_support::{eventually, spawn_server, LoneServer};

fn spawn(dir: &Path, name: &str, args: &[&str]) -> LoneServer {
    let mut all: Vec<&str> = cluster_support::SHORT_ELECTIONS.to_vec();
    all.extend_from_slice(args);
    spawn_server(dir, name, &all)
}

fn keelson(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_keelson")).args(args).output().unwrap()
}

fn text(o: &Output) -> String {
    format!("exit {:?}\nstdout: {}\nstderr: {}", o.status.code(), String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// An admin client of the API at `api`, from a cluster's admin kubeconfig.
async fn admin(pki: &Path, api: &str) -> kube::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let path = pki.join("admin.kubeconfig");
    let mut kc = kube::config::Kubeconfig::read_from(&path);
    for _ in 0..600 {
        if kc.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        kc = kube::config::Kubeconfig::read_from(&path);
    }
    let kc = kc.unwrap();
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap();
    cfg.cluster_url = format!("https://{api}").parse().unwrap();
    kube::Client::try_from(cfg).unwrap()
}

fn config_map(name: &str, value: &str) -> ConfigMap {
    serde_json::from_value(serde_json::json!({"metadata": {"name": name}, "data": {"value": value}})).unwrap()
}

fn value(cm: &ConfigMap) -> String {
    cm.data.as_ref().and_then(|d| d.get("value")).cloned().unwrap_or_default()
}

fn backups_of(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir).map(|d| d.flatten().filter_map(|e| e.file_name().into_string().ok()).collect()).unwrap_or_default();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_restores_into_a_new_cluster_that_joining_servers_catch_up_with() {
    let tmp = tempfile::tempdir().unwrap();
    let dir: PathBuf = tmp.path().to_path_buf();
    let old_dir = dir.join("old");
    let cluster = cluster_support::start_short_elections_with(&old_dir, &["--backup-every", "1s", "--backup-retention", "2"]).await;
    let client = cluster_support::client(&cluster, "keelson-1").await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let secrets: Api<Secret> = Api::namespaced(client, "default");
    let pp = PostParams::default();
    maps.create(&pp, &config_map("before", "kept")).await.unwrap();
    let secret: Secret = serde_json::from_value(serde_json::json!({"metadata": {"name": "sealed"}, "stringData": {"password": "hunter2"}})).unwrap();
    secrets.create(&pp, &secret).await.unwrap();

    // The backup, through whichever server answers first.
    let out = dir.join("cluster.backup");
    let o = keelson(&["backup", "--cluster-dir", &old_dir.display().to_string(), &out.display().to_string()]);
    assert!(o.status.success(), "keelson backup: {}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("sha256"), "{}", text(&o));
    assert!(!dir.join("cluster.backup.partial").exists(), "no partial file is left");
    maps.create(&pp, &config_map("after", "not in the backup")).await.unwrap();

    // Scheduled backups: every server saves its own, and keeps the newest two.
    let first = cluster.manifest().servers().next().unwrap().clone();
    let scheduled = first.data_dir.join("backups");
    let metrics = first.metrics_addr.clone();
    eventually("server 1 saved at least three scheduled backups", Duration::from_secs(60), || {
        let metrics = metrics.clone();
        async move {
            let page = cluster_support::metrics_page(&metrics).await;
            let saved: u64 = page.lines().find_map(|l| l.strip_prefix("keelson_backups_saved_total ")).and_then(|v| v.trim().parse().ok()).unwrap_or(0);
            (saved >= 3).then_some(()).ok_or(format!("{saved} saved"))
        }
    })
    .await;
    let kept = backups_of(&scheduled);
    let ours: Vec<&String> = kept.iter().filter(|n| n.starts_with(&format!("{}-", first.name)) && n.ends_with(".backup")).collect();
    assert!(!ours.is_empty() && ours.len() <= 2, "retention keeps at most 2: {kept:?}");
    let old_pki = cluster.pki_dir();
    cluster.stop(Duration::from_secs(10)).await.unwrap();

    // A damaged copy is refused, and leaves nothing behind.
    let secrets_key = old_pki.join("secrets.key").display().to_string();
    let mut bytes = std::fs::read(&out).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x20;
    let damaged = dir.join("damaged.backup");
    std::fs::write(&damaged, &bytes).unwrap();
    let spoiled = dir.join("spoiled");
    let o = keelson(&["restore", &damaged.display().to_string(), "--data-dir", &spoiled.display().to_string(), "--secrets-key", &secrets_key]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("damaged"), "a damaged backup: {}", text(&o));
    assert!(!spoiled.join("db").exists(), "no store is left from a refused backup");

    // The good one, into the new cluster's first server.
    let new_dir = dir.join("new");
    let data = new_dir.join("s1");
    let o = keelson(&["restore", &out.display().to_string(), "--data-dir", &data.display().to_string(), "--secrets-key", &secrets_key]);
    assert!(o.status.success(), "keelson restore: {}", text(&o));
    let o = keelson(&["restore", &out.display().to_string(), "--data-dir", &data.display().to_string(), "--secrets-key", &secrets_key]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("already holds"), "a used data directory: {}", text(&o));
    let s1 = spawn(&new_dir, "s1", &["--cluster-init"]);
    let pki = data.join("pki");
    let new_maps: Api<ConfigMap> = Api::namespaced(admin(&pki, &s1.api).await, "default");
    let restored = eventually("the restored server serves the ConfigMap written before the backup", Duration::from_secs(60), || {
        let new_maps = new_maps.clone();
        async move { new_maps.get("before").await.map_err(|e| e.to_string()) }
    })
    .await;
    assert_eq!(value(&restored), "kept");
    assert_ne!(std::fs::read(pki.join("ca.crt")).unwrap(), std::fs::read(old_pki.join("ca.crt")).unwrap(), "a new cluster identity");
    match new_maps.get("after").await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 404, "{s:?}"),
        other => panic!("a ConfigMap written after the backup must not be restored: {other:?}"),
    }
    let new_secrets: Api<Secret> = Api::namespaced(admin(&pki, &s1.api).await, "default");
    let sealed = new_secrets.get("sealed").await.expect("the Secret is readable with the old cluster's key");
    assert_eq!(sealed.data.unwrap()["password"].0, b"hunter2");
    new_maps.create(&pp, &config_map("later", "written in the new cluster")).await.unwrap();

    // A server joining the restored cluster gets the restored state, not only the new log.
    let token = std::fs::read_to_string(pki.join("server-token")).unwrap();
    let s2 = spawn(&new_dir, "s2", &["--join", &format!("https://{}", s1.api), "--token", token.trim()]);
    let joined: Api<ConfigMap> = Api::namespaced(admin(&pki, &s2.api).await, "default");
    for name in ["before", "later"] {
        let joined = joined.clone();
        eventually(&format!("the joined server serves {name}"), Duration::from_secs(90), move || {
            let joined = joined.clone();
            async move { joined.get(name).await.map_err(|e| e.to_string()) }
        })
        .await;
    }
    let log = std::fs::read_to_string(new_dir.join("s1.log")).unwrap();
    assert!(log.contains("restored store sealed"), "the first start sealed the restored store:\n{log}");
    drop(s2);
    drop(s1);
}
