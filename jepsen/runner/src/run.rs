//! One run: cluster up, workload + nemesis for the time limit, heal, settle, check.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use keelson_chaos::{Harness, HarnessSpec, Isolation, NemesisEvent, NemesisFamily};
use keelson_jepsen::lease::{FailoverStats, LeaseHistory, WriteOutcome};
use keelson_jepsen::{linear, pair_events, EventKind, HistoryWriter, ModelKind};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use crate::kube_api::KubeTarget;
use crate::kube_register::{KubeRegisterWorkload, CAS_CONFLICT};
use crate::kube_watch::KubeWatchWorkload;
use crate::lease::{HolderCell, LeaseRun, LeaseWorkload};
use crate::register::{RegisterWorkload, CAS_MISMATCH};
use crate::self_heal::{SelfHealRun, SelfHealWorkload};
use crate::watch::WatchWorkload;

/// Which workload to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// Compare-and-set registers on the store API.
    Register,
    /// Watchers following writers on the store API.
    Watch,
    /// Compare-and-set registers as ConfigMaps through the Kubernetes API.
    KubeRegister,
    /// Kubernetes API watches of ConfigMaps, checked against the store's own watch.
    KubeWatch,
    /// One contender per server elected through a Lease, appending writes fenced on its
    /// term's token; checked by `keelson_jepsen::lease` (see [`crate::lease`]).
    Lease,
    /// A Deployment, a DaemonSet and a Job on real nodes under node faults; checked by
    /// `keelson_jepsen::self_heal` (see [`crate::self_heal`]).
    SelfHeal,
}

impl WorkloadEnd {
    /// What the workload found itself, one indented line each, for the verdict's summary.
    fn report_lines(&self) -> String {
        let violations = self.violations.iter().map(|v| format!("\n  workload: {v}"));
        violations.chain(self.notes.iter().map(|n| format!("\n  note: {n}"))).collect()
    }
}

impl Workload {
    /// Whether the history is checked by the watch checker (else linearizability).
    fn is_watch(self) -> bool {
        matches!(self, Workload::Watch | Workload::KubeWatch)
    }
}

/// What a workload reports besides its history.
#[derive(Debug, Default)]
struct WorkloadEnd {
    invoked: u64,
    /// Anomalies the history checkers cannot see.
    violations: Vec<String>,
    notes: Vec<String>,
    /// What the lease workload recorded (its own history).
    lease: Option<LeaseRun>,
    /// What the self-heal workload recorded.
    self_heal: Option<SelfHealRun>,
}

/// Parameters of a run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub servers: usize,
    /// Nodes (`keelson agent` with containerd; the self-heal workload needs them).
    pub nodes: usize,
    /// Extra arguments for every `keelson agent`.
    pub node_args: Vec<String>,
    /// [`Workload::SelfHeal`]: how long to wait after the heal for the cluster to
    /// converge before judging it.
    pub converge: Duration,
    pub workload: Workload,
    pub nemesis: Vec<NemesisFamily>,
    pub time_limit: Duration,
    /// Time between a fault and its heal (and between heal and the next fault).
    pub nemesis_interval: Duration,
    pub seed: u64,
    pub clients: usize,
    /// Where the history, nemesis log, server logs and timeline go.
    pub dir: PathBuf,
    pub keelson_bin: PathBuf,
    pub isolation: Isolation,
    /// Parameters of [`Workload::Lease`] (ignored by the others).
    pub lease: LeaseWorkload,
}

/// What a run found.
#[derive(Debug)]
pub struct RunVerdict {
    pub valid: bool,
    pub invoked: u64,
    pub ok: usize,
    pub fail: usize,
    pub info: usize,
    pub faults: usize,
    /// Share of operations invoked while a fault was active that the cluster served
    /// (completed `ok`, or a cas refused because its compare failed).
    pub availability_during_faults: Option<f64>,
    pub summary: String,
    pub dir: PathBuf,
    /// [`Workload::Lease`]: failover figures over the faults that hit the lease holder.
    pub failover: Option<FailoverStats>,
    /// [`Workload::SelfHeal`]: the checker's report (recovery figures).
    pub self_heal: Option<keelson_jepsen::SelfHealReport>,
}

