use super::*;
use serde_json::{json, Value};

fn svc(extra: Value) -> Service {
    let mut s = json!({"metadata": {"name": "web", "namespace": "d", "uid": "svc-uid", "labels": {"team": "a"}},
        "spec": {"clusterIP": "10.43.0.5", "ipFamilies": ["IPv4"], "selector": {"app": "web"},
                 "ports": [{"name": "http", "port": 80, "targetPort": "web", "protocol": "TCP"}, {"name": "metrics", "port": 9090, "protocol": "TCP"}]}});
    for (k, v) in extra.as_object().unwrap() {
        s["spec"][k.as_str()] = v.clone();
    }
    serde_json::from_value(s).unwrap()
}

fn pod(name: &str, ip: &str, ready: bool, extra: Value) -> Pod {
    let mut p = json!({"metadata": {"name": name, "namespace": "d", "uid": format!("{name}-uid"), "labels": {"app": "web"}},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x", "ports": [{"name": "web", "containerPort": 8080}]}]},
        "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}], "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}});
    for (k, v) in extra.as_object().unwrap() {
        match k.as_str() {
            "deleting" => p["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z"),
            "labels" => p["metadata"]["labels"] = v.clone(),
            "phase" => p["status"]["phase"] = v.clone(),
            "containerPort" => p["spec"]["containers"][0]["ports"][0]["containerPort"] = v.clone(),
            other => p["spec"][other] = v.clone(),
        }
    }
    serde_json::from_value(p).unwrap()
}

fn zones() -> BTreeMap<String, String> {
    BTreeMap::from([("n1".to_string(), "zone-a".to_string())])
}

fn plan(s: &Service, pods: &[Pod], existing: &[EndpointSlice]) -> SlicePlan {
    let p: Vec<&Pod> = pods.iter().collect();
    let e: Vec<&EndpointSlice> = existing.iter().collect();
    reconcile(s, &p, &zones(), &e)
}

fn conditions(e: &Endpoint) -> (bool, bool, bool) {
    let c = e.conditions.as_ref().unwrap();
    (c.ready.unwrap(), c.serving.unwrap(), c.terminating.unwrap())
}

#[test]
fn a_service_gets_one_slice_with_conditions_ports_and_references() {
    let pods = [
        pod("a", "10.42.0.2", true, json!({})),
        pod("b", "10.42.0.3", false, json!({})),
        pod("c", "10.42.0.4", true, json!({"deleting": true})),
        pod("d", "10.42.0.5", true, json!({"phase": "Succeeded"})),
        pod("e", "10.42.0.6", true, json!({"labels": {"app": "other"}})),
    ];
    let p = plan(&svc(json!({})), &pods, &[]);
    assert_eq!(p.create.len(), 1);
    let s = &p.create[0];
    assert_eq!(s.metadata.name.as_deref(), Some("web-0"));
    assert_eq!(s.address_type, "IPv4");
    let labels = s.metadata.labels.as_ref().unwrap();
    assert_eq!(labels[SERVICE_NAME_LABEL], "web");
    assert_eq!(labels[MANAGED_BY_LABEL], MANAGED_BY);
    assert_eq!(labels["team"], "a", "the Service's labels are copied");
    assert!(!labels.contains_key(HEADLESS_LABEL));
    assert_eq!(s.metadata.owner_references.as_ref().unwrap()[0].kind, "Service");
    let got: Vec<(&str, (bool, bool, bool))> = s.endpoints.iter().map(|e| (e.addresses[0].as_str(), conditions(e))).collect();
    assert_eq!(got, [("10.42.0.2", (true, true, false)), ("10.42.0.3", (false, false, false)), ("10.42.0.4", (false, true, true))]);
    let e = &s.endpoints[0];
    assert_eq!(e.node_name.as_deref(), Some("n1"));
    assert_eq!(e.zone.as_deref(), Some("zone-a"));
    let target = e.target_ref.as_ref().unwrap();
    assert_eq!((target.kind.as_deref(), target.name.as_deref(), target.uid.as_deref()), (Some("Pod"), Some("a"), Some("a-uid")));
    let ports: Vec<(Option<&str>, Option<i32>)> = s.ports.as_ref().unwrap().iter().map(|p| (p.name.as_deref(), p.port)).collect();
    assert_eq!(ports, [(Some("http"), Some(8080)), (Some("metrics"), Some(9090))], "the named targetPort is the container's port");
}

#[test]
fn pods_with_different_named_ports_go_to_different_slices() {
    let pods = [pod("a", "10.42.0.2", true, json!({})), pod("b", "10.42.0.3", true, json!({"containerPort": 8081}))];
    let p = plan(&svc(json!({})), &pods, &[]);
    let ports: Vec<Option<i32>> = p.create.iter().map(|s| s.ports.as_ref().unwrap()[0].port).collect();
    assert_eq!(ports, [Some(8080), Some(8081)]);
    assert_eq!(p.create.iter().map(|s| s.endpoints.len()).collect::<Vec<_>>(), [1, 1]);
}

