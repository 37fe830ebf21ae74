//! [`Harness`]: the runner's cluster plus the faults applied to it.

use std::fs::File;
use std::io::Write;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use keelson_client::StoreClient;
use keelson_runner::{Cluster, ClusterSpec, Isolation};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

use crate::netfaults;
use crate::node_partition::NodeCuts;
use crate::partition::{self, Blocked};
use crate::{ChaosError, Fault, HarnessSpec, NemesisEvent, Target};

/// How long one status call may take.
const STATUS_TIMEOUT: Duration = Duration::from_secs(1);

/// A running cluster of `keelson server` processes and the faults applied to it.
///
/// Dropping it without [`Harness::shutdown`] kills the servers and deletes the
/// namespaces synchronously (best effort; the runner's `Drop`).
pub struct Harness {
    pub(crate) cluster: Cluster,
    started: Instant,
    blocked: Blocked,
    /// What each node is cut off from.
    pub(crate) node_cuts: NodeCuts,
    /// Nodes drained and not yet uncordoned.
    pub(crate) drained: std::collections::BTreeSet<usize>,
    latency: Option<u32>,
    /// `Err(why)` when `tc … netem` does not work.
    netem: Result<(), String>,
    pub(crate) rng: StdRng,
    events: Vec<NemesisEvent>,
    log: Option<File>,
}

fn loud(run: &str, msg: &str) {
    eprintln!("[keelson-chaos kc{run}] {msg}");
}

impl Harness {
    /// Has the runner start `spec.servers` servers (removing stale runs' leftovers first)
    /// and returns once every server is a voter and all agree on a leader — or fails,
    /// cleaning up what it created.
    pub async fn start(spec: HarnessSpec) -> Result<Harness, ChaosError> {
        let started = Instant::now();
        let cluster = Cluster::start(
            ClusterSpec {
                servers: spec.servers,
                nodes: spec.nodes,
                binary: spec.binary.clone(),
                dir: spec.dir.clone(),
                isolation: spec.isolation,
                server_args: spec.server_args.clone(),
                node_args: spec.node_args.clone(),
                base_port: 0,
                dual_stack: false,
            },
            |m| eprintln!("[keelson-chaos] {m}"),
        )
        .await?;
        let log_path = spec.dir.join("nemesis.log");
        let log = File::create(&log_path)
            .map_err(|source| ChaosError::Io { context: log_path.display().to_string(), source })?;
        let netem = if cluster.isolation() == Isolation::Netns {
            let r = netfaults::probe_netem(cluster.run_id()).await;
            if let Err(why) = &r {
                loud(cluster.run_id(), &format!("WARNING: tc netem is unavailable, Latency faults are UNSUPPORTED: {why}"));
            }
            r
        } else {
            loud(cluster.run_id(), "LOOPBACK mode: partitions and latency are UNSUPPORTED");
            Err("no network namespaces in Loopback mode".into())
        };
        loud(
            cluster.run_id(),
            &format!(
                "cluster of {} servers and {} nodes ready in {:.1?}: {}",
                spec.servers,
                spec.nodes,
                started.elapsed(),
                cluster.endpoints().join(", ")
            ),
        );
        Ok(Harness {
            cluster,
            started,
            blocked: Blocked::new(),
            node_cuts: NodeCuts::new(),
            drained: Default::default(),
            latency: None,
            netem,
            rng: StdRng::seed_from_u64(spec.seed),
            events: Vec::new(),
            log: Some(log),
        })
    }

    /// The cluster the faults hit: endpoints, TLS, leader, readiness waits, pids.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// Whether `f` can be applied in this mode and cluster size (it may still fail, e.g.
    /// `Kill(Leader)` without a leader).
    pub fn supports(&self, f: &Fault) -> bool {
        self.unsupported_reason(f).is_none()
    }

