//! Kubernetes' Priority admission plugin and the PriorityClass rules, as pure functions of
//! the object and the stored classes (the registry reads them linearizably):
//! - a new pod's `spec.priorityClassName` is resolved to `spec.priority` and
//!   `spec.preemptionPolicy` (no name: the global default class, the one of lowest value
//!   if several claim it, else priority 0); an unknown name, or a pod's own `priority` or
//!   `preemptionPolicy` that differs from its class's, is refused;
//! - at most one class is `globalDefault`;
//! - names starting `system-` are reserved for the built-in classes, which
//!   [`system_priority_classes`] are; other classes' values are at most
//!   [`HIGHEST_USER_DEFINABLE_PRIORITY`]; `value` and `preemptionPolicy` never change.

use serde_json::{json, Value};

use crate::error::Cause;

/// The largest `value` of a class that is not built in.
pub const HIGHEST_USER_DEFINABLE_PRIORITY: i64 = 1_000_000_000;
/// The value of `system-cluster-critical`; `system-node-critical` is 1000 more.
pub const SYSTEM_CRITICAL_PRIORITY: i64 = 2 * HIGHEST_USER_DEFINABLE_PRIORITY;
pub const SYSTEM_PREFIX: &str = "system-";
pub const PREEMPT_LOWER_PRIORITY: &str = "PreemptLowerPriority";

/// The built-in classes (name, value, description), as Kubernetes' API server creates them.
const SYSTEM_CLASSES: [(&str, i64, &str); 2] = [
    ("system-node-critical", SYSTEM_CRITICAL_PRIORITY + 1000, "Used for system critical pods that must not be moved from their current node."),
    ("system-cluster-critical", SYSTEM_CRITICAL_PRIORITY, "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary."),
];

/// The built-in PriorityClass objects.
pub fn system_priority_classes() -> Vec<Value> {
    SYSTEM_CLASSES
        .iter()
        .map(|(name, value, description)| {
            json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                "value": value, "globalDefault": false, "description": description, "preemptionPolicy": PREEMPT_LOWER_PRIORITY})
        })
        .collect()
}

fn name(obj: &Value) -> &str {
    obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("")
}

fn value(class: &Value) -> i64 {
    class.get("value").and_then(Value::as_i64).unwrap_or(0)
}

fn is_global_default(class: &Value) -> bool {
    class.get("globalDefault").and_then(Value::as_bool).unwrap_or(false)
}

/// The global default class: of several, the one of lowest value (as Kubernetes picks).
pub fn default_priority_class(classes: &[Value]) -> Option<&Value> {
    classes.iter().filter(|c| is_global_default(c)).min_by_key(|c| value(c))
}

/// Priority admission of a new pod: sets `spec.priorityClassName` (to the default class,
/// if the pod names none and there is one), `spec.priority` and `spec.preemptionPolicy`.
/// `Err` is why the pod is refused (the text after `pods "<name>" is forbidden: `).
pub fn admit_pod_priority(pod: &mut Value, classes: &[Value]) -> Result<(), String> {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else { return Ok(()) };
    let asked = spec.get("priorityClassName").and_then(Value::as_str).unwrap_or("").to_string();
    let class = if asked.is_empty() {
        default_priority_class(classes)
    } else {
        Some(classes.iter().find(|c| name(c) == asked).ok_or_else(|| format!("no PriorityClass with name {asked} was found"))?)
    };
    let priority = class.map_or(0, value);
    if let Some(own) = spec.get("priority").and_then(Value::as_i64) {
        if own != priority {
            return Err(format!(
                "the integer value of priority ({own}) must not be provided in pod spec; priority admission controller computed {priority} from the given PriorityClass name"
            ));
        }
    }
    let policy = class.and_then(|c| c.get("preemptionPolicy")).and_then(Value::as_str).unwrap_or(PREEMPT_LOWER_PRIORITY);
    if let Some(own) = spec.get("preemptionPolicy").and_then(Value::as_str) {
        if own != policy && class.is_some() {
            return Err(format!(
                "the string value of PreemptionPolicy ({own}) must not be provided in pod spec; priority admission controller computed {policy} from the given PriorityClass name"
            ));
        }
    }
    if let Some(c) = class {
        spec.insert("priorityClassName".into(), json!(name(c)));
        spec.insert("preemptionPolicy".into(), json!(policy));
    } else {
        spec.entry("preemptionPolicy").or_insert(json!(PREEMPT_LOWER_PRIORITY));
    }
    spec.insert("priority".into(), json!(priority));
    Ok(())
}

/// On a pod update: the priority resolved at creation is kept when the new object omits it.
pub fn keep_pod_priority(old: &Value, new: &mut Value) {
    for field in ["priority", "preemptionPolicy"] {
        let Some(was) = old.pointer(&format!("/spec/{field}")) else { continue };
        if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
            spec.entry(field).or_insert(was.clone());
        }
    }
}