/// A run that could not be carried out (as opposed to one that found an anomaly).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cluster harness: {0}")]
    Harness(String),
    #[error("history: {0}")]
    History(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Runs workload and nemesis against a fresh cluster and checks the history.
pub async fn run(opts: RunOptions) -> Result<RunVerdict, RunError> {
    std::fs::create_dir_all(&opts.dir)?;
    let history_path = opts.dir.join("history.jsonl");
    let history = Arc::new(HistoryWriter::create(&history_path).map_err(|e| RunError::History(e.to_string()))?);
    let epoch = Instant::now();
    let mut server_args: Vec<String> = ["--snapshot-every", "2000", "--keep-logs", "200"].map(String::from).to_vec();
    if opts.workload == Workload::SelfHeal {
        server_args.extend(SELF_HEAL_SERVER_ARGS.map(String::from));
        eprintln!("jepsen: self-heal timings: servers {}; pods tolerate not-ready/unreachable for 2 s", SELF_HEAL_SERVER_ARGS.join(" "));
    }
    let spec = HarnessSpec {
        servers: opts.servers,
        nodes: opts.nodes,
        node_args: opts.node_args.clone(),
        binary: opts.keelson_bin.clone(),
        dir: opts.dir.join("cluster"),
        isolation: opts.isolation,
        server_args,
        seed: opts.seed,
    };
    // Nemesis events are timed from the start of `Harness::start`; history events from
    // the writer's creation (just before `epoch`).
    let harness_offset = epoch.elapsed();
    let harness = Harness::start(spec).await.map_err(|e| RunError::Harness(e.to_string()))?;
    let endpoints = harness.cluster().endpoints();
    let tls = harness.cluster().tls().clone();
    let kube_target = KubeTarget {
        api_endpoints: harness.cluster().api_endpoints(),
        pki_dir: harness.cluster().pki_dir(),
        store_endpoints: endpoints.clone(),
        store_tls: Some(tls.clone()),
    };
    let kube_target_for_nemesis = kube_target.clone();
    eprintln!("jepsen: cluster of {} up ({:?}); running for {:?}", opts.servers, harness.cluster().isolation(), opts.time_limit);
    let harness = Arc::new(Mutex::new(harness));

    let stop_workload = CancellationToken::new();
    let stop_nemesis = CancellationToken::new();
    let holder = HolderCell::default();
    let wl = {
        let history = history.clone();
        let endpoints = endpoints.clone();
        let stop = stop_workload.clone();
        let seed = opts.seed;
        let clients = opts.clients.max(2);
        let plain = |invoked| WorkloadEnd { invoked, ..Default::default() };
        match opts.workload {
            Workload::Register => {
                let w = RegisterWorkload { clients, ..Default::default() };
                tokio::spawn(async move { plain(w.run(&endpoints, Some(&tls), history, seed, stop).await) })
            }
            Workload::Watch => {
                let w = WatchWorkload { writers: clients / 2, watchers: clients - clients / 2, ..Default::default() };
                tokio::spawn(async move { plain(w.run(&endpoints, Some(&tls), history, seed, stop).await) })
            }
            Workload::KubeRegister => {
                let w = KubeRegisterWorkload { clients, ..Default::default() };
                tokio::spawn(async move {
                    let invoked = w.run(&kube_target, history, seed, stop).await;
                    let mut end = plain(invoked);
                    if invoked == 0 {
                        end.violations.push("no operation was invoked: the Kubernetes API could not be reached (see stderr)".into());
                    }
                    end
                })
            }
            Workload::KubeWatch => {
                let w = KubeWatchWorkload { writers: clients / 2, watchers: clients - clients / 2, ..Default::default() };
                tokio::spawn(async move {
                    let r = w.run(&kube_target, history, seed, stop).await;
                    WorkloadEnd { invoked: r.invoked, violations: r.violations, notes: r.notes, ..Default::default() }
                })
            }
            Workload::Lease => {
                let w = opts.lease.clone();
                let holder = holder.clone();
                tokio::spawn(async move {
                    let mut r = w.run(&kube_target, epoch, seed, holder, stop).await;
                    WorkloadEnd {
                        invoked: r.writes.len() as u64,
                        violations: std::mem::take(&mut r.violations),
                        notes: vec![format!("{} term(s) began", r.terms.len())],
                        lease: Some(r),
                        self_heal: None,
                    }
                })
            }
            Workload::SelfHeal => {
                let w = SelfHealWorkload { converge: opts.converge, ..SelfHealWorkload::for_run(opts.time_limit) };
                tokio::spawn(async move {
                    let mut r = w.run(&kube_target, epoch, stop).await;
                    WorkloadEnd {
                        invoked: r.final_state.acknowledged as u64,
                        violations: std::mem::take(&mut r.violations),
                        notes: std::mem::take(&mut r.notes),
                        lease: None,
                        self_heal: Some(r),
                    }
                })
            }
        }
    };
    let stop_holders = CancellationToken::new();
    let nemesis = if opts.workload == Workload::Lease {
        tokio::spawn(crate::lease_nemesis::run_targeted_nemesis(
            harness.clone(),
            opts.nemesis.clone(),
            opts.nemesis_interval,
            opts.seed,
            stop_nemesis.clone(),
            holder.clone(),
        ))
    } else if opts.workload == Workload::SelfHeal {
        let holders = crate::self_heal::Holders::default();
        let servers: Vec<String> = (0..opts.servers).map(|i| format!("keelson-{}", i + 1)).collect();
        match crate::kube_api::api_configs(&kube_target_for_nemesis).await.and_then(|c| crate::kube_api::clients(&c)) {
            Ok(clients) => {
                tokio::spawn(crate::self_heal::follow_holders(clients, servers, holders.clone(), stop_holders.clone()));
            }
            Err(e) => eprintln!("jepsen: lease holders cannot be followed ({e}): lease-kill faults will fail"),
        }
        tokio::spawn(keelson_chaos::run_nemesis_retargeted(
            harness.clone(),
            opts.nemesis.clone(),
            opts.nemesis_interval,
            opts.seed,
            stop_nemesis.clone(),
            crate::self_heal::retarget(holders),
        ))
    } else {
        tokio::spawn(keelson_chaos::run_nemesis(
            harness.clone(),
            opts.nemesis.clone(),
            opts.nemesis_interval,
            opts.seed,
            stop_nemesis.clone(),
        ))
    };
    tokio::time::sleep(opts.time_limit).await;
    stop_nemesis.cancel();
    let events = nemesis.await.unwrap_or_default();
    stop_holders.cancel();
    // Heal everything and let the cluster settle while clients keep going, so
    // operations also run against the healed cluster.
    let healed = {
        let mut h = harness.lock().await;
        let healed = h.apply(keelson_chaos::Fault::HealAll).await;
        let settled = h.cluster().wait_healthy(Duration::from_secs(60)).await.map_err(keelson_chaos::ChaosError::from);
        healed.map(|_| ()).and(settled)
    };
    // The lease workload also gets a lease duration to recover from the last fault.
    let settle = match opts.workload {
        Workload::Lease => Duration::from_secs(3) + opts.lease.lease_duration,
        _ => Duration::from_secs(3),
    };
    tokio::time::sleep(settle).await;
    stop_workload.cancel();
    let end = wl.await.unwrap_or_default();
    let _ = history.flush();
    let shutdown = match Arc::try_unwrap(harness) {
        Ok(h) => h.into_inner().shutdown().await.map_err(|e| e.to_string()),
        Err(_) => Err("harness still shared".to_string()),
    };
    if let Err(e) = healed {
        return Err(RunError::Harness(format!("cluster did not recover after healing: {e}")));
    }
    if let Err(e) = shutdown {
        eprintln!("jepsen: harness shutdown: {e}");
    }
    write_nemesis_log(&opts.dir, &events)?;
    check(&opts, &history_path, &end, &events, harness_offset)
}

/// At most `max` lines of `text`, and how many were left out.
fn abridged(text: &str, max: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() <= max {
        return text.to_string();
    }
    format!("{}\n  … {} more", lines[..max].join("\n"), lines.len() - max)
}

fn write_nemesis_log(dir: &std::path::Path, events: &[NemesisEvent]) -> std::io::Result<()> {
    let mut out = String::new();
    for e in events {
        out.push_str(&format!("{:>10.3}s {} {}{}\n", e.at.as_secs_f64(), e.wall, e.what, if e.ok { "" } else { " (failed)" }));
    }
    std::fs::write(dir.join("nemesis-schedule.log"), out)
}

fn is_heal(e: &NemesisEvent) -> bool {
    e.what.starts_with("heal") || e.what.starts_with("restart") || e.what.starts_with("resume")
}

fn count_faults(events: &[NemesisEvent]) -> usize {
    events.iter().filter(|e| e.ok && !is_heal(e)).count()
}

/// Fault windows `[start, end)` in history time (ns since the writer's epoch).
fn fault_windows(events: &[NemesisEvent], offset: Duration) -> Vec<(u64, u64)> {
    let mut windows = Vec::new();
    let mut open: Option<u64> = None;
    for e in events.iter().filter(|e| e.ok) {
        let t = (offset + e.at).as_nanos() as u64;
        match (is_heal(e), open) {
            (false, None) => open = Some(t),
            (true, Some(s)) => {
                windows.push((s, t));
                open = None;
            }
            _ => {}
        }
    }
    if let Some(s) = open {
        windows.push((s, u64::MAX));
    }
    windows
}

fn check(
    opts: &RunOptions,
    history_path: &std::path::Path,
    end: &WorkloadEnd,
    events: &[NemesisEvent],
    harness_offset: Duration,
) -> Result<RunVerdict, RunError> {
    let invoked = end.invoked;
    if opts.workload == Workload::Lease {
        return check_lease(opts, end, events, harness_offset);
    }
    if opts.workload == Workload::SelfHeal {
        return check_self_heal(opts, end, events, harness_offset);
    }
    let loaded = keelson_jepsen::history::read_jsonl(history_path).map_err(|e| RunError::History(e.to_string()))?;
    let hist: Vec<keelson_jepsen::HistoryEvent> = loaded.into_iter().map(|(_, e)| e).collect();
    // What the workload found itself, appended to the checker's summary.
    let extra = end.report_lines();
    if opts.workload.is_watch() {
        let report = keelson_jepsen::check_watch(&hist).map_err(|e| RunError::History(e.to_string()))?;
        let full = opts.dir.join("watch-report.txt");
        std::fs::write(&full, format!("{report}{extra}\n"))?;
        let count = |k: EventKind| hist.iter().filter(|e| e.kind == k && e.watcher.is_none()).count();
        return Ok(RunVerdict {
            valid: report.is_valid() && end.violations.is_empty(),
            invoked,
            ok: count(EventKind::Ok),
            fail: count(EventKind::Fail),
            info: count(EventKind::Info),
            faults: count_faults(events),
            availability_during_faults: None,
            summary: format!("{}{extra}\nfull report: {}", abridged(report.to_string().trim_end(), 40), full.display()),
            dir: opts.dir.clone(),
            failover: None,
            self_heal: None,
        });
    }
    let ops = pair_events(&hist).map_err(|e| RunError::History(e.to_string()))?;
    let report = linear::check(ModelKind::CasRegister, &ops).map_err(|e| RunError::History(e.to_string()))?;
    let count = |k: EventKind| hist.iter().filter(|e| e.kind == k).count();
    let windows = fault_windows(events, harness_offset);
    let mut during = (0usize, 0usize);
    let mut pending: std::collections::HashMap<u64, u64> = std::collections::HashMap::new();
    for e in &hist {
        match e.kind {
            EventKind::Invoke => {
                pending.insert(e.process, e.time);
            }
            kind => {
                if let Some(t) = pending.remove(&e.process) {
                    if windows.iter().any(|(s, end)| t >= *s && t < *end) {
                        // A cas whose compare failed was served: the cluster was available.
                        let served = kind == EventKind::Ok
                            || (kind == EventKind::Fail && matches!(e.error.as_deref(), Some(CAS_MISMATCH | CAS_CONFLICT)));
                        during.0 += 1;
                        during.1 += usize::from(served);
                    }
                }
            }
        }
    }
    let valid = report.is_linearizable() && end.violations.is_empty();
    let mut summary = report.summary();
    summary.push_str(&extra);
    if let Some(f) = report.failures.first() {
        summary.push('\n');
        summary.push_str(&f.render_text());
        let timeline = opts.dir.join("timeline.html");
        std::fs::write(&timeline, f.timeline_html())?;
        summary.push_str(&format!("\ntimeline: {}", timeline.display()));
    }
    Ok(RunVerdict {
        valid,
        invoked,
        ok: count(EventKind::Ok),
        fail: count(EventKind::Fail),
        info: count(EventKind::Info),
        faults: count_faults(events),
        availability_during_faults: (during.0 > 0).then(|| during.1 as f64 / during.0 as f64),
        summary,
        dir: opts.dir.clone(),
        failover: None,
        self_heal: None,
    })
}

/// The lease workload's verdict: its own history, the final state and the fault log
/// through `keelson_jepsen::lease` (artifacts: `lease-history.json`, `lease-report.txt`).
fn check_lease(opts: &RunOptions, end: &WorkloadEnd, events: &[NemesisEvent], harness_offset: Duration) -> Result<RunVerdict, RunError> {
    let empty = LeaseRun::default();
    let run = end.lease.as_ref().unwrap_or(&empty);
    let input = LeaseHistory {
        writes: run.writes.clone(),
        stored: run.stored.clone().unwrap_or_default(),
        faults: crate::lease_nemesis::fault_log(events, harness_offset),
        terms: run.terms.clone(),
        bound: opts.lease.bound(),
        end_ms: run.end_ms,
    };
    let json = serde_json::to_string_pretty(&input).map_err(|e| RunError::History(e.to_string()))?;
    std::fs::write(opts.dir.join("lease-history.json"), json)?;
    let report = keelson_jepsen::check_lease(&input).map_err(|e| RunError::History(e.to_string()))?;
    let mut extra = end.report_lines();
    if run.writes.is_empty() {
        extra.push_str("\n  workload: no write was attempted: no contender ever led (see stderr)");
    }
    let full = opts.dir.join("lease-report.txt");
    std::fs::write(&full, format!("{report}{extra}\n"))?;
    let count = |f: fn(&WriteOutcome) -> bool| run.writes.iter().filter(|w| f(&w.outcome)).count();
    // Served during faults: acknowledged, or refused as fenced (the cluster answered).
    let windows = fault_windows(events, harness_offset);
    let during: Vec<_> = run.writes.iter().filter(|w| windows.iter().any(|(s, e)| w.invoke_ms * 1_000_000 >= *s && w.invoke_ms * 1_000_000 < *e)).collect();
    let served = during.iter().filter(|w| matches!(w.outcome, WriteOutcome::Ok { .. } | WriteOutcome::Fenced)).count();
    Ok(RunVerdict {
        valid: report.is_valid() && end.violations.is_empty() && !run.writes.is_empty() && run.stored.is_some(),
        invoked: end.invoked,
        ok: count(|o| matches!(o, WriteOutcome::Ok { .. })),
        fail: count(|o| matches!(o, WriteOutcome::Fenced | WriteOutcome::Failed)),
        info: count(|o| *o == WriteOutcome::Unknown),
        faults: count_faults(events),
        availability_during_faults: (!during.is_empty()).then(|| served as f64 / during.len() as f64),
        summary: format!("{}{extra}\nfull report: {}", abridged(report.to_string().trim_end(), 40), full.display()),
        dir: opts.dir.clone(),
        failover: Some(report.failover_stats()),
        self_heal: None,
    })
}

/// Server flags of self-heal runs: a node is Unknown after 6 s without a heartbeat (the
/// runner's agents beat every 2 s), looked at every second; component Leases of 4 s.
const SELF_HEAL_SERVER_ARGS: [&str; 10] = [
    "--node-monitor-grace-period",
    "6s",
    "--node-monitor-period",
    "1s",
    "--leader-elect-lease-duration",
    "4s",
    "--leader-elect-renew-deadline",
    "3s",
    "--leader-elect-retry-period",
    "1s",
];

/// The self-heal verdict: `keelson_jepsen::self_heal` over what the workload recorded and
/// the nemesis log (artifacts: `self-heal-history.json`, `self-heal-report.txt`).
fn check_self_heal(opts: &RunOptions, end: &WorkloadEnd, events: &[NemesisEvent], harness_offset: Duration) -> Result<RunVerdict, RunError> {
    let empty = SelfHealRun::default();
    let run = end.self_heal.as_ref().unwrap_or(&empty);
    let input = keelson_jepsen::SelfHealHistory {
        declared: SelfHealWorkload::for_run(opts.time_limit).declared(),
        pods: run.pods.clone(),
        faults: crate::self_heal::node_faults(events, harness_offset),
        final_state: run.final_state.clone(),
        end_ms: run.end_ms,
    };
    let json = serde_json::to_string(&input).map_err(|e| RunError::History(e.to_string()))?;
    std::fs::write(opts.dir.join("self-heal-history.json"), json)?;
    let report = keelson_jepsen::check_self_heal(&input);
    let mut extra = end.report_lines();
    if run.pods.is_empty() {
        extra.push_str("\n  workload: no pod state was recorded (see stderr)");
    }
    let full = opts.dir.join("self-heal-report.txt");
    std::fs::write(&full, format!("{report}{extra}\n"))?;
    let missing = run.final_state.acknowledged_missing.len();
    Ok(RunVerdict {
        valid: report.is_valid() && end.violations.is_empty() && !run.pods.is_empty(),
        invoked: end.invoked,
        ok: run.final_state.acknowledged - missing.min(run.final_state.acknowledged),
        fail: missing,
        info: 0,
        faults: count_faults(events),
        availability_during_faults: None,
        summary: format!("{}{extra}\nfull report: {}", abridged(report.to_string().trim_end(), 40), full.display()),
        dir: opts.dir.clone(),
        failover: None,
        self_heal: Some(report),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(at_ms: u64, what: &str) -> NemesisEvent {
        NemesisEvent { at: Duration::from_millis(at_ms), wall: String::new(), what: what.into(), ok: true }
    }

    #[test]
    fn long_reports_are_abridged() {
        let text: String = (0..50).map(|i| format!("line {i}\n")).collect();
        let short = abridged(text.trim_end(), 40);
        assert_eq!(short.lines().count(), 41);
        assert!(short.ends_with("… 10 more"), "{short}");
        assert_eq!(abridged("a\nb", 40), "a\nb");
    }

    #[test]
    fn fault_windows_pair_faults_with_heals() {
        let events = [ev(100, "kill node 1"), ev(300, "restart node 1"), ev(500, "partition isolate node 0"), ev(900, "heal network")];
        let w = fault_windows(&events, Duration::from_millis(10));
        assert_eq!(w, vec![(110_000_000, 310_000_000), (510_000_000, 910_000_000)]);
        let open = fault_windows(&[ev(100, "pause node 2")], Duration::ZERO);
        assert_eq!(open, vec![(100_000_000, u64::MAX)]);
    }
}