    fn unsupported_reason(&self, f: &Fault) -> Option<String> {
        let n = self.cluster.server_count();
        let needs_netns = matches!(
            f,
            Fault::IsolateNode(_)
                | Fault::SplitHalves
                | Fault::Bridge
                | Fault::OneWayLoss { .. }
                | Fault::Latency { .. }
        );
        if let Some(why) = self.node_fault_unsupported(f) {
            return Some(why);
        }
        if needs_netns && self.cluster.isolation() != Isolation::Netns {
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
        let wall = keelson_runner::cmd::rfc3339_now();
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
        loud(self.cluster.run_id(), &line);
        if let Some(log) = self.log.as_mut() {
            let _ = writeln!(log, "{line}");
        }
        self.events.push(ev.clone());
        result.map(|_| (ev, target))
    }

    fn check_index(&self, i: usize) -> Result<(), ChaosError> {
        if i < self.cluster.server_count() {
            Ok(())
        } else {
            Err(ChaosError::cluster(format!("no server n{i} (the cluster has {})", self.cluster.server_count())))
        }
    }

    /// Resolves `t` to a server; `Random` picks among `eligible` ones.
    async fn resolve(&mut self, t: Target, eligible: fn(&Cluster, usize) -> bool) -> Result<usize, ChaosError> {
        match t {
            Target::Node(i) => self.check_index(i).map(|_| i),
            Target::Leader => self.cluster.leader().await.ok_or_else(|| ChaosError::not_ready("no leader to target")),
            Target::Holder => Err(ChaosError::not_ready("no holder named: the workload's nemesis did not retarget this fault")),
            Target::Random => {
                let candidates: Vec<usize> = (0..self.cluster.server_count()).filter(|&i| eligible(&self.cluster, i)).collect();
                candidates
                    .choose(&mut self.rng)
                    .copied()
                    .ok_or_else(|| ChaosError::not_ready("no eligible server for a random target"))
            }
        }
    }

    /// The namespaces of the servers (none on loopback).
    fn server_namespaces(&self) -> Vec<String> {
        self.cluster.manifest().servers().filter_map(|s| s.netns.clone()).collect()
    }

    async fn apply_inner(&mut self, f: &Fault) -> Result<(String, Option<usize>), ChaosError> {
        let n = self.cluster.server_count();
        match *f {
            Fault::Kill(t) => {
                let i = self.resolve(t, Cluster::is_running).await?;
                let pid = self.cluster.kill(i).await?.ok_or_else(|| ChaosError::cluster(format!("n{i} is not running")))?;
                Ok((format!("kill n{i} (pid {pid})"), Some(i)))
            }
            Fault::Restart(i) => {
                self.check_index(i)?;
                let pid = self.cluster.restart(i).await?;
                Ok((format!("restart n{i} (pid {pid})"), Some(i)))
            }
            Fault::Pause(t) => {
                let i = self.resolve(t, Cluster::is_live).await?;
                let pid = self.cluster.pause(i).await?;
                Ok((format!("pause n{i} (pid {pid})"), Some(i)))
            }
            Fault::Resume(i) => {
                self.check_index(i)?;
                let was = self.cluster.is_paused(i);
                let pid = self.cluster.resume(i).ok_or_else(|| ChaosError::cluster(format!("n{i} is not running")))?;
                Ok((format!("resume n{i} (pid {pid}{})", if was { "" } else { ", was not paused" }), Some(i)))
            }
            Fault::IsolateNode(t) => {
                let i = self.resolve(t, |_, _| true).await?;
                self.add_cuts(partition::isolate_pairs(n, i)).await?;
                Ok((format!("isolate n{i} from every other server"), Some(i)))
            }
            Fault::SplitHalves => {
                let h = partition::split_halves(n, &mut self.rng);
                self.add_cuts(partition::cut_pairs(&h.majority, &h.minority)).await?;
                Ok((format!("split majority {} | minority {}", names(&h.majority), names(&h.minority)), None))
            }
            Fault::Bridge => {
                let b = partition::bridge_shape(n, &mut self.rng);
                self.add_cuts(partition::cut_pairs(&b.left, &b.right)).await?;
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
                    return Err(ChaosError::cluster(format!(
                        "one-way loss needs two different servers, got n{from} twice"
                    )));
                }
                self.add_cuts([(from, to)].into()).await?;
                Ok((format!("one-way loss: packets n{from} -> n{to} dropped"), None))
            }
            Fault::Latency { millis } => {
                self.latency = Some(millis);
                for ns in self.server_namespaces() {
                    netfaults::set_latency(&ns, millis).await?;
                }
                Ok((format!("latency {millis}ms on every server's interface"), None))
            }
            Fault::HealNetwork => Ok((format!("heal network ({})", self.heal_network().await?), None)),
            Fault::HealAll => {
                let net = self.heal_network().await?;
                let mut resumed = Vec::new();
                let mut restarted = Vec::new();
                for i in 0..n {
                    if self.cluster.is_paused(i) {
                        self.cluster.resume(i);
                        resumed.push(i);
                    } else if !self.cluster.is_running(i) {
                        self.cluster.restart(i).await?;
                        restarted.push(i);
                    }
                }
                let nodes = self.heal_nodes().await?;
                Ok((format!("heal all ({net}; resumed {}; restarted {}{nodes})", names(&resumed), names(&restarted)), None))
            }
            Fault::RollingRestart => {
                for i in 0..n {
                    self.cluster.stop_member(i, Duration::from_secs(5)).await?;
                    self.cluster.start_member(i)?;
                    self.cluster.wait_healthy(Duration::from_secs(30)).await?;
                }
                Ok((format!("rolling restart of {} (healthy after each)", names(&(0..n).collect::<Vec<_>>())), None))
            }
            Fault::RemoveAndReadd(t) => {
                let i = self.resolve(t, Cluster::is_live).await?;
                let (old, new) = self.remove_and_readd(i).await?;
                Ok((format!("remove and re-add n{i} (member id {old:x} -> {new:x}, voter again)"), Some(i)))
            }
            Fault::NodeKill(_)
            | Fault::NodeRestart(_)
            | Fault::NodePause(_)
            | Fault::NodeResume(_)
            | Fault::NodeIsolate(_)
            | Fault::NodeSplitFromNodes(_)
            | Fault::NodeDrain(_)
            | Fault::NodeUncordon(_) => self.apply_node_fault(f).await,
        }
    }

