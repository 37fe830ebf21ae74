//! InterPodAffinity: required pod affinity and anti-affinity of the incoming pod, the
//! required anti-affinity of the pods already placed, and preferred terms as scores.
//! A term selects pods by labels in its namespaces (the pod's own by default, or by
//! `namespaceSelector`) and relates nodes by the value of `topologyKey`.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Pod, PodAffinityTerm};

use crate::framework::{Cycle, Plugin, MAX_NODE_SCORE};
use crate::selectors::{label_selector_matches, NO_LABELS};
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
    let labels = other.metadata.labels.as_ref().unwrap_or(&NO_LABELS);
    in_scope && term.label_selector.as_ref().is_some_and(|s| label_selector_matches(s, labels))
}

fn same_domain(a: &NodeInfo, b: &NodeInfo, key: &str) -> bool {
    match (a.labels().get(key), b.labels().get(key)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

fn affinity_terms(pod: &Pod) -> &[PodAffinityTerm] {
    pod.spec.as_ref().and_then(|s| s.affinity.as_ref()).and_then(|a| a.pod_affinity.as_ref()).and_then(|a| a.required_during_scheduling_ignored_during_execution.as_deref()).unwrap_or(&[])
}

fn anti_affinity_terms(pod: &Pod) -> &[PodAffinityTerm] {
    pod.spec.as_ref().and_then(|s| s.affinity.as_ref()).and_then(|a| a.pod_anti_affinity.as_ref()).and_then(|a| a.required_during_scheduling_ignored_during_execution.as_deref()).unwrap_or(&[])
}

/// Pods a term selects, per value of its topology key.
#[derive(Debug, Default)]
pub struct DomainCounts {
    pub key: String,
    pub by_value: HashMap<String, i64>,
    /// Whether any placed pod matches at all (wherever its node is).
    pub any: bool,
}

impl DomainCounts {
    fn of(cx: &Cycle, term: &PodAffinityTerm) -> Self {
        let mut out = DomainCounts { key: term.topology_key.clone(), ..Default::default() };
        for (node, pod) in cx.snapshot.all_pods() {
            if term_selects(cx, term, cx.namespace(), pod) {
                out.any = true;
                if let Some(v) = node.labels().get(&term.topology_key) {
                    *out.by_value.entry(v.clone()).or_default() += 1;
                }
            }
        }
        out
    }

    fn at(&self, node: &NodeInfo) -> i64 {
        node.labels().get(&self.key).and_then(|v| self.by_value.get(v)).copied().unwrap_or(0)
    }
}

/// The incoming pod's terms, counted once per cycle over every placed pod.
#[derive(Debug, Default)]
pub struct AffinityIndex {
    required: Vec<DomainCounts>,
    /// Per required term: whether the pod itself matches it (the first of a group).
    self_matching: Vec<bool>,
    anti: Vec<DomainCounts>,
    /// (weight: positive for affinity, negative for anti-affinity, counts).
    preferred: Vec<(i64, DomainCounts)>,
}

impl AffinityIndex {
    fn of(cx: &Cycle) -> Self {
        let mut idx = AffinityIndex::default();
        for t in affinity_terms(cx.pod) {
            idx.required.push(DomainCounts::of(cx, t));
            idx.self_matching.push(term_selects(cx, t, cx.namespace(), cx.pod));
        }
        for t in anti_affinity_terms(cx.pod) {
            idx.anti.push(DomainCounts::of(cx, t));
        }
        if let Some(a) = cx.pod.spec.as_ref().and_then(|s| s.affinity.as_ref()) {
            for w in a.pod_affinity.as_ref().and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_deref()).unwrap_or(&[]) {
                idx.preferred.push((i64::from(w.weight), DomainCounts::of(cx, &w.pod_affinity_term)));
            }
            for w in a.pod_anti_affinity.as_ref().and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_deref()).unwrap_or(&[]) {
                idx.preferred.push((-i64::from(w.weight), DomainCounts::of(cx, &w.pod_affinity_term)));
            }
        }
        idx
    }
}

fn index<'a>(cx: &'a Cycle) -> &'a AffinityIndex {
    cx.affinity.get_or_init(|| AffinityIndex::of(cx))
}

pub struct InterPodAffinity;

impl Plugin for InterPodAffinity {
    fn name(&self) -> &'static str {
        "InterPodAffinity"
    }
    /// Affinity to pods that are not there is not helped by removing pods.
    fn unresolvable(&self, reason: &str) -> bool {
        reason == "node(s) didn't match pod affinity rules"
    }
    fn filter(&self, cx: &Cycle, node: &NodeInfo) -> Vec<String> {
        let mut out = Vec::new();
        // Placed pods' anti-affinity against the incoming pod.
        let repelled = cx.snapshot.repelling.iter().any(|(n, p)| {
            let there = &cx.snapshot.nodes[*n];
            anti_affinity_terms(p).iter().any(|t| same_domain(there, node, &t.topology_key) && term_selects(cx, t, namespace(p), cx.pod))
        });
        if repelled {
            out.push("node(s) didn't satisfy existing pods anti-affinity rules".to_string());
        }
        if affinity_terms(cx.pod).is_empty() && anti_affinity_terms(cx.pod).is_empty() {
            return out;
        }
        let idx = index(cx);
        if !idx.required.is_empty() {
            let satisfied = idx.required.iter().all(|c| c.at(node) > 0);
            // The first pod of a group that selects itself may go anywhere its topology
            // key exists.
            let first_of_group = idx.required.iter().zip(&idx.self_matching).all(|(c, own)| !c.any && *own && node.labels().contains_key(&c.key));
            if !satisfied && !first_of_group {
                out.push("node(s) didn't match pod affinity rules".to_string());
            }
        }
        if idx.anti.iter().any(|c| c.at(node) > 0) {
            out.push("node(s) didn't match pod anti-affinity rules".to_string());
        }
        out
    }
    fn score(&self, cx: &Cycle, node: &NodeInfo) -> Option<i64> {
        let affinity = cx.pod.spec.as_ref()?.affinity.as_ref()?;
        if affinity.pod_affinity.is_none() && affinity.pod_anti_affinity.is_none() {
            return None;
        }
        let idx = index(cx);
        if idx.preferred.is_empty() {
            return None;
        }
        Some(idx.preferred.iter().map(|(w, c)| w * c.at(node)).sum())
    }
    fn normalize(&self, scores: &mut [i64]) {
        // Min-max to 0..=100 (scores may be negative).
        let (min, max) = (scores.iter().copied().min().unwrap_or(0), scores.iter().copied().max().unwrap_or(0));
        for s in scores.iter_mut() {
            *s = if max == min { 0 } else { (*s - min) * MAX_NODE_SCORE / (max - min) };
        }
    }
}
