//! What a Deployment needs done, as a pure function of the Deployment and its
//! ReplicaSets: find or make the ReplicaSet of the current template (named by its
//! pod-template-hash), roll from the old ones to it (RollingUpdate with maxSurge /
//! maxUnavailable, or Recreate), keep `revisionHistoryLimit` old sets, and the status
//! and conditions `kubectl rollout status` reads.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

pub const HASH_LABEL: &str = "pod-template-hash";
pub const REVISION: &str = "deployment.kubernetes.io/revision";
/// The Deployment's replicas, and replicas + maxSurge, when a set was last sized.
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";

/// One step of a sync.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Create the ReplicaSet of the current template.
    Create(Box<ReplicaSet>),
    /// Set a ReplicaSet's replicas (and its revision annotation, when it changes).
    Scale { name: String, replicas: i32, revision: Option<String>, from: i32 },
    /// Delete an old ReplicaSet beyond the history limit.
    Delete(String),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub actions: Vec<Action>,
    pub status: DeploymentStatus,
    /// The Deployment's own revision annotation, when it changes.
    pub revision: Option<String>,
}

/// FNV-1a (32 bit) of the template, spelled in Kubernetes' safe alphabet.
pub fn template_hash(template: &PodTemplateSpec, collision_count: i32) -> String {
    let mut t = template.clone();
    if let Some(l) = t.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
        l.remove(HASH_LABEL);
    }
    let bytes = serde_json::to_vec(&t).expect("templates serialize");
    let mut h: u32 = 0x811c9dc5;
    for b in bytes.iter().chain(collision_count.to_string().as_bytes()) {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x01000193);
    }
    const SAFE: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut out = String::new();
    let mut v = h;
    loop {
        out.push(SAFE[(v % SAFE.len() as u32) as usize] as char);
        v /= SAFE.len() as u32;
        if v == 0 {
            break;
        }
    }
    out
}

fn same_template(rs: &ReplicaSet, template: &PodTemplateSpec) -> bool {
    let Some(mut t) = rs.spec.as_ref().and_then(|s| s.template.clone()) else { return false };
    if let Some(l) = t.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
        l.remove(HASH_LABEL);
    }
    let normalize = |t: &PodTemplateSpec| {
        let mut v = serde_json::to_value(t).unwrap_or_default();
        if v.pointer("/metadata/labels").is_some_and(|l| l.as_object().is_some_and(|o| o.is_empty())) {
            v["metadata"].as_object_mut().map(|m| m.remove("labels"));
        }
        v
    };
    normalize(&t) == normalize(template)
}

/// Whether `rs` is `d`'s own set of its current template: what a create refused with
/// AlreadyExists finds when the set was made by an earlier sync (or an earlier holder of
/// the lease) that this one's cache has not seen yet. Anything else of that name is a
/// hash collision.
pub fn is_current_set_of(d: &Deployment, rs: &ReplicaSet) -> bool {
    let uid = d.metadata.uid.as_deref().unwrap_or_default();
    let template = d.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default();
    crate::pods::controller_of(&rs.metadata).is_some_and(|o| o.uid == uid) && same_template(rs, &template)
}

fn revision_of(rs: &ReplicaSet) -> i64 {
    rs.metadata.annotations.as_ref().and_then(|a| a.get(REVISION)).and_then(|r| r.parse().ok()).unwrap_or(0)
}

fn spec_replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0)
}

fn status_of(rs: &ReplicaSet) -> (i32, i32, i32) {
    let s = rs.status.as_ref();
    (s.map_or(0, |s| s.replicas), s.and_then(|s| s.ready_replicas).unwrap_or(0), s.and_then(|s| s.available_replicas).unwrap_or(0))
}

/// An int-or-percent of `total`: percentages round up for surge, down for unavailable.
pub fn resolve(v: Option<&IntOrString>, total: i32, round_up: bool, default_pct: i32) -> i32 {
    match v {
        Some(IntOrString::Int(i)) => *i,
        Some(IntOrString::String(s)) => {
            let pct: i32 = s.trim_end_matches('%').parse().unwrap_or(default_pct);
            percent(pct, total, round_up)
        }
        None => percent(default_pct, total, round_up),
    }
}

