//! The built-in service load balancer (as k3s's ServiceLB, without its DaemonSet): a
//! `type: LoadBalancer` Service gets the nodes' addresses as `status.loadBalancer.ingress`
//! and every node's proxy serves its port on them. With `externalTrafficPolicy: Local`
//! only the nodes running a ready endpoint are announced. A node's port serves one
//! Service: the earliest LoadBalancer Service on it keeps it, a later one is announced
//! only on nodes where its ports are free. A Service with a `loadBalancerClass` belongs
//! to another implementation and is left alone.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{LoadBalancerIngress, LoadBalancerStatus, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, PostParams};
use kube::runtime::reflector::ObjectRef;

use crate::informers::SyncError;
use crate::services::ServiceCtx;

pub(crate) fn node_ready(n: &Node) -> bool {
    n.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// A node's announced address: its ExternalIP, or else its InternalIP.
pub(crate) fn node_address(n: &Node) -> Option<String> {
    let addrs = n.status.as_ref()?.addresses.as_ref()?;
    let by = |t: &str| addrs.iter().find(|a| a.type_ == t).map(|a| a.address.clone());
    by("ExternalIP").or_else(|| by("InternalIP"))
}

/// A node's announced addresses for a Service of `families` (`spec.ipFamilies`, IPv4
/// when unset): for each family, the node's ExternalIP of it, or else its InternalIP
/// of it (a dual-stack Service on a dual-stack node gets one of each).
pub(crate) fn node_addresses(n: &Node, families: &[String]) -> Vec<String> {
    let Some(addrs) = n.status.as_ref().and_then(|s| s.addresses.as_ref()) else { return Vec::new() };
    let ipv4 = ["IPv4".to_string()];
    let families = if families.is_empty() { &ipv4[..] } else { families };
    let by = |t: &str, v6: bool| addrs.iter().find(|a| a.type_ == t && a.address.contains(':') == v6).map(|a| a.address.clone());
    families.iter().filter_map(|f| by("ExternalIP", f == "IPv6").or_else(|| by("InternalIP", f == "IPv6"))).collect()
}

/// Whether this controller serves the Service: `type: LoadBalancer` without a
/// `loadBalancerClass`, and not being deleted.
fn ours(svc: &Service) -> bool {
    svc.metadata.deletion_timestamp.is_none()
        && svc.spec.as_ref().is_some_and(|spec| spec.type_.as_deref() == Some("LoadBalancer") && spec.load_balancer_class.is_none())
}

/// The nodes that could carry the Service: Ready and schedulable ones, and with
/// `externalTrafficPolicy: Local` only those running a ready endpoint.
fn eligible<'a>(svc: &Service, nodes: &[&'a Node], slices: &[&EndpointSlice]) -> Vec<&'a Node> {
    let local = svc.spec.as_ref().and_then(|s| s.external_traffic_policy.as_deref()) == Some("Local");
    let name = svc.metadata.name.as_deref();
    let with_endpoints: BTreeSet<&str> = slices
        .iter()
        .filter(|s| s.metadata.namespace == svc.metadata.namespace && s.metadata.labels.as_ref().and_then(|l| l.get(crate::endpointslice::reconcile::SERVICE_NAME_LABEL)).map(String::as_str) == name)
        .flat_map(|s| s.endpoints.iter())
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
        .filter_map(|e| e.node_name.as_deref())
        .collect();
    nodes
        .iter()
        .copied()
        .filter(|n| node_ready(n) && !n.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false))
        .filter(|n| !local || n.metadata.name.as_deref().is_some_and(|m| with_endpoints.contains(m)))
        .collect()
}

/// The (protocol, port) pairs the Service takes on a node's address.
fn ports(svc: &Service) -> BTreeSet<(String, i32)> {
    svc.spec.iter().flat_map(|s| s.ports.iter().flatten()).map(|p| (p.protocol.clone().unwrap_or_else(|| "TCP".into()), p.port)).collect()
}

/// Which of two Services came first: the older, then by namespace and name.
fn precedence(s: &Service) -> (Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>, Option<&str>, Option<&str>) {
    (s.metadata.creation_timestamp.as_ref(), s.metadata.namespace.as_deref(), s.metadata.name.as_deref())
}

