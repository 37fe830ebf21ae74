//! `keelson agent` (a node: its containerd, its pods) and `keelson image` (offline images).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use keelson_agent::agent::AgentConfig;
use keelson_agent::containerd::{Containerd, ContainerdLayout};
use keelson_agent::images;
use keelson_agent::runtime::cri::CriRuntime;
use keelson_agent::runtime::simulated::SimulatedRuntime;

#[derive(Args)]
pub struct AgentArgs {
    /// An API server URL (`https://HOST:PORT`); repeat for each server to fail over between.
    #[arg(long = "server", required = true)]
    servers: Vec<String>,
    /// A node join token (`keelson token create --usage node`); needed the first time only.
    #[arg(long, env = "KEELSON_TOKEN")]
    token: Option<String>,
    /// Where the node keeps its credentials, containerd, volumes, logs and images.
    #[arg(long, default_value = "keelson-node")]
    data_dir: PathBuf,
    /// The Node's name (default: the host name).
    #[arg(long)]
    name: Option<String>,
    /// The node's InternalIP (default: the IPv4 address it reaches the first server
    /// from); an IPv4 and an IPv6 address, comma-separated, make the node's addresses
    /// dual-stack (its IPv6 NodePorts and the other nodes' routes to its IPv6 pods).
    #[arg(long, value_parser = parse_node_ips)]
    node_ip: Option<NodeIps>,
    /// Pod addresses when the controller manager gives this node no podCIDR; an IPv4 and
    /// an IPv6 CIDR, comma-separated, make the node dual-stack (every pod gets an address
    /// of each, and the proxy keeps an ip6 table too).
    #[arg(long)]
    pod_cidr: Option<String>,
    /// The container runtime: `containerd` (real containers), or `simulated` (no
    /// containers: pods are records that run, for tests and benchmarks without root; the
    /// node reports `simulated://` as its runtime and runs no proxy, DNS or ingress).
    #[arg(long, value_enum, default_value_t = RuntimeKind::Containerd)]
    runtime: RuntimeKind,
    /// The containerd binary the agent starts for this node.
    #[arg(long, default_value = "containerd")]
    containerd: String,
    /// Use an already running containerd at this CRI socket instead of starting one.
    #[arg(long)]
    containerd_socket: Option<PathBuf>,
    /// Static busybox the built-in images are made from.
    #[arg(long, default_value = "/bin/busybox")]
    busybox: PathBuf,
    #[arg(long, default_value_t = 110)]
    max_pods: u32,
    /// Hard eviction thresholds for the pressure conditions, as the kubelet's
    /// (`nodefs.available<0%` turns disk pressure off).
    #[arg(long, default_value = "memory.available<100Mi,nodefs.available<10%")]
    eviction_hard: keelson_agent::agent::machine::EvictionThresholds,
    /// Port of the kubelet API (logs) on the node's address; 0 picks a free one.
    #[arg(long, default_value_t = keelson_agent::kubelet_api::KUBELET_PORT)]
    kubelet_port: u16,
    /// Port of the built-in ingress controller's HTTP on the node's address; 0 disables it.
    #[arg(long, default_value_t = 80)]
    ingress_http_port: u16,
    /// Port of the built-in ingress controller's HTTPS on the node's address; 0 disables it.
    #[arg(long, default_value_t = 443)]
    ingress_https_port: u16,
    /// Cluster DNS servers given to ClusterFirst pods (the kube-dns Service, which the
    /// node's proxy sends to the node's own DNS server).
    #[arg(long = "cluster-dns", default_value = "10.43.0.10")]
    cluster_dns: Vec<String>,
    /// Node status and Lease renewal period.
    #[arg(long, default_value = "10s", value_parser = crate::components::parse_duration)]
    heartbeat: Duration,
    /// Do not add routes to other nodes' podCIDRs.
    #[arg(long)]
    no_routes: bool,
    /// Stop every pod when the agent stops, as a machine powering off would.
    #[arg(long)]
    stop_pods_on_exit: bool,
    /// Run with a deliberate bug, to show that the self-heal checker catches it
    /// (`stale-pod-status`). For tests of the checker only.
    #[arg(long, hide = true, value_parser = parse_injected_bug)]
    inject_bug: Option<keelson_agent::agent::InjectedBug>,
}

impl AgentArgs {
    /// The Node's name, when given.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }
}

/// Which runtime an agent drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RuntimeKind {
    Containerd,
    Simulated,
}

fn parse_injected_bug(s: &str) -> Result<keelson_agent::agent::InjectedBug, String> {
    match s {
        "stale-pod-status" => Ok(keelson_agent::agent::InjectedBug::StalePodStatus),
        other => Err(format!("unknown injected bug {other:?}: the only one is stale-pod-status")),
    }
}

/// `--node-ip`: one address, or one of each family.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct NodeIps {
    v4: Option<Ipv4Addr>,
    v6: Option<Ipv6Addr>,
}

