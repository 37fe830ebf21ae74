//! The OpenAPI 3 component schemas of every known kind, generated once from
//! the k8s-openapi `JsonSchema` impls.
//!
//! k8s-openapi already names each schema after its Kubernetes definition
//! (`io.k8s.api.core.v1.Pod`), so no renaming is needed. On top of what
//! schemars produces this module adds what Kubernetes' own documents carry and
//! clients look for: `x-kubernetes-group-version-kind` on top-level kinds and
//! the `<Kind>List` schemas (k8s-openapi's generic `List<T>` has no schema).

use std::collections::BTreeSet;
use std::sync::OnceLock;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, Patch};
use schemars::generate::SchemaSettings;
use serde_json::{json, Map, Value};

use crate::catalog::{group_versions, resources};
use crate::types::{all_types, find_type};

/// Prefix of every schema reference in the generated documents.
pub const REF_PREFIX: &str = "#/components/schemas/";

/// Upper bound on `$ref` / `allOf` indirections followed from one schema.
const MAX_INDIRECTIONS: usize = 32;

static SCHEMAS: OnceLock<Map<String, Value>> = OnceLock::new();

/// All component schemas, keyed by Kubernetes definition name.
pub(crate) fn all_schemas() -> &'static Map<String, Value> {
    SCHEMAS.get_or_init(generate)
}

/// The component schema with this definition name.
pub fn component_schema(name: &str) -> Option<&'static Value> {
    all_schemas().get(name)
}

/// `{"$ref": "#/components/schemas/<name>"}`.
pub(crate) fn schema_ref(name: &str) -> Value {
    json!({ "$ref": format!("{REF_PREFIX}{name}") })
}

/// The definition name a `$ref` string points at, if it points into components.
pub(crate) fn ref_target(reference: &str) -> Option<&str> {
    reference.strip_prefix(REF_PREFIX)
}

fn generate() -> Map<String, Value> {
    let mut generator = SchemaSettings::openapi3().into_generator();
    for entry in all_types() {
        (entry.register)(&mut generator);
    }
    generator.subschema_for::<ListMeta>();
    generator.subschema_for::<Patch>();
    let mut defs = generator.take_definitions(true);
    add_group_version_kinds(&mut defs);
    add_list_schemas(&mut defs);
    defs
}

fn gvk(group: &str, version: &str, kind: &str) -> Value {
    json!({ "group": group, "kind": kind, "version": version })
}

/// Appends `gvk` to the schema's `x-kubernetes-group-version-kind` list.
fn push_gvk(defs: &mut Map<String, Value>, name: &str, gvk: Value) {
    let Some(Value::Object(schema)) = defs.get_mut(name) else {
        return;
    };
    let list = schema
        .entry("x-kubernetes-group-version-kind")
        .or_insert_with(|| Value::Array(Vec::new()));
    if let Value::Array(items) = list {
        if !items.contains(&gvk) {
            items.push(gvk);
        }
    }
}

fn add_group_version_kinds(defs: &mut Map<String, Value>) {
    for entry in all_types() {
        let name = (entry.schema_name)();
        if entry.any_group {
            // Like Kubernetes: DeleteOptions is listed once per group version.
            push_gvk(defs, &name, gvk(entry.group, entry.version, entry.kind));
            for gv in group_versions() {
                push_gvk(defs, &name, gvk(gv.group, gv.version, entry.kind));
            }
        } else {
            push_gvk(defs, &name, gvk(entry.group, entry.version, entry.kind));
        }
    }
}

/// The definition name of a kind's list type: `io.k8s.api.core.v1.PodList`.
pub(crate) fn list_schema_name(item_schema: &str, list_kind: &str) -> String {
    match item_schema.rsplit_once('.') {
        Some((prefix, _)) => format!("{prefix}.{list_kind}"),
        None => list_kind.to_owned(),
    }
}

fn add_list_schemas(defs: &mut Map<String, Value>) {
    for info in resources() {
        let (Some(list_kind), Some(entry)) = (
            info.list_kind,
            find_type(info.group, info.version, info.kind),
        ) else {
            continue;
        };
        let item_name = (entry.schema_name)();
        let item_props = defs
            .get(item_name.as_ref())
            .and_then(|s| s.get("properties"))
            .cloned()
            .unwrap_or(Value::Null);
        let type_meta = |field: &str| {
            item_props
                .get(field)
                .cloned()
                .unwrap_or_else(|| json!({ "type": "string" }))
        };
        let list = json!({
            "description": format!("{list_kind} is a list of {} objects.", info.kind),
            "type": "object",
            "properties": {
                "apiVersion": type_meta("apiVersion"),
                "kind": type_meta("kind"),
                "items": {
                    "description": format!("List of {} objects.", info.kind),
                    "type": "array",
                    "items": schema_ref(&item_name),
                },
                "metadata": {
                    "description": "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds",
                    "allOf": [schema_ref("io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta")],
                },
            },
            "required": ["items"],
            "x-kubernetes-group-version-kind": [gvk(info.group, info.version, list_kind)],
        });
        defs.insert(list_schema_name(&item_name, list_kind), list);
    }
}

