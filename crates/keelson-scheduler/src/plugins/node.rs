//! Plugins that look at one node at a time: NodeName, NodeUnschedulable, NodePorts,
//! TaintToleration, NodeAffinity, ImageLocality.

use k8s_openapi::api::core::v1::{Pod, Taint, Toleration};

use crate::framework::{normalize_by_max, Cycle, Plugin, MAX_NODE_SCORE};
use crate::selectors::term_matches;
use crate::snapshot::{host_ports, NodeInfo};

/// `spec.nodeName` set by the user: only that node.
pub struct NodeName;

impl Plugin for NodeName {
    fn name(&self) -> &'static str {
        "NodeName"
    }
    fn unresolvable(&self, _reason: &str) -> bool {
        true
    }
    fn filter(&self, cx: &Cycle, node: &NodeInfo) -> Vec<String> {
        match cx.pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).filter(|n| !n.is_empty()) {
            Some(wanted) if wanted != node.name => vec!["node(s) didn't match the requested node name".into()],
            _ => Vec::new(),
        }
    }
}

/// Whether `t` tolerates `taint`.
pub fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    if let Some(effect) = t.effect.as_deref().filter(|e| !e.is_empty()) {
        if effect != taint.effect {
            return false;
        }
    }
    let key = t.key.as_deref().unwrap_or("");
    match t.operator.as_deref().unwrap_or("Equal") {
        "Exists" => key.is_empty() || key == taint.key,
        _ => key == taint.key && t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
    }
}

fn tolerations(pod: &Pod) -> &[Toleration] {
    pod.spec.as_ref().and_then(|s| s.tolerations.as_deref()).unwrap_or(&[])
}

/// Cordoned nodes (`spec.unschedulable`), unless the pod tolerates
/// `node.kubernetes.io/unschedulable:NoSchedule`.
pub struct NodeUnschedulable;

impl Plugin for NodeUnschedulable {
    fn name(&self) -> &'static str {
        "NodeUnschedulable"
    }
    fn unresolvable(&self, _reason: &str) -> bool {
        true
    }
    fn filter(&self, cx: &Cycle, node: &NodeInfo) -> Vec<String> {
        let cordoned = node.node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false);
        let taint = Taint { key: "node.kubernetes.io/unschedulable".into(), effect: "NoSchedule".into(), ..Default::default() };
        if cordoned && !tolerations(cx.pod).iter().any(|t| tolerates(t, &taint)) {
            return vec!["node(s) were unschedulable".into()];
        }
        Vec::new()
    }
}

/// hostPort conflicts with the pods already on the node.
pub struct NodePorts;

impl Plugin for NodePorts {
    fn name(&self) -> &'static str {
        "NodePorts"
    }
    fn filter(&self, cx: &Cycle, node: &NodeInfo) -> Vec<String> {
        let wild = |ip: &str| ip.is_empty() || ip == "0.0.0.0";
        let conflict = host_ports(cx.pod).iter().any(|(proto, ip, port)| {
            node.host_ports.iter().any(|(p, i, n)| p == proto && n == port && (i == ip || wild(i) || wild(ip)))
        });
        if conflict {
            vec!["node(s) didn't have free ports for the requested pod ports".into()]
        } else {
            Vec::new()
        }
    }
}

fn node_taints(node: &NodeInfo) -> &[Taint] {
    node.node.spec.as_ref().and_then(|s| s.taints.as_deref()).unwrap_or(&[])
}

/// NoSchedule and NoExecute taints must be tolerated; untolerated PreferNoSchedule
/// taints lower the score.
pub struct TaintToleration;

impl Plugin for TaintToleration {
    fn name(&self) -> &'static str {
        "TaintToleration"
    }
    fn unresolvable(&self, _reason: &str) -> bool {
        true
    }
    fn filter(&self, cx: &Cycle, node: &NodeInfo) -> Vec<String> {
        let tols = tolerations(cx.pod);
        node_taints(node)
            .iter()
            .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
            .find(|t| !tols.iter().any(|tol| tolerates(tol, t)))
            .map(|t| vec![format!("node(s) had untolerated taint {{{}: {}}}", t.key, t.value.as_deref().unwrap_or(""))])
            .unwrap_or_default()
    }
    fn score(&self, cx: &Cycle, node: &NodeInfo) -> Option<i64> {
        let tols: Vec<&Toleration> = tolerations(cx.pod).iter().filter(|t| t.effect.as_deref().is_none_or(|e| e.is_empty() || e == "PreferNoSchedule")).collect();
        Some(node_taints(node).iter().filter(|t| t.effect == "PreferNoSchedule" && !tols.iter().any(|tol| tolerates(tol, t))).count() as i64)
    }
    fn normalize(&self, scores: &mut [i64]) {
        normalize_by_max(scores, true);
    }
}

