use super::*;
use serde_json::{json, Value};

pub(super) const NOW: &str = "2026-01-01T00:10:00Z";

pub(super) fn now() -> jiff::Timestamp {
    NOW.parse().unwrap()
}

pub(super) fn at(s: &str) -> jiff::Timestamp {
    s.parse().unwrap()
}

pub(super) fn job(spec: Value, status: Value) -> Job {
    let mut j = json!({
        "metadata": {"name": "pi", "namespace": "d", "uid": "job-uid"},
        "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 6, "completionMode": "NonIndexed", "suspend": false,
                 "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "job-uid"}},
                 "template": {"metadata": {"labels": {"batch.kubernetes.io/controller-uid": "job-uid"}}, "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}},
        "status": status,
    });
    for (k, v) in spec.as_object().unwrap() {
        j["spec"][k.as_str()] = v.clone();
    }
    serde_json::from_value(j).unwrap()
}

/// A pod of the Job: `phase`, with the tracking finalizer unless `counted`.
pub(super) fn pod(name: &str, phase: &str, counted: bool) -> Pod {
    let mut p = json!({"metadata": {"name": name, "namespace": "d", "uid": format!("uid-{name}"), "creationTimestamp": "2026-01-01T00:00:00Z",
        "labels": {"batch.kubernetes.io/controller-uid": "job-uid"},
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "pi", "uid": "job-uid", "controller": true}]},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x"}]},
        "status": {"phase": phase}});
    if !counted {
        p["metadata"]["finalizers"] = json!([TRACKING_FINALIZER]);
    }
    if phase == "Failed" || phase == "Succeeded" {
        p["status"]["containerStatuses"] = json!([{"name": "c", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": if phase == "Failed" {1} else {0}, "finishedAt": "2026-01-01T00:09:55Z"}}}]);
    }
    serde_json::from_value(p).unwrap()
}

pub(super) fn indexed(mut p: Pod, i: i32) -> Pod {
    p.metadata.annotations = Some([(COMPLETION_INDEX.to_string(), i.to_string())].into());
    p
}

pub(super) fn conditions(plan: &Plan) -> Vec<(String, String, String)> {
    plan.status.conditions.iter().flatten().map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone().unwrap_or_default())).collect()
}

#[test]
fn starts_parallelism_pods_towards_completions_and_sets_start_time() {
    let j = job(json!({"parallelism": 2, "completions": 3}), json!({}));
    let plan = reconcile(&j, &[], now());
    assert_eq!(plan.create, vec![None, None]);
    assert_eq!(plan.status.start_time, Some(Time(now())));
    assert_eq!(plan.status.active, Some(0));
    // Two running, one succeeded: one more is wanted, not two.
    let (a, b, done) = (pod("a", "Running", false), pod("b", "Running", false), pod("c", "Succeeded", true));
    let j = job(json!({"parallelism": 2, "completions": 3}), json!({"succeeded": 1}));
    assert_eq!(reconcile(&j, &[&a, &b, &done], now()).create, Vec::<Option<i32>>::new());
    let j = job(json!({"parallelism": 2, "completions": 3}), json!({"succeeded": 2}));
    let plan = reconcile(&j, &[&a, &b], now());
    assert_eq!(plan.delete.len(), 1, "only one completion is left: one pod too many");
}

