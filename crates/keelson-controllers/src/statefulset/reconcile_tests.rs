use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::{json, Value};

fn now() -> jiff::Timestamp {
    "2026-01-01T00:10:00Z".parse().unwrap()
}

fn sts(replicas: i32, extra: Value) -> StatefulSet {
    let mut s = json!({
        "metadata": {"name": "db", "namespace": "d", "uid": "sts-uid", "generation": 4},
        "spec": {"replicas": replicas, "serviceName": "db", "podManagementPolicy": "OrderedReady", "selector": {"matchLabels": {"app": "db"}},
                 "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
                 "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "c", "image": "db:1"}]}}},
    });
    for (k, v) in extra.as_object().unwrap() {
        s["spec"][k.as_str()] = v.clone();
    }
    serde_json::from_value(s).unwrap()
}

/// Pod `db-<o>` of revision `rev`: Running and Ready, or Pending.
fn pod(o: i32, rev: &str, up: bool) -> Pod {
    let status = if up {
        json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:01:00Z"}]})
    } else {
        json!({"phase": "Pending"})
    };
    serde_json::from_value(json!({
        "metadata": {"name": format!("db-{o}"), "namespace": "d", "labels": {"app": "db", REVISION_HASH: rev},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "sts-uid", "controller": true}]},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
        "status": status,
    }))
    .unwrap()
}

fn names(plan: &Plan) -> Vec<String> {
    plan.delete.clone()
}

#[test]
fn ordered_ready_creates_one_at_a_time_in_order() {
    let s = sts(3, json!({}));
    let rev = update_revision(&s);
    assert_eq!(reconcile(&s, &[], &BTreeSet::new(), now()).create, vec![0]);
    let (p0, p1_pending) = (pod(0, &rev, true), pod(1, &rev, false));
    assert_eq!(reconcile(&s, &[&p0], &BTreeSet::new(), now()).create, vec![1]);
    assert!(reconcile(&s, &[&p0, &p1_pending], &BTreeSet::new(), now()).create.is_empty(), "db-1 is not ready yet");
    let parallel = sts(3, json!({"podManagementPolicy": "Parallel"}));
    assert_eq!(reconcile(&parallel, &[], &BTreeSet::new(), now()).create, vec![0, 1, 2]);
}

#[test]
fn scale_down_removes_the_highest_ordinal_first_one_at_a_time() {
    let s = sts(1, json!({}));
    let rev = update_revision(&s);
    let pods: Vec<Pod> = (0..3).map(|o| pod(o, &rev, true)).collect();
    let refs: Vec<&Pod> = pods.iter().collect();
    assert_eq!(names(&reconcile(&s, &refs, &BTreeSet::new(), now())), vec!["db-2"]);
    let mut going = pods[2].clone();
    going.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
    assert!(reconcile(&s, &[refs[0], refs[1], &going], &BTreeSet::new(), now()).delete.is_empty(), "wait until db-2 is gone");
    let parallel = sts(1, json!({"podManagementPolicy": "Parallel"}));
    let rev = update_revision(&parallel);
    let pods: Vec<Pod> = (0..3).map(|o| pod(o, &rev, true)).collect();
    let refs: Vec<&Pod> = pods.iter().collect();
    assert_eq!(names(&reconcile(&parallel, &refs, &BTreeSet::new(), now())), vec!["db-2", "db-1"]);
}

#[test]
fn an_identity_is_never_made_twice_and_failed_pods_are_replaced() {
    let s = sts(2, json!({}));
    let rev = update_revision(&s);
    let p0 = pod(0, &rev, true);
    let mut terminating = pod(1, &rev, true);
    terminating.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
    assert!(reconcile(&s, &[&p0, &terminating], &BTreeSet::new(), now()).create.is_empty(), "db-1 still exists");
    let mut failed = pod(1, &rev, false);
    failed.status.as_mut().unwrap().phase = Some("Failed".into());
    let plan = reconcile(&s, &[&p0, &failed], &BTreeSet::new(), now());
    assert_eq!((plan.delete.clone(), plan.create.clone()), (vec!["db-1".to_string()], vec![]));
}