/// The ingress the Service should have, or None when it is not this controller's: the
/// addresses of its eligible nodes, less those where an earlier LoadBalancer Service
/// eligible on that node already takes one of its ports (as k3s's ServiceLB, a node's
/// port serves one Service; a Service with no node left stays without an address).
pub fn ingress(svc: &Service, services: &[&Service], nodes: &[&Node], slices: &[&EndpointSlice]) -> Option<Vec<LoadBalancerIngress>> {
    if !ours(svc) {
        return None;
    }
    let mine = ports(svc);
    let mut taken: BTreeSet<&str> = BTreeSet::new();
    for other in services.iter().filter(|o| ours(o) && precedence(o) < precedence(svc) && !ports(o).is_disjoint(&mine)) {
        taken.extend(eligible(other, nodes, slices).iter().filter_map(|n| n.metadata.name.as_deref()));
    }
    let families = svc.spec.as_ref().and_then(|s| s.ip_families.clone()).unwrap_or_default();
    let mut ips: Vec<String> = eligible(svc, nodes, slices)
        .into_iter()
        .filter(|n| n.metadata.name.as_deref().is_none_or(|m| !taken.contains(m)))
        .flat_map(|n| node_addresses(n, &families))
        .collect();
    ips.sort();
    ips.dedup();
    Some(ips.into_iter().map(|ip| LoadBalancerIngress { ip: Some(ip), ip_mode: Some("VIP".into()), ..Default::default() }).collect())
}

pub(crate) async fn sync(ctx: Arc<ServiceCtx>, key: String) -> Result<Option<Duration>, SyncError> {
    let (ns, name) = key.split_once('/').expect("namespace/name");
    let Some(svc) = ctx.services.get(&ObjectRef::new(name).within(ns)) else {
        // A Service gone may free node ports a later one waits for.
        requeue_sharing(&ctx, None);
        return Ok(None);
    };
    let (services, nodes, slices) = (ctx.services.state(), ctx.nodes.state(), ctx.slices.state());
    let services: Vec<&Service> = services.iter().map(|s| s.as_ref()).collect();
    let nodes: Vec<&Node> = nodes.iter().map(|n| n.as_ref()).collect();
    let slices: Vec<&EndpointSlice> = slices.iter().map(|s| s.as_ref()).collect();
    let Some(want) = ingress(&svc, &services, &nodes, &slices) else { return Ok(None) };
    let have = svc.status.as_ref().and_then(|s| s.load_balancer.as_ref()).and_then(|l| l.ingress.clone()).unwrap_or_default();
    if have == want {
        return Ok(None);
    }
    let mut updated = (*svc).clone();
    updated.status.get_or_insert_with(Default::default).load_balancer = Some(LoadBalancerStatus { ingress: (!want.is_empty()).then_some(want) });
    let written = replace_status(&ctx, ns, name, &updated).await?;
    // Nodes it took or let go of change what the later Services on its ports may have.
    requeue_sharing(&ctx, Some(&svc));
    Ok(written)
}

/// Queues the other LoadBalancer Services that share a port with `svc` (every one when
/// None). Only called when something changed, so two Services never queue each other
/// without end.
fn requeue_sharing(ctx: &ServiceCtx, svc: Option<&Service>) {
    let mine = svc.map(ports);
    for other in ctx.services.state() {
        if !ours(&other) || svc.is_some_and(|s| s.metadata.uid == other.metadata.uid) {
            continue;
        }
        if mine.as_ref().is_none_or(|m| !ports(&other).is_disjoint(m)) {
            ctx.lb_queue.add(&crate::informers::key_of(other.as_ref()));
        }
    }
}

