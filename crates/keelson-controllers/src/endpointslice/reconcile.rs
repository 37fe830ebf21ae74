//! What the EndpointSlices of one Service should hold, as a pure function of the Service,
//! the pods of its namespace, the nodes' zones and the slices that exist.
//!
//! As Kubernetes' EndpointSlice controller: a pod is a backend when the selector matches,
//! it has an IP of the slice's family and has not finished; `serving` is the pod's
//! readiness, `terminating` its deletion, `ready` is serving and not terminating (always
//! true with `publishNotReadyAddresses`). Ports are resolved per pod (a named targetPort
//! looks the container port up), and endpoints with the same resolved ports share slices of
//! at most [`MAX_ENDPOINTS_PER_SLICE`]. Unlike Kubernetes, slices have fixed names
//! (`<service>-<n>`, `<service>-v6-<n>` for IPv6), so a slice whose creation the watch has
//! not shown yet is never created twice.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ObjectReference, Pod, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use crate::selector::Selector;

pub const MAX_ENDPOINTS_PER_SLICE: usize = 100;
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "endpointslice-controller.k8s.io";
pub const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// One backend of a Service: a pod's address with its conditions and resolved ports.
#[derive(Debug, Clone, PartialEq)]
pub struct Backend {
    pub endpoint: Endpoint,
    pub ports: Vec<EndpointPort>,
}

/// The slices to write for one Service.
#[derive(Debug, Default, PartialEq)]
pub struct SlicePlan {
    pub create: Vec<EndpointSlice>,
    pub update: Vec<EndpointSlice>,
    pub delete: Vec<String>,
}

/// Whether the controllers keep this Service's endpoints (it has a selector and is not
/// ExternalName); otherwise hand-written Endpoints and slices are left alone.
pub fn managed(svc: &Service) -> bool {
    let Some(spec) = svc.spec.as_ref() else { return false };
    spec.type_.as_deref() != Some("ExternalName") && spec.selector.as_ref().is_some_and(|s| !s.is_empty())
}

pub fn is_headless(svc: &Service) -> bool {
    svc.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None")
}

fn is_ipv6(ip: &str) -> bool {
    ip.contains(':')
}

/// The address families of the Service's slices.
pub fn address_types(svc: &Service) -> Vec<&'static str> {
    let families = svc.spec.as_ref().and_then(|s| s.ip_families.clone()).unwrap_or_default();
    let mut out: Vec<&'static str> = families.iter().filter_map(|f| match f.as_str() {
        "IPv4" => Some("IPv4"),
        "IPv6" => Some("IPv6"),
        _ => None,
    }).collect();
    if out.is_empty() {
        let ip = svc.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()).unwrap_or("");
        out.push(if is_ipv6(ip) { "IPv6" } else { "IPv4" });
    }
    out
}

fn pod_ip(pod: &Pod, address_type: &str) -> Option<String> {
    let status = pod.status.as_ref()?;
    let mut ips: Vec<&str> = status.pod_ips.iter().flatten().map(|p| p.ip.as_str()).collect();
    if ips.is_empty() {
        ips.extend(status.pod_ip.as_deref());
    }
    ips.into_iter().find(|ip| !ip.is_empty() && is_ipv6(ip) == (address_type == "IPv6")).map(str::to_string)
}

/// The container port a Service port's targetPort names in `pod` (a number is itself).
fn resolve_port(pod: &Pod, target: Option<&k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>, port: i32, protocol: &str) -> Option<i32> {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    match target {
        None => Some(port),
        Some(IntOrString::Int(n)) => Some(*n),
        Some(IntOrString::String(name)) => {
            if let Ok(n) = name.parse::<i32>() {
                return Some(n);
            }
            let spec = pod.spec.as_ref()?;
            spec.containers.iter().flat_map(|c| c.ports.iter().flatten()).find(|p| p.name.as_deref() == Some(name) && p.protocol.as_deref().unwrap_or("TCP") == protocol).map(|p| p.container_port)
        }
    }
}

