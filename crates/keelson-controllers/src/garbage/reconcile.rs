//! The garbage collector's decisions for the objects the controller manager reflects
//! (Deployments, ReplicaSets, Pods), as a pure function of their metadata:
//! - a dependent whose owners are all gone is deleted (Background);
//! - an owner being deleted with the `orphan` finalizer has its dependents' references
//!   removed, then its finalizer;
//! - an owner being deleted with `foregroundDeletion` has its dependents deleted
//!   (Foreground, so theirs go first), and loses the finalizer once no dependent that
//!   blocks it is left.
//!
//! Owners of other kinds are not judged here. A dependent is only deleted after the
//! executor has confirmed with a live read that its owner is really gone.

use std::collections::HashMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

pub const ORPHAN: &str = "orphan";
pub const FOREGROUND: &str = "foregroundDeletion";

/// Kinds whose owners this collector knows (their objects are all in the snapshot).
pub const OWNER_KINDS: [&str; 2] = ["Deployment", "ReplicaSet"];

/// The owner kinds of the workload controllers' snapshot (`crate::workloads`).
pub const WORKLOAD_OWNER_KINDS: [&str; 4] = ["CronJob", "Job", "DaemonSet", "StatefulSet"];

/// An object by kind, namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GcAction {
    /// Every owner is gone (confirm with a live read of `owners`, then delete).
    DeleteOrphaned { object: ObjectKey, owners: Vec<(ObjectKey, String)> },
    /// The owner is being deleted in the foreground: delete the dependent first.
    DeleteForeground { object: ObjectKey },
    /// Remove references to these owner uids.
    DropOwners { object: ObjectKey, uids: Vec<String> },
    /// Remove this finalizer from the owner.
    RemoveFinalizer { object: ObjectKey, finalizer: &'static str },
}

fn key(kind: &str, meta: &ObjectMeta) -> ObjectKey {
    ObjectKey { kind: kind.into(), namespace: meta.namespace.clone().unwrap_or_default(), name: meta.name.clone().unwrap_or_default() }
}

fn has_finalizer(meta: &ObjectMeta, f: &str) -> bool {
    meta.deletion_timestamp.is_some() && meta.finalizers.iter().flatten().any(|x| x == f)
}

/// Decisions over every object `(kind, metadata)` of the snapshot, for owners of
/// [`OWNER_KINDS`].
pub fn collect(objects: &[(&str, &ObjectMeta)]) -> Vec<GcAction> {
    collect_owned_by(objects, &OWNER_KINDS)
}

/// Decisions over every object of the snapshot for owners of `owner_kinds` (every
/// object of those kinds must be in it).
pub fn collect_owned_by(objects: &[(&str, &ObjectMeta)], owner_kinds: &[&str]) -> Vec<GcAction> {
    let by_uid: HashMap<&str, (&str, &ObjectMeta)> = objects.iter().filter_map(|(k, m)| Some((m.uid.as_deref()?, (*k, *m)))).collect();
    let mut actions = Vec::new();
    // uid of an owner → (dependents left, dependents left that block its deletion)
    let mut dependents: HashMap<&str, (usize, usize)> = HashMap::new();
    for (kind, meta) in objects {
        let refs: Vec<_> = meta.owner_references.iter().flatten().filter(|o| owner_kinds.contains(&o.kind.as_str())).collect();
        if refs.is_empty() {
            continue;
        }
        let me = key(kind, meta);
        let mut present = 0;
        let mut orphaning = Vec::new();
        let mut foreground = false;
        for r in &refs {
            match by_uid.get(r.uid.as_str()) {
                Some((_, owner)) => {
                    present += 1;
                    let entry = dependents.entry(r.uid.as_str()).or_default();
                    entry.0 += 1;
                    entry.1 += usize::from(r.block_owner_deletion == Some(true));
                    if has_finalizer(owner, ORPHAN) {
                        orphaning.push(r.uid.clone());
                    } else if has_finalizer(owner, FOREGROUND) {
                        foreground = true;
                    }
                }
                None => {}
            }
        }
        if present == 0 && meta.deletion_timestamp.is_none() {
            let owners = refs.iter().map(|r| (ObjectKey { kind: r.kind.clone(), namespace: me.namespace.clone(), name: r.name.clone() }, r.uid.clone())).collect();
            actions.push(GcAction::DeleteOrphaned { object: me, owners });
        } else if !orphaning.is_empty() {
            actions.push(GcAction::DropOwners { object: me, uids: orphaning });
        } else if foreground && meta.deletion_timestamp.is_none() {
            actions.push(GcAction::DeleteForeground { object: me });
        }
    }
    for (kind, meta) in objects {
        let uid = meta.uid.as_deref().unwrap_or("");
        let (left, blocking) = dependents.get(uid).copied().unwrap_or((0, 0));
        if has_finalizer(meta, ORPHAN) && left == 0 {
            actions.push(GcAction::RemoveFinalizer { object: key(kind, meta), finalizer: ORPHAN });
        }
        if has_finalizer(meta, FOREGROUND) && blocking == 0 {
            actions.push(GcAction::RemoveFinalizer { object: key(kind, meta), finalizer: FOREGROUND });
        }
    }
    actions
}

