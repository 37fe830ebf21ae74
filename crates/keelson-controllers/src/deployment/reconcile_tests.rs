use super::*;
use serde_json::{json, Value};

const NOW: &str = "2026-01-01T00:10:00Z";

fn deployment(replicas: i32, image: &str, extra: Value) -> Deployment {
    let mut d = json!({
        "metadata": {"name": "web", "namespace": "d", "uid": "d-uid", "generation": 3},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": image}]}}},
    });
    if let (Some(spec), Some(e)) = (d["spec"].as_object_mut(), extra.get("spec").and_then(Value::as_object)) {
        spec.extend(e.clone());
    }
    serde_json::from_value(d).unwrap()
}

/// The set a Deployment would create for `image`, at `revision`, with (spec, available) replicas.
fn rs_for(d: &Deployment, image: &str, revision: i64, spec: i32, available: i32) -> ReplicaSet {
    let mut with_image = d.clone();
    with_image.spec.as_mut().unwrap().template.spec.as_mut().unwrap().containers[0].image = Some(image.into());
    with_image.spec.as_mut().unwrap().paused = None;
    let plan = reconcile(&with_image, &[], NOW);
    let Action::Create(rs) = &plan.actions[0] else { panic!("expected a create: {plan:?}") };
    let mut rs = (**rs).clone();
    rs.metadata.annotations = Some([(REVISION.to_string(), revision.to_string())].into());
    rs.spec.as_mut().unwrap().replicas = Some(spec);
    rs.status = Some(k8s_openapi::api::apps::v1::ReplicaSetStatus { replicas: spec, ready_replicas: Some(available), available_replicas: Some(available), ..Default::default() });
    rs
}

fn scales(plan: &Plan) -> Vec<(String, i32)> {
    plan.actions.iter().filter_map(|a| match a { Action::Scale { name, replicas, .. } => Some((name.clone(), *replicas)), _ => None }).collect()
}

#[test]
fn first_rollout_creates_a_set_with_all_replicas_and_revision_1() {
    let d = deployment(4, "app:1", json!({}));
    let plan = reconcile(&d, &[], NOW);
    let Action::Create(rs) = &plan.actions[0] else { panic!() };
    let hash = template_hash(&d.spec.as_ref().unwrap().template, 0);
    assert_eq!(rs.metadata.name.as_deref(), Some(format!("web-{hash}").as_str()));
    assert_eq!(rs.spec.as_ref().unwrap().replicas, Some(4));
    assert_eq!(rs.spec.as_ref().unwrap().selector.match_labels.as_ref().unwrap()[HASH_LABEL], hash);
    assert_eq!(rs.spec.as_ref().unwrap().template.as_ref().unwrap().metadata.as_ref().unwrap().labels.as_ref().unwrap()[HASH_LABEL], hash);
    assert_eq!(plan.revision.as_deref(), Some("1"));
    let owner = &rs.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.uid.as_str(), owner.controller), ("d-uid", Some(true)));
}

#[test]
fn hashes_are_stable_and_differ_by_template_and_collisions() {
    let d = deployment(1, "app:1", json!({}));
    let t = &d.spec.as_ref().unwrap().template;
    assert_eq!(template_hash(t, 0), template_hash(t, 0));
    assert_ne!(template_hash(t, 0), template_hash(t, 1));
    let other = deployment(1, "app:2", json!({}));
    assert_ne!(template_hash(t, 0), template_hash(&other.spec.unwrap().template, 0));
}

#[test]
fn surge_and_unavailable_round_as_kubernetes_does() {
    assert_eq!(surge_and_unavailable(&deployment(10, "x", json!({}))), (3, 2), "25% of 10: surge up, unavailable down");
    assert_eq!(surge_and_unavailable(&deployment(1, "x", json!({}))), (1, 0));
    let zero = json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}}}});
    assert_eq!(surge_and_unavailable(&deployment(4, "x", zero)), (0, 1), "never both zero");
    let pct = json!({"spec": {"strategy": {"rollingUpdate": {"maxSurge": "50%", "maxUnavailable": "50%"}}}});
    assert_eq!(surge_and_unavailable(&deployment(3, "x", pct)), (2, 1));
}

