//! What a CronJob needs done, as a pure function of the CronJob, the Jobs it owns and the
//! time, following Kubernetes 1.33's CronJob controller (v2):
//! - finished Jobs leave `status.active` (`SawCompletedJob`), a Complete one sets
//!   `lastSuccessfulTime`; running Jobs it owns are (back) in `active`;
//! - the most recent schedule time in (lastScheduleTime or creation, now], clipped by
//!   `startingDeadlineSeconds`, is the one to start — only that one, however many were
//!   missed (more than 100 also raises `TooManyMissedTimes`);
//! - concurrencyPolicy Forbid skips it while a Job runs, Replace deletes the running ones;
//! - the Job is named `<cronjob>-<scheduled time in minutes since the epoch>`, so a
//!   repeated create is refused as existing, never doubled;
//! - finished Jobs beyond successfulJobsHistoryLimit / failedJobsHistoryLimit are deleted,
//!   oldest first.

use std::time::Duration;

use k8s_openapi::api::batch::v1::{CronJob, CronJobStatus, Job, JobSpec};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use jiff::tz::TimeZone;
use jiff::Timestamp;

use super::schedule::Schedule;
use crate::pods::{controller_of, controller_ref};

/// The annotation with the time a Job was scheduled for (RFC 3339 in the CronJob's zone).
pub const SCHEDULED_TIMESTAMP: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";
/// More missed start times than this raise `TooManyMissedTimes`.
pub const MISSED_LIMIT: usize = 100;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CronEvent {
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Running Jobs to delete first (concurrencyPolicy Replace).
    pub replace: Vec<String>,
    /// The Job to create, if one is due.
    pub create: Option<Job>,
    /// Finished Jobs beyond the history limits.
    pub delete_history: Vec<String>,
    /// The status to write (after the create succeeds: it records lastScheduleTime).
    pub status: CronJobStatus,
    pub events: Vec<CronEvent>,
    /// When to look again: the next schedule time.
    pub requeue: Option<Duration>,
}

fn finished(job: &Job) -> Option<&'static str> {
    let conds = job.status.as_ref()?.conditions.as_ref()?;
    conds.iter().filter(|c| c.status == "True").find_map(|c| match c.type_.as_str() {
        "Complete" => Some("Complete"),
        "Failed" => Some("Failed"),
        _ => None,
    })
}

fn job_ref(job: &Job) -> ObjectReference {
    ObjectReference {
        api_version: Some("batch/v1".into()),
        kind: Some("Job".into()),
        name: job.metadata.name.clone(),
        namespace: job.metadata.namespace.clone(),
        uid: job.metadata.uid.clone(),
        ..Default::default()
    }
}

/// The CronJob's time zone: `spec.timeZone`, else UTC (the controller manager's zone).
pub fn time_zone(cj: &CronJob) -> Result<TimeZone, String> {
    match cj.spec.as_ref().and_then(|s| s.time_zone.as_deref()) {
        None => Ok(TimeZone::UTC),
        Some(name) => TimeZone::get(name).map_err(|_| name.to_string()),
    }
}

/// The name of the Job for the run scheduled at `t`.
pub fn job_name(cronjob: &str, t: Timestamp) -> String {
    format!("{cronjob}-{}", t.as_second().div_euclid(60))
}

/// The Job `cj` starts for the run scheduled at `t`.
pub fn job_for(cj: &CronJob, t: Timestamp, tz: &TimeZone) -> Job {
    let template = cj.spec.as_ref().map(|s| s.job_template.clone()).unwrap_or_default();
    let tm = template.metadata.unwrap_or_default();
    let mut annotations = tm.annotations.unwrap_or_default();
    annotations.insert(SCHEDULED_TIMESTAMP.into(), t.to_zoned(tz.clone()).strftime("%Y-%m-%dT%H:%M:%S%:z").to_string());
    let name = cj.metadata.name.as_deref().unwrap_or("cronjob");
    Job {
        metadata: ObjectMeta {
            name: Some(job_name(name, t)),
            namespace: cj.metadata.namespace.clone(),
            labels: tm.labels,
            annotations: Some(annotations),
            owner_references: Some(vec![controller_ref("batch/v1", "CronJob", &cj.metadata)]),
            ..Default::default()
        },
        spec: Some(template.spec.unwrap_or_else(JobSpec::default)),
        status: None,
    }
}

fn until(now: Timestamp, t: Timestamp) -> Duration {
    Duration::try_from(t - now).unwrap_or(Duration::ZERO)
}

