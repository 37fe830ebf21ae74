//! Unknown-field detection for `fieldValidation=Strict|Warn`.
//!
//! The object is walked against the kind's OpenAPI schema. Paths are spelled
//! the way Kubernetes' strict decoder spells them: fields and map keys joined
//! with `.`, list indices in brackets (`spec.containers[0].imagee`).

use serde_json::{Map, Value};

use crate::schemas::{all_schemas, flatten};
use crate::types::find_type;

/// Kubernetes-style messages for every unknown field in `obj`, e.g.
/// `unknown field "spec.containers[0].imagee"`, in document (key) order.
///
/// Unknown kinds yield no messages (type-check them with [`crate::typecheck`]).
pub fn unknown_fields(group: &str, version: &str, kind: &str, obj: &Value) -> Vec<String> {
    unknown_field_paths(group, version, kind, obj)
        .into_iter()
        .map(|path| format!("unknown field {path:?}"))
        .collect()
}

/// The bare paths of every unknown field in `obj` (`spec.containers[0].imagee`).
pub fn unknown_field_paths(group: &str, version: &str, kind: &str, obj: &Value) -> Vec<String> {
    let Some(entry) = find_type(group, version, kind) else {
        return Vec::new();
    };
    let defs = all_schemas();
    let Some(root) = defs.get((entry.schema_name)().as_ref()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut path = String::new();
    walk(defs, root, obj, &mut path, &mut out);
    out
}

/// Schemas whose values are not checked at all.
fn accepts_anything(part: &Map<String, Value>) -> bool {
    let flag = |name: &str| part.get(name).and_then(Value::as_bool) == Some(true);
    flag("x-kubernetes-preserve-unknown-fields") || flag("x-kubernetes-int-or-string")
}

/// Appends `.key` (or `key` at the root) to `path`.
pub(crate) fn push_field(path: &mut String, key: &str) {
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(key);
}

/// Appends `[index]` to `path`.
pub(crate) fn push_index(path: &mut String, index: usize) {
    path.push('[');
    path.push_str(&index.to_string());
    path.push(']');
}

/// Where a member of an object value is described.
pub(crate) enum Member<'a> {
    /// A declared property, or a map value, with this schema.
    Schema(&'a Value),
    /// Allowed, but not described (`additionalProperties: true`, free-form objects).
    Free,
    /// Not allowed: an unknown field.
    Unknown,
}

/// How the schema parts of an object describe its members.
pub(crate) struct ObjectShape<'a> {
    properties: Vec<&'a Map<String, Value>>,
    additional: Option<&'a Value>,
}

impl<'a> ObjectShape<'a> {
    pub(crate) fn of(parts: &[&'a Map<String, Value>]) -> ObjectShape<'a> {
        ObjectShape {
            properties: parts
                .iter()
                .filter_map(|p| p.get("properties").and_then(Value::as_object))
                .collect(),
            additional: parts.iter().find_map(|p| p.get("additionalProperties")),
        }
    }

    pub(crate) fn member(&self, key: &str) -> Member<'a> {
        if let Some(schema) = self.properties.iter().find_map(|props| props.get(key)) {
            return Member::Schema(schema);
        }
        match self.additional {
            // An object schema without properties or additionalProperties is
            // free-form (RawExtension, FieldsV1, JSON, Patch).
            None if self.properties.is_empty() => Member::Free,
            None | Some(Value::Bool(false)) => Member::Unknown,
            Some(Value::Bool(_)) => Member::Free,
            Some(schema) => Member::Schema(schema),
        }
    }
}

fn walk(
    defs: &Map<String, Value>,
    schema: &Value,
    value: &Value,
    path: &mut String,
    out: &mut Vec<String>,
) {
    let parts = flatten(defs, schema);
    if parts.iter().any(|p| accepts_anything(p)) {
        return;
    }
    match value {
        Value::Object(members) => {
            let shape = ObjectShape::of(&parts);
            let at_root = path.is_empty();
            for (key, child) in members {
                let len = path.len();
                push_field(path, key);
                match shape.member(key) {
                    Member::Schema(sub) => walk(defs, sub, child, path, out),
                    Member::Free => {}
                    Member::Unknown if at_root && matches!(key.as_str(), "apiVersion" | "kind") => {
                    }
                    Member::Unknown => out.push(path.clone()),
                }
                path.truncate(len);
            }
        }
        Value::Array(items) => {
            let Some(item_schema) = parts.iter().find_map(|p| p.get("items")) else {
                return;
            };
            for (index, item) in items.iter().enumerate() {
                let len = path.len();
                push_index(path, index);
                walk(defs, item_schema, item, path, out);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(container: Value) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "p",
                "labels": { "app": "web" },
                "annotations": { "example.com/anything": "goes", "other": "x" },
            },
            "spec": { "containers": [container] },
        })
    }

