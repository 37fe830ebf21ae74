//! What a StatefulSet needs done, as a pure function of the set, the pods and claims of
//! its namespace and the time, following Kubernetes 1.33's StatefulSet controller:
//! - pods are `<set>-<ordinal>` for ordinals `start .. start+replicas`, with hostname
//!   and subdomain, the pod-name and pod-index labels, and one PersistentVolumeClaim
//!   `<template>-<pod>` per volumeClaimTemplate, made before the pod and kept after it;
//! - a pod is created only when no pod of its name exists, so one identity never runs
//!   twice; failed pods are deleted to be made again;
//! - OrderedReady creates in ordinal order, each once all below are Running and Ready,
//!   and removes from the highest ordinal, one at a time; Parallel does both at once;
//! - RollingUpdate deletes, from the highest ordinal down to `partition`, one pod at a
//!   time whose revision is not the template's, once every pod is Running and Ready;
//!   OnDelete leaves that to the user. With `rollingUpdate.maxUnavailable` (Kubernetes'
//!   MaxUnavailableStatefulSet) up to that many pods of the wanted range may be
//!   unavailable: outdated pods at or above the partition are deleted from the highest
//!   ordinal down, as many at once as the pods already unavailable leave room for
//!   (OrderedReady still starts only once every pod is Running and Ready);
//! - `persistentVolumeClaimRetentionPolicy` ([`retention_updates`]): `whenDeleted:
//!   Delete` makes the set an owner of each claim (the garbage collector deletes them
//!   with the set); `whenScaled: Delete` makes the pod of a removed ordinal the owner of
//!   its claims before that pod is deleted, so they go once it is gone; Retain takes
//!   those owner references away again.
//!
//! Revisions are `<set>-<hash of the template>`, kept as ControllerRevisions
//! ([`crate::revisions`]); a pod made again below the partition gets the current
//! revision's template from there ([`revision_for`]).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, PodTemplateSpec, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::deployment::reconcile::{resolve, template_hash};
use crate::pods::{controller_of, controller_ref, is_available, is_ready};

pub const REVISION_HASH: &str = "controller-revision-hash";
pub const POD_NAME: &str = "statefulset.kubernetes.io/pod-name";
pub const POD_INDEX: &str = "apps.kubernetes.io/pod-index";

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Claims to create before their pods: (pod, claim).
    pub claims: Vec<(String, PersistentVolumeClaim)>,
    /// Ordinals to create pods for.
    pub create: Vec<i32>,
    /// Pods to delete.
    pub delete: Vec<String>,
    pub status: StatefulSetStatus,
}

fn set_name(sts: &StatefulSet) -> &str {
    sts.metadata.name.as_deref().unwrap_or("")
}

/// The ordinal of pod `name` of set `set`, if it is one of its names.
pub fn ordinal_of(set: &str, name: &str) -> Option<i32> {
    name.strip_prefix(set)?.strip_prefix('-')?.parse().ok().filter(|o: &i32| *o >= 0)
}

/// The revision of the set's current template.
pub fn update_revision(sts: &StatefulSet) -> String {
    let template = sts.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default();
    format!("{}-{}", set_name(sts), template_hash(&template, sts.status.as_ref().and_then(|s| s.collision_count).unwrap_or(0)))
}

fn revision(p: &Pod) -> Option<&str> {
    p.metadata.labels.as_ref()?.get(REVISION_HASH).map(String::as_str)
}

/// The claim of `template` for pod `pod`.
pub fn claim_name(template: &PersistentVolumeClaim, pod: &str) -> String {
    format!("{}-{pod}", template.metadata.name.as_deref().unwrap_or(""))
}

/// The claims pod `ordinal` needs.
pub fn claims_for(sts: &StatefulSet, ordinal: i32) -> Vec<PersistentVolumeClaim> {
    let pod = format!("{}-{ordinal}", set_name(sts));
    let spec = sts.spec.as_ref();
    let selector_labels = spec.and_then(|s| s.selector.match_labels.clone()).unwrap_or_default();
    let delete_with_set = spec.and_then(|s| s.persistent_volume_claim_retention_policy.as_ref()).and_then(|p| p.when_deleted.as_deref()) == Some("Delete");
    spec.and_then(|s| s.volume_claim_templates.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|t| {
            let mut labels = t.metadata.labels.clone().unwrap_or_default();
            labels.extend(selector_labels.clone());
            let owner = delete_with_set.then(|| {
                let mut r = controller_ref("apps/v1", "StatefulSet", &sts.metadata);
                r.controller = None;
                vec![r]
            });
            PersistentVolumeClaim {
                metadata: ObjectMeta {
                    name: Some(claim_name(&t, &pod)),
                    namespace: sts.metadata.namespace.clone(),
                    labels: Some(labels),
                    annotations: t.metadata.annotations.clone(),
                    owner_references: owner,
                    ..Default::default()
                },
                spec: t.spec.clone(),
                status: None,
            }
        })
        .collect()
}

