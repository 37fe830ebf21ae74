//! backoffLimitPerIndex and maxFailedIndexes (KEP-3850), and the FailIndex action.

use super::tests::{at, conditions, indexed, job, pod};
use super::*;
use serde_json::{json, Value};

/// Long after every backoff of these tests.
fn later() -> jiff::Timestamp {
    at("2026-01-01T01:00:00Z")
}

/// An Indexed Job of 3 completions, all at once, with `limit` failures allowed per index.
fn per_index(limit: i32, extra: Value, status: Value) -> Job {
    let mut spec = json!({"completionMode": "Indexed", "completions": 3, "parallelism": 3, "backoffLimitPerIndex": limit, "backoffLimit": i32::MAX});
    for (k, v) in extra.as_object().unwrap() {
        spec[k.as_str()] = v.clone();
    }
    job(spec, status)
}

/// A pod of index `i` that failed with `exit` (finished 00:09:55), after `count` earlier
/// failures of its index; it still holds the tracking finalizer.
fn failed(name: &str, i: i32, count: i32, exit: i32) -> Pod {
    let mut p = indexed(pod(name, "Failed", false), i);
    p.metadata.annotations.as_mut().unwrap().insert(INDEX_FAILURE_COUNT.into(), count.to_string());
    p.status.as_mut().unwrap().container_statuses.as_mut().unwrap()[0].state.as_mut().unwrap().terminated.as_mut().unwrap().exit_code = exit;
    p
}

fn running(name: &str, i: i32) -> Pod {
    indexed(pod(name, "Running", false), i)
}

fn uncounted_failed(plan: &Plan) -> Vec<String> {
    plan.status.uncounted_terminated_pods.clone().unwrap_or_default().failed.unwrap_or_default()
}

