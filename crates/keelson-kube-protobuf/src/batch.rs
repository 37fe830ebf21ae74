//! `batch/v1` object bodies: `Job` and `CronJob` (without `status`, which
//! the API server ignores on create and update). Conversion failures are
//! [`crate::json::ConvertError`]s; this module adds no error type of its own.

use k8s_pb::api::batch::v1 as batch;
use serde_json::Value;

use crate::json::{Obj, Result};
use crate::meta::{label_selector, object_meta};
use crate::pod::pod_template_spec;

/// `Job`.
pub fn job(j: &batch::Job) -> Result<Value> {
    let mut o = Obj::new();
    o.message("metadata", &j.metadata, object_meta)?;
    o.message("spec", &j.spec, job_spec)?;
    Ok(o.build())
}

/// `JobSpec`; all counters are pointers in Go and kept when present.
pub fn job_spec(s: &batch::JobSpec) -> Result<Value> {
    let mut o = Obj::new();
    o.int_kept("parallelism", s.parallelism)
        .int_kept("completions", s.completions)
        .int_kept("activeDeadlineSeconds", s.active_deadline_seconds);
    o.message("podFailurePolicy", &s.pod_failure_policy, |p| {
        let mut o = Obj::new();
        o.messages("rules", &p.rules, pod_failure_policy_rule)?;
        Ok(o.build())
    })?;
    o.message("successPolicy", &s.success_policy, |p| {
        let mut o = Obj::new();
        o.messages("rules", &p.rules, |r| {
            Ok(Obj::new()
                .string_kept("succeededIndexes", &r.succeeded_indexes)
                .int_kept("succeededCount", r.succeeded_count)
                .build())
        })?;
        Ok(o.build())
    })?;
    o.int_kept("backoffLimit", s.backoff_limit)
        .int_kept("backoffLimitPerIndex", s.backoff_limit_per_index)
        .int_kept("maxFailedIndexes", s.max_failed_indexes);
    o.message("selector", &s.selector, label_selector)?;
    o.boolean_kept("manualSelector", s.manual_selector);
    o.message("template", &s.template, pod_template_spec)?;
    o.int_kept("ttlSecondsAfterFinished", s.ttl_seconds_after_finished)
        .string_kept("completionMode", &s.completion_mode)
        .boolean_kept("suspend", s.suspend)
        .string_kept("podReplacementPolicy", &s.pod_replacement_policy)
        .string_kept("managedBy", &s.managed_by);
    Ok(o.build())
}

fn pod_failure_policy_rule(r: &batch::PodFailurePolicyRule) -> Result<Value> {
    let mut o = Obj::new();
    o.string_kept("action", &r.action);
    o.message("onExitCodes", &r.on_exit_codes, |e| {
        Ok(Obj::new()
            .string_kept("containerName", &e.container_name)
            .string_kept("operator", &e.operator)
            .ints("values", &e.values)
            .build())
    })?;
    o.messages("onPodConditions", &r.on_pod_conditions, |c| {
        Ok(Obj::new()
            .string_kept("type", &c.r#type)
            .string_kept("status", &c.status)
            .build())
    })?;
    Ok(o.build())
}

/// `CronJob`.
pub fn cron_job(c: &batch::CronJob) -> Result<Value> {
    let mut o = Obj::new();
    o.message("metadata", &c.metadata, object_meta)?;
    o.message("spec", &c.spec, |s| {
        let mut o = Obj::new();
        o.string_kept("schedule", &s.schedule)
            .string_kept("timeZone", &s.time_zone)
            .int_kept("startingDeadlineSeconds", s.starting_deadline_seconds)
            .string("concurrencyPolicy", &s.concurrency_policy)
            .boolean_kept("suspend", s.suspend);
        o.message("jobTemplate", &s.job_template, |t| {
            let mut o = Obj::new();
            o.message("metadata", &t.metadata, object_meta)?;
            o.message("spec", &t.spec, job_spec)?;
            Ok(o.build())
        })?;
        o.int_kept(
            "successfulJobsHistoryLimit",
            s.successful_jobs_history_limit,
        )
        .int_kept("failedJobsHistoryLimit", s.failed_jobs_history_limit);
        Ok(o.build())
    })?;
    Ok(o.build())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn job_pointers_kept_including_zero() {
        let spec = batch::JobSpec {
            backoff_limit: Some(0),
            suspend: Some(false),
            pod_failure_policy: Some(batch::PodFailurePolicy {
                rules: vec![batch::PodFailurePolicyRule {
                    action: Some("FailJob".into()),
                    on_exit_codes: Some(batch::PodFailurePolicyOnExitCodesRequirement {
                        container_name: None,
                        operator: Some("In".into()),
                        values: vec![42],
                    }),
                    on_pod_conditions: vec![],
                }],
            }),
            ..Default::default()
        };
        assert_eq!(
            job_spec(&spec).unwrap(),
            json!({"backoffLimit": 0, "suspend": false, "podFailurePolicy": {"rules": [
                {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]}})
        );
    }
}
