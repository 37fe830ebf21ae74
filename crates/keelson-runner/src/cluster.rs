//! [`Cluster`]: sets the topology up, starts (or resumes) the members, stops and cleans up.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keelson_client::{PeerTls, StoreClient};

use crate::cleanup::{self, lock, CleanupHandle, CleanupState};
use crate::manifest::{self, Manifest, MemberEntry, MemberKind};
use crate::netns::{self, Subnets};
use crate::process::Process;
use crate::{cmd, topology, ClusterSpec, Isolation, RunnerError};

/// Bound on bringing the servers up.
const SERVERS_TIMEOUT: Duration = Duration::from_secs(60);
/// Bound on the nodes' Ready (each starts containerd and imports its images).
const NODES_TIMEOUT: Duration = Duration::from_secs(120);
/// Ports of a server in its own namespace (each has its own address).
const NETNS_RAFT_PORT: u16 = 2380;
const NETNS_METRICS_PORT: u16 = 2381;
const NETNS_API_PORT: u16 = 6443;

/// A running cluster. Dropping it without [`Cluster::stop`] kills the members and
/// deletes the namespaces synchronously (best effort).
pub struct Cluster {
    pub(crate) spec: ClusterSpec,
    pub(crate) mode: Isolation,
    pub(crate) run_id: String,
    pub(crate) started: Instant,
    pub(crate) manifest: Manifest,
    /// One per member, in manifest order.
    pub(crate) procs: Vec<Process>,
    /// The member's data directory was wiped: its next start must `--join`.
    pub(crate) needs_join: Vec<bool>,
    /// Raft member ids of the servers, once known.
    pub(crate) ids: Vec<Option<u64>>,
    pub(crate) state: Arc<Mutex<CleanupState>>,
    /// The admin identity for the servers' mutual TLS.
    pub(crate) tls: PeerTls,
    /// The node join token (`DIR/node-token`), once made.
    pub(crate) node_token: Option<String>,
}

pub(crate) fn loud(run: &str, msg: &str) {
    eprintln!("[keelson-runner kc{run}] {msg}");
}