#[test]
fn at_most_a_hundred_endpoints_per_slice() {
    let pods: Vec<Pod> = (0..250).map(|i| pod(&format!("p{i:03}"), &format!("10.42.{}.{}", i / 200, i % 200 + 1), true, json!({}))).collect();
    let p = plan(&svc(json!({})), &pods, &[]);
    let sizes: Vec<usize> = p.create.iter().map(|s| s.endpoints.len()).collect();
    assert_eq!(sizes, [100, 100, 50]);
    let names: Vec<&str> = p.create.iter().filter_map(|s| s.metadata.name.as_deref()).collect();
    assert_eq!(names, ["web-0", "web-1", "web-2"]);
    // Scaled down to 120: the third slice goes, the second is updated.
    let p2 = plan(&svc(json!({})), &pods[..120], &p.create);
    assert_eq!(p2.delete, ["web-2"]);
    assert_eq!(p2.update.len(), 1);
    assert_eq!(p2.update[0].endpoints.len(), 20);
    assert!(p2.create.is_empty());
}

#[test]
fn no_pods_gives_one_empty_slice_and_an_unchanged_slice_is_not_written() {
    let p = plan(&svc(json!({})), &[], &[]);
    assert_eq!(p.create.len(), 1);
    assert!(p.create[0].endpoints.is_empty());
    assert_eq!(plan(&svc(json!({})), &[], &p.create), SlicePlan::default());
    let pods = [pod("a", "10.42.0.2", true, json!({}))];
    let first = plan(&svc(json!({})), &pods, &[]).create;
    assert_eq!(plan(&svc(json!({})), &pods, &first), SlicePlan::default());
    // A pod turning unready updates the slice.
    let unready = [pod("a", "10.42.0.2", false, json!({}))];
    let p = plan(&svc(json!({})), &unready, &first);
    assert_eq!(conditions(&p.update[0].endpoints[0]), (false, false, false));
}

#[test]
fn publish_not_ready_addresses_makes_every_endpoint_ready() {
    let pods = [pod("b", "10.42.0.3", false, json!({})), pod("c", "10.42.0.4", true, json!({"deleting": true}))];
    let p = plan(&svc(json!({"publishNotReadyAddresses": true})), &pods, &[]);
    let got: Vec<(bool, bool, bool)> = p.create[0].endpoints.iter().map(conditions).collect();
    assert_eq!(got, [(true, false, false), (true, true, true)]);
}

#[test]
fn headless_services_are_labelled_and_pods_named_by_subdomain_get_hostnames() {
    let pods = [
        pod("db-0", "10.42.0.2", true, json!({"hostname": "db-0", "subdomain": "web"})),
        pod("x", "10.42.0.3", true, json!({"hostname": "x", "subdomain": "other"})),
    ];
    let p = plan(&svc(json!({"clusterIP": "None", "ports": null})), &pods, &[]);
    let s = &p.create[0];
    assert_eq!(s.metadata.labels.as_ref().unwrap()[HEADLESS_LABEL], "");
    assert_eq!(s.endpoints[0].hostname.as_deref(), Some("db-0"));
    assert_eq!(s.endpoints[1].hostname, None);
    assert_eq!(s.ports.as_deref(), Some(&[][..]));
}

#[test]
fn services_without_selector_keep_their_slices_and_lose_only_ours() {
    let manual: EndpointSlice = serde_json::from_value(json!({"metadata": {"name": "web-manual", "namespace": "d", "labels": {SERVICE_NAME_LABEL: "web"}}, "addressType": "IPv4", "endpoints": []})).unwrap();
    let pods = [pod("a", "10.42.0.2", true, json!({}))];
    let ours = plan(&svc(json!({})), &pods, &[]).create;
    let p = plan(&svc(json!({"selector": null})), &pods, &[manual.clone(), ours[0].clone()]);
    assert_eq!(p.delete, ["web-0"]);
    assert!(p.create.is_empty() && p.update.is_empty());
    let p = plan(&svc(json!({"type": "ExternalName", "externalName": "example.com"})), &pods, &[manual]);
    assert_eq!(p, SlicePlan::default());
}

#[test]
fn dual_stack_services_get_a_slice_per_family() {
    let mut dual = pod("a", "10.42.0.2", true, json!({}));
    dual.status.as_mut().unwrap().pod_ips = Some(vec![
        k8s_openapi::api::core::v1::PodIP { ip: "10.42.0.2".into() },
        k8s_openapi::api::core::v1::PodIP { ip: "fd00::2".into() },
    ]);
    let p = plan(&svc(json!({"ipFamilies": ["IPv4", "IPv6"]})), &[dual], &[]);
    let got: Vec<(&str, &str, &str)> = p.create.iter().map(|s| (s.metadata.name.as_deref().unwrap(), s.address_type.as_str(), s.endpoints[0].addresses[0].as_str())).collect();
    assert_eq!(got, [("web-0", "IPv4", "10.42.0.2"), ("web-v6-0", "IPv6", "fd00::2")]);
}
