//! `apps/v1` object bodies: `Deployment`, `ReplicaSet`, `DaemonSet`,
//! `StatefulSet` (without `status`, which the API server ignores on create
//! and update). Conversion failures are [`crate::json::ConvertError`]s;
//! this module adds no error type of its own.

use k8s_pb::api::apps::v1 as apps;
use serde_json::Value;

use crate::json::{Obj, Result};
use crate::meta::{label_selector, object_meta};
use crate::pod::pod_template_spec;
use crate::volume::persistent_volume_claim;

/// `Deployment`.
pub fn deployment(d: &apps::Deployment) -> Result<Value> {
    let mut o = Obj::new();
    o.message("metadata", &d.metadata, object_meta)?;
    o.message("spec", &d.spec, deployment_spec)?;
    Ok(o.build())
}

/// `DeploymentSpec`; `replicas: 0` is kept (it is a pointer in Go).
pub fn deployment_spec(s: &apps::DeploymentSpec) -> Result<Value> {
    let mut o = Obj::new();
    o.int_kept("replicas", s.replicas);
    o.message("selector", &s.selector, label_selector)?;
    o.message("template", &s.template, pod_template_spec)?;
    o.message("strategy", &s.strategy, |st| {
        let mut o = Obj::new();
        o.string("type", &st.r#type);
        o.message("rollingUpdate", &st.rolling_update, |r| {
            let mut o = Obj::new();
            o.int_or_string_kept("maxUnavailable", &r.max_unavailable)?;
            o.int_or_string_kept("maxSurge", &r.max_surge)?;
            Ok(o.build())
        })?;
        Ok(o.build())
    })?;
    o.int("minReadySeconds", s.min_ready_seconds)
        .int_kept("revisionHistoryLimit", s.revision_history_limit)
        .boolean("paused", s.paused)
        .int_kept("progressDeadlineSeconds", s.progress_deadline_seconds);
    Ok(o.build())
}

/// `ReplicaSet`.
pub fn replica_set(r: &apps::ReplicaSet) -> Result<Value> {
    let mut o = Obj::new();
    o.message("metadata", &r.metadata, object_meta)?;
    o.message("spec", &r.spec, |s| {
        let mut o = Obj::new();
        o.int_kept("replicas", s.replicas)
            .int("minReadySeconds", s.min_ready_seconds);
        o.message("selector", &s.selector, label_selector)?;
        o.message("template", &s.template, pod_template_spec)?;
        Ok(o.build())
    })?;
    Ok(o.build())
}

/// `DaemonSet`.
pub fn daemon_set(d: &apps::DaemonSet) -> Result<Value> {
    let mut o = Obj::new();
    o.message("metadata", &d.metadata, object_meta)?;
    o.message("spec", &d.spec, |s| {
        let mut o = Obj::new();
        o.message("selector", &s.selector, label_selector)?;
        o.message("template", &s.template, pod_template_spec)?;
        o.message("updateStrategy", &s.update_strategy, |u| {
            let mut o = Obj::new();
            o.string("type", &u.r#type);
            o.message("rollingUpdate", &u.rolling_update, |r| {
                let mut o = Obj::new();
                o.int_or_string_kept("maxUnavailable", &r.max_unavailable)?;
                o.int_or_string_kept("maxSurge", &r.max_surge)?;
                Ok(o.build())
            })?;
            Ok(o.build())
        })?;
        o.int("minReadySeconds", s.min_ready_seconds)
            .int_kept("revisionHistoryLimit", s.revision_history_limit);
        Ok(o.build())
    })?;
    Ok(o.build())
}

/// `StatefulSet`.
pub fn stateful_set(d: &apps::StatefulSet) -> Result<Value> {
    let mut o = Obj::new();
    o.message("metadata", &d.metadata, object_meta)?;
    o.message("spec", &d.spec, stateful_set_spec)?;
    Ok(o.build())
}

fn stateful_set_spec(s: &apps::StatefulSetSpec) -> Result<Value> {
    let mut o = Obj::new();
    o.int_kept("replicas", s.replicas);
    o.message("selector", &s.selector, label_selector)?;
    o.message("template", &s.template, pod_template_spec)?;
    o.messages(
        "volumeClaimTemplates",
        &s.volume_claim_templates,
        persistent_volume_claim,
    )?;
    o.string_kept("serviceName", &s.service_name)
        .string("podManagementPolicy", &s.pod_management_policy);
    o.message("updateStrategy", &s.update_strategy, |u| {
        let mut o = Obj::new();
        o.string("type", &u.r#type);
        o.message("rollingUpdate", &u.rolling_update, |r| {
            let mut o = Obj::new();
            o.int_kept("partition", r.partition);
            o.int_or_string_kept("maxUnavailable", &r.max_unavailable)?;
            Ok(o.build())
        })?;
        Ok(o.build())
    })?;
    o.int_kept("revisionHistoryLimit", s.revision_history_limit)
        .int("minReadySeconds", s.min_ready_seconds);
    o.message(
        "persistentVolumeClaimRetentionPolicy",
        &s.persistent_volume_claim_retention_policy,
        |p| {
            Ok(Obj::new()
                .string("whenDeleted", &p.when_deleted)
                .string("whenScaled", &p.when_scaled)
                .build())
        },
    )?;
    o.message("ordinals", &s.ordinals, |r| {
        Ok(Obj::new().int_kept("start", r.start).build())
    })?;
    Ok(o.build())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
    use serde_json::json;

    #[test]
    fn zero_replicas_and_rolling_update_survive() {
        let spec = apps::DeploymentSpec {
            replicas: Some(0),
            strategy: Some(apps::DeploymentStrategy {
                r#type: Some("RollingUpdate".into()),
                rolling_update: Some(apps::RollingUpdateDeployment {
                    max_unavailable: Some(IntOrString {
                        r#type: Some(0),
                        int_val: Some(0),
                        str_val: Some(String::new()),
                    }),
                    max_surge: Some(IntOrString {
                        r#type: Some(1),
                        int_val: Some(0),
                        str_val: Some("25%".into()),
                    }),
                }),
            }),
            min_ready_seconds: Some(0),
            paused: Some(false),
            ..Default::default()
        };
        assert_eq!(
            deployment_spec(&spec).unwrap(),
            json!({"replicas": 0, "strategy": {"type": "RollingUpdate",
                   "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "25%"}}})
        );
    }

    #[test]
    fn stateful_set_claim_templates() {
        let set = apps::StatefulSet {
            metadata: None,
            spec: Some(apps::StatefulSetSpec {
                service_name: Some("db".into()),
                volume_claim_templates: vec![k8s_pb::api::core::v1::PersistentVolumeClaim {
                    metadata: Some(k8s_pb::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                        name: Some("data".into()),
                        ..Default::default()
                    }),
                    spec: Some(Default::default()),
                    status: Some(Default::default()),
                }],
                ordinals: Some(apps::StatefulSetOrdinals { start: Some(0) }),
                ..Default::default()
            }),
            status: None,
        };
        assert_eq!(
            stateful_set(&set).unwrap(),
            json!({"spec": {"serviceName": "db", "ordinals": {"start": 0},
                   "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {}}]}})
        );
    }
}