#[test]
fn finished_pods_are_counted_through_uncounted_then_their_finalizer_goes() {
    let j = job(json!({"completions": 2, "parallelism": 2}), json!({}));
    let (ok, running) = (pod("ok", "Succeeded", false), pod("run", "Running", false));
    let plan = reconcile(&j, &[&ok, &running], now());
    let unc = plan.status.uncounted_terminated_pods.clone().unwrap();
    assert_eq!(unc.succeeded, Some(vec!["uid-ok".to_string()]));
    assert_eq!(plan.status.succeeded, Some(0), "not counted until the finalizer is gone");
    assert_eq!(plan.remove_finalizers, vec!["ok"]);
    assert_eq!(plan.create, Vec::<Option<i32>>::new(), "the uncounted success already counts towards completions");
    // Next sync: the finalizer is gone, so the pod is counted.
    let j = job(json!({"completions": 2, "parallelism": 2}), json!({"uncountedTerminatedPods": {"succeeded": ["uid-ok"]}}));
    let ok = pod("ok", "Succeeded", true);
    let plan = reconcile(&j, &[&ok, &running], now());
    assert_eq!(plan.status.succeeded, Some(1));
    assert_eq!(plan.status.uncounted_terminated_pods.unwrap().succeeded, Some(vec![]));
    assert!(plan.remove_finalizers.is_empty());
    // A pod that is gone altogether is counted too.
    let plan = reconcile(&j, &[&running], now());
    assert_eq!(plan.status.succeeded, Some(1));
}

#[test]
fn success_sets_success_criteria_met_then_complete_with_completion_time() {
    let j = job(json!({"completions": 1}), json!({}));
    let ok = pod("ok", "Succeeded", false);
    let plan = reconcile(&j, &[&ok], now());
    assert_eq!(conditions(&plan), vec![("SuccessCriteriaMet".into(), "True".into(), "CompletionsReached".into())]);
    assert!(plan.status.completion_time.is_none(), "the pod is still uncounted");
    let j = job(json!({"completions": 1}), serde_json::to_value(&plan.status).unwrap());
    let ok = pod("ok", "Succeeded", true);
    let plan = reconcile(&j, &[&ok], now());
    let c = conditions(&plan);
    assert!(c.contains(&("Complete".into(), "True".into(), "CompletionsReached".into())), "{c:?}");
    assert_eq!(plan.status.succeeded, Some(1));
    assert_eq!(plan.status.completion_time, Some(Time(now())));
    assert_eq!(plan.events, vec![JobEvent { warning: false, reason: "Completed", message: "Job completed".into() }]);
    let done = job(json!({"completions": 1}), serde_json::to_value(&plan.status).unwrap());
    assert!(is_finished(&done));
    let after = reconcile(&done, &[&ok], now());
    assert!(after.create.is_empty() && after.events.is_empty() && after.status == plan.status, "a finished Job is left alone");
}

#[test]
fn failures_beyond_the_backoff_limit_fail_the_job() {
    let spec = json!({"backoffLimit": 1});
    let f1 = pod("f1", "Failed", true);
    let f2 = pod("f2", "Failed", false);
    let running = pod("r", "Running", false);
    let j = job(spec.clone(), json!({"failed": 1}));
    let plan = reconcile(&j, &[&f1, &f2, &running], now());
    assert!(conditions(&plan).contains(&("FailureTarget".into(), "True".into(), "BackoffLimitExceeded".into())));
    assert_eq!(plan.delete, vec!["r"], "what still runs is stopped");
    assert!(plan.create.is_empty());
    // Once all is counted and nothing runs: Failed, with the Warning.
    let j = job(spec, json!({"failed": 2, "conditions": [{"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded", "message": MSG_BACKOFF}]}));
    let f2 = pod("f2", "Failed", true);
    let plan = reconcile(&j, &[&f1, &f2], now());
    assert!(conditions(&plan).contains(&("Failed".into(), "True".into(), "BackoffLimitExceeded".into())));
    assert_eq!(plan.events, vec![JobEvent { warning: true, reason: "BackoffLimitExceeded", message: MSG_BACKOFF.into() }]);
    assert!(plan.status.completion_time.is_none(), "a failed Job has no completion time");
}

#[test]
fn replacements_wait_out_the_backoff() {
    assert_eq!(backoff(1), Duration::from_secs(10));
    assert_eq!(backoff(3), Duration::from_secs(40));
    assert_eq!(backoff(7), Duration::from_secs(600), "capped at 10 minutes");
    let f = pod("f", "Failed", true); // finished 00:09:55, 5 s ago
    let j = job(json!({}), json!({"failed": 1}));
    let plan = reconcile(&j, &[&f], now());
    assert!(plan.create.is_empty());
    let wait = plan.requeue.unwrap();
    assert!(wait > Duration::from_secs(4) && wait < Duration::from_secs(6), "{wait:?}");
    let plan = reconcile(&j, &[&f], at("2026-01-01T00:10:06Z"));
    assert_eq!(plan.create, vec![None]);
}