impl Cluster {
    /// Removes stale runs' leftovers, sets the topology up, starts (or, when `spec.dir`
    /// holds `cluster.json`, resumes) the servers and returns once every one is a voter,
    /// all agree on a leader and serve the API, and every node is Ready — or fails,
    /// cleaning up what it created. `progress` hears each step.
    pub async fn start(spec: ClusterSpec, mut progress: impl FnMut(&str)) -> Result<Cluster, RunnerError> {
        let started = Instant::now();
        match tokio::task::spawn_blocking(cleanup::cleanup_stale).await {
            Ok(Ok(0)) => {}
            Ok(Ok(n)) => eprintln!("[keelson-runner] removed {n} leftover(s) of earlier runs"),
            Ok(Err(e)) => eprintln!("[keelson-runner] WARNING: could not remove every leftover of earlier runs: {e}"),
            Err(e) => eprintln!("[keelson-runner] WARNING: stale cleanup task failed: {e}"),
        }
        if !spec.binary.is_file() {
            return Err(RunnerError::NotReady(format!(
                "keelson binary {} does not exist (run `cargo build -p keelson` first)",
                spec.binary.display()
            )));
        }
        std::fs::create_dir_all(&spec.dir).map_err(RunnerError::io(spec.dir.display().to_string()))?;
        let resumed = Manifest::load(&spec.dir)?;
        let fresh = resumed.is_none();
        let asked = match &resumed {
            Some(m) if m.topology == "netns" => Isolation::Netns,
            Some(_) => Isolation::Loopback,
            None => spec.isolation,
        };
        let (servers, nodes) = match &resumed {
            Some(m) => (m.servers().count(), m.nodes().count()),
            None => (spec.servers, spec.nodes),
        };
        if servers == 0 || servers + nodes > 200 {
            return Err(RunnerError::Cluster(format!("a cluster has 1 to 200 members and at least one server, not {servers} servers and {nodes} nodes")));
        }
        let mode = resolve_isolation(asked, nodes)?;
        let run_id = fresh_run_id();
        let n = servers + nodes;
        let mut state = CleanupState { run_id: run_id.clone(), pids: vec![None; n], ..Default::default() };
        state.write_owner()?;
        let state = Arc::new(Mutex::new(state));
        cleanup::register(&state);
        let want = resumed.as_ref().and_then(|m| Some(Subnets { members: m.subnet?, pods: m.pod_net?, v6: m.subnet6.zip(m.pod_net6) }));
        if spec.dual_stack && resumed.is_none() && mode != Isolation::Netns {
            let _ = lock(&state).cleanup_sync();
            return Err(RunnerError::Unsupported("a dual-stack cluster needs the namespace topology (root)".into()));
        }
        let subnets = match mode {
            Isolation::Netns => Some(netns::setup(&run_id, n, want, spec.dual_stack, &state).await.inspect_err(|_| {
                let _ = lock(&state).cleanup_sync();
            })?),
            _ => None,
        };
        // Whatever fails from here until the cluster exists removes what setup made.
        let prepare = || -> Result<(Manifest, PeerTls), RunnerError> {
            let manifest = match resumed {
                Some(mut m) => {
                    progress(&format!("resuming the cluster in {} ({} servers, {} nodes)", spec.dir.display(), servers, nodes));
                    m.run_id = run_id.clone();
                    for (j, e) in m.members.iter_mut().enumerate() {
                        e.netns = subnets.map(|_| topology::member_ns(&run_id, j));
                        e.pid = None;
                        e.running = false;
                    }
                    m
                }
                None => fresh_manifest(&spec, &run_id, subnets)?,
            };
            {
                let mut st = lock(&state);
                st.node_dirs = manifest.nodes().map(|e| e.data_dir.clone()).collect();
                st.write_owner()?;
            }
            let tls = manifest::write_kubeconfig(&spec.dir, &manifest)?;
            Ok((manifest, tls))
        };
        let (manifest, tls) = match prepare() {
            Ok(x) => x,
            Err(e) => {
                let _ = lock(&state).cleanup_sync();
                return Err(e);
            }
        };
        let procs = manifest
            .members
            .iter()
            .map(|e| Process { name: e.name.clone(), ns: e.netns.clone(), log: e.log.clone(), child: None, paused: false })
            .collect();
        let node_token = std::fs::read_to_string(spec.dir.join("node-token")).ok().map(|t| t.trim().to_string());
        let mut c = Cluster {
            spec,
            mode,
            run_id: run_id.clone(),
            started,
            manifest,
            procs,
            needs_join: vec![false; n],
            ids: vec![None; n],
            state,
            tls,
            node_token,
        };
        c.save()?;
        if let Some(s) = subnets {
            loud(
                &run_id,
                &format!(
                    "namespaces: bridge {}, host {} on {}, members {}..{} in kc{run_id}-n0..n{}, pods {}/16",
                    topology::bridge_ns(&run_id),
                    topology::host_addr(s.members),
                    topology::host_veth(&run_id),
                    topology::member_addr(s.members, 0),
                    topology::member_addr(s.members, n - 1),
                    n - 1,
                    s.pods
                ),
            );
        } else {
            loud(&run_id, "LOOPBACK topology: servers on 127.0.0.1; no nodes, no network faults");
        }
        c.bring_up(fresh, &mut progress).await?;
        loud(&c.run_id, &format!("cluster ready in {:.1?}", c.started.elapsed()));
        Ok(c)
    }

