//! [`Harness`]: starts the cluster, applies faults and heals, cleans up.

use std::fs::File;
use std::io::Write;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keelson_client::{PeerTls, StoreClient};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

use crate::cleanup::{self, lock, CleanupHandle, CleanupState};
use crate::cmd;
use crate::netns;
use crate::node::{self, Node};
use crate::topology::{self, Blocked};
use crate::{ChaosError, Fault, HarnessSpec, Isolation, NemesisEvent, Target};

/// Bound on [`Harness::start`].
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Port every server listens on in Netns mode (each has its own address).
const NETNS_PORT: u16 = 2380;
/// Kubernetes API port of a server in its namespace.
const NETNS_API_PORT: u16 = 6443;

/// A running cluster of `keelson server` processes and the faults applied to it.
///
/// Dropping it without [`Harness::shutdown`] kills the servers and deletes the
/// namespaces synchronously (best effort).
pub struct Harness {
    spec: HarnessSpec,
    mode: Isolation,
    run_id: String,
    started: Instant,
    pub(crate) nodes: Vec<Node>,
    /// Network address of the subnet (Netns mode).
    subnet: Option<Ipv4Addr>,
    blocked: Blocked,
    latency: Option<u32>,
    /// `Err(why)` when `tc … netem` does not work.
    netem: Result<(), String>,
    rng: StdRng,
    events: Vec<NemesisEvent>,
    log: Option<File>,
    state: Arc<Mutex<CleanupState>>,
    /// The admin identity for the servers' mutual TLS.
    tls: PeerTls,
}

fn loud(run: &str, msg: &str) {
    eprintln!("[keelson-chaos kc{run}] {msg}");
}

/// A free TCP port on `ip` (Loopback mode).
fn free_port(ip: Ipv4Addr) -> Result<u16, ChaosError> {
    let l = std::net::TcpListener::bind((ip, 0)).map_err(ChaosError::io(format!("binding {ip}:0")))?;
    Ok(l.local_addr().map_err(ChaosError::io(format!("{ip}:0")))?.port())
}