    #[test]
    fn finds_misspelled_container_field() {
        let obj = pod(json!({ "name": "c", "imagee": "nginx" }));
        assert_eq!(
            unknown_fields("", "v1", "Pod", &obj),
            vec![r#"unknown field "spec.containers[0].imagee""#.to_owned()]
        );
    }

    #[test]
    fn finds_misspelled_metadata_field() {
        let obj = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": "x", "labelz": { "a": "b" } },
            "data": { "k": "v" },
        });
        assert_eq!(
            unknown_field_paths("", "v1", "ConfigMap", &obj),
            vec!["metadata.labelz"]
        );
    }

    #[test]
    fn reports_every_unknown_field_at_every_depth() {
        let obj = json!({
            "apiVersion": "v1", "kind": "Pod", "bogus": 1,
            "metadata": { "name": "p" },
            "spec": {
                "containers": [
                    { "name": "a", "image": "x" },
                    { "name": "b", "image": "y", "ports": [{ "containerPort": 80, "hostPorrt": 1 }] },
                ],
                "nodeSelector": { "disk": "ssd" },
                "securityContext": { "runAsUser": 1, "runAsUserr": 2 },
            },
        });
        assert_eq!(
            unknown_field_paths("", "v1", "Pod", &obj),
            vec![
                "bogus",
                "spec.containers[1].ports[0].hostPorrt",
                "spec.securityContext.runAsUserr",
            ]
        );
    }

    #[test]
    fn accepts_quantities_maps_and_int_or_string() {
        let obj = pod(json!({
            "name": "c",
            "image": "nginx",
            "resources": {
                "limits": { "cpu": "500m", "memory": "128Mi" },
                "requests": { "cpu": 0.25, "nvidia.com/gpu": 1 },
            },
            "livenessProbe": { "httpGet": { "path": "/", "port": "http" } },
        }));
        assert!(unknown_fields("", "v1", "Pod", &obj).is_empty());

        let svc = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": { "name": "s" },
            "spec": {
                "selector": { "app": "web" },
                "ports": [
                    { "port": 80, "targetPort": 8080 },
                    { "port": 443, "targetPort": "https" },
                ],
            },
        });
        assert!(unknown_fields("", "v1", "Service", &svc).is_empty());
    }

    #[test]
    fn free_form_objects_accept_anything() {
        let obj = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "p",
                "creationTimestamp": null,
                "managedFields": [{
                    "manager": "kubectl", "operation": "Apply",
                    "fieldsV1": { "f:metadata": { "f:labels": { ".": {} } } },
                }],
            },
            "spec": { "containers": [] },
        });
        assert!(unknown_fields("", "v1", "Pod", &obj).is_empty());
    }

    #[test]
    fn deployment_template_is_checked() {
        let obj = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": "d" },
            "spec": {
                "replicas": 2,
                "selector": { "matchLabels": { "app": "web" } },
                "strategy": { "rollingUpdate": { "maxSurge": "25%", "maxUnavailable": 0 } },
                "template": {
                    "metadata": { "labels": { "app": "web" } },
                    "spec": { "containers": [{ "name": "c", "image": "nginx", "commnd": ["sh"] }] },
                },
            },
        });
        assert_eq!(
            unknown_fields("apps", "v1", "Deployment", &obj),
            vec![r#"unknown field "spec.template.spec.containers[0].commnd""#.to_owned()]
        );
    }

    #[test]
    fn subresource_and_meta_kinds_are_checked() {
        let scale = json!({ "apiVersion": "autoscaling/v1", "kind": "Scale",
            "metadata": { "name": "d" }, "spec": { "replicas": 3, "replica": 1 } });
        assert_eq!(
            unknown_field_paths("autoscaling", "v1", "Scale", &scale),
            vec!["spec.replica"]
        );
        let opts = json!({ "kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground", "graceSeconds": 1 });
        assert_eq!(
            unknown_field_paths("", "v1", "DeleteOptions", &opts),
            vec!["graceSeconds"]
        );
    }

    #[test]
    fn unknown_kind_reports_nothing() {
        assert!(unknown_fields("example.com", "v1", "Widget", &json!({ "x": 1 })).is_empty());
    }

    #[test]
    fn object_shape_rules() {
        let declared = json!({ "properties": { "a": { "type": "string" } } });
        let free = json!({ "type": "object" });
        let map = json!({ "type": "object", "additionalProperties": { "type": "string" } });
        let shape_of = |v: &Value| {
            let parts = vec![v.as_object().unwrap()];
            matches!(ObjectShape::of(&parts).member("b"), Member::Unknown)
        };
        assert!(shape_of(&declared));
        assert!(!shape_of(&free));
        assert!(!shape_of(&map));
    }
}
