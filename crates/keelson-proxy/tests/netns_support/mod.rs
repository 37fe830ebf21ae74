//! What the proxy's network-namespace tests share: shell commands, `nft` inside a
//! namespace, and the loud skip when the machine cannot run them.

use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

extern "C" {
    fn geteuid() -> u32;
}

/// Runs `cmd` with `sh -c`: its stdout, or an error with its stderr.
pub fn sh(cmd: &str) -> Result<String> {
    let out = Command::new("sh").args(["-c", cmd]).output()?;
    if !out.status.success() {
        bail!("{cmd}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `nft -f -` on `script` inside network namespace `ns`.
pub fn nft_in(ns: &str, script: &str) -> Result<()> {
    let mut child = Command::new("ip").args(["netns", "exec", ns, "nft", "-f", "-"]).stdin(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
    std::io::Write::write_all(child.stdin.as_mut().context("stdin")?, script.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("nft: {}\n{script}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// Whether `test` cannot run here (not root, or one of `tools` missing): then it says so
/// loudly, and panics instead when KEELSON_REQUIRE_NODE_TESTS is set.
pub fn skipped(test: &str, tools: &[&str]) -> bool {
    // SAFETY: geteuid has no preconditions.
    let why = if unsafe { geteuid() } != 0 {
        Some("not root".to_string())
    } else {
        tools
            .iter()
            .find(|t| Command::new("sh").args(["-c", &format!("command -v {t}")]).stdout(Stdio::null()).status().map(|s| !s.success()).unwrap_or(true))
            .map(|t| format!("{t} is missing"))
    };
    let Some(why) = why else { return false };
    if std::env::var_os("KEELSON_REQUIRE_NODE_TESTS").is_some() {
        panic!("{test}: node test required but {why}");
    }
    eprintln!("SKIPPED {test}: {why}");
    true
}
