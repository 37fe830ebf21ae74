//! [`check_self_heal`]: the pure judgement of a self-healing run.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::{Declared, FinalState, NodeFault, PodSeen, Recovery, SeenKind, SelfHealHistory, SelfHealReport, SelfHealViolation};

/// The Deployment's workload label value.
pub const DEPLOYMENT: &str = "deployment";
/// The DaemonSet's.
pub const DAEMONSET: &str = "daemonset";
/// The StatefulSet's.
pub const STATEFULSET: &str = "statefulset";

/// A deletion seen this soon after its node was cut off may have been confirmed by the
/// node just before (the watch delivered it a moment later).
const DELETION_MARGIN_MS: u64 = 1_000;

fn violation(property: &str, detail: String) -> SelfHealViolation {
    SelfHealViolation { property: property.into(), detail }
}

/// Judges a self-healing run (see the module documentation).
pub fn check_self_heal(h: &SelfHealHistory) -> SelfHealReport {
    let mut report = SelfHealReport {
        observations: h.pods.iter().filter(|p| matches!(p.kind, SeenKind::Apply | SeenKind::Delete | SeenKind::RelistItem)).count(),
        ..Default::default()
    };
    bound_once(h, &mut report);
    identities(h, &mut report);
    surge(h, &mut report);
    recoveries(h, &mut report);
    report.violations.extend(after_healing(&h.declared, &h.final_state));
    let f = &h.final_state;
    let calls = f.client_calls_ok + f.client_calls_failed;
    report.client_success_rate = (calls > 0).then(|| f.client_calls_ok as f64 / calls as f64);
    report
}

/// A StatefulSet pod is gone from the API only once it is known dead: deleted while its
/// node was cut off or frozen (so nobody could have confirmed its containers stopped), its
/// replacement may run beside it.
fn identities(h: &SelfHealHistory, report: &mut SelfHealReport) {
    let mut flagged: BTreeSet<&str> = BTreeSet::new();
    for p in h.pods.iter().filter(|p| p.kind == SeenKind::Delete && p.workload == STATEFULSET) {
        let Some(node) = p.node.as_deref() else { continue };
        let cut_off = h.faults.iter().find(|f| {
            matches!(f.kind, super::NodeFaultKind::CutFromServers | super::NodeFaultKind::Freeze)
                && f.node == node
                && f.start_ms + DELETION_MARGIN_MS <= p.at_ms
                && f.end_ms.is_none_or(|e| p.at_ms < e)
        });
        if let Some(f) = cut_off {
            if flagged.insert(p.uid.as_str()) {
                report.violations.push(violation(
                    "identity",
                    format!(
                        "StatefulSet pod {} (uid {}) was deleted at +{:.1}s while its node {node} was cut off ({}): its containers may still run beside its replacement",
                        p.name,
                        p.uid,
                        p.at_ms as f64 / 1000.0,
                        f.what
                    ),
                ));
            }
        }
    }
}

/// A pod is bound to one node for its whole life.
fn bound_once(h: &SelfHealHistory, report: &mut SelfHealReport) {
    let mut nodes: BTreeMap<&str, (&str, BTreeSet<&str>)> = BTreeMap::new();
    for p in &h.pods {
        if let Some(n) = &p.node {
            nodes.entry(p.uid.as_str()).or_insert_with(|| (p.name.as_str(), BTreeSet::new())).1.insert(n.as_str());
        }
    }
    for (uid, (name, set)) in nodes {
        if set.len() > 1 {
            report.violations.push(violation(
                "bound-twice",
                format!("pod {name} (uid {uid}) was seen bound to {}", set.into_iter().collect::<Vec<_>>().join(" and ")),
            ));
        }
    }
}

/// One server's view, relists applied as they complete.
#[derive(Default)]
struct ServerView<'a> {
    pods: HashMap<&'a str, &'a PodSeen>,
    relist: Option<HashMap<&'a str, &'a PodSeen>>,
}

impl<'a> ServerView<'a> {
    fn apply(&mut self, p: &'a PodSeen) {
        match p.kind {
            SeenKind::Apply => {
                self.pods.insert(&p.uid, p);
            }
            SeenKind::Delete => {
                self.pods.remove(p.uid.as_str());
            }
            SeenKind::RelistStart => self.relist = Some(HashMap::new()),
            SeenKind::RelistItem => match self.relist.as_mut() {
                Some(r) => {
                    r.insert(&p.uid, p);
                }
                None => {
                    self.pods.insert(&p.uid, p);
                }
            },
            SeenKind::RelistDone => {
                if let Some(r) = self.relist.take() {
                    self.pods = r;
                }
            }
        }
    }

    fn running(&self, workload: &str) -> u32 {
        self.pods.values().filter(|p| p.workload == workload && p.phase == "Running" && !p.terminating).count() as u32
    }
}

