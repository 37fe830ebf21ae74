//! What the pod garbage collector decides, without I/O, as Kubernetes' PodGC does:
//! pods bound to a Node that has been gone for the quarantine period, pods being
//! deleted that were never scheduled, pods being deleted on an out-of-service Node
//! (all force-deleted), and the oldest finished pods beyond the threshold.

use std::collections::{HashMap, HashSet};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};

/// `--terminated-pod-gc-threshold`'s default.
pub const TERMINATED_POD_THRESHOLD: usize = 12_500;
/// How long a pod's Node must be missing before the pod counts as orphaned.
pub const QUARANTINE_SECONDS: i64 = 40;
/// The taint that marks a Node as out of service (its pods will not come back).
pub const OUT_OF_SERVICE_TAINT: &str = "node.kubernetes.io/out-of-service";

/// Why a pod is collected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Bound to a Node that no longer exists: marked Failed with the DisruptionTarget
    /// condition, then force-deleted.
    OrphanedFromNode,
    /// Being deleted and never scheduled: nothing will confirm the deletion.
    UnscheduledTerminating,
    /// Being deleted on an out-of-service Node.
    OutOfServiceTerminating,
    /// Finished, and more finished pods than the threshold exist.
    TerminatedOverThreshold,
}

/// A pod to collect: namespace, name, uid and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Collect {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub reason: Reason,
}

