//! What the node lifecycle controller does about one Node, as pure functions of the Node,
//! its Lease, its pods and the time.
//!
//! [`observe`] keeps Kubernetes' rule for heartbeats: a Node is heard from when the
//! controller sees its Ready condition's heartbeat or its Lease's `renewTime` *change*,
//! measured on the controller's own clock (so clocks of nodes do not matter, and a new
//! controller manager gives every Node a full grace period). [`reconcile`] then decides:
//! past the grace period (the startup grace period while the Node has never posted a
//! Ready condition) the Ready and pressure conditions become Unknown with the kubelet-gone
//! wording; taints follow the conditions (Ready Unknown → `node.kubernetes.io/unreachable`,
//! Ready False → `node.kubernetes.io/not-ready`, each NoExecute and NoSchedule, pressure
//! and `spec.unschedulable` NoSchedule only); pods still Ready on a Node that is Unknown
//! are marked not Ready.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeCondition, Pod, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";
pub const TAINT_UNREACHABLE: &str = "node.kubernetes.io/unreachable";
pub const TAINT_MEMORY_PRESSURE: &str = "node.kubernetes.io/memory-pressure";
pub const TAINT_DISK_PRESSURE: &str = "node.kubernetes.io/disk-pressure";
pub const TAINT_PID_PRESSURE: &str = "node.kubernetes.io/pid-pressure";
pub const TAINT_NETWORK_UNAVAILABLE: &str = "node.kubernetes.io/network-unavailable";
pub const TAINT_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

/// The conditions the controller sets Unknown when the kubelet goes quiet
/// (NetworkUnavailable is not the kubelet's, so it is left alone).
const KUBELET_CONDITIONS: [&str; 4] = ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"];

/// The node lifecycle controller's timings (kube-controller-manager's flags).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LifecycleConfig {
    /// `--node-monitor-period`: how often every Node is looked at.
    pub monitor_period: Duration,
    /// `--node-monitor-grace-period`: how long a Node may go unheard before it is Unknown
    /// (50 s since Kubernetes 1.32).
    pub grace_period: Duration,
    /// `--node-startup-grace-period`: the same for a Node that never posted Ready.
    pub startup_grace_period: Duration,
}

impl Default for LifecycleConfig {
    fn default() -> Self {
        Self { monitor_period: Duration::from_secs(5), grace_period: Duration::from_secs(50), startup_grace_period: Duration::from_secs(60) }
    }
}

/// What the controller last saw of a Node's heartbeats, and when it last saw one change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeHealth {
    /// The controller's time when a heartbeat was last seen to change.
    pub probe: Timestamp,
    pub ready_heartbeat: Option<Timestamp>,
    pub ready_transition: Option<Timestamp>,
    pub lease_renew: Option<Timestamp>,
}

fn condition<'a>(node: &'a Node, type_: &str) -> Option<&'a NodeCondition> {
    node.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_)
}

/// The health record after looking at `node` and its `lease` at `now`, given the last one.
pub fn observe(saved: Option<&NodeHealth>, node: &Node, lease: Option<&Lease>, now: Timestamp) -> NodeHealth {
    let ready = condition(node, "Ready");
    let seen = NodeHealth {
        probe: now,
        ready_heartbeat: ready.and_then(|c| c.last_heartbeat_time.as_ref()).map(|t| t.0),
        ready_transition: ready.and_then(|c| c.last_transition_time.as_ref()).map(|t| t.0),
        lease_renew: lease.and_then(|l| l.spec.as_ref()?.renew_time.as_ref()).map(|t| t.0),
    };
    let Some(saved) = saved else { return seen };
    let status_changed = (seen.ready_heartbeat, seen.ready_transition) != (saved.ready_heartbeat, saved.ready_transition);
    let lease_renewed = match (seen.lease_renew, saved.lease_renew) {
        (Some(new), Some(old)) => new > old,
        (Some(_), None) => true,
        _ => false,
    };
    if status_changed || lease_renewed {
        return seen;
    }
    // Nothing new: keep the probe time, but follow a Lease that went away.
    NodeHealth { probe: saved.probe, lease_renew: seen.lease_renew.or(saved.lease_renew), ..seen }
}

/// A pod, by namespace and name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodKey {
    pub namespace: String,
    pub name: String,
}

/// What to do about one Node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Actions {
    /// The Node's `status.conditions` to write.
    pub conditions: Option<Vec<NodeCondition>>,
    /// The Node's `spec.taints` to write.
    pub taints: Option<Vec<Taint>>,
    /// The status change to record on the Node (`NodeNotReady`).
    pub status_change: Option<&'static str>,
    /// Pods bound to the Node to mark not Ready.
    pub pods_not_ready: Vec<PodKey>,
    /// When the Node goes past its grace period if nothing is heard from it.
    pub recheck_in: Option<Duration>,
}

fn to_std(d: SignedDuration) -> Duration {
    Duration::try_from(d).unwrap_or(Duration::ZERO)
}