#[test]
fn an_index_is_retried_with_its_count_until_past_its_limit_then_failed_for_good() {
    let rules = json!({"podFailurePolicy": {"rules": [
        {"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [3]}},
        {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [7]}}]}});
    // (case, limit, policy, earlier failures of index 1, exit code, index failed?, counts of the replacement)
    type Case = (&'static str, i32, Value, i32, i32, bool, (i32, i32));
    let cases: [Case; 6] = [
        ("first failure within the limit", 1, json!({}), 0, 1, false, (1, 0)),
        ("second failure, past a limit of 1", 1, json!({}), 1, 1, true, (0, 0)),
        ("a limit of 0 fails the index at once", 0, json!({}), 0, 1, true, (0, 0)),
        ("FailIndex fails it whatever the limit", 5, rules.clone(), 0, 3, true, (0, 0)),
        ("a counted failure under the policy", 5, rules.clone(), 2, 1, false, (3, 0)),
        ("an ignored failure does not count against the limit", 0, rules.clone(), 0, 7, false, (0, 1)),
    ];
    for (case, limit, policy, count, exit, index_failed, counts) in cases {
        let j = per_index(limit, policy, json!({}));
        let (p0, p2) = (running("pi-0", 0), running("pi-2", 2));
        let f = failed("pi-1", 1, count, exit);
        let plan = reconcile(&j, &[&p0, &f, &p2], later());
        if index_failed {
            assert_eq!(plan.status.failed_indexes.as_deref(), Some("1"), "{case}");
            assert!(plan.create.is_empty(), "{case}: a failed index is not retried");
            assert_eq!(plan.remove_finalizers, vec!["pi-1"], "{case}");
            assert_eq!(uncounted_failed(&plan), vec!["uid-pi-1"], "{case}");
        } else {
            assert_eq!(plan.status.failed_indexes.as_deref(), Some(""), "{case}");
            assert_eq!(plan.create, vec![Some(1)], "{case}: the index is retried");
            assert_eq!(plan.index_failures.get(&1), Some(&counts), "{case}");
            assert!(plan.remove_finalizers.is_empty(), "{case}: the failed pod is kept until its replacement exists");
            assert!(uncounted_failed(&plan).is_empty(), "{case}: and counted then");
            let replacement = pod_for(&j, Some(1), plan.index_failures[&1]);
            let annotations = replacement.metadata.annotations.unwrap();
            assert_eq!(annotations[INDEX_FAILURE_COUNT], counts.0.to_string(), "{case}");
            assert_eq!(annotations.get(INDEX_IGNORED_FAILURE_COUNT).cloned(), (counts.1 > 0).then(|| counts.1.to_string()), "{case}");
        }
    }
}

#[test]
fn a_held_failed_pod_is_counted_once_its_replacement_runs() {
    let j = per_index(2, json!({}), json!({}));
    let f = failed("pi-1", 1, 0, 1);
    let retry = running("pi-1-retry", 1);
    let (p0, p2) = (running("pi-0", 0), running("pi-2", 2));
    let plan = reconcile(&j, &[&p0, &f, &retry, &p2], later());
    assert_eq!(plan.remove_finalizers, vec!["pi-1"]);
    assert_eq!(uncounted_failed(&plan), vec!["uid-pi-1"]);
    assert!(plan.create.is_empty() && plan.delete.is_empty(), "{plan:?}");
    // Of several failed pods of one index, only the last is held; the others go.
    let older = failed("pi-1-a", 1, 0, 1);
    let last = failed("pi-1-b", 1, 1, 1);
    let plan = reconcile(&j, &[&p0, &older, &last, &p2], later());
    assert_eq!(plan.remove_finalizers, vec!["pi-1-a"]);
    assert_eq!(plan.index_failures.get(&1), Some(&(2, 0)), "the replacement counts on from the last");
}

#[test]
fn each_index_waits_out_its_own_backoff() {
    let j = per_index(6, json!({}), json!({}));
    // Finished 00:09:55. After 0 earlier failures the wait is 10 s, after 1 it is 20 s.
    // (case, earlier failures, now, created, requeue within)
    let cases = [
        ("first retry, 5 s in", 0, "2026-01-01T00:10:00Z", false, Some((4, 6))),
        ("first retry, 11 s in", 0, "2026-01-01T00:10:06Z", true, None),
        ("second retry, 11 s in", 1, "2026-01-01T00:10:06Z", false, Some((8, 10))),
        ("second retry, 21 s in", 1, "2026-01-01T00:10:16Z", true, None),
    ];
    for (case, count, t, created, requeue) in cases {
        let f = failed("pi-1", 1, count, 1);
        let p0 = running("pi-0", 0);
        let plan = reconcile(&j, &[&p0, &f], at(t));
        let mut want = vec![Some(2)];
        if created {
            want.insert(0, Some(1));
        }
        assert_eq!(plan.create, want, "{case}: index 2 never failed and starts at once");
        if let Some((lo, hi)) = requeue {
            let wait = plan.requeue.unwrap_or_default();
            assert!(wait > Duration::from_secs(lo) && wait < Duration::from_secs(hi), "{case}: {wait:?}");
        }
    }
}

#[test]
fn failed_indexes_fail_the_job_past_max_failed_indexes_or_when_all_indexes_are_done() {
    // (case, maxFailedIndexes, failedIndexes so far, completedIndexes, FailureTarget reason)
    let cases = [
        ("one failed index beyond a maximum of 0", json!(0), "1", "", Some("MaxFailedIndexesExceeded")),
        ("two beyond a maximum of 1", json!(1), "0,1", "", Some("MaxFailedIndexesExceeded")),
        ("within the maximum, others still to run", json!(1), "1", "", None),
        ("no maximum, others still to run", Value::Null, "1", "0", None),
        ("no maximum, every other index succeeded", Value::Null, "1", "0,2", Some("FailedIndexes")),
        ("within the maximum, every other index succeeded", json!(2), "1", "0,2", Some("FailedIndexes")),
        ("nothing failed, all succeeded", json!(0), "", "0-2", None),
    ];
    for (case, max, failed_so_far, completed, reason) in cases {
        let mut extra = json!({});
        if !max.is_null() {
            extra["maxFailedIndexes"] = max;
        }
        let j = per_index(1, extra, json!({"failedIndexes": failed_so_far, "completedIndexes": completed}));
        let plan = reconcile(&j, &[], later());
        let target = conditions(&plan).into_iter().find(|c| c.0 == "FailureTarget").map(|c| c.2);
        assert_eq!(target.as_deref(), reason, "{case}");
        assert_eq!(plan.status.failed_indexes.as_deref(), Some(failed_so_far), "{case}: failed indexes are kept");
        if reason.is_some() {
            assert!(plan.create.is_empty(), "{case}: nothing more starts");
        }
    }
}

#[test]
fn the_job_fails_with_the_failed_indexes_reason_once_nothing_runs() {
    // (failedIndexes, completedIndexes, maxFailedIndexes, reason, message)
    let cases = [
        ("0,1", "", json!({"maxFailedIndexes": 1}), "MaxFailedIndexesExceeded", MSG_MAX_FAILED_INDEXES),
        ("1", "0,2", json!({}), "FailedIndexes", MSG_FAILED_INDEXES),
    ];
    for (failed_so_far, completed, extra, reason, message) in cases {
        let j = per_index(0, extra.clone(), json!({"failedIndexes": failed_so_far, "completedIndexes": completed}));
        let p2 = running("pi-2", 2);
        let first = reconcile(&j, &[&p2], later());
        assert!(conditions(&first).contains(&("FailureTarget".into(), "True".into(), reason.into())), "{reason}");
        if completed.is_empty() {
            assert_eq!(first.delete, vec!["pi-2"], "{reason}: what still runs is stopped");
        }
        assert!(!conditions(&first).iter().any(|c| c.0 == "Failed"), "{reason}: not before nothing runs");
        let j = per_index(0, extra, serde_json::to_value(&first.status).unwrap());
        let plan = reconcile(&j, &[], later());
        assert!(conditions(&plan).contains(&("Failed".into(), "True".into(), reason.into())), "{reason}");
        assert_eq!(plan.events, vec![JobEvent { warning: true, reason: if reason == "FailedIndexes" { "FailedIndexes" } else { "MaxFailedIndexesExceeded" }, message: message.into() }]);
        let failed = plan.status.conditions.iter().flatten().find(|c| c.type_ == "Failed").unwrap();
        assert_eq!(failed.message.as_deref(), Some(message));
    }
}

#[test]
fn a_finishing_job_counts_the_failed_pods_it_held() {
    let j = per_index(3, json!({"maxFailedIndexes": 0}), json!({"failedIndexes": "0"}));
    let held = failed("pi-1", 1, 0, 1);
    let plan = reconcile(&j, &[&held], later());
    assert!(conditions(&plan).iter().any(|c| c.2 == "MaxFailedIndexesExceeded"));
    assert_eq!(plan.remove_finalizers, vec!["pi-1"]);
    assert_eq!(uncounted_failed(&plan), vec!["uid-pi-1"]);
    assert!(plan.create.is_empty());
}

#[test]
fn without_a_per_index_limit_nothing_changes() {
    let j = job(json!({"completionMode": "Indexed", "completions": 3, "parallelism": 3}), json!({}));
    let f = failed("pi-1", 1, 9, 1);
    let plan = reconcile(&j, &[&f], later());
    assert_eq!(plan.status.failed_indexes, None);
    assert_eq!(plan.remove_finalizers, vec!["pi-1"], "counted at once, against backoffLimit");
    assert!(plan.index_failures.is_empty());
    assert!(!pod_for(&j, Some(1), (4, 0)).metadata.annotations.unwrap().contains_key(INDEX_FAILURE_COUNT));
    assert_eq!(pod_for(&per_index(1, json!({}), json!({})), Some(0), (0, 0)).metadata.annotations.unwrap()[INDEX_FAILURE_COUNT], "0");
}