#[test]
fn rolling_update_steps_within_surge_and_unavailability() {
    // 4 replicas, surge 1, unavailable 1. Old set fully available.
    let d = deployment(4, "app:2", json!({}));
    let old = rs_for(&d, "app:1", 1, 4, 4);
    // Step 1: new set created with the surge (4 + 1 - 4 = 1), revision 2.
    let plan = reconcile(&d, &[&old], NOW);
    let Action::Create(new) = &plan.actions[0] else { panic!("{plan:?}") };
    assert_eq!(new.spec.as_ref().unwrap().replicas, Some(1));
    assert_eq!(plan.revision.as_deref(), Some("2"));
    // Step 2: new set at 1 (not yet available): the old one may lose 1 (minAvailable 3).
    let new = rs_for(&d, "app:2", 2, 1, 0);
    let plan = reconcile(&d, &[&old, &new], NOW);
    assert_eq!(scales(&plan), vec![(old.metadata.name.clone().unwrap(), 3)]);
    // Step 3: old at 3, new at 1 available: new grows to 2 (total 5 = 4 + surge); the old waits.
    let old3 = rs_for(&d, "app:1", 1, 3, 3);
    let new1 = rs_for(&d, "app:2", 2, 1, 1);
    assert_eq!(scales(&reconcile(&d, &[&old3, &new1], NOW)), vec![(new1.metadata.name.clone().unwrap(), 2)]);
    // Step 4: new at 2 (both available), old at 3: total 5, 5 available > 3: old may drop 2.
    let new2 = rs_for(&d, "app:2", 2, 2, 2);
    assert_eq!(scales(&reconcile(&d, &[&old3, &new2], NOW)), vec![(old3.metadata.name.clone().unwrap(), 1)]);
    // Done: new at 4 available, old at 0: complete, Available and NewReplicaSetAvailable.
    let new4 = rs_for(&d, "app:2", 2, 4, 4);
    let old0 = rs_for(&d, "app:1", 1, 0, 0);
    let plan = reconcile(&d, &[&old0, &new4], NOW);
    assert!(plan.actions.is_empty(), "{plan:?}");
    let conds = plan.status.conditions.unwrap();
    assert_eq!(conds[0].reason.as_deref(), Some("MinimumReplicasAvailable"));
    assert_eq!(conds[1].reason.as_deref(), Some("NewReplicaSetAvailable"));
    assert_eq!(plan.status.updated_replicas, Some(4));
    assert_eq!(plan.status.observed_generation, Some(3));
}

#[test]
fn unavailable_old_pods_are_removed_first() {
    let d = deployment(4, "app:2", json!({}));
    // Old set of 4 with only 2 available; new set of 1, unavailable.
    let old = rs_for(&d, "app:1", 1, 4, 2);
    let new = rs_for(&d, "app:2", 2, 1, 0);
    // allPods 5 - minAvailable 3 - newUnavailable 1 = 1: one unhealthy old pod goes.
    assert_eq!(scales(&reconcile(&d, &[&old, &new], NOW)), vec![(old.metadata.name.clone().unwrap(), 3)]);
}

#[test]
fn recreate_scales_old_to_zero_before_the_new_set_grows() {
    let d = deployment(3, "app:2", json!({"spec": {"strategy": {"type": "Recreate"}}}));
    let old = rs_for(&d, "app:1", 1, 3, 3);
    let plan = reconcile(&d, &[&old], NOW);
    let Action::Create(new) = &plan.actions[0] else { panic!() };
    assert_eq!(new.spec.as_ref().unwrap().replicas, Some(0));
    let new0 = rs_for(&d, "app:2", 2, 0, 0);
    assert_eq!(scales(&reconcile(&d, &[&old, &new0], NOW)), vec![(old.metadata.name.clone().unwrap(), 0)]);
    let old_gone = rs_for(&d, "app:1", 1, 0, 0);
    assert_eq!(scales(&reconcile(&d, &[&old_gone, &new0], NOW)), vec![(new0.metadata.name.clone().unwrap(), 3)]);
}

#[test]
fn undo_revives_an_old_set_with_a_new_revision() {
    // The template is back to app:1, whose set is revision 1; app:2 is revision 2.
    let d = deployment(2, "app:1", json!({}));
    let v1 = rs_for(&d, "app:1", 1, 0, 0);
    let v2 = rs_for(&d, "app:2", 2, 2, 2);
    let plan = reconcile(&d, &[&v1, &v2], NOW);
    let Action::Scale { name, replicas, revision, .. } = &plan.actions[0] else { panic!("{plan:?}") };
    assert_eq!((name.as_str(), *replicas, revision.as_deref()), (v1.metadata.name.as_deref().unwrap(), 1, Some("3")));
    assert_eq!(plan.revision.as_deref(), Some("3"));
}

#[test]
fn history_beyond_the_limit_is_deleted_oldest_first() {
    let d = deployment(1, "app:9", json!({"spec": {"revisionHistoryLimit": 2}}));
    let olds: Vec<ReplicaSet> = (1..=4).map(|r| rs_for(&d, &format!("app:{r}"), r, 0, 0)).collect();
    let current = rs_for(&d, "app:9", 5, 1, 1);
    let mut all: Vec<&ReplicaSet> = olds.iter().collect();
    all.push(&current);
    let deleted: Vec<String> = reconcile(&d, &all, NOW).actions.iter().filter_map(|a| match a { Action::Delete(n) => Some(n.clone()), _ => None }).collect();
    assert_eq!(deleted, vec![olds[0].metadata.name.clone().unwrap(), olds[1].metadata.name.clone().unwrap()]);
}