fn parse_node_ips(s: &str) -> Result<NodeIps, String> {
    let mut ips = NodeIps::default();
    let parts: Vec<&str> = s.split(',').map(str::trim).collect();
    if parts.len() > 2 {
        return Err(format!("{s:?}: at most two addresses, one IPv4 and one IPv6"));
    }
    for part in parts {
        match part.parse::<IpAddr>().map_err(|_| format!("{part:?} is not an IP address"))? {
            IpAddr::V4(ip) if ips.v4.is_none() => ips.v4 = Some(ip),
            IpAddr::V6(ip) if ips.v6.is_none() => ips.v6 = Some(ip),
            _ => return Err(format!("{s:?}: two addresses of one family; a dual-stack node has one IPv4 and one IPv6 address")),
        }
    }
    Ok(ips)
}

fn host_port(url: &str) -> anyhow::Result<SocketAddr> {
    let rest = url.strip_prefix("https://").with_context(|| format!("--server {url}: expected https://HOST:PORT"))?;
    let hp = rest.split('/').next().unwrap_or(rest);
    hp.to_socket_addrs().with_context(|| format!("--server {url}"))?.next().with_context(|| format!("--server {url}: no address"))
}

/// The local address used to reach `server` (the node's InternalIP by default).
fn local_ip_towards(server: SocketAddr) -> anyhow::Result<Ipv4Addr> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0")?;
    s.connect(server)?;
    match s.local_addr()?.ip() {
        std::net::IpAddr::V4(ip) => Ok(ip),
        other => bail!("the route to {server} leaves from {other}, not IPv4; set --node-ip"),
    }
}

/// The node's client certificate: from an earlier join, else by joining with the token.
async fn credentials(args: &AgentArgs, name: &str) -> anyhow::Result<(String, keelson_pki::IssuedCert)> {
    let pki = args.data_dir.join("pki");
    let (ca, crt, key) = (pki.join("ca.crt"), pki.join("node.crt"), pki.join("node.key"));
    if crt.exists() && key.exists() && ca.exists() {
        let cert = keelson_pki::IssuedCert { cert_pem: std::fs::read_to_string(&crt)?, key_pem: std::fs::read_to_string(&key)? };
        return Ok((std::fs::read_to_string(&ca)?, cert));
    }
    let Some(token) = &args.token else { bail!("this node has not joined yet: pass --token (from `keelson token create --usage node`)") };
    let token = keelson_pki::JoinToken::parse(token).map_err(|e| anyhow::anyhow!("--token: {e}"))?;
    let join = keelson_apiserver::join_client::join_node(&args.servers[0], &token, name).await.with_context(|| format!("joining {} as node {name}", args.servers[0]))?;
    std::fs::create_dir_all(&pki)?;
    std::fs::write(&ca, &join.ca_cert)?;
    let cert = keelson_pki::IssuedCert { cert_pem: join.client_cert, key_pem: join.client_key };
    cert.save(&pki, "node")?;
    Ok((join.ca_cert, cert))
}

pub async fn agent(args: AgentArgs) -> anyhow::Result<()> {
    let name = match &args.name {
        Some(n) => n.clone(),
        None => std::fs::read_to_string("/etc/hostname").map(|h| h.trim().to_string()).unwrap_or_default(),
    };
    if name.is_empty() {
        bail!("no node name: pass --name");
    }
    std::fs::create_dir_all(&args.data_dir).with_context(|| format!("creating {}", args.data_dir.display()))?;
    let data_dir = std::fs::canonicalize(&args.data_dir)?;
    let servers: Vec<SocketAddr> = args.servers.iter().map(|s| host_port(s)).collect::<anyhow::Result<_>>()?;
    let given = args.node_ip.unwrap_or_default();
    let node_ip6 = given.v6;
    let node_ip = match given.v4 {
        Some(ip) => ip,
        None => local_ip_towards(servers[0])?,
    };
    let (ca, cert) = credentials(&args, &name).await?;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("a SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        stop.cancel();
    });
    // The API connection outlives the agent's shutdown, so the agent's last words (the
    // ingress ports it no longer serves) still reach the API.
    let balancer_stop = tokio_util::sync::CancellationToken::new();
    let _balancer_stopped = balancer_stop.clone().drop_guard();
    let balancer = keelson_component::balancer::ApiBalancer::start(servers, &ca, Default::default(), balancer_stop.clone()).await?;
    let user = format!("system:node:{name}");
    let (client, _) = keelson_component::client::config_for(&balancer.url(), &ca, &user, &cert).await?;

    let simulated = args.runtime == RuntimeKind::Simulated;
    let (containerd, runtime): (Option<Containerd>, Arc<dyn keelson_agent::runtime::Runtime>) = if simulated {
        eprintln!("SIMULATED node {name}: no containers run here; pods are reported from the simulated runtime");
        (None, Arc::new(SimulatedRuntime::new(node_ip)))
    } else {
        let (containerd, socket) = start_containerd(&args, &data_dir).await?;
        (containerd, Arc::new(CriRuntime::connect(&socket)?))
    };
    let cfg = AgentConfig {
        node_name: name.clone(),
        node_ip,
        node_ip6,
        data_dir: data_dir.clone(),
        max_pods: args.max_pods,
        heartbeat: args.heartbeat,
        pod_cidr: args.pod_cidr.clone(),
        dns_servers: args.cluster_dns.clone(),
        manage_routes: !args.no_routes && !simulated,
        stop_pods_on_exit: args.stop_pods_on_exit,
        with_portmap: !simulated && Path::new("/usr/lib/cni/portmap").exists() && which("iptables"),
        kubelet_port: args.kubelet_port,
        ca_pem: ca.clone(),
        eviction: args.eviction_hard.clone(),
        ingress_http_port: args.ingress_http_port,
        ingress_https_port: args.ingress_https_port,
        node_services: !simulated,
        injected_bug: args.inject_bug,
    };
    if let Some(bug) = args.inject_bug {
        eprintln!("WARNING: node {name} runs with the injected bug {bug:?} (a test of the self-heal checker)");
    }
    eprintln!("node {name} ({node_ip}) running; Ctrl-C stops the agent{}", if args.stop_pods_on_exit { " and its pods" } else { " (pods keep running)" });
    let result = keelson_agent::agent::run(client, runtime, cfg, shutdown).await;
    if let Some(c) = containerd {
        c.stop().await;
    }
    result?;
    Ok(())
}