/// The revision pod `ordinal` is made at: below the partition of a rolling update the
/// current one, else the update revision.
pub fn revision_for(sts: &StatefulSet, ordinal: i32) -> String {
    let update = update_revision(sts);
    let spec = sts.spec.as_ref();
    let start = spec.and_then(|s| s.ordinals.as_ref()).and_then(|o| o.start).unwrap_or(0).max(0);
    let strategy = spec.and_then(|s| s.update_strategy.as_ref());
    let partition = strategy.and_then(|u| u.rolling_update.as_ref()).and_then(|r| r.partition).unwrap_or(0);
    let on_delete = strategy.and_then(|u| u.type_.as_deref()) == Some("OnDelete");
    let current = sts.status.as_ref().and_then(|s| s.current_revision.clone()).unwrap_or_else(|| update.clone());
    if !on_delete && ordinal < start + partition { current } else { update }
}

/// Pod `ordinal` of the set, of revision `revision` with its `template` (the set's own
/// when `None`).
pub fn pod_for(sts: &StatefulSet, ordinal: i32, revision: &str, template: Option<&PodTemplateSpec>) -> Pod {
    let name = format!("{}-{ordinal}", set_name(sts));
    let mut spec = sts.spec.clone().unwrap_or_default();
    if let Some(t) = template {
        spec.template = t.clone();
    }
    let tm = spec.template.metadata.unwrap_or_default();
    let mut labels: BTreeMap<String, String> = tm.labels.unwrap_or_default();
    labels.insert(REVISION_HASH.into(), revision.into());
    labels.insert(POD_NAME.into(), name.clone());
    labels.insert(POD_INDEX.into(), ordinal.to_string());
    let mut pod_spec = spec.template.spec.unwrap_or_default();
    pod_spec.hostname = Some(name.clone());
    if !spec.service_name.as_deref().unwrap_or("").is_empty() {
        pod_spec.subdomain = spec.service_name.clone();
    }
    for t in spec.volume_claim_templates.iter().flatten() {
        let vol_name = t.metadata.name.clone().unwrap_or_default();
        let volumes = pod_spec.volumes.get_or_insert_with(Vec::new);
        volumes.retain(|v| v.name != vol_name);
        volumes.push(Volume {
            name: vol_name,
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource { claim_name: claim_name(t, &name), read_only: None }),
            ..Default::default()
        });
    }
    Pod {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: sts.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: tm.annotations,
            owner_references: Some(vec![controller_ref("apps/v1", "StatefulSet", &sts.metadata)]),
            ..Default::default()
        },
        spec: Some(pod_spec),
        status: None,
    }
}

fn phase(p: &Pod) -> Option<&str> {
    p.status.as_ref().and_then(|s| s.phase.as_deref())
}

fn running_and_ready(p: &Pod) -> bool {
    phase(p) == Some("Running") && is_ready(p) && p.metadata.deletion_timestamp.is_none()
}

