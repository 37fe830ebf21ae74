//! What a request path and query address: pure parsing, no I/O.

use std::collections::HashMap;

use crate::catalog::{self, ResourceDef, Subresource};
use crate::error::ApiError;

/// A resource request, parsed from the URL.
#[derive(Clone, Debug)]
pub struct ResourceRequest {
    pub def: &'static ResourceDef,
    /// Namespace from the URL (`None` for cluster-scoped requests or all-namespace lists).
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<Subresource>,
}

/// A request to a resource the catalog marks answered: answered from the body, never
/// stored (access reviews, token reviews, whoami).
#[derive(Clone, Debug)]
pub struct VirtualRequest {
    pub def: &'static ResourceDef,
    pub namespace: Option<String>,
}

/// Which resource metrics a `metrics.k8s.io/v1beta1` request reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricsResource {
    Nodes,
    Pods,
}

/// A `metrics.k8s.io/v1beta1` request (answered from the agents, never stored).
#[derive(Clone, Debug, PartialEq)]
pub struct MetricsRequest {
    pub resource: MetricsResource,
    pub namespace: Option<String>,
    pub name: Option<String>,
}

impl MetricsRequest {
    pub fn plural(&self) -> &'static str {
        match self.resource {
            MetricsResource::Nodes => "nodes",
            MetricsResource::Pods => "pods",
        }
    }
}

fn metrics_route(rest: &[&str]) -> Route {
    let mk = |resource, ns: Option<&str>, name: Option<&str>| Route::ResourceMetrics(MetricsRequest { resource, namespace: ns.map(String::from), name: name.map(String::from) });
    match rest {
        ["nodes"] => mk(MetricsResource::Nodes, None, None),
        ["nodes", name] => mk(MetricsResource::Nodes, None, Some(name)),
        ["pods"] => mk(MetricsResource::Pods, None, None),
        ["namespaces", ns, "pods"] => mk(MetricsResource::Pods, Some(ns), None),
        ["namespaces", ns, "pods", name] => mk(MetricsResource::Pods, Some(ns), Some(name)),
        _ => Route::NotFound,
    }
}

/// Where a path leads.
#[derive(Debug)]
pub enum Route {
    Resource(ResourceRequest),
    Virtual(VirtualRequest),
    /// `/apis/metrics.k8s.io/v1beta1/…`: NodeMetrics and PodMetrics.
    ResourceMetrics(MetricsRequest),
    /// `/api` or `/apis`.
    GroupList { legacy: bool },
    /// `/apis/GROUP`.
    Group(String),
    /// `/api/v1` or `/apis/GROUP/VERSION`.
    GroupVersion { group: String, version: String },
    Version,
    Health(String),
    OpenApiV3Index,
    /// `/openapi/v2`: answered empty (kubectl 1.27/1.28 `explain` needs a 200 before it
    /// moves on to v3).
    OpenApiV2,
    OpenApiV3(String),
    Metrics,
    /// `GET /ui`: the status page; `GET /ui/status`: the document it draws.
    Ui { document: bool },
    /// `GET /keelson/v1/cacerts`: the cluster CA, for joiners.
    KeelsonCaCerts,
    /// `POST /keelson/v1/join`: join with a token.
    KeelsonJoin,
    NotFound,
}

/// Splits a path into its route. Unknown resources are `NotFound`.
pub fn route(path: &str) -> Route {
    let segs: Vec<&str> = path.trim_matches('/').split('/').filter(|s| !s.is_empty()).collect();
    match segs.as_slice() {
        ["version"] => Route::Version,
        [h @ ("healthz" | "livez" | "readyz"), ..] => Route::Health(h.to_string()),
        ["metrics"] => Route::Metrics,
        ["ui"] => Route::Ui { document: false },
        ["ui", "status"] => Route::Ui { document: true },
        ["keelson", "v1", "cacerts"] => Route::KeelsonCaCerts,
        ["keelson", "v1", "join"] => Route::KeelsonJoin,
        ["openapi", "v3"] => Route::OpenApiV3Index,
        ["openapi", "v2"] => Route::OpenApiV2,
        ["openapi", "v3", rest @ ..] if !rest.is_empty() => Route::OpenApiV3(rest.join("/")),
        ["api"] => Route::GroupList { legacy: true },
        ["apis"] => Route::GroupList { legacy: false },
        ["api", "v1"] => Route::GroupVersion { group: String::new(), version: "v1".into() },
        ["apis", g] => Route::Group(g.to_string()),
        ["apis", "metrics.k8s.io", "v1beta1", rest @ ..] if !rest.is_empty() => metrics_route(rest),
        ["apis", g, v] => Route::GroupVersion { group: g.to_string(), version: v.to_string() },
        ["api", "v1", rest @ ..] => resource_route("", "v1", rest),
        ["apis", g, v, rest @ ..] => resource_route(g, v, rest),
        _ => Route::NotFound,
    }
}

