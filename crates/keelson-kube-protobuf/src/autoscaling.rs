//! `autoscaling/v2` and `autoscaling/v1` `HorizontalPodAutoscaler` bodies
//! (`kubectl autoscale` tries v2 and falls back to v1), without `status`.
//! Conversion failures are [`crate::json::ConvertError`]s; this module adds
//! no error type of its own.

use k8s_pb::api::autoscaling::{v1, v2};
use serde_json::Value;

use crate::json::{Obj, Result};
use crate::meta::{label_selector, object_meta};

/// `autoscaling/v2` `HorizontalPodAutoscaler`.
pub fn hpa_v2(h: &v2::HorizontalPodAutoscaler) -> Result<Value> {
    let mut o = Obj::new();
    o.message("metadata", &h.metadata, object_meta)?;
    o.message("spec", &h.spec, |s| {
        let mut o = Obj::new();
        o.message("scaleTargetRef", &s.scale_target_ref, |r| {
            Ok(cross_version_ref(&r.kind, &r.name, &r.api_version))
        })?;
        o.int_kept("minReplicas", s.min_replicas)
            .int_kept("maxReplicas", s.max_replicas);
        o.messages("metrics", &s.metrics, metric_spec)?;
        o.message("behavior", &s.behavior, |b| {
            let mut o = Obj::new();
            o.message("scaleUp", &b.scale_up, scaling_rules)?;
            o.message("scaleDown", &b.scale_down, scaling_rules)?;
            Ok(o.build())
        })?;
        Ok(o.build())
    })?;
    Ok(o.build())
}

/// `autoscaling/v1` `HorizontalPodAutoscaler`.
pub fn hpa_v1(h: &v1::HorizontalPodAutoscaler) -> Result<Value> {
    let mut o = Obj::new();
    o.message("metadata", &h.metadata, object_meta)?;
    o.message("spec", &h.spec, |s| {
        let mut o = Obj::new();
        o.message("scaleTargetRef", &s.scale_target_ref, |r| {
            Ok(cross_version_ref(&r.kind, &r.name, &r.api_version))
        })?;
        Ok(o.int_kept("minReplicas", s.min_replicas)
            .int_kept("maxReplicas", s.max_replicas)
            .int_kept(
                "targetCPUUtilizationPercentage",
                s.target_cpu_utilization_percentage,
            )
            .build())
    })?;
    Ok(o.build())
}

/// `CrossVersionObjectReference`; `kind` and `name` are required.
fn cross_version_ref(
    kind: &Option<String>,
    name: &Option<String>,
    api_version: &Option<String>,
) -> Value {
    Obj::new()
        .string_kept("kind", kind)
        .string_kept("name", name)
        .string("apiVersion", api_version)
        .build()
}

fn metric_spec(m: &v2::MetricSpec) -> Result<Value> {
    let mut o = Obj::new();
    o.string_kept("type", &m.r#type);
    o.message("object", &m.object, |s| {
        let mut o = Obj::new();
        o.message("describedObject", &s.described_object, |r| {
            Ok(cross_version_ref(&r.kind, &r.name, &r.api_version))
        })?;
        o.message("target", &s.target, metric_target)?;
        o.message("metric", &s.metric, metric_identifier)?;
        Ok(o.build())
    })?;
    o.message("pods", &m.pods, |s| {
        let mut o = Obj::new();
        o.message("metric", &s.metric, metric_identifier)?;
        o.message("target", &s.target, metric_target)?;
        Ok(o.build())
    })?;
    o.message("resource", &m.resource, |s| {
        let mut o = Obj::new();
        o.string_kept("name", &s.name);
        o.message("target", &s.target, metric_target)?;
        Ok(o.build())
    })?;
    o.message("containerResource", &m.container_resource, |s| {
        let mut o = Obj::new();
        o.string_kept("name", &s.name);
        o.message("target", &s.target, metric_target)?;
        Ok(o.string_kept("container", &s.container).build())
    })?;
    o.message("external", &m.external, |s| {
        let mut o = Obj::new();
        o.message("metric", &s.metric, metric_identifier)?;
        o.message("target", &s.target, metric_target)?;
        Ok(o.build())
    })?;
    Ok(o.build())
}

fn metric_identifier(m: &v2::MetricIdentifier) -> Result<Value> {
    let mut o = Obj::new();
    o.string_kept("name", &m.name);
    o.message("selector", &m.selector, label_selector)?;
    Ok(o.build())
}

fn metric_target(t: &v2::MetricTarget) -> Result<Value> {
    Ok(Obj::new()
        .string_kept("type", &t.r#type)
        .quantity("value", &t.value)
        .quantity("averageValue", &t.average_value)
        .int_kept("averageUtilization", t.average_utilization)
        .build())
}

fn scaling_rules(r: &v2::HpaScalingRules) -> Result<Value> {
    let mut o = Obj::new();
    o.int_kept("stabilizationWindowSeconds", r.stabilization_window_seconds)
        .string_kept("selectPolicy", &r.select_policy);
    o.messages("policies", &r.policies, |p| {
        Ok(Obj::new()
            .string_kept("type", &p.r#type)
            .int_kept("value", p.value)
            .int_kept("periodSeconds", p.period_seconds)
            .build())
    })?;
    Ok(o.quantity("tolerance", &r.tolerance).build())
}
