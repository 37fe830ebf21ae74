//! `keelson status` and the structured logs on real `keelson server` processes: the
//! status reports the Raft members with their lag, every server's API health, the
//! components' lease holders and the (hollow) nodes with their pods; a stopped server
//! shows as down while the others stay healthy; `--watch --json` gives a document per
//! line until Ctrl-C; and servers started with `--log-format json --log-level …` write
//! JSON lines at the asked levels only.

mod cluster_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use cluster_support::{client, eventually, server_of, start_short_elections_with};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::{json, Value};

fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_keelson"))
}

/// Runs `keelson status ARGS --cluster-dir DIR` to its end, failing the test when it does
/// not end (the command promises per-server timeouts, never a hang).
async fn run_status(dir: &Path, args: &[&str]) -> Result<String, String> {
    let mut cmd = Command::new(binary());
    cmd.arg("status").args(args).arg("--cluster-dir").arg(dir).stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd.spawn().expect("keelson status starts");
    let pid = child.id();
    let wait = tokio::task::spawn_blocking(move || child.wait_with_output());
    let out = match tokio::time::timeout(Duration::from_secs(60), wait).await {
        Ok(out) => out.expect("join").expect("wait"),
        Err(_) => {
            // SAFETY: kill(2) on the child this test started.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("keelson status {args:?} did not finish within 60 s");
        }
    };
    if !out.status.success() {
        return Err(format!("keelson status failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(String::from_utf8(out.stdout).expect("UTF-8"))
}

async fn status_json(dir: &Path) -> Result<Value, String> {
    let out = run_status(dir, &["--json"]).await?;
    serde_json::from_str(&out).map_err(|e| format!("status --json is not JSON ({e}): {out}"))
}

fn member<'a>(st: &'a Value, name: &str) -> &'a Value {
    st["members"].as_array().and_then(|m| m.iter().find(|m| m["name"] == name)).unwrap_or_else(|| panic!("no member {name}: {st}"))
}

/// All three servers up, voters, API ready, lag known; both component Leases held by a
/// server; both hollow nodes Ready with the one pod bound to one of them.
fn healthy_whole(st: &Value) -> Result<(), String> {
    let members = st["members"].as_array().ok_or("no members")?;
    if members.len() != 3 {
        return Err(format!("{} members", members.len()));
    }
    if members.iter().filter(|m| m["role"] == "leader").count() != 1 || !st["leader"].is_string() {
        return Err("not exactly one leader".into());
    }
    for m in members {
        if m["reachable"] != true || m["api"]["healthy"] != true || m["api"]["state"] != "ready" {
            return Err(format!("{} is not healthy: {m}", m["name"]));
        }
        let lag = &m["lag"];
        if !(lag["applied_behind_commit"].is_u64() && lag["applied_behind_last"].is_u64() && lag["log_behind_last"].is_u64()) {
            return Err(format!("{} has no lag: {m}", m["name"]));
        }
        if !m["applied_index"].is_u64() || m["voter"] != true {
            return Err(format!("{}: {m}", m["name"]));
        }
    }
    let leases = st["leases"].as_array().ok_or("no leases")?;
    for name in ["kube-scheduler", "kube-controller-manager"] {
        let l = leases.iter().find(|l| l["name"] == name).ok_or(format!("no lease {name}"))?;
        let held_by_a_server = l["holder"].as_str().and_then(server_of).is_some_and(|s| s < 3);
        if !held_by_a_server {
            return Err(format!("lease {name} has no server holder: {l}"));
        }
    }
    let nodes = st["nodes"].as_array().ok_or(format!("no nodes: {}", st["nodes_error"]))?;
    let mut names: Vec<&str> = nodes.iter().filter_map(|n| n["name"].as_str()).collect();
    names.sort();
    if names != ["hollow-0", "hollow-1"] || nodes.iter().any(|n| n["ready"] != "True") {
        return Err(format!("nodes: {nodes:?}"));
    }
    let pods: u64 = nodes.iter().filter_map(|n| n["pods"].as_u64()).sum();
    if pods != 1 {
        return Err(format!("{pods} pods bound: {nodes:?}"));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_the_whole_cluster_and_a_stopped_server_as_down() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    // Info only from the replica crate: the servers' other info lines (such as
    // keelson::cli_server's "serving the Kubernetes API") are suppressed.
    let cluster = start_short_elections_with(&dir, &["--log-format", "json", "--log-level", "warn,keelson_replica=info"]).await;
    let admin = client(&cluster, "keelson-1").await;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let hollow = tokio::spawn(keelson_agent::hollow::run(admin.clone(), keelson_agent::hollow::HollowConfig::new("hollow", 2), shutdown.clone()));
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}})).unwrap();
    Api::<Pod>::namespaced(admin.clone(), "default").create(&PostParams::default(), &pod).await.unwrap();

    let whole = eventually("a healthy whole cluster in `keelson status --json`", Duration::from_secs(90), || async {
        let st = status_json(&dir).await?;
        healthy_whole(&st).map_err(|e| format!("{e}\n{st:#}"))?;
        Ok(st)
    })
    .await;
    eprintln!("status: {whole:#}");

    // The text form says the same at a glance.
    let text = run_status(&dir, &[]).await.unwrap();
    eprintln!("{text}");
    for want in ["SERVER", "keelson-1", "keelson-2", "keelson-3", "LEASE", "kube-scheduler", "kube-controller-manager", "NODE", "hollow-0", "hollow-1"] {
        assert!(text.contains(want), "no {want:?} in\n{text}");
    }
    assert_eq!(text.lines().filter(|l| l.starts_with("keelson-") && l.contains(" ready ")).count(), 3, "{text}");

    // --watch --json: one document per line, each refresh; Ctrl-C ends it cleanly.
    let mut watch = Command::new(binary())
        .args(["status", "--watch", "--json", "--interval", "200ms", "--cluster-dir"])
        .arg(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("status --watch");
    let stdout = watch.stdout.take().unwrap();
    let frames = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        std::io::BufReader::new(stdout).lines().take(2).map(|l| serde_json::from_str::<Value>(&l.expect("line")).expect("a JSON document per line")).collect::<Vec<_>>()
    })
    .await
    .unwrap();
    assert_eq!(frames.len(), 2, "two refreshes");
    assert!(frames.iter().all(|f| f["members"].as_array().is_some_and(|m| m.len() == 3)), "{frames:?}");
    // SAFETY: kill(2) on the child this test started.
    unsafe { libc::kill(watch.id() as i32, libc::SIGINT) };
    let ended = tokio::task::spawn_blocking(move || watch.wait()).await.unwrap().unwrap();
    assert!(ended.success(), "status --watch ends cleanly on Ctrl-C: {ended:?}");

    // SIGSTOP a server: it accepts connections and never answers. The status still
    // finishes, reports it down on both ports, and the other two healthy.
    let stopped = 2;
    cluster.signal(stopped, libc::SIGSTOP).unwrap();
    let down = eventually("the stopped server down, the others healthy", Duration::from_secs(90), || async {
        let st = status_json(&dir).await?;
        let s = member(&st, "keelson-3");
        if s["reachable"] != false || s["api"]["healthy"] != false || s["api"]["state"] != "down" {
            return Err(format!("keelson-3 not reported down: {s}"));
        }
        for name in ["keelson-1", "keelson-2"] {
            let m = member(&st, name);
            if m["reachable"] != true || m["api"]["healthy"] != true {
                return Err(format!("{name} not healthy: {m}"));
            }
        }
        Ok(st)
    })
    .await;
    eprintln!("with keelson-3 stopped: {down:#}");
    assert!(member(&down, "keelson-3")["error"].is_string());
    assert!(member(&down, "keelson-3")["api"]["reason"].is_string());
    let text = run_status(&dir, &[]).await.unwrap();
    assert!(text.lines().any(|l| l.starts_with("keelson-3") && l.contains(" down ") && l.contains(" DOWN")), "{text}");
    assert!(text.contains("keelson-3: store unreachable:"), "{text}");
    cluster.signal(stopped, libc::SIGCONT).unwrap();

    shutdown.cancel();
    let _ = hollow.await;
    let logs: Vec<(String, String)> = cluster.manifest().servers().map(|s| (s.name.clone(), std::fs::read_to_string(&s.log).unwrap_or_default())).collect();
    cluster.stop(Duration::from_secs(10)).await.unwrap();

    // The servers' logs: a JSON object per line, with level, target and message, info
    // only from keelson_replica.
    for (name, log) in logs {
        let mut replica_info = 0;
        for line in log.lines().filter(|l| !l.trim().is_empty()) {
            let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{name}: a log line is not JSON ({e}): {line}"));
            let level = v["level"].as_str().unwrap_or_else(|| panic!("{name}: no level: {line}"));
            let target = v["target"].as_str().unwrap_or_else(|| panic!("{name}: no target: {line}"));
            assert!(v["message"].is_string() && v["timestamp"].is_string(), "{name}: {line}");
            match level {
                "ERROR" | "WARN" => {}
                "INFO" => {
                    assert!(target.starts_with("keelson_replica"), "{name}: --log-level warn,keelson_replica=info let through {line}");
                    replica_info += 1;
                }
                other => panic!("{name}: a {other} line under --log-level warn,keelson_replica=info: {line}"),
            }
        }
        assert!(replica_info > 0, "{name}: no info line of keelson_replica:\n{log}");
    }
}
