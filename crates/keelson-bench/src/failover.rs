//! `keelson bench failover`: how long writes stall when a server dies. A steady write load
//! (several clients, spread over the servers that survive) while the Raft leader is
//! killed (`SIGKILL`) N times, restarted between kills, then one follower kill; per kill
//! the largest gap between acknowledged writes and the time from the kill to the first
//! acknowledged write sent after it ([`crate::outage`]), and how long the restarted
//! server takes to catch up. With `--compare-etcd` the same rounds run against a
//! 3-member etcd on loopback (deploy/etcd/etcd-cluster.sh, mutual TLS) in the same run.
//! `--quiet-secs` adds a fault-free load during which leader changes are counted.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use k8s_openapi::api::core::v1::ConfigMap;
use keelson_client::PeerTls;
use keelson_runner::{Cluster, ClusterSpec};

use crate::load::{connect, find_etcd_script, start_etcd};
use crate::outage::{outage, Ack, Outage};
use crate::percentile::percentile;

#[derive(Args, Clone, Debug)]
pub struct FailoverBenchArgs {
    /// Leader kills per system.
    #[arg(long, default_value_t = 5)]
    pub kills: usize,
    /// Concurrent writers, spread over the servers that survive the kill.
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// Also run the same rounds against a 3-member etcd on loopback.
    #[arg(long)]
    pub compare_etcd: bool,
    /// Only etcd (with --compare-etcd).
    #[arg(long)]
    pub etcd_only: bool,
    /// Write ConfigMaps through the Kubernetes API of the surviving servers (kube-rs,
    /// without its retries) instead of writing to the store (Keelson only).
    #[arg(long)]
    pub api: bool,
    /// Seconds of fault-free writes during which leader changes are counted (0: skip).
    #[arg(long, default_value_t = 0)]
    pub quiet_secs: u64,
    /// The etcd start script (default: deploy/etcd/etcd-cluster.sh above the current directory).
    #[arg(long)]
    pub etcd_script: Option<PathBuf>,
    /// Keep the clusters' data and logs in this directory (default: a temporary one,
    /// removed at the end).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Print one JSON object on stdout instead of the summary.
    #[arg(long)]
    pub json: bool,
}

/// One system's figures.
#[derive(Debug, Default, serde::Serialize)]
pub struct SystemFailover {
    pub leader_kills: Vec<Outage>,
    pub follower_kill: Option<Outage>,
    /// Restart → the restarted server has applied what the leader had committed, per kill.
    pub catch_up_ms: Vec<f64>,
    pub gap_p50_ms: f64,
    pub gap_max_ms: f64,
    pub first_after_p50_ms: f64,
    pub first_after_max_ms: f64,
    /// Leader changes seen during the fault-free load (`--quiet-secs`).
    pub quiet_leader_changes: Option<usize>,
}

/// How long a kill round waits for a write sent after the kill to be acknowledged.
const RECOVERY_LIMIT: Duration = Duration::from_secs(30);

/// A system under test: a Keelson cluster of the runner, or the etcd script's cluster.
enum Target {
    Keelson(Box<Cluster>),
    Etcd(Etcd),
}

struct Etcd {
    script: PathBuf,
    dir: PathBuf,
    endpoints: Vec<String>,
    tls: PeerTls,
    /// One client per member, for its status.
    members: Vec<etcd_client::Client>,
}

/// A member's Raft position, as its status reports it.
struct Position {
    is_leader: bool,
    term: u64,
    applied: u64,
    committed: u64,
}

