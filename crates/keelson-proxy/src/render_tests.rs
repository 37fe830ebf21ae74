use super::*;
use serde_json::{json, Value};

pub(crate) fn node() -> NodeInfo {
    NodeInfo { name: "n1".into(), addresses: vec!["192.168.5.2".parse().unwrap()], pod_cidrs: vec!["10.42.1.0/24".into()], dns: Some("192.168.5.2".parse().unwrap()) }
}

pub(crate) fn svc(name: &str, extra: Value) -> Service {
    let mut s = json!({"metadata": {"name": name, "namespace": "d"},
        "spec": {"type": "ClusterIP", "clusterIP": "10.43.0.5", "clusterIPs": ["10.43.0.5"], "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}});
    for (k, v) in extra.as_object().unwrap() {
        if k == "status" {
            s["status"] = v.clone();
        } else {
            s["spec"][k.as_str()] = v.clone();
        }
    }
    serde_json::from_value(s).unwrap()
}

/// A slice of `svc` with endpoints (ip, node, ready, serving, terminating) on port 8080 "http".
pub(crate) fn slice(svc: &str, eps: &[(&str, &str, bool, bool, bool)]) -> EndpointSlice {
    let endpoints: Vec<Value> = eps.iter().map(|(ip, node, r, s, t)| json!({"addresses": [ip], "nodeName": node, "conditions": {"ready": r, "serving": s, "terminating": t}})).collect();
    serde_json::from_value(json!({"metadata": {"name": format!("{svc}-0"), "namespace": "d", "labels": {SERVICE_NAME_LABEL: svc}},
        "addressType": "IPv4", "endpoints": endpoints, "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]})).unwrap()
}

fn out(services: &[Service], slices: &[EndpointSlice]) -> String {
    let s: Vec<&Service> = services.iter().collect();
    let e: Vec<&EndpointSlice> = slices.iter().collect();
    render(&s, &e, &node()).table()
}

/// The body of chain `name` (without its braces).
fn chain<'a>(text: &'a str, name: &str) -> &'a str {
    let start = text.find(&format!("\tchain {name} {{\n")).unwrap_or_else(|| panic!("chain {name} in\n{text}"));
    let body = &text[start..];
    &body[..body.find("\n\t}\n").unwrap()]
}

fn map_line<'a>(text: &'a str, map: &str) -> &'a str {
    let start = text.find(&format!("\tmap {map} {{\n")).unwrap();
    let body = &text[start..];
    let body = &body[..body.find("\n\t}\n").unwrap()];
    body.lines().find(|l| l.contains("elements")).unwrap_or("")
}

#[test]
fn a_cluster_ip_spreads_over_ready_endpoints_with_hairpin_masquerade() {
    let t = out(&[svc("web", json!({}))], &[slice("web", &[("10.42.1.2", "n1", true, true, false), ("10.42.2.3", "n2", true, true, false), ("10.42.2.4", "n2", false, false, false)])]);
    assert!(t.starts_with("table ip keelson-proxy {"));
    assert_eq!(map_line(&t, "service-ips").trim(), "elements = { 10.43.0.5 . tcp . 80 : goto svc-d/web/tcp/80 }");
    let svc_chain = chain(&t, "svc-d/web/tcp/80");
    assert!(svc_chain.contains("ip saddr != { 10.42.1.0/24 } jump mark-for-masquerade"), "off-node sources are masqueraded");
    assert!(svc_chain.contains("numgen random mod 2 vmap { 0 : goto ep-d/web/tcp/80/10.42.1.2/8080, 1 : goto ep-d/web/tcp/80/10.42.2.3/8080 }"), "{svc_chain}");
    let ep = chain(&t, "ep-d/web/tcp/80/10.42.1.2/8080");
    assert!(ep.contains("ip saddr 10.42.1.2 jump mark-for-masquerade"));
    assert!(ep.contains("meta l4proto tcp dnat to 10.42.1.2:8080"));
    assert!(!t.contains("10.42.2.4"), "the unready endpoint gets no traffic");
    assert_eq!(map_line(&t, "no-endpoint-services"), "");
}

#[test]
fn rendering_is_deterministic_and_ignores_order() {
    let a = svc("a", json!({}));
    let b = svc("b", json!({"clusterIP": "10.43.0.6", "clusterIPs": ["10.43.0.6"]}));
    let slices = [slice("a", &[("10.42.1.2", "n1", true, true, false)]), slice("b", &[("10.42.1.3", "n1", true, true, false)])];
    let one = out(&[a.clone(), b.clone()], &slices);
    let mut rev = slices.to_vec();
    rev.reverse();
    assert_eq!(one, out(&[b, a], &rev));
}

#[test]
fn terminating_endpoints_serve_only_when_nothing_is_ready() {
    let eps = [("10.42.1.2", "n1", false, true, true), ("10.42.1.3", "n1", true, true, false)];
    let t = out(&[svc("web", json!({}))], &[slice("web", &eps)]);
    assert!(!t.contains("10.42.1.2"));
    let t = out(&[svc("web", json!({}))], &[slice("web", &eps[..1])]);
    assert!(chain(&t, "svc-d/web/tcp/80").contains("goto ep-d/web/tcp/80/10.42.1.2/8080"), "the serving terminating endpoint is the fallback");
    let t = out(&[svc("web", json!({}))], &[slice("web", &[("10.42.1.2", "n1", false, false, true)])]);
    assert!(!t.contains("chain svc-d/web"), "a terminating endpoint that no longer serves is never used");
}

#[test]
fn a_service_without_endpoints_rejects() {
    let t = out(&[svc("web", json!({"type": "NodePort", "ports": [{"name": "http", "port": 80, "nodePort": 30080, "protocol": "TCP"}]}))], &[slice("web", &[])]);
    assert_eq!(map_line(&t, "no-endpoint-services").trim(), "elements = { 10.43.0.5 . tcp . 80 : goto reject-chain }");
    assert_eq!(map_line(&t, "no-endpoint-nodeports").trim(), "elements = { tcp . 30080 : goto reject-chain }");
    assert_eq!(map_line(&t, "service-ips"), "");
    assert!(chain(&t, "reject-chain").contains("reject"));
}

#[test]
fn node_ports_and_load_balancer_ips_enter_through_the_external_chain() {
    let lb = svc("web", json!({"type": "LoadBalancer", "ports": [{"name": "http", "port": 80, "nodePort": 30080, "protocol": "TCP"}],
        "status": {"loadBalancer": {"ingress": [{"ip": "192.168.5.2"}, {"ip": "192.168.5.3"}]}}}));
    let t = out(&[lb], &[slice("web", &[("10.42.2.3", "n2", true, true, false)])]);
    assert_eq!(map_line(&t, "service-nodeports").trim(), "elements = { tcp . 30080 : goto ext-d/web/tcp/80 }");
    assert!(map_line(&t, "service-ips").contains("192.168.5.3 . tcp . 80 : goto ext-d/web/tcp/80"));
    assert!(t.contains("\tset nodeport-ips {\n\t\ttype ipv4_addr\n\t\telements = { 192.168.5.2 }"));
    let ext = chain(&t, "ext-d/web/tcp/80");
    assert!(ext.contains("\t\tjump mark-for-masquerade\n"), "Cluster policy masquerades external traffic");
    assert!(ext.contains("goto ep-d/web/tcp/80/10.42.2.3/8080"));
}

#[test]
fn external_traffic_policy_local_keeps_the_source_and_local_endpoints() {
    let spec = json!({"type": "NodePort", "externalTrafficPolicy": "Local", "ports": [{"name": "http", "port": 80, "nodePort": 30080, "protocol": "TCP"}]});
    let t = out(&[svc("web", spec.clone())], &[slice("web", &[("10.42.1.2", "n1", true, true, false), ("10.42.2.3", "n2", true, true, false)])]);
    // This node's pods and the node itself are sent to every endpoint, as through the
    // ClusterIP (the node masqueraded); from elsewhere only local endpoints, the source kept.
    let short_circuit = "\t\tip saddr { 10.42.1.0/24 } goto svc-d/web/tcp/80\n\t\tfib saddr type local jump mark-for-masquerade\n\t\tfib saddr type local goto svc-d/web/tcp/80\n";
    let ext = chain(&t, "ext-d/web/tcp/80");
    assert!(ext.ends_with(&format!("{short_circuit}\t\tgoto ep-d/web/tcp/80/10.42.1.2/8080")), "{ext}");
    assert_eq!(ext.matches("mark-for-masquerade").count(), 1, "{ext}");
    assert!(!ext.contains("10.42.2.3"));
    assert!(chain(&t, "svc-d/web/tcp/80").contains("10.42.2.3"), "the ClusterIP still uses every endpoint");
    // No local endpoint: external traffic is dropped, not rejected; the cluster's own is
    // still sent to the other nodes' endpoints.
    let t = out(&[svc("web", spec.clone())], &[slice("web", &[("10.42.2.3", "n2", true, true, false)])]);
    assert_eq!(map_line(&t, "service-nodeports").trim(), "elements = { tcp . 30080 : goto ext-d/web/tcp/80 }");
    assert_eq!(chain(&t, "ext-d/web/tcp/80"), format!("\tchain ext-d/web/tcp/80 {{\n{short_circuit}\t\tdrop"));
    // With a Local internal policy too, the cluster's own traffic has a chain of every
    // endpoint of its own.
    let mut both = spec;
    both["internalTrafficPolicy"] = json!("Local");
    let t = out(&[svc("web", both)], &[slice("web", &[("10.42.2.3", "n2", true, true, false)])]);
    assert_eq!(map_line(&t, "no-endpoint-services").trim(), "elements = { 10.43.0.5 . tcp . 80 : drop }");
    assert!(chain(&t, "ext-d/web/tcp/80").contains("fib saddr type local goto cluster-d/web/tcp/80"));
    assert!(chain(&t, "cluster-d/web/tcp/80").contains("goto ep-d/web/tcp/80/10.42.2.3/8080"));
}

#[test]
fn internal_traffic_policy_local_uses_only_this_nodes_endpoints() {
    let t = out(&[svc("web", json!({"internalTrafficPolicy": "Local"}))], &[slice("web", &[("10.42.1.2", "n1", true, true, false), ("10.42.2.3", "n2", true, true, false)])]);
    assert!(chain(&t, "svc-d/web/tcp/80").contains("goto ep-d/web/tcp/80/10.42.1.2/8080"));
    assert!(!t.contains("10.42.2.3"));
    let t = out(&[svc("web", json!({"internalTrafficPolicy": "Local"}))], &[slice("web", &[("10.42.2.3", "n2", true, true, false)])]);
    assert_eq!(map_line(&t, "no-endpoint-services").trim(), "elements = { 10.43.0.5 . tcp . 80 : drop }");
}

#[test]
fn client_ip_affinity_remembers_sources_per_endpoint() {
    let s = svc("web", json!({"sessionAffinity": "ClientIP", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}}}));
    let t = out(&[s], &[slice("web", &[("10.42.1.2", "n1", true, true, false), ("10.42.1.3", "n1", true, true, false)])]);
    assert!(t.contains("\tset affinity-d/web/tcp/80/10.42.1.2/8080 {\n\t\ttype ipv4_addr\n\t\tflags dynamic,timeout\n\t\ttimeout 60s\n\t}"));
    let c = chain(&t, "svc-d/web/tcp/80");
    let affinity = c.find("ip saddr @affinity-d/web/tcp/80/10.42.1.3/8080 goto ep-d/web/tcp/80/10.42.1.3/8080").unwrap();
    assert!(affinity < c.find("numgen").unwrap(), "remembered clients first");
    assert!(chain(&t, "ep-d/web/tcp/80/10.42.1.2/8080").contains("update @affinity-d/web/tcp/80/10.42.1.2/8080 { ip saddr }"));
}

