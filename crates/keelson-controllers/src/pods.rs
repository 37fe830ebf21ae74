//! Facts about pods that several controllers share: active, ready, available, owned.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

/// Not finished and not being deleted: counts toward replicas.
pub fn is_active(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none() && !matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

fn ready_condition(pod: &Pod) -> Option<&k8s_openapi::api::core::v1::PodCondition> {
    pod.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "Ready")
}

pub fn is_ready(pod: &Pod) -> bool {
    ready_condition(pod).is_some_and(|c| c.status == "True")
}

/// Ready for at least `min_ready_seconds` at `now`.
pub fn is_available(pod: &Pod, min_ready_seconds: i32, now: jiff::Timestamp) -> bool {
    let Some(c) = ready_condition(pod).filter(|c| c.status == "True") else { return false };
    if min_ready_seconds <= 0 {
        return true;
    }
    c.last_transition_time.as_ref().is_some_and(|t| now.as_second() - t.0.as_second() >= i64::from(min_ready_seconds))
}

/// The owner reference naming the controller of `meta`, if any.
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references.as_ref()?.iter().find(|o| o.controller == Some(true))
}

/// An owner reference making the object described by (`api_version`, `kind`, `meta`) the
/// controller of another.
pub fn controller_ref(api_version: &str, kind: &str, meta: &ObjectMeta) -> OwnerReference {
    OwnerReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}