impl Target {
    fn system(&self) -> &'static str {
        match self {
            Target::Keelson(_) => "keelson",
            Target::Etcd(_) => "etcd",
        }
    }

    fn endpoints(&self) -> Vec<String> {
        match self {
            Target::Keelson(c) => c.endpoints(),
            Target::Etcd(e) => e.endpoints.clone(),
        }
    }

    fn tls(&self) -> PeerTls {
        match self {
            Target::Keelson(c) => c.tls().clone(),
            Target::Etcd(e) => e.tls.clone(),
        }
    }

    async fn position(&self, j: usize) -> Option<Position> {
        match self {
            Target::Keelson(c) => {
                let s = c.status(j).await?;
                Some(Position { is_leader: s.role == "leader", term: s.term, applied: s.applied_index, committed: s.committed_index })
            }
            Target::Etcd(e) => {
                let mut client = e.members.get(j)?.clone();
                let s = tokio::time::timeout(Duration::from_secs(1), client.status()).await.ok()?.ok()?;
                let id = s.header().map(|h| h.member_id()).unwrap_or(0);
                Some(Position { is_leader: id != 0 && s.leader() == id, term: s.raft_term(), applied: s.raft_applied_index(), committed: s.raft_index() })
            }
        }
    }

    /// The leading member and its term, once one leads (≤ 30 s).
    async fn leader(&self) -> anyhow::Result<(usize, u64)> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            for j in 0..self.endpoints().len() {
                if let Some(p) = self.position(j).await.filter(|p| p.is_leader) {
                    return Ok((j, p.term));
                }
            }
            if Instant::now() > deadline {
                bail!("{}: no member leads", self.system());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn kill(&mut self, j: usize) -> anyhow::Result<()> {
        match self {
            Target::Keelson(c) => c.kill(j).await.map(|_| ()).map_err(Into::into),
            Target::Etcd(e) => e.kill_member(j).await,
        }
    }

    async fn restart(&mut self, j: usize) -> anyhow::Result<()> {
        match self {
            Target::Keelson(c) => c.start_member(j).map(|_| ()).map_err(Into::into),
            Target::Etcd(e) => e.script(&["restart", &(j + 1).to_string()]).await,
        }
    }

    async fn stop(self) -> anyhow::Result<()> {
        match self {
            Target::Keelson(c) => c.stop(Duration::from_secs(10)).await.map_err(Into::into),
            Target::Etcd(e) => e.script(&["stop"]).await,
        }
    }
}

impl Etcd {
    async fn start(script: PathBuf, tmp: &std::path::Path) -> anyhow::Result<Etcd> {
        let dir = tmp.join("etcd");
        let (endpoints, tls) = start_etcd(&script, &dir, Some(&tmp.join("etcd-tls"))).await?;
        let tls = tls.expect("TLS was asked for");
        let mut members = Vec::new();
        for ep in &endpoints {
            let opts = etcd_client::ConnectOptions::new().with_tls(
                etcd_client::TlsOptions::new()
                    .ca_certificate(etcd_client::Certificate::from_pem(&tls.ca_pem))
                    .identity(etcd_client::Identity::from_pem(&tls.cert_pem, &tls.key_pem)),
            );
            members.push(etcd_client::Client::connect([format!("https://{ep}")], Some(opts)).await.with_context(|| format!("etcd at {ep}"))?);
        }
        Ok(Etcd { script, dir, endpoints, tls, members })
    }