/// Whether the node passes the pod's `nodeSelector` and required node affinity.
pub fn matches_node_selector(pod: &Pod, node: &NodeInfo) -> bool {
    let Some(spec) = pod.spec.as_ref() else { return true };
    let labels = node.labels();
    if !spec.node_selector.iter().flatten().all(|(k, v)| labels.get(k) == Some(v)) {
        return false;
    }
    let required = spec.affinity.as_ref().and_then(|a| a.node_affinity.as_ref()).and_then(|na| na.required_during_scheduling_ignored_during_execution.as_ref());
    match required {
        Some(sel) => sel.node_selector_terms.iter().any(|t| term_matches(t, &node.node)),
        None => true,
    }
}

/// `nodeSelector` and node affinity: required terms filter, preferred terms score.
pub struct NodeAffinity;

impl Plugin for NodeAffinity {
    fn name(&self) -> &'static str {
        "NodeAffinity"
    }
    fn unresolvable(&self, _reason: &str) -> bool {
        true
    }
    fn filter(&self, cx: &Cycle, node: &NodeInfo) -> Vec<String> {
        if matches_node_selector(cx.pod, node) {
            Vec::new()
        } else {
            vec!["node(s) didn't match Pod's node affinity/selector".into()]
        }
    }
    fn score(&self, cx: &Cycle, node: &NodeInfo) -> Option<i64> {
        let preferred = cx.pod.spec.as_ref()?.affinity.as_ref()?.node_affinity.as_ref()?.preferred_during_scheduling_ignored_during_execution.as_ref()?;
        Some(preferred.iter().filter(|p| term_matches(&p.preference, &node.node)).map(|p| i64::from(p.weight)).sum())
    }
    fn normalize(&self, scores: &mut [i64]) {
        normalize_by_max(scores, false);
    }
}

const MIN_IMAGE_BYTES: i64 = 23 * 1024 * 1024;
const MAX_IMAGE_BYTES_PER_CONTAINER: i64 = 1000 * 1024 * 1024;

/// Nodes that already have the pod's images (`status.images`) score higher, weighted by
/// how widespread each image is (so pods do not all pile onto one node).
pub struct ImageLocality;

pub fn normalized_image(name: &str) -> String {
    let tagged = name.rsplit('/').next().is_some_and(|last| last.contains(':') || last.contains('@'));
    if tagged {
        name.to_string()
    } else {
        format!("{name}:latest")
    }
}

impl Plugin for ImageLocality {
    fn name(&self) -> &'static str {
        "ImageLocality"
    }
    fn score(&self, cx: &Cycle, node: &NodeInfo) -> Option<i64> {
        let spec = cx.pod.spec.as_ref()?;
        let total_nodes = cx.snapshot.nodes.len().max(1) as i64;
        let has = |n: &NodeInfo, image: &str| -> Option<i64> {
            n.node.status.as_ref()?.images.as_ref()?.iter().find(|i| i.names.iter().flatten().any(|x| normalized_image(x) == image)).map(|i| i.size_bytes.unwrap_or(0))
        };
        let mut sum = 0i64;
        for c in &spec.containers {
            let image = normalized_image(c.image.as_deref().unwrap_or(""));
            if let Some(size) = has(node, &image) {
                let spread = cx.snapshot.image_spread.get(&image).copied().unwrap_or(1) as i64;
                sum += size * spread / total_nodes;
            }
        }
        let max = MAX_IMAGE_BYTES_PER_CONTAINER * spec.containers.len().max(1) as i64;
        let clamped = sum.clamp(MIN_IMAGE_BYTES, max);
        Some(MAX_NODE_SCORE * (clamped - MIN_IMAGE_BYTES) / (max - MIN_IMAGE_BYTES))
    }
}
