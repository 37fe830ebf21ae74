//! The self-healing checker: what a cluster of real nodes did under node faults, judged
//! after healing.
//!
//! The input ([`SelfHealHistory`]) is what a run recorded: every state of the workload's
//! pods that each server's watch delivered (with relists marked, so a watch that was cut
//! off and listed again forgets what it missed), the node faults with their heals, and the
//! state read once the cluster was healed and had converged (or had stopped trying to).
//! [`check_self_heal`] is pure. It finds:
//!
//! * a pod bound to two nodes (the scheduler or a deposed one bound it twice);
//! * more Running, non-terminating pods of the Deployment than `replicas + maxSurge` in
//!   one server's view at any moment;
//! * a fault that took Ready replicas away and after which the Deployment never had
//!   `replicas` Ready pods on healthy nodes again; the time to that moment is the fault's
//!   recovery figure ([`Recovery`]);
//! * a StatefulSet pod deleted while its node was cut off or frozen (not confirmed dead):
//!   its replacement may run beside it, two pods of one identity;
//! * after healing: a DaemonSet without exactly one Ready pod on every Ready node, a Job
//!   whose completions are lost or doubled, a StatefulSet identity not back (Ready, on its
//!   own claim, Bound), a Service whose Endpoints are not exactly its Ready pods, pods left
//!   Pending or Terminating, Nodes not Ready, and acknowledged writes that are gone.
//!
//! It also reports the success rate of the clients inside the cluster that called the
//! Service throughout the run.

mod check;

use serde::{Deserialize, Serialize};

pub use check::{after_healing, check_self_heal, DAEMONSET, DEPLOYMENT, STATEFULSET};

/// How a watch event reached the recorder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SeenKind {
    /// An added or modified object.
    Apply,
    /// A deleted object (its last state).
    Delete,
    /// The watch (re)started with a list: what follows until [`SeenKind::RelistDone`] is
    /// the whole current set.
    RelistStart,
    /// One object of a relist.
    RelistItem,
    /// The relist is complete: objects not listed are gone.
    RelistDone,
}

/// One state of one pod as one server's watch delivered it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodSeen {
    /// When the recorder received it, ms since the run's epoch.
    pub at_ms: u64,
    /// The server whose watch delivered it.
    pub server: usize,
    /// What the event was (`RelistStart`/`RelistDone` carry no pod: their other fields
    /// are empty).
    pub kind: SeenKind,
    /// The pod's uid.
    pub uid: String,
    /// Its name.
    pub name: String,
    /// Which of the run's workloads it belongs to (`deployment`, `daemonset`, `job`).
    pub workload: String,
    /// `spec.nodeName`, when bound.
    pub node: Option<String>,
    /// `status.phase`.
    pub phase: String,
    /// The Ready condition is True.
    pub ready: bool,
    /// `metadata.deletionTimestamp` is set.
    pub terminating: bool,
    /// `metadata.resourceVersion`.
    pub revision: u64,
}

/// What a node fault did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeFaultKind {
    /// The node lost power: its containers died with it.
    PowerOff,
    /// The node was frozen whole.
    Freeze,
    /// The node was cut off from the servers (its pods kept running).
    CutFromServers,
    /// The node was cut off from the other nodes only.
    CutFromNodes,
    /// A server (a lease holder's) was killed; `node` names the server.
    ServerKill,
    /// A server (a lease holder's) was cut off from the other servers.
    ServerIsolated,
    /// A server (a lease holder's) was frozen.
    ServerPaused,
    /// The node was drained (cordoned, its pods evicted through the API).
    Drain,
}

impl NodeFaultKind {
    /// Whether the fault takes the node's pods away from the Deployment's healthy set
    /// (they die, freeze, or the control plane stops hearing of them).
    pub fn takes_node_away(self) -> bool {
        matches!(self, NodeFaultKind::PowerOff | NodeFaultKind::Freeze | NodeFaultKind::CutFromServers)
    }
}

/// One fault and its heal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeFault {
    /// When it was applied, ms since the epoch.
    pub start_ms: u64,
    /// When it was healed; `None` if it never was.
    pub end_ms: Option<u64>,
    /// The node (or, for [`NodeFaultKind::ServerKill`], the server) it hit.
    pub node: String,
    /// What it did.
    pub kind: NodeFaultKind,
    /// The nemesis's description.
    pub what: String,
}

/// One pod after healing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodFinal {
    /// Its name.
    pub name: String,
    /// Its workload.
    pub workload: String,
    /// `spec.nodeName`.
    pub node: Option<String>,
    /// `status.phase`.
    pub phase: String,
    /// Ready=True.
    pub ready: bool,
    /// Being deleted.
    pub terminating: bool,
    /// `status.podIP`.
    pub ip: Option<String>,
    /// The claims of its `persistentVolumeClaim` volumes.
    pub claims: Vec<String>,
}