/// The pod's ports for the Service's ports, in the Service's order; ports a pod does not
/// have are left out.
pub fn pod_ports(svc: &Service, pod: &Pod) -> Vec<EndpointPort> {
    let ports = svc.spec.as_ref().and_then(|s| s.ports.clone()).unwrap_or_default();
    ports
        .iter()
        .filter_map(|p| {
            let protocol = p.protocol.clone().unwrap_or_else(|| "TCP".into());
            let number = resolve_port(pod, p.target_port.as_ref(), p.port, &protocol)?;
            Some(EndpointPort { name: Some(p.name.clone().unwrap_or_default()), port: Some(number), protocol: Some(protocol), app_protocol: p.app_protocol.clone() })
        })
        .collect()
}

/// Whether the pod belongs in the Service's endpoints at all (terminating ones do, with
/// their conditions saying so).
pub fn eligible(pod: &Pod) -> bool {
    !matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

/// The selected pods of the Service's namespace, in name order.
pub fn selected<'a>(svc: &Service, pods: &[&'a Pod]) -> Vec<&'a Pod> {
    let selector = Selector::new(&LabelSelector { match_labels: svc.spec.as_ref().and_then(|s| s.selector.clone()), match_expressions: None });
    let ns = svc.metadata.namespace.as_deref();
    let mut out: Vec<&Pod> = pods
        .iter()
        .copied()
        .filter(|p| p.metadata.namespace.as_deref() == ns && eligible(p))
        .filter(|p| p.metadata.labels.as_ref().is_some_and(|l| selector.matches(l)))
        .collect();
    out.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    out
}

/// The backend a pod gives the Service in `address_type`, if it has an address there.
pub fn backend(svc: &Service, pod: &Pod, address_type: &str, zones: &BTreeMap<String, String>) -> Option<Backend> {
    let ip = pod_ip(pod, address_type)?;
    let serving = crate::pods::is_ready(pod);
    let terminating = pod.metadata.deletion_timestamp.is_some();
    let publish = svc.spec.as_ref().and_then(|s| s.publish_not_ready_addresses).unwrap_or(false);
    let spec = pod.spec.as_ref();
    let node = spec.and_then(|s| s.node_name.clone());
    let hostname = spec
        .filter(|s| s.subdomain.as_deref().is_some() && s.subdomain == svc.metadata.name)
        .and_then(|s| s.hostname.clone());
    let endpoint = Endpoint {
        addresses: vec![ip],
        conditions: Some(EndpointConditions { ready: Some(publish || (serving && !terminating)), serving: Some(serving), terminating: Some(terminating) }),
        hostname,
        zone: node.as_ref().and_then(|n| zones.get(n).cloned()),
        node_name: node,
        target_ref: Some(ObjectReference {
            kind: Some("Pod".into()),
            namespace: pod.metadata.namespace.clone(),
            name: pod.metadata.name.clone(),
            uid: pod.metadata.uid.clone(),
            ..Default::default()
        }),
        ..Default::default()
    };
    Some(Backend { endpoint, ports: pod_ports(svc, pod) })
}

/// The labels every slice of the Service carries: the Service's own, its name, the
/// manager and the headless mark.
fn slice_labels(svc: &Service) -> BTreeMap<String, String> {
    let mut labels = svc.metadata.labels.clone().unwrap_or_default();
    labels.insert(SERVICE_NAME_LABEL.into(), svc.metadata.name.clone().unwrap_or_default());
    labels.insert(MANAGED_BY_LABEL.into(), MANAGED_BY.into());
    if is_headless(svc) {
        labels.insert(HEADLESS_LABEL.into(), String::new());
    } else {
        labels.remove(HEADLESS_LABEL);
    }
    labels
}

/// Whether a slice is this controller's for the Service named `svc`.
pub fn owned_slice(slice: &EndpointSlice, svc: &str) -> bool {
    managed_slice(slice, svc, MANAGED_BY)
}

/// Whether a slice is of the Service named `svc` and kept by `manager` (its
/// `endpointslice.kubernetes.io/managed-by`).
pub fn managed_slice(slice: &EndpointSlice, svc: &str, manager: &str) -> bool {
    let labels = slice.metadata.labels.as_ref();
    labels.and_then(|l| l.get(SERVICE_NAME_LABEL)).map(String::as_str) == Some(svc) && labels.and_then(|l| l.get(MANAGED_BY_LABEL)).map(String::as_str) == Some(manager)
}

fn slice_name(svc: &str, address_type: &str, n: usize) -> String {
    if address_type == "IPv6" {
        format!("{svc}-v6-{n}")
    } else {
        format!("{svc}-{n}")
    }
}