/// The sync of `sts` over the pods of its namespace and the names of its claims there.
pub fn reconcile(sts: &StatefulSet, pods: &[&Pod], claims: &BTreeSet<String>, now: jiff::Timestamp) -> Plan {
    let uid = sts.metadata.uid.clone().unwrap_or_default();
    let name = set_name(sts).to_string();
    let spec = sts.spec.clone().unwrap_or_default();
    let start = spec.ordinals.as_ref().and_then(|o| o.start).unwrap_or(0).max(0);
    let replicas = spec.replicas.unwrap_or(1).max(0);
    let ordered = spec.pod_management_policy.as_deref() != Some("Parallel");
    let update = update_revision(sts);
    let current = sts.status.as_ref().and_then(|s| s.current_revision.clone()).unwrap_or_else(|| update.clone());
    let mut by_ordinal: BTreeMap<i32, &Pod> = BTreeMap::new();
    let mut strays: Vec<&Pod> = Vec::new();
    for p in pods.iter().copied().filter(|p| controller_of(&p.metadata).is_some_and(|o| o.uid == uid)) {
        match p.metadata.name.as_deref().and_then(|n| ordinal_of(&name, n)) {
            Some(o) => {
                by_ordinal.insert(o, p);
            }
            None => strays.push(p),
        }
    }
    let mut plan = Plan::default();
    let deleting = sts.metadata.deletion_timestamp.is_some();
    let wanted = start..start + replicas;
    let mut healthy = true; // every wanted pod so far is Running and Ready
    if !deleting {
        for o in wanted.clone() {
            match by_ordinal.get(&o) {
                None => {
                    if ordered && !healthy {
                        break;
                    }
                    let pod = format!("{name}-{o}");
                    plan.claims.extend(claims_for(sts, o).into_iter().filter(|c| !claims.contains(c.metadata.name.as_deref().unwrap_or(""))).map(|c| (pod.clone(), c)));
                    plan.create.push(o);
                    healthy = false;
                    if ordered {
                        break;
                    }
                }
                Some(p) if p.metadata.deletion_timestamp.is_some() => {
                    healthy = false; // made again once it is gone
                    if ordered {
                        break;
                    }
                }
                Some(p) if matches!(phase(p), Some("Failed" | "Succeeded")) => {
                    plan.delete.push(p.metadata.name.clone().unwrap_or_default());
                    healthy = false;
                    if ordered {
                        break;
                    }
                }
                Some(p) => {
                    if !running_and_ready(p) {
                        healthy = false;
                        if ordered {
                            break;
                        }
                    }
                }
            }
        }
        // Pods beyond the wanted ordinals go: highest first, one at a time when ordered.
        let mut condemned: Vec<&Pod> = by_ordinal.iter().filter(|(o, _)| !wanted.contains(o)).map(|(_, p)| *p).chain(strays.iter().copied()).collect();
        condemned.retain(|p| p.metadata.deletion_timestamp.is_none());
        condemned.sort_by_key(|p| std::cmp::Reverse(p.metadata.name.as_deref().and_then(|n| ordinal_of(&name, n)).unwrap_or(i32::MAX)));
        let terminating = by_ordinal.values().any(|p| p.metadata.deletion_timestamp.is_some());
        if ordered {
            if healthy && plan.create.is_empty() && !terminating {
                plan.delete.extend(condemned.first().and_then(|p| p.metadata.name.clone()));
            }
        } else {
            plan.delete.extend(condemned.iter().filter_map(|p| p.metadata.name.clone()));
        }
        // Rolling update: the highest outdated pod at or above the partition, when all is well.
        let rolling = spec.update_strategy.as_ref().and_then(|u| u.type_.as_deref()).unwrap_or("RollingUpdate") == "RollingUpdate";
        let partition = spec.update_strategy.as_ref().and_then(|u| u.rolling_update.as_ref()).and_then(|r| r.partition).unwrap_or(0);
        let all_up = wanted.clone().all(|o| by_ordinal.get(&o).is_some_and(|p| running_and_ready(p)));
        let max_unavailable = spec.update_strategy.as_ref().and_then(|u| u.rolling_update.as_ref()).and_then(|r| r.max_unavailable.as_ref());
        let outdated = |o: &i32| by_ordinal.get(o).is_some_and(|p| revision(p) != Some(update.as_str()) && p.metadata.deletion_timestamp.is_none());
        match max_unavailable {
            None if rolling && all_up && plan.delete.is_empty() && !terminating => {
                let first = wanted.clone().rev().filter(|o| *o >= start + partition).find(outdated);
                plan.delete.extend(first.and_then(|o| by_ordinal[&o].metadata.name.clone()));
            }
            // OrderedReady waits for every pod to be up; Parallel counts what is not.
            Some(max) if rolling && (!ordered || (all_up && plan.delete.is_empty() && !terminating)) => {
                let max = resolve(Some(max), replicas, true, 100).max(1);
                let min_ready = spec.min_ready_seconds.unwrap_or(0);
                let unavailable = wanted.clone().filter(|o| by_ordinal.get(o).is_none_or(|p| !running_and_ready(p) || !is_available(p, min_ready, now))).count() as i32;
                let room = (max - unavailable).max(0) as usize;
                let chosen: Vec<String> = wanted
                    .clone()
                    .rev()
                    .filter(|o| *o >= start + partition)
                    .filter(outdated)
                    .filter_map(|o| by_ordinal[&o].metadata.name.clone())
                    .filter(|n| !plan.delete.contains(n))
                    .take(room)
                    .collect();
                plan.delete.extend(chosen);
            }
            _ => {}
        }
    }
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    let mut status = StatefulSetStatus {
        observed_generation: sts.metadata.generation,
        collision_count: sts.status.as_ref().and_then(|s| s.collision_count),
        current_revision: Some(current.clone()),
        update_revision: Some(update.clone()),
        ..Default::default()
    };
    let (mut ready, mut available, mut cur, mut upd) = (0, 0, 0, 0);
    for p in by_ordinal.values().chain(strays.iter()) {
        status.replicas += 1;
        if running_and_ready(p) {
            ready += 1;
            available += i32::from(is_available(p, min_ready, now));
        }
        if p.metadata.deletion_timestamp.is_none() {
            cur += i32::from(revision(p) == Some(current.as_str()));
            upd += i32::from(revision(p) == Some(update.as_str()));
        }
    }
    status.ready_replicas = Some(ready);
    status.available_replicas = Some(available);
    status.current_replicas = Some(cur);
    status.updated_replicas = Some(upd);
    // The rollout is complete: the update revision becomes the current one.
    if upd == replicas && ready == replicas && status.replicas == replicas {
        status.current_revision = Some(update);
        status.current_replicas = Some(upd);
    }
    plan.status = status;
    plan
}