/// Whether `live`, the dependent as stored now, is still to be deleted for
/// `DeleteOrphaned { owners, .. }`: not being deleted already, and every reference it
/// holds to an owner of `owner_kinds` is one of `owners` (confirmed gone). A snapshot
/// can lag the dependent's own writes (its references just dropped by an orphaning
/// owner, or a new owner adopted it), so the decision is checked again on the live copy.
pub fn still_orphaned(live: &ObjectMeta, owners: &[(ObjectKey, String)], owner_kinds: &[&str]) -> bool {
    let refs: Vec<_> = live.owner_references.iter().flatten().filter(|o| owner_kinds.contains(&o.kind.as_str())).collect();
    live.deletion_timestamp.is_none() && !refs.is_empty() && refs.iter().all(|r| owners.iter().any(|(_, uid)| *uid == r.uid))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn meta(v: serde_json::Value) -> ObjectMeta {
        serde_json::from_value(v).unwrap()
    }

    fn owned(name: &str, owner_kind: &str, owner: &str, uid: &str) -> ObjectMeta {
        meta(json!({"name": name, "namespace": "d", "uid": format!("{name}-uid"), "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner_kind, "name": owner, "uid": uid, "controller": true, "blockOwnerDeletion": true}]}))
    }

    #[test]
    fn dependents_of_a_vanished_owner_are_deleted() {
        let rs = owned("web-1", "Deployment", "web", "gone-uid");
        let pod = owned("web-1-a", "ReplicaSet", "web-1", "web-1-uid");
        let actions = collect(&[("ReplicaSet", &rs), ("Pod", &pod)]);
        assert_eq!(actions.len(), 1, "{actions:?}");
        let GcAction::DeleteOrphaned { object, owners } = &actions[0] else { panic!() };
        assert_eq!((object.kind.as_str(), object.name.as_str()), ("ReplicaSet", "web-1"));
        assert_eq!(owners[0].1, "gone-uid");
    }

    #[test]
    fn a_dependent_released_or_adopted_since_the_snapshot_is_not_deleted() {
        let rs = owned("web-1", "Deployment", "web", "gone-uid");
        let GcAction::DeleteOrphaned { owners, .. } = collect(&[("ReplicaSet", &rs)]).remove(0) else { panic!() };
        assert!(still_orphaned(&rs, &owners, &OWNER_KINDS));
        // Released by an orphaning owner after the snapshot was taken: it stays.
        let released = meta(json!({"name": "web-1", "namespace": "d", "uid": "web-1-uid"}));
        assert!(!still_orphaned(&released, &owners, &OWNER_KINDS));
        // Adopted by another owner meanwhile: it stays.
        let adopted = owned("web-1", "Deployment", "web", "new-uid");
        assert!(!still_orphaned(&adopted, &owners, &OWNER_KINDS));
        // Already being deleted: nothing to do.
        let mut going = rs.clone();
        going.deletion_timestamp = meta(json!({"deletionTimestamp": "2026-01-01T00:00:00Z"})).deletion_timestamp;
        assert!(!still_orphaned(&going, &owners, &OWNER_KINDS));
    }

    #[test]
    fn orphan_deletion_drops_references_then_the_finalizer() {
        let d = meta(json!({"name": "web", "namespace": "d", "uid": "d-uid", "deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["orphan"]}));
        let rs = owned("web-1", "Deployment", "web", "d-uid");
        assert_eq!(collect(&[("Deployment", &d), ("ReplicaSet", &rs)]), vec![GcAction::DropOwners { object: ObjectKey { kind: "ReplicaSet".into(), namespace: "d".into(), name: "web-1".into() }, uids: vec!["d-uid".into()] }]);
        let released = meta(json!({"name": "web-1", "namespace": "d", "uid": "web-1-uid"}));
        assert_eq!(collect(&[("Deployment", &d), ("ReplicaSet", &released)]), vec![GcAction::RemoveFinalizer { object: ObjectKey { kind: "Deployment".into(), namespace: "d".into(), name: "web".into() }, finalizer: ORPHAN }]);
    }

    #[test]
    fn foreground_deletion_deletes_dependents_first() {
        let d = meta(json!({"name": "web", "namespace": "d", "uid": "d-uid", "deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["foregroundDeletion"]}));
        let rs = owned("web-1", "Deployment", "web", "d-uid");
        assert_eq!(collect(&[("Deployment", &d), ("ReplicaSet", &rs)]), vec![GcAction::DeleteForeground { object: ObjectKey { kind: "ReplicaSet".into(), namespace: "d".into(), name: "web-1".into() } }]);
        // The dependent is terminating: the owner still waits for it.
        let mut going = rs.clone();
        going.deletion_timestamp = d.deletion_timestamp.clone();
        assert!(collect(&[("Deployment", &d), ("ReplicaSet", &going)]).is_empty());
        // Gone: the finalizer goes.
        assert_eq!(collect(&[("Deployment", &d)]), vec![GcAction::RemoveFinalizer { object: ObjectKey { kind: "Deployment".into(), namespace: "d".into(), name: "web".into() }, finalizer: FOREGROUND }]);
    }

    #[test]
    fn live_owners_and_unknown_owner_kinds_are_left_alone() {
        let d = meta(json!({"name": "web", "namespace": "d", "uid": "d-uid"}));
        let rs = owned("web-1", "Deployment", "web", "d-uid");
        let job_pod = owned("job-a", "Job", "job", "job-uid");
        assert!(collect(&[("Deployment", &d), ("ReplicaSet", &rs), ("Pod", &job_pod)]).is_empty());
    }

    #[test]
    fn the_workload_sweep_judges_jobs_and_cronjobs_only() {
        let rs_pod = owned("web-1-a", "ReplicaSet", "web-1", "rs-uid");
        let job = owned("nightly-1", "CronJob", "nightly", "gone-uid");
        let job_pod = owned("nightly-1-a", "Job", "nightly-1", "nightly-1-uid");
        let actions = collect_owned_by(&[("Pod", &rs_pod), ("Job", &job), ("Pod", &job_pod)], &WORKLOAD_OWNER_KINDS);
        assert_eq!(actions.len(), 1, "{actions:?}");
        let GcAction::DeleteOrphaned { object, .. } = &actions[0] else { panic!() };
        assert_eq!((object.kind.as_str(), object.name.as_str()), ("Job", "nightly-1"));
    }
}