/// A second default: the other class already marked `globalDefault` when `class` (new or
/// changed) claims it too. `Err` is the refusal's text.
pub fn check_single_default(class: &Value, stored: &[Value]) -> Result<(), String> {
    if !is_global_default(class) {
        return Ok(());
    }
    match stored.iter().find(|c| is_global_default(c) && name(c) != name(class)) {
        Some(other) => Err(format!("PriorityClass {} is marked as default. Only one default can exist", name(other))),
        None => Ok(()),
    }
}

/// Defaults of a PriorityClass: `preemptionPolicy: PreemptLowerPriority`.
pub fn default_priority_class_fields(class: &mut Value) {
    if let Some(o) = class.as_object_mut() {
        o.entry("preemptionPolicy").or_insert(json!(PREEMPT_LOWER_PRIORITY));
    }
}

fn forbidden(field: &str, message: String) -> Cause {
    Cause { reason: "FieldValueForbidden", field: field.into(), message: format!("Forbidden: {message}") }
}

/// Kubernetes' `ValidatePriorityClass`.
pub fn validate_priority_class(class: &Value, causes: &mut Vec<Cause>) {
    let n = name(class);
    let v = value(class);
    if class.get("value").and_then(Value::as_i64).is_none() {
        causes.push(Cause::required("value"));
    }
    if n.starts_with(SYSTEM_PREFIX) {
        let why = match SYSTEM_CLASSES.iter().find(|(s, _, _)| *s == n) {
            None => Some(format!("{n} is not a known system priority class")),
            Some((s, want, _)) if *want != v => Some(format!("value of {s} PriorityClass must be {want}")),
            Some((s, _, _)) if is_global_default(class) => Some(format!("globalDefault of {s} PriorityClass must be false")),
            Some(_) => None,
        };
        if let Some(why) = why {
            causes.push(forbidden("metadata.name", format!("priority class names with '{SYSTEM_PREFIX}' prefix are reserved for system use only. error: {why}")));
        }
    } else if v > HIGHEST_USER_DEFINABLE_PRIORITY {
        causes.push(forbidden("value", format!("maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE_PRIORITY}")));
    }
    if let Some(p) = class.get("preemptionPolicy").and_then(Value::as_str) {
        if !["PreemptLowerPriority", "Never"].contains(&p) {
            causes.push(Cause {
                reason: "FieldValueNotSupported",
                field: "preemptionPolicy".into(),
                message: format!("Unsupported value: {p:?}: supported values: \"Never\", \"PreemptLowerPriority\""),
            });
        }
    }
}

