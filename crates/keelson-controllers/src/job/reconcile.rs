//! What a Job needs done, as a pure function of the Job, the pods it owns and the time,
//! following Kubernetes 1.33's Job controller:
//! - pods are created with the `batch.kubernetes.io/job-tracking` finalizer; a finished
//!   pod is first recorded in `status.uncountedTerminatedPods`, then its finalizer is
//!   removed, then (next sync) it moves into `succeeded`/`failed`, so no pod is counted
//!   twice or lost even if it is deleted;
//! - `parallelism` pods run at once towards `completions` (NonIndexed, or Indexed with
//!   one pod per completion index);
//! - failed pods (and, with podReplacementPolicy TerminatingOrFailed, deleted ones) count
//!   against `backoffLimit`, with restarts of OnFailure pods, unless the
//!   podFailurePolicy ignores them or fails the Job at once ([`super::failure_policy`]);
//!   replacements wait 10 s·2^(n−1), at most 10 minutes;
//! - success adds `SuccessCriteriaMet`, a failure `FailureTarget` (PodFailurePolicy,
//!   BackoffLimitExceeded, DeadlineExceeded); once no pod is left running or uncounted, `Complete` (with
//!   completionTime) or `Failed` follows;
//! - `suspend` deletes the running pods, sets `Suspended`, and resuming resets startTime;
//! - pods are claimed by the selector ([`crate::pods::claim`]): orphans it matches are
//!   adopted (and get the tracking finalizer), pods it no longer matches released;
//! - with `backoffLimitPerIndex` (Indexed Jobs, KEP-3850) each index counts its own
//!   failures in the `batch.kubernetes.io/job-index-failure-count` annotation of the pod
//!   that replaces a failed one (ignored failures in `…-ignored-failure-count`); a failed
//!   pod keeps its finalizer until its replacement exists, so the count is never lost;
//!   an index past its limit (or whose pod matched a FailIndex rule) joins
//!   `status.failedIndexes` and is not retried; each index backs off on its own; more
//!   failed indexes than `maxFailedIndexes` fail the Job (`MaxFailedIndexesExceeded`),
//!   and so does every index done with some failed (`FailedIndexes`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus, UncountedTerminatedPods};
use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::failure_policy::{judge, Verdict};
use crate::pods::{claim, controller_ref, is_ready};
use crate::selector::Selector;
use crate::replicaset::reconcile::deletion_rank;

pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
pub const COMPLETION_INDEX_ENV: &str = "JOB_COMPLETION_INDEX";
pub const INDEX_FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-failure-count";
pub const INDEX_IGNORED_FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-ignored-failure-count";

/// Most pods created or deleted by one sync (as the ReplicaSet controller).
pub const BURST_PODS: usize = 500;
/// The first retry waits this long; each further failure doubles it.
pub const BACKOFF_BASE: Duration = Duration::from_secs(10);
/// The longest wait between retries (`MaxJobPodFailureBackOff`).
pub const BACKOFF_MAX: Duration = Duration::from_secs(600);

pub const MSG_BACKOFF: &str = "Job has reached the specified backoff limit";
pub const MSG_DEADLINE: &str = "Job was active longer than specified deadline";
pub const MSG_COMPLETIONS: &str = "Reached expected number of succeeded pods";
pub const MSG_MAX_FAILED_INDEXES: &str = "Job has exceeded the specified maximum number of failed indexes";
pub const MSG_FAILED_INDEXES: &str = "Job has failed indexes";

/// An Event to record on the Job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobEvent {
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Orphans to adopt (by name).
    pub adopt: Vec<String>,
    /// Pods to release (by name): controlled, but no longer selected.
    pub release: Vec<String>,
    /// Pods to create (by completion index for Indexed Jobs).
    pub create: Vec<Option<i32>>,
    /// With backoffLimitPerIndex: the (failure, ignored failure) counts the new pod of
    /// each index in `create` carries; an index not here starts at (0, 0).
    pub index_failures: BTreeMap<i32, (i32, i32)>,
    /// Running pods to delete, most expendable first.
    pub delete: Vec<String>,
    /// Pods whose tracking finalizer is to be removed — only after `status` is written.
    pub remove_finalizers: Vec<String>,
    pub status: JobStatus,
    pub events: Vec<JobEvent>,
    /// Look again after this long (a backoff or a deadline to come).
    pub requeue: Option<Duration>,
}