    /// SIGKILLs member `j` at once (the script's `kill` would first start a shell, and a
    /// write sent meanwhile would be acknowledged by the leader about to die, measuring no
    /// outage), then waits until it is gone.
    async fn kill_member(&self, j: usize) -> anyhow::Result<()> {
        let pid_file = self.dir.join(format!("e{}.pid", j + 1));
        let pid: i32 = std::fs::read_to_string(&pid_file).with_context(|| format!("reading {}", pid_file.display()))?.trim().parse().with_context(|| format!("{} holds no pid", pid_file.display()))?;
        // SAFETY: kill(2) with a pid read from the member's pid file and a valid signal.
        if unsafe { libc::kill(pid, libc::SIGKILL) } != 0 {
            bail!("kill -9 {pid} (etcd member e{}): {}", j + 1, std::io::Error::last_os_error());
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        // Gone, or a zombie waiting for whoever adopted it.
        while std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))) {
            if Instant::now() > deadline {
                bail!("etcd member e{} (pid {pid}) still runs 10 s after SIGKILL", j + 1);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }

    async fn script(&self, args: &[&str]) -> anyhow::Result<()> {
        let (cmd, rest) = args.split_first().expect("a subcommand");
        let out = tokio::process::Command::new("bash").arg(&self.script).arg(cmd).arg(&self.dir).args(rest).output().await?;
        if !out.status.success() {
            bail!("etcd-cluster.sh {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
        }
        Ok(())
    }
}

/// One writer's connection: to the store, or to a server's Kubernetes API.
enum Writer {
    Store(crate::load::Conn),
    Api(Box<kube::Api<ConfigMap>>),
}

impl Writer {
    /// Writes value `seq` under writer `i`'s key (or ConfigMap).
    async fn write(&mut self, i: usize, seq: u64) -> anyhow::Result<()> {
        match self {
            Writer::Store(c) => c.put(format!("/failover/w{i}").as_bytes(), seq.to_string().as_bytes()).await,
            Writer::Api(api) => {
                let patch = serde_json::json!({"data": {"seq": seq.to_string()}});
                api.patch(&format!("failover-w{i}"), &kube::api::PatchParams::default(), &kube::api::Patch::Merge(patch)).await.map(|_| ()).map_err(Into::into)
            }
        }
    }
}

/// `clients` writers spread over the members `targets` (indices into the target's
/// servers): store connections, or with `api` kube-rs clients of those servers' APIs.
async fn writers(target: &Target, targets: &[usize], clients: usize, api: bool) -> anyhow::Result<Vec<Writer>> {
    let endpoints = target.endpoints();
    if !api {
        let eps: Vec<String> = targets.iter().map(|&j| endpoints[j].clone()).collect();
        return Ok(connect(target.system(), &eps, clients, Some(&target.tls())).await?.into_iter().map(Writer::Store).collect());
    }
    let Target::Keelson(cluster) = target else { bail!("--api drives Keelson only") };
    let kc = kube::config::Kubeconfig::read_from(cluster.kubeconfig_path())?;
    let mut apis = Vec::new();
    for &j in targets {
        let name = cluster.manifest().members[j].name.clone();
        let opts = kube::config::KubeConfigOptions { context: Some(name), ..Default::default() };
        let mut cfg = kube::Config::from_custom_kubeconfig(kc.clone(), &opts).await?;
        // A write refused while no leader exists is retried by the writer at once, not
        // after kube-rs' back-off.
        cfg.default_retry = false;
        apis.push(kube::Api::<ConfigMap>::namespaced(kube::Client::try_from(cfg)?, "default"));
    }
    for i in 0..clients {
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({"metadata": {"name": format!("failover-w{i}")}}))?;
        match apis[0].create(&kube::api::PostParams::default(), &cm).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok((0..clients).map(|i| Writer::Api(Box::new(apis[i % apis.len()].clone()))).collect())
}

/// Writers until `stop`, each recording its acknowledged writes.
fn start_writers(conns: Vec<Writer>, base: Instant, stop: Arc<AtomicBool>, acks: Arc<Mutex<Vec<Ack>>>) -> Vec<tokio::task::JoinHandle<()>> {
    conns
        .into_iter()
        .enumerate()
        .map(|(i, mut conn)| {
            let (stop, acks) = (stop.clone(), acks.clone());
            tokio::spawn(async move {
                let mut seq = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let sent = base.elapsed().as_secs_f64();
                    seq += 1;
                    match conn.write(i, seq).await {
                        Ok(()) => acks.lock().expect("acks").push(Ack { sent, acked: base.elapsed().as_secs_f64() }),
                        // Failed fast (connection refused, no leader): try again soon.
                        Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                    }
                }
            })
        })
        .collect()
}

