//! Applying a rendered script with `nft -f -`: one netlink transaction, so the table is
//! replaced all at once or not at all. **API boundary:** the only code of the proxy that
//! runs `nft`.

use std::process::Stdio;

use tokio::io::AsyncWriteExt;

/// Applying a script failed.
#[derive(Debug, thiserror::Error)]
pub enum NftError {
    /// `nft` could not be started or fed.
    #[error("running nft: {0}")]
    Spawn(#[source] std::io::Error),
    /// `nft` refused the script (nothing was changed).
    #[error("nft refused the ruleset: {0}")]
    Refused(String),
}

/// Runs `nft -f -` on `script`.
pub async fn apply(script: &str) -> Result<(), NftError> {
    run(tokio::process::Command::new("nft"), script).await
}

/// Runs `nft -f -` on `script` inside the named network namespace (`nsenter --net`,
/// which unlike `ip netns exec` adds next to nothing to the time), as the bench does in a
/// namespace of its own.
pub async fn apply_in_netns(netns: &str, script: &str) -> Result<(), NftError> {
    let mut cmd = tokio::process::Command::new("nsenter");
    cmd.arg(format!("--net=/run/netns/{netns}")).arg("nft");
    run(cmd, script).await
}

async fn run(mut cmd: tokio::process::Command, script: &str) -> Result<(), NftError> {
    let mut child = cmd
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(NftError::Spawn)?;
    let mut stdin = child.stdin.take().expect("piped stdin");
    stdin.write_all(script.as_bytes()).await.map_err(NftError::Spawn)?;
    drop(stdin);
    let out = child.wait_with_output().await.map_err(NftError::Spawn)?;
    if out.status.success() {
        Ok(())
    } else {
        Err(NftError::Refused(String::from_utf8_lossy(&out.stderr).trim().to_string()))
    }
}

/// Removes the conntrack entries of UDP flows to `endpoint` through `vip:port` (the
/// `conntrack` tool; "no entries" is success). Returns whether the tool ran.
pub async fn flush_udp(vip: std::net::IpAddr, port: u16, endpoint: std::net::IpAddr) -> bool {
    let family = if vip.is_ipv6() { "ipv6" } else { "ipv4" };
    let status = tokio::process::Command::new("conntrack")
        .args(["-D", "-f", family, "-p", "udp", "--orig-dst", &vip.to_string(), "--orig-port-dst", &port.to_string(), "--reply-src", &endpoint.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await;
    status.is_ok()
}
