//! Encoders for `apps/v1` `DaemonSet` and `StatefulSet` (spec and status)
//! and `v1` `PersistentVolumeClaim` (also a StatefulSet's
//! `volumeClaimTemplates`).

use k8s_pb::api::apps::v1 as apps;
use k8s_pb::api::core::v1 as core;

use super::fields::{Fields, Result};
use super::meta::{label_selector, object_meta};
use super::pod::pod_template;

/// `DaemonSet`.
pub fn daemon_set(f: &mut Fields<'_>) -> Result<apps::DaemonSet> {
    Ok(apps::DaemonSet {
        metadata: f.message("metadata", object_meta)?,
        spec: f.message("spec", |s| {
            Ok(apps::DaemonSetSpec {
                selector: s.message("selector", label_selector)?,
                template: s.message("template", pod_template)?,
                update_strategy: s.message("updateStrategy", |u| {
                    Ok(apps::DaemonSetUpdateStrategy {
                        r#type: u.string("type")?,
                        rolling_update: u.message("rollingUpdate", |r| {
                            Ok(apps::RollingUpdateDaemonSet {
                                max_unavailable: r.int_or_string("maxUnavailable")?,
                                max_surge: r.int_or_string("maxSurge")?,
                            })
                        })?,
                    })
                })?,
                min_ready_seconds: s.i32("minReadySeconds")?,
                revision_history_limit: s.i32("revisionHistoryLimit")?,
            })
        })?,
        status: f.message("status", |s| {
            Ok(apps::DaemonSetStatus {
                current_number_scheduled: s.i32("currentNumberScheduled")?,
                number_misscheduled: s.i32("numberMisscheduled")?,
                desired_number_scheduled: s.i32("desiredNumberScheduled")?,
                number_ready: s.i32("numberReady")?,
                observed_generation: s.i64("observedGeneration")?,
                updated_number_scheduled: s.i32("updatedNumberScheduled")?,
                number_available: s.i32("numberAvailable")?,
                number_unavailable: s.i32("numberUnavailable")?,
                collision_count: s.i32("collisionCount")?,
                conditions: s.messages("conditions", |c| {
                    Ok(apps::DaemonSetCondition {
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

/// `StatefulSet`.
pub fn stateful_set(f: &mut Fields<'_>) -> Result<apps::StatefulSet> {
    Ok(apps::StatefulSet {
        metadata: f.message("metadata", object_meta)?,
        spec: f.message("spec", |s| {
            Ok(apps::StatefulSetSpec {
                replicas: s.i32("replicas")?,
                selector: s.message("selector", label_selector)?,
                template: s.message("template", pod_template)?,
                volume_claim_templates: s
                    .messages("volumeClaimTemplates", persistent_volume_claim)?,
                service_name: s.string("serviceName")?,
                pod_management_policy: s.string("podManagementPolicy")?,
                update_strategy: s.message("updateStrategy", |u| {
                    Ok(apps::StatefulSetUpdateStrategy {
                        r#type: u.string("type")?,
                        rolling_update: u.message("rollingUpdate", |r| {
                            Ok(apps::RollingUpdateStatefulSetStrategy {
                                partition: r.i32("partition")?,
                                max_unavailable: r.int_or_string("maxUnavailable")?,
                            })
                        })?,
                    })
                })?,
                revision_history_limit: s.i32("revisionHistoryLimit")?,
                min_ready_seconds: s.i32("minReadySeconds")?,
                persistent_volume_claim_retention_policy: s.message(
                    "persistentVolumeClaimRetentionPolicy",
                    |p| {
                        Ok(apps::StatefulSetPersistentVolumeClaimRetentionPolicy {
                            when_deleted: p.string("whenDeleted")?,
                            when_scaled: p.string("whenScaled")?,
                        })
                    },
                )?,
                ordinals: s.message("ordinals", |o| {
                    Ok(apps::StatefulSetOrdinals {
                        start: o.i32("start")?,
                    })
                })?,
            })
        })?,
        status: f.message("status", |s| {
            Ok(apps::StatefulSetStatus {
                observed_generation: s.i64("observedGeneration")?,
                replicas: s.i32("replicas")?,
                ready_replicas: s.i32("readyReplicas")?,
                current_replicas: s.i32("currentReplicas")?,
                updated_replicas: s.i32("updatedReplicas")?,
                current_revision: s.string("currentRevision")?,
                update_revision: s.string("updateRevision")?,
                collision_count: s.i32("collisionCount")?,
                conditions: s.messages("conditions", |c| {
                    Ok(apps::StatefulSetCondition {
                        r#type: c.string("type")?,
                        status: c.string("status")?,
                        last_transition_time: c.time("lastTransitionTime")?,
                        reason: c.string("reason")?,
                        message: c.string("message")?,
                    })
                })?,
                available_replicas: s.i32("availableReplicas")?,
            })
        })?,
    })
}

/// `PersistentVolumeClaim` (spec; status `phase`, `accessModes`,
/// `capacity`, `conditions`, `allocatedResources`,
/// `currentVolumeAttributesClassName`).
pub fn persistent_volume_claim(f: &mut Fields<'_>) -> Result<core::PersistentVolumeClaim> {
    Ok(core::PersistentVolumeClaim {
        metadata: f.message("metadata", object_meta)?,
        spec: f.message("spec", |s| {
            Ok(core::PersistentVolumeClaimSpec {
                access_modes: s.strings("accessModes")?,
                selector: s.message("selector", label_selector)?,
                resources: s.message("resources", |r| {
                    Ok(core::VolumeResourceRequirements {
                        limits: r.quantities("limits")?,
                        requests: r.quantities("requests")?,
                    })
                })?,
                volume_name: s.string("volumeName")?,
                storage_class_name: s.string("storageClassName")?,
                volume_mode: s.string("volumeMode")?,
                data_source: s.message("dataSource", |d| {
                    Ok(core::TypedLocalObjectReference {
                        api_group: d.string("apiGroup")?,
                        kind: d.string("kind")?,
                        name: d.string("name")?,
                    })
                })?,
                data_source_ref: s.message("dataSourceRef", |d| {
                    Ok(core::TypedObjectReference {
                        api_group: d.string("apiGroup")?,
                        kind: d.string("kind")?,
                        name: d.string("name")?,
                        namespace: d.string("namespace")?,
                    })
                })?,
                volume_attributes_class_name: s.string("volumeAttributesClassName")?,
            })
        })?,
        status: f.message("status", |s| {
            Ok(core::PersistentVolumeClaimStatus {
                phase: s.string("phase")?,
                access_modes: s.strings("accessModes")?,
                capacity: s.quantities("capacity")?,
                conditions: s.messages("conditions", |c| {
                    Ok(core::PersistentVolumeClaimCondition {
                        r#type: c.string("type")?,
                        status: c.string("status")?,
                        last_probe_time: c.time("lastProbeTime")?,
                        last_transition_time: c.time("lastTransitionTime")?,
                        reason: c.string("reason")?,
                        message: c.string("message")?,
                    })
                })?,
                allocated_resources: s.quantities("allocatedResources")?,
                current_volume_attributes_class_name: s
                    .string("currentVolumeAttributesClassName")?,
                ..Default::default()
            })
        })?,
    })
}