#[test]
fn deleted_pods_count_as_failed_unless_only_failed_pods_are_replaced() {
    let mut going = pod("going", "Running", false);
    going.metadata.deletion_timestamp = Some(Time(now()));
    let j = job(json!({}), json!({}));
    let plan = reconcile(&j, &[&going], now());
    assert_eq!(plan.status.uncounted_terminated_pods.unwrap().failed, Some(vec!["uid-going".to_string()]));
    assert_eq!(plan.status.terminating, Some(1));
    let j = job(json!({"podReplacementPolicy": "Failed"}), json!({}));
    let plan = reconcile(&j, &[&going], now());
    assert_eq!(plan.status.uncounted_terminated_pods.unwrap().failed, Some(vec![]));
}

#[test]
fn on_failure_restarts_count_against_the_limit() {
    let mut p = pod("p", "Running", false);
    p.status.as_mut().unwrap().container_statuses = serde_json::from_value(json!([{"name": "c", "image": "x", "imageID": "", "ready": true, "restartCount": 3}])).unwrap();
    let mut j = job(json!({"backoffLimit": 2}), json!({}));
    j.spec.as_mut().unwrap().template.spec.as_mut().unwrap().restart_policy = Some("OnFailure".into());
    assert!(conditions(&reconcile(&j, &[&p], now())).iter().any(|c| c.2 == "BackoffLimitExceeded"));
}

#[test]
fn active_deadline_fails_the_job_and_is_rechecked_in_time() {
    let j = job(json!({"activeDeadlineSeconds": 60}), json!({"startTime": "2026-01-01T00:09:30Z"}));
    let r = pod("r", "Running", false);
    let plan = reconcile(&j, &[&r], now());
    let wait = plan.requeue.unwrap();
    assert!(wait >= Duration::from_secs(30) && wait < Duration::from_secs(31), "{wait:?}");
    let plan = reconcile(&j, &[&r], at("2026-01-01T00:10:30Z"));
    assert!(conditions(&plan).contains(&("FailureTarget".into(), "True".into(), "DeadlineExceeded".into())));
    assert_eq!(plan.delete, vec!["r"]);
    let j = job(json!({"activeDeadlineSeconds": 60}), serde_json::to_value(&plan.status).unwrap());
    let plan = reconcile(&j, &[], at("2026-01-01T00:10:31Z"));
    assert!(conditions(&plan).contains(&("Failed".into(), "True".into(), "DeadlineExceeded".into())));
    assert_eq!(plan.events[0].message, MSG_DEADLINE);
}

#[test]
fn indexed_jobs_run_one_pod_per_pending_index_and_record_completed_indexes() {
    let spec = json!({"completionMode": "Indexed", "completions": 5, "parallelism": 2});
    let j = job(spec.clone(), json!({"completedIndexes": "0"}));
    let one = indexed(pod("pi-1", "Succeeded", false), 1);
    let two = indexed(pod("pi-2", "Running", false), 2);
    let dup = indexed(pod("pi-2b", "Running", false), 2);
    let plan = reconcile(&j, &[&one, &two, &dup], now());
    assert_eq!(plan.delete, vec!["pi-2b"], "a second pod of one index goes");
    assert_eq!(plan.create, vec![Some(3)], "one slot free: the lowest pending index");
    assert_eq!(plan.status.completed_indexes.as_deref(), Some("0,1"));
    assert_eq!(plan.status.succeeded, Some(2));
    assert_eq!(parse_indexes("0-2,4"), BTreeSet::from([0, 1, 2, 4]));
    assert_eq!(format_indexes(&BTreeSet::from([0, 1, 2, 4, 6, 7])), "0-2,4,6,7");
    let all = job(spec, json!({"completedIndexes": "0-4"}));
    assert!(conditions(&reconcile(&all, &[], now())).iter().any(|c| c.0 == "SuccessCriteriaMet"));
}

