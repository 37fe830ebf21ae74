//! `k8s.io/apimachinery/pkg/apis/meta/v1` types: `ObjectMeta`,
//! `OwnerReference`, `ManagedFieldsEntry`, `LabelSelector`, `DeleteOptions`.
//!
//! Conversion failures are [`ConvertError`]s (from [`crate::json`]); this
//! module adds no error type of its own.

use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use serde_json::Value;

use crate::json::{ConvertError, Obj, Result};

/// `ObjectMeta` with Kubernetes JSON names; a zero `creationTimestamp`
/// (Go's `null`) is omitted.
pub fn object_meta(m: &meta::ObjectMeta) -> Result<Value> {
    let mut o = Obj::new();
    o.string("name", &m.name)
        .string("generateName", &m.generate_name)
        .string("namespace", &m.namespace)
        .string("selfLink", &m.self_link)
        .string("uid", &m.uid)
        .string("resourceVersion", &m.resource_version)
        .int("generation", m.generation);
    o.time("creationTimestamp", &m.creation_timestamp)?;
    o.time("deletionTimestamp", &m.deletion_timestamp)?;
    o.int_kept(
        "deletionGracePeriodSeconds",
        m.deletion_grace_period_seconds,
    )
    .string_map("labels", &m.labels)
    .string_map("annotations", &m.annotations);
    o.messages("ownerReferences", &m.owner_references, owner_reference)?;
    o.strings("finalizers", &m.finalizers);
    o.messages("managedFields", &m.managed_fields, managed_fields_entry)?;
    Ok(o.build())
}

/// `OwnerReference`; `apiVersion`, `kind`, `name` and `uid` are required
/// fields and so are kept even when empty.
pub fn owner_reference(r: &meta::OwnerReference) -> Result<Value> {
    Ok(Obj::new()
        .string_kept("apiVersion", &r.api_version)
        .string_kept("kind", &r.kind)
        .string_kept("name", &r.name)
        .string_kept("uid", &r.uid)
        .boolean_kept("controller", r.controller)
        .boolean_kept("blockOwnerDeletion", r.block_owner_deletion)
        .build())
}

/// `ManagedFieldsEntry`; `fieldsV1` carries raw JSON, which is embedded
/// as a JSON value.
pub fn managed_fields_entry(e: &meta::ManagedFieldsEntry) -> Result<Value> {
    let mut o = Obj::new();
    o.string("manager", &e.manager)
        .string("operation", &e.operation)
        .string("apiVersion", &e.api_version);
    o.time("time", &e.time)?;
    o.string("fieldsType", &e.fields_type);
    if let Some(fields) = &e.fields_v1 {
        let raw = fields.raw.as_deref().unwrap_or(b"{}");
        let raw = if raw.is_empty() { &b"{}"[..] } else { raw };
        let value: Value = serde_json::from_slice(raw).map_err(|_| {
            ConvertError::UnsupportedField("metadata.managedFields.fieldsV1 (not JSON)".into())
        })?;
        o.put("fieldsV1", value);
    }
    o.string("subresource", &e.subresource);
    Ok(o.build())
}

/// `LabelSelector` (`matchLabels`, `matchExpressions`); an empty selector
/// stays `{}`, which selects everything.
pub fn label_selector(s: &meta::LabelSelector) -> Result<Value> {
    let mut o = Obj::new();
    o.string_map("matchLabels", &s.match_labels);
    o.messages(
        "matchExpressions",
        &s.match_expressions,
        label_selector_requirement,
    )?;
    Ok(o.build())
}

/// `LabelSelectorRequirement`; `key` and `operator` are required.
pub fn label_selector_requirement(r: &meta::LabelSelectorRequirement) -> Result<Value> {
    Ok(Obj::new()
        .string_kept("key", &r.key)
        .string_kept("operator", &r.operator)
        .strings("values", &r.values)
        .build())
}

/// `FieldSelectorRequirement`; `key` and `operator` are required.
pub fn field_selector_requirement(r: &meta::FieldSelectorRequirement) -> Result<Value> {
    Ok(Obj::new()
        .string_kept("key", &r.key)
        .string_kept("operator", &r.operator)
        .strings("values", &r.values)
        .build())
}

