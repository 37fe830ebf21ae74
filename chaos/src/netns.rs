//! Network namespaces, the bridge, veths, nftables partitions and netem latency.
//!
//! Layout of run `<id>` with subnet `N.0/24`:
//!
//! ```text
//!  root ns: kc<id>h N.1/24 ──veth── hv ┐
//!  kc<id>-br:                     br0 ─┼─ n0 ──veth── eth0 N.10/24 (kc<id>-n0)
//!                                      ├─ n1 ──veth── eth0 N.11/24 (kc<id>-n1)
//!                                      └─ …
//! ```
//!
//! Every subprocess call is bounded ([`CMD_TIMEOUT`]). Each namespace is recorded in the
//! run's [`CleanupState`] before it is created, so a failed setup is still cleaned up.

use std::fs::File;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::cleanup::{lock, registry_dir, CleanupState};
use crate::cmd::{run, run_async, CMD_TIMEOUT};
use crate::topology::{bridge_ns, choose_subnet, host_addr, host_veth, node_addr, node_ns, parse_prefixes, NFT_TABLE};
use crate::ChaosError;

fn argv(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| w.to_string()).collect()
}

async fn ip(words: &[&str]) -> Result<String, ChaosError> {
    let mut v = vec!["ip".to_string()];
    v.extend(argv(words));
    run_async(v, None, CMD_TIMEOUT).await
}

/// Why Netns mode cannot work here, or `Ok` when it can: root, `ip netns` and `nft`.
pub(crate) fn probe() -> Result<(), String> {
    if !crate::cmd::is_root() {
        return Err("not running as root".into());
    }
    run(&["ip", "netns", "list"], None, CMD_TIMEOUT).map_err(|e| format!("`ip netns` does not work: {e}"))?;
    run(&["nft", "--version"], None, CMD_TIMEOUT).map_err(|e| format!("`nft` does not work: {e}"))?;
    Ok(())
}

/// An exclusive lock over subnet choice, so parallel runs pick different subnets; held
/// until the host address (and so its route) exists. Released on drop.
struct SubnetLock {
    _file: File,
}