    /// Adds cuts to the partition and loads every server namespace's ruleset.
    async fn add_cuts(&mut self, cuts: Blocked) -> Result<(), ChaosError> {
        self.blocked.extend(cuts);
        self.load_rules().await
    }

    async fn load_rules(&self) -> Result<(), ChaosError> {
        let servers: Vec<_> = self.cluster.manifest().servers().cloned().collect();
        let addrs: Vec<Ipv4Addr> = servers
            .iter()
            .map(|s| s.addr.parse().map_err(|_| ChaosError::cluster(format!("{} has no IPv4 address", s.name))))
            .collect::<Result<_, _>>()?;
        for (i, s) in servers.iter().enumerate() {
            let ns = s.netns.as_ref().ok_or_else(|| ChaosError::Unsupported("no network namespaces in Loopback mode".into()))?;
            netfaults::load_ruleset(ns, &partition::render_ruleset(i, &addrs, &self.blocked)).await?;
        }
        Ok(())
    }

    /// Removes every cut and any latency; describes what it did.
    async fn heal_network(&mut self) -> Result<String, ChaosError> {
        if self.cluster.isolation() != Isolation::Netns {
            return Ok("nothing to heal in Loopback mode".into());
        }
        let cuts = self.blocked.len() + self.node_cuts.len();
        self.blocked.clear();
        self.load_rules().await?;
        self.clear_node_cuts().await?;
        if let Some(ms) = self.latency.take() {
            for ns in self.server_namespaces() {
                netfaults::clear_latency(&ns).await?;
            }
            return Ok(format!("{cuts} cut(s) and {ms}ms latency removed"));
        }
        Ok(format!("{cuts} cut(s) removed"))
    }

