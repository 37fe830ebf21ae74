use super::*;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::{json, Value};

fn svc(ns: &str, name: &str, spec: Value) -> Service {
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns}, "spec": spec})).unwrap()
}

fn slice(ns: &str, svc: &str, eps: Value) -> EndpointSlice {
    serde_json::from_value(json!({"metadata": {"name": format!("{svc}-0"), "namespace": ns, "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4", "endpoints": eps, "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}]})).unwrap()
}

fn zone() -> Zone {
    let services = [
        svc("d", "web", json!({"clusterIP": "10.43.0.5", "clusterIPs": ["10.43.0.5"], "ports": [{"name": "http", "port": 80, "protocol": "TCP"}, {"port": 81}]})),
        svc("d", "db", json!({"clusterIP": "None", "ports": [{"name": "pg", "port": 5432}]})),
        svc("d", "ext", json!({"type": "ExternalName", "externalName": "example.com."})),
    ];
    let slices = [slice("d", "db", json!([
        {"addresses": ["10.42.0.7"], "hostname": "db-0", "conditions": {"ready": true}},
        {"addresses": ["10.42.0.8"], "conditions": {"ready": true}},
        {"addresses": ["10.42.0.9"], "hostname": "db-2", "conditions": {"ready": false}},
    ]))];
    let s: Vec<&Service> = services.iter().collect();
    let e: Vec<&EndpointSlice> = slices.iter().collect();
    crate::zone::build("cluster.local", &s, &e)
}

fn ask(qname: &str, qtype: RecordType) -> Message {
    match answer(&zone(), &request(7, qname, qtype).unwrap()) {
        Outcome::Reply(m) => m,
        Outcome::Forward => panic!("{qname} forwarded"),
    }
}

fn data(m: &Message) -> Vec<String> {
    let mut v: Vec<String> = m.answers.iter().map(|r| r.data.to_string()).collect();
    v.sort();
    v
}

#[test]
fn a_service_name_is_its_cluster_ip() {
    let m = ask("web.d.svc.cluster.local", RecordType::A);
    assert_eq!(m.metadata.response_code, ResponseCode::NoError);
    assert!(m.metadata.authoritative);
    assert_eq!(m.metadata.id, 7);
    assert_eq!(data(&m), ["10.43.0.5"]);
    assert_eq!(m.answers[0].ttl, TTL);
    let upper = ask("WEB.d.svc.cluster.local.", RecordType::A);
    assert_eq!(data(&upper), ["10.43.0.5"], "names are case-insensitive");
}

#[test]
fn a_headless_service_is_every_ready_endpoint_and_its_pods_have_names() {
    assert_eq!(data(&ask("db.d.svc.cluster.local", RecordType::A)), ["10.42.0.7", "10.42.0.8"]);
    assert_eq!(data(&ask("db-0.db.d.svc.cluster.local", RecordType::A)), ["10.42.0.7"]);
    assert_eq!(data(&ask("10-42-0-8.db.d.svc.cluster.local", RecordType::A)), ["10.42.0.8"]);
    let unready = ask("db-2.db.d.svc.cluster.local", RecordType::A);
    assert_eq!(unready.metadata.response_code, ResponseCode::NXDomain, "an unready pod has no name");
}

#[test]
fn named_ports_have_srv_records_with_their_targets_addresses() {
    let m = ask("_http._tcp.web.d.svc.cluster.local", RecordType::SRV);
    assert_eq!(data(&m), ["0 100 80 web.d.svc.cluster.local."]);
    assert_eq!(m.additionals.iter().map(|r| r.data.to_string()).collect::<Vec<_>>(), ["10.43.0.5"]);
    let m = ask("_pg._tcp.db.d.svc.cluster.local", RecordType::SRV);
    assert_eq!(data(&m), ["0 100 5432 10-42-0-8.db.d.svc.cluster.local.", "0 100 5432 db-0.db.d.svc.cluster.local."]);
}

#[test]
fn external_names_are_cnames() {
    let m = ask("ext.d.svc.cluster.local", RecordType::A);
    assert_eq!(data(&m), ["example.com."]);
}

#[test]
fn missing_names_are_nxdomain_and_missing_types_nodata_both_with_the_soa() {
    let m = ask("nope.d.svc.cluster.local", RecordType::A);
    assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);
    assert!(m.answers.is_empty());
    assert_eq!(m.authorities[0].record_type(), RecordType::SOA);
    let m = ask("web.d.svc.cluster.local", RecordType::AAAA);
    assert_eq!(m.metadata.response_code, ResponseCode::NoError);
    assert!(m.answers.is_empty());
    assert_eq!(m.authorities[0].record_type(), RecordType::SOA);
    for interior in ["d.svc.cluster.local", "svc.cluster.local", "cluster.local"] {
        assert_eq!(ask(interior, RecordType::A).metadata.response_code, ResponseCode::NoError, "{interior}");
    }
}

#[test]
fn pod_names_are_their_addresses() {
    assert_eq!(data(&ask("10-42-0-9.d.pod.cluster.local", RecordType::A)), ["10.42.0.9"]);
}

#[test]
fn other_names_are_forwarded_and_bad_requests_refused() {
    assert!(matches!(answer(&zone(), &request(1, "example.com", RecordType::A).unwrap()), Outcome::Forward));
    assert!(matches!(answer(&zone(), &request(1, "notcluster.local", RecordType::A).unwrap()), Outcome::Forward));
    let mut two = request(1, "web.d.svc.cluster.local", RecordType::A).unwrap();
    two.add_query(Query::query(Name::from_str("x.").unwrap(), RecordType::A));
    let Outcome::Reply(m) = answer(&zone(), &two) else { panic!() };
    assert_eq!(m.metadata.response_code, ResponseCode::FormErr);
}

#[test]
fn replies_survive_the_wire() {
    let m = ask("_pg._tcp.db.d.svc.cluster.local", RecordType::SRV);
    let back = Message::from_vec(&m.to_vec().unwrap()).unwrap();
    assert_eq!(data(&back), data(&m));
}

#[test]
fn a_dual_stack_service_answers_a_and_aaaa_and_ipv6_endpoints_and_pods_answer_aaaa() {
    let services = [
        svc("d", "dual", json!({"clusterIP": "10.43.0.6", "clusterIPs": ["10.43.0.6", "fd43::6"], "ipFamilies": ["IPv4", "IPv6"], "ports": [{"port": 80}]})),
        svc("d", "six", json!({"clusterIP": "None", "ipFamilies": ["IPv6"], "ports": [{"port": 80}]})),
    ];
    let mut v6 = slice("d", "six", json!([{"addresses": ["fd42::7"], "hostname": "six-0", "conditions": {"ready": true}}, {"addresses": ["fd42::8"], "conditions": {"ready": true}}]));
    v6.address_type = "IPv6".into();
    let z = crate::zone::build("cluster.local", &services.iter().collect::<Vec<_>>(), &[&v6]);
    let ask = |q: &str, t: RecordType| match answer(&z, &request(7, q, t).unwrap()) {
        Outcome::Reply(m) => m,
        Outcome::Forward => panic!("{q} forwarded"),
    };
    assert_eq!(data(&ask("dual.d.svc.cluster.local", RecordType::A)), ["10.43.0.6"]);
    assert_eq!(data(&ask("dual.d.svc.cluster.local", RecordType::AAAA)), ["fd43::6"]);
    assert_eq!(data(&ask("six.d.svc.cluster.local", RecordType::AAAA)), ["fd42::7", "fd42::8"]);
    let nodata = ask("six.d.svc.cluster.local", RecordType::A);
    assert!(nodata.answers.is_empty() && nodata.metadata.response_code == ResponseCode::NoError, "an IPv6-only name has no A record, and exists");
    assert_eq!(data(&ask("six-0.six.d.svc.cluster.local", RecordType::AAAA)), ["fd42::7"]);
    assert_eq!(data(&ask("fd42--8.six.d.svc.cluster.local", RecordType::AAAA)), ["fd42::8"]);
    assert_eq!(data(&ask("fd42--9.d.pod.cluster.local", RecordType::AAAA)), ["fd42::9"]);
    assert!(ask("fd42--9.d.pod.cluster.local", RecordType::A).answers.is_empty());
}
