//! Encoders for `v1` (core group) objects: `ConfigMap`, `Secret`,
//! `Namespace` (spec and status), `ServiceAccount`, and for
//! `coordination.k8s.io/v1` `Lease`.
//!
//! Each function reads the object without `apiVersion`/`kind` (consumed by
//! the dispatcher in [`super`]).

use k8s_pb::api::coordination::v1 as coordination;
use k8s_pb::api::core::v1 as core;

use super::fields::{Fields, Result};
use super::meta::object_meta;

/// `ConfigMap` (`data`, `binaryData` base64, `immutable`).
pub fn config_map(f: &mut Fields<'_>) -> Result<core::ConfigMap> {
    Ok(core::ConfigMap {
        metadata: f.message("metadata", object_meta)?,
        immutable: f.boolean("immutable")?,
        data: f.string_map("data")?,
        binary_data: f.bytes_map("binaryData")?,
    })
}

/// `Secret` (`data` base64, `stringData`, `type`, `immutable`).
pub fn secret(f: &mut Fields<'_>) -> Result<core::Secret> {
    Ok(core::Secret {
        metadata: f.message("metadata", object_meta)?,
        immutable: f.boolean("immutable")?,
        data: f.bytes_map("data")?,
        string_data: f.string_map("stringData")?,
        r#type: f.string("type")?,
    })
}

/// `Namespace` (`spec.finalizers`, `status.phase`, `status.conditions`).
pub fn namespace(f: &mut Fields<'_>) -> Result<core::Namespace> {
    Ok(core::Namespace {
        metadata: f.message("metadata", object_meta)?,
        spec: f.message("spec", |s| {
            Ok(core::NamespaceSpec {
                finalizers: s.strings("finalizers")?,
            })
        })?,
        status: f.message("status", |s| {
            Ok(core::NamespaceStatus {
                phase: s.string("phase")?,
                conditions: s.messages("conditions", |c| {
                    Ok(core::NamespaceCondition {
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

/// `ServiceAccount` (`secrets`, `imagePullSecrets`,
/// `automountServiceAccountToken`).
pub fn service_account(f: &mut Fields<'_>) -> Result<core::ServiceAccount> {
    Ok(core::ServiceAccount {
        metadata: f.message("metadata", object_meta)?,
        secrets: f.messages("secrets", object_reference)?,
        image_pull_secrets: f.messages("imagePullSecrets", |r| {
            Ok(core::LocalObjectReference {
                name: r.string("name")?,
            })
        })?,
        automount_service_account_token: f.boolean("automountServiceAccountToken")?,
    })
}

/// `ObjectReference`.
pub fn object_reference(f: &mut Fields<'_>) -> Result<core::ObjectReference> {
    Ok(core::ObjectReference {
        kind: f.string("kind")?,
        namespace: f.string("namespace")?,
        name: f.string("name")?,
        uid: f.string("uid")?,
        api_version: f.string("apiVersion")?,
        resource_version: f.string("resourceVersion")?,
        field_path: f.string("fieldPath")?,
    })
}

/// `coordination.k8s.io/v1` `Lease` (`acquireTime`/`renewTime` are
/// `MicroTime`s).
pub fn lease(f: &mut Fields<'_>) -> Result<coordination::Lease> {
    Ok(coordination::Lease {
        metadata: f.message("metadata", object_meta)?,
        spec: f.message("spec", |s| {
            Ok(coordination::LeaseSpec {
                holder_identity: s.string("holderIdentity")?,
                lease_duration_seconds: s.i32("leaseDurationSeconds")?,
                acquire_time: s.micro_time("acquireTime")?,
                renew_time: s.micro_time("renewTime")?,
                lease_transitions: s.i32("leaseTransitions")?,
                strategy: s.string("strategy")?,
                preferred_holder: s.string("preferredHolder")?,
            })
        })?,
    })
}

/// `Service` (spec and `status.loadBalancer`/`status.conditions`).
pub fn service(f: &mut Fields<'_>) -> Result<core::Service> {
    Ok(core::Service {
        metadata: f.message("metadata", object_meta)?,
        spec: f.message("spec", service_spec)?,
        status: f.message("status", |s| {
            Ok(core::ServiceStatus {
                load_balancer: s.message("loadBalancer", load_balancer_status)?,
                conditions: s.messages("conditions", super::meta::condition)?,
            })
        })?,
    })
}

/// `LoadBalancerStatus` (shared with `Ingress` status).
pub fn load_balancer_status(f: &mut Fields<'_>) -> Result<core::LoadBalancerStatus> {
    Ok(core::LoadBalancerStatus {
        ingress: f.messages("ingress", |i| {
            Ok(core::LoadBalancerIngress {
                ip: i.string("ip")?,
                hostname: i.string("hostname")?,
                ip_mode: i.string("ipMode")?,
                ports: i.messages("ports", |p| {
                    Ok(core::PortStatus {
                        port: p.i32("port")?,
                        protocol: p.string("protocol")?,
                        error: p.string("error")?,
                    })
                })?,
            })
        })?,
    })
}

/// `ServiceSpec`.
pub fn service_spec(f: &mut Fields<'_>) -> Result<core::ServiceSpec> {
    Ok(core::ServiceSpec {
        ports: f.messages("ports", |p| {
            Ok(core::ServicePort {
                name: p.string("name")?,
                protocol: p.string("protocol")?,
                app_protocol: p.string("appProtocol")?,
                port: p.i32("port")?,
                target_port: p.int_or_string("targetPort")?,
                node_port: p.i32("nodePort")?,
            })
        })?,
        selector: f.string_map("selector")?,
        cluster_ip: f.string("clusterIP")?,
        cluster_ips: f.strings("clusterIPs")?,
        r#type: f.string("type")?,
        external_ips: f.strings("externalIPs")?,
        session_affinity: f.string("sessionAffinity")?,
        load_balancer_ip: f.string("loadBalancerIP")?,
        load_balancer_source_ranges: f.strings("loadBalancerSourceRanges")?,
        external_name: f.string("externalName")?,
        external_traffic_policy: f.string("externalTrafficPolicy")?,
        health_check_node_port: f.i32("healthCheckNodePort")?,
        publish_not_ready_addresses: f.boolean("publishNotReadyAddresses")?,
        session_affinity_config: f.message("sessionAffinityConfig", |c| {
            Ok(core::SessionAffinityConfig {
                client_ip: c.message("clientIP", |ip| {
                    Ok(core::ClientIpConfig {
                        timeout_seconds: ip.i32("timeoutSeconds")?,
                    })
                })?,
            })
        })?,
        ip_families: f.strings("ipFamilies")?,
        ip_family_policy: f.string("ipFamilyPolicy")?,
        allocate_load_balancer_node_ports: f.boolean("allocateLoadBalancerNodePorts")?,
        load_balancer_class: f.string("loadBalancerClass")?,
        internal_traffic_policy: f.string("internalTrafficPolicy")?,
        traffic_distribution: f.string("trafficDistribution")?,
    })
}