/// Never more than `replicas + maxSurge` Running, non-terminating Deployment pods in one
/// server's view.
fn surge(h: &SelfHealHistory, report: &mut SelfHealReport) {
    let bound = h.declared.replicas + h.declared.max_surge;
    let servers: BTreeSet<usize> = h.pods.iter().map(|p| p.server).collect();
    for s in servers {
        let mut view = ServerView::default();
        let mut flagged = false;
        for p in h.pods.iter().filter(|p| p.server == s) {
            view.apply(p);
            let n = view.running(DEPLOYMENT);
            report.max_running = report.max_running.max(n);
            if n > bound && !flagged {
                flagged = true;
                let names: Vec<&str> = view
                    .pods
                    .values()
                    .filter(|q| q.workload == DEPLOYMENT && q.phase == "Running" && !q.terminating)
                    .map(|q| q.name.as_str())
                    .collect();
                report.violations.push(violation(
                    "surge",
                    format!(
                        "server n{s} showed {n} Running Deployment pods at +{:.1}s, more than replicas {} + maxSurge {}: {}",
                        p.at_ms as f64 / 1000.0,
                        h.declared.replicas,
                        h.declared.max_surge,
                        names.join(", ")
                    ),
                ));
            }
        }
    }
}

/// The newest state of every pod over all servers (by resourceVersion).
#[derive(Default)]
struct MergedView<'a> {
    pods: HashMap<&'a str, (&'a PodSeen, bool)>,
}

impl<'a> MergedView<'a> {
    fn apply(&mut self, p: &'a PodSeen) {
        let deleted = match p.kind {
            SeenKind::Apply | SeenKind::RelistItem => false,
            SeenKind::Delete => true,
            SeenKind::RelistStart | SeenKind::RelistDone => return,
        };
        match self.pods.get(p.uid.as_str()) {
            Some((old, old_deleted)) if old.revision > p.revision || (*old_deleted && old.revision == p.revision) => {}
            _ => {
                self.pods.insert(&p.uid, (p, deleted));
            }
        }
    }

    /// Ready Deployment pods on nodes `healthy` accepts, observed after `fresh_after` of
    /// their node.
    fn ready_on(&self, healthy: &dyn Fn(&str) -> bool, fresh_after: &dyn Fn(&str) -> u64) -> u32 {
        self.pods
            .values()
            .filter(|(p, deleted)| !deleted && p.workload == DEPLOYMENT && p.ready && !p.terminating)
            .filter(|(p, _)| p.node.as_deref().is_some_and(|n| healthy(n) && p.at_ms >= fresh_after(n)))
            .count() as u32
    }
}

/// Faults taking `node` away at `t`.
fn away_at(faults: &[NodeFault], node: &str, t: u64) -> bool {
    faults.iter().any(|f| f.kind.takes_node_away() && f.node == node && f.start_ms <= t && f.end_ms.is_none_or(|e| t < e))
}

/// When the last fault that took `node` away before `t` ended (0 if none): a pod state
/// from before that moment says nothing about the pod now.
fn healed_at(faults: &[NodeFault], node: &str, t: u64) -> u64 {
    faults
        .iter()
        .filter(|f| f.kind.takes_node_away() && f.node == node)
        .filter_map(|f| f.end_ms)
        .filter(|&e| e <= t)
        .max()
        .unwrap_or(0)
}

/// Time from each fault that took Ready replicas away to `replicas` Ready pods on healthy
/// nodes.
fn recoveries(h: &SelfHealHistory, report: &mut SelfHealReport) {
    let mut order: Vec<&PodSeen> = h.pods.iter().collect();
    order.sort_by_key(|p| p.at_ms);
    let mut view = MergedView::default();
    let mut next = 0;
    let faults: Vec<&NodeFault> = h.faults.iter().filter(|f| f.kind.takes_node_away()).collect();
    let mut pending: Vec<usize> = Vec::new();
    let replicas = h.declared.replicas;
    let ready_at = |view: &MergedView, t: u64| {
        view.ready_on(&|n| !away_at(&h.faults, n, t), &|n| healed_at(&h.faults, n, t))
    };
    for f in &faults {
        while next < order.len() && order[next].at_ms <= f.start_ms {
            view.apply(order[next]);
            let t = order[next].at_ms;
            settle(&mut pending, report, ready_at(&view, t) >= replicas, t);
            next += 1;
        }
        let affected = view
            .pods
            .values()
            .any(|(p, deleted)| !deleted && p.workload == DEPLOYMENT && p.ready && !p.terminating && p.node.as_deref() == Some(f.node.as_str()));
        report.recoveries.push(Recovery { what: f.what.clone(), at_ms: f.start_ms, affected, after_ms: None, by_replacement: false });
        if affected {
            pending.push(report.recoveries.len() - 1);
            settle(&mut pending, report, ready_at(&view, f.start_ms) >= replicas, f.start_ms);
        }
    }
    while next < order.len() {
        view.apply(order[next]);
        let t = order[next].at_ms;
        settle(&mut pending, report, ready_at(&view, t) >= replicas, t);
        next += 1;
    }
    for i in pending {
        let r = &report.recoveries[i];
        report.violations.push(violation(
            "no-recovery",
            format!("after {} at +{:.1}s the Deployment never again had {replicas} Ready pods on healthy nodes", r.what, r.at_ms as f64 / 1000.0),
        ));
    }
    for r in report.recoveries.iter_mut() {
        let end = h.faults.iter().find(|f| f.start_ms == r.at_ms && f.what == r.what).and_then(|f| f.end_ms);
        r.by_replacement = match (r.after_ms, end) {
            (Some(a), Some(e)) => r.at_ms + a < e,
            (Some(_), None) => true,
            _ => false,
        };
    }
}