fn percent(pct: i32, total: i32, round_up: bool) -> i32 {
    let x = i64::from(pct) * i64::from(total);
    (if round_up { (x + 99) / 100 } else { x / 100 }) as i32
}

/// (maxSurge, maxUnavailable) of a rolling Deployment; never both 0.
pub fn surge_and_unavailable(d: &Deployment) -> (i32, i32) {
    let replicas = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let ru = d.spec.as_ref().and_then(|s| s.strategy.as_ref()).and_then(|s| s.rolling_update.as_ref());
    let surge = resolve(ru.and_then(|r| r.max_surge.as_ref()), replicas, true, 25);
    let unavailable = resolve(ru.and_then(|r| r.max_unavailable.as_ref()), replicas, false, 25);
    if surge == 0 && unavailable == 0 {
        (0, 1)
    } else {
        (surge, unavailable)
    }
}

fn condition(type_: &str, status: &str, reason: &str, message: String, now: &str, previous: Option<&DeploymentCondition>) -> DeploymentCondition {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    let now_t = Time(now.parse().expect("RFC 3339"));
    if let Some(p) = previous.filter(|p| p.status == status && p.reason.as_deref() == Some(reason) && p.message.as_deref() == Some(message.as_str())) {
        // Unchanged: kept as it is, times included, so a sync without news writes nothing.
        return p.clone();
    }
    let unchanged = previous.is_some_and(|p| p.status == status);
    DeploymentCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message),
        last_update_time: Some(now_t.clone()),
        last_transition_time: if unchanged { previous.and_then(|p| p.last_transition_time.clone()) } else { Some(now_t) },
    }
}

