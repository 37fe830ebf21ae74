//! `v1` (core group) object bodies: `ConfigMap`, `Secret`, `Namespace`,
//! `ServiceAccount`, `Service`, `ResourceQuota`. (`Pod` lives in
//! [`crate::pod`], `PersistentVolumeClaim` in [`crate::volume`].)
//!
//! Each function returns the object without `apiVersion`/`kind` (added by
//! the dispatcher) and without `status`, which the API server ignores on
//! create and update. Conversion failures are
//! [`crate::json::ConvertError`]s; this module adds no error type of its own.

use k8s_pb::api::core::v1 as core;
use serde_json::Value;

use crate::container::local_object_reference;
use crate::json::{Obj, Result};
use crate::meta::object_meta;

/// `ConfigMap` (`data`, `binaryData` base64-encoded, `immutable`).
pub fn config_map(c: &core::ConfigMap) -> Result<Value> {
    let mut o = Obj::new();
    o.message("metadata", &c.metadata, object_meta)?;
    Ok(o.boolean_kept("immutable", c.immutable)
        .string_map("data", &c.data)
        .bytes_map("binaryData", &c.binary_data)
        .build())
}

/// `Secret` (`data` base64-encoded, `stringData`, `type`, `immutable`).
pub fn secret(s: &core::Secret) -> Result<Value> {
    let mut o = Obj::new();
    o.message("metadata", &s.metadata, object_meta)?;
    Ok(o.boolean_kept("immutable", s.immutable)
        .bytes_map("data", &s.data)
        .string_map("stringData", &s.string_data)
        .string("type", &s.r#type)
        .build())
}

/// `Namespace` (`spec.finalizers`).
pub fn namespace(n: &core::Namespace) -> Result<Value> {
    let mut o = Obj::new();
    o.message("metadata", &n.metadata, object_meta)?;
    o.message("spec", &n.spec, |s| {
        Ok(Obj::new().strings("finalizers", &s.finalizers).build())
    })?;
    Ok(o.build())
}

/// `ServiceAccount` (`secrets`, `imagePullSecrets`,
/// `automountServiceAccountToken`).
pub fn service_account(s: &core::ServiceAccount) -> Result<Value> {
    let mut o = Obj::new();
    o.message("metadata", &s.metadata, object_meta)?;
    o.messages("secrets", &s.secrets, object_reference)?;
    o.messages(
        "imagePullSecrets",
        &s.image_pull_secrets,
        local_object_reference,
    )?;
    o.boolean_kept(
        "automountServiceAccountToken",
        s.automount_service_account_token,
    );
    Ok(o.build())
}

/// `ObjectReference` (all fields `omitempty`).
pub fn object_reference(r: &core::ObjectReference) -> Result<Value> {
    Ok(Obj::new()
        .string("kind", &r.kind)
        .string("namespace", &r.namespace)
        .string("name", &r.name)
        .string("uid", &r.uid)
        .string("apiVersion", &r.api_version)
        .string("resourceVersion", &r.resource_version)
        .string("fieldPath", &r.field_path)
        .build())
}

/// `Service`.
pub fn service(s: &core::Service) -> Result<Value> {
    let mut o = Obj::new();
    o.message("metadata", &s.metadata, object_meta)?;
    o.message("spec", &s.spec, service_spec)?;
    Ok(o.build())
}

/// `ServiceSpec`.
pub fn service_spec(s: &core::ServiceSpec) -> Result<Value> {
    let mut o = Obj::new();
    o.messages("ports", &s.ports, service_port)?;
    o.string_map("selector", &s.selector)
        .string("clusterIP", &s.cluster_ip)
        .strings("clusterIPs", &s.cluster_ips)
        .string("type", &s.r#type)
        .strings("externalIPs", &s.external_ips)
        .string("sessionAffinity", &s.session_affinity)
        .string("loadBalancerIP", &s.load_balancer_ip)
        .strings("loadBalancerSourceRanges", &s.load_balancer_source_ranges)
        .string("externalName", &s.external_name)
        .string("externalTrafficPolicy", &s.external_traffic_policy)
        .int("healthCheckNodePort", s.health_check_node_port)
        .boolean("publishNotReadyAddresses", s.publish_not_ready_addresses);
    o.message("sessionAffinityConfig", &s.session_affinity_config, |c| {
        let mut o = Obj::new();
        o.message("clientIP", &c.client_ip, |ip| {
            Ok(Obj::new()
                .int_kept("timeoutSeconds", ip.timeout_seconds)
                .build())
        })?;
        Ok(o.build())
    })?;
    o.strings("ipFamilies", &s.ip_families)
        .string_kept("ipFamilyPolicy", &s.ip_family_policy)
        .boolean_kept(
            "allocateLoadBalancerNodePorts",
            s.allocate_load_balancer_node_ports,
        )
        .string_kept("loadBalancerClass", &s.load_balancer_class)
        .string_kept("internalTrafficPolicy", &s.internal_traffic_policy)
        .string_kept("trafficDistribution", &s.traffic_distribution);
    Ok(o.build())
}

/// `ServicePort`; `port` is required, `targetPort` becomes a JSON number
/// or string (and is omitted when unset).
pub fn service_port(p: &core::ServicePort) -> Result<Value> {
    let mut o = Obj::new();
    o.string("name", &p.name)
        .string("protocol", &p.protocol)
        .string_kept("appProtocol", &p.app_protocol)
        .int_kept("port", p.port);
    o.int_or_string("targetPort", &p.target_port)?;
    Ok(o.int("nodePort", p.node_port).build())
}

/// `ResourceQuota` (`spec.hard`, `scopes`, `scopeSelector`).
pub fn resource_quota(q: &core::ResourceQuota) -> Result<Value> {
    let mut o = Obj::new();
    o.message("metadata", &q.metadata, object_meta)?;
    o.message("spec", &q.spec, |s| {
        let mut o = Obj::new();
        o.quantities("hard", &s.hard).strings("scopes", &s.scopes);
        o.message("scopeSelector", &s.scope_selector, |sel| {
            let mut o = Obj::new();
            o.messages("matchExpressions", &sel.match_expressions, |r| {
                Ok(Obj::new()
                    .string_kept("scopeName", &r.scope_name)
                    .string_kept("operator", &r.operator)
                    .strings("values", &r.values)
                    .build())
            })?;
            Ok(o.build())
        })?;
        Ok(o.build())
    })?;
    Ok(o.build())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
    use serde_json::json;

    fn s(v: &str) -> Option<String> {
        Some(v.to_owned())
    }

    #[test]
    fn secret_data_is_base64_and_type_kept() {
        let sec = core::Secret {
            metadata: None,
            immutable: None,
            data: [("bin".to_owned(), vec![0xff, 0x00])].into(),
            string_data: Default::default(),
            r#type: s("Opaque"),
        };
        assert_eq!(
            secret(&sec).unwrap(),
            json!({"data": {"bin": "/wA="}, "type": "Opaque"})
        );
    }

    #[test]
    fn service_ports_and_zero_values() {
        let svc = core::ServiceSpec {
            ports: vec![
                core::ServicePort {
                    name: s("80-8080"),
                    protocol: s("TCP"),
                    port: Some(80),
                    target_port: Some(IntOrString {
                        r#type: Some(0),
                        int_val: Some(8080),
                        str_val: s(""),
                    }),
                    node_port: Some(0),
                    app_protocol: None,
                },
                core::ServicePort {
                    name: s(""),
                    protocol: s(""),
                    port: Some(0),
                    target_port: Some(IntOrString {
                        r#type: Some(0),
                        int_val: Some(0),
                        str_val: s(""),
                    }),
                    node_port: Some(30080),
                    app_protocol: None,
                },
            ],
            cluster_ip: s("None"),
            r#type: s("ClusterIP"),
            session_affinity: s(""),
            health_check_node_port: Some(0),
            publish_not_ready_addresses: Some(false),
            ..Default::default()
        };
        assert_eq!(
            service_spec(&svc).unwrap(),
            json!({
                "ports": [{"name": "80-8080", "protocol": "TCP", "port": 80, "targetPort": 8080},
                          {"port": 0, "nodePort": 30080}],
                "clusterIP": "None", "type": "ClusterIP"
            })
        );
    }
}
