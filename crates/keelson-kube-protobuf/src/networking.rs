//! `networking.k8s.io/v1` object bodies: `Ingress`, `IngressClass`,
//! `NetworkPolicy` (without `status`). Conversion failures are
//! [`crate::json::ConvertError`]s; this module adds no error type of its own.

use k8s_pb::api::networking::v1 as net;
use serde_json::Value;

use crate::json::{Obj, Result};
use crate::meta::{label_selector, object_meta};

/// `Ingress`.
pub fn ingress(i: &net::Ingress) -> Result<Value> {
    let mut o = Obj::new();
    o.message("metadata", &i.metadata, object_meta)?;
    o.message("spec", &i.spec, ingress_spec)?;
    Ok(o.build())
}

/// `IngressSpec` (`ingressClassName`, `defaultBackend`, `tls`, `rules`).
pub fn ingress_spec(s: &net::IngressSpec) -> Result<Value> {
    let mut o = Obj::new();
    o.string_kept("ingressClassName", &s.ingress_class_name);
    o.message("defaultBackend", &s.default_backend, ingress_backend)?;
    o.messages("tls", &s.tls, |t| {
        Ok(Obj::new()
            .strings("hosts", &t.hosts)
            .string("secretName", &t.secret_name)
            .build())
    })?;
    o.messages("rules", &s.rules, ingress_rule)?;
    Ok(o.build())
}

/// `IngressRule`: `host` plus the inlined `IngressRuleValue` (`http`).
fn ingress_rule(r: &net::IngressRule) -> Result<Value> {
    let mut o = Obj::new();
    o.string("host", &r.host);
    if let Some(value) = &r.ingress_rule_value {
        o.message("http", &value.http, |h| {
            let mut o = Obj::new();
            o.messages("paths", &h.paths, |p| {
                let mut o = Obj::new();
                o.string("path", &p.path)
                    .string_kept("pathType", &p.path_type);
                o.message("backend", &p.backend, ingress_backend)?;
                Ok(o.build())
            })?;
            Ok(o.build())
        })?;
    }
    Ok(o.build())
}

/// `IngressBackend` (`service` with name and port, or `resource`).
pub fn ingress_backend(b: &net::IngressBackend) -> Result<Value> {
    let mut o = Obj::new();
    o.message("service", &b.service, |s| {
        let mut o = Obj::new();
        o.string_kept("name", &s.name);
        o.message("port", &s.port, |p| {
            Ok(Obj::new()
                .string("name", &p.name)
                .int("number", p.number)
                .build())
        })?;
        Ok(o.build())
    })?;
    o.message("resource", &b.resource, |r| {
        Ok(Obj::new()
            .string_kept("apiGroup", &r.api_group)
            .string_kept("kind", &r.kind)
            .string_kept("name", &r.name)
            .build())
    })?;
    Ok(o.build())
}

/// `IngressClass` (`controller`, `parameters`).
pub fn ingress_class(c: &net::IngressClass) -> Result<Value> {
    let mut o = Obj::new();
    o.message("metadata", &c.metadata, object_meta)?;
    o.message("spec", &c.spec, |s| {
        let mut o = Obj::new();
        o.string("controller", &s.controller);
        o.message("parameters", &s.parameters, |p| {
            Ok(Obj::new()
                .string_kept("apiGroup", &p.a_pi_group)
                .string_kept("kind", &p.kind)
                .string_kept("name", &p.name)
                .string_kept("scope", &p.scope)
                .string_kept("namespace", &p.namespace)
                .build())
        })?;
        Ok(o.build())
    })?;
    Ok(o.build())
}

/// `NetworkPolicy`; an empty `podSelector` stays `{}` (all pods).
pub fn network_policy(n: &net::NetworkPolicy) -> Result<Value> {
    let mut o = Obj::new();
    o.message("metadata", &n.metadata, object_meta)?;
    o.message("spec", &n.spec, |s| {
        let mut o = Obj::new();
        o.message("podSelector", &s.pod_selector, label_selector)?;
        o.messages("ingress", &s.ingress, |r| {
            let mut o = Obj::new();
            o.messages("ports", &r.ports, network_policy_port)?;
            o.messages("from", &r.from, network_policy_peer)?;
            Ok(o.build())
        })?;
        o.messages("egress", &s.egress, |r| {
            let mut o = Obj::new();
            o.messages("ports", &r.ports, network_policy_port)?;
            o.messages("to", &r.to, network_policy_peer)?;
            Ok(o.build())
        })?;
        o.strings("policyTypes", &s.policy_types);
        Ok(o.build())
    })?;
    Ok(o.build())
}

fn network_policy_port(p: &net::NetworkPolicyPort) -> Result<Value> {
    let mut o = Obj::new();
    o.string_kept("protocol", &p.protocol);
    o.int_or_string_kept("port", &p.port)?;
    Ok(o.int_kept("endPort", p.end_port).build())
}

fn network_policy_peer(p: &net::NetworkPolicyPeer) -> Result<Value> {
    let mut o = Obj::new();
    o.message("podSelector", &p.pod_selector, label_selector)?;
    o.message("namespaceSelector", &p.namespace_selector, label_selector)?;
    o.message("ipBlock", &p.ip_block, |b| {
        Ok(Obj::new()
            .string_kept("cidr", &b.cidr)
            .strings("except", &b.except)
            .build())
    })?;
    Ok(o.build())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn backend_port_by_name_or_number() {
        let b = net::IngressBackend {
            service: Some(net::IngressServiceBackend {
                name: Some("svc".into()),
                port: Some(net::ServiceBackendPort {
                    name: Some("http".into()),
                    number: Some(0),
                }),
            }),
            resource: None,
        };
        assert_eq!(
            ingress_backend(&b).unwrap(),
            json!({"service": {"name": "svc", "port": {"name": "http"}}})
        );
    }

    #[test]
    fn empty_pod_selector_kept() {
        let n = net::NetworkPolicy {
            metadata: None,
            spec: Some(net::NetworkPolicySpec {
                pod_selector: Some(Default::default()),
                policy_types: vec!["Ingress".into()],
                ..Default::default()
            }),
        };
        assert_eq!(
            network_policy(&n).unwrap(),
            json!({"spec": {"podSelector": {}, "policyTypes": ["Ingress"]}})
        );
    }
}
