//! The Endpoints object of a Service (the deprecated API old clients still read), as a pure
//! function of the Service and its pods, as Kubernetes' Endpoints controller: ready pods
//! in `addresses`, the others in `notReadyAddresses` (all in `addresses` with
//! `publishNotReadyAddresses`), terminating pods left out unless published, one subset
//! per distinct port set, at most [`MAX_ADDRESSES`] addresses with the over-capacity
//! annotation when more were cut.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EndpointAddress, EndpointPort, EndpointSubset, Endpoints, Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::endpointslice::reconcile::{backend, is_headless, selected, HEADLESS_LABEL};

pub const MAX_ADDRESSES: usize = 1000;
pub const OVER_CAPACITY: &str = "endpoints.kubernetes.io/over-capacity";
/// Kubernetes marks the Endpoints its own controller writes so the mirroring controller
/// does not copy them back into slices.
pub const SKIP_MIRROR: &str = "endpointslice.kubernetes.io/skip-mirror";

/// What to do with the Service's Endpoints object.
#[derive(Debug, PartialEq)]
pub enum EndpointsPlan {
    Nothing,
    Create(Endpoints),
    Update(Endpoints),
}

/// The Endpoints the Service should have.
pub fn desired(svc: &Service, pods: &[&Pod]) -> Endpoints {
    let publish = svc.spec.as_ref().and_then(|s| s.publish_not_ready_addresses).unwrap_or(false);
    let zones = BTreeMap::new();
    let address_type = crate::endpointslice::reconcile::address_types(svc)[0];
    let mut subsets: Vec<(Vec<EndpointPort>, Vec<EndpointAddress>, Vec<EndpointAddress>)> = Vec::new();
    let mut total = 0usize;
    let mut truncated = false;
    let chosen = selected(svc, pods);
    // Ready addresses are kept first when truncating, as Kubernetes does.
    let backends: Vec<_> = chosen.iter().filter(|p| publish || p.metadata.deletion_timestamp.is_none()).filter_map(|p| backend(svc, p, address_type, &zones)).collect();
    let (ready, not_ready): (Vec<_>, Vec<_>) = backends.into_iter().partition(|b| b.endpoint.conditions.as_ref().and_then(|c| c.ready) == Some(true));
    for (is_ready, b) in ready.into_iter().map(|b| (true, b)).chain(not_ready.into_iter().map(|b| (false, b))) {
        if total == MAX_ADDRESSES {
            truncated = true;
            break;
        }
        if b.ports.is_empty() && !is_headless(svc) {
            continue;
        }
        total += 1;
        let ports: Vec<EndpointPort> = b.ports.iter().map(|p| EndpointPort { name: p.name.clone().filter(|n| !n.is_empty()), port: p.port.unwrap_or(0), protocol: p.protocol.clone(), app_protocol: p.app_protocol.clone() }).collect();
        let ep = b.endpoint;
        let address = EndpointAddress { ip: ep.addresses[0].clone(), hostname: ep.hostname, node_name: ep.node_name, target_ref: ep.target_ref };
        let entry = match subsets.iter_mut().position(|(p, _, _)| *p == ports) {
            Some(i) => &mut subsets[i],
            None => {
                subsets.push((ports, Vec::new(), Vec::new()));
                subsets.last_mut().expect("just pushed")
            }
        };
        if is_ready { entry.1.push(address) } else { entry.2.push(address) }
    }
    let subsets: Vec<EndpointSubset> = subsets
        .into_iter()
        .map(|(ports, mut ready, mut not_ready)| {
            ready.sort_by(|a, b| a.ip.cmp(&b.ip));
            not_ready.sort_by(|a, b| a.ip.cmp(&b.ip));
            EndpointSubset {
                addresses: (!ready.is_empty()).then_some(ready),
                not_ready_addresses: (!not_ready.is_empty()).then_some(not_ready),
                ports: (!ports.is_empty()).then_some(ports),
            }
        })
        .collect();
    let mut labels = svc.metadata.labels.clone().unwrap_or_default();
    if is_headless(svc) {
        labels.insert(HEADLESS_LABEL.into(), String::new());
    } else {
        labels.remove(HEADLESS_LABEL);
    }
    labels.insert(SKIP_MIRROR.into(), "true".into());
    let annotations = truncated.then(|| BTreeMap::from([(OVER_CAPACITY.to_string(), "truncated".to_string())]));
    Endpoints {
        metadata: ObjectMeta { name: svc.metadata.name.clone(), namespace: svc.metadata.namespace.clone(), labels: Some(labels), annotations, ..Default::default() },
        subsets: (!subsets.is_empty()).then_some(subsets),
    }
}

