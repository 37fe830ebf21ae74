//! The status of Ingresses served by the built-in ingress controller (keelson-ingress,
//! run by every node agent): `status.loadBalancer.ingress` is that of the ingress' own
//! LoadBalancer Service, `kube-system/keelson-ingress` (see [`crate::ingressservice`]):
//! the addresses of the Ready nodes that serve the ingress. Ingresses of other classes
//! are left alone. Written from here only: the controller manager's term is the one
//! writer.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass, IngressLoadBalancerIngress, IngressLoadBalancerStatus, IngressPortStatus};
use kube::runtime::reflector::ObjectRef;

use crate::informers::SyncError;
use crate::services::ServiceCtx;

/// The status addresses `ing` should have, given the ingress Service (None: not made
/// yet, no addresses), or None when the Ingress is not of our class.
pub fn addresses(ing: &Ingress, classes: &[&IngressClass], ingress_service: Option<&Service>) -> Option<Vec<IngressLoadBalancerIngress>> {
    if !keelson_ingress::routes::is_ours(ing, keelson_ingress::CLASS, classes) {
        return None;
    }
    let lb = ingress_service.and_then(|s| s.status.as_ref()?.load_balancer.as_ref()?.ingress.clone()).unwrap_or_default();
    Some(
        lb.into_iter()
            .map(|i| IngressLoadBalancerIngress {
                ip: i.ip,
                hostname: i.hostname,
                ports: i.ports.map(|ps| ps.into_iter().map(|p| IngressPortStatus { port: p.port, protocol: p.protocol, error: p.error }).collect()),
            })
            .collect(),
    )
}

pub(crate) async fn sync(ctx: Arc<ServiceCtx>, key: String) -> Result<Option<Duration>, SyncError> {
    let (ns, name) = key.split_once('/').expect("namespace/name");
    let Some(ing) = ctx.ingresses.get(&ObjectRef::new(name).within(ns)) else { return Ok(None) };
    let want = {
        let classes = ctx.ingress_classes.state();
        let svc = ctx.services.get(&ObjectRef::new(crate::ingressservice::NAME).within(crate::ingressservice::NAMESPACE));
        addresses(&ing, &classes.iter().map(|c| c.as_ref()).collect::<Vec<_>>(), svc.as_deref())
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
    fn our_ingresses_get_the_ingress_services_addresses() {
        let mut svc = crate::ingressservice::service();
        svc.status = serde_json::from_value(json!({"loadBalancer": {"ingress": [{"ip": "10.0.0.1", "ipMode": "VIP"}, {"ip": "10.0.0.2", "ipMode": "VIP"}]}})).unwrap();
        let class = default_class();
        let both = Some(vec!["10.0.0.1".to_string(), "10.0.0.2".to_string()]);
        assert_eq!(ips(addresses(&ingress(Some("keelson")), &[&class], Some(&svc))), both);
        assert_eq!(ips(addresses(&ingress(None), &[&class], Some(&svc))), both, "no class: the default one");
        assert_eq!(ips(addresses(&ingress(Some("nginx")), &[&class], Some(&svc))), None, "another class is left alone");
        assert_eq!(ips(addresses(&ingress(None), &[], Some(&svc))), None, "no class and no default class");
        assert_eq!(ips(addresses(&ingress(Some("keelson")), &[&class], None)), Some(vec![]), "no Service yet: no address");
    }
}