    /// The nftables table in server `i`'s namespace as `nft list` shows it (`None` when
    /// there is none, or in Loopback mode).
    pub async fn ruleset(&self, i: usize) -> Option<String> {
        netfaults::list_ruleset(self.cluster.manifest().servers().nth(i)?.netns.as_ref()?).await
    }

    /// Removes member `i` through the cluster API, wipes its data directory, starts it
    /// with `--join` and waits (≤ 60 s) until a new member at its address is a voter and
    /// it knows the leader. Returns the old and new member ids.
    async fn remove_and_readd(&mut self, i: usize) -> Result<(u64, u64), ChaosError> {
        let deadline = Instant::now() + Duration::from_secs(60);
        let old = match self.cluster.status(i).await {
            Some(s) => s.id,
            None => self.cluster.member_id(i).ok_or_else(|| ChaosError::not_ready(format!("n{i}'s member id is unknown")))?,
        };
        let eps = self.cluster.endpoints();
        let peers: Vec<String> = (0..eps.len()).filter(|&j| j != i && self.cluster.is_live(j)).map(|j| eps[j].clone()).collect();
        let client = StoreClient::with_tls(&peers, self.cluster.tls())
            .map_err(|_| ChaosError::not_ready(format!("no live server besides n{i}")))?;
        loop {
            match tokio::time::timeout(Duration::from_secs(5), client.member_remove(old)).await {
                Ok(Ok(_)) => break,
                Ok(Err(e)) if e.to_string().contains("no member with id") => break,
                other if Instant::now() >= deadline => {
                    return Err(ChaosError::cluster(format!("removing n{i} (id {old:x}) failed: {other:?}")));
                }
                _ => {
                    client.rotate();
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
        self.cluster.wipe(i).await?;
        self.cluster.start_member(i)?;
        let addr = eps[i].clone();
        loop {
            if let Ok(Ok(list)) = tokio::time::timeout(STATUS_TIMEOUT, client.member_list()).await {
                if let Some(m) = list.members.iter().find(|m| m.addr == addr && m.voter && m.id != old) {
                    if self.cluster.status(i).await.is_some_and(|s| s.id == m.id && s.leader.is_some()) {
                        self.cluster.set_member_id(i, m.id);
                        return Ok((old, m.id));
                    }
                }
            }
            if Instant::now() >= deadline {
                return Err(ChaosError::not_ready(format!("n{i} did not become a voter again within 60 s")));
            }
            client.rotate();
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Kills every server and deletes the run's namespaces, veths, nftables tables and
    /// qdiscs. Fails with what could not be removed.
    pub async fn shutdown(mut self) -> Result<(), ChaosError> {
        self.log = None;
        Ok(self.cluster.stop(Duration::ZERO).await?)
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
        Target::Holder => "the holder's server".into(),
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
        Fault::NodeKill(x) => format!("power off {}", node_target(x)),
        Fault::NodeRestart(k) => format!("restart node-{}", k + 1),
        Fault::NodePause(x) => format!("freeze {}", node_target(x)),
        Fault::NodeResume(k) => format!("resume node-{}", k + 1),
        Fault::NodeIsolate(x) => format!("isolate {} from the servers", node_target(x)),
        Fault::NodeSplitFromNodes(x) => format!("isolate {} from the other nodes", node_target(x)),
        Fault::NodeDrain(x) => format!("drain {}", node_target(x)),
        Fault::NodeUncordon(k) => format!("uncordon node-{}", k + 1),
    }
}

fn node_target(t: &crate::NodeTarget) -> String {
    match t {
        crate::NodeTarget::Node(k) => format!("node-{}", k + 1),
        crate::NodeTarget::Random => "a random node".into(),
    }
}