#[test]
fn indexed_pods_carry_their_index_and_every_pod_the_finalizer() {
    let j = job(json!({"completionMode": "Indexed", "completions": 3}), json!({}));
    let p = pod_for(&j, Some(2), (0, 0));
    assert_eq!(p.metadata.generate_name.as_deref(), Some("pi-2-"));
    assert_eq!(p.metadata.annotations.as_ref().unwrap()[COMPLETION_INDEX], "2");
    assert_eq!(p.metadata.labels.as_ref().unwrap()[COMPLETION_INDEX], "2");
    let spec = p.spec.unwrap();
    assert_eq!(spec.hostname.as_deref(), Some("pi-2"));
    let env = &spec.containers[0].env.as_ref().unwrap()[0];
    assert_eq!(env.name, COMPLETION_INDEX_ENV);
    assert_eq!(env.value_from.as_ref().unwrap().field_ref.as_ref().unwrap().field_path, "metadata.annotations['batch.kubernetes.io/job-completion-index']");
    let plain = pod_for(&job(json!({}), json!({})), None, (0, 0));
    assert_eq!(plain.metadata.generate_name.as_deref(), Some("pi-"));
    assert_eq!(plain.metadata.finalizers, Some(vec![TRACKING_FINALIZER.to_string()]));
    assert_eq!(plain.metadata.owner_references.unwrap()[0].kind, "Job");
}

#[test]
fn work_queue_jobs_finish_when_one_succeeded_and_none_run() {
    let j = job(json!({"completions": null, "parallelism": 3}), json!({}));
    assert_eq!(reconcile(&j, &[], now()).create.len(), 3);
    let ok = pod("ok", "Succeeded", true);
    let r = pod("r", "Running", false);
    let j = job(json!({"completions": null, "parallelism": 3}), json!({"succeeded": 1}));
    let plan = reconcile(&j, &[&ok, &r], now());
    assert!(plan.create.is_empty(), "after a success no new pods start");
    assert!(!conditions(&plan).iter().any(|c| c.0 == "SuccessCriteriaMet"), "one still runs");
    assert!(conditions(&reconcile(&j, &[&ok], now())).iter().any(|c| c.0 == "SuccessCriteriaMet"));
}

#[test]
fn suspend_stops_pods_and_resume_resets_start_time() {
    let r = pod("r", "Running", false);
    let j = job(json!({"suspend": true}), json!({"startTime": "2026-01-01T00:00:00Z"}));
    let plan = reconcile(&j, &[&r], now());
    assert_eq!(plan.delete, vec!["r"]);
    assert!(plan.create.is_empty());
    assert!(conditions(&plan).contains(&("Suspended".into(), "True".into(), "JobSuspended".into())));
    assert_eq!(plan.events[0].reason, "Suspended");
    let j = job(json!({"suspend": false}), serde_json::to_value(&plan.status).unwrap());
    let plan = reconcile(&j, &[], now());
    assert!(conditions(&plan).contains(&("Suspended".into(), "False".into(), "JobResumed".into())));
    assert_eq!(plan.status.start_time, Some(Time(now())));
    assert_eq!(plan.create, vec![None]);
    let created_suspended = job(json!({"suspend": true}), json!({}));
    assert!(reconcile(&created_suspended, &[], now()).status.start_time.is_none());
}

#[test]
fn pods_of_other_owners_are_ignored() {
    let mut foreign = pod("f", "Running", false);
    foreign.metadata.owner_references.as_mut().unwrap()[0].uid = "other".into();
    let j = job(json!({}), json!({}));
    let plan = reconcile(&j, &[&foreign], now());
    assert_eq!(plan.create, vec![None]);
    assert!(plan.remove_finalizers.is_empty());
}

