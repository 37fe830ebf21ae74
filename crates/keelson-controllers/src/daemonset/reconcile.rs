//! What a DaemonSet needs done, as a pure function of the set, the nodes, the pods and
//! the time, following Kubernetes 1.33's DaemonSet controller:
//! - a node should run the daemon pod when its labels match the template's nodeSelector
//!   and required node affinity and its NoSchedule/NoExecute taints are tolerated (with
//!   the tolerations Kubernetes adds to daemon pods); a pod keeps running while its
//!   node's NoExecute taints are tolerated;
//! - the pod is not bound here: it requires node affinity `metadata.name In [node]` and
//!   the scheduler places it;
//! - a node with none gets one, extra and failed pods go, pods on nodes that should not
//!   run them go;
//! - RollingUpdate replaces pods whose `controller-revision-hash` is not the template's:
//!   with maxSurge 0 at most maxUnavailable nodes are without an available pod, with
//!   maxSurge the new pod starts beside the old, which goes once the new one is available;
//!   OnDelete only gives new pods the new template.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetStatus};
use k8s_openapi::api::core::v1::{Affinity, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod, Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use keelson_scheduler::plugins::node::tolerates;
use keelson_scheduler::selectors::term_matches;

use crate::deployment::reconcile::{resolve, template_hash};
use crate::pods::{controller_of, controller_ref, is_available};

pub const REVISION_HASH: &str = "controller-revision-hash";
pub const TEMPLATE_GENERATION: &str = "pod-template-generation";

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Nodes to create a daemon pod for.
    pub create: Vec<String>,
    /// Pods to delete.
    pub delete: Vec<String>,
    pub status: DaemonSetStatus,
}

fn toleration(key: &str, effect: &str) -> Toleration {
    Toleration { key: Some(key.into()), operator: Some("Exists".into()), effect: Some(effect.into()), ..Default::default() }
}

/// The tolerations Kubernetes adds to every daemon pod (without time limits), and the
/// network-unavailable one for host-network pods.
pub fn default_tolerations(host_network: bool) -> Vec<Toleration> {
    let mut t = vec![
        toleration("node.kubernetes.io/not-ready", "NoExecute"),
        toleration("node.kubernetes.io/unreachable", "NoExecute"),
        toleration("node.kubernetes.io/disk-pressure", "NoSchedule"),
        toleration("node.kubernetes.io/memory-pressure", "NoSchedule"),
        toleration("node.kubernetes.io/pid-pressure", "NoSchedule"),
        toleration("node.kubernetes.io/unschedulable", "NoSchedule"),
    ];
    if host_network {
        t.push(toleration("node.kubernetes.io/network-unavailable", "NoSchedule"));
    }
    t
}

/// The template's tolerations plus the daemon defaults it lacks.
fn pod_tolerations(ds: &DaemonSet) -> Vec<Toleration> {
    let spec = ds.spec.as_ref().and_then(|s| s.template.spec.as_ref());
    let mut all: Vec<Toleration> = spec.and_then(|s| s.tolerations.clone()).unwrap_or_default();
    for t in default_tolerations(spec.and_then(|s| s.host_network).unwrap_or(false)) {
        if !all.iter().any(|a| a.key == t.key && a.effect == t.effect) {
            all.push(t);
        }
    }
    all
}

/// (should run a daemon pod, may keep running one) on `node`.
pub fn node_should_run(ds: &DaemonSet, node: &Node) -> (bool, bool) {
    let spec = ds.spec.as_ref().and_then(|s| s.template.spec.as_ref());
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let selector_ok = spec.and_then(|s| s.node_selector.as_ref()).is_none_or(|sel| sel.iter().all(|(k, v)| labels.get(k) == Some(v)));
    let required = spec.and_then(|s| s.affinity.as_ref()).and_then(|a| a.node_affinity.as_ref()).and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref());
    let affinity_ok = required.is_none_or(|r| r.node_selector_terms.iter().any(|t| term_matches(t, node)));
    if !(selector_ok && affinity_ok) {
        return (false, false);
    }
    let tolerations = pod_tolerations(ds);
    let taints: &[Taint] = node.spec.as_ref().and_then(|s| s.taints.as_deref()).unwrap_or(&[]);
    let tolerated = |t: &Taint| tolerations.iter().any(|x| tolerates(x, t));
    let schedule = taints.iter().filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute").all(tolerated);
    let execute = taints.iter().filter(|t| t.effect == "NoExecute").all(tolerated);
    (schedule && execute, execute)
}

