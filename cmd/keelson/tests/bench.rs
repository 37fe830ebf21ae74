//! `keelson bench store --json` against a Keelson cluster and a 3-member etcd, both with
//! mutual TLS: the JSON shape other tools rely on, and that every phase ran without
//! errors on both systems. No speed is asserted (figures are for the closing notes).
//!
//! Needs etcd: the start script installs Debian's `etcd-server` when running as root
//! (as CI does). Without root and without etcd the test is skipped, loudly.

use std::path::{Path, PathBuf};
use std::process::Command;

fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_keelson"))
}

fn repo_root() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map(std::path::PathBuf::from).unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()).join("../..")
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn etcd_available() -> bool {
    Command::new("sh").args(["-c", "command -v etcd && command -v etcdctl"]).output().map(|o| o.status.success()).unwrap_or(false)
}

/// Whether etcd is installed or can be (as root, the etcd script installs it). Says so
/// loudly when not; in CI (always root) it must be.
fn etcd_can_run() -> bool {
    if is_root() || etcd_available() {
        return true;
    }
    eprintln!("SKIPPED: etcd is not installed and installing it needs root (apt-get install etcd-server etcd-client)");
    assert!(std::env::var_os("CI").is_none(), "CI runs as root and must run this test");
    false
}

#[test]
fn store_bench_drives_keelson_and_etcd_with_tls_and_reports_json() {
    if !etcd_can_run() {
        return;
    }
    let out = Command::new(binary())
        .current_dir(repo_root())
        .args(["bench", "store", "--clients", "2", "--duration-secs", "1", "--keys", "50", "--compare-etcd", "--json"])
        .output()
        .expect("run keelson bench store");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed: {stderr}");
    assert!(stderr.contains("etcd: mutual TLS"), "etcd was not started with TLS: {stderr}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object on stdout");
    for system in ["keelson", "etcd"] {
        let s = &json[system];
        for field in ["write_ops_per_s", "write_p50_ms", "write_p99_ms", "read_ops_per_s", "read_p99_ms"] {
            let v = s[field].as_f64().unwrap_or_else(|| panic!("{system}.{field} missing in {s}"));
            assert!(v > 0.0, "{system}.{field} = {v}");
        }
        assert_eq!(s["params"]["clients"], serde_json::json!([2]), "{system} params");
        assert_eq!(s["params"]["etcd_tls"], serde_json::json!(true));
        assert_eq!(s["params"]["keelson_tls"], serde_json::json!(true));
        for phase in ["write", "linearizable_read", "serializable_read"] {
            let runs = s["phases"][phase].as_array().unwrap_or_else(|| panic!("{system} phase {phase} missing"));
            assert_eq!(runs.len(), 1, "{system} {phase}");
            assert_eq!(runs[0]["errors"], serde_json::json!(0), "{system} {phase} had errors: {}", runs[0]);
        }
    }
}

/// `keelson bench failover --json`: one leader kill and one follower kill on each system;
/// every kill is measured (writes resumed) and the restarted member caught up. No speed is
/// asserted.
#[test]
fn failover_bench_kills_leaders_of_keelson_and_etcd_and_reports_json() {
    if !etcd_can_run() {
        return;
    }
    let out = Command::new(binary())
        .current_dir(repo_root())
        .args(["bench", "failover", "--kills", "1", "--clients", "2", "--compare-etcd", "--json"])
        .output()
        .expect("run keelson bench failover");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed: {stderr}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object on stdout");
    for system in ["keelson", "etcd"] {
        for field in ["gap_p50_ms", "gap_max_ms"] {
            let v = json[format!("{system}_{field}")].as_f64().unwrap_or_else(|| panic!("{system}_{field} missing in {json}"));
            assert!(v > 0.0, "{system}_{field} = {v}");
        }
        let s = &json[system];
        let kills = s["leader_kills"].as_array().unwrap_or_else(|| panic!("{system}.leader_kills missing"));
        assert_eq!(kills.len(), 1, "{system}: {s}");
        assert!(kills[0]["first_after_ms"].as_f64().is_some_and(|v| v > 0.0), "{system}: {s}");
        assert!(s["follower_kill"]["gap_ms"].as_f64().is_some(), "{system}: {s}");
        assert_eq!(s["catch_up_ms"].as_array().map(Vec::len), Some(1), "{system}: {s}");
    }
}

