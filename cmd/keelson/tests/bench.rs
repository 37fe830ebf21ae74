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
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn etcd_available() -> bool {
    Command::new("sh").args(["-c", "command -v etcd && command -v etcdctl"]).output().map(|o| o.status.success()).unwrap_or(false)
}

#[test]
fn store_bench_drives_keelson_and_etcd_with_tls_and_reports_json() {
    if !is_root() && !etcd_available() {
        eprintln!("SKIPPED: etcd is not installed and installing it needs root (apt-get install etcd-server etcd-client)");
        assert!(std::env::var_os("CI").is_none(), "CI runs as root and must run this test");
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