/// The sync of `d` over the ReplicaSets it owns, at `now` (RFC 3339).
pub fn reconcile(d: &Deployment, owned: &[&ReplicaSet], now: &str) -> Plan {
    let spec = d.spec.clone().unwrap_or_default();
    let replicas = spec.replicas.unwrap_or(1);
    let name = d.metadata.name.clone().unwrap_or_default();
    let collision = d.status.as_ref().and_then(|s| s.collision_count).unwrap_or(0);
    let hash = template_hash(&spec.template, collision);
    let new_rs = owned.iter().copied().filter(|rs| same_template(rs, &spec.template)).max_by_key(|rs| revision_of(rs));
    let olds: Vec<&ReplicaSet> = owned.iter().copied().filter(|rs| new_rs.is_none_or(|n| n.metadata.name != rs.metadata.name)).collect();
    let max_revision = owned.iter().map(|rs| revision_of(rs)).max().unwrap_or(0);
    let recreate = spec.strategy.as_ref().and_then(|s| s.type_.as_deref()) == Some("Recreate");
    let (surge, unavailable) = if recreate { (0, replicas) } else { surge_and_unavailable(d) };
    let paused = spec.paused.unwrap_or(false);
    let mut actions = Vec::new();
    let mut revision = None;
    let old_pods: i32 = olds.iter().map(|rs| status_of(rs).0).sum();
    let old_spec: i32 = olds.iter().map(|rs| spec_replicas(rs)).sum();

    let proportional = if recreate { Vec::new() } else { scale_proportionally(d, owned, replicas, surge) };
    if !proportional.is_empty() {
        // A scaling event in mid-rollout: every active set grows or shrinks in proportion;
        // the rollout goes on at the next sync.
        actions = proportional;
    } else {
    match new_rs {
        None if !paused => {
            // The first set gets everything; later ones start within the surge.
            let start = if recreate {
                if old_pods > 0 || old_spec > 0 { 0 } else { replicas }
            } else if olds.is_empty() {
                replicas
            } else {
                (replicas + surge - old_spec).clamp(0, replicas)
            };
            let mut template = spec.template.clone();
            template.metadata.get_or_insert_with(Default::default).labels.get_or_insert_with(BTreeMap::new).insert(HASH_LABEL.into(), hash.clone());
            let mut selector = spec.selector.clone();
            selector.match_labels.get_or_insert_with(BTreeMap::new).insert(HASH_LABEL.into(), hash.clone());
            let mut labels = template.metadata.as_ref().and_then(|m| m.labels.clone()).unwrap_or_default();
            labels.insert(HASH_LABEL.into(), hash.clone());
            let rev = (max_revision + 1).to_string();
            let rs = ReplicaSet {
                metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                    name: Some(format!("{name}-{hash}")),
                    namespace: d.metadata.namespace.clone(),
                    labels: Some(labels),
                    annotations: Some(
                        [(REVISION.to_string(), rev.clone()), (DESIRED_REPLICAS.to_string(), replicas.to_string()), (MAX_REPLICAS.to_string(), (replicas + surge).to_string())].into(),
                    ),
                    owner_references: Some(vec![crate::pods::controller_ref("apps/v1", "Deployment", &d.metadata)]),
                    ..Default::default()
                },
                spec: Some(k8s_openapi::api::apps::v1::ReplicaSetSpec { replicas: Some(start), selector, template: Some(template), min_ready_seconds: spec.min_ready_seconds }),
                status: None,
            };
            revision = Some(rev);
            actions.push(Action::Create(Box::new(rs)));
        }
        Some(n) if !paused => {
            let current = spec_replicas(n);
            let rev = if revision_of(n) < max_revision { Some((max_revision + 1).to_string()) } else { None };
            let mut target = current;
            if current > replicas {
                target = replicas;
            } else if current < replicas {
                if recreate {
                    if old_pods == 0 && old_spec == 0 {
                        target = replicas;
                    }
                } else {
                    let total: i32 = current + old_spec;
                    let room = replicas + surge - total;
                    if room > 0 {
                        target = current + room.min(replicas - current);
                    }
                }
            }
            if target != current || rev.is_some() {
                actions.push(Action::Scale { name: n.metadata.name.clone().unwrap_or_default(), replicas: target, revision: rev.clone(), from: current });
            }
            revision = rev.or_else(|| Some(revision_of(n).to_string()));
            // As Kubernetes: a sync that scales the new set up leaves the old ones for the next.
            if target <= current {
                actions.extend(scale_down_olds(&olds, n, replicas, unavailable, recreate));
            }
        }
        _ => {}
    }
    }
    if revision.is_none() {
        revision = new_rs.map(|n| revision_of(n).to_string());
    }

    // History: old sets scaled to 0 beyond revisionHistoryLimit, oldest first.
    let limit = spec.revision_history_limit.unwrap_or(10).max(0) as usize;
    let mut idle: Vec<&ReplicaSet> = olds.iter().copied().filter(|rs| spec_replicas(rs) == 0 && status_of(rs).0 == 0).collect();
    idle.sort_by_key(|rs| revision_of(rs));
    if idle.len() > limit {
        for rs in &idle[..idle.len() - limit] {
            actions.push(Action::Delete(rs.metadata.name.clone().unwrap_or_default()));
        }
    }

    // Status, from the sets' own status.
    let mut status = DeploymentStatus { observed_generation: d.metadata.generation, collision_count: d.status.as_ref().and_then(|s| s.collision_count), ..Default::default() };
    let (mut total, mut ready, mut available) = (0, 0, 0);
    for rs in owned {
        let (r, rd, av) = status_of(rs);
        total += r;
        ready += rd;
        available += av;
    }
    let updated = new_rs.map_or(0, |n| status_of(n).0);
    status.replicas = Some(total);
    status.updated_replicas = Some(updated);
    status.ready_replicas = Some(ready);
    status.available_replicas = Some(available);
    let spec_total: i32 = owned.iter().map(|rs| spec_replicas(rs)).sum::<i32>().max(replicas);
    status.unavailable_replicas = Some((spec_total - available).max(0));
    let previous = |t: &str| d.status.as_ref().and_then(|s| s.conditions.as_ref()).and_then(|c| c.iter().find(|c| c.type_ == t)).cloned();
    let min_available = replicas - if recreate { 0 } else { unavailable };
    let available_cond = if available >= min_available {
        condition("Available", "True", "MinimumReplicasAvailable", "Deployment has minimum availability.".into(), now, previous("Available").as_ref())
    } else {
        condition("Available", "False", "MinimumReplicasUnavailable", "Deployment does not have minimum availability.".into(), now, previous("Available").as_ref())
    };
    let new_name = new_rs.and_then(|n| n.metadata.name.clone()).unwrap_or_else(|| format!("{name}-{hash}"));
    let complete = new_rs.is_some_and(|n| spec_replicas(n) == replicas && status_of(n).2 >= replicas) && old_pods == 0 && updated == replicas;
    let progressing_prev = previous("Progressing");
    let progressing = if paused {
        condition("Progressing", "Unknown", "DeploymentPaused", "Deployment is paused".into(), now, progressing_prev.as_ref())
    } else if complete {
        condition("Progressing", "True", "NewReplicaSetAvailable", format!("ReplicaSet \"{new_name}\" has successfully progressed."), now, progressing_prev.as_ref())
    } else if progress_deadline_passed(d, progressing_prev.as_ref(), now) {
        condition("Progressing", "False", "ProgressDeadlineExceeded", format!("ReplicaSet \"{new_name}\" has timed out progressing."), now, progressing_prev.as_ref())
    } else if new_rs.is_none() {
        condition("Progressing", "True", "NewReplicaSetCreated", format!("Created new replica set \"{new_name}\""), now, progressing_prev.as_ref())
    } else {
        let mut c = condition("Progressing", "True", "ReplicaSetUpdated", format!("ReplicaSet \"{new_name}\" is progressing."), now, progressing_prev.as_ref());
        if !status_unchanged(d, &status) {
            // Progress made: the deadline counts from now.
            c.last_update_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now.parse().expect("RFC 3339")));
        }
        c
    };
    status.conditions = Some(vec![available_cond, progressing]);
    Plan { actions, status, revision }
}

