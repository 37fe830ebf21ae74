//! `keelson up`, `member`, `kv`, and the servers a command talks to ([`Target`]).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use futures::StreamExt;
use keelson_client::api::{ReadConsistency, WatchCreate, WatchResponseKind};
use keelson_client::StoreClient;
use keelson_runner::{Cluster, ClusterSpec, Isolation, Manifest};
use tokio_util::sync::CancellationToken;
use keelson_mvcc::{KeyRange, RangeRequest};

const DEFAULT_CLUSTER_DIR: &str = "keelson-cluster";

#[derive(Args)]
pub struct UpArgs {
    /// Number of server processes (3 or 5 for a fault-tolerant cluster).
    #[arg(long, default_value_t = 3)]
    servers: usize,
    /// Number of nodes: as root, real nodes (`keelson agent` and its containerd, each in a
    /// network namespace of the cluster's own); otherwise hollow (simulated) nodes.
    #[arg(long, default_value_t = 0)]
    agents: usize,
    /// Directory of the cluster: one data directory per member, cluster.json, kubeconfig.
    /// Running `up` again on it resumes the cluster.
    #[arg(long, default_value = DEFAULT_CLUSTER_DIR)]
    data_dir: PathBuf,
    /// Loopback only: first port (server i listens on base+i, metrics on base+100+i, the
    /// API on base+200+i); 0 picks free ports.
    #[arg(long, default_value_t = 23790)]
    base_port: u16,
    /// As root: give the members and pods IPv6 addresses too (unique local networks of
    /// the cluster's own), so every node has an IPv4 and an IPv6 InternalIP and podCIDR
    /// and dual-stack Services reach pods on every node.
    #[arg(long)]
    dual_stack: bool,
}

pub async fn up(args: UpArgs, log: &crate::logging::LogArgs, traces: &crate::telemetry::TraceArgs) -> anyhow::Result<()> {
    if args.servers == 0 || args.servers > 9 {
        bail!("--servers must be between 1 and 9 (3 or 5 for fault tolerance), got {}", args.servers);
    }
    if args.agents > 50 {
        bail!("--agents must be at most 50, got {}", args.agents);
    }
    let root = keelson_runner::cmd::is_root();
    if args.dual_stack && !root {
        bail!("--dual-stack needs root: the IPv6 networks are made in network namespaces of the cluster's own");
    }
    let isolation = if root { Isolation::Netns } else { Isolation::Loopback };
    if !root {
        eprintln!("keelson up: NOT ROOT: cannot create network namespaces or run containerd, so there are no real nodes;");
        eprintln!("keelson up: starting the servers on loopback{}", if args.agents > 0 { format!(" with {} HOLLOW nodes (simulated: pods are never run)", args.agents) } else { String::new() });
    }
    let spec = ClusterSpec {
        servers: args.servers,
        nodes: if root { args.agents } else { 0 },
        binary: std::env::current_exe().context("locating the keelson binary")?,
        dir: args.data_dir.clone(),
        isolation,
        // The servers and agents log, and export spans, as `up` was asked to.
        server_args: [log.to_argv(), traces.to_argv()].concat(),
        node_args: [log.to_argv(), traces.to_argv()].concat(),
        base_port: args.base_port,
        dual_stack: args.dual_stack,
    };
    let mut cluster = Cluster::start(spec, |msg| println!("keelson up: {msg}")).await?;
    let shutdown = CancellationToken::new();
    let hollow = if !root && args.agents > 0 {
        let client = crate::cli_hollow::kube_client(&cluster.kubeconfig_path()).await?;
        let cfg = keelson_agent::hollow::HollowConfig::new("hollow", args.agents);
        Some(tokio::spawn(keelson_agent::hollow::run(client, cfg, shutdown.clone())))
    } else {
        None
    };
    print_ready(&cluster, hollow.is_some().then_some(args.agents));
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    // A server or agent that exits by itself is started again, as systemd would.
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let members = cluster.server_count() + cluster.node_count();
    let mut supervisor = keelson_runner::Supervisor::new(keelson_runner::RestartPolicy::default(), members, std::time::Instant::now());
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = interrupt.recv() => break,
            _ = term.recv() => break,
            _ = tick.tick() => {
                for event in cluster.supervise(&mut supervisor, std::time::Instant::now()) {
                    println!("keelson up: {event}");
                }
            }
        }
    }
    let (nodes, netns) = (cluster.node_count() > 0, cluster.host_addr().is_some());
    println!("keelson up: stopping{}", if nodes { " (nodes stop their pods first)" } else { "" });
    shutdown.cancel();
    if let Some(h) = hollow {
        let _ = h.await;
    }
    cluster.stop(Duration::from_secs(20)).await?;
    println!("keelson up: stopped{}", if netns { "; namespaces, veths and routes removed" } else { "" });
    Ok(())
}