/// The schema objects that together describe one value: `schema` itself and,
/// transitively, the targets of its `$ref`s and the members of its `allOf`s.
pub(crate) fn flatten<'a>(
    defs: &'a Map<String, Value>,
    schema: &'a Value,
) -> Vec<&'a Map<String, Value>> {
    let mut out = Vec::new();
    let mut pending = vec![schema];
    let mut seen_refs: BTreeSet<&str> = BTreeSet::new();
    while let Some(current) = pending.pop() {
        let Value::Object(object) = current else {
            continue;
        };
        if out.len() >= MAX_INDIRECTIONS {
            break;
        }
        out.push(object);
        if let Some(Value::String(reference)) = object.get("$ref") {
            if seen_refs.insert(reference) {
                if let Some(target) = ref_target(reference).and_then(|name| defs.get(name)) {
                    pending.push(target);
                }
            }
        }
        if let Some(Value::Array(members)) = object.get("allOf") {
            pending.extend(members.iter().rev());
        }
    }
    out
}

/// Every schema name referenced (directly or transitively) from `roots`,
/// including the roots themselves.
pub(crate) fn reachable(defs: &Map<String, Value>, roots: &[String]) -> BTreeSet<String> {
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut pending: Vec<String> = roots.to_vec();
    while let Some(name) = pending.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        if let Some(schema) = defs.get(&name) {
            collect_refs(schema, &mut |target| {
                if !seen.contains(target) {
                    pending.push(target.to_owned());
                }
            });
        }
    }
    seen
}

/// Calls `found` with the target name of every `$ref` anywhere inside `value`.
pub(crate) fn collect_refs(value: &Value, found: &mut impl FnMut(&str)) {
    match value {
        Value::Object(object) => {
            for (key, child) in object {
                match (key.as_str(), child) {
                    ("$ref", Value::String(reference)) => {
                        if let Some(target) = ref_target(reference) {
                            found(target);
                        }
                    }
                    _ => collect_refs(child, found),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| collect_refs(item, found)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_schemas_carry_their_group_version_kind() {
        let pod = component_schema("io.k8s.api.core.v1.Pod").unwrap();
        assert_eq!(
            pod["x-kubernetes-group-version-kind"],
            json!([{ "group": "", "kind": "Pod", "version": "v1" }])
        );
        let deploy = component_schema("io.k8s.api.apps.v1.Deployment").unwrap();
        assert_eq!(
            deploy["x-kubernetes-group-version-kind"],
            json!([{ "group": "apps", "kind": "Deployment", "version": "v1" }])
        );
        // Nested types are not kinds.
        let spec = component_schema("io.k8s.api.core.v1.PodSpec").unwrap();
        assert!(spec.get("x-kubernetes-group-version-kind").is_none());
        let delete =
            component_schema("io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions").unwrap();
        let gvks = delete["x-kubernetes-group-version-kind"]
            .as_array()
            .unwrap();
        assert!(
            gvks.contains(&json!({ "group": "apps", "kind": "DeleteOptions", "version": "v1" }))
        );
        assert!(gvks.contains(&json!({ "group": "", "kind": "DeleteOptions", "version": "v1" })));
    }

    #[test]
    fn list_schemas_are_synthesised() {
        let list = component_schema("io.k8s.api.core.v1.PodList").unwrap();
        assert_eq!(
            list["properties"]["items"]["items"],
            schema_ref("io.k8s.api.core.v1.Pod")
        );
        assert_eq!(
            list["x-kubernetes-group-version-kind"][0]["kind"],
            "PodList"
        );
        assert!(component_schema("io.k8s.api.core.v1.BindingList").is_none());
        assert!(component_schema("io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta").is_some());
    }

    #[test]
    fn descriptions_survive_and_refs_with_siblings_become_all_of() {
        let pod = component_schema("io.k8s.api.core.v1.Pod").unwrap();
        let spec = &pod["properties"]["spec"];
        assert!(spec["description"]
            .as_str()
            .unwrap()
            .contains("desired behavior"));
        assert_eq!(
            spec["allOf"],
            json!([schema_ref("io.k8s.api.core.v1.PodSpec")])
        );
        let container = component_schema("io.k8s.api.core.v1.Container").unwrap();
        assert!(container["properties"]["image"]["description"].is_string());
    }

    #[test]
    fn flatten_follows_refs_and_all_of() {
        let defs = all_schemas();
        let pod = &defs["io.k8s.api.core.v1.Pod"];
        let parts = flatten(defs, &pod["properties"]["spec"]);
        assert!(parts.iter().any(|p| p
            .get("properties")
            .is_some_and(|props| props.get("containers").is_some())));
        let cyclic = json!({ "$ref": "#/components/schemas/x" });
        let mut defs = Map::new();
        defs.insert(
            "x".into(),
            json!({ "allOf": [{ "$ref": "#/components/schemas/x" }] }),
        );
        assert!(flatten(&defs, &cyclic).len() <= 3);
    }

    #[test]
    fn reachable_closes_over_refs() {
        let names = reachable(all_schemas(), &["io.k8s.api.core.v1.Pod".to_owned()]);
        assert!(names.contains("io.k8s.api.core.v1.Container"));
        assert!(names.contains("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"));
        assert!(names.contains("io.k8s.apimachinery.pkg.api.resource.Quantity"));
        assert!(!names.contains("io.k8s.api.apps.v1.Deployment"));
    }

    #[test]
    fn list_names() {
        assert_eq!(
            list_schema_name("io.k8s.api.core.v1.Pod", "PodList"),
            "io.k8s.api.core.v1.PodList"
        );
    }
}
