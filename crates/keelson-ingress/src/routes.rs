//! The route table (pure): Ingresses of our class, Services and EndpointSlices → which
//! backend answers a host and path.
//!
//! - Hosts: a rule's exact host, else its `*.` wildcard ([`crate::host`]), else the rules
//!   without a host. The most specific host group that exists decides; a request no path
//!   of that group matches goes to the default backend (the oldest Ingress'
//!   `spec.defaultBackend`), else gets 404.
//! - Paths: `Exact`; `Prefix` element by element (`/foo` matches `/foo` and `/foo/bar`,
//!   not `/foobar`; a trailing `/` changes nothing); `ImplementationSpecific` as Prefix.
//!   The longest path first, Exact before Prefix at equal length.
//! - Conflicts (the same host, path and kind in two Ingresses): the oldest Ingress by
//!   creationTimestamp, then namespace/name, wins; the other is reported as a
//!   [`Problem`].
//! - Backends: a Service port by number or name, resolved through the Service's
//!   EndpointSlices to the addresses of ready endpoints (`conditions.ready` unset counts
//!   as ready, as the API says). None ready: 503.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressBackend, IngressClass};

use crate::host::HostMap;

/// The annotation (and its Keelson spelling) that redirects plain HTTP to HTTPS for the
/// Ingress' TLS hosts.
pub const SSL_REDIRECT: [&str; 2] = ["ingress.kubernetes.io/ssl-redirect", "keelson.io/ssl-redirect"];
/// Marks the IngressClass that Ingresses without a class belong to.
pub const DEFAULT_CLASS_ANNOTATION: &str = "ingressclass.kubernetes.io/is-default-class";
/// The class an Ingress named before `spec.ingressClassName` existed.
pub const LEGACY_CLASS_ANNOTATION: &str = "kubernetes.io/ingress.class";

/// How a path is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PathKind {
    Exact,
    Prefix,
}

/// Where requests of a route go: the ready endpoints of one Service port.
#[derive(Debug)]
pub struct Backend {
    /// `namespace/service:port`, for logs and error pages.
    pub name: String,
    pub endpoints: Vec<SocketAddr>,
    next: AtomicUsize,
}

impl Backend {
    pub fn new(name: String, endpoints: Vec<SocketAddr>) -> Self {
        Self { name, endpoints, next: AtomicUsize::new(0) }
    }

    /// The endpoints in the order to try them: round robin over requests.
    pub fn rotation(&self) -> impl Iterator<Item = SocketAddr> + '_ {
        let n = self.endpoints.len().max(1);
        let start = self.next.fetch_add(1, Ordering::Relaxed) % n;
        self.endpoints.iter().cycle().skip(start).take(self.endpoints.len()).copied()
    }
}

/// One path of one host.
#[derive(Debug, Clone)]
pub struct Route {
    /// As compared: a Prefix without its trailing `/` (the root prefix is empty).
    pub path: String,
    pub kind: PathKind,
    pub backend: Arc<Backend>,
    /// Plain HTTP gets a 308 to HTTPS.
    pub redirect_https: bool,
    /// `namespace/name` of the Ingress it came from.
    pub ingress: String,
}

impl Route {
    fn matches(&self, path: &str) -> bool {
        match self.kind {
            PathKind::Exact => path == self.path,
            PathKind::Prefix => {
                let p = path.strip_prefix(self.path.as_str());
                matches!(p, Some(rest) if rest.is_empty() || rest.starts_with('/'))
            }
        }
    }
}

/// What to do with a request.
#[derive(Debug, Clone)]
pub enum Decision {
    Proxy(Arc<Backend>),
    /// A route matched, but its backend has no ready endpoint (503).
    Unavailable(Arc<Backend>),
    /// 308 to the same host and path over HTTPS.
    RedirectHttps,
    /// No rule and no default backend (404).
    NotFound,
}

/// Something about an Ingress a user should hear of (recorded as a Warning Event).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Problem {
    pub namespace: String,
    pub ingress: String,
    pub reason: &'static str,
    pub message: String,
}

#[derive(Debug, Default)]
struct HostRoutes {
    routes: Vec<Route>,
}

/// Which backend answers which host and path.
#[derive(Debug, Default)]
pub struct RouteTable {
    hosts: HostMap<HostRoutes>,
    any_host: Option<HostRoutes>,
    default_backend: Option<Arc<Backend>>,
}

impl RouteTable {
    /// The decision for a request to `host` ([`crate::host::normalize`]d) and `path` (without
    /// the query), arriving over TLS or not.
    pub fn route(&self, host: &str, path: &str, tls: bool) -> Decision {
        let group = self.hosts.lookup(host).or(self.any_host.as_ref());
        let route = group.and_then(|g| g.routes.iter().find(|r| r.matches(path)));
        let backend = match route {
            Some(r) if r.redirect_https && !tls => return Decision::RedirectHttps,
            Some(r) => &r.backend,
            None => match &self.default_backend {
                Some(b) => b,
                None => return Decision::NotFound,
            },
        };
        if backend.endpoints.is_empty() {
            Decision::Unavailable(backend.clone())
        } else {
            Decision::Proxy(backend.clone())
        }
    }
}