/// Kubernetes' `ValidatePriorityClassUpdate`: `value` and `preemptionPolicy` are immutable.
pub fn validate_priority_class_update(old: &Value, new: &Value, causes: &mut Vec<Cause>) {
    if old.get("value") != new.get("value") {
        causes.push(forbidden("value", "may not be changed in an update.".into()));
    }
    if old.get("preemptionPolicy") != new.get("preemptionPolicy") {
        causes.push(Cause::invalid("preemptionPolicy", "Invalid value: field is immutable"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(name: &str, value: i64, default: bool, policy: Option<&str>) -> Value {
        let mut c = json!({"metadata": {"name": name}, "value": value, "globalDefault": default});
        if let Some(p) = policy {
            c["preemptionPolicy"] = json!(p);
        }
        c
    }

    fn pod(spec: Value) -> Value {
        let mut p = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
        p["spec"].as_object_mut().unwrap().extend(spec.as_object().unwrap().clone());
        p
    }

    fn classes() -> Vec<Value> {
        let mut all = system_priority_classes();
        all.push(class("high", 1000, false, Some("PreemptLowerPriority")));
        all.push(class("polite", 500, false, Some("Never")));
        all
    }

    #[test]
    fn a_named_class_gives_its_value_and_policy() {
        let mut p = pod(json!({"priorityClassName": "high"}));
        admit_pod_priority(&mut p, &classes()).unwrap();
        assert_eq!((p["spec"]["priority"].as_i64(), p["spec"]["preemptionPolicy"].as_str()), (Some(1000), Some("PreemptLowerPriority")));
        let mut p = pod(json!({"priorityClassName": "polite"}));
        admit_pod_priority(&mut p, &classes()).unwrap();
        assert_eq!((p["spec"]["priority"].as_i64(), p["spec"]["preemptionPolicy"].as_str()), (Some(500), Some("Never")));
        let mut p = pod(json!({"priorityClassName": "system-node-critical"}));
        admit_pod_priority(&mut p, &classes()).unwrap();
        assert_eq!(p["spec"]["priority"], 2_000_001_000);
    }

    #[test]
    fn no_class_means_the_default_class_or_zero() {
        let mut p = pod(json!({}));
        admit_pod_priority(&mut p, &classes()).unwrap();
        assert_eq!((p["spec"]["priority"].as_i64(), p["spec"]["preemptionPolicy"].as_str()), (Some(0), Some("PreemptLowerPriority")));
        assert!(p["spec"].get("priorityClassName").is_none());
        let mut with_default = classes();
        with_default.push(class("normal", 100, true, Some("Never")));
        with_default.push(class("also-default", 50, true, Some("PreemptLowerPriority")));
        let mut p = pod(json!({}));
        admit_pod_priority(&mut p, &with_default).unwrap();
        assert_eq!(p["spec"]["priorityClassName"], "also-default", "the lowest of two defaults");
        assert_eq!(p["spec"]["priority"], 50);
        // An own priority that matches what would be computed is accepted.
        let mut p = pod(json!({"priority": 0}));
        assert_eq!(admit_pod_priority(&mut p, &classes()), Ok(()));
    }

    #[test]
    fn unknown_classes_and_contradicting_values_are_refused() {
        let mut p = pod(json!({"priorityClassName": "nope"}));
        assert_eq!(admit_pod_priority(&mut p, &classes()), Err("no PriorityClass with name nope was found".into()));
        let mut p = pod(json!({"priorityClassName": "high", "priority": 7}));
        assert_eq!(
            admit_pod_priority(&mut p, &classes()),
            Err("the integer value of priority (7) must not be provided in pod spec; priority admission controller computed 1000 from the given PriorityClass name".into())
        );
        let mut p = pod(json!({"priorityClassName": "polite", "preemptionPolicy": "PreemptLowerPriority"}));
        assert!(admit_pod_priority(&mut p, &classes()).unwrap_err().starts_with("the string value of PreemptionPolicy (PreemptLowerPriority) must not be provided"));
        let mut p = pod(json!({"priority": 5}));
        assert!(admit_pod_priority(&mut p, &[]).unwrap_err().contains("computed 0"));
    }

    #[test]
    fn updates_keep_the_resolved_priority() {
        let old = pod(json!({"priority": 1000, "preemptionPolicy": "Never"}));
        let mut new = pod(json!({}));
        keep_pod_priority(&old, &mut new);
        assert_eq!((new["spec"]["priority"].as_i64(), new["spec"]["preemptionPolicy"].as_str()), (Some(1000), Some("Never")));
    }

    #[test]
    fn only_one_class_is_the_default() {
        let stored = vec![class("a", 1, true, None), class("b", 2, false, None)];
        assert_eq!(check_single_default(&class("c", 3, true, None), &stored), Err("PriorityClass a is marked as default. Only one default can exist".into()));
        assert_eq!(check_single_default(&class("a", 1, true, None), &stored), Ok(()), "the default itself may be updated");
        assert_eq!(check_single_default(&class("b", 2, false, None), &stored), Ok(()));
    }

    fn causes(c: &Value) -> Vec<String> {
        let mut out = Vec::new();
        validate_priority_class(c, &mut out);
        out.into_iter().map(|c| format!("{}: {}", c.field, c.message)).collect()
    }

    #[test]
    fn values_and_reserved_names() {
        assert!(causes(&class("ok", HIGHEST_USER_DEFINABLE_PRIORITY, false, None)).is_empty());
        assert_eq!(causes(&class("big", HIGHEST_USER_DEFINABLE_PRIORITY + 1, false, None)), ["value: Forbidden: maximum allowed value of a user defined priority is 1000000000"]);
        for c in system_priority_classes() {
            assert!(causes(&c).is_empty(), "{c}");
        }
        assert_eq!(
            causes(&class("system-mine", 5, false, None)),
            ["metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: system-mine is not a known system priority class"]
        );
        assert!(causes(&class("system-node-critical", 5, false, None))[0].ends_with("value of system-node-critical PriorityClass must be 2000001000"));
        assert_eq!(causes(&class("x", 1, false, Some("Sometimes"))).len(), 1);
        let mut defaulted = class("x", 1, false, None);
        default_priority_class_fields(&mut defaulted);
        assert_eq!(defaulted["preemptionPolicy"], PREEMPT_LOWER_PRIORITY);
    }

    #[test]
    fn value_and_policy_are_immutable() {
        let mut out = Vec::new();
        validate_priority_class_update(&class("x", 1, false, Some("Never")), &class("x", 1, true, Some("Never")), &mut out);
        assert!(out.is_empty(), "globalDefault and description may change");
        validate_priority_class_update(&class("x", 1, false, Some("Never")), &class("x", 2, false, Some("PreemptLowerPriority")), &mut out);
        assert_eq!(out.iter().map(|c| c.field.as_str()).collect::<Vec<_>>(), ["value", "preemptionPolicy"]);
        assert_eq!(out[0].message, "Forbidden: may not be changed in an update.");
    }
}