    async fn bring_up(&mut self, fresh: bool, progress: &mut impl FnMut(&str)) -> Result<(), RunnerError> {
        let deadline = Instant::now() + SERVERS_TIMEOUT;
        let servers = self.server_count();
        if fresh {
            self.spawn(0, &["--cluster-init".to_string()])?;
            progress(&format!("started {} (initializing the cluster)", self.manifest.members[0].name));
            let seed = self.manifest.members[0].raft_addr.clone();
            for i in 1..servers {
                self.wait_voters(i, deadline).await?;
                self.spawn(i, &["--join".to_string(), seed.clone()])?;
                progress(&format!("started {} (joining via {seed})", self.manifest.members[i].name));
            }
            self.wait_voters(servers, deadline).await?;
        } else {
            for i in 0..servers {
                self.spawn(i, &[])?;
            }
        }
        self.wait_healthy(deadline.saturating_duration_since(Instant::now())).await?;
        for (i, st) in crate::readiness::statuses(self.live_servers(), self.tls.clone()).await {
            self.ids[i] = st.map(|s| s.id);
        }
        self.wait_api(deadline.saturating_duration_since(Instant::now())).await?;
        progress("all servers are voters and serve the Kubernetes API");
        if self.node_count() == 0 {
            return Ok(());
        }
        if self.node_token.is_none() {
            self.node_token = Some(self.create_node_token().await?);
        }
        for k in 0..self.node_count() {
            let j = servers + k;
            let e = self.manifest.members[j].clone();
            if let Some(subnet) = self.manifest.subnet {
                let v6 = self.manifest.subnet6.map(|net| topology::member_addr6(net, j));
                for cidr in e.pod_cidr.split(',').filter(|c| !c.is_empty()) {
                    let via = match v6 {
                        Some(v6) if cidr.contains(':') => v6.into(),
                        _ => topology::member_addr(subnet, j).into(),
                    };
                    netns::route_pods(&self.run_id, cidr, via).await?;
                }
            }
            self.start_member(j)?;
            progress(&format!("started {} ({}, pods {})", e.name, e.addr, e.pod_cidr));
        }
        self.wait_nodes_ready(NODES_TIMEOUT).await?;
        progress(&format!("{} node(s) Ready", self.node_count()));
        Ok(())
    }