/// The objects the table is made of.
#[derive(Default)]
pub struct Inputs<'a> {
    pub ingresses: Vec<&'a Ingress>,
    pub classes: Vec<&'a IngressClass>,
    pub services: Vec<&'a Service>,
    pub slices: Vec<&'a EndpointSlice>,
}

/// Whether `ing` is ours: of class `class`, or of no class while `class` is the default
/// one.
pub fn is_ours(ing: &Ingress, class: &str, classes: &[&IngressClass]) -> bool {
    let spec_class = ing.spec.as_ref().and_then(|s| s.ingress_class_name.as_deref());
    let legacy = ing.metadata.annotations.as_ref().and_then(|a| a.get(LEGACY_CLASS_ANNOTATION)).map(String::as_str);
    match spec_class.or(legacy) {
        Some(c) => c == class,
        None => classes.iter().any(|c| {
            c.metadata.name.as_deref() == Some(class) && c.metadata.annotations.as_ref().and_then(|a| a.get(DEFAULT_CLASS_ANNOTATION)).is_some_and(|v| v == "true")
        }),
    }
}

/// Our Ingresses, oldest first (creationTimestamp, then namespace/name): the order in
/// which conflicts are settled.
pub fn ours_oldest_first<'a>(inputs: &Inputs<'a>, class: &str) -> Vec<&'a Ingress> {
    let mut v: Vec<&Ingress> = inputs.ingresses.iter().copied().filter(|i| is_ours(i, class, &inputs.classes)).collect();
    v.sort_by_key(|i| (i.metadata.creation_timestamp.as_ref().map(|t| t.0), i.metadata.namespace.clone(), i.metadata.name.clone()));
    v
}

fn key(ing: &Ingress) -> (String, String) {
    (ing.metadata.namespace.clone().unwrap_or_default(), ing.metadata.name.clone().unwrap_or_default())
}

fn problem(ing: &Ingress, reason: &'static str, message: String) -> Problem {
    let (namespace, ingress) = key(ing);
    Problem { namespace, ingress, reason, message }
}

/// The hosts `ing` has TLS for (its `spec.tls[].hosts`; a TLS entry without hosts covers
/// the hosts of its rules).
pub fn tls_hosts(ing: &Ingress) -> Vec<String> {
    let Some(spec) = &ing.spec else { return vec![] };
    let rule_hosts = || spec.rules.iter().flatten().filter_map(|r| r.host.clone());
    let mut out = Vec::new();
    for t in spec.tls.iter().flatten() {
        match &t.hosts {
            Some(h) if !h.is_empty() => out.extend(h.iter().cloned()),
            _ => out.extend(rule_hosts()),
        }
    }
    out
}

fn redirects(ing: &Ingress) -> bool {
    let a = ing.metadata.annotations.as_ref();
    SSL_REDIRECT.iter().any(|k| a.and_then(|a| a.get(*k)).is_some_and(|v| v == "true"))
}

/// Resolves Service backends to ready endpoints, sharing one [`Backend`] per Service
/// port.
struct Resolver<'a> {
    services: HashMap<(&'a str, &'a str), &'a Service>,
    slices: HashMap<(&'a str, &'a str), Vec<&'a EndpointSlice>>,
    made: HashMap<String, Arc<Backend>>,
}

impl<'a> Resolver<'a> {
    fn new(inputs: &Inputs<'a>) -> Self {
        let services = inputs.services.iter().filter_map(|s| Some(((s.metadata.namespace.as_deref()?, s.metadata.name.as_deref()?), *s))).collect();
        let mut slices: HashMap<_, Vec<_>> = HashMap::new();
        for sl in &inputs.slices {
            let svc = sl.metadata.labels.as_ref().and_then(|l| l.get("kubernetes.io/service-name"));
            if let (Some(ns), Some(svc)) = (sl.metadata.namespace.as_deref(), svc) {
                slices.entry((ns, svc.as_str())).or_default().push(*sl);
            }
        }
        Self { services, slices, made: HashMap::new() }
    }

