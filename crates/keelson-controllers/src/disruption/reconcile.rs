//! What the disruption controller computes for a PodDisruptionBudget, without I/O:
//! expected, desired and current healthy pods, the disruptions allowed, the evictions
//! still in flight (`disruptedPods`) and the `DisruptionAllowed` condition, as
//! Kubernetes' disruption controller does.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::pods::{controller_of, is_ready};

/// An eviction the API allowed but whose pod is still there counts as a disruption
/// for this long (Kubernetes' `DeletionTimeout`).
pub const DISRUPTED_POD_TIMEOUT_SECONDS: i64 = 120;

/// A budget that cannot be computed (a percentage or maxUnavailable over pods whose
/// controllers' scale is unknown).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetError(pub String);

fn percent(v: &IntOrString) -> Option<i64> {
    match v {
        IntOrString::String(s) => s.strip_suffix('%')?.parse().ok(),
        IntOrString::Int(_) => None,
    }
}

/// `value` of `total`: an integer as is, a percentage rounded up.
fn scaled(value: &IntOrString, total: i64) -> Result<i64, BudgetError> {
    match value {
        IntOrString::Int(n) => Ok(i64::from(*n)),
        IntOrString::String(_) => match percent(value) {
            Some(p) => Ok((p * total + 99) / 100),
            None => Err(BudgetError(format!("invalid value for IntOrString: invalid value {value:?}"))),
        },
    }
}

/// The pods the budget expects: the sum of their controllers' scale (`scale_of` reads it),
/// counting each controller once. Integer minAvailable needs no scale: it is the pods.
fn expected_count(pdb: &PodDisruptionBudget, pods: &[&Pod], scale_of: &dyn Fn(&str, &OwnerReference) -> Option<i32>) -> Result<(i64, i64), BudgetError> {
    let spec = pdb.spec.as_ref();
    let min = spec.and_then(|s| s.min_available.as_ref());
    let max = spec.and_then(|s| s.max_unavailable.as_ref());
    if let Some(IntOrString::Int(n)) = min {
        return Ok((pods.len() as i64, i64::from(*n)));
    }
    let mut controllers: BTreeMap<String, i64> = BTreeMap::new();
    for p in pods {
        let ns = p.metadata.namespace.as_deref().unwrap_or("default");
        let Some(owner) = controller_of(&p.metadata) else {
            return Err(BudgetError(format!("found no controllers for pod {:?}", p.metadata.name.as_deref().unwrap_or(""))));
        };
        if controllers.contains_key(&owner.uid) {
            continue;
        }
        let Some(scale) = scale_of(ns, owner) else {
            return Err(BudgetError(format!("found no controllers for pod {:?}", p.metadata.name.as_deref().unwrap_or(""))));
        };
        controllers.insert(owner.uid.clone(), i64::from(scale));
    }
    let expected: i64 = controllers.values().sum();
    let desired = match (min, max) {
        (Some(m), _) => scaled(m, expected)?,
        (None, Some(m)) => (expected - scaled(m, expected)?).max(0),
        (None, None) => expected,
    };
    Ok((expected, desired))
}

fn seconds(t: &Time) -> i64 {
    t.0.as_second()
}