/// The slices the Service should have, by name.
pub fn desired(svc: &Service, pods: &[&Pod], zones: &BTreeMap<String, String>) -> Vec<EndpointSlice> {
    let name = svc.metadata.name.clone().unwrap_or_default();
    let owner = crate::pods::controller_ref("v1", "Service", &svc.metadata);
    let labels = slice_labels(svc);
    let chosen = selected(svc, pods);
    let mut out = Vec::new();
    for address_type in address_types(svc) {
        // Group by resolved ports, keeping the pods' order inside each group.
        let mut groups: Vec<(Vec<EndpointPort>, Vec<Endpoint>)> = Vec::new();
        for b in chosen.iter().filter_map(|p| backend(svc, p, address_type, zones)) {
            match groups.iter_mut().find(|(ports, _)| *ports == b.ports) {
                Some((_, eps)) => eps.push(b.endpoint),
                None => groups.push((b.ports, vec![b.endpoint])),
            }
        }
        if groups.is_empty() {
            // Kubernetes keeps one empty slice with the Service's ports, so clients can tell
            // "no endpoints" from "not synced".
            let ports = svc.spec.as_ref().and_then(|s| s.ports.clone()).unwrap_or_default().iter().map(|p| EndpointPort {
                name: Some(p.name.clone().unwrap_or_default()),
                port: None,
                protocol: Some(p.protocol.clone().unwrap_or_else(|| "TCP".into())),
                app_protocol: p.app_protocol.clone(),
            }).collect();
            groups.push((ports, Vec::new()));
        }
        let mut n = 0;
        for (ports, endpoints) in groups {
            let chunks: Vec<Vec<Endpoint>> = if endpoints.is_empty() { vec![Vec::new()] } else { endpoints.chunks(MAX_ENDPOINTS_PER_SLICE).map(<[Endpoint]>::to_vec).collect() };
            for chunk in chunks {
                out.push(EndpointSlice {
                    metadata: ObjectMeta {
                        name: Some(slice_name(&name, address_type, n)),
                        namespace: svc.metadata.namespace.clone(),
                        labels: Some(labels.clone()),
                        owner_references: Some(vec![owner.clone()]),
                        ..Default::default()
                    },
                    address_type: address_type.into(),
                    endpoints: chunk,
                    ports: Some(ports.clone()),
                });
                n += 1;
            }
        }
    }
    out
}

/// What changes turn the Service's existing slices into the desired ones. A slice that
/// differs only in server-owned metadata is left alone.
pub fn reconcile(svc: &Service, pods: &[&Pod], zones: &BTreeMap<String, String>, existing: &[&EndpointSlice]) -> SlicePlan {
    let name = svc.metadata.name.clone().unwrap_or_default();
    let mine: Vec<&EndpointSlice> = existing.iter().copied().filter(|s| owned_slice(s, &name) && s.metadata.namespace == svc.metadata.namespace).collect();
    let mut plan = SlicePlan::default();
    if !managed(svc) {
        plan.delete = mine.iter().filter_map(|s| s.metadata.name.clone()).collect();
        return plan;
    }
    diff(&mine, desired(svc, pods, zones))
}

/// What changes turn the slices `mine` into `want` (matched by name). A slice that
/// differs only in server-owned metadata is left alone.
pub fn diff(mine: &[&EndpointSlice], want: Vec<EndpointSlice>) -> SlicePlan {
    let mut plan = SlicePlan::default();
    for w in &want {
        match mine.iter().find(|s| s.metadata.name == w.metadata.name) {
            None => plan.create.push(w.clone()),
            Some(have) => {
                if have.address_type != w.address_type || have.endpoints != w.endpoints || have.ports.clone().unwrap_or_default() != w.ports.clone().unwrap_or_default() || have.metadata.labels != w.metadata.labels {
                    let mut updated = w.clone();
                    updated.metadata.resource_version = have.metadata.resource_version.clone();
                    plan.update.push(updated);
                }
            }
        }
    }
    for have in mine.iter() {
        if !want.iter().any(|w| w.metadata.name == have.metadata.name) {
            plan.delete.extend(have.metadata.name.clone());
        }
    }
    plan.delete.sort();
    plan
}

#[cfg(test)]
#[path = "reconcile_tests.rs"]
mod tests;