fn retention_policy(sts: &StatefulSet) -> (bool, bool) {
    let policy = sts.spec.as_ref().and_then(|s| s.persistent_volume_claim_retention_policy.as_ref());
    let delete = |v: Option<&String>| v.is_some_and(|v| v == "Delete");
    (delete(policy.and_then(|p| p.when_deleted.as_ref())), delete(policy.and_then(|p| p.when_scaled.as_ref())))
}

/// The claims whose owner references `persistentVolumeClaimRetentionPolicy` changes, as
/// (claim, its new owner references), over the set's pods and the claims of its
/// namespace: for a wanted ordinal the set is an owner exactly when `whenDeleted` is
/// Delete; for a pod beyond the wanted ordinals (about to go) with `whenScaled: Delete`
/// that pod is the owner instead, so the garbage collector deletes the claim once the
/// pod is gone. A claim controlled by anything else is left alone.
pub fn retention_updates(sts: &StatefulSet, pods: &[&Pod], claims: &[&PersistentVolumeClaim]) -> Vec<(String, Vec<OwnerReference>)> {
    let uid = sts.metadata.uid.clone().unwrap_or_default();
    let name = set_name(sts);
    let spec = sts.spec.clone().unwrap_or_default();
    let start = spec.ordinals.as_ref().and_then(|o| o.start).unwrap_or(0).max(0);
    let wanted = start..start + spec.replicas.unwrap_or(1).max(0);
    let (when_deleted, when_scaled) = retention_policy(sts);
    let condemned: BTreeMap<i32, &Pod> = pods
        .iter()
        .copied()
        .filter(|p| controller_of(&p.metadata).is_some_and(|o| o.uid == uid))
        .filter_map(|p| Some((ordinal_of(name, p.metadata.name.as_deref()?)?, p)))
        .filter(|(o, _)| !wanted.contains(o))
        .collect();
    let set_ref = || {
        let mut r = controller_ref("apps/v1", "StatefulSet", &sts.metadata);
        r.controller = None;
        r
    };
    let by_name: BTreeMap<&str, &PersistentVolumeClaim> = claims.iter().filter_map(|c| Some((c.metadata.name.as_deref()?, *c))).collect();
    let mut out = Vec::new();
    for o in wanted.clone().chain(condemned.keys().copied()) {
        let pod_name = format!("{name}-{o}");
        let owner_pod = condemned.get(&o).filter(|_| when_scaled);
        for t in spec.volume_claim_templates.iter().flatten() {
            let claim = claim_name(t, &pod_name);
            let Some(current) = by_name.get(claim.as_str()) else { continue };
            let refs = current.metadata.owner_references.clone().unwrap_or_default();
            let ours = |r: &OwnerReference| r.uid == uid || (r.kind == "Pod" && r.name == pod_name);
            if refs.iter().any(|r| r.controller == Some(true) && !ours(r)) {
                continue;
            }
            let mut want: Vec<OwnerReference> = refs.iter().filter(|r| !ours(r)).cloned().collect();
            match owner_pod {
                Some(p) => want.push(OwnerReference {
                    api_version: "v1".into(),
                    kind: "Pod".into(),
                    name: pod_name.clone(),
                    uid: p.metadata.uid.clone().unwrap_or_default(),
                    controller: None,
                    block_owner_deletion: None,
                }),
                None if when_deleted => want.push(refs.iter().find(|r| r.uid == uid).cloned().unwrap_or_else(set_ref)),
                None => {}
            }
            if want != refs {
                out.push((claim, want));
            }
        }
    }
    out
}

#[cfg(test)]
#[path = "reconcile_tests.rs"]
mod tests;
