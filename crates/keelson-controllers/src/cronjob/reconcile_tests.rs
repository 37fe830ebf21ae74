use super::*;
use serde_json::{json, Value};

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn cronjob(spec: Value, status: Value) -> CronJob {
    let mut c = json!({
        "metadata": {"name": "tick", "namespace": "d", "uid": "cj-uid", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"schedule": "*/1 * * * *", "concurrencyPolicy": "Allow", "suspend": false, "successfulJobsHistoryLimit": 3, "failedJobsHistoryLimit": 1,
                 "jobTemplate": {"metadata": {"labels": {"app": "tick"}}, "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}}},
        "status": status,
    });
    for (k, v) in spec.as_object().unwrap() {
        c["spec"][k.as_str()] = v.clone();
    }
    serde_json::from_value(c).unwrap()
}

/// A Job of the CronJob scheduled at `t`: running, or finished as `how` (started at `t`).
fn job(t: &str, how: Option<&str>) -> Job {
    let name = job_name("tick", ts(t));
    let mut j = json!({"metadata": {"name": name, "namespace": "d", "uid": format!("uid-{name}"),
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": "tick", "uid": "cj-uid", "controller": true}]},
        "spec": {"template": {"spec": {"containers": []}}}, "status": {"startTime": t}});
    if let Some(how) = how {
        j["status"]["conditions"] = json!([{"type": how, "status": "True"}]);
        if how == "Complete" {
            j["status"]["completionTime"] = json!(t);
        }
    }
    serde_json::from_value(j).unwrap()
}

fn active(names: &[&Job]) -> Value {
    json!(names.iter().map(|j| json!({"kind": "Job", "name": j.metadata.name, "uid": j.metadata.uid})).collect::<Vec<_>>())
}

fn reasons(plan: &Plan) -> Vec<&'static str> {
    plan.events.iter().map(|e| e.reason).collect()
}

#[test]
fn the_first_run_is_created_at_the_first_schedule_time_with_its_name_and_annotation() {
    let cj = cronjob(json!({}), json!({}));
    let plan = reconcile(&cj, &[], ts("2026-01-01T00:00:30Z"));
    assert!(plan.create.is_none(), "nothing is due before 00:01");
    let wait = plan.requeue.unwrap();
    assert!(wait > Duration::from_secs(29) && wait < Duration::from_secs(31), "{wait:?}");
    let plan = reconcile(&cj, &[], ts("2026-01-01T00:01:02Z"));
    let job = plan.create.expect("due");
    let minutes = ts("2026-01-01T00:01:00Z").as_second() / 60;
    assert_eq!(job.metadata.name, Some(format!("tick-{minutes}")));
    assert_eq!(job.metadata.annotations.as_ref().unwrap()[SCHEDULED_TIMESTAMP], "2026-01-01T00:01:00+00:00");
    assert_eq!(job.metadata.labels.as_ref().unwrap()["app"], "tick");
    assert_eq!(job.metadata.owner_references.as_ref().unwrap()[0].kind, "CronJob");
    assert_eq!(plan.status.last_schedule_time, Some(Time(ts("2026-01-01T00:01:00Z"))));
}

#[test]
fn only_the_most_recent_missed_run_starts() {
    let cj = cronjob(json!({}), json!({"lastScheduleTime": "2026-01-01T00:01:00Z"}));
    let plan = reconcile(&cj, &[], ts("2026-01-01T00:05:10Z"));
    assert_eq!(plan.create.clone().unwrap().metadata.name, Some(job_name("tick", ts("2026-01-01T00:05:00Z"))));
    assert!(!reasons(&plan).contains(&"TooManyMissedTimes"));
    let plan = reconcile(&cj, &[], ts("2026-01-02T00:05:10Z"));
    assert!(reasons(&plan).contains(&"TooManyMissedTimes"));
    assert_eq!(plan.create.unwrap().metadata.name, Some(job_name("tick", ts("2026-01-02T00:05:00Z"))), "it still starts the latest");
}

#[test]
fn starting_deadline_clips_missed_runs() {
    let cj = cronjob(json!({"schedule": "0 * * * *", "startingDeadlineSeconds": 60}), json!({"lastScheduleTime": "2026-01-01T00:00:00Z"}));
    let plan = reconcile(&cj, &[], ts("2026-01-01T01:00:30Z"));
    assert!(plan.create.is_some(), "30 s late is within the deadline");
    let plan = reconcile(&cj, &[], ts("2026-01-01T01:02:00Z"));
    assert!(plan.create.is_none(), "2 minutes late is not");
    assert_eq!(plan.status.last_schedule_time, Some(Time(ts("2026-01-01T00:00:00Z"))));
}

#[test]
fn concurrency_policies() {
    let running = job("2026-01-01T00:01:00Z", None);
    let status = json!({"lastScheduleTime": "2026-01-01T00:01:00Z", "active": active(&[&running])});
    let now = ts("2026-01-01T00:02:01Z");
    let allow = reconcile(&cronjob(json!({}), status.clone()), &[&running], now);
    assert!(allow.create.is_some() && allow.replace.is_empty());
    let forbid = reconcile(&cronjob(json!({"concurrencyPolicy": "Forbid"}), status.clone()), &[&running], now);
    assert!(forbid.create.is_none());
    assert_eq!(reasons(&forbid), vec!["JobAlreadyActive"]);
    assert_eq!(forbid.status.last_schedule_time, Some(Time(ts("2026-01-01T00:01:00Z"))), "the run stays due");
    let replace = reconcile(&cronjob(json!({"concurrencyPolicy": "Replace"}), status), &[&running], now);
    assert_eq!(replace.replace, vec![running.metadata.name.clone().unwrap()]);
    assert!(replace.create.is_some());
}

#[test]
fn finished_jobs_leave_active_and_success_is_recorded() {
    let done = job("2026-01-01T00:01:00Z", Some("Complete"));
    let failed = job("2026-01-01T00:02:00Z", Some("Failed"));
    let running = job("2026-01-01T00:03:00Z", None);
    let status = json!({"lastScheduleTime": "2026-01-01T00:03:00Z", "active": active(&[&done, &failed])});
    let plan = reconcile(&cronjob(json!({}), status), &[&done, &failed, &running], ts("2026-01-01T00:03:30Z"));
    let names: Vec<_> = plan.status.active.clone().unwrap().into_iter().filter_map(|r| r.name).collect();
    assert_eq!(names, vec![running.metadata.name.clone().unwrap()], "the running job is (back) in active");
    assert_eq!(reasons(&plan), vec!["SawCompletedJob", "SawCompletedJob"]);
    assert_eq!(plan.events[0].message, format!("Saw completed job: {}, condition: Complete", done.metadata.name.clone().unwrap()));
    assert_eq!(plan.status.last_successful_time, Some(Time(ts("2026-01-01T00:01:00Z"))));
}

#[test]
fn history_limits_delete_the_oldest_finished_jobs() {
    let ok: Vec<Job> = (1..=5).map(|m| job(&format!("2026-01-01T00:0{m}:00Z"), Some("Complete"))).collect();
    let bad: Vec<Job> = (6..=7).map(|m| job(&format!("2026-01-01T00:0{m}:00Z"), Some("Failed"))).collect();
    let all: Vec<&Job> = ok.iter().chain(bad.iter()).collect();
    let plan = reconcile(&cronjob(json!({}), json!({"lastScheduleTime": "2026-01-01T00:07:00Z"})), &all, ts("2026-01-01T00:07:30Z"));
    let expected: Vec<String> = [&ok[0], &ok[1], &bad[0]].iter().map(|j| j.metadata.name.clone().unwrap()).collect();
    assert_eq!(plan.delete_history, expected);
}

#[test]
fn suspended_and_broken_cronjobs_start_nothing() {
    let now = ts("2026-01-01T00:05:00Z");
    assert!(reconcile(&cronjob(json!({"suspend": true}), json!({})), &[], now).create.is_none());
    let bad = reconcile(&cronjob(json!({"schedule": "every minute"}), json!({})), &[], now);
    assert!(bad.create.is_none());
    assert_eq!(reasons(&bad), vec!["UnparseableSchedule"]);
    let tz = reconcile(&cronjob(json!({"timeZone": "Mars/Olympus"}), json!({})), &[], now);
    assert_eq!(reasons(&tz), vec!["UnknownTimeZone"]);
}

#[test]
fn a_run_already_started_is_recorded_not_repeated() {
    let started = job("2026-01-01T00:05:00Z", None);
    let plan = reconcile(&cronjob(json!({}), json!({"lastScheduleTime": "2026-01-01T00:04:00Z"})), &[&started], ts("2026-01-01T00:05:20Z"));
    assert!(plan.create.is_none());
    assert_eq!(plan.status.last_schedule_time, Some(Time(ts("2026-01-01T00:05:00Z"))));
}

#[test]
fn schedules_follow_the_time_zone() {
    let cj = cronjob(json!({"schedule": "0 9 * * *", "timeZone": "Europe/Berlin"}), json!({}));
    let plan = reconcile(&cj, &[], ts("2026-01-01T08:00:30Z"));
    let job = plan.create.expect("09:00 in Berlin is 08:00 UTC in winter");
    assert_eq!(job.metadata.annotations.unwrap()[SCHEDULED_TIMESTAMP], "2026-01-01T09:00:00+01:00");
}
