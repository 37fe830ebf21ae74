//! PodTopologySpread: `topologySpreadConstraints` with maxSkew, whenUnsatisfiable
//! (DoNotSchedule filters, ScheduleAnyway scores), minDomains and the Honor/Ignore node
//! affinity policy (the default: only nodes the pod could go to count as domains).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::TopologySpreadConstraint;

use crate::framework::{normalize_by_max, Cycle, Plugin};
use crate::plugins::node::matches_node_selector;
use crate::selectors::{label_selector_matches, NO_LABELS};
use crate::snapshot::NodeInfo;

fn constraints<'a>(cx: &'a Cycle) -> &'a [TopologySpreadConstraint] {
    cx.pod.spec.as_ref().and_then(|s| s.topology_spread_constraints.as_deref()).unwrap_or(&[])
}

/// Pods matching `c` per domain of `c.topologyKey`, over the nodes that count.
fn counts(cx: &Cycle, c: &TopologySpreadConstraint) -> BTreeMap<String, i64> {
    let honor = c.node_affinity_policy.as_deref().unwrap_or("Honor") == "Honor";
    let mut out: BTreeMap<String, i64> = BTreeMap::new();
    for node in &cx.snapshot.nodes {
        let Some(domain) = node.labels().get(&c.topology_key).cloned() else { continue };
        if honor && !matches_node_selector(cx.pod, node) {
            continue;
        }
        let n = node
            .pods
            .iter()
            .filter(|p| p.metadata.namespace.as_deref().unwrap_or("default") == cx.namespace())
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| c.label_selector.as_ref().is_some_and(|s| label_selector_matches(s, p.metadata.labels.as_ref().unwrap_or(&NO_LABELS))))
            .count() as i64;
        *out.entry(domain).or_default() += n;
    }
    out
}

/// The counts of every constraint, computed once per cycle.
fn cached<'a>(cx: &'a Cycle) -> &'a [BTreeMap<String, i64>] {
    cx.spread.get_or_init(|| constraints(cx).iter().map(|c| counts(cx, c)).collect())
}

fn self_match(cx: &Cycle, c: &TopologySpreadConstraint) -> i64 {
    let labels = cx.pod.metadata.labels.as_ref().unwrap_or(&NO_LABELS);
    i64::from(c.label_selector.as_ref().is_some_and(|s| label_selector_matches(s, labels)))
}

pub struct PodTopologySpread;

impl Plugin for PodTopologySpread {
    fn name(&self) -> &'static str {
        "PodTopologySpread"
    }
    fn unresolvable(&self, reason: &str) -> bool {
        reason.ends_with("(missing required label)")
    }
    fn filter(&self, cx: &Cycle, node: &NodeInfo) -> Vec<String> {
        for (i, c) in constraints(cx).iter().enumerate().filter(|(_, c)| c.when_unsatisfiable == "DoNotSchedule") {
            let Some(domain) = node.labels().get(&c.topology_key).cloned() else {
                return vec!["node(s) didn't match pod topology spread constraints (missing required label)".into()];
            };
            let counts = &cached(cx)[i];
            let mut min = counts.values().copied().min().unwrap_or(0);
            if (counts.len() as i32) < c.min_domains.unwrap_or(1) {
                min = 0;
            }
            let skew = counts.get(&domain).copied().unwrap_or(0) + self_match(cx, c) - min;
            if skew > i64::from(c.max_skew) {
                return vec!["node(s) didn't match pod topology spread constraints".into()];
            }
        }
        Vec::new()
    }
    fn score(&self, cx: &Cycle, node: &NodeInfo) -> Option<i64> {
        let soft: Vec<(usize, &TopologySpreadConstraint)> = constraints(cx).iter().enumerate().filter(|(_, c)| c.when_unsatisfiable == "ScheduleAnyway").collect();
        if soft.is_empty() {
            return None;
        }
        let all = cached(cx);
        Some(soft.iter().map(|(i, c)| node.labels().get(&c.topology_key).and_then(|d| all[*i].get(d).copied()).unwrap_or(0)).sum())
    }
    fn normalize(&self, scores: &mut [i64]) {
        normalize_by_max(scores, true);
    }
}