    /// `keelson token create --usage node` against the cluster; kept in `DIR/node-token`.
    async fn create_node_token(&self) -> Result<String, RunnerError> {
        let argv = vec![
            self.spec.binary.display().to_string(),
            "token".into(),
            "create".into(),
            "--usage".into(),
            "node".into(),
            "--kubeconfig".into(),
            self.kubeconfig_path().display().to_string(),
        ];
        let out = cmd::run_async(argv, None, Duration::from_secs(30)).await?;
        let token = out.trim().lines().last().unwrap_or_default().trim().to_string();
        if token.is_empty() {
            return Err(RunnerError::Cluster("`keelson token create` printed no token".into()));
        }
        let path = self.spec.dir.join("node-token");
        std::fs::write(&path, &token).map_err(RunnerError::io(path.display().to_string()))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).map_err(RunnerError::io(path.display().to_string()))?;
        Ok(token)
    }

    /// Rewrites `cluster.json` and the owner file from the processes' state.
    pub(crate) fn save(&mut self) -> Result<(), RunnerError> {
        for (e, p) in self.manifest.members.iter_mut().zip(&self.procs) {
            e.pid = p.pid().filter(|pid| cmd::alive(*pid));
            e.running = e.pid.is_some();
        }
        {
            let mut st = lock(&self.state);
            st.pids = self.manifest.members.iter().map(|e| e.pid).collect();
            if !st.done {
                st.write_owner()?;
            }
        }
        self.manifest.save(&self.spec.dir)
    }

    pub fn dir(&self) -> &Path {
        &self.spec.dir
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The kubeconfig with one context per server (`keelson-1` …).
    pub fn kubeconfig_path(&self) -> PathBuf {
        self.spec.dir.join("kubeconfig")
    }

    /// The cluster CA directory (`ca.crt`, `ca.key`, the admin identity).
    pub fn pki_dir(&self) -> PathBuf {
        self.spec.dir.join("pki")
    }

    /// The admin identity the servers' store port accepts (mutual TLS).
    pub fn tls(&self) -> &PeerTls {
        &self.tls
    }

    /// Store (gRPC) endpoints of every server, in order.
    pub fn endpoints(&self) -> Vec<String> {
        self.manifest.servers().map(|s| s.raft_addr.clone()).collect()
    }

    /// The Kubernetes API address (`ip:port`, HTTPS) of every server.
    pub fn api_endpoints(&self) -> Vec<String> {
        self.manifest.servers().map(|s| s.api_addr.clone()).collect()
    }

    /// A store client over every server, as the cluster admin.
    pub fn client(&self) -> StoreClient {
        StoreClient::with_tls(&self.endpoints(), &self.tls).expect("manifest endpoints are valid")
    }

    /// Servers are members `0..server_count()`.
    pub fn server_count(&self) -> usize {
        self.manifest.servers().count()
    }

    /// Nodes are members `server_count()..`.
    pub fn node_count(&self) -> usize {
        self.manifest.nodes().count()
    }

    /// The resolved topology: [`Isolation::Netns`] or [`Isolation::Loopback`].
    pub fn isolation(&self) -> Isolation {
        self.mode
    }

    /// This run's id: namespaces are `kc<id>-br` and `kc<id>-n<j>`.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The host's address on the bridge (namespace topology).
    pub fn host_addr(&self) -> Option<Ipv4Addr> {
        self.manifest.host_addr
    }

    /// The network namespaces of this run (empty on loopback).
    pub fn namespaces(&self) -> Vec<String> {
        lock(&self.state).namespaces.clone()
    }

    /// A handle that cleans this run up synchronously from anywhere (e.g. a signal handler).
    pub fn cleanup_handle(&self) -> CleanupHandle {
        CleanupHandle(self.state.clone())
    }

    /// Stops every member (nodes first, so they stop their pods while the API is there)
    /// with SIGTERM, SIGKILL after `grace`, then deletes the run's namespaces, veths and
    /// routes. The data directories and `cluster.json` stay: starting on the directory
    /// again resumes the cluster. Fails with what could not be removed.
    pub async fn stop(mut self, grace: Duration) -> Result<(), RunnerError> {
        let servers = self.server_count();
        let (server_procs, node_procs) = self.procs.split_at_mut(servers);
        futures::future::join_all(node_procs.iter_mut().map(|p| p.stop(grace))).await;
        futures::future::join_all(server_procs.iter_mut().map(|p| p.stop(grace))).await;
        self.save()?;
        let handle = self.cleanup_handle();
        let result = tokio::task::spawn_blocking(move || handle.cleanup_now())
            .await
            .map_err(|e| RunnerError::Io { context: "cleanup task".into(), source: std::io::Error::other(e.to_string()) })?;
        match &result {
            Ok(()) => loud(&self.run_id, "stopped: members stopped, the run cleaned up"),
            Err(e) => loud(&self.run_id, &format!("STOP INCOMPLETE: {e}")),
        }
        result
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if lock(&self.state).done {
            return;
        }
        loud(&self.run_id, "cluster dropped without stop: killing members and deleting namespaces");
        for p in self.procs.iter_mut() {
            p.kill_sync();
        }
        for p in lock(&self.state).cleanup_sync() {
            loud(&self.run_id, &format!("CLEANUP PROBLEM: {p}"));
        }
    }
}