impl Harness {
    /// Removes stale runs' leftovers, sets up isolation, starts `spec.servers` servers
    /// (the first with `--cluster-init`, the others one by one with `--join`) and returns
    /// once every server is a voter and all agree on a leader — or fails after at most
    /// 60 s, cleaning up what it created.
    pub async fn start(spec: HarnessSpec) -> Result<Harness, ChaosError> {
        let started = Instant::now();
        let deadline = started + START_TIMEOUT;
        match tokio::task::spawn_blocking(cleanup::cleanup_stale).await {
            Ok(Ok(0)) => {}
            Ok(Ok(n)) => eprintln!("[keelson-chaos] removed {n} leftover(s) of earlier runs"),
            Ok(Err(e)) => eprintln!("[keelson-chaos] WARNING: could not remove every leftover of earlier runs: {e}"),
            Err(e) => eprintln!("[keelson-chaos] WARNING: stale cleanup task failed: {e}"),
        }
        if spec.servers == 0 || spec.servers > 200 {
            return Err(ChaosError::Cluster(format!("a cluster has 1 to 200 servers, not {}", spec.servers)));
        }
        if !spec.binary.is_file() {
            return Err(ChaosError::NotReady(format!(
                "keelson binary {} does not exist (run `cargo build -p keelson` first)",
                spec.binary.display()
            )));
        }
        let mode = resolve_isolation(spec.isolation)?;
        std::fs::create_dir_all(&spec.dir).map_err(ChaosError::io(spec.dir.display().to_string()))?;
        let run_id = fresh_run_id();
        let state = Arc::new(Mutex::new(CleanupState {
            run_id: run_id.clone(),
            pids: vec![None; spec.servers],
            ..Default::default()
        }));
        lock(&state).owner_file = Some(cleanup::write_owner(&run_id)?);
        cleanup::register(&state);
        let log_path = spec.dir.join("nemesis.log");
        let log = File::create(&log_path).map_err(ChaosError::io(log_path.display().to_string()))?;
        // The cluster's key material exists before any server starts; the harness talks
        // to the servers as the cluster admin (their gRPC port requires mutual TLS).
        let pki = spec.dir.join("pki");
        let pki_err = |e: keelson_pki::PkiError| ChaosError::Cluster(format!("cluster certificates: {e}"));
        let material = keelson_pki::ClusterMaterial::load_or_create(&pki, "keelson").map_err(pki_err)?;
        let admin = material
            .ca
            .load_or_issue(&pki, "admin", |ca| ca.issue_client(keelson_pki::ADMIN_USER, &[keelson_pki::ADMIN_GROUP]))
            .map_err(pki_err)?;
        let tls = PeerTls::new(material.ca.cert_pem(), admin.cert_pem, admin.key_pem);
        let mut h = Harness {
            tls,
            rng: StdRng::seed_from_u64(spec.seed),
            mode,
            run_id: run_id.clone(),
            started,
            nodes: Vec::new(),
            subnet: None,
            blocked: Blocked::new(),
            latency: None,
            netem: Err("no network namespaces in Loopback mode".into()),
            events: Vec::new(),
            log: Some(log),
            state,
            spec,
        };
        let n = h.spec.servers;
        if mode == Isolation::Netns {
            let subnet = match netns::setup(&run_id, n, &h.state).await {
                Ok(subnet) => Some(subnet),
                Err(e) if h.spec.isolation == Isolation::Auto => {
                    let problems = tokio::task::spawn_blocking({
                        let state = h.state.clone();
                        move || lock(&state).remove_network()
                    })
                    .await
                    .unwrap_or_default();
                    loud(&run_id, &format!(
                        "WARNING: Isolation::Auto -> LOOPBACK: setting up network namespaces failed ({e}); partitions and latency are UNSUPPORTED{}",
                        if problems.is_empty() { String::new() } else { format!(" (cleanup problems: {})", problems.join("; ")) }
                    ));
                    h.mode = Isolation::Loopback;
                    None
                }
                Err(e) => return Err(e),
            };
            h.subnet = subnet;
        }
        if let Some(subnet) = h.subnet {
            h.netem = netns::probe_netem(&run_id).await;
            if let Err(why) = &h.netem {
                loud(&run_id, &format!("WARNING: tc netem is unavailable, Latency faults are UNSUPPORTED: {why}"));
            }
            loud(
                &run_id,
                &format!(
                    "Netns mode: bridge namespace {}, host {} on {}, servers {}..{} in namespaces kc{run_id}-n0..n{}",
                    topology::bridge_ns(&run_id),
                    topology::host_addr(subnet),
                    topology::host_veth(&run_id),
                    topology::node_addr(subnet, 0),
                    topology::node_addr(subnet, n - 1),
                    n - 1
                ),
            );
        } else {
            loud(&run_id, "LOOPBACK mode: servers on 127.0.0.(10+i); partitions and latency are UNSUPPORTED");
        }
        for i in 0..n {
            let name = topology::node_name(&run_id, i);
            let (addr, api_addr) = match h.subnet {
                Some(s) => {
                    let ip = topology::node_addr(s, i);
                    (format!("{ip}:{NETNS_PORT}"), format!("{ip}:{NETNS_API_PORT}"))
                }
                None => {
                    let ip = Ipv4Addr::new(127, 0, 0, 10 + i as u8);
                    (format!("{ip}:{}", free_port(ip)?), format!("{ip}:{}", free_port(ip)?))
                }
            };
            h.nodes.push(Node {
                index: i,
                ns: h.subnet.map(|_| topology::node_ns(&run_id, i)),
                addr,
                api_addr,
                pki_dir: h.spec.dir.join("pki"),
                data_dir: h.spec.dir.join(&name),
                log: h.spec.dir.join(format!("{name}.log")),
                name,
                child: None,
                paused: false,
                id: None,
                needs_join: false,
            });
        }
        h.bootstrap(deadline).await?;
        loud(&run_id, &format!("cluster of {n} ready in {:.1?}: {}", started.elapsed(), h.endpoints().join(", ")));
        Ok(h)
    }

