use super::*;
use serde_json::json;

fn node(name: &str, ip: &str, ready: bool, http: Option<&str>, https: Option<&str>) -> Node {
    let mut annotations = serde_json::Map::new();
    if let Some(p) = http {
        annotations.insert(keelson_ingress::HTTP_PORT_ANNOTATION.into(), json!(p));
    }
    if let Some(p) = https {
        annotations.insert(keelson_ingress::HTTPS_PORT_ANNOTATION.into(), json!(p));
    }
    serde_json::from_value(json!({"metadata": {"name": name, "annotations": annotations, "labels": {"topology.kubernetes.io/zone": "z1"}},
        "status": {"addresses": [{"type": "InternalIP", "address": ip}], "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}}))
    .unwrap()
}

fn stored_service() -> Service {
    let mut s = service();
    s.metadata.uid = Some("uid-1".into());
    s
}

/// (slice name, [(address, node, ready)], [(port name, number)]).
type SliceShape = (String, Vec<(String, String, bool)>, Vec<(String, i32)>);

fn shape(s: &EndpointSlice) -> SliceShape {
    let eps = s.endpoints.iter().map(|e| (e.addresses[0].clone(), e.node_name.clone().unwrap(), e.conditions.as_ref().unwrap().ready.unwrap())).collect();
    let ports = s.ports.iter().flatten().map(|p| (p.name.clone().unwrap(), p.port.unwrap())).collect();
    (s.metadata.name.clone().unwrap(), eps, ports)
}

#[test]
fn the_service_is_a_local_load_balancer_without_node_ports_or_selector() {
    let spec = service().spec.unwrap();
    assert_eq!(spec.type_.as_deref(), Some("LoadBalancer"));
    assert_eq!(spec.external_traffic_policy.as_deref(), Some("Local"));
    assert_eq!(spec.allocate_load_balancer_node_ports, Some(false));
    assert!(spec.selector.is_none());
    let ports: Vec<(String, i32)> = spec.ports.unwrap().into_iter().map(|p| (p.name.unwrap(), p.port)).collect();
    assert_eq!(ports, [("http".to_string(), 80), ("https".to_string(), 443)]);
}

#[test]
fn every_serving_node_is_an_endpoint_grouped_by_its_ports() {
    let nodes = [
        node("n2", "10.0.0.3", true, Some("80"), Some("443")),
        node("n1", "10.0.0.2", false, Some("80"), Some("443")),
        node("n3", "10.0.0.4", true, Some("8080"), None),
        node("hollow", "240.0.0.7", true, None, None),
        node("bad", "10.0.0.9", true, Some("http"), Some("0")),
    ];
    let n: Vec<&Node> = nodes.iter().collect();
    let svc = stored_service();
    let got: Vec<SliceShape> = desired(&svc, &n).iter().map(shape).collect();
    let ep = |a: &str, n: &str, r: bool| (a.to_string(), n.to_string(), r);
    let port = |n: &str, p: i32| (n.to_string(), p);
    assert_eq!(
        got,
        vec![
            ("keelson-ingress-80-443".to_string(), vec![ep("10.0.0.2", "n1", false), ep("10.0.0.3", "n2", true)], vec![port("http", 80), port("https", 443)]),
            ("keelson-ingress-8080-off".to_string(), vec![ep("10.0.0.4", "n3", true)], vec![port("http", 8080)]),
        ]
    );
    let s = &desired(&svc, &n)[0];
    assert!(owned_slice(s), "its own manager label: the EndpointSlice controller leaves it alone");
    assert!(!crate::endpointslice::reconcile::owned_slice(s, NAME));
    assert_eq!(s.metadata.owner_references.as_ref().unwrap()[0].uid, "uid-1");
    assert_eq!(s.endpoints[0].zone.as_deref(), Some("z1"));
}

#[test]
fn slices_follow_the_nodes_and_go_with_the_service() {
    let svc = stored_service();
    let one = [node("n1", "10.0.0.2", true, Some("80"), Some("443"))];
    let n: Vec<&Node> = one.iter().collect();
    let plan = reconcile(Some(&svc), &n, &[]);
    assert_eq!(plan.create.len(), 1);
    let mut stored = plan.create[0].clone();
    stored.metadata.resource_version = Some("7".into());
    assert_eq!(reconcile(Some(&svc), &n, &[&stored]), SlicePlan::default(), "nothing to do when it matches");

    // The node turns its HTTPS port off: the slice is replaced by one of the new pair.
    let changed = [node("n1", "10.0.0.2", true, Some("80"), None)];
    let n2: Vec<&Node> = changed.iter().collect();
    let plan = reconcile(Some(&svc), &n2, &[&stored]);
    assert_eq!(plan.create.iter().map(|s| s.metadata.name.clone().unwrap()).collect::<Vec<_>>(), ["keelson-ingress-80-off"]);
    assert_eq!(plan.delete, ["keelson-ingress-80-443"]);

    // Not Ready: the same slice, updated in place at its version.
    let down = [node("n1", "10.0.0.2", false, Some("80"), Some("443"))];
    let n3: Vec<&Node> = down.iter().collect();
    let plan = reconcile(Some(&svc), &n3, &[&stored]);
    assert_eq!(plan.update.len(), 1);
    assert_eq!(plan.update[0].metadata.resource_version.as_deref(), Some("7"));

    // The Service gone: its slices go; another Service's slices are never touched.
    let mut other = stored.clone();
    other.metadata.labels.as_mut().unwrap().insert(MANAGED_BY_LABEL.into(), crate::endpointslice::reconcile::MANAGED_BY.into());
    other.metadata.name = Some("keelson-ingress-x".into());
    let plan = reconcile(None, &n, &[&stored, &other]);
    assert_eq!(plan.delete, ["keelson-ingress-80-443"]);
}

#[test]
fn the_load_balancer_announces_the_nodes_that_serve() {
    let mut svc = stored_service();
    svc.metadata.namespace = Some(NAMESPACE.into());
    let nodes = [node("n1", "10.0.0.2", true, Some("80"), Some("443")), node("n2", "10.0.0.3", true, None, None)];
    let n: Vec<&Node> = nodes.iter().collect();
    let slices = desired(&svc, &n);
    let s: Vec<&EndpointSlice> = slices.iter().collect();
    let got = crate::servicelb::ingress(&svc, &[&svc], &n, &s).unwrap();
    assert_eq!(got.into_iter().filter_map(|i| i.ip).collect::<Vec<_>>(), ["10.0.0.2"]);
}