#[test]
fn pods_have_stable_names_hostnames_labels_and_claims() {
    let s = sts(2, json!({"volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}));
    let plan = reconcile(&s, &[], &BTreeSet::new(), now());
    assert_eq!(plan.claims.len(), 1);
    let (for_pod, claim) = &plan.claims[0];
    assert_eq!(for_pod, "db-0");
    assert_eq!(claim.metadata.name.as_deref(), Some("data-db-0"));
    assert_eq!(claim.metadata.labels.as_ref().unwrap()["app"], "db");
    assert!(claim.metadata.owner_references.is_none(), "kept after the set by default (Retain)");
    let existing: BTreeSet<String> = ["data-db-0".to_string()].into();
    assert!(reconcile(&s, &[], &existing, now()).claims.is_empty(), "a claim is made once");
    let p = pod_for(&s, 1, "db-abc", None);
    assert_eq!(p.metadata.name.as_deref(), Some("db-1"));
    let labels = p.metadata.labels.as_ref().unwrap();
    assert_eq!((labels[POD_NAME].as_str(), labels[POD_INDEX].as_str(), labels[REVISION_HASH].as_str()), ("db-1", "1", "db-abc"));
    let spec = p.spec.unwrap();
    assert_eq!((spec.hostname.as_deref(), spec.subdomain.as_deref()), (Some("db-1"), Some("db")));
    let vol = &spec.volumes.unwrap()[0];
    assert_eq!(vol.persistent_volume_claim.as_ref().unwrap().claim_name, "data-db-1");
    let deleting = sts(1, json!({"persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete", "whenScaled": "Retain"}, "volumeClaimTemplates": [{"metadata": {"name": "data"}}]}));
    assert_eq!(claims_for(&deleting, 0)[0].metadata.owner_references.as_ref().unwrap()[0].kind, "StatefulSet");
    assert_eq!(ordinal_of("db", "db-12"), Some(12));
    assert_eq!(ordinal_of("db", "dbx-1"), None);
    assert_eq!(ordinal_of("db", "db-a"), None);
}

#[test]
fn rolling_update_goes_from_the_highest_ordinal_down_to_the_partition() {
    let old = sts(3, json!({}));
    let old_rev = update_revision(&old);
    let mut new = old.clone();
    new.spec.as_mut().unwrap().template.spec.as_mut().unwrap().containers[0].image = Some("db:2".into());
    new.status = Some(StatefulSetStatus { current_revision: Some(old_rev.clone()), ..Default::default() });
    let new_rev = update_revision(&new);
    let pods: Vec<Pod> = (0..3).map(|o| pod(o, &old_rev, true)).collect();
    let refs: Vec<&Pod> = pods.iter().collect();
    let plan = reconcile(&new, &refs, &BTreeSet::new(), now());
    assert_eq!(names(&plan), vec!["db-2"]);
    assert_eq!((plan.status.current_revision.as_deref(), plan.status.update_revision.as_deref()), (Some(old_rev.as_str()), Some(new_rev.as_str())));
    assert_eq!((plan.status.current_replicas, plan.status.updated_replicas), (Some(3), Some(0)));
    // db-2 is back on the new revision but not ready: nothing else goes.
    let p2 = pod(2, &new_rev, false);
    assert!(reconcile(&new, &[refs[0], refs[1], &p2], &BTreeSet::new(), now()).delete.is_empty());
    let p2 = pod(2, &new_rev, true);
    assert_eq!(names(&reconcile(&new, &[refs[0], refs[1], &p2], &BTreeSet::new(), now())), vec!["db-1"]);
    // A partition of 2 keeps db-0 and db-1 on the old revision.
    let mut partitioned = new.clone();
    partitioned.spec.as_mut().unwrap().update_strategy.as_mut().unwrap().rolling_update.as_mut().unwrap().partition = Some(2);
    assert!(reconcile(&partitioned, &[refs[0], refs[1], &p2], &BTreeSet::new(), now()).delete.is_empty());
    assert_eq!(revision_for(&partitioned, 1), old_rev, "made again below the partition: the current revision");
    assert_eq!(revision_for(&partitioned, 2), new_rev);
    let old_template = old.spec.as_ref().unwrap().template.clone();
    let remade = pod_for(&partitioned, 1, &old_rev, Some(&old_template));
    assert_eq!(remade.spec.unwrap().containers[0].image.as_deref(), Some("db:1"));
    // All updated and ready: the update revision is now the current one.
    let all: Vec<Pod> = (0..3).map(|o| pod(o, &new_rev, true)).collect();
    let refs: Vec<&Pod> = all.iter().collect();
    let done = reconcile(&new, &refs, &BTreeSet::new(), now());
    assert_eq!(done.status.current_revision.as_deref(), Some(new_rev.as_str()));
    assert_eq!((done.status.replicas, done.status.ready_replicas, done.status.available_replicas), (3, Some(3), Some(3)));
    // OnDelete: nothing is replaced.
    let mut on_delete = new.clone();
    on_delete.spec.as_mut().unwrap().update_strategy = serde_json::from_value(json!({"type": "OnDelete"})).unwrap();
    let olds: Vec<&Pod> = pods.iter().collect();
    assert!(reconcile(&on_delete, &olds, &BTreeSet::new(), now()).delete.is_empty());
}

#[test]
fn ordinals_can_start_elsewhere() {
    let s = sts(2, json!({"ordinals": {"start": 5}}));
    assert_eq!(reconcile(&s, &[], &BTreeSet::new(), now()).create, vec![5]);
}

/// Five pods of the old revision under a new template: (set, pods, new revision).
fn rolling(extra: Value) -> (StatefulSet, Vec<Pod>, String) {
    let old = sts(5, extra.clone());
    let old_rev = update_revision(&old);
    let mut new = old.clone();
    new.spec.as_mut().unwrap().template.spec.as_mut().unwrap().containers[0].image = Some("db:2".into());
    new.status = Some(StatefulSetStatus { current_revision: Some(old_rev.clone()), ..Default::default() });
    let new_rev = update_revision(&new);
    (new, (0..5).map(|o| pod(o, &old_rev, true)).collect(), new_rev)
}

#[test]
fn max_unavailable_updates_that_many_pods_at_once_from_the_highest_ordinal() {
    let going = |mut p: Pod| {
        p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
        p
    };
    // (case, policy, maxUnavailable, partition, what happened to some ordinals, deleted)
    type Change = fn(Pod, &str) -> Pod;
    let updated: Change = |p, rev| pod(p.metadata.name.as_deref().unwrap().trim_start_matches("db-").parse().unwrap(), rev, true);
    let unready: Change = |mut p, _| {
        p.status = serde_json::from_value(json!({"phase": "Running"})).unwrap();
        p
    };
    type Case = (&'static str, &'static str, Value, i32, Vec<(usize, Change)>, Vec<&'static str>);
    let cases: Vec<Case> = vec![
        ("two at once", "OrderedReady", json!(2), 0, vec![], vec!["db-4", "db-3"]),
        ("a percentage, rounded up", "OrderedReady", json!("30%"), 0, vec![], vec!["db-4", "db-3"]),
        ("0 means 1", "Parallel", json!(0), 0, vec![], vec!["db-4"]),
        ("the partition holds", "OrderedReady", json!(3), 3, vec![], vec!["db-4", "db-3"]),
        ("updated pods are skipped", "Parallel", json!(2), 0, vec![(4, updated)], vec!["db-3", "db-2"]),
        ("an unavailable pod takes a slot", "Parallel", json!(3), 0, vec![(4, updated), (0, unready)], vec!["db-3", "db-2"]),
        ("an outdated unavailable pod is replaced too", "Parallel", json!(2), 0, vec![(4, unready)], vec!["db-4"]),
        ("no room left", "Parallel", json!(2), 0, vec![(4, updated), (1, unready), (2, unready)], vec![]),
        ("OrderedReady waits for every pod", "OrderedReady", json!(3), 0, vec![(0, unready)], vec![]),
    ];
    for (case, policy, max, partition, changes, deleted) in cases {
        let (mut set, mut pods, new_rev) = rolling(json!({"podManagementPolicy": policy}));
        let ru = set.spec.as_mut().unwrap().update_strategy.as_mut().unwrap().rolling_update.as_mut().unwrap();
        ru.max_unavailable = Some(serde_json::from_value(max).unwrap());
        ru.partition = Some(partition);
        for (o, change) in changes {
            pods[o] = change(pods[o].clone(), &new_rev);
        }
        let refs: Vec<&Pod> = pods.iter().collect();
        assert_eq!(names(&reconcile(&set, &refs, &BTreeSet::new(), now())), deleted, "{case}");
    }
    // Pods already going count as unavailable, and are not deleted twice.
    let (mut set, mut pods, _) = rolling(json!({"podManagementPolicy": "Parallel"}));
    set.spec.as_mut().unwrap().update_strategy.as_mut().unwrap().rolling_update.as_mut().unwrap().max_unavailable = Some(serde_json::from_value(json!(2)).unwrap());
    pods[4] = going(pods[4].clone());
    let refs: Vec<&Pod> = pods.iter().collect();
    assert_eq!(names(&reconcile(&set, &refs, &BTreeSet::new(), now())), vec!["db-3"]);
    // OnDelete ignores it.
    let (mut set, pods, _) = rolling(json!({}));
    set.spec.as_mut().unwrap().update_strategy = serde_json::from_value(json!({"type": "OnDelete", "rollingUpdate": {"maxUnavailable": 3}})).unwrap();
    let refs: Vec<&Pod> = pods.iter().collect();
    assert!(reconcile(&set, &refs, &BTreeSet::new(), now()).delete.is_empty());
}

fn claim(name: &str, owners: Value) -> PersistentVolumeClaim {
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": "d", "ownerReferences": owners}})).unwrap()
}

fn owners(updates: &[(String, Vec<OwnerReference>)], claim: &str) -> Option<Vec<(String, String)>> {
    updates.iter().find(|(c, _)| c == claim).map(|(_, refs)| refs.iter().map(|r| (r.kind.clone(), r.name.clone())).collect())
}

#[test]
fn the_claim_retention_policy_sets_who_owns_each_claim() {
    let set_ref = json!([{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "sts-uid"}]);
    let set_owner = Some(vec![("StatefulSet".to_string(), "db".to_string())]);
    let pod_owner = Some(vec![("Pod".to_string(), "db-2".to_string())]);
    let none = Some(vec![]);
    // (whenDeleted, whenScaled, claims' owners so far, new owners of data-db-0 (kept), of data-db-2 (scaled away))
    let cases = [
        ("Retain", "Retain", json!(null), None, None),
        ("Retain", "Retain", set_ref.clone(), none.clone(), none.clone()),
        ("Delete", "Retain", json!(null), set_owner.clone(), set_owner.clone()),
        ("Delete", "Retain", set_ref.clone(), None, None),
        ("Retain", "Delete", json!(null), None, pod_owner.clone()),
        ("Delete", "Delete", json!(null), set_owner.clone(), pod_owner.clone()),
        ("Delete", "Delete", set_ref.clone(), None, pod_owner.clone()),
    ];
    for (when_deleted, when_scaled, so_far, kept, scaled) in cases {
        let s = sts(2, json!({"persistentVolumeClaimRetentionPolicy": {"whenDeleted": when_deleted, "whenScaled": when_scaled}, "volumeClaimTemplates": [{"metadata": {"name": "data"}}]}));
        let rev = update_revision(&s);
        let mut pods: Vec<Pod> = (0..3).map(|o| pod(o, &rev, true)).collect();
        pods[2].metadata.uid = Some("pod-2-uid".into());
        let pod_refs: Vec<&Pod> = pods.iter().collect();
        let claims: Vec<PersistentVolumeClaim> = (0..3).map(|o| claim(&format!("data-db-{o}"), so_far.clone())).collect();
        let claim_refs: Vec<&PersistentVolumeClaim> = claims.iter().collect();
        let updates = retention_updates(&s, &pod_refs, &claim_refs);
        let case = format!("{when_deleted}/{when_scaled} from {so_far}");
        assert_eq!(owners(&updates, "data-db-0"), kept, "{case}");
        assert_eq!(owners(&updates, "data-db-1"), kept, "{case}");
        assert_eq!(owners(&updates, "data-db-2"), scaled, "{case}");
        if scaled == pod_owner {
            let (_, refs) = updates.iter().find(|(c, _)| c == "data-db-2").unwrap();
            assert_eq!(refs[0].uid, "pod-2-uid", "{case}: owned by that very pod");
        }
    }
    // A claim another controller controls is left alone; other owners are kept.
    let s = sts(1, json!({"persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete", "whenScaled": "Retain"}, "volumeClaimTemplates": [{"metadata": {"name": "data"}}]}));
    let foreign = claim("data-db-0", json!([{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "x", "controller": true}]));
    assert!(retention_updates(&s, &[], &[&foreign]).is_empty());
    let shared = claim("data-db-0", json!([{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "x"}]));
    assert_eq!(owners(&retention_updates(&s, &[], &[&shared]), "data-db-0"), Some(vec![("X".into(), "x".into()), ("StatefulSet".into(), "db".into())]));
}