fn has_condition<'a>(status: &'a JobStatus, type_: &str) -> Option<&'a JobCondition> {
    status.conditions.iter().flatten().find(|c| c.type_ == type_ && c.status == "True")
}

/// The Job has its final condition (Complete or Failed).
pub fn is_finished(job: &Job) -> bool {
    job.status.as_ref().is_some_and(|s| has_condition(s, "Complete").is_some() || has_condition(s, "Failed").is_some())
}

/// When the Job finished (the final condition's transition), if it has.
pub fn finished_at(job: &Job) -> Option<jiff::Timestamp> {
    let s = job.status.as_ref()?;
    let c = has_condition(s, "Complete").or_else(|| has_condition(s, "Failed"))?;
    c.last_transition_time.as_ref().map(|t| t.0).or_else(|| s.completion_time.as_ref().map(|t| t.0))
}

/// Sets condition `type_` to `status` (keeping the transition time if unchanged).
fn set_condition(status: &mut JobStatus, type_: &str, value: &str, reason: &str, message: &str, now: jiff::Timestamp) {
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    if let Some(c) = conditions.iter_mut().find(|c| c.type_ == type_) {
        if c.status != value {
            c.last_transition_time = Some(Time(now));
        }
        c.status = value.into();
        c.reason = Some(reason.into());
        c.message = Some(message.into());
        c.last_probe_time = Some(Time(now));
        return;
    }
    conditions.push(JobCondition {
        type_: type_.into(),
        status: value.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_probe_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    });
}

fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref().and_then(|s| s.phase.as_deref())
}

fn has_finalizer(pod: &Pod) -> bool {
    pod.metadata.finalizers.iter().flatten().any(|f| f == TRACKING_FINALIZER)
}

fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

fn name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

/// The completion index a pod carries (annotation, or the label), if valid.
pub fn index_of(pod: &Pod) -> Option<i32> {
    let m = &pod.metadata;
    let v = m.annotations.as_ref().and_then(|a| a.get(COMPLETION_INDEX)).or_else(|| m.labels.as_ref().and_then(|l| l.get(COMPLETION_INDEX)))?;
    v.parse().ok().filter(|i: &i32| *i >= 0)
}

fn count_annotation(pod: &Pod, key: &str) -> i32 {
    pod.metadata.annotations.as_ref().and_then(|a| a.get(key)).and_then(|v| v.parse().ok()).filter(|n: &i32| *n >= 0).unwrap_or(0)
}

/// The failures of its index before `pod` (its `job-index-failure-count`).
pub fn index_failure_count(pod: &Pod) -> i32 {
    count_annotation(pod, INDEX_FAILURE_COUNT)
}

/// All failures of its index before `pod`, ignored ones included.
fn absolute_failure_count(pod: &Pod) -> i32 {
    index_failure_count(pod).saturating_add(count_annotation(pod, INDEX_IGNORED_FAILURE_COUNT))
}

/// Counted as failed: Failed, or (when replacements need not wait for Failed) deleted
/// before it succeeded.
fn counts_failed(pod: &Pod, only_failed: bool) -> bool {
    phase(pod) == Some("Failed") || (!only_failed && pod.metadata.deletion_timestamp.is_some() && phase(pod) != Some("Succeeded"))
}

/// Running: not finished and not being deleted.
fn is_active(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none() && !matches!(phase(pod), Some("Succeeded" | "Failed"))
}

/// `"0-2,4,6,7"` ⇄ {0, 1, 2, 4, 6, 7}: how Kubernetes writes completedIndexes.
pub fn parse_indexes(s: &str) -> BTreeSet<i32> {
    let mut out = BTreeSet::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<i32>(), b.parse::<i32>()) {
                    out.extend(a..=b);
                }
            }
            None => out.extend(part.parse::<i32>().ok()),
        }
    }
    out
}

pub fn format_indexes(set: &BTreeSet<i32>) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut iter = set.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end = iter.next().expect("peeked");
        }
        // As Kubernetes writes them: a pair with a comma, longer runs with a dash.
        parts.push(match end - start {
            0 => start.to_string(),
            1 => format!("{start},{end}"),
            _ => format!("{start}-{end}"),
        });
    }
    parts.join(",")
}

/// The wait before a replacement after `failures` failed pods: 10 s·2^(n−1), capped.
pub fn backoff(failures: i32) -> Duration {
    if failures <= 0 {
        return Duration::ZERO;
    }
    let shift = (failures - 1).min(16) as u32;
    BACKOFF_BASE.saturating_mul(1 << shift).min(BACKOFF_MAX)
}

