//! What a request does, in authorization terms (verb, group, resource, subresource,
//! namespace, name — or a non-resource path). Pure.

use std::collections::HashMap;

use http::Method;

use keelson_rbac::{Attributes, NonResourceAttributes, ResourceAttributes};

use crate::http::request::{ResourceRequest, Route};

/// The Kubernetes verb of a resource request.
pub fn resource_verb(method: &Method, rr: &ResourceRequest, query: &HashMap<String, String>) -> String {
    let watch = matches!(query.get("watch").map(String::as_str), Some("true" | "1"));
    match (method.as_str(), rr.name.is_some()) {
        ("GET" | "HEAD", true) => "get",
        ("GET" | "HEAD", false) if watch => "watch",
        ("GET" | "HEAD", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        (other, _) => return other.to_ascii_lowercase(),
    }
    .to_string()
}

/// Attributes of a routed request. Subresources whose verb is fixed in Kubernetes
/// (`pods/exec` and `pods/attach` are `create` for POST and `get` for a WebSocket GET) keep
/// the HTTP-derived verb.
pub fn attributes(method: &Method, route: &Route, path: &str, query: &HashMap<String, String>) -> Attributes {
    match route {
        Route::Resource(rr) => {
            // A namespace object is addressed with its own name as the namespace too.
            let namespace = if rr.def.group.is_empty() && rr.def.kind == "Namespace" { rr.name.clone() } else { rr.namespace.clone() };
            Attributes::Resource(ResourceAttributes {
                verb: resource_verb(method, rr, query),
                api_group: rr.def.group.to_string(),
                resource: rr.def.plural.to_string(),
                subresource: rr.subresource.map(|s| s.name().to_string()),
                namespace,
                name: rr.name.clone(),
            })
        }
        Route::Virtual(v) => Attributes::Resource(ResourceAttributes {
            verb: if method == Method::POST { "create".into() } else { method.as_str().to_ascii_lowercase() },
            api_group: v.def.group.to_string(),
            resource: v.def.plural.to_string(),
            subresource: None,
            namespace: v.namespace.clone(),
            name: None,
        }),
        Route::ResourceMetrics(m) => Attributes::Resource(ResourceAttributes {
            verb: match (method.as_str(), m.name.is_some()) {
                ("GET" | "HEAD", true) => "get".into(),
                ("GET" | "HEAD", false) if matches!(query.get("watch").map(String::as_str), Some("true" | "1")) => "watch".into(),
                ("GET" | "HEAD", false) => "list".into(),
                (other, _) => other.to_ascii_lowercase(),
            },
            api_group: crate::resource_metrics::GROUP.to_string(),
            resource: m.plural().to_string(),
            subresource: None,
            namespace: m.namespace.clone(),
            name: m.name.clone(),
        }),
        _ => Attributes::NonResource(NonResourceAttributes { verb: method.as_str().to_ascii_lowercase(), path: path.to_string() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::request::{parse_query, route};

    fn attrs(method: Method, path_and_query: &str) -> Attributes {
        let (path, q) = path_and_query.split_once('?').unwrap_or((path_and_query, ""));
        attributes(&method, &route(path), path, &parse_query(Some(q)))
    }

    #[test]
    fn verbs_follow_kubernetes() {
        let r = |a: Attributes| match a {
            Attributes::Resource(r) => r,
            other => panic!("{other:?}"),
        };
        let a = r(attrs(Method::GET, "/api/v1/namespaces/default/pods?watch=true"));
        assert_eq!((a.verb.as_str(), a.namespace.as_deref(), a.name), ("watch", Some("default"), None));
        let a = r(attrs(Method::DELETE, "/apis/apps/v1/namespaces/d/deployments"));
        assert_eq!((a.verb.as_str(), a.api_group.as_str()), ("deletecollection", "apps"));
        let a = r(attrs(Method::PATCH, "/apis/apps/v1/namespaces/d/deployments/web/scale"));
        assert_eq!((a.verb.as_str(), a.subresource.as_deref(), a.name.as_deref()), ("patch", Some("scale"), Some("web")));
        let a = r(attrs(Method::GET, "/api/v1/nodes"));
        assert_eq!((a.verb.as_str(), a.namespace), ("list", None));
        let a = r(attrs(Method::DELETE, "/api/v1/namespaces/demo"));
        assert_eq!((a.namespace.as_deref(), a.name.as_deref()), (Some("demo"), Some("demo")));
        assert_eq!(attrs(Method::GET, "/version"), Attributes::NonResource(NonResourceAttributes::new("get", "/version")));
    }
}
