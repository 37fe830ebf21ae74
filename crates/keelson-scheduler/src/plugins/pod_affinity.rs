//! InterPodAffinity: required pod affinity and anti-affinity of the incoming pod, the
//! required anti-affinity of the pods already placed, and preferred terms as scores.
//! A term selects pods by labels in its namespaces (the pod's own by default, or by
//! `namespaceSelector`) and relates nodes by the value of `topologyKey`.

use k8s_openapi::api::core::v1::{Pod, PodAffinityTerm};

use crate::framework::{Cycle, Plugin, MAX_NODE_SCORE};
use crate::selectors::label_selector_matches;
use crate::snapshot::NodeInfo;

fn namespace(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or("default")
}

/// Whether `other` is selected by `term` of a pod living in `owner_ns`.
fn term_selects(cx: &Cycle, term: &PodAffinityTerm, owner_ns: &str, other: &Pod) -> bool {
    let ns = namespace(other);
    let listed = term.namespaces.as_deref().unwrap_or(&[]);
    let in_scope = match &term.namespace_selector {
        Some(sel) => {
            let labels = cx.snapshot.namespaces.get(ns).cloned().unwrap_or_default();
            listed.iter().any(|n| n == ns) || label_selector_matches(sel, &labels)
        }
        None if listed.is_empty() => ns == owner_ns,
        None => listed.iter().any(|n| n == ns),
    };
    let labels = other.metadata.labels.clone().unwrap_or_default();
    in_scope && term.label_selector.as_ref().is_some_and(|s| label_selector_matches(s, &labels))
}

fn same_domain(a: &NodeInfo, b: &NodeInfo, key: &str) -> bool {
    match (a.labels().get(key), b.labels().get(key)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

/// Whether a pod selected by `term` runs in the same `topologyKey` domain as `node`.
fn domain_has_match(cx: &Cycle, term: &PodAffinityTerm, node: &NodeInfo) -> bool {
    cx.snapshot.all_pods().any(|(n, p)| same_domain(n, node, &term.topology_key) && term_selects(cx, term, cx.namespace(), p))
}

fn affinity_terms(pod: &Pod) -> &[PodAffinityTerm] {
    pod.spec.as_ref().and_then(|s| s.affinity.as_ref()).and_then(|a| a.pod_affinity.as_ref()).and_then(|a| a.required_during_scheduling_ignored_during_execution.as_deref()).unwrap_or(&[])
}

fn anti_affinity_terms(pod: &Pod) -> &[PodAffinityTerm] {
    pod.spec.as_ref().and_then(|s| s.affinity.as_ref()).and_then(|a| a.pod_anti_affinity.as_ref()).and_then(|a| a.required_during_scheduling_ignored_during_execution.as_deref()).unwrap_or(&[])
}

pub struct InterPodAffinity;

impl Plugin for InterPodAffinity {
    fn name(&self) -> &'static str {
        "InterPodAffinity"
    }
    fn filter(&self, cx: &Cycle, node: &NodeInfo) -> Vec<String> {
        let mut out = Vec::new();
        // Existing pods' anti-affinity against the incoming pod.
        let repelled = cx.snapshot.all_pods().any(|(n, p)| {
            anti_affinity_terms(p).iter().any(|t| same_domain(n, node, &t.topology_key) && term_selects(cx, t, namespace(p), cx.pod))
        });
        if repelled {
            out.push("node(s) didn't satisfy existing pods anti-affinity rules".to_string());
        }
        let affinity = affinity_terms(cx.pod);
        if !affinity.is_empty() {
            let satisfied = affinity.iter().all(|t| domain_has_match(cx, t, node));
            // The first pod of a group that selects itself may go anywhere its topology
            // key exists.
            let first_of_group = affinity.iter().all(|t| {
                !cx.snapshot.all_pods().any(|(_, p)| term_selects(cx, t, cx.namespace(), p))
                    && term_selects(cx, t, cx.namespace(), cx.pod)
                    && node.labels().contains_key(&t.topology_key)
            });
            if !satisfied && !first_of_group {
                out.push("node(s) didn't match pod affinity rules".to_string());
            }
        }
        if anti_affinity_terms(cx.pod).iter().any(|t| domain_has_match(cx, t, node)) {
            out.push("node(s) didn't match pod anti-affinity rules".to_string());
        }
        out
    }
    fn score(&self, cx: &Cycle, node: &NodeInfo) -> Option<i64> {
        let affinity = cx.pod.spec.as_ref()?.affinity.as_ref()?;
        let preferred = affinity.pod_affinity.as_ref().and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_deref()).unwrap_or(&[]);
        let avoided = affinity.pod_anti_affinity.as_ref().and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_deref()).unwrap_or(&[]);
        if preferred.is_empty() && avoided.is_empty() {
            return None;
        }
        let count = |t: &PodAffinityTerm| cx.snapshot.all_pods().filter(|(n, p)| same_domain(n, node, &t.topology_key) && term_selects(cx, t, cx.namespace(), p)).count() as i64;
        let plus: i64 = preferred.iter().map(|w| i64::from(w.weight) * count(&w.pod_affinity_term)).sum();
        let minus: i64 = avoided.iter().map(|w| i64::from(w.weight) * count(&w.pod_affinity_term)).sum();
        Some(plus - minus)
    }
    fn normalize(&self, scores: &mut [i64]) {
        // Min-max to 0..=100 (scores may be negative).
        let (min, max) = (scores.iter().copied().min().unwrap_or(0), scores.iter().copied().max().unwrap_or(0));
        for s in scores.iter_mut() {
            *s = if max == min { 0 } else { (*s - min) * MAX_NODE_SCORE / (max - min) };
        }
    }
}