/// Marks every pending recovery done at `t` when `recovered`.
fn settle(pending: &mut Vec<usize>, report: &mut SelfHealReport, recovered: bool, t: u64) {
    if !recovered {
        return;
    }
    for i in pending.drain(..) {
        let r = &mut report.recoveries[i];
        r.after_ms = Some(t.saturating_sub(r.at_ms));
    }
}

/// What must hold once the cluster is healed, and does not in `f`: the checker's verdict
/// on the final state, and the run's test of convergence while it waits for it.
pub fn after_healing(declared: &Declared, f: &FinalState) -> Vec<SelfHealViolation> {
    let mut violations = Vec::new();
    let ready: BTreeSet<&str> = f.ready_nodes.iter().map(String::as_str).collect();
    for n in &f.nodes {
        if !ready.contains(n.as_str()) {
            violations.push(violation("node-not-ready", format!("node {n} is not Ready after healing")));
        }
    }
    for n in &ready {
        let on: Vec<&str> = f
            .pods
            .iter()
            .filter(|p| p.workload == DAEMONSET && !p.terminating && p.node.as_deref() == Some(*n))
            .map(|p| p.name.as_str())
            .collect();
        let ok = on.len() == 1 && f.pods.iter().any(|p| p.name == on[0] && p.ready);
        if !ok {
            violations.push(violation(
                "daemonset",
                format!("node {n} has {} DaemonSet pod(s) after healing ({}), not exactly one Ready", on.len(), on.join(", ")),
            ));
        }
    }
    for i in 0..declared.statefulset_replicas {
        let name = format!("db-{i}");
        let pod = f.pods.iter().find(|p| p.workload == STATEFULSET && p.name == name);
        let claim = format!("data-{name}");
        match pod {
            Some(p) if p.ready && !p.terminating && p.claims.contains(&claim) && f.bound_claims.contains(&claim) => {}
            Some(p) => violations.push(violation(
                "statefulset",
                format!(
                    "{name} is not back after healing: ready {}, terminating {}, claims {:?}, {claim} {}",
                    p.ready,
                    p.terminating,
                    p.claims,
                    if f.bound_claims.contains(&claim) { "Bound" } else { "not Bound" }
                ),
            )),
            None => violations.push(violation("statefulset", format!("{name} does not exist after healing"))),
        }
    }
    let mut ready_ips: Vec<&str> = f
        .pods
        .iter()
        .filter(|p| p.workload == DEPLOYMENT && p.ready && !p.terminating)
        .filter_map(|p| p.ip.as_deref())
        .collect();
    ready_ips.sort_unstable();
    let mut endpoints: Vec<&str> = f.service_endpoints.iter().map(String::as_str).collect();
    endpoints.sort_unstable();
    if ready_ips != endpoints {
        violations.push(violation(
            "endpoints",
            format!("the Service's Endpoints list {endpoints:?} after healing, its Ready pods are {ready_ips:?}"),
        ));
    }
    let deployment_ready = f.pods.iter().filter(|p| p.workload == DEPLOYMENT && p.ready && !p.terminating).count() as u32;
    if deployment_ready != declared.replicas {
        violations.push(violation(
            "deployment",
            format!("{deployment_ready} Ready Deployment pods after healing, not {}", declared.replicas),
        ));
    }
    if !f.job_complete || f.job_succeeded != declared.job_completions {
        violations.push(violation(
            "job",
            format!(
                "the Job has {} succeeded of {} completions after healing{}",
                f.job_succeeded,
                declared.job_completions,
                if f.job_complete { "" } else { " and is not Complete" }
            ),
        ));
    }
    let stuck: Vec<String> = f
        .pods
        .iter()
        .filter(|p| p.terminating || p.phase == "Pending")
        .map(|p| format!("{} ({}{})", p.name, if p.terminating { "Terminating" } else { "Pending" }, p.node.as_deref().map(|n| format!(" on {n}")).unwrap_or_default()))
        .collect();
    if !stuck.is_empty() {
        violations.push(violation("converged", format!("pods left after healing: {}", stuck.join(", "))));
    }
    if !f.acknowledged_missing.is_empty() {
        violations.push(violation(
            "acknowledged-lost",
            format!("{} of {} acknowledged writes are gone: {}", f.acknowledged_missing.len(), f.acknowledged, f.acknowledged_missing.join(", ")),
        ));
    }
    violations
}

#[cfg(test)]
#[path = "check_tests.rs"]
mod tests;
