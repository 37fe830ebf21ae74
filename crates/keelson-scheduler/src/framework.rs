//! The scheduling cycle for one pod, a pure function of the pod and a [`Snapshot`]:
//! PreFilter (what the pod asks for), Filter over the nodes (as many as Kubernetes'
//! adaptive `percentageOfNodesToScore` asks), Score with the profile's weights, and the
//! choice; or, when no node fits, the reasons per node summed up in the words of
//! Kubernetes' `FailedScheduling` message (and the nodes where preemption might help,
//! for [`crate::preemption`]). Pods nominated to a node (`status.nominatedNodeName`) with
//! at least the pod's priority count as placed there when the pod is filtered, and a pod
//! that is nominated itself tries its nominated node first.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;

use crate::resources::{pod_requests, Resources};
use crate::snapshot::{NodeInfo, Snapshot};

/// Highest score a plugin gives a node.
pub const MAX_NODE_SCORE: i64 = 100;

/// What plugins see of the pod being scheduled.
pub struct Cycle<'a> {
    pub pod: &'a Pod,
    pub snapshot: &'a Snapshot,
    /// The pod's requests (PreFilter of NodeResourcesFit).
    pub requests: Resources,
    /// What InterPodAffinity computes once per cycle (its PreFilter/PreScore state).
    pub(crate) affinity: std::sync::OnceLock<crate::plugins::pod_affinity::AffinityIndex>,
    /// Matching pods per topology domain, per spread constraint (PodTopologySpread's).
    pub(crate) spread: std::sync::OnceLock<Vec<BTreeMap<String, i64>>>,
}

impl<'a> Cycle<'a> {
    pub fn new(pod: &'a Pod, snapshot: &'a Snapshot) -> Self {
        Self { pod, snapshot, requests: pod_requests(pod), affinity: Default::default(), spread: Default::default() }
    }

    pub fn namespace(&self) -> &str {
        self.pod.metadata.namespace.as_deref().unwrap_or("default")
    }
}

/// A scheduling plugin: filters, scores, or both.
pub trait Plugin: Send + Sync {
    fn name(&self) -> &'static str;
    /// Why no node can take the pod, decided once per cycle (Kubernetes' PreFilter
    /// rejection: the message is `0/N nodes are available: <why>.`).
    fn pre_filter(&self, _cx: &Cycle) -> Option<String> {
        None
    }
    /// Why `node` cannot take the pod (empty: it can). Each reason counts once per node
    /// in the `FailedScheduling` message.
    fn filter(&self, _cx: &Cycle, _node: &NodeInfo) -> Vec<String> {
        Vec::new()
    }
    /// Whether a `reason` of this plugin's filter is one removing pods cannot cure
    /// (Kubernetes' `UnschedulableAndUnresolvable`): preemption skips such nodes.
    fn unresolvable(&self, _reason: &str) -> bool {
        false
    }
    /// A raw score, or `None` if this plugin does not score.
    fn score(&self, _cx: &Cycle, _node: &NodeInfo) -> Option<i64> {
        None
    }
    /// Brings the raw scores of the feasible nodes to 0..=[`MAX_NODE_SCORE`].
    fn normalize(&self, _scores: &mut [i64]) {}
}

/// Plugins in order, each scorer with its weight.
pub struct Profile {
    pub plugins: Vec<(Box<dyn Plugin>, i64)>,
}

/// The outcome of one cycle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Bind to this node.
    Bind { node: String, feasible: usize },
    /// No node fits: per reason, on how many nodes it held; the message; and the nodes
    /// (indices in the snapshot) that failed only for reasons preemption might cure.
    Unschedulable { reasons: BTreeMap<String, usize>, message: String, resolvable: Vec<usize> },
}