/// The node a daemon pod is for: its node, or the one its node affinity names.
pub fn target_node(pod: &Pod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    if let Some(n) = spec.node_name.as_ref().filter(|n| !n.is_empty()) {
        return Some(n.clone());
    }
    let terms = &spec.affinity.as_ref()?.node_affinity.as_ref()?.required_during_scheduling_ignored_during_execution.as_ref()?.node_selector_terms;
    let field = terms.iter().flat_map(|t| t.match_fields.iter().flatten()).find(|f| f.key == "metadata.name" && f.operator == "In")?;
    field.values.as_ref().filter(|v| v.len() == 1).map(|v| v[0].clone())
}

/// The template's revision hash (the `controller-revision-hash` label of its pods).
pub fn revision_hash(ds: &DaemonSet) -> String {
    let template = ds.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default();
    template_hash(&template, ds.status.as_ref().and_then(|s| s.collision_count).unwrap_or(0))
}

/// The daemon pod for `node`: the template with the daemon tolerations, required node
/// affinity on the node's name in place of the template's, and the revision labels.
pub fn pod_for(ds: &DaemonSet, node: &str, hash: &str) -> Pod {
    let template = ds.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default();
    let tm = template.metadata.unwrap_or_default();
    let mut labels: BTreeMap<String, String> = tm.labels.unwrap_or_default();
    labels.insert(REVISION_HASH.into(), hash.into());
    labels.insert(TEMPLATE_GENERATION.into(), ds.metadata.generation.unwrap_or(1).to_string());
    let mut spec = template.spec.unwrap_or_default();
    spec.tolerations = Some(pod_tolerations(ds));
    let by_name = NodeSelector {
        node_selector_terms: vec![NodeSelectorTerm {
            match_expressions: None,
            match_fields: Some(vec![NodeSelectorRequirement { key: "metadata.name".into(), operator: "In".into(), values: Some(vec![node.into()]) }]),
        }],
    };
    let affinity = spec.affinity.get_or_insert_with(Affinity::default);
    affinity.node_affinity.get_or_insert_with(NodeAffinity::default).required_during_scheduling_ignored_during_execution = Some(by_name);
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", ds.metadata.name.as_deref().unwrap_or("daemon"))),
            namespace: ds.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: tm.annotations,
            owner_references: Some(vec![controller_ref("apps/v1", "DaemonSet", &ds.metadata)]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

fn phase(p: &Pod) -> Option<&str> {
    p.status.as_ref().and_then(|s| s.phase.as_deref())
}

fn hash_of(p: &Pod) -> Option<&str> {
    p.metadata.labels.as_ref().and_then(|l| l.get(REVISION_HASH)).map(String::as_str)
}

fn name(p: &Pod) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

/// The sync of `ds` over `nodes` and `pods` (every pod of its namespace).
pub fn reconcile(ds: &DaemonSet, nodes: &[&Node], pods: &[&Pod], now: jiff::Timestamp) -> Plan {
    let uid = ds.metadata.uid.clone().unwrap_or_default();
    let hash = revision_hash(ds);
    let spec = ds.spec.clone().unwrap_or_default();
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    let available = |p: &Pod| phase(p) == Some("Running") && is_available(p, min_ready, now);
    let mut by_node: BTreeMap<String, Vec<&Pod>> = BTreeMap::new();
    for p in pods.iter().copied().filter(|p| controller_of(&p.metadata).is_some_and(|o| o.uid == uid)) {
        if let Some(n) = target_node(p) {
            by_node.entry(n).or_default().push(p);
        }
    }
    let mut plan = Plan::default();
    let deleting = ds.metadata.deletion_timestamp.is_some();
    let mut status = DaemonSetStatus { observed_generation: ds.metadata.generation, collision_count: ds.status.as_ref().and_then(|s| s.collision_count), ..Default::default() };
    // Per node that should run: (its live pods, old ones among them).
    let mut rolling: Vec<(String, Vec<&Pod>)> = Vec::new();
    for node in nodes {
        let node_name = node.metadata.name.clone().unwrap_or_default();
        let (should_run, keep_running) = node_should_run(ds, node);
        let mut here: Vec<&Pod> = by_node.remove(&node_name).unwrap_or_default();
        here.sort_by_key(|p| (p.metadata.creation_timestamp.as_ref().map(|t| t.0), name(p)));
        let scheduled = here.iter().any(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some());
        if should_run {
            status.desired_number_scheduled += 1;
            status.current_number_scheduled += i32::from(!here.is_empty());
            let (ready, avail) = (here.iter().any(|p| crate::pods::is_ready(p)), here.iter().any(|p| available(p)));
            status.number_ready += i32::from(ready);
            status.number_available = Some(status.number_available.unwrap_or(0) + i32::from(avail));
            status.updated_number_scheduled = Some(status.updated_number_scheduled.unwrap_or(0) + i32::from(here.iter().any(|p| hash_of(p) == Some(hash.as_str()))));
        } else if scheduled {
            status.number_misscheduled += 1;
        }
        if deleting {
            continue;
        }
        let exists = !here.is_empty();
        let (live, failed): (Vec<&Pod>, Vec<&Pod>) = here.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).partition(|p| phase(p) != Some("Failed"));
        if !keep_running {
            plan.delete.extend(live.iter().chain(failed.iter()).map(|p| name(p)));
            continue;
        }
        plan.delete.extend(failed.iter().map(|p| name(p)));
        if !should_run {
            continue; // running pods stay while their NoExecute taints are tolerated
        }
        if !exists {
            plan.create.push(node_name.clone());
        } else if live.len() > 1 {
            // The oldest of the current revision stays (or simply the oldest).
            let keep = live.iter().position(|p| hash_of(p) == Some(hash.as_str())).unwrap_or(0);
            let surge_pair = spec.update_strategy.as_ref().and_then(|u| u.rolling_update.as_ref()).is_some_and(|r| resolve(r.max_surge.as_ref(), 1, true, 0) > 0);
            if !(surge_pair && live.len() == 2) {
                plan.delete.extend(live.iter().enumerate().filter(|(i, _)| *i != keep).map(|(_, p)| name(p)));
                continue;
            }
        }
        if !live.is_empty() {
            rolling.push((node_name, live));
        }
    }
    // Pods waiting for a node that no longer exists.
    for pods in by_node.values() {
        plan.delete.extend(pods.iter().filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none() && p.metadata.deletion_timestamp.is_none()).map(|p| name(p)));
    }
    status.number_unavailable = Some(status.desired_number_scheduled - status.number_available.unwrap_or(0)).filter(|n| *n > 0);
    if !deleting && spec.update_strategy.as_ref().and_then(|u| u.type_.as_deref()).unwrap_or("RollingUpdate") == "RollingUpdate" {
        roll(&spec, &hash, &rolling, status.desired_number_scheduled, &available, &mut plan);
    }
    plan.status = status;
    plan
}