/// Kills the leader (or, without `kill_leader`, a follower) under a write load on the
/// other members and measures the outage; then restarts it and measures its catch-up.
/// `Ok(None)` when leadership moved before the kill (nothing was killed).
async fn kill_round(target: &mut Target, kill_leader: bool, clients: usize, api: bool) -> anyhow::Result<Option<(Outage, f64)>> {
    let (leader, _) = target.leader().await?;
    let n = target.endpoints().len();
    let victim = if kill_leader { leader } else { (leader + 1) % n };
    let survivors: Vec<usize> = (0..n).filter(|j| *j != victim).collect();
    let conns = writers(target, &survivors, clients, api).await?;
    let (base, stop, acks) = (Instant::now(), Arc::new(AtomicBool::new(false)), Arc::new(Mutex::new(Vec::new())));
    let writers = start_writers(conns, base, stop.clone(), acks.clone());
    let stop_writers = |writers: Vec<tokio::task::JoinHandle<()>>| async move {
        stop.store(true, Ordering::Relaxed);
        for w in writers {
            let _ = tokio::time::timeout(Duration::from_secs(5), w).await;
        }
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    if kill_leader && !target.position(victim).await.is_some_and(|p| p.is_leader) {
        stop_writers(writers).await;
        return Ok(None);
    }
    let fault = base.elapsed().as_secs_f64();
    target.kill(victim).await?;
    // Until a second of acknowledged writes after the first one sent after the kill.
    let measured = loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = base.elapsed().as_secs_f64();
        let o = outage(&acks.lock().expect("acks"), fault);
        match o {
            Some(o) if now > fault + o.first_after_ms / 1000.0 + 1.0 => break Some(o),
            _ if now > fault + RECOVERY_LIMIT.as_secs_f64() => break None,
            _ => {}
        }
    };
    stop_writers(writers).await;
    let Some(o) = measured else { bail!("{}: no write sent after the kill was acknowledged within {RECOVERY_LIMIT:?}", target.system()) };
    let restarted = Instant::now();
    target.restart(victim).await?;
    let deadline = restarted + Duration::from_secs(60);
    loop {
        let (l, _) = target.leader().await?;
        if let (Some(lp), Some(vp)) = (target.position(l).await, target.position(victim).await) {
            if vp.applied >= lp.committed {
                break;
            }
        }
        if Instant::now() > deadline {
            bail!("{}: the restarted member did not catch up within 60 s", target.system());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let catch_up = restarted.elapsed().as_secs_f64() * 1000.0;
    tokio::time::sleep(Duration::from_secs(1)).await;
    Ok(Some((o, catch_up)))
}

/// [`kill_round`], run again (up to three times) when leadership moved before the kill.
async fn kill_round_again(target: &mut Target, kill_leader: bool, clients: usize, api: bool) -> anyhow::Result<(Outage, f64)> {
    for _ in 0..3 {
        if let Some(r) = kill_round(target, kill_leader, clients, api).await? {
            return Ok(r);
        }
        eprintln!("bench: {}: leadership moved before the kill; again", target.system());
    }
    bail!("{}: leadership moved before each of three kills", target.system())
}

/// Leader changes seen (by leader and term, polled every 100 ms) during `secs` of writes
/// on every member and no faults.
async fn quiet_leader_changes(target: &Target, clients: usize, secs: u64, api: bool) -> anyhow::Result<usize> {
    let all: Vec<usize> = (0..target.endpoints().len()).collect();
    let conns = writers(target, &all, clients, api).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let writers = start_writers(conns, Instant::now(), stop.clone(), Arc::new(Mutex::new(Vec::new())));
    let mut seen = target.leader().await?;
    let mut changes = 0;
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = target.leader().await?;
        if now != seen {
            changes += 1;
            seen = now;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        let _ = w.await;
    }
    Ok(changes)
}

async fn bench_system(target: &mut Target, args: &FailoverBenchArgs) -> anyhow::Result<SystemFailover> {
    let mut r = SystemFailover::default();
    if args.quiet_secs > 0 {
        eprintln!("bench: {}: {} s of writes without faults", target.system(), args.quiet_secs);
        let changes = quiet_leader_changes(target, args.clients, args.quiet_secs, args.api).await?;
        eprintln!("bench: {}: {changes} leader changes in {} s without faults", target.system(), args.quiet_secs);
        r.quiet_leader_changes = Some(changes);
    }
    for k in 0..args.kills {
        let (o, catch_up) = kill_round_again(target, true, args.clients, args.api).await?;
        eprintln!("bench: {}: leader kill {}: gap {:.0} ms, first write after {:.0} ms, catch-up {:.0} ms", target.system(), k + 1, o.gap_ms, o.first_after_ms, catch_up);
        r.leader_kills.push(o);
        r.catch_up_ms.push(catch_up);
    }
    let (o, _) = kill_round_again(target, false, args.clients, args.api).await?;
    eprintln!("bench: {}: follower kill: gap {:.0} ms", target.system(), o.gap_ms);
    r.follower_kill = Some(o);
    let gaps: Vec<f64> = r.leader_kills.iter().map(|o| o.gap_ms).collect();
    let firsts: Vec<f64> = r.leader_kills.iter().map(|o| o.first_after_ms).collect();
    (r.gap_p50_ms, r.gap_max_ms) = (percentile(&gaps, 0.5), percentile(&gaps, 1.0));
    (r.first_after_p50_ms, r.first_after_max_ms) = (percentile(&firsts, 0.5), percentile(&firsts, 1.0));
    Ok(r)
}

pub async fn run_failover_bench(args: FailoverBenchArgs) -> anyhow::Result<()> {
    if args.kills == 0 || args.clients == 0 {
        bail!("--kills and --clients must be positive");
    }
    if args.etcd_only && !args.compare_etcd {
        bail!("--etcd-only needs --compare-etcd");
    }
    if args.api && (args.compare_etcd || args.etcd_only) {
        bail!("--api drives Keelson's Kubernetes API; etcd has none to compare");
    }
    let tmp = tempfile::tempdir()?;
    let root = args.data_dir.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    std::fs::create_dir_all(&root)?;
    let mut systems: Vec<(&str, SystemFailover)> = Vec::new();
    // A system that fails midway is reported as an error after the figures of those that
    // finished, which are printed all the same.
    let mut failed = None;
    if !args.etcd_only {
        let spec = ClusterSpec::loopback(3, std::env::current_exe()?, root.join("keelson"));
        let mut target = Target::Keelson(Box::new(Cluster::start(spec, |m| eprintln!("bench: keelson: {m}")).await?));
        let r = bench_system(&mut target, &args).await;
        target.stop().await?;
        match r {
            Ok(r) => systems.push(("keelson", r)),
            Err(e) => failed = Some(e),
        }
    }
    if args.compare_etcd && failed.is_none() {
        let mut target = Target::Etcd(Etcd::start(find_etcd_script(&args.etcd_script)?, &root).await?);
        let r = bench_system(&mut target, &args).await;
        target.stop().await?;
        match r {
            Ok(r) => systems.push(("etcd", r)),
            Err(e) => failed = Some(e),
        }
    }
    if args.json {
        let mut obj = serde_json::Map::new();
        obj.insert("kills".into(), args.kills.into());
        obj.insert("clients".into(), args.clients.into());
        obj.insert("through".into(), if args.api { "kubernetes-api" } else { "store" }.into());
        for (name, r) in &systems {
            obj.insert(format!("{name}_gap_p50_ms"), r.gap_p50_ms.into());
            obj.insert(format!("{name}_gap_max_ms"), r.gap_max_ms.into());
            obj.insert((*name).into(), serde_json::to_value(r)?);
        }
        println!("{}", serde_json::to_string_pretty(&obj)?);
    } else {
        for (name, r) in &systems {
            println!(
                "{name}: leader kill ×{}: write gap p50 {:.0} ms, max {:.0} ms; first write after the kill p50 {:.0} ms, max {:.0} ms; follower kill gap {:.0} ms; catch-up p50 {:.0} ms{}",
                r.leader_kills.len(),
                r.gap_p50_ms,
                r.gap_max_ms,
                r.first_after_p50_ms,
                r.first_after_max_ms,
                r.follower_kill.map(|o| o.gap_ms).unwrap_or(0.0),
                percentile(&r.catch_up_ms, 0.5),
                r.quiet_leader_changes.map(|c| format!("; {c} leader changes without faults")).unwrap_or_default(),
            );
        }
    }
    failed.map_or(Ok(()), Err)
}