fn annotation(rs: &ReplicaSet, key: &str) -> Option<i32> {
    rs.metadata.annotations.as_ref()?.get(key)?.parse().ok()
}

/// Kubernetes' proportional scaling: when the Deployment's replicas changed while more
/// than one set is active (a set's desired-replicas annotation differs), the sets share
/// the new `replicas + maxSurge` in proportion to their sizes (each set's share computed
/// against the max-replicas it was sized for, rounded), the remainder going to the
/// largest set (newest first when growing, oldest first when shrinking).
pub fn scale_proportionally(d: &Deployment, owned: &[&ReplicaSet], replicas: i32, surge: i32) -> Vec<Action> {
    let mut active: Vec<&ReplicaSet> = owned.iter().copied().filter(|rs| spec_replicas(rs) > 0).collect();
    if active.len() < 2 || !active.iter().any(|rs| annotation(rs, DESIRED_REPLICAS).is_some_and(|want| want != replicas)) {
        return Vec::new();
    }
    let allowed = replicas + surge;
    let total: i32 = active.iter().map(|rs| spec_replicas(rs)).sum();
    let to_add = allowed - total;
    if to_add == 0 {
        return Vec::new();
    }
    // Larger sets first; among equals the newer when growing, the older when shrinking.
    active.sort_by(|a, b| {
        let by_size = spec_replicas(b).cmp(&spec_replicas(a));
        let by_age = revision_of(b).cmp(&revision_of(a));
        by_size.then(if to_add > 0 { by_age } else { by_age.reverse() })
    });
    let status_replicas = d.status.as_ref().map(|s| s.replicas.unwrap_or(0)).unwrap_or(0).max(1);
    let mut added = 0;
    let mut sizes: Vec<i32> = Vec::with_capacity(active.len());
    for rs in &active {
        let current = spec_replicas(rs);
        let share = if replicas == 0 {
            -current
        } else {
            let sized_for = annotation(rs, MAX_REPLICAS).unwrap_or(status_replicas).max(1);
            ((current as f64 * allowed as f64) / sized_for as f64).round() as i32 - current
        };
        let left = to_add - added;
        let share = if to_add > 0 { share.min(left).max(0) } else { share.max(left).min(0) };
        sizes.push(current + share);
        added += share;
    }
    if let Some(first) = sizes.first_mut() {
        *first = (*first + to_add - added).max(0);
    }
    active
        .iter()
        .zip(sizes)
        .filter(|(rs, size)| spec_replicas(rs) != *size || annotation(rs, DESIRED_REPLICAS) != Some(replicas))
        .map(|(rs, size)| Action::Scale { name: rs.metadata.name.clone().unwrap_or_default(), replicas: size, revision: None, from: spec_replicas(rs) })
        .collect()
}