/// The budget's status over `pods` (those its selector matches) at `now`; `previous` is
/// the stored status (for `disruptedPods` and the condition's transition time).
pub fn status(pdb: &PodDisruptionBudget, pods: &[&Pod], scale_of: &dyn Fn(&str, &OwnerReference) -> Option<i32>, now: &Time) -> PodDisruptionBudgetStatus {
    let previous = pdb.status.clone().unwrap_or_default();
    let generation = pdb.metadata.generation;
    // Evictions in flight: the pod is still there, not yet deleting, and the eviction
    // is recent.
    let disrupted: BTreeMap<String, Time> = previous
        .disrupted_pods
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|(name, at)| {
            let live = pods.iter().any(|p| p.metadata.name.as_deref() == Some(name.as_str()) && p.metadata.deletion_timestamp.is_none());
            live && seconds(now) - seconds(at) < DISRUPTED_POD_TIMEOUT_SECONDS
        })
        .collect();
    let healthy = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && is_ready(p) && !disrupted.contains_key(p.metadata.name.as_deref().unwrap_or("")))
        .count() as i64;
    let (expected, desired, allowed, condition) = match expected_count(pdb, pods, scale_of) {
        Ok((expected, desired)) => {
            let allowed = (healthy - desired).max(0);
            let (status, reason) = if allowed > 0 { ("True", "SufficientPods") } else { ("False", "InsufficientPods") };
            (expected, desired, allowed, (status, reason, String::new()))
        }
        Err(BudgetError(message)) => (0, 0, 0, ("False", "SyncFailed", message)),
    };
    let (cstatus, reason, message) = condition;
    let before = previous.conditions.iter().flatten().find(|c| c.type_ == "DisruptionAllowed");
    let last_transition_time = match before {
        Some(c) if c.status == cstatus => c.last_transition_time.clone(),
        _ => now.clone(),
    };
    PodDisruptionBudgetStatus {
        observed_generation: generation,
        disrupted_pods: (!disrupted.is_empty()).then_some(disrupted),
        disruptions_allowed: allowed as i32,
        current_healthy: healthy as i32,
        desired_healthy: desired as i32,
        expected_pods: expected as i32,
        conditions: Some(vec![Condition { type_: "DisruptionAllowed".into(), status: cstatus.into(), reason: reason.into(), message, observed_generation: generation, last_transition_time }]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> Time {
        Time("2026-01-01T00:10:00Z".parse().unwrap())
    }

    fn pdb(spec: serde_json::Value, status: serde_json::Value) -> PodDisruptionBudget {
        serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "d", "generation": 2}, "spec": spec, "status": status})).unwrap()
    }

    fn pod(name: &str, ready: bool, owner: Option<&str>) -> Pod {
        let mut p = json!({"metadata": {"name": name, "namespace": "d"},
            "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}});
        if let Some(o) = owner {
            p["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": o, "uid": format!("{o}-uid"), "controller": true}]);
        }
        serde_json::from_value(p).unwrap()
    }

    fn scale(replicas: i32) -> impl Fn(&str, &OwnerReference) -> Option<i32> {
        move |_, _| Some(replicas)
    }

    #[test]
    fn integer_min_available_counts_the_pods() {
        let pods = [pod("a", true, None), pod("b", true, None), pod("c", false, None)];
        let refs: Vec<&Pod> = pods.iter().collect();
        let s = status(&pdb(json!({"minAvailable": 1}), json!({})), &refs, &|_, _| None, &now());
        assert_eq!((s.expected_pods, s.desired_healthy, s.current_healthy, s.disruptions_allowed), (3, 1, 2, 1));
        assert_eq!(s.observed_generation, Some(2));
        let c = &s.conditions.as_ref().unwrap()[0];
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "SufficientPods"));
        let none = status(&pdb(json!({"minAvailable": 2}), json!({})), &refs, &|_, _| None, &now());
        assert_eq!(none.disruptions_allowed, 0);
        assert_eq!(none.conditions.as_ref().unwrap()[0].reason, "InsufficientPods");
    }

    #[test]
    fn percentages_and_max_unavailable_use_the_controllers_scale_rounded_up() {
        let pods = [pod("a", true, Some("rs")), pod("b", true, Some("rs")), pod("c", true, Some("rs"))];
        let refs: Vec<&Pod> = pods.iter().collect();
        let s = status(&pdb(json!({"minAvailable": "50%"}), json!({})), &refs, &scale(4), &now());
        assert_eq!((s.expected_pods, s.desired_healthy, s.current_healthy, s.disruptions_allowed), (4, 2, 3, 1));
        let s = status(&pdb(json!({"maxUnavailable": 1}), json!({})), &refs, &scale(3), &now());
        assert_eq!((s.desired_healthy, s.disruptions_allowed), (2, 1));
        let s = status(&pdb(json!({"maxUnavailable": "10%"}), json!({})), &refs, &scale(3), &now());
        assert_eq!((s.desired_healthy, s.disruptions_allowed), (2, 1), "10% of 3 rounds up to one pod");
    }

    #[test]
    fn a_percentage_over_pods_without_a_controller_cannot_be_computed() {
        let pods = [pod("a", true, None)];
        let refs: Vec<&Pod> = pods.iter().collect();
        let s = status(&pdb(json!({"maxUnavailable": "50%"}), json!({})), &refs, &scale(1), &now());
        assert_eq!(s.disruptions_allowed, 0);
        let c = &s.conditions.as_ref().unwrap()[0];
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "SyncFailed"));
        assert!(c.message.contains("found no controllers for pod \"a\""), "{}", c.message);
    }

    #[test]
    fn recent_evictions_count_as_disrupted_until_their_pod_goes_or_they_time_out() {
        let pods = [pod("a", true, None), pod("b", true, None), pod("c", true, None)];
        let refs: Vec<&Pod> = pods.iter().collect();
        let status_with = json!({"disruptedPods": {"a": "2026-01-01T00:09:30Z", "b": "2026-01-01T00:01:00Z", "gone": "2026-01-01T00:09:50Z"}});
        let s = status(&pdb(json!({"minAvailable": 1}), status_with), &refs, &|_, _| None, &now());
        assert_eq!(s.disrupted_pods.as_ref().map(|d| d.keys().cloned().collect::<Vec<_>>()), Some(vec!["a".to_string()]), "b timed out, gone is gone");
        assert_eq!((s.current_healthy, s.disruptions_allowed), (2, 1));
    }

    #[test]
    fn the_condition_keeps_its_transition_time_while_its_status_holds() {
        let pods = [pod("a", true, None), pod("b", true, None)];
        let refs: Vec<&Pod> = pods.iter().collect();
        let before = json!({"conditions": [{"type": "DisruptionAllowed", "status": "True", "reason": "SufficientPods", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
        let s = status(&pdb(json!({"minAvailable": 1}), before.clone()), &refs, &|_, _| None, &now());
        assert_eq!(s.conditions.as_ref().unwrap()[0].last_transition_time, Time("2026-01-01T00:00:00Z".parse().unwrap()));
        let s = status(&pdb(json!({"minAvailable": 2}), before), &refs, &|_, _| None, &now());
        assert_eq!(s.conditions.as_ref().unwrap()[0].last_transition_time, now());
    }
}