/// The members of a new cluster: servers `keelson-1…`, then nodes `node-1…`.
fn fresh_manifest(spec: &ClusterSpec, run_id: &str, subnets: Option<Subnets>) -> Result<Manifest, RunnerError> {
    let port = |i: usize, offset: u16| -> Result<u16, RunnerError> {
        if spec.base_port == 0 {
            crate::free_loopback_port().map_err(RunnerError::io("choosing a loopback port"))
        } else {
            Ok(spec.base_port + offset + i as u16 + 1)
        }
    };
    let mut members = Vec::new();
    for j in 0..spec.servers + spec.nodes {
        let server = j < spec.servers;
        let name = if server { format!("keelson-{}", j + 1) } else { format!("node-{}", j - spec.servers + 1) };
        let (addr, raft_addr, metrics_addr, api_addr) = match (subnets, server) {
            (Some(s), _) => {
                let ip = topology::member_addr(s.members, j);
                (ip.to_string(), format!("{ip}:{NETNS_RAFT_PORT}"), format!("{ip}:{NETNS_METRICS_PORT}"), format!("{ip}:{NETNS_API_PORT}"))
            }
            (None, true) => (
                "127.0.0.1".to_string(),
                format!("127.0.0.1:{}", port(j, 0)?),
                format!("127.0.0.1:{}", port(j, 100)?),
                format!("127.0.0.1:{}", port(j, 200)?),
            ),
            (None, false) => return Err(RunnerError::Unsupported("nodes need the namespace topology".into())),
        };
        let (raft_addr, metrics_addr, api_addr) = if server { (raft_addr, metrics_addr, api_addr) } else { Default::default() };
        let pod_cidr = match subnets {
            Some(Subnets { pods, v6: Some((_, pods6)), .. }) if !server => {
                format!("{},{}", topology::pod_cidr(pods, j - spec.servers), topology::pod_cidr6(pods6, j - spec.servers))
            }
            Some(s) if !server => topology::pod_cidr(s.pods, j - spec.servers),
            _ => String::new(),
        };
        let addr6 = subnets.and_then(|s| s.v6).map(|(members6, _)| topology::member_addr6(members6, j).to_string()).unwrap_or_default();
        members.push(MemberEntry {
            data_dir: spec.dir.join(&name),
            log: spec.dir.join(format!("{name}.log")),
            name,
            kind: if server { MemberKind::Server } else { MemberKind::Node },
            pid: None,
            running: false,
            netns: subnets.map(|_| topology::member_ns(run_id, j)),
            addr,
            addr6,
            raft_addr,
            api_addr,
            metrics_addr,
            pod_cidr,
        });
    }
    Ok(Manifest {
        topology: if subnets.is_some() { "netns" } else { "loopback" }.into(),
        run_id: run_id.into(),
        subnet: subnets.map(|s| s.members),
        pod_net: subnets.map(|s| s.pods),
        host_addr: subnets.map(|s| topology::host_addr(s.members)),
        subnet6: subnets.and_then(|s| s.v6).map(|(m, _)| m),
        pod_net6: subnets.and_then(|s| s.v6).map(|(_, p)| p),
        members,
    })
}

/// Netns when asked (or, for Auto, when it works), else Loopback; announced on stderr.
fn resolve_isolation(asked: Isolation, nodes: usize) -> Result<Isolation, RunnerError> {
    let netns = || netns::probe().map_err(|why| RunnerError::Unsupported(format!("the namespace topology: {why}")));
    match asked {
        Isolation::Loopback if nodes > 0 => Err(RunnerError::Unsupported("nodes need the namespace topology (root)".into())),
        Isolation::Loopback => Ok(Isolation::Loopback),
        Isolation::Netns => netns().map(|_| Isolation::Netns),
        Isolation::Auto => match netns::probe() {
            Ok(()) => {
                eprintln!("[keelson-runner] Isolation::Auto -> Netns (root; `ip netns`, `nsenter` and `nft` respond)");
                Ok(Isolation::Netns)
            }
            Err(why) if nodes > 0 => Err(RunnerError::Unsupported(format!("nodes need the namespace topology: {why}"))),
            Err(why) => {
                eprintln!("[keelson-runner] WARNING: Isolation::Auto -> LOOPBACK ({why}): no network faults");
                Ok(Isolation::Loopback)
            }
        },
    }
}