    /// The backend `b` of an Ingress in `ns`, or the problem that keeps it from being one.
    fn resolve(&mut self, ns: &str, b: &IngressBackend) -> Result<Arc<Backend>, (&'static str, String)> {
        let Some(sb) = &b.service else {
            return Err(("UnsupportedBackend", "only Service backends are served; a resource backend is ignored".into()));
        };
        let port = sb.port.as_ref();
        let (num, pname) = (port.and_then(|p| p.number), port.and_then(|p| p.name.clone()));
        let port_text = num.map(|n| n.to_string()).or(pname.clone()).unwrap_or_default();
        let name = format!("{ns}/{}:{port_text}", sb.name);
        if let Some(b) = self.made.get(&name) {
            return Ok(b.clone());
        }
        let Some(svc) = self.services.get(&(ns, sb.name.as_str())) else {
            return Err(("ServiceNotFound", format!("Service {ns}/{} does not exist, so its paths answer 503", sb.name)));
        };
        let ports = svc.spec.as_ref().and_then(|s| s.ports.as_ref());
        let Some(sp) = ports.into_iter().flatten().find(|p| Some(p.port) == num || (pname.is_some() && p.name == pname)) else {
            return Err(("ServicePortNotFound", format!("Service {ns}/{} has no port {port_text}, so its paths answer 503", sb.name)));
        };
        let want = sp.name.clone().unwrap_or_default();
        let mut eps = Vec::new();
        for sl in self.slices.get(&(ns, sb.name.as_str())).into_iter().flatten() {
            let Some(target) = sl.ports.iter().flatten().find(|p| p.name.clone().unwrap_or_default() == want).and_then(|p| p.port) else { continue };
            for ep in &sl.endpoints {
                if ep.conditions.as_ref().and_then(|c| c.ready) == Some(false) {
                    continue;
                }
                eps.extend(ep.addresses.iter().filter_map(|a| a.parse::<IpAddr>().ok()).map(|ip| SocketAddr::new(ip, target as u16)));
            }
        }
        eps.sort();
        eps.dedup();
        let b = Arc::new(Backend::new(name.clone(), eps));
        self.made.insert(name, b.clone());
        Ok(b)
    }
}

/// A backend that could not be resolved still answers: 503, with the Service's name.
fn unresolved(ns: &str, b: &IngressBackend) -> Arc<Backend> {
    let svc = b.service.as_ref().map(|s| s.name.as_str()).unwrap_or("resource");
    Arc::new(Backend::new(format!("{ns}/{svc}"), vec![]))
}

/// The table for `inputs`, serving Ingresses of class `class`, and the problems found.
pub fn build(inputs: &Inputs<'_>, class: &str) -> (RouteTable, Vec<Problem>) {
    let mut table = RouteTable::default();
    let mut problems = Vec::new();
    let mut resolver = Resolver::new(inputs);
    // Who has each (host, path, kind): the first (oldest) Ingress keeps it.
    let mut owners: BTreeMap<(String, String, PathKind), String> = BTreeMap::new();
    for ing in ours_oldest_first(inputs, class) {
        let (ns, name) = key(ing);
        let ing_key = format!("{ns}/{name}");
        let Some(spec) = &ing.spec else { continue };
        let mut backend_of = |b: &IngressBackend, problems: &mut Vec<Problem>| match resolver.resolve(&ns, b) {
            Ok(b) => b,
            Err((reason, message)) => {
                problems.push(problem(ing, reason, message));
                unresolved(&ns, b)
            }
        };
        if let Some(db) = &spec.default_backend {
            let b = backend_of(db, &mut problems);
            if table.default_backend.is_none() {
                table.default_backend = Some(b);
            } else {
                problems.push(problem(ing, "DefaultBackendConflict", format!("the default backend of an older Ingress is used instead of {}", b.name)));
            }
        }
        let tls: Vec<String> = tls_hosts(ing).iter().map(|h| h.to_ascii_lowercase()).collect();
        let redirect = redirects(ing);
        for rule in spec.rules.iter().flatten() {
            let host_pattern = rule.host.as_deref().map(|h| h.trim_end_matches('.').to_ascii_lowercase());
            for p in rule.http.iter().flat_map(|h| h.paths.iter()) {
                let kind = if p.path_type == "Exact" { PathKind::Exact } else { PathKind::Prefix };
                let raw = p.path.clone().unwrap_or_else(|| "/".into());
                let path = match kind {
                    PathKind::Exact => raw,
                    PathKind::Prefix => raw.trim_end_matches('/').to_string(),
                };
                let owner_key = (host_pattern.clone().unwrap_or_default(), path.clone(), kind);
                if let Some(owner) = owners.get(&owner_key) {
                    if *owner != ing_key {
                        let shown = if path.is_empty() { "/" } else { path.as_str() };
                        let on = host_pattern.as_deref().map(|h| format!(" of host {h}")).unwrap_or_default();
                        problems.push(problem(ing, "RouteConflict", format!("path {shown}{on} is already served by the older Ingress {owner}; this one's is ignored")));
                    }
                    continue;
                }
                owners.insert(owner_key, ing_key.clone());
                let route = Route {
                    redirect_https: redirect && host_pattern.as_ref().is_some_and(|h| tls.contains(h)),
                    backend: backend_of(&p.backend, &mut problems),
                    path,
                    kind,
                    ingress: ing_key.clone(),
                };
                let group = match &host_pattern {
                    Some(h) => table.hosts.entry_or(h, HostRoutes::default),
                    None => table.any_host.get_or_insert_with(HostRoutes::default),
                };
                group.routes.push(route);
            }
        }
    }
    let sort = |g: &mut HostRoutes| g.routes.sort_by(|a, b| b.path.len().cmp(&a.path.len()).then(a.kind.cmp(&b.kind)));
    table.hosts.values_mut().for_each(sort);
    if let Some(g) = table.any_host.as_mut() {
        sort(g);
    }
    problems.sort();
    problems.dedup();
    (table, problems)
}