/// Old sets scaled down: all of them for Recreate; for RollingUpdate their unavailable
/// pods first, then available ones while `replicas - maxUnavailable` stay available.
fn scale_down_olds(olds: &[&ReplicaSet], new_rs: &ReplicaSet, replicas: i32, unavailable: i32, recreate: bool) -> Vec<Action> {
    let mut ordered: Vec<&ReplicaSet> = olds.iter().copied().filter(|rs| spec_replicas(rs) > 0).collect();
    ordered.sort_by_key(|rs| revision_of(rs));
    let mut targets: Vec<i32> = ordered.iter().map(|rs| spec_replicas(rs)).collect();
    if recreate {
        targets.iter_mut().for_each(|t| *t = 0);
    } else {
        let all_pods: i32 = targets.iter().sum::<i32>() + spec_replicas(new_rs);
        let min_available = replicas - unavailable;
        let new_unavailable = (spec_replicas(new_rs) - status_of(new_rs).2).max(0);
        let mut room = all_pods - min_available - new_unavailable;
        for (rs, t) in ordered.iter().zip(targets.iter_mut()) {
            let unhealthy = (*t - status_of(rs).2).max(0).min(room.max(0));
            *t -= unhealthy;
            room -= unhealthy;
        }
        let available: i32 = ordered.iter().map(|rs| status_of(rs).2).sum::<i32>() + status_of(new_rs).2;
        let mut excess = available - min_available;
        for t in targets.iter_mut() {
            if excess <= 0 {
                break;
            }
            let d = (*t).min(excess);
            *t -= d;
            excess -= d;
        }
    }
    ordered
        .iter()
        .zip(targets)
        .filter(|(rs, t)| spec_replicas(rs) != *t)
        .map(|(rs, t)| Action::Scale { name: rs.metadata.name.clone().unwrap_or_default(), replicas: t, revision: None, from: spec_replicas(rs) })
        .collect()
}

fn status_unchanged(d: &Deployment, s: &DeploymentStatus) -> bool {
    d.status.as_ref().is_some_and(|o| o.updated_replicas == s.updated_replicas && o.available_replicas == s.available_replicas && o.ready_replicas == s.ready_replicas && o.replicas == s.replicas)
}

fn progress_deadline_passed(d: &Deployment, progressing: Option<&DeploymentCondition>, now: &str) -> bool {
    let Some(deadline) = d.spec.as_ref().and_then(|s| s.progress_deadline_seconds).or(Some(600)) else { return false };
    let Some(p) = progressing else { return false };
    if p.reason.as_deref() == Some("ProgressDeadlineExceeded") {
        return true;
    }
    if p.reason.as_deref() != Some("ReplicaSetUpdated") {
        return false;
    }
    let (Some(last), Ok(now)) = (p.last_update_time.as_ref(), now.parse::<jiff::Timestamp>()) else { return false };
    now.as_second() - last.0.as_second() > i64::from(deadline)
}

#[cfg(test)]
#[path = "reconcile_tests.rs"]
mod tests;
