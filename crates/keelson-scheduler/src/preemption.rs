//! PostFilter: Kubernetes' DefaultPreemption, a pure function of the pod, the
//! [`Snapshot`] and the nodes where the cycle's filters failed only for reasons removing
//! pods might cure.
//!
//! On each such node every pod of lower priority (strictly less) is taken off; if the
//! pod then fits, the potential victims are added back one by one — those whose removal
//! would violate a PodDisruptionBudget first, then the others, the most important
//! (highest priority, then longest running) first — and each that can stay is spared.
//! Among the nodes that work, the choice is Kubernetes' `pickOneNodeForPreemption`:
//! fewest budget violations, then the lowest highest-victim priority, then the smallest
//! sum of victim priorities, then the fewest victims, then the latest start of the
//! highest-priority victims, then the first found.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use crate::framework::{filter_node, priority_of, unschedulable_message, Cycle, Profile};
use crate::selectors::label_selector_matches;
use crate::snapshot::{nominated_node_name, NodeInfo, Snapshot};

/// Kubernetes' `minCandidateNodesPercentage` and `minCandidateNodesAbsolute`.
const MIN_CANDIDATE_NODES_PERCENTAGE: usize = 10;
const MIN_CANDIDATE_NODES_ABSOLUTE: usize = 100;

pub const NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";
pub const NO_VICTIMS: &str = "No preemption victims found for incoming pod";

/// What preemption decided.
#[derive(Clone, Debug)]
pub enum PostFilter {
    /// Nominate the pod to `node` and preempt `victims` there (most important first).
    Preempt { node: String, victims: Vec<Arc<Pod>>, pdb_violations: usize },
    /// The pod may not preempt (or its earlier preemption is still under way): the
    /// `preemption: …` part of the FailedScheduling message. A nomination it has stays.
    Fail(String),
    /// The pod may preempt, but no node would take it even with victims gone: the
    /// message part, and a nomination it has is withdrawn (Kubernetes' PostFilter result
    /// with an empty nominated node), so the room it held goes back to others.
    NoCandidate(String),
}

/// One node where preemption works.
#[derive(Clone, Debug)]
pub struct Candidate {
    pub node: usize,
    pub victims: Vec<Arc<Pod>>,
    pub pdb_violations: usize,
}

/// How many candidate nodes to find before choosing (Kubernetes' `GetOffsetAndNumCandidates`).
pub fn candidates_to_find(potential: usize) -> usize {
    (potential * MIN_CANDIDATE_NODES_PERCENTAGE / 100).max(MIN_CANDIDATE_NODES_ABSOLUTE).min(potential)
}

fn start_time(pod: &Pod) -> String {
    let t = pod.status.as_ref().and_then(|s| s.start_time.as_ref()).or(pod.metadata.creation_timestamp.as_ref());
    t.map(|t| t.0.to_string()).unwrap_or_default()
}

/// Kubernetes' `MoreImportantPod`: higher priority, then the one that started earlier.
fn more_important_first(a: &Arc<Pod>, b: &Arc<Pod>) -> std::cmp::Ordering {
    priority_of(b).cmp(&priority_of(a)).then_with(|| start_time(a).cmp(&start_time(b)))
}

fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// Whether `pod` may preempt at all (Kubernetes' `PodEligibleToPreemptOthers`): not with
/// `preemptionPolicy: Never`, and not while a lower-priority pod on its nominated node is
/// still terminating (its earlier preemption is under way). `Err` is the message.
pub fn eligible(pod: &Pod, snapshot: &Snapshot) -> Result<(), String> {
    if pod.spec.as_ref().and_then(|s| s.preemption_policy.as_deref()) == Some("Never") {
        return Err("not eligible due to preemptionPolicy=Never.".into());
    }
    let priority = priority_of(pod);
    let nominated = nominated_node_name(pod).or_else(|| snapshot.nominated_node_of(pod));
    if let Some(node) = nominated.and_then(|n| snapshot.node(n)) {
        if node.pods.iter().any(|p| is_terminating(p) && priority_of(p) < priority) {
            return Err("not eligible due to a terminating pod on the nominated node.".into());
        }
    }
    Ok(())
}

/// Splits `pods` (most important first) into those whose removal would violate a
/// budget and those whose removal would not (Kubernetes' `filterPodsWithPDBViolation`:
/// each matching budget's `disruptionsAllowed` is spent pod by pod; pods the budget
/// already lists in `disruptedPods` do not spend it).
pub fn split_by_pdb_violation(pods: &[Arc<Pod>], pdbs: &[Arc<PodDisruptionBudget>]) -> (Vec<Arc<Pod>>, Vec<Arc<Pod>>) {
    let mut allowed: Vec<i32> = pdbs.iter().map(|b| b.status.as_ref().map_or(0, |s| s.disruptions_allowed)).collect();
    let (mut violating, mut fine) = (Vec::new(), Vec::new());
    for pod in pods {
        let mut violated = false;
        if let Some(labels) = pod.metadata.labels.as_ref().filter(|l| !l.is_empty()) {
            for (i, pdb) in pdbs.iter().enumerate() {
                if pdb.metadata.namespace != pod.metadata.namespace {
                    continue;
                }
                // A budget with no or an empty selector matches nothing.
                let Some(sel) = pdb.spec.as_ref().and_then(|s| s.selector.as_ref()) else { continue };
                let empty = sel.match_labels.as_ref().is_none_or(|m| m.is_empty()) && sel.match_expressions.as_ref().is_none_or(|e| e.is_empty());
                if empty || !label_selector_matches(sel, labels) {
                    continue;
                }
                let name = pod.metadata.name.as_deref().unwrap_or("");
                if pdb.status.as_ref().and_then(|s| s.disrupted_pods.as_ref()).is_some_and(|d| d.contains_key(name)) {
                    continue;
                }
                allowed[i] -= 1;
                if allowed[i] < 0 {
                    violated = true;
                }
            }
        }
        if violated {
            violating.push(pod.clone());
        } else {
            fine.push(pod.clone());
        }
    }
    (violating, fine)
}