/// `DeleteOptions` as embedded in an `Eviction`.
pub fn delete_options(d: &meta::DeleteOptions) -> Result<Value> {
    let mut o = Obj::new();
    o.int_kept("gracePeriodSeconds", d.grace_period_seconds);
    o.message("preconditions", &d.preconditions, |p| {
        Ok(Obj::new()
            .string_kept("uid", &p.uid)
            .string_kept("resourceVersion", &p.resource_version)
            .build())
    })?;
    o.boolean_kept("orphanDependents", d.orphan_dependents)
        .string_kept("propagationPolicy", &d.propagation_policy)
        .strings("dryRun", &d.dry_run)
        .boolean_kept(
            "ignoreStoreReadErrorWithClusterBreakingPotential",
            d.ignore_store_read_error_with_cluster_breaking_potential,
        );
    Ok(o.build())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn s(v: &str) -> Option<String> {
        Some(v.to_owned())
    }

    /// What the Go marshaller writes for a fresh object: every non-pointer
    /// field present with its zero value.
    fn gogo_empty_meta() -> meta::ObjectMeta {
        meta::ObjectMeta {
            name: s(""),
            generate_name: s(""),
            namespace: s(""),
            self_link: s(""),
            uid: s(""),
            resource_version: s(""),
            generation: Some(0),
            creation_timestamp: Some(meta::Time::default()),
            ..Default::default()
        }
    }

    #[test]
    fn zero_valued_meta_is_empty() {
        assert_eq!(object_meta(&gogo_empty_meta()).unwrap(), json!({}));
    }

    #[test]
    fn full_meta() {
        let mut m = gogo_empty_meta();
        m.name = s("web");
        m.namespace = s("prod");
        m.generate_name = s("web-");
        m.generation = Some(4);
        m.creation_timestamp = Some(meta::Time {
            seconds: Some(1_700_000_000),
            nanos: Some(0),
        });
        m.deletion_grace_period_seconds = Some(0);
        m.labels.insert("app".into(), "web".into());
        m.annotations.insert("note".into(), "".into());
        m.finalizers.push("example.com/f".into());
        m.owner_references.push(meta::OwnerReference {
            api_version: s("apps/v1"),
            kind: s("ReplicaSet"),
            name: s("web-1"),
            uid: s("u-1"),
            controller: Some(true),
            block_owner_deletion: None,
        });
        m.managed_fields.push(meta::ManagedFieldsEntry {
            manager: s("kubectl"),
            operation: s("Update"),
            fields_type: s("FieldsV1"),
            fields_v1: Some(meta::FieldsV1 {
                raw: Some(br#"{"f:spec":{}}"#.to_vec()),
            }),
            ..Default::default()
        });
        assert_eq!(
            object_meta(&m).unwrap(),
            json!({
                "name": "web", "namespace": "prod", "generateName": "web-", "generation": 4,
                "creationTimestamp": "2023-11-14T22:13:20Z",
                "deletionGracePeriodSeconds": 0,
                "labels": {"app": "web"}, "annotations": {"note": ""},
                "finalizers": ["example.com/f"],
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": "web-1", "uid": "u-1", "controller": true}],
                "managedFields": [{"manager": "kubectl", "operation": "Update",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]
            })
        );
    }

    #[test]
    fn bad_fields_v1_is_an_error() {
        let mut m = gogo_empty_meta();
        m.managed_fields.push(meta::ManagedFieldsEntry {
            fields_v1: Some(meta::FieldsV1 {
                raw: Some(b"{not json".to_vec()),
            }),
            ..Default::default()
        });
        assert!(matches!(
            object_meta(&m),
            Err(ConvertError::UnsupportedField(_))
        ));
    }

    #[test]
    fn selectors() {
        let sel = meta::LabelSelector {
            match_labels: [("app".to_owned(), "web".to_owned())].into(),
            match_expressions: vec![meta::LabelSelectorRequirement {
                key: s("tier"),
                operator: s("In"),
                values: vec!["fe".into(), "be".into()],
            }],
        };
        assert_eq!(
            label_selector(&sel).unwrap(),
            json!({"matchLabels": {"app": "web"},
                   "matchExpressions": [{"key": "tier", "operator": "In", "values": ["fe", "be"]}]})
        );
        assert_eq!(
            label_selector(&meta::LabelSelector::default()).unwrap(),
            json!({})
        );
    }

    #[test]
    fn delete_options_keep_pointers() {
        let d = meta::DeleteOptions {
            grace_period_seconds: Some(0),
            preconditions: Some(meta::Preconditions {
                uid: s("u"),
                resource_version: None,
            }),
            dry_run: vec!["All".into()],
            ..Default::default()
        };
        assert_eq!(
            delete_options(&d).unwrap(),
            json!({"gracePeriodSeconds": 0, "preconditions": {"uid": "u"}, "dryRun": ["All"]})
        );
    }
}