fn resource_route(group: &str, version: &str, rest: &[&str]) -> Route {
    let mk = |def: Option<&'static ResourceDef>, ns: Option<&str>, name: Option<&str>, sub: Option<&str>| -> Route {
        let Some(def) = def else { return Route::NotFound };
        let subresource = match sub {
            None => None,
            Some(s) => match Subresource::parse(s).filter(|s| def.has_subresource(*s)) {
                Some(s) => Some(s),
                None => return Route::NotFound,
            },
        };
        if ns.is_some() && !def.namespaced {
            return Route::NotFound;
        }
        if def.answered {
            // Only `POST [namespaces/NS/]PLURAL`, in the resource's own scope.
            if name.is_some() || ns.is_some() != def.namespaced {
                return Route::NotFound;
            }
            return Route::Virtual(VirtualRequest { def, namespace: ns.map(String::from) });
        }
        Route::Resource(ResourceRequest {
            def,
            namespace: ns.map(String::from),
            name: name.map(String::from),
            subresource,
        })
    };
    let lookup = |plural: &str| catalog::lookup(group, version, plural);
    match rest {
        // /namespaces/NS/RESOURCE[/NAME[/SUB]] — unless RESOURCE is a namespace subresource.
        ["namespaces", ns, res, tail @ ..] if lookup(res).is_some_and(|d| d.namespaced) => match tail {
            [] => mk(lookup(res), Some(ns), None, None),
            [name] => mk(lookup(res), Some(ns), Some(name), None),
            [name, sub] => mk(lookup(res), Some(ns), Some(name), Some(sub)),
            _ => Route::NotFound,
        },
        [res] => mk(lookup(res), None, None, None),
        [res, name] => mk(lookup(res), None, Some(name), None),
        [res, name, sub] => mk(lookup(res), None, Some(name), Some(sub)),
        _ => Route::NotFound,
    }
}

/// The query string, decoded (`+` is a space, as kubectl form-encodes selectors; a `%`
/// not followed by two hex digits stays as it is). A repeated key keeps its last value.
pub fn parse_query(q: Option<&str>) -> HashMap<String, String> {
    form_urlencoded::parse(q.unwrap_or("").as_bytes()).into_owned().collect()
}

/// Parses a boolean query parameter.
pub fn query_bool(q: &HashMap<String, String>, key: &str) -> Result<bool, ApiError> {
    match q.get(key).map(String::as_str) {
        None | Some("") | Some("false") | Some("0") => Ok(false),
        Some("true") | Some("1") => Ok(true),
        Some(v) => Err(ApiError::BadRequest(format!("invalid value {v:?} for query parameter {key}: expected true or false"))),
    }
}

/// Parses an integer query parameter.
pub fn query_i64(q: &HashMap<String, String>, key: &str) -> Result<Option<i64>, ApiError> {
    match q.get(key).map(String::as_str) {
        None | Some("") => Ok(None),
        Some(v) => v
            .parse()
            .map(Some)
            .map_err(|_| ApiError::BadRequest(format!("invalid value {v:?} for query parameter {key}: expected an integer"))),
    }
}