fn finished(p: &Pod) -> bool {
    matches!(p.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

fn node_of(p: &Pod) -> Option<&str> {
    p.spec.as_ref()?.node_name.as_deref().filter(|n| !n.is_empty())
}

/// The pods to collect. `missing_since` is when each absent Node was first seen absent
/// (the caller keeps it between passes); `threshold` bounds the finished pods kept.
pub fn collect(pods: &[&Pod], nodes: &[&Node], missing_since: &HashMap<String, Timestamp>, now: Timestamp, threshold: usize) -> Vec<Collect> {
    let present: HashSet<&str> = nodes.iter().filter_map(|n| n.metadata.name.as_deref()).collect();
    let out_of_service: HashSet<&str> = nodes
        .iter()
        .filter(|n| n.spec.as_ref().and_then(|s| s.taints.as_ref()).is_some_and(|ts| ts.iter().any(|t| t.key == OUT_OF_SERVICE_TAINT && t.effect == "NoExecute")))
        .filter_map(|n| n.metadata.name.as_deref())
        .collect();
    let mut out = Vec::new();
    let mut chosen = HashSet::new();
    let mut push = |p: &Pod, reason: Reason, chosen: &mut HashSet<String>| {
        let uid = p.metadata.uid.clone().unwrap_or_default();
        if chosen.insert(uid.clone()) {
            out.push(Collect { namespace: p.metadata.namespace.clone().unwrap_or_default(), name: p.metadata.name.clone().unwrap_or_default(), uid, reason });
        }
    };
    for p in pods {
        let deleting = p.metadata.deletion_timestamp.is_some();
        match node_of(p) {
            Some(node) if !present.contains(node) => {
                let gone_long = missing_since.get(node).is_some_and(|since| now.as_second() - since.as_second() >= QUARANTINE_SECONDS);
                if gone_long {
                    push(p, Reason::OrphanedFromNode, &mut chosen);
                }
            }
            Some(node) if deleting && out_of_service.contains(node) => push(p, Reason::OutOfServiceTerminating, &mut chosen),
            None if deleting => push(p, Reason::UnscheduledTerminating, &mut chosen),
            _ => {}
        }
    }
    let mut done: Vec<&&Pod> = pods.iter().filter(|p| finished(p) && p.metadata.deletion_timestamp.is_none() && !chosen.contains(p.metadata.uid.as_deref().unwrap_or(""))).collect();
    if done.len() > threshold {
        // The oldest go first (by creation time, then name for a stable order).
        done.sort_by(|a, b| (a.metadata.creation_timestamp.as_ref().map(|t| t.0), &a.metadata.name).cmp(&(b.metadata.creation_timestamp.as_ref().map(|t| t.0), &b.metadata.name)));
        let excess = done.len() - threshold;
        for p in done.into_iter().take(excess) {
            push(p, Reason::TerminatedOverThreshold, &mut chosen);
        }
    }
    out
}

/// The Nodes that pods are bound to but that do not exist, with when they were first
/// seen missing: kept from `before` while still missing, `now` for new ones.
pub fn missing_nodes(pods: &[&Pod], nodes: &[&Node], before: &HashMap<String, Timestamp>, now: Timestamp) -> HashMap<String, Timestamp> {
    let present: HashSet<&str> = nodes.iter().filter_map(|n| n.metadata.name.as_deref()).collect();
    pods.iter()
        .filter_map(|p| node_of(p))
        .filter(|n| !present.contains(n))
        .map(|n| (n.to_string(), before.get(n).copied().unwrap_or(now)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, node: Option<&str>, phase: &str, extra: serde_json::Value) -> Pod {
        let mut v = json!({"metadata": {"name": name, "namespace": "d", "uid": format!("{name}-uid"), "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "c", "image": "i"}]}, "status": {"phase": phase}});
        if let Some(n) = node {
            v["spec"]["nodeName"] = json!(n);
        }
        if let Some(m) = extra.as_object() {
            for (k, val) in m {
                v["metadata"][k] = val.clone();
            }
        }
        serde_json::from_value(v).unwrap()
    }

    fn node(name: &str, taints: serde_json::Value) -> Node {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"taints": taints}})).unwrap()
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn reasons(c: &[Collect]) -> Vec<(&str, Reason)> {
        c.iter().map(|c| (c.name.as_str(), c.reason.clone())).collect()
    }

    #[test]
    fn pods_of_a_node_gone_past_the_quarantine_are_orphaned() {
        let (a, b) = (pod("a", Some("gone"), "Running", json!({})), pod("b", Some("here"), "Running", json!({})));
        let pods = [&a, &b];
        let here = node("here", json!([]));
        let nodes = [&here];
        let first = missing_nodes(&pods, &nodes, &HashMap::new(), at("2026-01-01T00:00:00Z"));
        assert_eq!(first.keys().collect::<Vec<_>>(), ["gone"]);
        assert!(collect(&pods, &nodes, &first, at("2026-01-01T00:00:39Z"), 100).is_empty(), "still in quarantine");
        let later = missing_nodes(&pods, &nodes, &first, at("2026-01-01T00:00:40Z"));
        assert_eq!(later["gone"], at("2026-01-01T00:00:00Z"), "first seen is kept");
        assert_eq!(reasons(&collect(&pods, &nodes, &later, at("2026-01-01T00:00:40Z"), 100)), [("a", Reason::OrphanedFromNode)]);
    }

    #[test]
    fn terminating_pods_nothing_will_confirm_are_collected() {
        let deleting = json!({"deletionTimestamp": "2026-01-01T00:00:00Z"});
        let unscheduled = pod("u", None, "Pending", deleting.clone());
        let oos = pod("o", Some("dead"), "Running", deleting.clone());
        let normal = pod("n", Some("fine"), "Running", deleting);
        let pending = pod("p", None, "Pending", json!({}));
        let (dead, fine) = (node("dead", json!([{"key": OUT_OF_SERVICE_TAINT, "effect": "NoExecute"}])), node("fine", json!([])));
        let got = collect(&[&unscheduled, &oos, &normal, &pending], &[&dead, &fine], &HashMap::new(), at("2026-01-01T00:01:00Z"), 100);
        assert_eq!(reasons(&got), [("u", Reason::UnscheduledTerminating), ("o", Reason::OutOfServiceTerminating)]);
    }

    #[test]
    fn the_oldest_finished_pods_beyond_the_threshold_go() {
        let mk = |name: &str, created: &str, phase: &str| pod(name, Some("n"), phase, json!({"creationTimestamp": created}));
        let pods = [mk("new", "2026-01-03T00:00:00Z", "Succeeded"), mk("old", "2026-01-01T00:00:00Z", "Failed"), mk("mid", "2026-01-02T00:00:00Z", "Succeeded"), mk("live", "2025-01-01T00:00:00Z", "Running")];
        let refs: Vec<&Pod> = pods.iter().collect();
        let n = node("n", json!([]));
        assert_eq!(reasons(&collect(&refs, &[&n], &HashMap::new(), at("2026-01-04T00:00:00Z"), 1)), [("old", Reason::TerminatedOverThreshold), ("mid", Reason::TerminatedOverThreshold)]);
        assert!(collect(&refs, &[&n], &HashMap::new(), at("2026-01-04T00:00:00Z"), 3).is_empty());
    }
}