/// What was read once the cluster was healed and given time to converge.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinalState {
    /// Every pod of the workloads.
    pub pods: Vec<PodFinal>,
    /// Nodes whose Ready condition is True.
    pub ready_nodes: Vec<String>,
    /// Every node of the cluster.
    pub nodes: Vec<String>,
    /// The Job's `status.succeeded`.
    pub job_succeeded: u32,
    /// The Job has the `Complete` condition.
    pub job_complete: bool,
    /// Names of the writes the API acknowledged that are not stored.
    pub acknowledged_missing: Vec<String>,
    /// How many writes the API acknowledged.
    pub acknowledged: usize,
    /// Bound PersistentVolumeClaims of the namespace.
    pub bound_claims: Vec<String>,
    /// The addresses the Deployment's Service's Endpoints list as ready.
    pub service_endpoints: Vec<String>,
    /// Calls of the in-cluster clients to the Service that were answered, and that
    /// were not (from the clients' logs).
    pub client_calls_ok: u64,
    /// See `client_calls_ok`.
    pub client_calls_failed: u64,
}

/// What the run declared.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Declared {
    /// The Deployment's replicas.
    pub replicas: u32,
    /// Its `maxSurge`, as a number of pods.
    pub max_surge: u32,
    /// The Job's completions.
    pub job_completions: u32,
    /// The StatefulSet's replicas.
    pub statefulset_replicas: u32,
}

/// Everything the checker judges.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SelfHealHistory {
    /// What the workloads declared.
    pub declared: Declared,
    /// Every pod state each server's watch delivered, in the order each server delivered
    /// them (servers interleaved by receipt time).
    pub pods: Vec<PodSeen>,
    /// The faults, in order.
    pub faults: Vec<NodeFault>,
    /// After healing.
    pub final_state: FinalState,
    /// When recording ended, ms since the epoch.
    pub end_ms: u64,
}

/// How the Deployment came back after one fault.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recovery {
    /// The fault.
    pub what: String,
    /// When it was applied.
    pub at_ms: u64,
    /// Ready replicas of the Deployment were on the node it took away.
    pub affected: bool,
    /// Time from the fault until the Deployment had `replicas` Ready pods on healthy
    /// nodes again; `None` if that never happened.
    pub after_ms: Option<u64>,
    /// That happened before the fault was healed (the pods were replaced elsewhere), not
    /// because the node came back.
    pub by_replacement: bool,
}

/// One anomaly.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SelfHealViolation {
    /// Short name of the property (`bound-twice`, `surge`, `no-recovery`, …).
    pub property: String,
    /// What was seen.
    pub detail: String,
}

/// The verdict.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SelfHealReport {
    /// Every anomaly found.
    pub violations: Vec<SelfHealViolation>,
    /// One per fault that could take replicas away.
    pub recoveries: Vec<Recovery>,
    /// Pod states judged.
    pub observations: usize,
    /// The most Running, non-terminating Deployment pods any server showed at once.
    pub max_running: u32,
    /// Share of the in-cluster clients' calls to the Service that were answered.
    pub client_success_rate: Option<f64>,
}

impl SelfHealReport {
    /// No anomaly.
    pub fn is_valid(&self) -> bool {
        self.violations.is_empty()
    }

    /// Nearest-rank percentile `p` (0–100) of the recovery times of faults that took
    /// Ready replicas away and were recovered, in ms.
    pub fn recovery_percentile(&self, p: f64) -> Option<u64> {
        let mut v: Vec<u64> = self.recoveries.iter().filter(|r| r.affected).filter_map(|r| r.after_ms).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_unstable();
        let rank = ((p / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
        Some(v[rank.min(v.len()) - 1])
    }
}

impl std::fmt::Display for SelfHealReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{}", if self.is_valid() { "VALID" } else { "INVALID" })?;
        let affected = self.recoveries.iter().filter(|r| r.affected).count();
        let replaced = self.recoveries.iter().filter(|r| r.affected && r.by_replacement).count();
        writeln!(
            f,
            "  {} pod states judged; {} faults took Ready replicas away ({} recovered by replacement before the heal); at most {} Deployment pods Running at once",
            self.observations, affected, replaced, self.max_running
        )?;
        let ms = |v: Option<u64>| v.map(|m| format!("{:.1} s", m as f64 / 1000.0)).unwrap_or_else(|| "-".into());
        writeln!(f, "  recovery (fault to all replicas Ready on healthy nodes): p50 {}, p99 {}", ms(self.recovery_percentile(50.0)), ms(self.recovery_percentile(99.0)))?;
        if let Some(rate) = self.client_success_rate {
            writeln!(f, "  in-cluster clients calling the Service: {:.1}% of calls answered", rate * 100.0)?;
        }
        for r in &self.recoveries {
            writeln!(
                f,
                "    +{:.1}s {}: {}",
                r.at_ms as f64 / 1000.0,
                r.what,
                match (r.affected, r.after_ms) {
                    (false, _) => "no Ready replica on it".to_string(),
                    (true, Some(m)) =>
                        format!("recovered in {:.1} s{}", m as f64 / 1000.0, if r.by_replacement { " (replaced)" } else { " (healed)" }),
                    (true, None) => "NOT recovered".to_string(),
                }
            )?;
        }
        for v in &self.violations {
            writeln!(f, "  {}: {}", v.property, v.detail)?;
        }
        Ok(())
    }
}