impl SubnetLock {
    fn acquire(timeout: Duration) -> Result<Self, ChaosError> {
        let dir = registry_dir();
        std::fs::create_dir_all(&dir).map_err(ChaosError::io(dir.display().to_string()))?;
        let path = dir.join("subnet.lock");
        let f = File::create(&path).map_err(ChaosError::io(path.display().to_string()))?;
        let deadline = Instant::now() + timeout;
        loop {
            // SAFETY: flock on a file descriptor we own.
            if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                return Ok(Self { _file: f });
            }
            if Instant::now() >= deadline {
                return Err(ChaosError::NotReady(format!("{} stayed locked for {timeout:?}", path.display())));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Builds the bridge namespace, host veth and one namespace per server; returns the
/// subnet's network address. Links are up everywhere, `lo` included.
pub(crate) async fn setup(run_id: &str, n: usize, state: &Arc<Mutex<CleanupState>>) -> Result<Ipv4Addr, ChaosError> {
    let br = bridge_ns(run_id);
    let veth = host_veth(run_id);
    lock(state).namespaces.push(br.clone());
    ip(&["netns", "add", &br]).await?;
    ip(&["-n", &br, "link", "set", "lo", "up"]).await?;
    // nftables must work inside a namespace, not just exist as a binary.
    run_async(argv(&["ip", "netns", "exec", &br, "nft", "list", "tables"]), None, CMD_TIMEOUT).await?;
    ip(&["-n", &br, "link", "add", "br0", "type", "bridge"]).await?;
    ip(&["-n", &br, "link", "set", "br0", "up"]).await?;
    lock(state).host_veth = Some(veth.clone());
    ip(&["link", "add", &veth, "type", "veth", "peer", "name", "hv", "netns", &br]).await?;
    ip(&["-n", &br, "link", "set", "hv", "master", "br0"]).await?;
    ip(&["-n", &br, "link", "set", "hv", "up"]).await?;
    let subnet = {
        let guard =
            tokio::task::spawn_blocking(|| SubnetLock::acquire(Duration::from_secs(15))).await.map_err(|e| {
                ChaosError::Io { context: "subnet lock".into(), source: std::io::Error::other(e.to_string()) }
            })??;
        let mut used = parse_prefixes(&ip(&["-4", "-o", "route", "show", "table", "all"]).await?);
        used.extend(parse_prefixes(&ip(&["-4", "-o", "addr", "show"]).await?));
        let subnet = choose_subnet(&used).ok_or_else(|| {
            ChaosError::Unsupported("every candidate /24 (documentation and 198.18.0.0/15 ranges) is in use".into())
        })?;
        ip(&["addr", "add", &format!("{}/24", host_addr(subnet)), "dev", &veth]).await?;
        ip(&["link", "set", &veth, "up"]).await?;
        drop(guard);
        subnet
    };
    for i in 0..n {
        let ns = node_ns(run_id, i);
        let port = format!("n{i}");
        {
            // Server namespaces go before the bridge's, which is deleted last.
            let mut st = lock(state);
            let at = st.namespaces.len() - 1;
            st.namespaces.insert(at, ns.clone());
        }
        ip(&["netns", "add", &ns]).await?;
        ip(&["-n", &ns, "link", "set", "lo", "up"]).await?;
        ip(&["-n", &br, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", &ns]).await?;
        ip(&["-n", &br, "link", "set", &port, "master", "br0"]).await?;
        ip(&["-n", &br, "link", "set", &port, "up"]).await?;
        ip(&["-n", &ns, "addr", "add", &format!("{}/24", node_addr(subnet, i)), "dev", "eth0"]).await?;
        ip(&["-n", &ns, "link", "set", "eth0", "up"]).await?;
    }
    Ok(subnet)
}

/// Whether `tc … netem` works (tried on `lo` of the bridge namespace); `Err` holds why not.
pub(crate) async fn probe_netem(run_id: &str) -> Result<(), String> {
    let br = bridge_ns(run_id);
    let add = argv(&["ip", "netns", "exec", &br, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"]);
    match run_async(add, None, CMD_TIMEOUT).await {
        Ok(_) => {
            let del = argv(&["ip", "netns", "exec", &br, "tc", "qdisc", "del", "dev", "lo", "root"]);
            let _ = run_async(del, None, CMD_TIMEOUT).await;
            Ok(())
        }
        Err(e) => Err(e.to_string()),
    }
}

/// Loads `ruleset` (see [`crate::topology::render_ruleset`]) into namespace `ns`.
pub(crate) async fn load_ruleset(ns: &str, ruleset: &str) -> Result<(), ChaosError> {
    run_async(argv(&["ip", "netns", "exec", ns, "nft", "-f", "-"]), Some(ruleset.to_string()), CMD_TIMEOUT)
        .await
        .map(|_| ())
}

/// The table as `nft list` shows it in `ns`, or `None` when there is none.
pub(crate) async fn list_ruleset(ns: &str) -> Option<String> {
    run_async(argv(&["ip", "netns", "exec", ns, "nft", "list", "table", "inet", NFT_TABLE]), None, CMD_TIMEOUT)
        .await
        .ok()
}

/// Delays every packet leaving `eth0` of `ns` by `millis`.
pub(crate) async fn set_latency(ns: &str, millis: u32) -> Result<(), ChaosError> {
    let delay = format!("{millis}ms");
    run_async(
        argv(&["ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", "eth0", "root", "netem", "delay", &delay]),
        None,
        CMD_TIMEOUT,
    )
    .await
    .map(|_| ())
}

/// Removes the root qdisc of `eth0` in `ns` (no error when there is none).
pub(crate) async fn clear_latency(ns: &str) -> Result<(), ChaosError> {
    match run_async(argv(&["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", "eth0", "root"]), None, CMD_TIMEOUT)
        .await
    {
        Err(ChaosError::Command { stderr, .. })
            if stderr.contains("handle of zero")
                || stderr.contains("No such file")
                || stderr.contains("Invalid handle") =>
        {
            Ok(())
        }
        other => other.map(|_| ()),
    }
}
