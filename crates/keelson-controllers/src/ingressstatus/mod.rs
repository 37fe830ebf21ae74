//! The status of Ingresses served by the built-in ingress controller (keelson-ingress,
//! run by every node agent): `status.loadBalancer.ingress` lists the addresses of the
//! Ready nodes (ExternalIP, else InternalIP), which all serve every Ingress of class
//! `keelson` on their HTTP and HTTPS ports. Hollow nodes (240.0.0.0/4) serve nothing and
//! are left out. Ingresses of other classes are left alone. Written from here only: the
//! controller manager's term is the one writer.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass, IngressLoadBalancerIngress, IngressLoadBalancerStatus};
use kube::runtime::reflector::ObjectRef;

use crate::informers::SyncError;
use crate::services::ServiceCtx;

fn serving(n: &Node) -> Option<String> {
    crate::servicelb::node_ready(n).then(|| crate::servicelb::node_address(n)).flatten().filter(|a| !a.parse::<Ipv4Addr>().is_ok_and(|ip| ip.octets()[0] >= 240))
}

/// The status addresses `ing` should have, or None when it is not of our class.
pub fn addresses(ing: &Ingress, classes: &[&IngressClass], nodes: &[&Node]) -> Option<Vec<IngressLoadBalancerIngress>> {
    if !keelson_ingress::routes::is_ours(ing, keelson_ingress::CLASS, classes) {
        return None;
    }
    let mut ips: Vec<String> = nodes.iter().filter_map(|n| serving(n)).collect();
    ips.sort();
    ips.dedup();
    Some(ips.into_iter().map(|ip| IngressLoadBalancerIngress { ip: Some(ip), ..Default::default() }).collect())
}

pub(crate) async fn sync(ctx: Arc<ServiceCtx>, key: String) -> Result<Option<Duration>, SyncError> {
    let (ns, name) = key.split_once('/').expect("namespace/name");
    let Some(ing) = ctx.ingresses.get(&ObjectRef::new(name).within(ns)) else { return Ok(None) };
    let want = {
        let (classes, nodes) = (ctx.ingress_classes.state(), ctx.nodes.state());
        addresses(&ing, &classes.iter().map(|c| c.as_ref()).collect::<Vec<_>>(), &nodes.iter().map(|n| n.as_ref()).collect::<Vec<_>>())
    };
    let status = ing.status.as_ref().and_then(|s| s.load_balancer.as_ref());
    match want {
        Some(want) if status.and_then(|l| l.ingress.as_ref()).map_or(!want.is_empty(), |have| *have != want) => {
            let mut updated = (*ing).clone();
            updated.status.get_or_insert_with(Default::default).load_balancer = Some(IngressLoadBalancerStatus { ingress: (!want.is_empty()).then_some(want) });
            crate::servicelb::replace_status(&ctx, ns, name, &updated).await
        }
        _ => Ok(None),
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

    fn ingress(class: Option<&str>) -> Ingress {
        serde_json::from_value(json!({"metadata": {"name": "shop", "namespace": "shop"}, "spec": {"ingressClassName": class}})).unwrap()
    }

    fn default_class() -> IngressClass {
        serde_json::from_value(json!({"metadata": {"name": "keelson", "annotations": {"ingressclass.kubernetes.io/is-default-class": "true"}}, "spec": {"controller": "keelson.io/ingress"}})).unwrap()
    }

    fn ips(v: Option<Vec<IngressLoadBalancerIngress>>) -> Option<Vec<String>> {
        v.map(|v| v.into_iter().filter_map(|i| i.ip).collect())
    }

    #[test]
    fn our_ingresses_get_the_ready_real_nodes_addresses() {
        let nodes = [node("b", "10.0.0.2", true), node("a", "10.0.0.1", true), node("down", "10.0.0.3", false), node("hollow", "240.0.0.7", true)];
        let nodes: Vec<&Node> = nodes.iter().collect();
        let class = default_class();
        assert_eq!(ips(addresses(&ingress(Some("keelson")), &[&class], &nodes)), Some(vec!["10.0.0.1".into(), "10.0.0.2".into()]));
        assert_eq!(ips(addresses(&ingress(None), &[&class], &nodes)), Some(vec!["10.0.0.1".into(), "10.0.0.2".into()]), "no class: the default one");
        assert_eq!(ips(addresses(&ingress(Some("nginx")), &[&class], &nodes)), None, "another class is left alone");
        assert_eq!(ips(addresses(&ingress(None), &[], &nodes)), None, "no class and no default class");
    }
}
