use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use serde_json::{json, Value};

use crate::routes::{build, Decision, Inputs, RouteTable};

fn ingress(name: &str, created: &str, spec: Value) -> Ingress {
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": "shop", "uid": format!("uid-{name}"), "creationTimestamp": created}, "spec": spec})).unwrap()
}

/// A Service `name` with ports `http` 80 → 8080 and `admin` 81 → 9090, and a slice with
/// one endpoint at `ip` (ready or not).
fn service(name: &str) -> Service {
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": "shop"}, "spec": {"ports": [
        {"name": "http", "port": 80, "targetPort": 8080}, {"name": "admin", "port": 81, "targetPort": 9090}]}})).unwrap()
}

fn slice(svc: &str, ip: &str, ready: Option<bool>) -> EndpointSlice {
    let conditions = match ready { Some(r) => json!({"ready": r}), None => json!({}) };
    serde_json::from_value(json!({"metadata": {"name": format!("{svc}-1"), "namespace": "shop", "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4", "endpoints": [{"addresses": [ip], "conditions": conditions}],
        "ports": [{"name": "http", "port": 8080}, {"name": "admin", "port": 9090}]})).unwrap()
}

fn class(default: bool) -> IngressClass {
    let ann = if default { json!({"ingressclass.kubernetes.io/is-default-class": "true"}) } else { json!({}) };
    serde_json::from_value(json!({"metadata": {"name": "keelson", "annotations": ann}, "spec": {"controller": "keelson.io/ingress"}})).unwrap()
}

fn backend(svc: &str) -> Value {
    json!({"service": {"name": svc, "port": {"number": 80}}})
}

struct World {
    ingresses: Vec<Ingress>,
    classes: Vec<IngressClass>,
    services: Vec<Service>,
    slices: Vec<EndpointSlice>,
}

impl World {
    /// Services `svc0`..`svc9`, each ready at 10.0.0.<n>.
    fn new(ingresses: Vec<Ingress>) -> Self {
        let services = (0..10).map(|i| service(&format!("svc{i}"))).collect();
        let slices = (0..10).map(|i| slice(&format!("svc{i}"), &format!("10.0.0.{i}"), Some(true))).collect();
        Self { ingresses, classes: vec![class(true)], services, slices }
    }

    fn build(&self) -> (RouteTable, Vec<crate::routes::Problem>) {
        let inputs = Inputs {
            ingresses: self.ingresses.iter().collect(),
            classes: self.classes.iter().collect(),
            services: self.services.iter().collect(),
            slices: self.slices.iter().collect(),
        };
        build(&inputs, "keelson")
    }
}

/// The backend's name, or what else the decision was.
fn outcome(d: Decision) -> String {
    match d {
        Decision::Proxy(b) => b.name.clone(),
        Decision::Unavailable(b) => format!("503 {}", b.name),
        Decision::RedirectHttps => "308".into(),
        Decision::NotFound => "404".into(),
    }
}

fn route(t: &RouteTable, host: &str, path: &str) -> String {
    outcome(t.route(host, path, false))
}

/// Paths as (pathType, path), a request path, and the index of the path that serves it.
type PathCase = (&'static [(&'static str, &'static str)], &'static str, Option<usize>);

/// The Ingress spec's path-matching examples (kubernetes.io/docs/concepts/services-networking/ingress,
/// "Examples"): each path is served by its own Service, `svc<index>`.
#[test]
fn the_ingress_specs_path_matching_table() {
    let cases: &[PathCase] = &[
        (&[("Prefix", "/")], "/anything/at/all", Some(0)),
        (&[("Exact", "/foo")], "/foo", Some(0)),
        (&[("Exact", "/foo")], "/bar", None),
        (&[("Exact", "/foo")], "/foo/", None),
        (&[("Exact", "/foo/")], "/foo", None),
        (&[("Prefix", "/foo")], "/foo", Some(0)),
        (&[("Prefix", "/foo")], "/foo/", Some(0)),
        (&[("Prefix", "/foo/")], "/foo", Some(0)),
        (&[("Prefix", "/foo/")], "/foo/", Some(0)),
        (&[("Prefix", "/aaa/bb")], "/aaa/bbb", None),
        (&[("Prefix", "/aaa/bbb")], "/aaa/bbb", Some(0)),
        (&[("Prefix", "/aaa/bbb/")], "/aaa/bbb", Some(0)),
        (&[("Prefix", "/aaa/bbb")], "/aaa/bbb/", Some(0)),
        (&[("Prefix", "/aaa/bbb")], "/aaa/bbb/ccc", Some(0)),
        (&[("Prefix", "/aaa/bbb")], "/aaa/bbbxyz", None),
        (&[("Prefix", "/"), ("Prefix", "/aaa")], "/aaa/ccc", Some(1)),
        (&[("Prefix", "/"), ("Prefix", "/aaa"), ("Prefix", "/aaa/bbb")], "/aaa/bbb", Some(2)),
        (&[("Prefix", "/"), ("Prefix", "/aaa"), ("Prefix", "/aaa/bbb")], "/ccc", Some(0)),
        (&[("Prefix", "/aaa")], "/ccc", None),
        (&[("Prefix", "/foo"), ("Exact", "/foo")], "/foo", Some(1)),
        (&[("Exact", "/foo"), ("Prefix", "/foo")], "/foo", Some(0)),
        // ImplementationSpecific is Prefix here.
        (&[("ImplementationSpecific", "/foo")], "/foo/bar", Some(0)),
        (&[("ImplementationSpecific", "/foo")], "/foobar", None),
    ];
    for (paths, request, want) in cases {
        let paths: Vec<Value> = paths.iter().enumerate().map(|(i, (kind, path))| json!({"path": path, "pathType": kind, "backend": backend(&format!("svc{i}"))})).collect();
        let w = World::new(vec![ingress("ing", "2026-01-01T00:00:00Z", json!({"rules": [{"host": "shop.test", "http": {"paths": paths}}]}))]);
        let (t, problems) = w.build();
        assert!(problems.is_empty(), "{problems:?}");
        let want = want.map(|i| format!("shop/svc{i}:80")).unwrap_or_else(|| "404".into());
        assert_eq!(route(&t, "shop.test", request), want, "paths {paths:?}, request {request}");
    }
}

#[test]
fn hosts_match_exactly_then_by_one_label_wildcard_then_rules_without_host() {
    let w = World::new(vec![ingress("ing", "2026-01-01T00:00:00Z", json!({"rules": [
        {"host": "api.shop.test", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend("svc1")}]}},
        {"host": "*.shop.test", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend("svc2")}]}},
        {"http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend("svc3")}]}},
        {"host": "only-exact.test", "http": {"paths": [{"path": "/x", "pathType": "Exact", "backend": backend("svc4")}]}},
    ]}))]);
    let (t, _) = w.build();
    assert_eq!(route(&t, "api.shop.test", "/"), "shop/svc1:80");
    assert_eq!(route(&t, "web.shop.test", "/"), "shop/svc2:80");
    assert_eq!(route(&t, "a.web.shop.test", "/"), "shop/svc3:80", "a wildcard matches one label only");
    assert_eq!(route(&t, "shop.test", "/"), "shop/svc3:80");
    assert_eq!(route(&t, "10.1.2.3", "/"), "shop/svc3:80");
    assert_eq!(route(&t, "only-exact.test", "/x"), "shop/svc4:80");
    assert_eq!(route(&t, "only-exact.test", "/y"), "404", "a host's own rules decide, not the host-less ones");
}