/// A pod's priority (`spec.priority`, set at admission; 0 without).
pub fn priority_of(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

/// Why `node` cannot take the pod, and whether that is unresolvable by preemption (the
/// first failing plugin's reasons). Pods nominated to the node with at least the pod's
/// priority are counted as placed (Kubernetes' `RunFilterPluginsWithNominatedPods`).
pub fn filter_node(profile: &Profile, cx: &Cycle, node: &NodeInfo) -> Result<(), (Vec<String>, bool)> {
    let uid = cx.pod.metadata.uid.as_deref();
    let priority = priority_of(cx.pod);
    let nominated: Vec<&std::sync::Arc<Pod>> = cx
        .snapshot
        .nominated
        .get(&node.name)
        .into_iter()
        .flatten()
        .filter(|p| p.metadata.uid.as_deref() != uid && priority_of(p) >= priority)
        .collect();
    let with_nominated;
    let node = if nominated.is_empty() {
        node
    } else {
        let mut n = node.clone();
        for p in nominated {
            n.add_pod(p.clone());
        }
        with_nominated = n;
        &with_nominated
    };
    for (plugin, _) in &profile.plugins {
        let failed = plugin.filter(cx, node);
        if !failed.is_empty() {
            let unresolvable = failed.iter().any(|r| plugin.unresolvable(r));
            return Err((failed, unresolvable));
        }
    }
    Ok(())
}

/// How many feasible nodes to find before scoring (`percentageOfNodesToScore` = 0,
/// Kubernetes' adaptive default): all of them below 100 nodes.
pub fn nodes_to_find(total: usize) -> usize {
    if total < 100 {
        return total;
    }
    let pct = (50 - (total as i64) / 125).max(5) as usize;
    (total * pct / 100).max(100).min(total)
}

/// Kubernetes' summary: `0/3 nodes are available: 1 node(s) had untolerated taint {…}, 2 Insufficient cpu.`
pub fn unschedulable_message(total: usize, reasons: &BTreeMap<String, usize>) -> String {
    if total == 0 {
        return "no nodes available to schedule pods".into();
    }
    let mut items: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
    items.sort();
    format!("0/{total} nodes are available: {}.", items.join(", "))
}

/// The FailedScheduling message with PostFilter's part (`… preemption: …`) after it.
pub fn with_post_filter(message: &str, post_filter: &str) -> String {
    if post_filter.is_empty() {
        message.to_string()
    } else {
        format!("{message} {post_filter}")
    }
}

/// Schedules `pod` on `snapshot`: nodes are filtered starting at `start` (rotating across
/// cycles, as Kubernetes does, so large clusters spread their searches), and among the
/// best-scored ones `tie_break` picks.
pub fn schedule(profile: &Profile, pod: &Pod, snapshot: &Snapshot, start: usize, tie_break: u64) -> Decision {
    schedule_timed(profile, pod, snapshot, start, tie_break, &mut CycleTimes::default())
}

/// Where a cycle spent its time: per extension point, and per plugin at PreFilter and
/// Score (Filter runs per node and plugin; timing each would cost more than the filter).
#[derive(Debug, Default)]
pub struct CycleTimes {
    /// How long each extension point took; `None` when it did not run (no nodes; a
    /// PreFilter rejection; one feasible node needs no scoring).
    pub pre_filter: Option<Duration>,
    pub filter: Option<Duration>,
    pub score: Option<Duration>,
    /// (plugin, extension point, time) for the plugins that ran.
    pub plugins: Vec<(&'static str, &'static str, Duration)>,
}

/// [`schedule`], recording into `times` how long each step took.
pub fn schedule_timed(profile: &Profile, pod: &Pod, snapshot: &Snapshot, start: usize, tie_break: u64, times: &mut CycleTimes) -> Decision {
    let cx = Cycle::new(pod, snapshot);
    let total = snapshot.nodes.len();
    let want = nodes_to_find(total);
    if total > 0 {
        let began = Instant::now();
        let mut rejected = None;
        for (plugin, _) in &profile.plugins {
            let at = Instant::now();
            rejected = plugin.pre_filter(&cx);
            times.plugins.push((plugin.name(), "PreFilter", at.elapsed()));
            if rejected.is_some() {
                break;
            }
        }
        times.pre_filter = Some(began.elapsed());
        if let Some(why) = rejected {
            let message = format!("0/{total} nodes are available: {why}.");
            return Decision::Unschedulable { reasons: BTreeMap::from([(why, total)]), message, resolvable: Vec::new() };
        }
    }
    let filtering = Instant::now();
    // A nominated pod goes to its nominated node if it fits there now.
    if let Some(node) = snapshot.nominated_node_of(pod).and_then(|n| snapshot.node(n)) {
        if filter_node(profile, &cx, node).is_ok() {
            times.filter = Some(filtering.elapsed());
            return Decision::Bind { node: node.name.clone(), feasible: 1 };
        }
    }
    let mut feasible: Vec<&NodeInfo> = Vec::new();
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    let mut resolvable = Vec::new();
    for i in 0..total {
        if feasible.len() >= want {
            break;
        }
        let index = (start + i) % total;
        let node = &snapshot.nodes[index];
        match filter_node(profile, &cx, node) {
            Ok(()) => feasible.push(node),
            Err((mut failed, unresolvable)) => {
                if !unresolvable {
                    resolvable.push(index);
                }
                failed.sort();
                failed.dedup();
                for r in failed {
                    *reasons.entry(r).or_default() += 1;
                }
            }
        }
    }
    times.filter = Some(filtering.elapsed());
    if feasible.is_empty() {
        let message = unschedulable_message(total, &reasons);
        resolvable.sort_unstable();
        return Decision::Unschedulable { reasons, message, resolvable };
    }
    let mut totals = vec![0i64; feasible.len()];
    if feasible.len() > 1 {
        let scoring = Instant::now();
        for (plugin, weight) in &profile.plugins {
            let at = Instant::now();
            let raw: Vec<Option<i64>> = feasible.iter().map(|n| plugin.score(&cx, n)).collect();
            if raw.iter().all(Option::is_none) {
                continue;
            }
            let mut scores: Vec<i64> = raw.into_iter().map(|s| s.unwrap_or(0)).collect();
            plugin.normalize(&mut scores);
            for (t, s) in totals.iter_mut().zip(scores) {
                *t += weight * s.clamp(0, MAX_NODE_SCORE);
            }
            times.plugins.push((plugin.name(), "Score", at.elapsed()));
        }
        times.score = Some(scoring.elapsed());
    }
    let best = *totals.iter().max().expect("feasible is not empty");
    let tied: Vec<usize> = (0..feasible.len()).filter(|&i| totals[i] == best).collect();
    let pick = tied[(tie_break % tied.len() as u64) as usize];
    Decision::Bind { node: feasible[pick].name.clone(), feasible: feasible.len() }
}

/// Scales raw scores to 0..=100 by the largest (`reverse`: fewer is better).
pub fn normalize_by_max(scores: &mut [i64], reverse: bool) {
    let max = scores.iter().copied().max().unwrap_or(0);
    for s in scores.iter_mut() {
        let scaled = if max == 0 { 0 } else { *s * MAX_NODE_SCORE / max };
        *s = if reverse { MAX_NODE_SCORE - scaled } else { scaled };
    }
    if max == 0 && reverse {
        scores.iter_mut().for_each(|s| *s = MAX_NODE_SCORE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adaptive_share_of_nodes_scored() {
        assert_eq!(nodes_to_find(3), 3);
        assert_eq!(nodes_to_find(99), 99);
        assert_eq!(nodes_to_find(100), 100);
        assert_eq!(nodes_to_find(1000), 420); // 50 - 8 = 42%
        assert_eq!(nodes_to_find(5000), 500); // max(5, 10) = 10%
        assert_eq!(nodes_to_find(10000), 500); // 5%
    }

    #[test]
    fn message_is_worded_as_kubernetes_words_it() {
        let reasons: BTreeMap<String, usize> =
            [("Insufficient cpu".to_string(), 2), ("node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }".to_string(), 1)].into();
        assert_eq!(
            unschedulable_message(3, &reasons),
            "0/3 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, 2 Insufficient cpu."
        );
        assert_eq!(unschedulable_message(0, &BTreeMap::new()), "no nodes available to schedule pods");
    }

    #[test]
    fn normalization() {
        let mut s = vec![0, 5, 10];
        normalize_by_max(&mut s, false);
        assert_eq!(s, vec![0, 50, 100]);
        let mut s = vec![0, 5, 10];
        normalize_by_max(&mut s, true);
        assert_eq!(s, vec![100, 50, 0]);
        let mut s = vec![0, 0];
        normalize_by_max(&mut s, true);
        assert_eq!(s, vec![100, 100]);
    }
}
