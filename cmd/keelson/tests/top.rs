//! `kubectl top nodes` and `kubectl top pods` end to end: a real node's agent samples its
//! machine and its containers' cgroups (CRI stats), serves `/stats/summary`, and the API
//! server answers `metrics.k8s.io/v1beta1` from it. A pod spinning in a shell loop shows
//! CPU once the agent has two samples of it.
//!
//! Needs root, containerd and the rest of the node tests' tools; skipped loudly otherwise.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::{json, Value};

mod node_support;
use node_support::{node_ready, node_tests_possible, poll, start_server, NodeNet};

fn kubectl(kubeconfig: &Path, cache: &Path, args: &[&str]) -> (bool, String, String) {
    let o = Command::new("kubectl").arg("--kubeconfig").arg(kubeconfig).arg("--cache-dir").arg(cache).args(args).output().expect("kubectl");
    (o.status.success(), String::from_utf8_lossy(&o.stdout).to_string(), String::from_utf8_lossy(&o.stderr).to_string())
}

/// Millicores of a `kubectl top` CPU cell (`123m`, `0m`, `2`).
fn millicores(cell: &str) -> u64 {
    match cell.strip_suffix('m') {
        Some(m) => m.parse().unwrap(),
        None => cell.parse::<u64>().unwrap() * 1000,
    }
}