/// How long a request that is not long-running may take (kube-apiserver's
/// `--request-timeout` default).
pub const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// The time a request that is not long-running is given: its `timeout` parameter (Go's
/// duration syntax, as `kubectl --request-timeout` sends it) held to [`REQUEST_TIMEOUT`],
/// or that; 400 for a `timeout` that does not parse, as kube-apiserver answers.
pub fn request_deadline(query: &HashMap<String, String>) -> Result<std::time::Duration, ApiError> {
    match query.get("timeout").map(String::as_str) {
        None | Some("") => Ok(REQUEST_TIMEOUT),
        Some(t) => match keelson_apimachinery::duration::parse(t) {
            Ok(d) if !d.is_zero() => Ok(d.min(REQUEST_TIMEOUT)),
            Ok(_) => Ok(REQUEST_TIMEOUT),
            Err(e) => Err(ApiError::BadRequest(format!("invalid timeout specified in the request URL: {e}"))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(path: &str) -> ResourceRequest {
        match route(path) {
            Route::Resource(r) => r,
            other => panic!("{path}: {other:?}"),
        }
    }

    #[test]
    fn resource_paths() {
        let r = res("/api/v1/namespaces/default/pods/web-1/log");
        assert_eq!((r.def.plural, r.namespace.as_deref(), r.name.as_deref(), r.subresource), ("pods", Some("default"), Some("web-1"), Some(Subresource::Log)));
        let r = res("/api/v1/pods");
        assert_eq!((r.def.plural, r.namespace, r.name), ("pods", None, None));
        let r = res("/api/v1/namespaces/kube-system");
        assert_eq!((r.def.plural, r.name.as_deref()), ("namespaces", Some("kube-system")));
        let r = res("/api/v1/namespaces/foo/status");
        assert_eq!((r.def.plural, r.name.as_deref(), r.subresource), ("namespaces", Some("foo"), Some(Subresource::Status)));
        let r = res("/apis/apps/v1/namespaces/d/deployments/web/scale");
        assert_eq!((r.def.kind, r.subresource), ("Deployment", Some(Subresource::Scale)));
        let r = res("/apis/rbac.authorization.k8s.io/v1/clusterroles/system:admin");
        assert_eq!(r.name.as_deref(), Some("system:admin"));
    }

    #[test]
    fn answered_and_create_only_resources_route_from_the_catalog() {
        match route("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews") {
            Route::Virtual(v) => assert_eq!((v.def.kind, v.namespace), ("SelfSubjectAccessReview", None)),
            other => panic!("{other:?}"),
        }
        match route("/apis/authorization.k8s.io/v1/namespaces/dev/localsubjectaccessreviews") {
            Route::Virtual(v) => assert_eq!((v.def.kind, v.namespace.as_deref()), ("LocalSubjectAccessReview", Some("dev"))),
            other => panic!("{other:?}"),
        }
        // Answered resources have neither names nor the other scope.
        assert!(matches!(route("/apis/authorization.k8s.io/v1/localsubjectaccessreviews"), Route::NotFound));
        assert!(matches!(route("/apis/authentication.k8s.io/v1/tokenreviews/x"), Route::NotFound));
        assert!(matches!(route("/apis/authentication.k8s.io/v1/namespaces/a/tokenreviews"), Route::NotFound));
        let r = res("/api/v1/namespaces/default/bindings");
        assert_eq!((r.def.kind, r.def.verbs, r.namespace.as_deref()), ("Binding", &["create"][..], Some("default")));
    }

    #[test]
    fn metrics_paths() {
        let m = |p: &str| match route(p) {
            Route::ResourceMetrics(m) => m,
            other => panic!("{p}: {other:?}"),
        };
        assert_eq!(m("/apis/metrics.k8s.io/v1beta1/nodes"), MetricsRequest { resource: MetricsResource::Nodes, namespace: None, name: None });
        assert_eq!(m("/apis/metrics.k8s.io/v1beta1/nodes/n1").name.as_deref(), Some("n1"));
        assert_eq!(m("/apis/metrics.k8s.io/v1beta1/pods").namespace, None);
        let p = m("/apis/metrics.k8s.io/v1beta1/namespaces/d/pods/web");
        assert_eq!((p.resource, p.namespace.as_deref(), p.name.as_deref()), (MetricsResource::Pods, Some("d"), Some("web")));
        assert!(matches!(route("/apis/metrics.k8s.io/v1beta1/namespaces/d/nodes"), Route::NotFound));
        assert!(matches!(route("/apis/metrics.k8s.io/v1beta1"), Route::GroupVersion { .. }));
    }

    #[test]
    fn unknown_paths_are_not_found() {
        for p in ["/api/v1/widgets", "/apis/apps/v1/namespaces/d/nodes", "/api/v1/namespaces/d/pods/x/scale", "/apis/apps/v2/deployments", "/foo"] {
            assert!(matches!(route(p), Route::NotFound), "{p}");
        }
        assert!(matches!(route("/apis/apps/v1"), Route::GroupVersion { .. }));
        assert!(matches!(route("/openapi/v3/apis/apps/v1"), Route::OpenApiV3(p) if p == "apis/apps/v1"));
    }

    #[test]
    fn query_decoding_handles_form_encoding() {
        let q = parse_query(Some("labelSelector=app+in+%28web%2Cseed%29%2Ctier%21%3Dx&limit=500&watch"));
        assert_eq!(q["labelSelector"], "app in (web,seed),tier!=x");
        assert_eq!(query_i64(&q, "limit").unwrap(), Some(500));
        assert_eq!(q["watch"], "");
        assert!(query_bool(&parse_query(Some("watch=maybe")), "watch").is_err());
        assert_eq!(parse_query(Some("a=%zz%4"))["a"], "%zz%4");
        assert_eq!(parse_query(Some("fieldSelector=metadata.name%3Dweb-%41"))["fieldSelector"], "metadata.name=web-A", "an escape at the very end");
    }

    #[test]
    fn a_timeout_parameter_shortens_the_request_deadline_never_lengthens_it() {
        let q = |t: &str| parse_query(Some(&format!("timeout={t}")));
        assert_eq!(request_deadline(&parse_query(None)).unwrap(), REQUEST_TIMEOUT);
        assert_eq!(request_deadline(&q("1.5s")).unwrap(), std::time::Duration::from_millis(1500));
        assert_eq!(request_deadline(&q("5m")).unwrap(), REQUEST_TIMEOUT);
        assert_eq!(request_deadline(&q("0")).unwrap(), REQUEST_TIMEOUT);
        let bad = request_deadline(&q("soon")).unwrap_err();
        assert_eq!(bad.code(), 400);
        assert!(bad.to_string().contains("invalid timeout"), "{bad}");
    }
}