/// The Node's conditions once a quiet kubelet is accounted for; `None` if nothing changes.
fn unknown_conditions(node: &Node, now: Timestamp) -> Option<Vec<NodeCondition>> {
    let mut conditions = node.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    let mut changed = false;
    for type_ in KUBELET_CONDITIONS {
        match conditions.iter_mut().find(|c| c.type_ == type_) {
            Some(c) if c.status == "Unknown" => {}
            Some(c) => {
                c.status = "Unknown".into();
                c.reason = Some("NodeStatusUnknown".into());
                c.message = Some("Kubelet stopped posting node status.".into());
                c.last_transition_time = Some(Time(now));
                changed = true;
            }
            None => {
                conditions.push(NodeCondition {
                    type_: type_.into(),
                    status: "Unknown".into(),
                    reason: Some("NodeStatusNeverUpdated".into()),
                    message: Some("Kubelet never posted node status.".into()),
                    last_heartbeat_time: node.metadata.creation_timestamp.clone(),
                    last_transition_time: Some(Time(now)),
                });
                changed = true;
            }
        }
    }
    changed.then_some(conditions)
}

fn status_of<'a>(conditions: &'a [NodeCondition], type_: &str) -> Option<&'a str> {
    conditions.iter().find(|c| c.type_ == type_).map(|c| c.status.as_str())
}

/// Every (key, effect) this controller manages, and whether `conditions` and
/// `unschedulable` call for it.
fn managed_taints(conditions: &[NodeCondition], unschedulable: bool) -> [(&'static str, &'static str, bool); 9] {
    let ready = status_of(conditions, "Ready");
    let is_true = |t: &str| status_of(conditions, t) == Some("True");
    [
        (TAINT_NOT_READY, "NoExecute", ready == Some("False")),
        (TAINT_UNREACHABLE, "NoExecute", ready == Some("Unknown")),
        (TAINT_NOT_READY, "NoSchedule", ready == Some("False")),
        (TAINT_UNREACHABLE, "NoSchedule", ready == Some("Unknown")),
        (TAINT_MEMORY_PRESSURE, "NoSchedule", is_true("MemoryPressure")),
        (TAINT_DISK_PRESSURE, "NoSchedule", is_true("DiskPressure")),
        (TAINT_PID_PRESSURE, "NoSchedule", is_true("PIDPressure")),
        (TAINT_NETWORK_UNAVAILABLE, "NoSchedule", is_true("NetworkUnavailable")),
        (TAINT_UNSCHEDULABLE, "NoSchedule", unschedulable),
    ]
}

/// The Node's taints with the managed ones made to match `conditions`; `None` if that is
/// what it has. Taints of others are kept as they are, added NoExecute taints carry `now`.
pub fn desired_taints(existing: &[Taint], conditions: &[NodeCondition], unschedulable: bool, now: Timestamp) -> Option<Vec<Taint>> {
    let managed = managed_taints(conditions, unschedulable);
    let wanted = |t: &Taint| managed.iter().find(|(k, e, _)| *k == t.key && *e == t.effect).map(|(_, _, w)| *w);
    let mut taints: Vec<Taint> = existing.iter().filter(|t| wanted(t) != Some(false)).cloned().collect();
    for (key, effect, want) in managed {
        if want && !taints.iter().any(|t| t.key == key && t.effect == effect) {
            let time_added = (effect == "NoExecute").then_some(Time(now));
            taints.push(Taint { key: key.into(), effect: effect.into(), value: None, time_added });
        }
    }
    (taints.as_slice() != existing).then_some(taints)
}

/// The pod's Ready condition is True.
fn pod_ready(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// What to do about `node` (as reflected) with `health` from [`observe`], given the pods
/// bound to it, at `now`.
pub fn reconcile(node: &Node, health: &NodeHealth, pods: &[&Pod], now: Timestamp, config: &LifecycleConfig) -> Actions {
    let mut actions = Actions::default();
    let name = node.metadata.name.as_deref().unwrap_or("");
    let stored = node.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    let grace = if status_of(&stored, "Ready").is_none() { config.startup_grace_period } else { config.grace_period };
    let deadline = health.probe.checked_add(SignedDuration::try_from(grace).unwrap_or(SignedDuration::MAX)).unwrap_or(Timestamp::MAX);
    let conditions = if now > deadline {
        actions.conditions = unknown_conditions(node, now);
        actions.conditions.clone().unwrap_or(stored.clone())
    } else {
        actions.recheck_in = Some(to_std(deadline.duration_since(now)));
        stored.clone()
    };
    let (was, is) = (status_of(&stored, "Ready"), status_of(&conditions, "Ready"));
    if was == Some("True") && is != Some("True") {
        actions.status_change = Some("NodeNotReady");
    }
    let spec = node.spec.as_ref();
    let existing = spec.and_then(|s| s.taints.clone()).unwrap_or_default();
    actions.taints = desired_taints(&existing, &conditions, spec.and_then(|s| s.unschedulable).unwrap_or(false), now);
    if is == Some("Unknown") {
        actions.pods_not_ready = pods
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name) && pod_ready(p))
            .map(|p| PodKey { namespace: p.metadata.namespace.clone().unwrap_or_default(), name: p.metadata.name.clone().unwrap_or_default() })
            .collect();
    }
    actions
}

#[cfg(test)]
#[path = "reconcile_tests.rs"]
mod tests;