fn tail(p: &Path, n: usize) -> String {
    let s = std::fs::read_to_string(p).unwrap_or_default();
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_top_shows_a_busy_pod_and_its_node() {
    if !node_tests_possible("kubectl top against a real node") {
        return;
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let tmp = tempfile::tempdir().unwrap();
    let dir: PathBuf = tmp.path().to_path_buf();
    let cache = dir.join("kube-cache");
    let net = NodeNet::create(0);
    let cluster = start_server(&net, &dir).await;
    let _agent = node_support::start_agent(&net, &dir, &cluster.url, &cluster.token, "n1", "10.42.11.0/24", "agent.log");
    node_ready(&cluster.client, "n1").await;
    let kc = cluster.kubeconfig.clone();
    let logs = || format!("server log (tail):\n{}\nagent log (tail):\n{}", tail(&dir.join("server.log"), 30), tail(&dir.join("agent.log"), 40));

    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), "default");
    let img = "keelson.local/busybox:stable";
    let busy: Pod = serde_json::from_value(json!({"metadata": {"name": "busy", "labels": {"app": "busy"}}, "spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "spin", "image": img, "command": ["sh", "-c", "while true; do :; done"]}, {"name": "idle", "image": img, "command": ["sleep", "3600"]}]}}))
    .unwrap();
    let calm: Pod = serde_json::from_value(json!({"metadata": {"name": "calm", "labels": {"app": "calm"}}, "spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "c", "image": img, "command": ["sleep", "3600"]}]}}))
    .unwrap();
    pods.create(&PostParams::default(), &busy).await.unwrap();
    pods.create(&PostParams::default(), &calm).await.unwrap();

    // `kubectl top pods`: NAME CPU(cores) MEMORY(bytes); the busy pod spins a core, once
    // the agent has two samples of it.
    let row = poll("the busy pod's CPU in kubectl top pods", Duration::from_secs(120), || async {
        let (ok, out, _) = kubectl(&kc, &cache, &["top", "pods"]);
        if !ok {
            return None;
        }
        let line = out.lines().find(|l| l.starts_with("busy "))?.to_string();
        let cells: Vec<String> = line.split_whitespace().map(String::from).collect();
        (millicores(&cells[1]) > 0 && out.lines().any(|l| l.starts_with("calm "))).then_some((out, cells))
    })
    .await;
    let (out, cells) = row;
    eprintln!("kubectl top pods:\n{out}");
    assert!(out.lines().next().unwrap().split_whitespace().eq(["NAME", "CPU(cores)", "MEMORY(bytes)"]), "{out}");
    let busy_cpu = millicores(&cells[1]);
    assert!(busy_cpu >= 100, "a spinning shell uses at least 0.1 core: {busy_cpu}m\n{out}");
    assert!(cells[2].ends_with("Mi"), "memory in Mi: {}", cells[2]);
    let calm_cpu = millicores(out.lines().find(|l| l.starts_with("calm ")).unwrap().split_whitespace().nth(1).unwrap());
    assert!(calm_cpu < busy_cpu, "sleep uses less than a spin: {calm_cpu}m vs {busy_cpu}m");

    // --containers names each container; -l selects; -A covers every namespace.
    let (ok, out, err) = kubectl(&kc, &cache, &["top", "pods", "--containers"]);
    assert!(ok, "{err}\n{}", logs());
    eprintln!("kubectl top pods --containers:\n{out}");
    assert!(out.lines().next().unwrap().split_whitespace().eq(["POD", "NAME", "CPU(cores)", "MEMORY(bytes)"]), "{out}");
    let spin = out.lines().find(|l| l.starts_with("busy ") && l.split_whitespace().nth(1) == Some("spin")).unwrap_or_else(|| panic!("busy/spin in\n{out}"));
    assert!(millicores(spin.split_whitespace().nth(2).unwrap()) > 0, "{spin}");
    assert!(out.lines().any(|l| l.starts_with("busy ") && l.split_whitespace().nth(1) == Some("idle")), "{out}");
    let (ok, out, err) = kubectl(&kc, &cache, &["top", "pods", "-l", "app=busy"]);
    assert!(ok && out.contains("busy ") && !out.contains("calm "), "{out}{err}");
    let (ok, out, err) = kubectl(&kc, &cache, &["top", "pods", "-A"]);
    assert!(ok, "{err}");
    assert!(out.lines().next().unwrap().starts_with("NAMESPACE") && out.lines().any(|l| l.starts_with("default ") && l.contains(" busy ")), "{out}");
    let (ok, out, err) = kubectl(&kc, &cache, &["top", "pod", "busy"]);
    assert!(ok && out.contains("busy "), "{out}{err}");

    // `kubectl top nodes`: NAME CPU(cores) CPU(%) MEMORY(bytes) MEMORY(%), percentages of
    // the Node's allocatable.
    let (ok, out, err) = kubectl(&kc, &cache, &["top", "nodes"]);
    eprintln!("kubectl top nodes:\n{out}{err}");
    assert!(ok, "{err}\n{}", logs());
    assert!(out.lines().next().unwrap().split_whitespace().eq(["NAME", "CPU(cores)", "CPU(%)", "MEMORY(bytes)", "MEMORY(%)"]), "{out}");
    let n1: Vec<&str> = out.lines().find(|l| l.starts_with("n1 ")).unwrap_or_else(|| panic!("n1 in\n{out}")).split_whitespace().collect();
    assert!(millicores(n1[1]) >= busy_cpu / 2, "the node runs the busy pod: {}", n1[1]);
    assert!(n1[2].ends_with('%') && n1[2].trim_end_matches('%').parse::<u64>().unwrap() > 0, "{}", n1[2]);
    assert!(n1[3].ends_with("Mi") && n1[4].ends_with('%'), "{n1:?}");

    // The API objects: canonical quantities, window, timestamp.
    let (ok, out, err) = kubectl(&kc, &cache, &["get", "--raw", "/apis/metrics.k8s.io/v1beta1/nodes/n1"]);
    assert!(ok, "{err}");
    let m: Value = serde_json::from_str(&out).unwrap();
    assert_eq!((m["kind"].as_str(), m["window"].as_str()), (Some("NodeMetrics"), Some("10s")), "{m}");
    let cpu = m["usage"]["cpu"].as_str().unwrap();
    assert!(cpu.ends_with('n') || cpu.ends_with('m') || cpu.ends_with('u'), "{cpu}");
    let (ok, out, err) = kubectl(&kc, &cache, &["get", "--raw", "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/busy"]);
    assert!(ok, "{err}");
    let m: Value = serde_json::from_str(&out).unwrap();
    eprintln!("PodMetrics busy: {m}");
    let spin = m["containers"].as_array().unwrap().iter().find(|c| c["name"] == "spin").unwrap_or_else(|| panic!("{m}"));
    assert_ne!(spin["usage"]["memory"], "0", "a running shell has a working set: {m}");
    let (ok, out, err) = kubectl(&kc, &cache, &["get", "--raw", "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/nope"]);
    assert!(!ok && (err.contains("NotFound") || err.contains("not found")), "{out}{err}");
}
