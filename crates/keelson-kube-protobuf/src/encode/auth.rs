//! Encoders for `authentication.k8s.io/v1` `TokenRequest` (with
//! `status.token`/`expirationTimestamp`) and `SelfSubjectReview`, and
//! `policy/v1` `PodDisruptionBudget` (spec and status).

use k8s_pb::api::authentication::v1 as authn;
use k8s_pb::api::policy::v1 as policy;

use super::fields::{Fields, Result};
use super::meta::{condition, label_selector, object_meta};

/// `TokenRequest`.
pub fn token_request(f: &mut Fields<'_>) -> Result<authn::TokenRequest> {
    Ok(authn::TokenRequest {
        metadata: f.message("metadata", object_meta)?,
        spec: f.message("spec", |s| {
            Ok(authn::TokenRequestSpec {
                audiences: s.strings("audiences")?,
                expiration_seconds: s.i64("expirationSeconds")?,
                bound_object_ref: s.message("boundObjectRef", |r| {
                    Ok(authn::BoundObjectReference {
                        kind: r.string("kind")?,
                        api_version: r.string("apiVersion")?,
                        name: r.string("name")?,
                        u_id: r.string("uid")?,
                    })
                })?,
            })
        })?,
        status: f.message("status", |s| {
            Ok(authn::TokenRequestStatus {
                token: s.string("token")?,
                expiration_timestamp: s.time("expirationTimestamp")?,
            })
        })?,
    })
}

/// `SelfSubjectReview` (`status.userInfo`).
pub fn self_subject_review(f: &mut Fields<'_>) -> Result<authn::SelfSubjectReview> {
    Ok(authn::SelfSubjectReview {
        metadata: f.message("metadata", object_meta)?,
        status: f.message("status", |s| {
            Ok(authn::SelfSubjectReviewStatus {
                user_info: s.message("userInfo", |u| {
                    Ok(authn::UserInfo {
                        username: u.string("username")?,
                        uid: u.string("uid")?,
                        groups: u.strings("groups")?,
                        extra: u
                            .string_list_map("extra")?
                            .into_iter()
                            .map(|(k, items)| (k, authn::ExtraValue { items }))
                            .collect(),
                    })
                })?,
            })
        })?,
    })
}

/// `PodDisruptionBudget`.
pub fn pod_disruption_budget(f: &mut Fields<'_>) -> Result<policy::PodDisruptionBudget> {
    Ok(policy::PodDisruptionBudget {
        metadata: f.message("metadata", object_meta)?,
        spec: f.message("spec", |s| {
            Ok(policy::PodDisruptionBudgetSpec {
                min_available: s.int_or_string("minAvailable")?,
                selector: s.message("selector", label_selector)?,
                max_unavailable: s.int_or_string("maxUnavailable")?,
                unhealthy_pod_eviction_policy: s.string("unhealthyPodEvictionPolicy")?,
            })
        })?,
        status: f.message("status", |s| {
            Ok(policy::PodDisruptionBudgetStatus {
                observed_generation: s.i64("observedGeneration")?,
                disrupted_pods: s.time_map("disruptedPods")?,
                disruptions_allowed: s.i32("disruptionsAllowed")?,
                current_healthy: s.i32("currentHealthy")?,
                desired_healthy: s.i32("desiredHealthy")?,
                expected_pods: s.i32("expectedPods")?,
                conditions: s.messages("conditions", condition)?,
            })
        })?,
    })
}
