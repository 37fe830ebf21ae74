//! The built-in ingress' own Service, `kube-system/keelson-ingress`: `type: LoadBalancer`
//! with `externalTrafficPolicy: Local` and no selector. Its endpoints are the nodes that
//! serve the ingress (every node agent does, on the ports it announces in the Node
//! annotations [`keelson_ingress::HTTP_PORT_ANNOTATION`] and `…HTTPS…`), kept here as
//! EndpointSlices of this controller's own (the EndpointSlice controller keeps only
//! those of Services with a selector). The built-in service load balancer then gives the
//! Service the addresses of the nodes that serve, and every node's proxy sends the
//! Service's address and ports to its own ingress; the Ingresses' status is copied from
//! the Service's (see [`crate::ingressstatus`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;

use crate::endpointslice::reconcile::{diff, SlicePlan, MANAGED_BY_LABEL, SERVICE_NAME_LABEL, ZONE_LABEL};
use crate::informers::SyncError;
use crate::services::ServiceCtx;

pub const NAME: &str = "keelson-ingress";
pub const NAMESPACE: &str = "kube-system";
/// The `endpointslice.kubernetes.io/managed-by` of this controller's slices.
pub const MANAGED_BY: &str = "ingress-service.keelson.io";

/// The work queue key of the Service.
pub fn key() -> String {
    format!("{NAMESPACE}/{NAME}")
}

/// The Service as the controller manager creates it when it is missing.
pub fn service() -> Service {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": {"app.kubernetes.io/name": NAME, "app.kubernetes.io/component": "ingress"}},
        "spec": {"type": "LoadBalancer", "externalTrafficPolicy": "Local", "allocateLoadBalancerNodePorts": false, "ports": [
            {"name": "http", "port": 80, "protocol": "TCP", "targetPort": "http"},
            {"name": "https", "port": 443, "protocol": "TCP", "targetPort": "https"},
        ]},
    }))
    .expect("the keelson-ingress Service")
}

/// The ingress ports a node announces: (HTTP, HTTPS), each absent when off.
type AnnouncedPorts = (Option<i32>, Option<i32>);

fn announced_ports(n: &Node) -> AnnouncedPorts {
    let annotations = n.metadata.annotations.as_ref();
    let port = |key: &str| annotations.and_then(|a| a.get(key)).and_then(|v| v.parse::<u16>().ok()).filter(|p| *p != 0).map(i32::from);
    (port(keelson_ingress::HTTP_PORT_ANNOTATION), port(keelson_ingress::HTTPS_PORT_ANNOTATION))
}

fn slice_name(address_type: &str, (http, https): AnnouncedPorts) -> String {
    let p = |p: Option<i32>| p.map_or_else(|| "off".to_string(), |p| p.to_string());
    let family = if address_type == "IPv6" { "-v6" } else { "" };
    format!("{NAME}{family}-{}-{}", p(http), p(https))
}

/// The slices the Service should have: one per address family and pair of announced
/// ports, each with one endpoint per serving node (its address, name and zone; ready
/// and serving while the Node is Ready). Nodes that announce no port are left out.
pub fn desired(svc: &Service, nodes: &[&Node]) -> Vec<EndpointSlice> {
    let mut groups: BTreeMap<(&'static str, AnnouncedPorts), Vec<Endpoint>> = BTreeMap::new();
    let mut nodes: Vec<&Node> = nodes.to_vec();
    nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    for n in nodes {
        let ports = announced_ports(n);
        let Some(address) = crate::servicelb::node_address(n) else { continue };
        if ports == (None, None) {
            continue;
        }
        let ready = crate::servicelb::node_ready(n);
        let address_type = if address.contains(':') { "IPv6" } else { "IPv4" };
        groups.entry((address_type, ports)).or_default().push(Endpoint {
            addresses: vec![address],
            node_name: n.metadata.name.clone(),
            zone: n.metadata.labels.as_ref().and_then(|l| l.get(ZONE_LABEL)).cloned(),
            conditions: Some(EndpointConditions { ready: Some(ready), serving: Some(ready), terminating: Some(false) }),
            ..Default::default()
        });
    }
    let owner = crate::pods::controller_ref("v1", "Service", &svc.metadata);
    let labels = BTreeMap::from([(SERVICE_NAME_LABEL.to_string(), NAME.to_string()), (MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string())]);
    groups
        .into_iter()
        .map(|((address_type, ports), endpoints)| {
            let port = |name: &str, p: i32| EndpointPort { name: Some(name.into()), port: Some(p), protocol: Some("TCP".into()), app_protocol: None };
            EndpointSlice {
                metadata: ObjectMeta {
                    name: Some(slice_name(address_type, ports)),
                    namespace: Some(NAMESPACE.into()),
                    labels: Some(labels.clone()),
                    owner_references: Some(vec![owner.clone()]),
                    ..Default::default()
                },
                address_type: address_type.into(),
                endpoints,
                ports: Some(ports.0.map(|p| port("http", p)).into_iter().chain(ports.1.map(|p| port("https", p))).collect()),
            }
        })
        .collect()
}

/// Whether a slice is this controller's.
pub fn owned_slice(s: &EndpointSlice) -> bool {
    s.metadata.namespace.as_deref() == Some(NAMESPACE) && crate::endpointslice::reconcile::managed_slice(s, NAME, MANAGED_BY)
}

/// What turns the existing slices into the desired ones; with the Service gone (or being
/// deleted), every slice of this controller's goes.
pub fn reconcile(svc: Option<&Service>, nodes: &[&Node], existing: &[&EndpointSlice]) -> SlicePlan {
    let mine: Vec<&EndpointSlice> = existing.iter().copied().filter(|s| owned_slice(s)).collect();
    let want = match svc {
        Some(svc) if svc.metadata.deletion_timestamp.is_none() => desired(svc, nodes),
        _ => Vec::new(),
    };
    diff(&mine, want)
}

pub(crate) async fn sync(ctx: Arc<ServiceCtx>, key: String) -> Result<Option<Duration>, SyncError> {
    if key != self::key() {
        return Ok(None);
    }
    let svc = ctx.services.get(&ObjectRef::new(NAME).within(NAMESPACE));
    let plan = {
        let (nodes, slices) = (ctx.nodes.state(), ctx.slices.state());
        let nodes: Vec<&Node> = nodes.iter().map(|n| n.as_ref()).collect();
        let slices: Vec<&EndpointSlice> = slices.iter().map(|s| s.as_ref()).collect();
        reconcile(svc.as_deref(), &nodes, &slices)
    };
    if plan == SlicePlan::default() {
        return Ok(None);
    }
    tracing::debug!(created = plan.create.len(), updated = plan.update.len(), deleted = plan.delete.len(), "ingress Service slices");
    let api: Api<EndpointSlice> = Api::namespaced(ctx.term.client.clone(), NAMESPACE);
    crate::endpointslice::write_plan(&api, &plan).await.map_err(SyncError::from_kube)
}

#[cfg(test)]
mod tests;