fn print_ready(cluster: &Cluster, hollow: Option<usize>) {
    let m = cluster.manifest();
    println!();
    println!("Cluster ready ({} servers, {} nodes). Members:", cluster.server_count(), hollow.unwrap_or(cluster.node_count()));
    for s in m.servers() {
        println!("  {:<10} store/raft {}   API https://{}   metrics http://{}/metrics   log {}", s.name, s.raft_addr, s.api_addr, s.metrics_addr, s.log.display());
    }
    for n in m.nodes() {
        let addrs = if n.addr6.is_empty() { n.addr.clone() } else { format!("{},{}", n.addr, n.addr6) };
        println!("  {:<10} node {}   pods {}   namespace {}   log {}", n.name, addrs, n.pod_cidr, n.netns.as_deref().unwrap_or("-"), n.log.display());
    }
    if let Some(n) = hollow {
        println!("  hollow-0 … hollow-{}   simulated nodes (no containers)", n.saturating_sub(1));
    }
    if let Some(host) = cluster.host_addr() {
        println!("This shell reaches members and pods through {host} on {} (routes to every node's pods).", keelson_runner::topology::host_veth(cluster.run_id()));
    }
    println!("State: {}   (cluster.json lists every member: kind, pid, addresses, data directory)", cluster.dir().display());
    println!("kubectl: export KUBECONFIG={}   (contexts keelson-1 … keelson-{})", cluster.kubeconfig_path().display(), cluster.server_count());
    if cluster.node_count() > 0 {
        println!("Try:   kubectl create deployment web --image=keelson.local/busybox:stable --replicas=2 -- httpd -f -p 80 -h /www");
        println!("       kubectl get pods -o wide; curl http://<pod IP>/");
    }
    println!("Stop:  Ctrl-C (running `keelson up` again on the same --data-dir resumes)");
}

#[derive(Args)]
pub struct Target {
    /// A server's `host:port`.
    #[arg(long)]
    server: Option<String>,
    /// A `keelson up` directory; its cluster.json gives the servers.
    #[arg(long)]
    cluster_dir: Option<PathBuf>,
    /// The cluster PKI directory holding ca.crt and admin.crt/admin.key (default:
    /// CLUSTER_DIR/pki, or keelson-data/pki with --server).
    #[arg(long)]
    pki_dir: Option<PathBuf>,
}

impl Target {
    /// The servers' store addresses: `--server`, else those of the cluster directory.
    pub(crate) fn endpoints(&self) -> anyhow::Result<Vec<String>> {
        if let Some(s) = &self.server {
            return Ok(vec![s.clone()]);
        }
        let dir = self.cluster_dir.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_CLUSTER_DIR));
        let path = dir.join("cluster.json");
        match std::fs::read(&path) {
            Ok(bytes) => {
                let m: Manifest = serde_json::from_slice(&bytes).with_context(|| format!("reading {}", path.display()))?;
                Ok(m.servers().map(|s| s.raft_addr.clone()).collect())
            }
            Err(_) if self.cluster_dir.is_none() => Ok(vec!["127.0.0.1:2380".into()]),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }

    /// The admin identity for the servers' mutual TLS, if the PKI directory has one.
    pub(crate) fn tls(&self) -> anyhow::Result<Option<keelson_client::PeerTls>> {
        let dir = match (&self.pki_dir, &self.cluster_dir, &self.server) {
            (Some(p), _, _) => p.clone(),
            (None, Some(c), _) => c.join("pki"),
            (None, None, Some(_)) => PathBuf::from("keelson-data").join("pki"),
            (None, None, None) => PathBuf::from(DEFAULT_CLUSTER_DIR).join("pki"),
        };
        Ok(keelson_client::tls::admin_tls(&dir)?)
    }

    /// The admin kubeconfig: `explicit`, else the cluster directory's (with `--server`
    /// alone, `$KUBECONFIG` if set).
    pub(crate) fn kubeconfig(&self, explicit: Option<&std::path::Path>) -> Option<PathBuf> {
        if let Some(p) = explicit {
            return Some(p.to_path_buf());
        }
        match (&self.cluster_dir, &self.server) {
            (Some(dir), _) => Some(dir.join("kubeconfig")),
            (None, Some(_)) => std::env::var_os("KUBECONFIG").map(PathBuf::from),
            (None, None) => Some(PathBuf::from(DEFAULT_CLUSTER_DIR).join("kubeconfig")),
        }
    }

    /// A client over every server, starting at the first that answers (so a command
    /// works while some servers, the first listed included, are down).
    pub(crate) async fn client(&self) -> anyhow::Result<StoreClient> {
        let endpoints = self.endpoints()?;
        let base = StoreClient::with_transport(&endpoints, self.tls()?.as_ref())?;
        for i in 0..endpoints.len() {
            let c = base.starting_at(i);
            if matches!(tokio::time::timeout(Duration::from_secs(2), c.status()).await, Ok(Ok(_))) {
                return Ok(c);
            }
        }
        Ok(base)
    }
}

