//! Encoder for `v1` `Node` (response-only): spec (`podCIDR(s)`,
//! `providerID`, `unschedulable`, `taints`) and status (`capacity`,
//! `allocatable`, `phase`, `conditions`, `addresses`, `daemonEndpoints`,
//! `nodeInfo` without `swap`, `images`, `volumesInUse`). Other status
//! fields (`volumesAttached`, `config`, `runtimeHandlers`, `features`,
//! `declaredFeatures`) are refused.

use k8s_pb::api::core::v1 as core;

use super::fields::{Fields, Result};
use super::meta::object_meta;

/// `Node`.
pub fn node(f: &mut Fields<'_>) -> Result<core::Node> {
    Ok(core::Node {
        metadata: f.message("metadata", object_meta)?,
        spec: f.message("spec", |s| {
            Ok(core::NodeSpec {
                pod_cidr: s.string("podCIDR")?,
                pod_cid_rs: s.strings("podCIDRs")?,
                provider_id: s.string("providerID")?,
                unschedulable: s.boolean("unschedulable")?,
                taints: s.messages("taints", |t| {
                    Ok(core::Taint {
                        key: t.string("key")?,
                        value: t.string("value")?,
                        effect: t.string("effect")?,
                        time_added: t.time("timeAdded")?,
                    })
                })?,
                external_id: s.string("externalID")?,
                config_source: None,
            })
        })?,
        status: f.message("status", node_status)?,
    })
}

fn node_status(s: &mut Fields<'_>) -> Result<core::NodeStatus> {
    Ok(core::NodeStatus {
        capacity: s.quantities("capacity")?,
        allocatable: s.quantities("allocatable")?,
        phase: s.string("phase")?,
        conditions: s.messages("conditions", |c| {
            Ok(core::NodeCondition {
                r#type: c.string("type")?,
                status: c.string("status")?,
                last_heartbeat_time: c.time("lastHeartbeatTime")?,
                last_transition_time: c.time("lastTransitionTime")?,
                reason: c.string("reason")?,
                message: c.string("message")?,
            })
        })?,
        addresses: s.messages("addresses", |a| {
            Ok(core::NodeAddress {
                r#type: a.string("type")?,
                address: a.string("address")?,
            })
        })?,
        daemon_endpoints: s.message("daemonEndpoints", |d| {
            Ok(core::NodeDaemonEndpoints {
                kubelet_endpoint: d.message("kubeletEndpoint", |k| {
                    Ok(core::DaemonEndpoint {
                        port: k.i32("Port")?,
                    })
                })?,
            })
        })?,
        node_info: s.message("nodeInfo", |i| {
            Ok(core::NodeSystemInfo {
                machine_id: i.string("machineID")?,
                system_uuid: i.string("systemUUID")?,
                boot_id: i.string("bootID")?,
                kernel_version: i.string("kernelVersion")?,
                os_image: i.string("osImage")?,
                container_runtime_version: i.string("containerRuntimeVersion")?,
                kubelet_version: i.string("kubeletVersion")?,
                kube_proxy_version: i.string("kubeProxyVersion")?,
                operating_system: i.string("operatingSystem")?,
                architecture: i.string("architecture")?,
                swap: None,
            })
        })?,
        images: s.messages("images", |i| {
            Ok(core::ContainerImage {
                names: i.strings("names")?,
                size_bytes: i.i64("sizeBytes")?,
            })
        })?,
        volumes_in_use: s.strings("volumesInUse")?,
        ..Default::default()
    })
}