#[test]
fn paused_deployments_do_not_roll_and_say_so() {
    let d = deployment(2, "app:2", json!({"spec": {"paused": true}}));
    let old = rs_for(&d, "app:1", 1, 2, 2);
    let plan = reconcile(&d, &[&old], NOW);
    assert!(plan.actions.is_empty());
    assert_eq!(plan.status.conditions.unwrap()[1].reason.as_deref(), Some("DeploymentPaused"));
}

#[test]
fn progress_deadline_exceeded_after_no_progress() {
    let mut d = deployment(2, "app:2", json!({"spec": {"progressDeadlineSeconds": 60}}));
    let old = rs_for(&d, "app:1", 1, 1, 1);
    let new = rs_for(&d, "app:2", 2, 2, 0);
    let plan = reconcile(&d, &[&old, &new], "2026-01-01T00:00:00Z");
    d.status = Some(plan.status.clone());
    let later = reconcile(&d, &[&old, &new], "2026-01-01T00:02:00Z");
    assert_eq!(later.status.conditions.unwrap()[1].reason.as_deref(), Some("ProgressDeadlineExceeded"));
}

fn sized_for(mut rs: ReplicaSet, desired: i32, max: i32) -> ReplicaSet {
    let a = rs.metadata.annotations.get_or_insert_with(Default::default);
    a.insert(DESIRED_REPLICAS.into(), desired.to_string());
    a.insert(MAX_REPLICAS.into(), max.to_string());
    rs
}

#[test]
fn scaling_in_mid_rollout_grows_every_active_set_in_proportion() {
    // 10 replicas (surge 3) rolling from app:1 to app:2: 8 old, 5 new; then scaled to 20.
    let d10 = deployment(10, "app:2", json!({}));
    let old = sized_for(rs_for(&d10, "app:1", 1, 8, 8), 10, 13);
    let new = sized_for(rs_for(&d10, "app:2", 2, 5, 0), 10, 13);
    let d20 = deployment(20, "app:2", json!({}));
    let plan = reconcile(&d20, &[&old, &new], NOW);
    let mut got = scales(&plan);
    got.sort();
    let mut want = vec![(old.metadata.name.clone().unwrap(), 15), (new.metadata.name.clone().unwrap(), 10)];
    want.sort();
    assert_eq!(got, want, "25 = 20 + surge 5, shared 15/10 as 8/5 were of 13");
    assert!(!plan.actions.iter().any(|a| matches!(a, Action::Create(_))));
}

#[test]
fn scaling_down_in_mid_rollout_shrinks_in_proportion_and_a_settled_rollout_is_not_a_scaling_event() {
    let d10 = deployment(10, "app:2", json!({}));
    let old = sized_for(rs_for(&d10, "app:1", 1, 8, 8), 10, 13);
    let new = sized_for(rs_for(&d10, "app:2", 2, 5, 0), 10, 13);
    let d5 = deployment(5, "app:2", json!({}));
    let plan = reconcile(&d5, &[&old, &new], NOW);
    let total: i32 = scales(&plan).iter().map(|(_, r)| r).sum();
    assert_eq!(total, 7, "5 + surge 2 in all");
    assert!(scales(&plan).iter().all(|(_, r)| *r > 0), "both sets keep a share: {:?}", scales(&plan));
    // Annotations matching the Deployment: the ordinary rollout runs instead.
    assert!(scale_proportionally(&d10, &[&old, &new], 10, 3).is_empty());
    // One active set: never proportional.
    let only = sized_for(rs_for(&d10, "app:2", 2, 10, 10), 10, 13);
    assert!(scale_proportionally(&d5, &[&only], 5, 2).is_empty());
}

#[test]
fn a_create_refused_as_existing_is_ours_only_with_our_owner_and_template() {
    // The set of the current template, made by an earlier holder the cache has not seen:
    // it is the current set, not a hash collision (which would make a second set of the
    // same revision and template).
    let d = deployment(3, "app:2", json!({}));
    let ours = rs_for(&d, "app:2", 2, 1, 0);
    assert!(is_current_set_of(&d, &ours));
    let older_template = rs_for(&d, "app:1", 1, 0, 0);
    assert!(!is_current_set_of(&d, &older_template));
    let mut someone_elses = ours.clone();
    someone_elses.metadata.owner_references.as_mut().unwrap()[0].uid = "other-uid".into();
    assert!(!is_current_set_of(&d, &someone_elses));
    let mut orphan = ours;
    orphan.metadata.owner_references = None;
    assert!(!is_current_set_of(&d, &orphan));
}
