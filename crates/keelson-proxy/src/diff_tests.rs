use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::json;

use super::*;
use crate::render::render;
use crate::render::tests::{node, slice, svc};

type Ep = (&'static str, &'static str, bool, bool, bool);

fn ep(ip: &'static str) -> Ep {
    (ip, "n1", true, true, false)
}

fn model(services: Vec<Service>, slices: Vec<EndpointSlice>) -> Model {
    let s: Vec<&Service> = services.iter().collect();
    let e: Vec<&EndpointSlice> = slices.iter().collect();
    render(&s, &e, &node())
}

fn web(extra: serde_json::Value, eps: &[Ep]) -> (Service, EndpointSlice) {
    (svc("web", extra), slice("web", eps))
}

fn node_port() -> serde_json::Value {
    json!({"type": "NodePort", "ports": [{"name": "http", "port": 80, "nodePort": 30080, "protocol": "TCP"}]})
}

const T: &str = "ip keelson-proxy";

/// Each case: (what changes, previous model, next model, the whole expected script).
fn cases() -> Vec<(&'static str, Model, Model, Vec<String>)> {
    let (w, one) = web(json!({}), &[ep("10.42.1.2")]);
    let (_, two) = web(json!({}), &[ep("10.42.1.2"), ep("10.42.1.3")]);
    let (_, none) = web(json!({}), &[]);
    let other = svc("other", json!({"clusterIP": "10.43.0.6", "clusterIPs": ["10.43.0.6"]}));
    let other_eps = slice("other", &[ep("10.42.1.9")]);
    let ep2 = "ep-d/web/tcp/80/10.42.1.2/8080";
    let ep3 = "ep-d/web/tcp/80/10.42.1.3/8080";
    let masq = "ip saddr != { 10.42.1.0/24 } jump mark-for-masquerade";
    let s = |x: String| x;
    let mut cases = vec![
        ("nothing", model(vec![w.clone(), other.clone()], vec![one.clone(), other_eps.clone()]), model(vec![other.clone(), w.clone()], vec![other_eps.clone(), one.clone()]), vec![]),
        (
            "one endpoint added: its chain, the Service's chain rewritten, no element",
            model(vec![w.clone(), other.clone()], vec![one.clone(), other_eps.clone()]),
            model(vec![w.clone(), other.clone()], vec![two.clone(), other_eps.clone()]),
            vec![
                s(format!("add chain {T} {ep3}")),
                s(format!("flush chain {T} svc-d/web/tcp/80")),
                s(format!("add rule {T} {ep3} ip saddr 10.42.1.3 jump mark-for-masquerade")),
                s(format!("add rule {T} {ep3} meta l4proto tcp dnat to 10.42.1.3:8080")),
                s(format!("add rule {T} svc-d/web/tcp/80 {masq}")),
                s(format!("add rule {T} svc-d/web/tcp/80 numgen random mod 2 vmap {{ 0 : goto {ep2}, 1 : goto {ep3} }}")),
            ],
        ),
        (
            "one endpoint removed: its chain flushed, no longer jumped to, then deleted",
            model(vec![w.clone()], vec![two.clone()]),
            model(vec![w.clone()], vec![one.clone()]),
            vec![
                s(format!("flush chain {T} svc-d/web/tcp/80")),
                s(format!("flush chain {T} {ep3}")),
                s(format!("add rule {T} svc-d/web/tcp/80 {masq}")),
                s(format!("add rule {T} svc-d/web/tcp/80 goto {ep2}")),
                s(format!("delete chain {T} {ep3}")),
            ],
        ),
        (
            "a Service added: chains, their rules, then the element leading to them",
            model(vec![], vec![]),
            model(vec![w.clone()], vec![one.clone()]),
            vec![
                s(format!("add chain {T} {ep2}")),
                s(format!("add chain {T} svc-d/web/tcp/80")),
                s(format!("add rule {T} {ep2} ip saddr 10.42.1.2 jump mark-for-masquerade")),
                s(format!("add rule {T} {ep2} meta l4proto tcp dnat to 10.42.1.2:8080")),
                s(format!("add rule {T} svc-d/web/tcp/80 {masq}")),
                s(format!("add rule {T} svc-d/web/tcp/80 goto {ep2}")),
                s(format!("add element {T} service-ips {{ 10.43.0.5 . tcp . 80 : goto svc-d/web/tcp/80 }}")),
            ],
        ),
        (
            "a Service deleted: its elements, then its chains",
            model(vec![w.clone(), other.clone()], vec![one.clone(), other_eps.clone()]),
            model(vec![other.clone()], vec![other_eps.clone()]),
            vec![
                s(format!("flush chain {T} {ep2}")),
                s(format!("flush chain {T} svc-d/web/tcp/80")),
                s(format!("delete element {T} service-ips {{ 10.43.0.5 . tcp . 80 }}")),
                s(format!("delete chain {T} {ep2}")),
                s(format!("delete chain {T} svc-d/web/tcp/80")),
            ],
        ),
        (
            "the last endpoint gone: the ClusterIP moves to the reject map",
            model(vec![w.clone()], vec![one.clone()]),
            model(vec![w.clone()], vec![none.clone()]),
            vec![
                s(format!("flush chain {T} {ep2}")),
                s(format!("flush chain {T} svc-d/web/tcp/80")),
                s(format!("delete element {T} service-ips {{ 10.43.0.5 . tcp . 80 }}")),
                s(format!("add element {T} no-endpoint-services {{ 10.43.0.5 . tcp . 80 : goto reject-chain }}")),
                s(format!("delete chain {T} {ep2}")),
                s(format!("delete chain {T} svc-d/web/tcp/80")),
            ],
        ),
        (
            "ClusterIP to NodePort: the external chain and the NodePort element, the endpoint's chain kept",
            model(vec![w.clone()], vec![one.clone()]),
            model(vec![svc("web", node_port())], vec![one.clone()]),
            vec![
                s(format!("add chain {T} ext-d/web/tcp/80")),
                s(format!("add rule {T} ext-d/web/tcp/80 jump mark-for-masquerade")),
                s(format!("add rule {T} ext-d/web/tcp/80 goto {ep2}")),
                s(format!("add element {T} service-nodeports {{ tcp . 30080 : goto ext-d/web/tcp/80 }}")),
            ],
        ),
    ];
    // A verdict that changes under one key is deleted and added again (nft refuses to add
    // a key that is there with another verdict).
    let local = json!({"internalTrafficPolicy": "Local"});
    let remote = slice("web", &[("10.42.2.3", "n2", true, true, false)]);
    cases.push((
        "Local internal policy: drop (no local endpoint) becomes reject (no endpoint at all)",
        model(vec![svc("web", local.clone())], vec![remote]),
        model(vec![svc("web", local)], vec![none.clone()]),
        vec![
            s(format!("delete element {T} no-endpoint-services {{ 10.43.0.5 . tcp . 80 }}")),
            s(format!("add element {T} no-endpoint-services {{ 10.43.0.5 . tcp . 80 : goto reject-chain }}")),
        ],
    ));
    // A changed affinity timeout re-makes the set: the Service's chains let go of it first.
    let affinity = |t: i32| svc("web", json!({"sessionAffinity": "ClientIP", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": t}}}));
    let set = "affinity-d/web/tcp/80/10.42.1.2/8080";
    cases.push((
        "affinity timeout changed",
        model(vec![affinity(60)], vec![one.clone()]),
        model(vec![affinity(120)], vec![one.clone()]),
        vec![
            s(format!("flush chain {T} {ep2}")),
            s(format!("flush chain {T} svc-d/web/tcp/80")),
            s(format!("delete set {T} {set}")),
            s(format!("add set {T} {set} {{ type ipv4_addr; flags dynamic,timeout; timeout 120s; }}")),
            s(format!("add rule {T} {ep2} ip saddr 10.42.1.2 jump mark-for-masquerade")),
            s(format!("add rule {T} {ep2} update @{set} {{ ip saddr }}")),
            s(format!("add rule {T} {ep2} meta l4proto tcp dnat to 10.42.1.2:8080")),
            s(format!("add rule {T} svc-d/web/tcp/80 {masq}")),
            s(format!("add rule {T} svc-d/web/tcp/80 ip saddr @{set} goto {ep2}")),
            s(format!("add rule {T} svc-d/web/tcp/80 goto {ep2}")),
        ],
    ));
    cases.push((
        "affinity turned off: the sets go after the chains that used them",
        model(vec![affinity(60)], vec![one.clone()]),
        model(vec![w.clone()], vec![one.clone()]),
        vec![
            s(format!("flush chain {T} {ep2}")),
            s(format!("flush chain {T} svc-d/web/tcp/80")),
            s(format!("add rule {T} {ep2} ip saddr 10.42.1.2 jump mark-for-masquerade")),
            s(format!("add rule {T} {ep2} meta l4proto tcp dnat to 10.42.1.2:8080")),
            s(format!("add rule {T} svc-d/web/tcp/80 {masq}")),
            s(format!("add rule {T} svc-d/web/tcp/80 goto {ep2}")),
            s(format!("delete set {T} {set}")),
        ],
    ));
    // Two Services claiming one externalIP and port: the first holds it; when it goes the
    // other takes it over in the same transaction.
    let ext_a = svc("a", json!({"externalIPs": ["192.168.5.7"]}));
    let ext_b = svc("b", json!({"clusterIP": "10.43.0.6", "clusterIPs": ["10.43.0.6"], "externalIPs": ["192.168.5.7"]}));
    let (sa, sb) = (slice("a", &[ep("10.42.1.2")]), slice("b", &[ep("10.42.1.3")]));
    cases.push((
        "a contested externalIP handed over",
        model(vec![ext_a.clone(), ext_b.clone()], vec![sa.clone(), sb.clone()]),
        model(vec![ext_b.clone()], vec![sb.clone()]),
        vec![
            s(format!("flush chain {T} ep-d/a/tcp/80/10.42.1.2/8080")),
            s(format!("flush chain {T} ext-d/a/tcp/80")),
            s(format!("flush chain {T} svc-d/a/tcp/80")),
            s(format!("delete element {T} service-ips {{ 10.43.0.5 . tcp . 80, 192.168.5.7 . tcp . 80 }}")),
            s(format!("add element {T} service-ips {{ 192.168.5.7 . tcp . 80 : goto ext-d/b/tcp/80 }}")),
            s(format!("delete chain {T} ep-d/a/tcp/80/10.42.1.2/8080")),
            s(format!("delete chain {T} ext-d/a/tcp/80")),
            s(format!("delete chain {T} svc-d/a/tcp/80")),
        ],
    ));
    let moved = {
        let mut m = model(vec![w.clone()], vec![one.clone()]);
        m.node_ips = ["192.168.5.9".parse().unwrap()].into();
        m
    };
    cases.push((
        "the node's address changed",
        model(vec![w.clone()], vec![one.clone()]),
        moved,
        vec![s(format!("delete element {T} nodeport-ips {{ 192.168.5.2 }}")), s(format!("add element {T} nodeport-ips {{ 192.168.5.9 }}"))],
    ));
    cases
}

#[test]
fn diffs_touch_only_what_changed_in_a_safe_order() {
    for (what, prev, next, want) in cases() {
        let got = diff(&prev, &next);
        let got: Vec<&str> = got.lines().collect();
        assert_eq!(got, want, "{what}");
    }
}

#[test]
fn a_contested_key_belongs_to_the_first_service() {
    let a = svc("a", json!({"externalIPs": ["192.168.5.7"]}));
    let b = svc("b", json!({"clusterIP": "10.43.0.6", "clusterIPs": ["10.43.0.6"], "externalIPs": ["192.168.5.7"]}));
    let m = model(vec![b, a], vec![slice("a", &[ep("10.42.1.2")]), slice("b", &[ep("10.42.1.3")])]);
    let key = (Map::ServiceIps, "192.168.5.7 . tcp . 80".to_string());
    assert_eq!(m.services["d/a"].elements.get(&key).map(String::as_str), Some("goto ext-d/a/tcp/80"));
    assert!(!m.services["d/b"].elements.contains_key(&key));
    assert_eq!(m.table().matches("192.168.5.7 . tcp . 80").count(), 1, "the full table names it once");
}

#[test]
fn one_service_changed_among_a_thousand_is_a_small_script() {
    let services: Vec<Service> = (0..1000).map(|i| svc(&format!("s{i}"), json!({"clusterIP": format!("10.43.{}.{}", i / 250, i % 250 + 1), "clusterIPs": null}))).collect();
    let ips: Vec<Vec<&'static str>> = (0..1000).map(|i| (0..10).map(|j| &*Box::leak(format!("10.42.{}.{}", i / 25, (i % 25) * 10 + j + 1).into_boxed_str())).collect()).collect();
    let mut slices: Vec<EndpointSlice> = (0..1000).map(|i| slice(&format!("s{i}"), &ips[i].iter().map(|ip| ep(ip)).collect::<Vec<_>>())).collect();
    let prev = model(services.clone(), slices.clone());
    slices[500] = slice("s500", &ips[500][1..].iter().map(|ip| ep(ip)).collect::<Vec<_>>());
    let next = model(services, slices);
    let script = diff(&prev, &next);
    assert!(script.lines().all(|l| l.contains("d/s500/")), "{script}");
    assert_eq!(script.matches("delete chain").count(), 1);
    eprintln!("one endpoint of 10,000 removed: {} bytes of script against {} for the table", script.len(), next.table().len());
}

#[test]
fn plans_are_full_first_after_a_failure_and_when_due_incremental_otherwise() {
    let (w, one) = web(json!({}), &[ep("10.42.1.2")]);
    let (_, two) = web(json!({}), &[ep("10.42.1.2"), ep("10.42.1.3")]);
    let (a, b) = (model(vec![w.clone()], vec![one]), model(vec![w], vec![two]));
    let (a, b) = ([a], [b]);
    let full = crate::plan(None, &a, false).unwrap();
    assert!(matches!(&full, crate::SyncPlan::Full(s) if s.starts_with("table ip keelson-proxy\ndelete table ip keelson-proxy\ntable ip keelson-proxy {")));
    assert_eq!(crate::plan(Some(&a), &a, false), None, "nothing changed: nothing applied");
    assert_eq!(crate::plan(Some(&a), &b, false), Some(crate::SyncPlan::Incremental(diff(&a[0], &b[0]))));
    assert!(matches!(crate::plan(Some(&a), &a, true), Some(crate::SyncPlan::Full(_))), "a due resync rewrites even an unchanged table");
}
