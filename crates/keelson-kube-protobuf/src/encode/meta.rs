//! Encoders for `k8s.io/apimachinery/pkg/apis/meta/v1` types:
//! `ObjectMeta`, `ListMeta`, `OwnerReference`, `ManagedFieldsEntry`,
//! `Status`.

use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;

use super::fields::{Fields, Result};

/// `ObjectMeta`, every field.
pub fn object_meta(f: &mut Fields<'_>) -> Result<meta::ObjectMeta> {
    Ok(meta::ObjectMeta {
        name: f.string("name")?,
        generate_name: f.string("generateName")?,
        namespace: f.string("namespace")?,
        self_link: f.string("selfLink")?,
        uid: f.string("uid")?,
        resource_version: f.string("resourceVersion")?,
        generation: f.i64("generation")?,
        creation_timestamp: f.time("creationTimestamp")?,
        deletion_timestamp: f.time("deletionTimestamp")?,
        deletion_grace_period_seconds: f.i64("deletionGracePeriodSeconds")?,
        labels: f.string_map("labels")?,
        annotations: f.string_map("annotations")?,
        owner_references: f.messages("ownerReferences", owner_reference)?,
        finalizers: f.strings("finalizers")?,
        managed_fields: f.messages("managedFields", managed_fields_entry)?,
    })
}

/// `OwnerReference`.
pub fn owner_reference(f: &mut Fields<'_>) -> Result<meta::OwnerReference> {
    Ok(meta::OwnerReference {
        api_version: f.string("apiVersion")?,
        kind: f.string("kind")?,
        name: f.string("name")?,
        uid: f.string("uid")?,
        controller: f.boolean("controller")?,
        block_owner_deletion: f.boolean("blockOwnerDeletion")?,
    })
}

/// `ManagedFieldsEntry`; `fieldsV1` becomes the JSON bytes of the object.
pub fn managed_fields_entry(f: &mut Fields<'_>) -> Result<meta::ManagedFieldsEntry> {
    let fields_v1 = f.raw("fieldsV1").map(|v| meta::FieldsV1 {
        raw: Some(serde_json::to_vec(v).expect("a JSON value always serialises")),
    });
    Ok(meta::ManagedFieldsEntry {
        manager: f.string("manager")?,
        operation: f.string("operation")?,
        api_version: f.string("apiVersion")?,
        time: f.time("time")?,
        fields_type: f.string("fieldsType")?,
        fields_v1,
        subresource: f.string("subresource")?,
    })
}

/// `ListMeta` (`resourceVersion`, `continue`, `remainingItemCount`).
pub fn list_meta(f: &mut Fields<'_>) -> Result<meta::ListMeta> {
    Ok(meta::ListMeta {
        self_link: f.string("selfLink")?,
        resource_version: f.string("resourceVersion")?,
        r#continue: f.string("continue")?,
        remaining_item_count: f.i64("remainingItemCount")?,
    })
}

/// `Status` (the top-level object, `apiVersion`/`kind` already consumed).
pub fn status(f: &mut Fields<'_>) -> Result<meta::Status> {
    Ok(meta::Status {
        metadata: f.message("metadata", list_meta)?,
        status: f.string("status")?,
        message: f.string("message")?,
        reason: f.string("reason")?,
        details: f.message("details", |d| {
            Ok(meta::StatusDetails {
                name: d.string("name")?,
                group: d.string("group")?,
                kind: d.string("kind")?,
                uid: d.string("uid")?,
                causes: d.messages("causes", |c| {
                    Ok(meta::StatusCause {
                        reason: c.string("reason")?,
                        message: c.string("message")?,
                        field: c.string("field")?,
                    })
                })?,
                retry_after_seconds: d.i32("retryAfterSeconds")?,
            })
        })?,
        code: f.i32("code")?,
    })
}

/// `LabelSelector` (`matchLabels`, `matchExpressions`).
pub fn label_selector(f: &mut Fields<'_>) -> Result<meta::LabelSelector> {
    Ok(meta::LabelSelector {
        match_labels: f.string_map("matchLabels")?,
        match_expressions: f.messages("matchExpressions", |r| {
            Ok(meta::LabelSelectorRequirement {
                key: r.string("key")?,
                operator: r.string("operator")?,
                values: r.strings("values")?,
            })
        })?,
    })
}

/// `metav1.Condition` (as in `Service.status.conditions`).
pub fn condition(f: &mut Fields<'_>) -> Result<meta::Condition> {
    Ok(meta::Condition {
        r#type: f.string("type")?,
        status: f.string("status")?,
        observed_generation: f.i64("observedGeneration")?,
        last_transition_time: f.time("lastTransitionTime")?,
        reason: f.string("reason")?,
        message: f.string("message")?,
    })
}
