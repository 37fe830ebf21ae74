//! Network namespaces, the bridge, veths and the host's routes to the nodes' pods.
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
//! The host reaches node `k`'s pods through a route `P.k.0/24 via <node address>` on
//! `kc<id>h`; the route goes when the veth does. Members have no default route, only
//! one for the service network on their `eth0` (for a node's own ClusterIP traffic).
//!
//! A dual-stack run adds IPv6 alike, on two random unique local /48s: `M::1/64` on the
//! host veth and `M::1<j>/64` on member `j`, node `k`'s pods on `Q:k::/64` routed via
//! its IPv6 address, and the IPv6 service network on each member's `eth0`.
//!
//! Every subprocess call is bounded ([`CMD_TIMEOUT`]). Each namespace is recorded in the
//! run's [`CleanupState`] before it is created, so a failed setup is still cleaned up.

use std::fs::File;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::cleanup::{lock, registry_dir, CleanupState};
use crate::cmd::{run, run_async, CMD_TIMEOUT};
use crate::topology::{bridge_ns, choose_pod_net, SERVICE_NET, SERVICE_NET6, choose_subnet, host_addr, host_addr6, host_veth, member_addr, member_addr6, member_ns, parse_prefixes, ula_nets};
use crate::RunnerError;

fn argv(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| w.to_string()).collect()
}

async fn ip(words: &[&str]) -> Result<String, RunnerError> {
    let mut v = vec!["ip".to_string()];
    v.extend(argv(words));
    run_async(v, None, CMD_TIMEOUT).await
}

/// Why the namespace topology cannot work here, or `Ok` when it can: root, `ip netns`,
/// `nsenter` and `nft`.
pub(crate) fn probe() -> Result<(), String> {
    if !crate::cmd::is_root() {
        return Err("not running as root".into());
    }
    run(&["ip", "netns", "list"], None, CMD_TIMEOUT).map_err(|e| format!("`ip netns` does not work: {e}"))?;
    run(&["nft", "--version"], None, CMD_TIMEOUT).map_err(|e| format!("`nft` does not work: {e}"))?;
    run(&["nsenter", "--version"], None, CMD_TIMEOUT).map_err(|e| format!("`nsenter` does not work: {e}"))?;
    Ok(())
}

/// An exclusive lock over subnet choice, so parallel runs pick different subnets; held
/// until the host address (and so its route) exists. Released on drop.
struct SubnetLock {
    _file: File,
}

impl SubnetLock {
    fn acquire(timeout: Duration) -> Result<Self, RunnerError> {
        let dir = registry_dir();
        std::fs::create_dir_all(&dir).map_err(RunnerError::io(dir.display().to_string()))?;
        let path = dir.join("subnet.lock");
        let f = File::create(&path).map_err(RunnerError::io(path.display().to_string()))?;
        let deadline = Instant::now() + timeout;
        loop {
            // SAFETY: flock on a file descriptor we own.
            if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                return Ok(Self { _file: f });
            }
            if Instant::now() >= deadline {
                return Err(RunnerError::NotReady(format!("{} stayed locked for {timeout:?}", path.display())));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The addresses a run's namespaces use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Subnets {
    /// Network address of the members' /24.
    pub members: Ipv4Addr,
    /// Network address of the pods' /16.
    pub pods: Ipv4Addr,
    /// A dual-stack run's IPv6 networks: the members' /64 and the pods' /48.
    pub v6: Option<(Ipv6Addr, Ipv6Addr)>,
}

/// Builds the bridge namespace, host veth and one namespace per member; returns the
/// subnets (`want`, when given, or free ones, IPv6 ones too when `dual_stack`). Links
/// are up everywhere, `lo` included.
pub(crate) async fn setup(run_id: &str, n: usize, want: Option<Subnets>, dual_stack: bool, state: &Arc<Mutex<CleanupState>>) -> Result<Subnets, RunnerError> {
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
    let subnets = {
        let guard =
            tokio::task::spawn_blocking(|| SubnetLock::acquire(Duration::from_secs(15))).await.map_err(|e| {
                RunnerError::Io { context: "subnet lock".into(), source: std::io::Error::other(e.to_string()) }
            })??;
        let mut used = parse_prefixes(&ip(&["-4", "-o", "route", "show", "table", "all"]).await?);
        used.extend(parse_prefixes(&ip(&["-4", "-o", "addr", "show"]).await?));
        let subnets = match want {
            Some(w) => {
                let free = |net, len| used.iter().all(|(p, l)| !crate::topology::overlaps_net(net, len, *p, *l));
                if !free(w.members, 24) || !free(w.pods, 16) {
                    return Err(RunnerError::Unsupported(format!(
                        "the cluster's networks {}/24 and {}/16 are not both free on this host now; it cannot be resumed",
                        w.members, w.pods
                    )));
                }
                w
            }
            None => Subnets {
                members: choose_subnet(&used).ok_or_else(|| {
                    RunnerError::Unsupported("every candidate /24 (documentation and 198.18.0.0/15 ranges) is in use".into())
                })?,
                pods: choose_pod_net(&used)
                    .ok_or_else(|| RunnerError::Unsupported("every pod network 10.42.0.0/16 … 10.250.0.0/16 is in use".into()))?,
                // Unique local networks are random, so runs do not meet (RFC 4193).
                v6: dual_stack.then(|| ula_nets(rand::random())),
            },
        };
        ip(&["addr", "add", &format!("{}/24", host_addr(subnets.members)), "dev", &veth]).await?;
        ip(&["link", "set", &veth, "up"]).await?;
        // The whole pod network goes onto the veth (the per-node /24 routes refine it), so
        // parallel runs see it as taken. Member namespaces get no default route: nothing
        // they send leaves the run's networks.
        ip(&["route", "add", &format!("{}/16", subnets.pods), "dev", &veth]).await?;
        if let Some((members6, pods6)) = subnets.v6 {
            // `nodad`: the address is usable at once, not after duplicate detection.
            ip(&["addr", "add", &format!("{}/64", host_addr6(members6)), "dev", &veth, "nodad"]).await?;
            ip(&["route", "add", &format!("{pods6}/48"), "dev", &veth]).await?;
        }
        drop(guard);
        subnets
    };
    let subnet = subnets.members;
    for i in 0..n {
        let ns = member_ns(run_id, i);
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
        ip(&["-n", &ns, "addr", "add", &format!("{}/24", member_addr(subnet, i)), "dev", "eth0"]).await?;
        ip(&["-n", &ns, "link", "set", "eth0", "up"]).await?;
        // No default route, so the service network gets one: a node's own connections to
        // a ClusterIP need a route to be looked up before its proxy rewrites them to a pod.
        ip(&["-n", &ns, "route", "add", &format!("{}/{}", SERVICE_NET.0, SERVICE_NET.1), "dev", "eth0"]).await?;
        if let Some((members6, _)) = subnets.v6 {
            ip(&["-n", &ns, "addr", "add", &format!("{}/64", member_addr6(members6, i)), "dev", "eth0", "nodad"]).await?;
            ip(&["-n", &ns, "route", "add", &format!("{}/{}", SERVICE_NET6.0, SERVICE_NET6.1), "dev", "eth0"]).await?;
        }
    }
    Ok(subnets)
}

/// Routes the host's traffic for `pod_cidr` to the node at `node` (of the CIDR's family).
pub(crate) async fn route_pods(run_id: &str, pod_cidr: &str, node: IpAddr) -> Result<(), RunnerError> {
    ip(&["route", "replace", pod_cidr, "via", &node.to_string(), "dev", &host_veth(run_id)]).await.map(|_| ())
}