/// The sync of `cj` over `jobs` (every Job of its namespace; those it controls count).
pub fn reconcile(cj: &CronJob, jobs: &[&Job], now: Timestamp) -> Plan {
    let uid = cj.metadata.uid.clone().unwrap_or_default();
    let spec = cj.spec.clone().unwrap_or_default();
    let owned: Vec<&Job> = jobs.iter().copied().filter(|j| controller_of(&j.metadata).is_some_and(|o| o.uid == uid)).collect();
    let mut plan = Plan { status: cj.status.clone().unwrap_or_default(), ..Default::default() };

    // The active list: what runs, as the store shows it.
    let was_active: Vec<ObjectReference> = plan.status.active.clone().unwrap_or_default();
    let mut active = Vec::new();
    for job in &owned {
        let listed = was_active.iter().any(|r| r.uid == job.metadata.uid);
        match finished(job) {
            Some(how) => {
                if listed {
                    let name = job.metadata.name.clone().unwrap_or_default();
                    plan.events.push(CronEvent { warning: false, reason: "SawCompletedJob", message: format!("Saw completed job: {name}, condition: {how}") });
                }
                if how == "Complete" {
                    if let Some(t) = job.status.as_ref().and_then(|s| s.completion_time.clone()) {
                        if plan.status.last_successful_time.as_ref().is_none_or(|l| l.0 < t.0) {
                            plan.status.last_successful_time = Some(t);
                        }
                    }
                }
            }
            None if job.metadata.deletion_timestamp.is_none() => active.push(job_ref(job)),
            None => {}
        }
    }
    active.sort_by(|a, b| a.name.cmp(&b.name));
    plan.status.active = (!active.is_empty()).then_some(active.clone());

    // History: the oldest finished Jobs beyond the limits.
    for (kind, limit) in [("Complete", spec.successful_jobs_history_limit.unwrap_or(3)), ("Failed", spec.failed_jobs_history_limit.unwrap_or(1))] {
        let mut done: Vec<&Job> = owned.iter().copied().filter(|j| finished(j) == Some(kind) && j.metadata.deletion_timestamp.is_none()).collect();
        let started = |j: &Job| j.status.as_ref().and_then(|s| s.start_time.as_ref()).map(|t| t.0).or_else(|| j.metadata.creation_timestamp.as_ref().map(|t| t.0));
        done.sort_by_key(|j| (started(j), j.metadata.name.clone()));
        let excess = done.len().saturating_sub(limit.max(0) as usize);
        plan.delete_history.extend(done.iter().take(excess).map(|j| j.metadata.name.clone().unwrap_or_default()));
    }

    if cj.metadata.deletion_timestamp.is_some() {
        return plan;
    }
    let tz = match time_zone(cj) {
        Ok(tz) => tz,
        Err(name) => {
            plan.events.push(CronEvent { warning: true, reason: "UnknownTimeZone", message: format!("invalid timeZone: {name:?}: unknown time zone {name}") });
            return plan;
        }
    };
    let schedule = match Schedule::parse(&spec.schedule) {
        Ok(s) => s,
        Err(e) => {
            plan.events.push(CronEvent { warning: true, reason: "UnparseableSchedule", message: format!("unparseable schedule: {:?} : {e}", spec.schedule) });
            return plan;
        }
    };
    plan.requeue = schedule.next_after(now, &tz).map(|t| until(now, t) + Duration::from_millis(100));
    if spec.suspend == Some(true) {
        return plan;
    }

    // The most recent unmet schedule time.
    let created = cj.metadata.creation_timestamp.as_ref().map(|t| t.0).unwrap_or(now);
    let mut earliest = plan.status.last_schedule_time.as_ref().map(|t| t.0).unwrap_or(created);
    if let Some(sds) = spec.starting_deadline_seconds {
        earliest = earliest.max(now - jiff::SignedDuration::from_secs(sds));
    }
    let missed = schedule.times_between(earliest, now, &tz, MISSED_LIMIT);
    if missed.is_empty() {
        return plan;
    }
    if missed.len() > MISSED_LIMIT {
        plan.events.push(CronEvent {
            warning: true,
            reason: "TooManyMissedTimes",
            message: format!("too many missed start times: > {MISSED_LIMIT}. Set or decrease .spec.startingDeadlineSeconds or check clock skew"),
        });
    }
    // Only the most recent missed run starts.
    let Some(scheduled) = schedule.latest_at_or_before(now, &tz).filter(|t| *t > earliest) else { return plan };
    if let Some(sds) = spec.starting_deadline_seconds {
        if scheduled + jiff::SignedDuration::from_secs(sds) < now {
            plan.events.push(CronEvent { warning: true, reason: "MissSchedule", message: format!("Missed scheduled time to start a job: {}", scheduled.strftime("%Y-%m-%dT%H:%M:%SZ")) });
            return plan;
        }
    }
    let name = job_name(cj.metadata.name.as_deref().unwrap_or(""), scheduled);
    if owned.iter().any(|j| j.metadata.name.as_deref() == Some(name.as_str())) {
        // Already started (a status write was lost): record it, start nothing.
        plan.status.last_schedule_time = Some(Time(scheduled));
        return plan;
    }
    match spec.concurrency_policy.as_deref() {
        Some("Forbid") if !active.is_empty() => {
            plan.events.push(CronEvent { warning: false, reason: "JobAlreadyActive", message: "Not starting job because prior execution is running and concurrency policy is Forbid".into() });
            return plan;
        }
        Some("Replace") => plan.replace = active.iter().filter_map(|r| r.name.clone()).collect(),
        _ => {}
    }
    plan.create = Some(job_for(cj, scheduled, &tz));
    plan.status.last_schedule_time = Some(Time(scheduled));
    plan
}

#[cfg(test)]
#[path = "reconcile_tests.rs"]
mod tests;