#[test]
fn the_default_backend_takes_what_no_rule_matches() {
    let w = World::new(vec![ingress("ing", "2026-01-01T00:00:00Z", json!({"defaultBackend": backend("svc9"), "rules": [
        {"host": "api.shop.test", "http": {"paths": [{"path": "/api", "pathType": "Prefix", "backend": backend("svc1")}]}}]}))]);
    let (t, _) = w.build();
    assert_eq!(route(&t, "api.shop.test", "/api/x"), "shop/svc1:80");
    assert_eq!(route(&t, "api.shop.test", "/other"), "shop/svc9:80");
    assert_eq!(route(&t, "unknown.test", "/"), "shop/svc9:80");
}

#[test]
fn conflicts_go_to_the_oldest_ingress_then_by_name() {
    let rule = |svc: &str| json!({"rules": [{"host": "api.shop.test", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend(svc)}]}}]});
    let w = World::new(vec![
        ingress("young", "2026-03-01T00:00:00Z", rule("svc1")),
        ingress("old", "2026-02-01T00:00:00Z", rule("svc2")),
    ]);
    let (t, problems) = w.build();
    assert_eq!(route(&t, "api.shop.test", "/"), "shop/svc2:80");
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!((problems[0].ingress.as_str(), problems[0].reason), ("young", "RouteConflict"));
    assert!(problems[0].message.contains("shop/old"), "{}", problems[0].message);

    let same = "2026-02-01T00:00:00Z";
    let w = World::new(vec![ingress("b", same, rule("svc1")), ingress("a", same, rule("svc2"))]);
    assert_eq!(route(&w.build().0, "api.shop.test", "/"), "shop/svc2:80", "equal age: a before b");

    // A different path type at the same path is no conflict.
    let exact = json!({"rules": [{"host": "api.shop.test", "http": {"paths": [{"path": "/", "pathType": "Exact", "backend": backend("svc3")}]}}]});
    let w = World::new(vec![ingress("old", "2026-02-01T00:00:00Z", rule("svc2")), ingress("young", "2026-03-01T00:00:00Z", exact)]);
    let (t, problems) = w.build();
    assert!(problems.is_empty());
    assert_eq!((route(&t, "api.shop.test", "/"), route(&t, "api.shop.test", "/x")), ("shop/svc3:80".into(), "shop/svc2:80".into()));
}