/// Create or update the Service's Endpoints; a Service without a selector keeps
/// whatever Endpoints were written by hand.
pub fn reconcile(svc: &Service, pods: &[&Pod], existing: Option<&Endpoints>) -> EndpointsPlan {
    if !crate::endpointslice::reconcile::managed(svc) {
        return EndpointsPlan::Nothing;
    }
    let want = desired(svc, pods);
    match existing {
        None => EndpointsPlan::Create(want),
        Some(have) => {
            let mut annotations = have.metadata.annotations.clone().unwrap_or_default();
            annotations.remove(OVER_CAPACITY);
            annotations.extend(want.metadata.annotations.clone().unwrap_or_default());
            let same = have.subsets.clone().unwrap_or_default() == want.subsets.clone().unwrap_or_default()
                && have.metadata.labels == want.metadata.labels
                && have.metadata.annotations.clone().unwrap_or_default() == annotations;
            if same {
                return EndpointsPlan::Nothing;
            }
            let mut updated = want;
            updated.metadata.annotations = (!annotations.is_empty()).then_some(annotations);
            updated.metadata.resource_version = have.metadata.resource_version.clone();
            EndpointsPlan::Update(updated)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn svc(extra: serde_json::Value) -> Service {
        let mut s = json!({"metadata": {"name": "web", "namespace": "d", "uid": "svc-uid"},
            "spec": {"clusterIP": "10.43.0.5", "selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}});
        for (k, v) in extra.as_object().unwrap() {
            s["spec"][k.as_str()] = v.clone();
        }
        serde_json::from_value(s).unwrap()
    }

    fn pod(name: &str, ip: &str, ready: bool, deleting: bool) -> Pod {
        let mut p = json!({"metadata": {"name": name, "namespace": "d", "uid": format!("{name}-uid"), "labels": {"app": "web"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x"}]},
            "status": {"phase": "Running", "podIP": ip, "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}});
        if deleting {
            p["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        serde_json::from_value(p).unwrap()
    }

    fn ips(list: &Option<Vec<EndpointAddress>>) -> Vec<&str> {
        list.iter().flatten().map(|a| a.ip.as_str()).collect()
    }

    #[test]
    fn ready_and_not_ready_addresses_terminating_left_out() {
        let pods = [pod("a", "10.42.0.3", true, false), pod("b", "10.42.0.2", false, false), pod("c", "10.42.0.4", true, true)];
        let refs: Vec<&Pod> = pods.iter().collect();
        let EndpointsPlan::Create(e) = reconcile(&svc(json!({})), &refs, None) else { panic!("create") };
        let subsets = e.subsets.unwrap();
        assert_eq!(subsets.len(), 1);
        assert_eq!(ips(&subsets[0].addresses), ["10.42.0.3"]);
        assert_eq!(ips(&subsets[0].not_ready_addresses), ["10.42.0.2"]);
        assert_eq!(subsets[0].ports.as_ref().unwrap()[0].port, 8080);
        assert_eq!(e.metadata.labels.unwrap()[SKIP_MIRROR], "true");
    }

    #[test]
    fn published_not_ready_addresses_are_ready() {
        let pods = [pod("b", "10.42.0.2", false, false), pod("c", "10.42.0.4", true, true)];
        let refs: Vec<&Pod> = pods.iter().collect();
        let e = desired(&svc(json!({"publishNotReadyAddresses": true})), &refs);
        assert_eq!(ips(&e.subsets.unwrap()[0].addresses), ["10.42.0.2", "10.42.0.4"]);
    }

    #[test]
    fn more_than_a_thousand_addresses_are_truncated_and_annotated() {
        let pods: Vec<Pod> = (0..1005).map(|i| pod(&format!("p{i:04}"), &format!("10.42.{}.{}", i / 250, i % 250 + 1), i % 2 == 0, false)).collect();
        let refs: Vec<&Pod> = pods.iter().collect();
        let e = desired(&svc(json!({})), &refs);
        let s = &e.subsets.as_ref().unwrap()[0];
        assert_eq!(ips(&s.addresses).len(), 503, "every ready address is kept first");
        assert_eq!(ips(&s.addresses).len() + ips(&s.not_ready_addresses).len(), MAX_ADDRESSES);
        assert_eq!(e.metadata.annotations.as_ref().unwrap()[OVER_CAPACITY], "truncated");
        let few = [pod("a", "10.42.0.3", true, false)];
        let few: Vec<&Pod> = few.iter().collect();
        let EndpointsPlan::Update(u) = reconcile(&svc(json!({})), &few, Some(&e)) else { panic!("update") };
        assert!(u.metadata.annotations.is_none(), "the annotation goes once under capacity");
    }

    #[test]
    fn unchanged_endpoints_and_selectorless_services_are_left_alone() {
        let pods = [pod("a", "10.42.0.3", true, false)];
        let refs: Vec<&Pod> = pods.iter().collect();
        let e = desired(&svc(json!({})), &refs);
        assert_eq!(reconcile(&svc(json!({})), &refs, Some(&e)), EndpointsPlan::Nothing);
        let manual = svc(json!({"selector": null}));
        assert_eq!(reconcile(&manual, &refs, None), EndpointsPlan::Nothing);
    }
}