fn fits(profile: &Profile, pod: &Pod, snapshot: &Snapshot, node: usize) -> Result<(), Vec<String>> {
    let cx = Cycle::new(pod, snapshot);
    filter_node(profile, &cx, &snapshot.nodes[node]).map_err(|(reasons, _)| reasons)
}

/// The fewest victims on node `index` that make room for `pod` (Kubernetes'
/// `SelectVictimsOnNode`), or why there are none: the node's filter reasons with every
/// lower-priority pod removed, or [`NO_VICTIMS`]. `work` is a copy of the snapshot that
/// is changed and put back.
pub fn select_victims(profile: &Profile, pod: &Pod, work: &mut Snapshot, index: usize) -> Result<Candidate, Vec<String>> {
    let priority = priority_of(pod);
    let mut potential: Vec<Arc<Pod>> = work.nodes[index].pods.iter().filter(|p| priority_of(p) < priority).cloned().collect();
    if potential.is_empty() {
        return Err(vec![NO_VICTIMS.into()]);
    }
    potential.sort_by(more_important_first);
    let saved: (NodeInfo, Vec<(usize, Arc<Pod>)>) = (work.nodes[index].clone(), work.repelling.clone());
    for p in &potential {
        work.remove_from_node(index, p.metadata.uid.as_deref().unwrap_or(""));
    }
    let result = match fits(profile, pod, work, index) {
        Err(reasons) => Err(reasons),
        Ok(()) => {
            let (violating, fine) = split_by_pdb_violation(&potential, &work.pdbs);
            let mut victims = Vec::new();
            let mut pdb_violations = 0;
            for (group, counts) in [(violating, true), (fine, false)] {
                for p in group {
                    work.add_to_node(index, p.clone());
                    if fits(profile, pod, work, index).is_err() {
                        work.remove_from_node(index, p.metadata.uid.as_deref().unwrap_or(""));
                        pdb_violations += usize::from(counts);
                        victims.push(p);
                    }
                }
            }
            victims.sort_by(more_important_first);
            if victims.is_empty() {
                // It fits with nothing removed (only nominated pods were in the way before).
                Err(vec![NO_VICTIMS.into()])
            } else {
                Ok(Candidate { node: index, victims, pdb_violations })
            }
        }
    };
    work.nodes[index] = saved.0;
    work.repelling = saved.1;
    result
}

/// Kubernetes' `pickOneNodeForPreemption` over `candidates` (not empty).
pub fn pick_node(candidates: &[Candidate]) -> &Candidate {
    let highest = |c: &Candidate| c.victims.iter().map(|p| priority_of(p)).max().unwrap_or(i32::MIN);
    // Priorities are shifted to be non-negative before summing, as Kubernetes does.
    let sum = |c: &Candidate| c.victims.iter().map(|p| i64::from(priority_of(p)) + i64::from(i32::MAX) + 1).sum::<i64>();
    // The earliest start among the highest-priority victims; the latest such wins.
    let earliest_top = |c: &Candidate| {
        let top = highest(c);
        c.victims.iter().filter(|p| priority_of(p) == top).map(|p| start_time(p)).min().unwrap_or_default()
    };
    let mut best = &candidates[0];
    for c in &candidates[1..] {
        let key = |c: &Candidate| (c.pdb_violations, highest(c), sum(c), c.victims.len());
        let better = match key(c).cmp(&key(best)) {
            std::cmp::Ordering::Less => true,
            std::cmp::Ordering::Greater => false,
            std::cmp::Ordering::Equal => earliest_top(c) > earliest_top(best),
        };
        if better {
            best = c;
        }
    }
    best
}

/// DefaultPreemption's PostFilter for a pod no node took: `resolvable` are the nodes
/// (snapshot indices) whose filters failed only for reasons preemption might cure;
/// `start` rotates where the search begins, as Kubernetes' random offset does.
pub fn preempt(profile: &Profile, pod: &Pod, snapshot: &Snapshot, resolvable: &[usize], start: usize) -> PostFilter {
    if let Err(why) = eligible(pod, snapshot) {
        return PostFilter::Fail(format!("preemption: {why}"));
    }
    let total = snapshot.nodes.len();
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    if total > resolvable.len() {
        reasons.insert(NOT_HELPFUL.into(), total - resolvable.len());
    }
    let want = candidates_to_find(resolvable.len());
    let mut candidates = Vec::new();
    if !resolvable.is_empty() {
        let mut work = snapshot.clone();
        for i in 0..resolvable.len() {
            if candidates.len() >= want {
                break;
            }
            let index = resolvable[(start + i) % resolvable.len()];
            match select_victims(profile, pod, &mut work, index) {
                Ok(c) => candidates.push(c),
                Err(mut why) => {
                    why.sort();
                    why.dedup();
                    for r in why {
                        *reasons.entry(r).or_default() += 1;
                    }
                }
            }
        }
    }
    if candidates.is_empty() {
        return PostFilter::NoCandidate(format!("preemption: {}", unschedulable_message(total, &reasons)));
    }
    let best = pick_node(&candidates);
    PostFilter::Preempt { node: snapshot.nodes[best.node].name.clone(), victims: best.victims.clone(), pdb_violations: best.pdb_violations }
}

#[cfg(test)]
#[path = "preemption_tests.rs"]
mod tests;