/// Six hex digits, unused by any namespace, veth or owner file.
fn fresh_run_id() -> String {
    loop {
        let id = format!("{:06x}", rand::random::<u32>() & 0xff_ffff);
        let taken = Path::new("/run/netns").join(topology::bridge_ns(&id)).exists()
            || Path::new("/sys/class/net").join(topology::host_veth(&id)).exists()
            || cleanup::registry_dir().join(format!("kc{id}.owner")).exists();
        if !taken {
            return id;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(servers: usize, nodes: usize) -> ClusterSpec {
        let mut s = ClusterSpec::loopback(servers, "/bin/keelson", "/c");
        s.nodes = nodes;
        s
    }

    #[test]
    fn namespace_members_are_servers_then_nodes_with_their_pod_cidrs() {
        let nets = Subnets { members: Ipv4Addr::new(198, 51, 100, 0), pods: Ipv4Addr::new(10, 42, 0, 0), v6: None };
        let m = fresh_manifest(&spec(3, 2), "a1b2c3", Some(nets)).unwrap();
        assert_eq!(m.topology, "netns");
        assert_eq!(m.host_addr, Some(Ipv4Addr::new(198, 51, 100, 1)));
        let names: Vec<_> = m.members.iter().map(|e| (e.name.as_str(), e.kind)).collect();
        assert_eq!(
            names,
            [
                ("keelson-1", MemberKind::Server),
                ("keelson-2", MemberKind::Server),
                ("keelson-3", MemberKind::Server),
                ("node-1", MemberKind::Node),
                ("node-2", MemberKind::Node)
            ]
        );
        let s2 = &m.members[1];
        assert_eq!((s2.raft_addr.as_str(), s2.api_addr.as_str()), ("198.51.100.11:2380", "198.51.100.11:6443"));
        assert_eq!(s2.netns.as_deref(), Some("kca1b2c3-n1"));
        let n2 = &m.members[4];
        assert_eq!((n2.addr.as_str(), n2.pod_cidr.as_str(), n2.raft_addr.as_str()), ("198.51.100.14", "10.42.1.0/24", ""));
        assert_eq!(n2.data_dir, PathBuf::from("/c/node-2"));
        assert_eq!(n2.log, PathBuf::from("/c/node-2.log"));
        assert!(m.members.iter().all(|e| e.addr6.is_empty()) && m.subnet6.is_none());
    }

    #[test]
    fn dual_stack_members_have_an_ipv6_address_and_nodes_a_podcidr_of_each_family() {
        let (members6, pods6) = topology::ula_nets(0x12_3456_789a);
        let nets = Subnets { members: Ipv4Addr::new(198, 51, 100, 0), pods: Ipv4Addr::new(10, 42, 0, 0), v6: Some((members6, pods6)) };
        let m = fresh_manifest(&spec(3, 2), "a1b2c3", Some(nets)).unwrap();
        assert_eq!((m.subnet6, m.pod_net6), (Some(members6), Some(pods6)));
        assert_eq!(m.members[0].addr6, "fd12:3456:789a::10");
        let n2 = &m.members[4];
        assert_eq!((n2.addr.as_str(), n2.addr6.as_str()), ("198.51.100.14", "fd12:3456:789a::14"));
        assert_eq!(n2.pod_cidr, "10.42.1.0/24,fd12:3456:789b:1::/64");
    }

    #[test]
    fn loopback_servers_take_ports_from_the_base_and_nodes_are_refused() {
        let mut s = spec(2, 0);
        s.base_port = 23790;
        let m = fresh_manifest(&s, "a1b2c3", None).unwrap();
        assert_eq!(m.topology, "loopback");
        assert_eq!(m.members[1].raft_addr, "127.0.0.1:23792");
        assert_eq!(m.members[1].metrics_addr, "127.0.0.1:23892");
        assert_eq!(m.members[1].api_addr, "127.0.0.1:23992");
        assert!(m.members.iter().all(|e| e.netns.is_none()));
        assert!(matches!(fresh_manifest(&spec(1, 1), "a1b2c3", None), Err(RunnerError::Unsupported(_))));
    }
}
