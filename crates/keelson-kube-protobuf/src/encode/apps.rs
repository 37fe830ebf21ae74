//! Encoders for `apps/v1` `Deployment` and `ReplicaSet` (spec and status).
//! The pod template goes through [`super::pod::pod_template`], with its
//! coverage limits.

use k8s_pb::api::apps::v1 as apps;

use super::fields::{Fields, Result};
use super::meta::{label_selector, object_meta};
use super::pod::pod_template;

/// `Deployment`.
pub fn deployment(f: &mut Fields<'_>) -> Result<apps::Deployment> {
    Ok(apps::Deployment {
        metadata: f.message("metadata", object_meta)?,
        spec: f.message("spec", |s| {
            Ok(apps::DeploymentSpec {
                replicas: s.i32("replicas")?,
                selector: s.message("selector", label_selector)?,
                template: s.message("template", pod_template)?,
                strategy: s.message("strategy", |st| {
                    Ok(apps::DeploymentStrategy {
                        r#type: st.string("type")?,
                        rolling_update: st.message("rollingUpdate", |r| {
                            Ok(apps::RollingUpdateDeployment {
                                max_unavailable: r.int_or_string("maxUnavailable")?,
                                max_surge: r.int_or_string("maxSurge")?,
                            })
                        })?,
                    })
                })?,
                min_ready_seconds: s.i32("minReadySeconds")?,
                revision_history_limit: s.i32("revisionHistoryLimit")?,
                paused: s.boolean("paused")?,
                progress_deadline_seconds: s.i32("progressDeadlineSeconds")?,
            })
        })?,
        status: f.message("status", |s| {
            Ok(apps::DeploymentStatus {
                observed_generation: s.i64("observedGeneration")?,
                replicas: s.i32("replicas")?,
                updated_replicas: s.i32("updatedReplicas")?,
                ready_replicas: s.i32("readyReplicas")?,
                available_replicas: s.i32("availableReplicas")?,
                unavailable_replicas: s.i32("unavailableReplicas")?,
                terminating_replicas: s.i32("terminatingReplicas")?,
                conditions: s.messages("conditions", |c| {
                    Ok(apps::DeploymentCondition {
                        r#type: c.string("type")?,
                        status: c.string("status")?,
                        last_update_time: c.time("lastUpdateTime")?,
                        last_transition_time: c.time("lastTransitionTime")?,
                        reason: c.string("reason")?,
                        message: c.string("message")?,
                    })
                })?,
                collision_count: s.i32("collisionCount")?,
            })
        })?,
    })
}

/// `ReplicaSet`.
pub fn replica_set(f: &mut Fields<'_>) -> Result<apps::ReplicaSet> {
    Ok(apps::ReplicaSet {
        metadata: f.message("metadata", object_meta)?,
        spec: f.message("spec", |s| {
            Ok(apps::ReplicaSetSpec {
                replicas: s.i32("replicas")?,
                min_ready_seconds: s.i32("minReadySeconds")?,
                selector: s.message("selector", label_selector)?,
                template: s.message("template", pod_template)?,
            })
        })?,
        status: f.message("status", |s| {
            Ok(apps::ReplicaSetStatus {
                replicas: s.i32("replicas")?,
                fully_labeled_replicas: s.i32("fullyLabeledReplicas")?,
                ready_replicas: s.i32("readyReplicas")?,
                available_replicas: s.i32("availableReplicas")?,
                terminating_replicas: s.i32("terminatingReplicas")?,
                observed_generation: s.i64("observedGeneration")?,
                conditions: s.messages("conditions", |c| {
                    Ok(apps::ReplicaSetCondition {
                        r#type: c.string("type")?,
                        status: c.string("status")?,
                        last_transition_time: c.time("lastTransitionTime")?,
                        reason: c.string("reason")?,
                        message: c.string("message")?,
                    })
                })?,
            })
        })?,
    })
}
