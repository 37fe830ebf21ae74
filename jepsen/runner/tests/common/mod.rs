//! Helpers shared by the runner's test files.

use std::path::PathBuf;

/// The `keelson` binary cargo built next to this test's executable.
pub fn keelson_bin() -> PathBuf {
    if let Ok(p) = std::env::var("KEELSON_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("test executable");
    let bin = exe.parent().and_then(|deps| deps.parent()).expect("target dir").join("keelson");
    assert!(bin.exists(), "{} missing: build it first (`cargo build -p keelson`), or set KEELSON_BIN", bin.display());
    bin
}

pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(1) == Some("0")))
        .unwrap_or(false)
}
