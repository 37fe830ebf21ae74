//! A Job's podFailurePolicy, as Kubernetes judges a failed pod by it: the first rule whose
//! `onExitCodes` (a container terminated with a non-zero code In / NotIn the values,
//! optionally only container `containerName`) or `onPodConditions` (a condition of that
//! type and status) matches decides — FailJob, Ignore (not counted against
//! backoffLimit) or Count; no match counts. FailIndex fails the pod's index at once
//! (it needs backoffLimitPerIndex; without it, it counts).

use k8s_openapi::api::batch::v1::{PodFailurePolicy, PodFailurePolicyOnExitCodesRequirement, PodFailurePolicyOnPodConditionsPattern};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

/// What a failed pod means for its Job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Count,
    Ignore,
    /// Fail the Job, with this message.
    FailJob(String),
    /// Fail the pod's index (counted as a failure).
    FailIndex,
}

impl Verdict {
    /// Whether the failure counts (against backoffLimit, or its index's limit).
    pub fn counts(&self) -> bool {
        !matches!(self, Verdict::Ignore)
    }
}

fn exit_code_match<'a>(pod: &'a Pod, req: &PodFailurePolicyOnExitCodesRequirement) -> Option<&'a ContainerStatus> {
    let status = pod.status.as_ref()?;
    status.init_container_statuses.iter().flatten().chain(status.container_statuses.iter().flatten()).find(|c| {
        let Some(code) = c.state.as_ref().and_then(|s| s.terminated.as_ref()).map(|t| t.exit_code).filter(|c| *c != 0) else { return false };
        if req.container_name.as_deref().is_some_and(|n| n != c.name) {
            return false;
        }
        match req.operator.as_str() {
            "In" => req.values.contains(&code),
            "NotIn" => !req.values.contains(&code),
            _ => false,
        }
    })
}

fn condition_match<'a>(pod: &'a Pod, patterns: &[PodFailurePolicyOnPodConditionsPattern]) -> Option<&'a str> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    patterns.iter().find_map(|p| conditions.iter().find(|c| c.type_ == p.type_ && c.status == p.status).map(|c| c.type_.as_str()))
}

/// The verdict on failed pod `pod` under `policy`.
pub fn judge(policy: &PodFailurePolicy, pod: &Pod) -> Verdict {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let name = pod.metadata.name.as_deref().unwrap_or("");
    for (index, rule) in policy.rules.iter().enumerate() {
        let matched = if let Some(req) = &rule.on_exit_codes {
            exit_code_match(pod, req).map(|c| {
                let code = c.state.as_ref().and_then(|s| s.terminated.as_ref()).map_or(0, |t| t.exit_code);
                format!("Container {} for pod {ns}/{name} failed with exit code {code} matching {} rule at index {index}", c.name, rule.action)
            })
        } else if let Some(patterns) = &rule.on_pod_conditions {
            condition_match(pod, patterns).map(|t| format!("Pod {ns}/{name} has condition {t} matching {} rule at index {index}", rule.action))
        } else {
            None
        };
        if let Some(message) = matched {
            return match rule.action.as_str() {
                "FailJob" => Verdict::FailJob(message),
                "Ignore" => Verdict::Ignore,
                "FailIndex" => Verdict::FailIndex,
                _ => Verdict::Count,
            };
        }
    }
    Verdict::Count
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn failed(code: i32, conditions: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "pi-x", "namespace": "d"}, "status": {"phase": "Failed", "conditions": conditions,
            "containerStatuses": [{"name": "main", "image": "x", "imageID": "", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": code}}}]}}))
        .unwrap()
    }

    fn policy(rules: serde_json::Value) -> PodFailurePolicy {
        serde_json::from_value(json!({"rules": rules})).unwrap()
    }

    #[test]
    fn the_first_matching_rule_decides() {
        let p = policy(json!([
            {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}},
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [1]}},
        ]));
        assert_eq!(judge(&p, &failed(42, json!([]))), Verdict::FailJob("Container main for pod d/pi-x failed with exit code 42 matching FailJob rule at index 0".into()));
        assert_eq!(judge(&p, &failed(1, json!([{"type": "DisruptionTarget", "status": "True"}]))), Verdict::Ignore);
        assert_eq!(judge(&p, &failed(3, json!([]))), Verdict::Count);
        assert_eq!(judge(&p, &failed(1, json!([]))), Verdict::Count, "no rule matches");
        let other = policy(json!([{"action": "FailJob", "onExitCodes": {"containerName": "sidecar", "operator": "In", "values": [42]}}]));
        assert_eq!(judge(&other, &failed(42, json!([]))), Verdict::Count, "another container's rule");
        let conditions = policy(json!([{"action": "FailJob", "onPodConditions": [{"type": "ConfigIssue", "status": "True"}]}]));
        assert_eq!(judge(&conditions, &failed(1, json!([{"type": "ConfigIssue", "status": "True"}]))), Verdict::FailJob("Pod d/pi-x has condition ConfigIssue matching FailJob rule at index 0".into()));
        let index = policy(json!([{"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [3]}}]));
        assert_eq!(judge(&index, &failed(3, json!([]))), Verdict::FailIndex);
        assert_eq!(judge(&index, &failed(4, json!([]))), Verdict::Count);
        assert!(Verdict::FailIndex.counts() && Verdict::Count.counts() && !Verdict::Ignore.counts());
    }
}