#[test]
fn backends_resolve_ports_by_number_or_name_to_ready_endpoints() {
    let by_name = json!({"service": {"name": "svc1", "port": {"name": "admin"}}});
    let mut w = World::new(vec![ingress("ing", "2026-01-01T00:00:00Z", json!({"rules": [{"host": "api.shop.test", "http": {"paths": [
        {"path": "/", "pathType": "Prefix", "backend": backend("svc1")},
        {"path": "/admin", "pathType": "Prefix", "backend": by_name},
        {"path": "/down", "pathType": "Prefix", "backend": backend("svc2")},
        {"path": "/unset", "pathType": "Prefix", "backend": backend("svc3")},
    ]}}]}))]);
    w.slices[2] = slice("svc2", "10.0.0.2", Some(false));
    w.slices[3] = slice("svc3", "10.0.0.3", None);
    let (t, _) = w.build();
    let endpoints = |path: &str| match t.route("api.shop.test", path, false) {
        Decision::Proxy(b) => b.endpoints.iter().map(|e| e.to_string()).collect::<Vec<_>>(),
        other => panic!("{path}: {other:?}"),
    };
    assert_eq!(endpoints("/"), ["10.0.0.1:8080"]);
    assert_eq!(endpoints("/admin"), ["10.0.0.1:9090"]);
    assert_eq!(endpoints("/unset"), ["10.0.0.3:8080"], "ready unset counts as ready");
    assert_eq!(route(&t, "api.shop.test", "/down"), "503 shop/svc2:80");
}