/// When a failed pod finished: its containers' finish, else its last condition change.
fn finish_time(pod: &Pod) -> Option<jiff::Timestamp> {
    let s = pod.status.as_ref()?;
    let finished = s.container_statuses.iter().flatten().filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref()).map(|t| t.0).max();
    finished.or_else(|| s.conditions.iter().flatten().filter_map(|c| c.last_transition_time.as_ref()).map(|t| t.0).max())
}

/// A new pod of `job` (for completion `index` if Indexed), with the tracking finalizer;
/// with backoffLimitPerIndex it carries its index's (failure, ignored failure) counts.
pub fn pod_for(job: &Job, index: Option<i32>, failures: (i32, i32)) -> Pod {
    let job_name = job.metadata.name.clone().unwrap_or_default();
    let template = job.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default();
    let tm = template.metadata.unwrap_or_default();
    let mut labels = tm.labels.unwrap_or_default();
    let mut annotations = tm.annotations.unwrap_or_default();
    let mut spec = template.spec.unwrap_or_default();
    let generate_name = match index {
        Some(i) => {
            labels.insert(COMPLETION_INDEX.into(), i.to_string());
            annotations.insert(COMPLETION_INDEX.into(), i.to_string());
            if job.spec.as_ref().is_some_and(|s| s.backoff_limit_per_index.is_some()) {
                annotations.insert(INDEX_FAILURE_COUNT.into(), failures.0.to_string());
                if failures.1 > 0 {
                    annotations.insert(INDEX_IGNORED_FAILURE_COUNT.into(), failures.1.to_string());
                }
            }
            spec.hostname.get_or_insert_with(|| format!("{job_name}-{i}"));
            let env = EnvVar {
                name: COMPLETION_INDEX_ENV.into(),
                value: None,
                value_from: Some(EnvVarSource {
                    field_ref: Some(ObjectFieldSelector { field_path: format!("metadata.annotations['{COMPLETION_INDEX}']"), api_version: None }),
                    ..Default::default()
                }),
            };
            for c in spec.containers.iter_mut().chain(spec.init_containers.iter_mut().flatten()) {
                let envs = c.env.get_or_insert_with(Vec::new);
                if !envs.iter().any(|e| e.name == COMPLETION_INDEX_ENV) {
                    envs.push(env.clone());
                }
            }
            format!("{job_name}-{i}-")
        }
        None => format!("{job_name}-"),
    };
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(generate_name),
            namespace: job.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            finalizers: Some(vec![TRACKING_FINALIZER.into()]),
            owner_references: Some(vec![controller_ref("batch/v1", "Job", &job.metadata)]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// The sync of `job` over `pods` (every pod of its namespace; those it controls count).
pub fn reconcile(job: &Job, pods: &[&Pod], now: jiff::Timestamp) -> Plan {
    let job_uid = job.metadata.uid.clone().unwrap_or_default();
    let selector = Selector::new(&job.spec.as_ref().and_then(|s| s.selector.clone()).unwrap_or_default());
    let done_or_going = is_finished(job) || job.metadata.deletion_timestamp.is_some();
    let claimed = claim(&job_uid, &selector, pods, done_or_going);
    let owned = claimed.owned;
    let mut plan = Plan { status: job.status.clone().unwrap_or_default(), adopt: claimed.adopt, release: claimed.release, ..Default::default() };
    if done_or_going {
        // Nothing more runs; a straggler's finalizer must not keep it forever.
        plan.remove_finalizers = owned.iter().filter(|p| has_finalizer(p)).map(|p| name(p)).collect();
        return plan;
    }
    let spec = job.spec.clone().unwrap_or_default();
    let indexed = spec.completion_mode.as_deref() == Some("Indexed");
    let only_failed = spec.pod_replacement_policy.as_deref() == Some("Failed") || spec.pod_failure_policy.is_some();
    let parallelism = spec.parallelism.unwrap_or(1).max(0);
    let completions = spec.completions;
    let backoff_limit = spec.backoff_limit.unwrap_or(6);

    // Accounting: uncounted pods whose finalizer is gone are counted now; finished pods
    // still holding it become uncounted (and lose it once that is written).
    let by_uid: HashMap<String, &Pod> = owned.iter().map(|p| (uid(p), *p)).collect();
    let old = plan.status.uncounted_terminated_pods.clone().unwrap_or_default();
    let (mut succeeded, mut failed) = (plan.status.succeeded.unwrap_or(0), plan.status.failed.unwrap_or(0));
    let mut unc_succeeded: Vec<String> = Vec::new();
    let mut unc_failed: Vec<String> = Vec::new();
    for (list, counter, keep) in [(old.succeeded.unwrap_or_default(), &mut succeeded, &mut unc_succeeded), (old.failed.unwrap_or_default(), &mut failed, &mut unc_failed)] {
        for u in list {
            if by_uid.get(&u).is_some_and(|p| has_finalizer(p)) {
                keep.push(u);
            } else {
                *counter += 1;
            }
        }
    }
    let mut completed: BTreeSet<i32> = parse_indexes(plan.status.completed_indexes.as_deref().unwrap_or(""));
    if indexed {
        for p in owned.iter().filter(|p| phase(p) == Some("Succeeded")) {
            if let Some(i) = index_of(p).filter(|i| completions.is_none_or(|c| *i < c)) {
                completed.insert(i);
            }
        }
    }
    let verdict_of = |p: &Pod| match (&spec.pod_failure_policy, phase(p)) {
        (Some(policy), Some("Failed")) => judge(policy, p),
        _ => Verdict::Count,
    };
    let per_index = if indexed { spec.backoff_limit_per_index } else { None };
    let in_range = |i: &i32| completions.is_some_and(|c| *i < c);
    // Per index: the failed indexes, and the last failed pod of each index still to be
    // retried, whose finalizer stays until its replacement carries the count on.
    let mut failed_indexes: BTreeSet<i32> = BTreeSet::new();
    let mut delayed: BTreeMap<i32, &Pod> = BTreeMap::new();
    if let Some(limit) = per_index {
        failed_indexes = parse_indexes(plan.status.failed_indexes.as_deref().unwrap_or("")).into_iter().filter(in_range).collect();
        for p in owned.iter().filter(|p| has_finalizer(p) && counts_failed(p, only_failed)) {
            let verdict = verdict_of(p);
            let index_failed = verdict == Verdict::FailIndex || (verdict.counts() && index_failure_count(p) >= limit);
            if let Some(i) = index_of(p).filter(in_range).filter(|_| index_failed) {
                failed_indexes.insert(i);
            }
        }
        let active_indexes: BTreeSet<i32> = owned.iter().filter(|p| is_active(p)).filter_map(|p| index_of(p)).collect();
        for p in owned.iter().copied().filter(|p| counts_failed(p, only_failed)) {
            let Some(i) = index_of(p).filter(in_range) else { continue };
            if completed.contains(&i) || failed_indexes.contains(&i) || active_indexes.contains(&i) {
                continue;
            }
            let later = |q: &Pod| (absolute_failure_count(q), finish_time(q));
            if delayed.get(&i).is_none_or(|last| later(last) <= later(p)) {
                delayed.insert(i, p);
            }
        }
    }
    let mut fail_job: Option<String> = None;
    let mut held: Vec<(&Pod, Verdict)> = Vec::new();
    for p in owned.iter().copied().filter(|p| has_finalizer(p)) {
        let u = uid(p);
        let known = unc_succeeded.contains(&u) || unc_failed.contains(&u);
        if !known {
            if phase(p) == Some("Succeeded") {
                unc_succeeded.push(u);
            } else if counts_failed(p, only_failed) {
                let verdict = verdict_of(p);
                if let Verdict::FailJob(message) = &verdict {
                    fail_job.get_or_insert(message.clone());
                }
                if index_of(p).and_then(|i| delayed.get(&i)).is_some_and(|d| uid(d) == u) {
                    held.push((p, verdict));
                    continue;
                }
                if verdict.counts() {
                    unc_failed.push(u);
                }
            } else {
                continue;
            }
        }
        plan.remove_finalizers.push(name(p));
    }
    let succeeded_eff = if indexed { completed.len() as i32 } else { succeeded + unc_succeeded.len() as i32 };
    let failed_eff = failed + unc_failed.len() as i32;

    let active: Vec<&Pod> = owned.iter().copied().filter(|p| is_active(p)).collect();
    let terminating = owned.iter().filter(|p| p.metadata.deletion_timestamp.is_some() && !matches!(phase(p), Some("Succeeded" | "Failed"))).count() as i32;
    let restarts: i32 = if spec.template.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) == Some("OnFailure") {
        active.iter().flat_map(|p| p.status.iter().flat_map(|s| s.container_statuses.iter().flatten())).map(|c| c.restart_count).sum()
    } else {
        0
    };

    let suspended = spec.suspend == Some(true);
    let mut status = plan.status.clone();
    let was_suspended = has_condition(&status, "Suspended").is_some();
    if suspended {
        if !was_suspended {
            set_condition(&mut status, "Suspended", "True", "JobSuspended", "Job suspended", now);
            plan.events.push(JobEvent { warning: false, reason: "Suspended", message: "Job suspended".into() });
        }
    } else {
        if was_suspended {
            set_condition(&mut status, "Suspended", "False", "JobResumed", "Job resumed", now);
            plan.events.push(JobEvent { warning: false, reason: "Resumed", message: "Job resumed".into() });
            status.start_time = Some(Time(now));
        }
        status.start_time.get_or_insert(Time(now));
    }

    // Success or failure criteria, once met, are kept (as conditions) until the end.
    let success_met = has_condition(&status, "SuccessCriteriaMet").is_some();
    let failure_target = has_condition(&status, "FailureTarget").cloned();
    if !success_met && failure_target.is_none() && !suspended {
        let done = match completions {
            Some(c) => succeeded_eff >= c,
            None => succeeded_eff > 0 && active.is_empty(),
        };
        let deadline = spec.active_deadline_seconds.zip(status.start_time.as_ref()).map(|(s, t)| t.0 + jiff::SignedDuration::from_secs(s));
        // Failures first, as Kubernetes judges them.
        if let Some(message) = &fail_job {
            set_condition(&mut status, "FailureTarget", "True", "PodFailurePolicy", message, now);
        } else if failed_eff + restarts > backoff_limit {
            set_condition(&mut status, "FailureTarget", "True", "BackoffLimitExceeded", MSG_BACKOFF, now);
        } else if deadline.is_some_and(|d| now >= d) {
            set_condition(&mut status, "FailureTarget", "True", "DeadlineExceeded", MSG_DEADLINE, now);
        } else if per_index.is_some() && spec.max_failed_indexes.is_some_and(|m| failed_indexes.len() as i32 > m) {
            set_condition(&mut status, "FailureTarget", "True", "MaxFailedIndexesExceeded", MSG_MAX_FAILED_INDEXES, now);
        } else if per_index.is_some() && !failed_indexes.is_empty() && (failed_indexes.len() + completed.len()) as i32 >= completions.unwrap_or(0) {
            set_condition(&mut status, "FailureTarget", "True", "FailedIndexes", MSG_FAILED_INDEXES, now);
        } else if done {
            set_condition(&mut status, "SuccessCriteriaMet", "True", "CompletionsReached", MSG_COMPLETIONS, now);
        } else if let Some(d) = deadline {
            plan.requeue = Some(Duration::try_from(d - now).unwrap_or(Duration::ZERO) + Duration::from_millis(100));
        }
    }
    let finishing = has_condition(&status, "SuccessCriteriaMet").is_some() || has_condition(&status, "FailureTarget").is_some();
    // A finishing Job retries nothing: the failed pods it held are counted now.
    if finishing {
        for (p, verdict) in held.drain(..) {
            if verdict.counts() {
                unc_failed.push(uid(p));
            }
            plan.remove_finalizers.push(name(p));
        }
    }

    let mut ranked = active.clone();
    ranked.sort_by_key(|p| deletion_rank(p));
    if finishing || suspended {
        plan.delete = ranked.iter().take(BURST_PODS).map(|p| name(p)).collect();
    } else if indexed {
        let c = completions.unwrap_or(0);
        let mut running: BTreeSet<i32> = BTreeSet::new();
        let mut excess = Vec::new();
        for p in &ranked {
            match index_of(p) {
                Some(i) if i < c && !completed.contains(&i) && !failed_indexes.contains(&i) && running.insert(i) => {}
                _ => excess.push(name(p)),
            }
        }
        let room = (parallelism - running.len() as i32).max(0) as usize;
        plan.delete = excess;
        let pending: Vec<i32> = (0..c).filter(|i| !completed.contains(i) && !running.contains(i) && !failed_indexes.contains(i)).take(room.min(BURST_PODS)).collect();
        let mut wait: Option<Duration> = None;
        for i in pending {
            // Per index, a retry waits out its own index's backoff.
            let Some(last) = delayed.get(&i) else {
                plan.create.push(Some(i));
                continue;
            };
            let ready_at = finish_time(last).map(|t| t + jiff::SignedDuration::try_from(backoff(absolute_failure_count(last) + 1)).unwrap_or_default());
            match ready_at.filter(|r| now < *r) {
                Some(r) => {
                    let left = Duration::try_from(r - now).unwrap_or(Duration::ZERO) + Duration::from_millis(100);
                    wait = Some(wait.map_or(left, |w| w.min(left)));
                }
                None => {
                    let counted = verdict_of(last).counts();
                    let (f, ig) = (index_failure_count(last), count_annotation(last, INDEX_IGNORED_FAILURE_COUNT));
                    plan.index_failures.insert(i, if counted { (f + 1, ig) } else { (f, ig + 1) });
                    plan.create.push(Some(i));
                }
            }
        }
        if let Some(w) = wait {
            plan.requeue = Some(plan.requeue.map_or(w, |r| r.min(w)));
        }
    } else {
        let want = match completions {
            Some(c) => (c - succeeded_eff).clamp(0, parallelism),
            None if succeeded_eff > 0 => active.len() as i32,
            None => parallelism,
        } as usize;
        if active.len() > want {
            plan.delete = ranked.iter().take((active.len() - want).min(BURST_PODS)).map(|p| name(p)).collect();
        } else {
            plan.create = vec![None; (want - active.len()).min(BURST_PODS)];
        }
    }
    // Replacements after failures wait out the backoff.
    if !plan.create.is_empty() && failed_eff > 0 && per_index.is_none() {
        let last = owned.iter().filter(|p| counts_failed(p, only_failed)).filter_map(|p| finish_time(p)).max();
        if let Some(last) = last {
            let ready_at = last + jiff::SignedDuration::try_from(backoff(failed_eff)).unwrap_or_default();
            if now < ready_at {
                plan.create.clear();
                let wait = Duration::try_from(ready_at - now).unwrap_or(Duration::ZERO) + Duration::from_millis(100);
                plan.requeue = Some(plan.requeue.map_or(wait, |r| r.min(wait)));
            }
        }
    }

    // The final condition, once nothing runs or waits to be counted.
    let settled = active.is_empty() && owned.iter().all(|p| !has_finalizer(p)) && unc_succeeded.is_empty() && unc_failed.is_empty();
    if finishing && settled {
        if let Some(c) = has_condition(&status, "FailureTarget").cloned() {
            let (reason, message) = (c.reason.unwrap_or_default(), c.message.unwrap_or_default());
            set_condition(&mut status, "Failed", "True", &reason, &message, now);
            let reason: &'static str = match reason.as_str() {
                "DeadlineExceeded" => "DeadlineExceeded",
                "PodFailurePolicy" => "PodFailurePolicy",
                "MaxFailedIndexesExceeded" => "MaxFailedIndexesExceeded",
                "FailedIndexes" => "FailedIndexes",
                _ => "BackoffLimitExceeded",
            };
            plan.events.push(JobEvent { warning: true, reason, message });
        } else {
            set_condition(&mut status, "Complete", "True", "CompletionsReached", MSG_COMPLETIONS, now);
            status.completion_time = Some(Time(now));
            plan.events.push(JobEvent { warning: false, reason: "Completed", message: "Job completed".into() });
        }
    }

    status.active = Some(active.len() as i32);
    status.ready = Some(active.iter().filter(|p| is_ready(p)).count() as i32);
    status.terminating = Some(terminating);
    status.succeeded = Some(if indexed { completed.len() as i32 } else { succeeded });
    status.failed = Some(failed);
    if indexed {
        status.completed_indexes = Some(format_indexes(&completed));
    }
    if per_index.is_some() {
        status.failed_indexes = Some(format_indexes(&failed_indexes));
    }
    status.uncounted_terminated_pods = Some(UncountedTerminatedPods { succeeded: Some(unc_succeeded), failed: Some(unc_failed) });
    plan.status = status;
    plan
}

/// When a finished Job with `ttlSecondsAfterFinished` is due for deletion: `Some(ZERO)`
/// when due now, `Some(wait)` when later, `None` when it never is.
pub fn ttl_remaining(job: &Job, now: jiff::Timestamp) -> Option<Duration> {
    let ttl = job.spec.as_ref()?.ttl_seconds_after_finished?;
    let finished = finished_at(job)?;
    let due = finished + jiff::SignedDuration::from_secs(i64::from(ttl.max(0)));
    Some(if now >= due { Duration::ZERO } else { Duration::try_from(due - now).unwrap_or(Duration::ZERO) })
}

#[cfg(test)]
#[path = "reconcile_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "per_index_tests.rs"]
mod per_index_tests;
