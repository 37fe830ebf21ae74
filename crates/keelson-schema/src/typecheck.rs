//! Structural type checking of request bodies.
//!
//! The object is deserialised into its k8s-openapi type, which rejects values
//! of the wrong JSON type (`spec.replicas: "abc"`), bad base64 in
//! `Secret.data`, malformed timestamps and a mismatching `apiVersion`/`kind`. serde reports no location, so when it fails the
//! object is also walked against the kind's schema to name the offending
//! field.
//!
//! Like Kubernetes' decoder, a *missing* field is not a type error (whether it
//! is required is for validation to decide), so k8s-openapi's "missing field"
//! errors are not reported; the schema walk still finds type errors elsewhere.

use serde_json::{Map, Value};

use crate::schemas::{all_schemas, flatten};
use crate::types::find_type;
use crate::unknown::{push_field, push_index, Member, ObjectShape};

/// Why an object cannot be handled as the requested kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// This crate has no type for the group, version and kind.
    #[error("no kind {kind:?} is registered for version {api_version:?}")]
    UnknownKind { api_version: String, kind: String },
    /// The body is not a JSON object.
    #[error("expected a JSON object, got {found}")]
    NotAnObject { found: String },
    /// A value has the wrong type; `path` names it when it could be located.
    #[error("{}", match path {
        Some(path) => format!("{path}: {message}"),
        None => message.clone(),
    })]
    InvalidValue {
        path: Option<String>,
        message: String,
    },
}

/// Checks that `obj` deserialises as the k8s-openapi type of
/// `group`/`version`/`kind`.
pub fn typecheck(group: &str, version: &str, kind: &str, obj: &Value) -> Result<(), SchemaError> {
    let entry = find_type(group, version, kind).ok_or_else(|| SchemaError::UnknownKind {
        api_version: crate::catalog::group_version_string(group, version),
        kind: kind.to_owned(),
    })?;
    if !obj.is_object() {
        return Err(SchemaError::NotAnObject {
            found: describe(obj),
        });
    }
    let serde_error = match (entry.check)(obj) {
        Ok(()) => return Ok(()),
        Err(error) => error,
    };
    let located = all_schemas()
        .get((entry.schema_name)().as_ref())
        .and_then(|root| first_mismatch(all_schemas(), root, obj));
    if let Some(mismatch) = located {
        return Err(mismatch);
    }
    let message = serde_error.to_string();
    if message.starts_with("missing field") {
        return Ok(());
    }
    Err(SchemaError::InvalidValue {
        path: None,
        message,
    })
}

/// A short description of a JSON value for error messages, in serde's style.
fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => format!("boolean `{b}`"),
        Value::Number(n) if n.is_f64() => format!("floating point `{n}`"),
        Value::Number(n) => format!("integer `{n}`"),
        Value::String(s) => format!("string {s:?}"),
        Value::Array(_) => "sequence".to_owned(),
        Value::Object(_) => "map".to_owned(),
    }
}

/// Whether `value` is acceptable for a schema `type`.
fn type_matches(ty: &str, value: &Value) -> bool {
    match ty {
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        _ => true,
    }
}

/// The first value (in key order) whose JSON type contradicts the schema.
fn first_mismatch(defs: &Map<String, Value>, root: &Value, obj: &Value) -> Option<SchemaError> {
    let mut path = String::new();
    find_mismatch(defs, root, obj, &mut path)
}

fn find_mismatch(
    defs: &Map<String, Value>,
    schema: &Value,
    value: &Value,
    path: &mut String,
) -> Option<SchemaError> {
    // JSON null decodes to the zero value of any field.
    if value.is_null() {
        return None;
    }
    let parts = flatten(defs, schema);
    let flag = |name: &str| {
        parts
            .iter()
            .any(|p| p.get(name).and_then(Value::as_bool) == Some(true))
    };
    if flag("x-kubernetes-preserve-unknown-fields") {
        return None;
    }
    if flag("x-kubernetes-int-or-string") {
        if value.is_string() || value.is_number() {
            return None;
        }
        return Some(mismatch(path, "an integer or a string", value));
    }
    if let Some(ty) = parts
        .iter()
        .find_map(|p| p.get("type").and_then(Value::as_str))
    {
        if !type_matches(ty, value) {
            return Some(mismatch(path, ty, value));
        }
    }
    match value {
        Value::Object(members) => {
            let shape = ObjectShape::of(&parts);
            for (key, child) in members {
                if let Member::Schema(sub) = shape.member(key) {
                    let len = path.len();
                    push_field(path, key);
                    let found = find_mismatch(defs, sub, child, path);
                    path.truncate(len);
                    if found.is_some() {
                        return found;
                    }
                }
            }
            None
        }
        Value::Array(items) => {
            let item_schema = parts.iter().find_map(|p| p.get("items"))?;
            items.iter().enumerate().find_map(|(index, item)| {
                let len = path.len();
                push_index(path, index);
                let found = find_mismatch(defs, item_schema, item, path);
                path.truncate(len);
                found
            })
        }
        _ => None,
    }
}

