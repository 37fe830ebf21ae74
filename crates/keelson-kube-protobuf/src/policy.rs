//! `policy/v1` object bodies (`PodDisruptionBudget`, `Eviction`) and
//! `scheduling.k8s.io/v1` `PriorityClass`. Conversion failures are
//! [`crate::json::ConvertError`]s; this module adds no error type of its own.

use k8s_pb::api::policy::v1 as policy;
use k8s_pb::api::scheduling::v1 as scheduling;
use serde_json::Value;

use crate::json::{Obj, Result};
use crate::meta::{delete_options, label_selector, object_meta};

/// `PodDisruptionBudget` (`minAvailable`/`maxUnavailable` as number or
/// percentage string, `selector`, `unhealthyPodEvictionPolicy`).
pub fn pod_disruption_budget(p: &policy::PodDisruptionBudget) -> Result<Value> {
    let mut o = Obj::new();
    o.message("metadata", &p.metadata, object_meta)?;
    o.message("spec", &p.spec, |s| {
        let mut o = Obj::new();
        o.int_or_string_kept("minAvailable", &s.min_available)?;
        o.message("selector", &s.selector, label_selector)?;
        o.int_or_string_kept("maxUnavailable", &s.max_unavailable)?;
        o.string_kept(
            "unhealthyPodEvictionPolicy",
            &s.unhealthy_pod_eviction_policy,
        );
        Ok(o.build())
    })?;
    Ok(o.build())
}

/// `Eviction` (the `pods/eviction` subresource body used by `kubectl drain`).
pub fn eviction(e: &policy::Eviction) -> Result<Value> {
    let mut o = Obj::new();
    o.message("metadata", &e.metadata, object_meta)?;
    o.message("deleteOptions", &e.delete_options, delete_options)?;
    Ok(o.build())
}

/// `PriorityClass`; `value` is required and kept even when 0.
pub fn priority_class(p: &scheduling::PriorityClass) -> Result<Value> {
    let mut o = Obj::new();
    o.message("metadata", &p.metadata, object_meta)?;
    Ok(o.int_kept("value", p.value)
        .boolean("globalDefault", p.global_default)
        .string("description", &p.description)
        .string_kept("preemptionPolicy", &p.preemption_policy)
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
    use serde_json::json;

    #[test]
    fn pdb_percentages_and_zero() {
        let pdb = policy::PodDisruptionBudget {
            metadata: None,
            spec: Some(policy::PodDisruptionBudgetSpec {
                min_available: Some(IntOrString {
                    r#type: Some(0),
                    int_val: Some(0),
                    str_val: Some(String::new()),
                }),
                max_unavailable: Some(IntOrString {
                    r#type: Some(1),
                    int_val: Some(0),
                    str_val: Some("50%".into()),
                }),
                selector: None,
                unhealthy_pod_eviction_policy: None,
            }),
            status: None,
        };
        assert_eq!(
            pod_disruption_budget(&pdb).unwrap(),
            json!({"spec": {"minAvailable": 0, "maxUnavailable": "50%"}})
        );
    }

    #[test]
    fn priority_class_zero_value_kept() {
        let pc = scheduling::PriorityClass {
            metadata: None,
            value: Some(0),
            global_default: Some(false),
            description: Some(String::new()),
            preemption_policy: None,
        };
        assert_eq!(priority_class(&pc).unwrap(), json!({"value": 0}));
    }
}
