use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::ByteString;
use serde_json::json;

use crate::tls::{build, choose_secrets, default_certificate, CertResolver};

fn ingress(name: &str, created: &str, tls: serde_json::Value) -> Ingress {
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": "shop", "creationTimestamp": created}, "spec": {"tls": tls,
        "rules": [{"host": "rule.shop.test"}]}})).unwrap()
}

/// A `kubernetes.io/tls` Secret with a fresh self-signed certificate for `names`.
fn secret(name: &str, names: &[&str]) -> (Secret, Vec<u8>) {
    let made = rcgen::generate_simple_self_signed(names.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    let der = made.cert.der().to_vec();
    let s = Secret {
        metadata: kube::api::ObjectMeta { name: Some(name.into()), namespace: Some("shop".into()), ..Default::default() },
        type_: Some("kubernetes.io/tls".into()),
        data: Some([("tls.crt".to_string(), ByteString(made.cert.pem().into_bytes())), ("tls.key".to_string(), ByteString(made.signing_key.serialize_pem().into_bytes()))].into()),
        ..Default::default()
    };
    (s, der)
}

fn chosen(ings: &[&Ingress], host: &str) -> Option<String> {
    choose_secrets(ings).lookup(host).map(|(ns, n)| format!("{ns}/{n}"))
}

#[test]
fn secrets_are_chosen_by_exact_name_then_wildcard_oldest_ingress_first() {
    let old = ingress("old", "2026-01-01T00:00:00Z", json!([{"hosts": ["api.shop.test"], "secretName": "api"}, {"hosts": ["*.shop.test"], "secretName": "wild"}]));
    let young = ingress("young", "2026-02-01T00:00:00Z", json!([{"hosts": ["api.shop.test", "new.shop.test"], "secretName": "other"}, {"secretName": "rules"}]));
    let ings = [&old, &young];
    assert_eq!(chosen(&ings, "api.shop.test").as_deref(), Some("shop/api"));
    assert_eq!(chosen(&ings, "new.shop.test").as_deref(), Some("shop/other"), "an exact name beats an older wildcard");
    assert_eq!(chosen(&ings, "web.shop.test").as_deref(), Some("shop/wild"));
    assert_eq!(chosen(&ings, "a.web.shop.test"), None, "a wildcard covers one label");
    assert_eq!(chosen(&ings, "rule.shop.test").as_deref(), Some("shop/rules"), "no hosts: the rules' hosts");
    assert_eq!(chosen(&ings, "other.test"), None);
}

#[test]
fn the_resolver_serves_the_secrets_certificate_by_sni_and_the_default_otherwise() {
    let ing = ingress("ing", "2026-01-01T00:00:00Z", json!([{"hosts": ["api.shop.test"], "secretName": "api"}, {"hosts": ["web.shop.test"], "secretName": "missing"}]));
    let (api, api_der) = secret("api", &["api.shop.test"]);
    let (mut plain, _) = secret("plain", &["x"]);
    plain.type_ = Some("Opaque".into());
    let (table, problems) = build(&[&ing], &[&api, &plain]);
    assert_eq!(problems.len(), 1);
    assert_eq!((problems[0].reason, problems[0].message.as_str()), ("SecretNotFound", "TLS Secret shop/missing does not exist; its hosts get the default certificate"));
    let resolver = CertResolver::new(default_certificate().unwrap());
    let default_der = resolver.for_name(None).cert[0].to_vec();
    resolver.replace(table);
    assert_eq!(resolver.for_name(Some("API.shop.test")).cert[0].to_vec(), api_der);
    assert_eq!(resolver.for_name(Some("web.shop.test")).cert[0].to_vec(), default_der);
    assert_eq!(resolver.for_name(Some("unknown.test")).cert[0].to_vec(), default_der);

    // A rotated Secret replaces the certificate for the next handshake.
    let (rotated, rotated_der) = secret("api", &["api.shop.test"]);
    resolver.replace(build(&[&ing], &[&rotated]).0);
    assert_eq!(resolver.for_name(Some("api.shop.test")).cert[0].to_vec(), rotated_der);
}

#[test]
fn a_secret_that_is_not_tls_or_unreadable_is_reported() {
    let ing = ingress("ing", "2026-01-01T00:00:00Z", json!([{"hosts": ["a.test"], "secretName": "plain"}, {"hosts": ["b.test"], "secretName": "broken"}]));
    let (mut plain, _) = secret("plain", &["a.test"]);
    plain.type_ = Some("Opaque".into());
    let (mut broken, _) = secret("broken", &["b.test"]);
    broken.data.as_mut().unwrap().insert("tls.key".into(), ByteString(b"not a key".to_vec()));
    let (table, problems) = build(&[&ing], &[&plain, &broken]);
    let reasons: Vec<&str> = problems.iter().map(|p| p.reason).collect();
    assert_eq!(reasons, ["SecretNotTLS", "SecretUnusable"]);
    assert!(table.lookup("a.test").is_none() && table.lookup("b.test").is_none());
}