/// `keelson bench ingress --json`: the same busybox httpd backend directly, through the
/// built-in ingress and through nginx; every request answered 200 with the backend's
/// body on all three. No speed is asserted.
#[test]
fn ingress_bench_proxies_to_a_busybox_backend_beside_nginx_and_reports_json() {
    let missing: Vec<&str> = [("/bin/busybox", "busybox-static"), ("/usr/sbin/nginx", "nginx")].into_iter().filter(|(p, _)| !Path::new(p).exists()).map(|(_, pkg)| pkg).collect();
    if !missing.is_empty() {
        eprintln!("SKIPPED: the ingress bench needs the Debian packages {missing:?} (deploy/install-build-deps.sh installs them as root)");
        assert!(std::env::var_os("KEELSON_REQUIRE_NODE_TESTS").is_none(), "the test command installed them as root: they must be there");
        return;
    }
    let out = Command::new(binary()).args(["bench", "ingress", "--clients", "4", "--secs", "1", "--body-bytes", "3000", "--json"]).output().expect("run keelson bench ingress");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed: {stderr}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object on stdout");
    for target in ["direct", "ingress", "nginx"] {
        let t = &json[target];
        assert!(t["requests"].as_u64().is_some_and(|n| n > 0), "{target}: no request answered: {t} ({stderr})");
        assert_eq!(t["errors"], serde_json::json!(0), "{target}: {stderr}");
        assert!(t["p99_ms"].as_f64().is_some_and(|v| v > 0.0), "{target}: {t}");
    }
    assert!(json["ingress_vs_direct_rps"].as_f64().is_some_and(|r| r > 0.0), "{json}");
    assert!(json["ingress_vs_nginx_rps"].as_f64().is_some_and(|r| r > 0.0), "{json}");
    assert_eq!(json["body_bytes"], serde_json::json!(3000));
}

/// The stalled-watcher bench's short form: it opens the watches, writes, samples the three
/// local servers and reports every figure (the figures themselves are for the notes).
#[test]
fn stalled_watchers_bench_samples_every_server_and_reports_json() {
    let out = Command::new(binary())
        .args(["bench", "stalled-watchers", "--watchers", "30", "--write-rate", "50", "--value-bytes", "512", "--secs", "2", "--json"])
        .output()
        .expect("run keelson bench stalled-watchers");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed: {stderr}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object on stdout");
    assert_eq!(json["watchers"], 30, "{json}");
    assert!(json["writes"].as_u64().unwrap_or(0) > 0, "{json}");
    assert_eq!(json["servers_sampled"], 3, "the bench's own three servers: {json}");
    for field in ["rss_before_mb", "rss_peak_mb", "rss_end_mb", "rss_after_drop_mb"] {
        assert!(json[field].as_f64().unwrap_or(0.0) > 0.0, "{field}: {json}");
    }
}

/// `keelson bench api`'s short form with the pod-shaped phases: simulated nodes renew
/// their Leases, pods go through create, binding and status, and the pod lists with a
/// field and a label selector return what the full list says they must (the bench counts
/// a wrong count as an error). Every phase ran with no errors; CPU and memory were read
/// from the bench's own three servers.
#[test]
fn api_bench_runs_pod_rounds_lease_renewals_and_selector_lists() {
    let out = Command::new(binary())
        .args(["bench", "api", "--clients", "4", "--duration-secs", "1", "--list-sizes", "50", "--watchers", "4", "--watch-write-rate", "5", "--watch-secs", "1"])
        .args(["--lease-nodes", "40", "--lease-interval-secs", "1", "--pods", "300", "--json"])
        .output()
        .expect("run keelson bench api");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed: {stderr}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object on stdout");
    let ran_clean = |phase: &serde_json::Value, what: &str| {
        assert!(phase["ops"].as_u64().unwrap_or(0) > 0, "{what} did nothing: {json}");
        assert_eq!(phase["errors"], 0, "{what} had errors: {json}\n{stderr}");
    };
    ran_clean(&json["create"], "creates");
    ran_clean(&json["update"], "updates");
    let pods = &json["pods"];
    ran_clean(&pods["rounds"], "pod rounds");
    ran_clean(&pods["leases"]["renewals"], "lease renewals");
    assert_eq!(pods["leases"]["nodes"], 40, "{json}");
    assert!(pods["pods_loaded"].as_u64().unwrap_or(0) >= 300, "topped up to --pods: {json}");
    let lists = pods["lists"].as_array().expect("the pod lists");
    assert_eq!(lists.len(), 3, "all, by spec.nodeName, by label: {json}");
    for l in lists {
        ran_clean(&l[1], l[0].as_str().unwrap_or("a list"));
    }
    // The three local servers were measured.
    for figure in [&json["create_server_cpu_ms"], &json["update_server_cpu_ms"], &pods["round_server_cpu_ms"], &pods["rss_with_pods_mb"], &pods["leases"]["renewals_cost_cores"]] {
        assert!(figure.as_f64().is_some_and(|v| v >= 0.0), "a server figure is missing: {json}");
    }
    assert!(pods["rss_with_pods_mb"].as_f64().unwrap_or(0.0) > 0.0, "{json}");
}