#[test]
fn a_missing_service_or_port_answers_503_and_is_reported() {
    let w = World::new(vec![ingress("ing", "2026-01-01T00:00:00Z", json!({"rules": [{"host": "api.shop.test", "http": {"paths": [
        {"path": "/", "pathType": "Prefix", "backend": backend("gone")},
        {"path": "/p", "pathType": "Prefix", "backend": {"service": {"name": "svc1", "port": {"number": 99}}}},
    ]}}]}))]);
    let (t, problems) = w.build();
    assert_eq!(route(&t, "api.shop.test", "/"), "503 shop/gone");
    assert_eq!(route(&t, "api.shop.test", "/p"), "503 shop/svc1");
    let reasons: Vec<&str> = problems.iter().map(|p| p.reason).collect();
    assert_eq!(reasons, ["ServiceNotFound", "ServicePortNotFound"]);
    assert_eq!(problems[0].message, "Service shop/gone does not exist, so its paths answer 503");
}

#[test]
fn round_robin_over_ready_endpoints() {
    let mut w = World::new(vec![ingress("ing", "2026-01-01T00:00:00Z", json!({"defaultBackend": backend("svc1")}))]);
    w.slices.push(serde_json::from_value(json!({"metadata": {"name": "svc1-2", "namespace": "shop", "labels": {"kubernetes.io/service-name": "svc1"}},
        "addressType": "IPv4", "endpoints": [{"addresses": ["10.0.1.1"]}], "ports": [{"name": "http", "port": 8080}]})).unwrap());
    let (t, _) = w.build();
    let Decision::Proxy(b) = t.route("x", "/", false) else { panic!() };
    let firsts: Vec<String> = (0..4).map(|_| b.rotation().next().unwrap().to_string()).collect();
    assert_eq!(firsts, ["10.0.0.1:8080", "10.0.1.1:8080", "10.0.0.1:8080", "10.0.1.1:8080"]);
    assert_eq!(b.rotation().count(), 2, "each endpoint is tried once");
}

#[test]
fn only_ingresses_of_our_class_are_served() {
    let spec = |class: Option<&str>, svc: &str, host: &str| {
        let mut s = json!({"rules": [{"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend(svc)}]}}]});
        if let Some(c) = class {
            s["ingressClassName"] = json!(c);
        }
        s
    };
    let mut w = World::new(vec![
        ingress("ours", "2026-01-01T00:00:00Z", spec(Some("keelson"), "svc1", "a.test")),
        ingress("nginx", "2026-01-01T00:00:00Z", spec(Some("nginx"), "svc2", "b.test")),
        ingress("none", "2026-01-01T00:00:00Z", spec(None, "svc3", "c.test")),
    ]);
    let (t, _) = w.build();
    assert_eq!([route(&t, "a.test", "/"), route(&t, "b.test", "/"), route(&t, "c.test", "/")], ["shop/svc1:80", "404", "shop/svc3:80"]);
    w.classes = vec![class(false)];
    let (t, _) = w.build();
    assert_eq!(route(&t, "c.test", "/"), "404", "no class and keelson not the default");
}

#[test]
fn ssl_redirect_applies_to_the_tls_hosts_of_the_annotated_ingress_over_http() {
    let mut ing = ingress("ing", "2026-01-01T00:00:00Z", json!({"tls": [{"hosts": ["api.shop.test"], "secretName": "api-tls"}], "rules": [
        {"host": "api.shop.test", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend("svc1")}]}},
        {"host": "web.shop.test", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend("svc2")}]}}]}));
    ing.metadata.annotations = Some([("ingress.kubernetes.io/ssl-redirect".to_string(), "true".to_string())].into());
    let (t, _) = World::new(vec![ing]).build();
    assert_eq!(outcome(t.route("api.shop.test", "/", false)), "308");
    assert_eq!(outcome(t.route("api.shop.test", "/", true)), "shop/svc1:80");
    assert_eq!(outcome(t.route("web.shop.test", "/", false)), "shop/svc2:80", "no TLS for web: no redirect");
}