#[test]
fn ttl_after_finished() {
    let done = json!({"conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": "2026-01-01T00:09:00Z"}]});
    let j = job(json!({"ttlSecondsAfterFinished": 100}), done.clone());
    assert_eq!(ttl_remaining(&j, now()), Some(Duration::from_secs(40)));
    assert_eq!(ttl_remaining(&j, at("2026-01-01T00:11:00Z")), Some(Duration::ZERO));
    assert_eq!(ttl_remaining(&job(json!({}), done), now()), None);
    assert_eq!(ttl_remaining(&job(json!({"ttlSecondsAfterFinished": 0}), json!({})), now()), None, "not finished");
}

#[test]
fn the_pod_failure_policy_fails_the_job_at_once_or_ignores_the_failure() {
    let spec = json!({"backoffLimit": 6, "podFailurePolicy": {"rules": [
        {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}},
        {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [7]}}]}});
    let mut fatal = pod("fatal", "Failed", false);
    fatal.status.as_mut().unwrap().container_statuses.as_mut().unwrap()[0].state.as_mut().unwrap().terminated.as_mut().unwrap().exit_code = 42;
    let plan = reconcile(&job(spec.clone(), json!({})), &[&fatal], now());
    let target = plan.status.conditions.iter().flatten().find(|c| c.type_ == "FailureTarget").unwrap();
    assert_eq!(target.reason.as_deref(), Some("PodFailurePolicy"));
    assert_eq!(target.message.as_deref(), Some("Container c for pod d/fatal failed with exit code 42 matching FailJob rule at index 0"));
    let j = job(spec.clone(), serde_json::to_value(&plan.status).unwrap());
    let counted = pod("fatal", "Failed", true);
    let plan = reconcile(&j, &[&counted], now());
    assert!(conditions(&plan).contains(&("Failed".into(), "True".into(), "PodFailurePolicy".into())));
    assert_eq!(plan.events[0].reason, "PodFailurePolicy");
    let mut benign = pod("benign", "Failed", false);
    benign.status.as_mut().unwrap().container_statuses.as_mut().unwrap()[0].state.as_mut().unwrap().terminated.as_mut().unwrap().exit_code = 7;
    let plan = reconcile(&job(spec, json!({})), &[&benign], now());
    assert_eq!(plan.status.uncounted_terminated_pods.unwrap().failed, Some(vec![]), "ignored: not a failure");
    assert_eq!(plan.remove_finalizers, vec!["benign"]);
    assert_eq!(plan.create, vec![None], "replaced at once, without backoff");
}

#[test]
fn orphans_the_selector_matches_are_adopted_and_pods_it_no_longer_matches_released() {
    let j = job(json!({"parallelism": 2, "completions": 2}), json!({}));
    let mut orphan = pod("orphan", "Running", true);
    orphan.metadata.owner_references = None;
    let mut stranger = pod("stranger", "Running", true);
    stranger.metadata.owner_references = None;
    stranger.metadata.labels = Some([("app".to_string(), "other".to_string())].into());
    let mut relabeled = pod("relabeled", "Running", false);
    relabeled.metadata.labels = Some([("batch.kubernetes.io/controller-uid".to_string(), "someone-else".to_string())].into());
    let plan = reconcile(&j, &[&orphan, &stranger, &relabeled], now());
    assert_eq!(plan.adopt, vec!["orphan"]);
    assert_eq!(plan.release, vec!["relabeled"]);
    assert_eq!(plan.status.active, Some(1), "the adopted pod runs for the Job; the released one no longer does");
    assert_eq!(plan.create, vec![None], "one more for parallelism 2");
    // A finished or deleted Job claims nothing.
    let done = job(json!({}), json!({"conditions": [{"type": "Complete", "status": "True"}]}));
    let plan = reconcile(&done, &[&orphan, &relabeled], now());
    assert!(plan.adopt.is_empty() && plan.release.is_empty(), "{plan:?}");
    assert_eq!(plan.remove_finalizers, vec!["relabeled"], "a straggler it still controls loses the finalizer");
}