/// The node's containerd (started here unless `--containerd-socket` names one) with
/// the built-in and `DATA_DIR/images/` archives imported: it and its CRI socket.
async fn start_containerd(args: &AgentArgs, data_dir: &Path) -> anyhow::Result<(Option<Containerd>, PathBuf)> {
    let layout = ContainerdLayout::new(data_dir, images::PAUSE_IMAGE);
    let (containerd, socket) = match &args.containerd_socket {
        Some(s) => (None, s.clone()),
        None => {
            let c = Containerd::start(&args.containerd, layout.clone()).await?;
            let s = c.layout.socket();
            (Some(c), s)
        }
    };
    let image_dir = data_dir.join("images");
    if args.busybox.exists() {
        images::ensure_builtin_archives(&args.busybox, &image_dir)?;
    } else {
        tracing::warn!(busybox = %args.busybox.display(), "no static busybox: the built-in images (and the sandbox image) are not created");
    }
    for archive in images::archives_in(&image_dir) {
        images::import(&socket, &archive).await?;
        tracing::info!(archive = %archive.display(), "image imported");
    }
    Ok((containerd, socket))
}

fn which(bin: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(bin).exists()))
}

#[derive(Subcommand)]
pub enum ImageCmd {
    /// Build the busybox image (`keelson.local/busybox:stable`) from the host's static busybox.
    Build(ImageBuildArgs),
    /// Import an OCI or docker image archive into nodes' containerd.
    Import(ImageImportArgs),
}

#[derive(Args)]
pub struct ImageBuildArgs {
    /// Where to write the archive.
    #[arg(long)]
    out: PathBuf,
    #[arg(long, default_value = images::BUSYBOX_IMAGE)]
    reference: String,
    #[arg(long, default_value = "/bin/busybox")]
    busybox: PathBuf,
}

#[derive(Args)]
pub struct ImageImportArgs {
    archive: PathBuf,
    /// The data directory of a node on this host (repeat for several).
    #[arg(long = "node-dir", required = true)]
    node_dirs: Vec<PathBuf>,
}

pub async fn image(cmd: ImageCmd) -> anyhow::Result<()> {
    match cmd {
        ImageCmd::Build(a) => {
            let digest = images::busybox_archive(&a.busybox, &a.reference, &[], &["sh"], &a.out)?;
            println!("{} {} {digest}", a.out.display(), a.reference);
        }
        ImageCmd::Import(a) => {
            for dir in &a.node_dirs {
                let socket = ContainerdLayout::new(dir, images::PAUSE_IMAGE).socket();
                images::import(&socket, &a.archive).await.with_context(|| format!("node {}", dir.display()))?;
                // Kept in the node's image folder too, so it is there again after a restart.
                let keep = dir.join("images").join(a.archive.file_name().unwrap_or_default());
                std::fs::create_dir_all(dir.join("images"))?;
                std::fs::copy(&a.archive, &keep)?;
                println!("imported {} into {}", a.archive.display(), dir.display());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_ip_takes_one_address_or_one_of_each_family() {
        let v4: Ipv4Addr = "192.0.2.5".parse().unwrap();
        let v6: Ipv6Addr = "fd00::5".parse().unwrap();
        assert_eq!(parse_node_ips("192.0.2.5"), Ok(NodeIps { v4: Some(v4), v6: None }));
        assert_eq!(parse_node_ips("192.0.2.5,fd00::5"), Ok(NodeIps { v4: Some(v4), v6: Some(v6) }));
        assert_eq!(parse_node_ips("fd00::5, 192.0.2.5"), Ok(NodeIps { v4: Some(v4), v6: Some(v6) }));
        assert_eq!(parse_node_ips("fd00::5"), Ok(NodeIps { v4: None, v6: Some(v6) }));
        for bad in ["192.0.2.5,192.0.2.6", "fd00::1,fd00::2", "192.0.2.5,fd00::5,10.0.0.1", "node-1", ""] {
            assert!(parse_node_ips(bad).is_err(), "{bad}");
        }
    }
}
