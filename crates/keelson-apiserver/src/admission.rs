//! Mutating admission of built-in plugins that Kubernetes enables by default, as pure
//! functions of the object being created. Today: DefaultTolerationSeconds.

use serde_json::{json, Value};

use crate::catalog::ResourceDef;

/// DefaultTolerationSeconds' `--default-not-ready-toleration-seconds` and
/// `--default-unreachable-toleration-seconds`.
pub const DEFAULT_TOLERATION_SECONDS: i64 = 300;

const NOT_READY: &str = "node.kubernetes.io/not-ready";
const UNREACHABLE: &str = "node.kubernetes.io/unreachable";

/// Admission on create: what the enabled plugins change in `obj`.
pub fn admit_create(def: &ResourceDef, obj: &mut Value) {
    if (def.group, def.kind) == ("", "Pod") {
        default_toleration_seconds(obj, DEFAULT_TOLERATION_SECONDS, DEFAULT_TOLERATION_SECONDS);
    }
}

/// Kubernetes' DefaultTolerationSeconds plugin: a pod that does not already tolerate
/// `node.kubernetes.io/not-ready:NoExecute` (or `unreachable`) gets an `Exists`
/// toleration of it for the given seconds. A toleration with that key, or an empty key,
/// and effect NoExecute or none counts as tolerating it.
pub fn default_toleration_seconds(pod: &mut Value, not_ready_seconds: i64, unreachable_seconds: i64) {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else { return };
    let existing: &[Value] = spec.get("tolerations").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
    let tolerates = |key: &str| {
        existing.iter().any(|t| {
            let k = t.get("key").and_then(Value::as_str).unwrap_or("");
            let e = t.get("effect").and_then(Value::as_str).unwrap_or("");
            (k == key || k.is_empty()) && (e == "NoExecute" || e.is_empty())
        })
    };
    let mut added = Vec::new();
    for (key, seconds) in [(NOT_READY, not_ready_seconds), (UNREACHABLE, unreachable_seconds)] {
        if !tolerates(key) {
            added.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}));
        }
    }
    if added.is_empty() {
        return;
    }
    match spec.get_mut("tolerations").and_then(Value::as_array_mut) {
        Some(list) => list.extend(added),
        None => {
            spec.insert("tolerations".into(), Value::Array(added));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admitted(tolerations: Value) -> Value {
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}], "tolerations": tolerations}});
        if tolerations.is_null() {
            pod["spec"].as_object_mut().unwrap().remove("tolerations");
        }
        admit_create(crate::catalog::lookup("", "v1", "pods").unwrap(), &mut pod);
        pod["spec"]["tolerations"].clone()
    }

    fn keys(tolerations: &Value) -> Vec<(String, Option<i64>)> {
        tolerations
            .as_array()
            .unwrap()
            .iter()
            .map(|t| (t["key"].as_str().unwrap_or("").to_string(), t["tolerationSeconds"].as_i64()))
            .collect()
    }

    #[test]
    fn a_pod_without_tolerations_gets_both_for_300_seconds() {
        let t = admitted(Value::Null);
        assert_eq!(
            t,
            json!([
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            ])
        );
    }

    #[test]
    fn existing_tolerations_of_a_key_are_kept_and_not_doubled() {
        let t = admitted(json!([{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 2}, {"key": "gpu", "operator": "Exists"}]));
        assert_eq!(keys(&t), [("node.kubernetes.io/unreachable".into(), Some(2)), ("gpu".into(), None), ("node.kubernetes.io/not-ready".into(), Some(300))]);
        // No effect means every effect; an empty key with no effect tolerates both.
        let t = admitted(json!([{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}]));
        assert_eq!(keys(&t), [("node.kubernetes.io/not-ready".into(), None), ("node.kubernetes.io/unreachable".into(), Some(300))]);
        let t = admitted(json!([{"operator": "Exists"}]));
        assert_eq!(keys(&t), [("".into(), None)]);
    }

    #[test]
    fn a_toleration_of_another_effect_does_not_count() {
        let t = admitted(json!([{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoSchedule"}]));
        assert_eq!(keys(&t).len(), 3);
    }

    #[test]
    fn only_pods_are_changed() {
        let mut rs = json!({"spec": {"template": {"spec": {}}}});
        admit_create(crate::catalog::lookup("apps", "v1", "replicasets").unwrap(), &mut rs);
        assert_eq!(rs, json!({"spec": {"template": {"spec": {}}}}));
    }
}
