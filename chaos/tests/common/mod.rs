//! Shared helpers of the harness's integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use keelson_chaos::{HarnessSpec, Isolation};
use keelson_client::{PeerTls, StoreClient};

/// The `keelson` binary: `$KEELSON_BIN`, else next to the test executable's target
/// directory, `$CARGO_TARGET_DIR/debug`, or the workspace's `target/debug`. Panics with
/// instructions when there is none (`cargo test --workspace` builds it first).
pub fn keelson_bin() -> PathBuf {
    if let Ok(p) = std::env::var("KEELSON_BIN") {
        let p = PathBuf::from(p);
        assert!(p.is_file(), "KEELSON_BIN={} does not exist", p.display());
        return p;
    }
    let mut candidates = Vec::new();
    // target/debug/deps/<test> -> target/debug/keelson
    if let Some(profile_dir) = std::env::current_exe().ok().and_then(|e| e.parent()?.parent().map(Path::to_path_buf)) {
        candidates.push(profile_dir.join("keelson"));
    }
    if let Ok(t) = std::env::var("CARGO_TARGET_DIR") {
        candidates.push(PathBuf::from(t).join("debug").join("keelson"));
    }
    candidates.push(std::env::var_os("CARGO_MANIFEST_DIR").map(std::path::PathBuf::from).unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()).join("..").join("target").join("debug").join("keelson"));
    match candidates.iter().find(|c| c.is_file()) {
        Some(c) => c.clone(),
        None => panic!(
            "the keelson binary was not found (looked at {candidates:?}): run `cargo build -p keelson` first, or set KEELSON_BIN"
        ),
    }
}

pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

pub fn spec(servers: usize, dir: &Path, isolation: Isolation, seed: u64) -> HarnessSpec {
    HarnessSpec { servers, nodes: 0, node_args: vec![], binary: keelson_bin(), dir: dir.to_path_buf(), isolation, server_args: vec![], seed }
}

/// Puts through `endpoints` (retrying for ≤ `timeout` on failures, e.g. during elections).
pub async fn put_retry(tls: &PeerTls, endpoints: &[String], key: &str, value: &str, timeout: Duration) -> anyhow::Result<()> {
    let client = StoreClient::with_tls(endpoints, tls)?;
    let deadline = Instant::now() + timeout;
    loop {
        match tokio::time::timeout(Duration::from_secs(2), client.put(key.as_bytes(), value.as_bytes())).await {
            Ok(Ok(_)) => return Ok(()),
            other if Instant::now() >= deadline => {
                bail!("put {key} via {endpoints:?} failed for {timeout:?}: {other:?}")
            }
            _ => {
                client.rotate();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Linearizable get of `key` on the one server `endpoint` (retrying ≤ `timeout`).
pub async fn get_on(tls: &PeerTls, endpoint: &str, key: &str, timeout: Duration) -> anyhow::Result<Option<String>> {
    let client = StoreClient::with_tls(&[endpoint], tls)?;
    let deadline = Instant::now() + timeout;
    loop {
        match tokio::time::timeout(Duration::from_secs(2), client.get(key.as_bytes())).await {
            Ok(Ok(r)) => return Ok(r.response.kvs.first().map(|kv| String::from_utf8_lossy(&kv.value).to_string())),
            other if Instant::now() >= deadline => bail!("get {key} on {endpoint} failed for {timeout:?}: {other:?}"),
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Pids of processes whose command line mentions `needle`.
pub fn processes_mentioning(needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(raw) = std::fs::read(e.path().join("cmdline")) else { continue };
        let state = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let zombie = state.rsplit_once(')').is_some_and(|(_, r)| r.trim_start().starts_with('Z'));
        if !zombie && String::from_utf8_lossy(&raw).contains(needle) && pid != std::process::id() {
            out.push(pid);
        }
    }
    out
}

/// Network namespaces whose name contains `needle`.
pub fn namespaces_mentioning(needle: &str) -> anyhow::Result<Vec<String>> {
    let out = std::process::Command::new("ip").args(["netns", "list"]).output().context("ip netns list")?;
    Ok(String::from_utf8_lossy(&out.stdout).lines().filter(|l| l.contains(needle)).map(str::to_string).collect())
}

/// The process state letter of `pid` (`T` when stopped).
pub fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}