#[test]
fn headless_and_external_name_services_and_other_slices_are_not_proxied() {
    let headless = svc("db", json!({"clusterIP": "None", "clusterIPs": ["None"]}));
    let ext = svc("ext", json!({"type": "ExternalName", "externalName": "example.com", "clusterIP": null, "clusterIPs": null}));
    let t = out(&[headless, ext], &[slice("db", &[("10.42.1.2", "n1", true, true, false)])]);
    assert!(!t.contains("chain svc-"));
    // Slices of another Service, or a port of another name, give no endpoints.
    let mut other = slice("web", &[("10.42.1.2", "n1", true, true, false)]);
    other.ports.as_mut().unwrap()[0].name = Some("metrics".into());
    let t = out(&[svc("web", json!({}))], &[other, slice("other", &[("10.42.1.3", "n1", true, true, false)])]);
    assert!(map_line(&t, "no-endpoint-services").contains("10.43.0.5 . tcp . 80 : goto reject-chain"));
}

#[test]
fn the_script_replaces_only_its_own_table() {
    let s = replace_script("table ip keelson-proxy {\n}\n");
    assert_eq!(s.lines().take(2).collect::<Vec<_>>(), ["table ip keelson-proxy", "delete table ip keelson-proxy"]);
    assert!(!s.contains("flush ruleset"));
}