/// RollingUpdate over the nodes' live pods.
fn roll(spec: &k8s_openapi::api::apps::v1::DaemonSetSpec, hash: &str, nodes: &[(String, Vec<&Pod>)], desired: i32, available: &dyn Fn(&Pod) -> bool, plan: &mut Plan) {
    let ru = spec.update_strategy.as_ref().and_then(|u| u.rolling_update.as_ref());
    let max_surge = resolve(ru.and_then(|r| r.max_surge.as_ref()), desired, true, 0);
    let mut max_unavailable = resolve(ru.and_then(|r| r.max_unavailable.as_ref()), desired, false, 0);
    if max_surge == 0 && max_unavailable == 0 {
        max_unavailable = 1;
    }
    let is_new = |p: &Pod| hash_of(p) == Some(hash);
    if max_surge == 0 {
        let unavailable_nodes = nodes.iter().filter(|(_, ps)| !ps.iter().any(|p| available(p))).count() as i32 + plan.create.len() as i32;
        let mut budget = max_unavailable - unavailable_nodes;
        for (_, ps) in nodes {
            let Some(old) = ps.iter().find(|p| !is_new(p)) else { continue };
            if !available(old) {
                plan.delete.push(name(old)); // costs no availability
            } else if budget > 0 {
                plan.delete.push(name(old));
                budget -= 1;
            }
        }
        return;
    }
    let mut surging = nodes.iter().filter(|(_, ps)| ps.len() == 2).count() as i32;
    for (node, ps) in nodes {
        let (new, old): (Vec<&&Pod>, Vec<&&Pod>) = ps.iter().partition(|p| is_new(p));
        let Some(old) = old.first() else { continue };
        match new.first() {
            Some(n) if available(n) => plan.delete.push(name(old)),
            Some(_) => {}
            None if !available(old) => plan.delete.push(name(old)),
            None if surging < max_surge => {
                plan.create.push(node.clone());
                surging += 1;
            }
            None => {}
        }
    }
}

#[cfg(test)]
#[path = "reconcile_tests.rs"]
mod tests;