/// Writes `updated`'s status through the term's client, conditional on the version it
/// was read at; a conflict is tried again shortly.
pub(crate) async fn replace_status<K>(ctx: &ServiceCtx, ns: &str, name: &str, updated: &K) -> Result<Option<Duration>, SyncError>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()> + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    let api: Api<K> = Api::namespaced(ctx.term.client.clone(), ns);
    match api.replace_status(name, &PostParams::default(), updated).await {
        Ok(_) => Ok(None),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(Some(Duration::from_millis(200))),
        Err(e) => Err(SyncError::from_kube(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, ip: &str, ready: bool) -> Node {
        serde_json::from_value(json!({"metadata": {"name": name}, "status": {"addresses": [{"type": "InternalIP", "address": ip}],
            "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}})).unwrap()
    }

    fn svc(spec: serde_json::Value) -> Service {
        serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "d"}, "spec": spec})).unwrap()
    }

    fn ips(v: Option<Vec<LoadBalancerIngress>>) -> Option<Vec<String>> {
        v.map(|v| v.into_iter().filter_map(|i| i.ip).collect())
    }

    #[test]
    fn a_load_balancer_gets_every_ready_nodes_address() {
        let nodes = [node("n2", "10.0.0.3", true), node("n1", "10.0.0.2", true), node("n3", "10.0.0.4", false)];
        let n: Vec<&Node> = nodes.iter().collect();
        assert_eq!(ips(ingress(&svc(json!({"type": "LoadBalancer"})), &[], &n, &[])), Some(vec!["10.0.0.2".into(), "10.0.0.3".into()]));
        assert_eq!(ingress(&svc(json!({"type": "NodePort"})), &[], &n, &[]), None);
        assert_eq!(ingress(&svc(json!({"type": "LoadBalancer", "loadBalancerClass": "example.com/lb"})), &[], &n, &[]), None);
    }

    #[test]
    fn a_dual_stack_load_balancer_gets_each_nodes_address_of_each_of_its_families() {
        let dual = |name: &str, v4: &str, v6: &str| -> Node {
            serde_json::from_value(json!({"metadata": {"name": name}, "status": {"addresses": [{"type": "InternalIP", "address": v4}, {"type": "InternalIP", "address": v6}, {"type": "Hostname", "address": name}],
                "conditions": [{"type": "Ready", "status": "True"}]}})).unwrap()
        };
        let nodes = [dual("n1", "10.0.0.2", "fd00::2"), dual("n2", "10.0.0.3", "fd00::3"), node("n3", "10.0.0.4", true)];
        let n: Vec<&Node> = nodes.iter().collect();
        let got = |families: serde_json::Value| ips(ingress(&svc(json!({"type": "LoadBalancer", "ipFamilies": families})), &[], &n, &[])).unwrap();
        assert_eq!(got(json!(["IPv4", "IPv6"])), ["10.0.0.2", "10.0.0.3", "10.0.0.4", "fd00::2", "fd00::3"], "an IPv4-only node gives its IPv4 address only");
        assert_eq!(got(json!(["IPv6"])), ["fd00::2", "fd00::3"]);
        assert_eq!(got(json!(["IPv4"])), ["10.0.0.2", "10.0.0.3", "10.0.0.4"]);
        assert_eq!(ips(ingress(&svc(json!({"type": "LoadBalancer"})), &[], &n, &[])).unwrap(), ["10.0.0.2", "10.0.0.3", "10.0.0.4"], "no ipFamilies is IPv4");
    }

    #[test]
    fn local_policy_announces_only_nodes_with_a_ready_endpoint() {
        let nodes = [node("n1", "10.0.0.2", true), node("n2", "10.0.0.3", true)];
        let n: Vec<&Node> = nodes.iter().collect();
        let slice: EndpointSlice = serde_json::from_value(json!({"metadata": {"name": "web-0", "namespace": "d", "labels": {"kubernetes.io/service-name": "web"}}, "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.42.0.2"], "nodeName": "n2", "conditions": {"ready": true}}, {"addresses": ["10.42.0.3"], "nodeName": "n1", "conditions": {"ready": false}}]})).unwrap();
        let got = ingress(&svc(json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local"})), &[], &n, &[&slice]);
        assert_eq!(ips(got), Some(vec!["10.0.0.3".into()]));
    }

    #[test]
    fn a_nodes_port_serves_the_earliest_load_balancer_only() {
        let nodes = [node("n1", "10.0.0.2", true), node("n2", "10.0.0.3", true)];
        let n: Vec<&Node> = nodes.iter().collect();
        let lb = |name: &str, created: &str, port: i32, local: bool| -> Service {
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": "d", "creationTimestamp": created},
                "spec": {"type": "LoadBalancer", "externalTrafficPolicy": if local {"Local"} else {"Cluster"}, "ports": [{"port": port}]}})).unwrap()
        };
        // "web" has an endpoint on n2 only.
        let slice: EndpointSlice = serde_json::from_value(json!({"metadata": {"name": "web-0", "namespace": "d", "labels": {"kubernetes.io/service-name": "web"}}, "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.42.0.2"], "nodeName": "n2", "conditions": {"ready": true}}]})).unwrap();
        let (web, late, other_port) = (lb("web", "2026-01-01T00:00:00Z", 80, true), lb("late", "2026-01-02T00:00:00Z", 80, false), lb("other", "2026-01-02T00:00:00Z", 81, false));
        let all = [&web, &late, &other_port];
        assert_eq!(ips(ingress(&web, &all, &n, &[&slice])), Some(vec!["10.0.0.3".into()]));
        assert_eq!(ips(ingress(&late, &all, &n, &[&slice])), Some(vec!["10.0.0.2".into()]), "port 80 of n2 is web's; n1's is free");
        assert_eq!(ips(ingress(&other_port, &all, &n, &[&slice])), Some(vec!["10.0.0.2".into(), "10.0.0.3".into()]), "another port shares every node");
        let web_everywhere = lb("web", "2026-01-01T00:00:00Z", 80, false);
        assert_eq!(ips(ingress(&late, &[&web_everywhere, &late], &n, &[])), Some(vec![]), "no node left: no address");
    }
}