fn mismatch(path: &str, expected: &str, value: &Value) -> SchemaError {
    SchemaError::InvalidValue {
        path: (!path.is_empty()).then(|| path.to_owned()),
        message: format!("invalid type: {}, expected {expected}", describe(value)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(replicas: Value) -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": { "name": "web", "labels": { "app": "web" } },
            "spec": {
                "replicas": replicas,
                "selector": { "matchLabels": { "app": "web" } },
                "template": {
                    "metadata": { "labels": { "app": "web" } },
                    "spec": { "containers": [{
                        "name": "nginx", "image": "nginx:1.27",
                        "ports": [{ "containerPort": 80 }],
                        "resources": { "limits": { "cpu": "1", "memory": "64Mi" }, "requests": { "cpu": 0.5 } },
                    }] },
                },
            },
        })
    }

    #[test]
    fn accepts_valid_pod_and_deployment() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": { "name": "p", "namespace": "default", "creationTimestamp": null,
                          "annotations": { "a": "b" } },
            "spec": {
                "containers": [{ "name": "c", "image": "busybox", "command": ["sleep", "3600"],
                                 "env": [{ "name": "X", "value": "1" }] }],
                "restartPolicy": "Always",
            },
            "status": {},
        });
        assert_eq!(typecheck("", "v1", "Pod", &pod), Ok(()));
        assert_eq!(
            typecheck("apps", "v1", "Deployment", &deployment(json!(3))),
            Ok(())
        );
    }

    #[test]
    fn rejects_string_replicas_with_path() {
        let err = typecheck("apps", "v1", "Deployment", &deployment(json!("abc"))).unwrap_err();
        assert_eq!(
            err,
            SchemaError::InvalidValue {
                path: Some("spec.replicas".to_owned()),
                message: r#"invalid type: string "abc", expected integer"#.to_owned(),
            }
        );
        assert_eq!(
            err.to_string(),
            r#"spec.replicas: invalid type: string "abc", expected integer"#
        );
    }

    #[test]
    fn rejects_fractional_integers_and_wrong_types_in_lists_and_maps() {
        let err = typecheck("apps", "v1", "Deployment", &deployment(json!(1.5))).unwrap_err();
        assert!(
            matches!(err, SchemaError::InvalidValue { path: Some(ref p), .. } if p == "spec.replicas")
        );

        let mut obj = deployment(json!(1));
        obj["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = json!("80");
        let err = typecheck("apps", "v1", "Deployment", &obj).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("spec.template.spec.containers[0].ports[0].containerPort: "),
            "{err}"
        );

        let cm = json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "c" },
                        "data": { "port": 8080 } });
        let err = typecheck("", "v1", "ConfigMap", &cm).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("data.port: invalid type: integer `8080`"),
            "{err}"
        );
    }

    #[test]
    fn int_or_string_and_quantity_accept_numbers_and_strings() {
        let svc = json!({ "apiVersion": "v1", "kind": "Service", "metadata": { "name": "s" },
            "spec": { "ports": [{ "port": 80, "targetPort": "http" }, { "port": 81, "targetPort": 8081 }] } });
        assert_eq!(typecheck("", "v1", "Service", &svc), Ok(()));
        let bad = json!({ "apiVersion": "v1", "kind": "Service", "metadata": { "name": "s" },
            "spec": { "ports": [{ "port": 80, "targetPort": true }] } });
        let err = typecheck("", "v1", "Service", &bad).unwrap_err();
        assert!(
            err.to_string().starts_with("spec.ports[0].targetPort: "),
            "{err}"
        );
    }

    #[test]
    fn errors_serde_finds_without_a_schema_type_are_reported_without_path() {
        let secret = json!({ "apiVersion": "v1", "kind": "Secret", "metadata": { "name": "s" },
                            "data": { "k": "not base64!!" } });
        let err = typecheck("", "v1", "Secret", &secret).unwrap_err();
        assert!(
            matches!(err, SchemaError::InvalidValue { path: None, .. }),
            "{err:?}"
        );

        let wrong_version = json!({ "apiVersion": "apps/v1beta1", "kind": "Deployment" });
        assert!(typecheck("apps", "v1", "Deployment", &wrong_version).is_err());
    }

    #[test]
    fn missing_fields_are_not_type_errors() {
        // events.k8s.io/v1 Event's eventTime is required by k8s-openapi.
        let ev = json!({ "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": { "name": "e" } });
        assert_eq!(typecheck("events.k8s.io", "v1", "Event", &ev), Ok(()));
        let bad = json!({ "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": { "name": "e" },
                          "deprecatedCount": "many" });
        assert!(typecheck("events.k8s.io", "v1", "Event", &bad).is_err());
    }

    #[test]
    fn unknown_kinds_and_non_objects_are_rejected() {
        assert_eq!(
            typecheck("apps", "v1", "Widget", &json!({})),
            Err(SchemaError::UnknownKind {
                api_version: "apps/v1".into(),
                kind: "Widget".into()
            })
        );
        assert_eq!(
            typecheck("", "v1", "Pod", &json!([1])),
            Err(SchemaError::NotAnObject {
                found: "sequence".into()
            })
        );
    }

    #[test]
    fn delete_options_from_any_group() {
        let opts = json!({ "kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1", "gracePeriodSeconds": 0 });
        assert_eq!(
            typecheck("meta.k8s.io", "v1", "DeleteOptions", &opts),
            Ok(())
        );
        let bad = json!({ "kind": "DeleteOptions", "gracePeriodSeconds": "now" });
        assert!(typecheck("apps", "v1", "DeleteOptions", &bad).is_err());
    }
}