#[derive(Subcommand)]
pub enum MemberCmd {
    /// List members.
    List(Target),
    /// Remove a member by its hex id (see `keelson status`).
    Remove {
        #[command(flatten)]
        target: Target,
        id: String,
    },
}

pub async fn member(cmd: MemberCmd) -> anyhow::Result<()> {
    match cmd {
        MemberCmd::List(t) => {
            let l = t.client().await?.member_list().await?;
            for m in l.members {
                let lead = if Some(m.id) == l.leader { " (leader)" } else { "" };
                println!("{:x} {} {} {}{}", m.id, m.name, m.addr, if m.voter { "voter" } else { "learner" }, lead);
            }
        }
        MemberCmd::Remove { target, id } => {
            let id = u64::from_str_radix(id.trim_start_matches("0x"), 16).with_context(|| format!("{id} is not a hex member id"))?;
            let l = target.client().await?.member_remove(id).await?;
            println!("removed {id:x}; {} members remain", l.members.len());
        }
    }
    Ok(())
}

#[derive(Subcommand)]
pub enum KvCmd {
    Get {
        #[command(flatten)]
        target: Target,
        key: String,
        /// Treat KEY as a prefix.
        #[arg(long)]
        prefix: bool,
        /// Local (possibly stale) read.
        #[arg(long)]
        serializable: bool,
    },
    Put {
        #[command(flatten)]
        target: Target,
        key: String,
        value: String,
    },
    Del {
        #[command(flatten)]
        target: Target,
        key: String,
    },
    Watch {
        #[command(flatten)]
        target: Target,
        key: String,
        #[arg(long)]
        prefix: bool,
        /// First revision to show (default: from now).
        #[arg(long, default_value_t = 0)]
        rev: i64,
    },
}

pub async fn kv(cmd: KvCmd) -> anyhow::Result<()> {
    match cmd {
        KvCmd::Get { target, key, prefix, serializable } => {
            let range = if prefix { KeyRange::prefix(key) } else { KeyRange::single(key) };
            let consistency = if serializable { ReadConsistency::Serializable } else { ReadConsistency::Linearizable };
            let r = target.client().await?.range(RangeRequest { range, ..Default::default() }, consistency).await?;
            for kv in r.response.kvs {
                println!(
                    "{} = {} (mod {}, create {}, version {})",
                    String::from_utf8_lossy(&kv.key),
                    String::from_utf8_lossy(&kv.value),
                    kv.mod_revision,
                    kv.create_revision,
                    kv.version
                );
            }
            eprintln!("revision {}", r.header.revision);
        }
        KvCmd::Put { target, key, value } => {
            let r = target.client().await?.put(key.as_bytes(), value.as_bytes()).await?;
            println!("revision {}", r.header.revision);
        }
        KvCmd::Del { target, key } => {
            let r = target.client().await?.delete(KeyRange::single(key)).await?;
            println!("revision {}", r.header.revision);
        }
        KvCmd::Watch { target, key, prefix, rev } => {
            let range = if prefix { KeyRange::prefix(key) } else { KeyRange::single(key) };
            let create = WatchCreate { watch_id: 1, range, start_revision: rev, prev_kv: false, progress_notify: true };
            let (_tx, mut stream) = target.client().await?.watch(create).await?;
            while let Some(msg) = stream.next().await {
                let msg = msg?;
                match msg.kind {
                    WatchResponseKind::Events(events) => {
                        for e in events {
                            println!("{:?} {} = {} @{}", e.kind, String::from_utf8_lossy(&e.kv.key), String::from_utf8_lossy(&e.kv.value), e.kv.mod_revision);
                        }
                    }
                    other => eprintln!("{other:?} @{}", msg.header.revision),
                }
            }
        }
    }
    Ok(())
}