    async fn bootstrap(&mut self, deadline: Instant) -> Result<(), ChaosError> {
        self.spawn(0, &["--cluster-init".to_string()])?;
        let seed = self.nodes[0].addr.clone();
        for i in 1..self.nodes.len() {
            self.wait_voters(i, deadline).await?;
            self.spawn(i, &["--join".to_string(), seed.clone()])?;
        }
        self.wait_voters(self.nodes.len(), deadline).await?;
        self.wait_healthy(deadline.saturating_duration_since(Instant::now())).await?;
        for (i, st) in node::statuses(self.live_targets(), self.tls.clone()).await {
            self.nodes[i].id = st.map(|s| s.id);
        }
        Ok(())
    }

    /// Waits until some server reports a leader and `n` voters.
    async fn wait_voters(&self, n: usize, deadline: Instant) -> Result<(), ChaosError> {
        let client = StoreClient::with_tls(&self.endpoints(), &self.tls).map_err(|e| ChaosError::Cluster(e.to_string()))?;
        loop {
            for _ in 0..self.nodes.len() {
                if let Ok(Ok(list)) = tokio::time::timeout(node::STATUS_TIMEOUT, client.member_list()).await {
                    if list.leader.is_some() && list.members.iter().filter(|m| m.voter).count() >= n {
                        return Ok(());
                    }
                }
                client.rotate();
            }
            if Instant::now() >= deadline {
                return Err(ChaosError::NotReady(format!(
                    "the cluster did not reach {n} voters with a leader in time; see the kc{}-n*.log files in {}",
                    self.run_id,
                    self.spec.dir.display()
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn spawn(&mut self, i: usize, bootstrap: &[String]) -> Result<u32, ChaosError> {
        let (binary, extra) = (self.spec.binary.clone(), self.spec.server_args.clone());
        let pid = self.nodes[i].spawn(&binary, bootstrap, &extra)?;
        lock(&self.state).pids[i] = Some(pid);
        Ok(pid)
    }

    fn forget_pid(&self, i: usize) {
        lock(&self.state).pids[i] = None;
    }

    /// Client-reachable `host:port` of every server, in index order.
    /// The admin identity the servers' store port accepts (mutual TLS).
    pub fn tls(&self) -> &PeerTls {
        &self.tls
    }

    /// A store client over every server, as the cluster admin.
    pub fn store_client(&self) -> Result<StoreClient, ChaosError> {
        StoreClient::with_tls(&self.endpoints(), &self.tls).map_err(|e| ChaosError::Cluster(e.to_string()))
    }

    /// The Kubernetes API address (`ip:port`, HTTPS) of every server.
    pub fn api_endpoints(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.api_addr.clone()).collect()
    }

    /// The cluster CA directory (`ca.crt`, `ca.key`), shared by the servers.
    pub fn pki_dir(&self) -> std::path::PathBuf {
        self.spec.dir.join("pki")
    }

    pub fn endpoints(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.addr.clone()).collect()
    }

    /// The resolved mode: [`Isolation::Netns`] or [`Isolation::Loopback`].
    pub fn isolation(&self) -> Isolation {
        self.mode
    }

    /// This run's id: namespaces are `kc<id>-br` and `kc<id>-n<i>`, server data
    /// directories `DIR/kc<id>-n<i>`.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The network namespaces of this run (empty in Loopback mode).
    pub fn namespaces(&self) -> Vec<String> {
        lock(&self.state).namespaces.clone()
    }

    /// Process id of every server (`None` when killed).
    pub fn pids(&self) -> Vec<Option<u32>> {
        self.nodes.iter().map(|n| n.pid().filter(|p| cmd::alive(*p))).collect()
    }

    /// A handle that cleans this run up synchronously from anywhere (e.g. a signal handler).
    pub fn cleanup_handle(&self) -> CleanupHandle {
        CleanupHandle(self.state.clone())
    }

    /// Whether `f` can be applied in this mode and cluster size (it may still fail, e.g.
    /// `Kill(Leader)` without a leader).
    pub fn supports(&self, f: &Fault) -> bool {
        self.unsupported_reason(f).is_none()
    }

    fn unsupported_reason(&self, f: &Fault) -> Option<String> {
        let n = self.nodes.len();
        let needs_netns = matches!(
            f,
            Fault::IsolateNode(_)
                | Fault::SplitHalves
                | Fault::Bridge
                | Fault::OneWayLoss { .. }
                | Fault::Latency { .. }
        );
        if needs_netns && self.mode != Isolation::Netns {
            return Some(format!(
                "{f:?} needs network namespaces (Isolation::Netns, root); this harness runs in Loopback mode"
            ));
        }
        match f {
            Fault::Latency { .. } => {
                self.netem.as_ref().err().map(|why| format!("{f:?} needs tc netem, which is unavailable: {why}"))
            }
            Fault::IsolateNode(_) | Fault::OneWayLoss { .. } | Fault::RemoveAndReadd(_) if n < 2 => {
                Some(format!("{f:?} needs at least 2 servers"))
            }
            Fault::SplitHalves | Fault::Bridge if n < 3 => Some(format!("{f:?} needs at least 3 servers")),
            _ => None,
        }
    }

    /// `(index, addr)` of every server expected to answer.
    fn live_targets(&self) -> Vec<(usize, String)> {
        self.nodes.iter().filter(|n| n.live()).map(|n| (n.index, n.addr.clone())).collect()
    }

    /// The server that leads: among running, unpaused servers claiming leadership, the one
    /// with the highest term. `None` when none claims it.
    pub async fn leader(&self) -> Option<usize> {
        node::statuses(self.live_targets(), self.tls.clone())
            .await
            .into_iter()
            .filter_map(|(i, s)| s.filter(|s| s.role == "leader").map(|s| (s.term, i)))
            .max()
            .map(|(_, i)| i)
    }

    /// Waits (≤ `timeout`) until every running, unpaused server answers and all name the
    /// same leader, which is one of them and says it leads.
    pub async fn wait_healthy(&self, timeout: Duration) -> Result<(), ChaosError> {
        let deadline = Instant::now() + timeout;
        loop {
            let sts = node::statuses(self.live_targets(), self.tls.clone()).await;
            let why = if sts.is_empty() {
                "no server is running".to_string()
            } else if let Some((i, _)) = sts.iter().find(|(_, s)| s.is_none()) {
                format!("n{i} does not answer")
            } else {
                let leaders: std::collections::BTreeSet<Option<u64>> =
                    sts.iter().map(|(_, s)| s.as_ref().and_then(|s| s.leader)).collect();
                let agreed = leaders.iter().next().copied().flatten().filter(|_| leaders.len() == 1);
                match agreed {
                    Some(l) if sts.iter().any(|(_, s)| s.as_ref().is_some_and(|s| s.id == l && s.role == "leader")) => {
                        return Ok(())
                    }
                    _ => format!("no agreed live leader (leaders seen: {leaders:x?})"),
                }
            };
            if Instant::now() >= deadline {
                return Err(ChaosError::NotReady(format!("cluster not healthy within {timeout:?}: {why}")));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Every fault and heal applied so far, in order.
    pub fn events(&self) -> &[NemesisEvent] {
        &self.events
    }

    /// Applies `f`, logs it (stderr and `DIR/nemesis.log`) and records the event (also when
    /// it fails, with `ok: false`). Unsupported faults fail with
    /// [`ChaosError::Unsupported`] and change nothing.
    pub async fn apply(&mut self, f: Fault) -> Result<NemesisEvent, ChaosError> {
        self.apply_tracked(f).await.map(|(ev, _)| ev)
    }

    /// [`Harness::apply`], also returning the server the fault resolved to, if one.
    pub(crate) async fn apply_tracked(&mut self, f: Fault) -> Result<(NemesisEvent, Option<usize>), ChaosError> {
        let at = self.started.elapsed();
        let wall = cmd::rfc3339_now();
        let result = match self.unsupported_reason(&f) {
            Some(why) => Err(ChaosError::Unsupported(why)),
            None => self.apply_inner(&f).await,
        };
        let (what, ok, target) = match &result {
            Ok((what, target)) => (what.clone(), true, *target),
            Err(e) => (format!("{} FAILED: {e}", describe(&f)), false, None),
        };
        let ev = NemesisEvent { at, wall, what, ok };
        let line = format!("{} +{:.3}s {} {}", ev.wall, ev.at.as_secs_f64(), if ok { "ok  " } else { "FAIL" }, ev.what);
        loud(&self.run_id, &line);
        if let Some(log) = self.log.as_mut() {
            let _ = writeln!(log, "{line}");
        }
        self.events.push(ev.clone());
        result.map(|_| (ev, target))
    }

    fn check_index(&self, i: usize) -> Result<(), ChaosError> {
        if i < self.nodes.len() {
            Ok(())
        } else {
            Err(ChaosError::Cluster(format!("no server n{i} (the cluster has {})", self.nodes.len())))
        }
    }

    /// Resolves `t` to a server; `Random` picks among `eligible` ones.
    async fn resolve(&mut self, t: Target, eligible: fn(&Node) -> bool) -> Result<usize, ChaosError> {
        match t {
            Target::Node(i) => self.check_index(i).map(|_| i),
            Target::Leader => self.leader().await.ok_or_else(|| ChaosError::NotReady("no leader to target".into())),
            Target::Random => {
                let candidates: Vec<usize> = self.nodes.iter().filter(|n| eligible(n)).map(|n| n.index).collect();
                candidates
                    .choose(&mut self.rng)
                    .copied()
                    .ok_or_else(|| ChaosError::NotReady("no eligible server for a random target".into()))
            }
        }
    }

    async fn apply_inner(&mut self, f: &Fault) -> Result<(String, Option<usize>), ChaosError> {
        let n = self.nodes.len();
        match *f {
            Fault::Kill(t) => {
                let i = self.resolve(t, Node::running).await?;
                let pid =
                    self.nodes[i].kill().await.ok_or_else(|| ChaosError::Cluster(format!("n{i} is not running")))?;
                self.forget_pid(i);
                Ok((format!("kill n{i} (pid {pid})"), Some(i)))
            }
            Fault::Restart(i) => {
                self.check_index(i)?;
                let pid = self.restart(i).await?;
                Ok((format!("restart n{i} (pid {pid})"), Some(i)))
            }
            Fault::Pause(t) => {
                let i = self.resolve(t, Node::live).await?;
                let pid = self.nodes[i].pause().await?;
                Ok((format!("pause n{i} (pid {pid})"), Some(i)))
            }
            Fault::Resume(i) => {
                self.check_index(i)?;
                let was = self.nodes[i].paused;
                let pid = self.nodes[i].resume().ok_or_else(|| ChaosError::Cluster(format!("n{i} is not running")))?;
                Ok((format!("resume n{i} (pid {pid}{})", if was { "" } else { ", was not paused" }), Some(i)))
            }
            Fault::IsolateNode(t) => {
                let i = self.resolve(t, |_| true).await?;
                self.add_cuts(topology::isolate_pairs(n, i)).await?;
                Ok((format!("isolate n{i} from every other server"), Some(i)))
            }
            Fault::SplitHalves => {
                let h = topology::split_halves(n, &mut self.rng);
                self.add_cuts(topology::cut_pairs(&h.majority, &h.minority)).await?;
                Ok((format!("split majority {} | minority {}", names(&h.majority), names(&h.minority)), None))
            }
            Fault::Bridge => {
                let b = topology::bridge_shape(n, &mut self.rng);
                self.add_cuts(topology::cut_pairs(&b.left, &b.right)).await?;
                Ok((
                    format!(
                        "bridge {} <-> n{} <-> {} (halves cut from each other)",
                        names(&b.left),
                        b.bridge,
                        names(&b.right)
                    ),
                    Some(b.bridge),
                ))
            }
            Fault::OneWayLoss { from, to } => {
                self.check_index(from)?;
                self.check_index(to)?;
                if from == to {
                    return Err(ChaosError::Cluster(format!(
                        "one-way loss needs two different servers, got n{from} twice"
                    )));
                }
                self.add_cuts([(from, to)].into()).await?;
                Ok((format!("one-way loss: packets n{from} -> n{to} dropped"), None))
            }
            Fault::Latency { millis } => {
                self.latency = Some(millis);
                for ns in self.nodes.iter().filter_map(|n| n.ns.clone()).collect::<Vec<_>>() {
                    netns::set_latency(&ns, millis).await?;
                }
                Ok((format!("latency {millis}ms on every server's interface"), None))
            }
            Fault::HealNetwork => Ok((format!("heal network ({})", self.heal_network().await?), None)),
            Fault::HealAll => {
                let net = self.heal_network().await?;
                let mut resumed = Vec::new();
                let mut restarted = Vec::new();
                for i in 0..n {
                    if self.nodes[i].running() && self.nodes[i].paused {
                        self.nodes[i].resume();
                        resumed.push(i);
                    } else if !self.nodes[i].running() {
                        self.restart(i).await?;
                        restarted.push(i);
                    }
                }
                Ok((format!("heal all ({net}; resumed {}; restarted {})", names(&resumed), names(&restarted)), None))
            }
            Fault::RollingRestart => {
                for i in 0..n {
                    self.nodes[i].stop(Duration::from_secs(5)).await;
                    self.forget_pid(i);
                    self.start_node(i)?;
                    self.wait_healthy(Duration::from_secs(30)).await?;
                }
                Ok((format!("rolling restart of {} (healthy after each)", names(&(0..n).collect::<Vec<_>>())), None))
            }
            Fault::RemoveAndReadd(t) => {
                let i = self.resolve(t, Node::live).await?;
                let (old, new) = self.remove_and_readd(i).await?;
                Ok((format!("remove and re-add n{i} (member id {old:x} -> {new:x}, voter again)"), Some(i)))
            }
        }
    }

    /// (Re)starts server `i`: SIGKILL first if it runs, then start from its data
    /// directory (or `--join` a live peer when its data directory was wiped).
    async fn restart(&mut self, i: usize) -> Result<u32, ChaosError> {
        self.nodes[i].kill().await;
        self.forget_pid(i);
        self.start_node(i)
    }

    fn start_node(&mut self, i: usize) -> Result<u32, ChaosError> {
        if !self.nodes[i].needs_join {
            return self.spawn(i, &[]);
        }
        let peer = self.nodes.iter().find(|n| n.index != i && n.live()).map(|n| n.addr.clone());
        let peer = peer.ok_or_else(|| ChaosError::NotReady(format!("n{i} must re-join but no other server runs")))?;
        self.spawn(i, &["--join".to_string(), peer])
    }

    /// Adds cuts to the partition and loads every server namespace's ruleset.
    async fn add_cuts(&mut self, cuts: Blocked) -> Result<(), ChaosError> {
        self.blocked.extend(cuts);
        self.load_rules().await
    }

    async fn load_rules(&self) -> Result<(), ChaosError> {
        let subnet =
            self.subnet.ok_or_else(|| ChaosError::Unsupported("no network namespaces in Loopback mode".into()))?;
        let addrs: Vec<Ipv4Addr> = (0..self.nodes.len()).map(|i| topology::node_addr(subnet, i)).collect();
        for node in &self.nodes {
            if let Some(ns) = &node.ns {
                netns::load_ruleset(ns, &topology::render_ruleset(node.index, &addrs, &self.blocked)).await?;
            }
        }
        Ok(())
    }

    /// Removes every cut and any latency; describes what it did.
    async fn heal_network(&mut self) -> Result<String, ChaosError> {
        if self.mode != Isolation::Netns {
            return Ok("nothing to heal in Loopback mode".into());
        }
        let cuts = self.blocked.len();
        self.blocked.clear();
        self.load_rules().await?;
        if let Some(ms) = self.latency.take() {
            for ns in self.nodes.iter().filter_map(|n| n.ns.clone()).collect::<Vec<_>>() {
                netns::clear_latency(&ns).await?;
            }
            return Ok(format!("{cuts} cut(s) and {ms}ms latency removed"));
        }
        Ok(format!("{cuts} cut(s) removed"))
    }

    /// The nftables table in server `i`'s namespace as `nft list` shows it (`None` when
    /// there is none, or in Loopback mode).
    pub async fn ruleset(&self, i: usize) -> Option<String> {
        netns::list_ruleset(self.nodes.get(i)?.ns.as_ref()?).await
    }

    /// Removes member `i` through the cluster API, wipes its data directory, starts it
    /// with `--join` and waits (≤ 60 s) until a new member at its address is a voter and
    /// it knows the leader. Returns the old and new member ids.
    async fn remove_and_readd(&mut self, i: usize) -> Result<(u64, u64), ChaosError> {
        let deadline = Instant::now() + Duration::from_secs(60);
        let old = match node::status(&self.nodes[i].addr, &self.tls).await {
            Some(s) => s.id,
            None => self.nodes[i].id.ok_or_else(|| ChaosError::NotReady(format!("n{i}'s member id is unknown")))?,
        };
        let peers: Vec<String> =
            self.nodes.iter().filter(|n| n.index != i && n.live()).map(|n| n.addr.clone()).collect();
        let client =
            StoreClient::with_tls(&peers, &self.tls).map_err(|_| ChaosError::NotReady(format!("no live server besides n{i}")))?;
        loop {
            match tokio::time::timeout(Duration::from_secs(5), client.member_remove(old)).await {
                Ok(Ok(_)) => break,
                Ok(Err(e)) if e.to_string().contains("no member with id") => break,
                other if Instant::now() >= deadline => {
                    return Err(ChaosError::Cluster(format!("removing n{i} (id {old:x}) failed: {other:?}")));
                }
                _ => {
                    client.rotate();
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
        self.nodes[i].kill().await;
        self.forget_pid(i);
        let dir = self.nodes[i].data_dir.clone();
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(ChaosError::io(format!("wiping {}", dir.display())))?;
        }
        self.nodes[i].needs_join = true;
        self.start_node(i)?;
        let addr = self.nodes[i].addr.clone();
        loop {
            if let Ok(Ok(list)) = tokio::time::timeout(node::STATUS_TIMEOUT, client.member_list()).await {
                if let Some(m) = list.members.iter().find(|m| m.addr == addr && m.voter && m.id != old) {
                    if node::status(&addr, &self.tls).await.is_some_and(|s| s.id == m.id && s.leader.is_some()) {
                        self.nodes[i].needs_join = false;
                        self.nodes[i].id = Some(m.id);
                        return Ok((old, m.id));
                    }
                }
            }
            if Instant::now() >= deadline {
                return Err(ChaosError::NotReady(format!("n{i} did not become a voter again within 60 s")));
            }
            client.rotate();
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Kills every server and deletes the run's namespaces, veths, nftables tables and
    /// qdiscs. Idempotent; fails with what could not be removed.
    pub async fn shutdown(mut self) -> Result<(), ChaosError> {
        for node in self.nodes.iter_mut() {
            node.kill().await;
        }
        let handle = self.cleanup_handle();
        let result = tokio::task::spawn_blocking(move || handle.cleanup_now()).await.map_err(|e| ChaosError::Io {
            context: "cleanup task".into(),
            source: std::io::Error::other(e.to_string()),
        })?;
        match &result {
            Ok(()) => loud(&self.run_id, "shut down: servers killed, namespaces deleted"),
            Err(e) => loud(&self.run_id, &format!("SHUTDOWN INCOMPLETE: {e}")),
        }
        self.log = None;
        result
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        if lock(&self.state).done {
            return;
        }
        loud(&self.run_id, "harness dropped without shutdown: killing servers and deleting namespaces");
        for node in self.nodes.iter_mut() {
            node.kill_sync();
        }
        for p in lock(&self.state).cleanup_sync() {
            loud(&self.run_id, &format!("CLEANUP PROBLEM: {p}"));
        }
    }
}

/// `[n0, n2]`.
fn names(v: &[usize]) -> String {
    format!("[{}]", v.iter().map(|i| format!("n{i}")).collect::<Vec<_>>().join(", "))
}

/// A fault as requested, before resolution (for failures).
fn describe(f: &Fault) -> String {
    let t = |t: &Target| match t {
        Target::Node(i) => format!("n{i}"),
        Target::Leader => "the leader".into(),
        Target::Random => "a random server".into(),
    };
    match f {
        Fault::Kill(x) => format!("kill {}", t(x)),
        Fault::Restart(i) => format!("restart n{i}"),
        Fault::Pause(x) => format!("pause {}", t(x)),
        Fault::Resume(i) => format!("resume n{i}"),
        Fault::IsolateNode(x) => format!("isolate {}", t(x)),
        Fault::SplitHalves => "split majority/minority".into(),
        Fault::Bridge => "bridge".into(),
        Fault::OneWayLoss { from, to } => format!("one-way loss n{from} -> n{to}"),
        Fault::Latency { millis } => format!("latency {millis}ms"),
        Fault::HealNetwork => "heal network".into(),
        Fault::HealAll => "heal all".into(),
        Fault::RollingRestart => "rolling restart".into(),
        Fault::RemoveAndReadd(x) => format!("remove and re-add {}", t(x)),
    }
}

/// Netns when asked (or, for Auto, when it works), else Loopback; announced on stderr.
fn resolve_isolation(asked: Isolation) -> Result<Isolation, ChaosError> {
    match asked {
        Isolation::Loopback => Ok(Isolation::Loopback),
        Isolation::Netns => netns::probe()
            .map(|_| Isolation::Netns)
            .map_err(|why| ChaosError::Unsupported(format!("Isolation::Netns: {why}"))),
        Isolation::Auto => match netns::probe() {
            Ok(()) => {
                eprintln!("[keelson-chaos] Isolation::Auto -> trying Netns (root; `ip netns` and `nft` respond)");
                Ok(Isolation::Netns)
            }
            Err(why) => {
                eprintln!("[keelson-chaos] WARNING: Isolation::Auto -> LOOPBACK ({why}): partitions and latency are UNSUPPORTED");
                Ok(Isolation::Loopback)
            }
        },
    }
}

/// Six hex digits, unused by any namespace, veth or owner file.
fn fresh_run_id() -> String {
    loop {
        let id = format!("{:06x}", rand::random::<u32>() & 0xff_ffff);
        let taken = std::path::Path::new("/run/netns").join(topology::bridge_ns(&id)).exists()
            || std::path::Path::new("/sys/class/net").join(topology::host_veth(&id)).exists()
            || cleanup::registry_dir().join(format!("kc{id}.owner")).exists();
        if !taken {
            return id;
        }
    }
}