#[test]
fn a_thousand_services_render_quickly() {
    let services: Vec<Service> = (0..1000).map(|i| svc(&format!("s{i}"), json!({"clusterIP": format!("10.43.{}.{}", i / 250, i % 250 + 1), "clusterIPs": null}))).collect();
    let slices: Vec<EndpointSlice> = (0..1000).map(|i| slice(&format!("s{i}"), &(0..10).map(|j| (Box::leak(format!("10.42.{}.{}", i / 25, (i % 25) * 10 + j + 1).into_boxed_str()) as &str, "n1", true, true, false)).collect::<Vec<_>>())).collect();
    let started = std::time::Instant::now();
    let t = out(&services, &slices);
    let took = started.elapsed();
    assert_eq!(t.matches("\tchain ep-").count(), 10_000);
    eprintln!("rendered 1000 services x 10 endpoints in {took:?} ({} bytes)", t.len());
}

#[test]
fn kube_dns_goes_to_the_nodes_own_dns_server() {
    let mut dns = svc("kube-dns", json!({"clusterIP": "10.43.0.10", "clusterIPs": ["10.43.0.10"], "ports": [{"name": "dns", "port": 53, "protocol": "UDP"}, {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]}));
    dns.metadata.namespace = Some("kube-system".into());
    let t = out(&[dns], &[]);
    assert!(map_line(&t, "service-ips").contains("10.43.0.10 . udp . 53 : goto svc-kube-system/kube-dns/udp/53"));
    assert!(chain(&t, "ep-kube-system/kube-dns/udp/53/192.168.5.2/53").contains("meta l4proto udp dnat to 192.168.5.2:53"));
    assert!(chain(&t, "ep-kube-system/kube-dns/tcp/53/192.168.5.2/53").contains("meta l4proto tcp dnat to 192.168.5.2:53"));
}

#[test]
fn udp_flows_pair_virtual_ips_with_endpoints() {
    let dns = svc("dns", json!({"ports": [{"name": "dns", "port": 53, "protocol": "UDP"}, {"name": "http", "port": 80, "protocol": "TCP"}]}));
    let mut sl = slice("dns", &[("10.42.1.2", "n1", true, true, false), ("10.42.1.3", "n1", false, false, false)]);
    sl.ports = Some(vec![k8s_openapi::api::discovery::v1::EndpointPort { name: Some("dns".into()), port: Some(53), protocol: Some("UDP".into()), app_protocol: None }]);
    let flows = udp_flows(&[&dns], &[&sl], &node());
    let want: BTreeSet<UdpFlow> = [("10.43.0.5".parse().unwrap(), 53, "10.42.1.2".parse().unwrap())].into();
    assert_eq!(flows, want, "only UDP ports, only usable endpoints");
}

#[test]
fn the_cache_renders_only_changed_services_and_gives_what_render_gives() {
    use std::sync::Arc;
    let a = Arc::new(svc("a", json!({})));
    let b = Arc::new(svc("b", json!({"clusterIP": "10.43.0.6", "clusterIPs": ["10.43.0.6"], "externalIPs": ["192.168.5.7"]})));
    let c = Arc::new(svc("c", json!({"clusterIP": "10.43.0.7", "clusterIPs": ["10.43.0.7"], "externalIPs": ["192.168.5.7"]})));
    let mut slices = vec![Arc::new(slice("a", &[("10.42.1.2", "n1", true, true, false)])), Arc::new(slice("b", &[("10.42.1.3", "n1", true, true, false)])), Arc::new(slice("c", &[("10.42.1.4", "n1", true, true, false)]))];
    let services = vec![c.clone(), b.clone(), a.clone()];
    let plain = |services: &[Arc<Service>], slices: &[Arc<EndpointSlice>], node: &NodeInfo| {
        render(&services.iter().map(|s| s.as_ref()).collect::<Vec<_>>(), &slices.iter().map(|s| s.as_ref()).collect::<Vec<_>>(), node)
    };
    let mut cache = RenderCache::default();
    let first = render_cached(&mut cache, &services, &slices, &node());
    assert_eq!(first, plain(&services, &slices, &node()));
    // One slice replaced, the others the same objects in another order.
    slices[0] = Arc::new(slice("a", &[("10.42.1.9", "n1", true, true, false)]));
    slices.reverse();
    let second = render_cached(&mut cache, &services, &slices, &node());
    assert_eq!(second, plain(&services, &slices, &node()));
    assert!(!Arc::ptr_eq(&first.services["d/a"], &second.services["d/a"]), "a is rendered again");
    assert!(Arc::ptr_eq(&first.services["d/b"], &second.services["d/b"]), "b's rules are reused");
    // b gives up the contested address: c, unchanged, takes it over.
    let third = render_cached(&mut cache, &[a.clone(), c.clone()], &slices, &node());
    assert_eq!(third, plain(&[a, c], &slices, &node()));
    assert!(third.services["d/c"].elements.contains_key(&(Map::ServiceIps, "192.168.5.7 . tcp . 80".to_string())));
    // Another node: everything rendered anew.
    let mut other = node();
    other.pod_cidrs = vec!["10.42.2.0/24".into()];
    assert_eq!(render_cached(&mut cache, &services, &slices, &other), plain(&services, &slices, &other));
}

#[test]
fn a_dual_stack_service_renders_each_family_in_its_own_table() {
    let node = NodeInfo {
        name: "n1".into(),
        addresses: vec!["192.168.5.2".parse().unwrap(), "fd05::2".parse().unwrap()],
        pod_cidrs: vec!["10.42.1.0/24".into(), "fd42:0:0:1::/64".into()],
        dns: None,
    };
    let web = svc("web", json!({"type": "NodePort", "clusterIPs": ["10.43.0.5", "fd43::5"], "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP", "nodePort": 30080}],
        "sessionAffinity": "ClientIP"}));
    let v4 = slice("web", &[("10.42.1.2", "n1", true, true, false)]);
    let mut v6 = slice("web", &[("fd42:0:0:1::2", "n1", true, true, false), ("fd42:0:0:2::3", "n2", true, true, false)]);
    v6.address_type = "IPv6".into();
    v6.metadata.name = Some("web-v6-0".into());
    let four = render_family(&[&web], &[&v4, &v6], &node, Family::Ip).table();
    let six = render_family(&[&web], &[&v4, &v6], &node, Family::Ip6).table();
    assert!(four.starts_with("table ip keelson-proxy {") && !four.contains("fd4"), "no IPv6 in the ip table:\n{four}");
    assert!(six.starts_with("table ip6 keelson-proxy {") && !six.contains("10.4") && !six.contains("192.168"), "no IPv4 in the ip6 table:\n{six}");
    assert!(six.contains("type ipv6_addr . inet_proto . inet_service : verdict"));
    assert_eq!(map_line(&six, "service-ips").trim(), "elements = { fd43::5 . tcp . 80 : goto svc-d/web/tcp/80 }");
    assert!(chain(&six, "services").contains("ip6 daddr . meta l4proto . th dport vmap @service-ips"));
    assert!(six.contains("\tset nodeport-ips {\n\t\ttype ipv6_addr\n\t\telements = { fd05::2 }"), "{six}");
    let svc_chain = chain(&six, "svc-d/web/tcp/80");
    assert!(svc_chain.contains("ip6 saddr != { fd42:0:0:1::/64 } jump mark-for-masquerade"), "{svc_chain}");
    assert!(svc_chain.contains("ip6 saddr @affinity-d/web/tcp/80/fd42-0-0-1--2/8080 goto ep-d/web/tcp/80/fd42-0-0-1--2/8080"), "{svc_chain}");
    let ep = chain(&six, "ep-d/web/tcp/80/fd42-0-0-2--3/8080");
    assert!(ep.contains("ip6 saddr fd42:0:0:2::3 jump mark-for-masquerade") && ep.contains("update @affinity-d/web/tcp/80/fd42-0-0-2--3/8080 { ip6 saddr }"), "{ep}");
    assert!(ep.contains("meta l4proto tcp dnat to [fd42:0:0:2::3]:8080"), "{ep}");
    assert!(six.contains("type ipv6_addr\n\t\tflags dynamic,timeout"), "affinity sets hold IPv6 sources");
    assert!(chain(&four, "svc-d/web/tcp/80").contains("goto ep-d/web/tcp/80/10.42.1.2/8080"), "the IPv4 table has the IPv4 endpoint");

    // A node with IPv6 keeps both tables; a first plan writes both; losing IPv6 removes
    // the ip6 table in the same transaction.
    assert_eq!(crate::families(&node), Family::ALL);
    assert_eq!(crate::families(&super::tests::node()), [Family::Ip]);
    let both: Vec<Model> = Family::ALL.iter().map(|f| render_family(&[&web], &[&v4, &v6], &node, *f)).collect();
    let first = crate::plan(None, &both, false).unwrap();
    assert!(first.script().contains("table ip keelson-proxy {") && first.script().contains("table ip6 keelson-proxy {"));
    let only_v4 = [render(&[&web], &[&v4], &super::tests::node())];
    let dropped = crate::plan(Some(&both), &only_v4, false).unwrap();
    assert!(matches!(dropped, crate::SyncPlan::Full(_)) && dropped.script().starts_with("table ip6 keelson-proxy\ndelete table ip6 keelson-proxy\n"), "{}", dropped.script());
    // UDP flows of both families are known (for their conntrack flushes).
    let dns = svc("dns", json!({"clusterIPs": ["10.43.0.5", "fd43::5"], "ports": [{"name": "http", "port": 53, "targetPort": 8080, "protocol": "UDP"}]}));
    let mut udp6 = v6.clone();
    udp6.metadata.labels = Some([(SERVICE_NAME_LABEL.to_string(), "dns".to_string())].into());
    udp6.ports.as_mut().unwrap()[0].protocol = Some("UDP".into());
    let flows = udp_flows(&[&dns], &[&udp6], &node);
    assert!(flows.contains(&("fd43::5".parse().unwrap(), 53, "fd42:0:0:1::2".parse().unwrap())), "{flows:?}");
    assert!(flows.iter().all(|(vip, _, ep)| vip.is_ipv6() == ep.is_ipv6()), "never a flow across families: {flows:?}");
}
