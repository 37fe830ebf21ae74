//! The node's whole service ruleset as a pure function of the Services, their
//! EndpointSlices and the node: one `ip keelson-proxy` table in nft's own syntax, laid out
//! as kube-proxy's nftables mode lays out its `kube-proxy` table.
//!
//! - `services` (from the nat prerouting/output hooks) looks `daddr . proto . dport` up in
//!   the `service-ips` verdict map (ClusterIPs, externalIPs, LoadBalancer ingress IPs) and,
//!   for the node's own addresses (`nodeport-ips`), `proto . dport` in `service-nodeports`.
//! - `svc-<ns>/<name>/<proto>/<port>` picks an endpoint with `numgen random mod N`
//!   (ClientIP affinity first through per-endpoint timeout sets); `ext-…` is the entry of
//!   external traffic (NodePort, LoadBalancer, externalIPs): masqueraded with the
//!   `Cluster` policy, kept to this node's endpoints with `Local`.
//! - `ep-…` marks hairpin traffic for masquerade and DNATs to the endpoint.
//! - `filter-*` chains (before DNAT) reject new connections to a Service port that has no
//!   usable endpoint (a TCP reset, ICMP port unreachable otherwise: not a black hole; the
//!   ICMP answer to a pod's bridged TCP SYN was seen lost with br_netfilter), or drop them when a `Local` policy has none
//!   on this node, as kube-proxy does.
//! - Endpoints are the ready ones; serving terminating ones only when none is ready.
//!
//! The result is a [`Model`], not text: per Service, the chains with their rules, the
//! affinity sets and the map elements that lead to its chains. [`Model::table`] writes the
//! whole table (the first sync and every full resync); [`crate::diff::diff`] writes only
//! what changed between two models (every other sync).
//!
//! Each family is a table of its own, rendered alike ([`Family`]): `ip keelson-proxy` of
//! the IPv4 ClusterIPs, node addresses and IPv4 EndpointSlices, and on a dual-stack node
//! `ip6 keelson-proxy` of the IPv6 ones.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt::Write;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Service, ServicePort};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};

pub const TABLE: &str = "keelson-proxy";

/// The nftables family a table is of, and with it the address family it serves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// `ip`: IPv4.
    #[default]
    Ip,
    /// `ip6`: IPv6.
    Ip6,
}

impl Family {
    pub const ALL: [Family; 2] = [Family::Ip, Family::Ip6];

    /// The nft family keyword (also the address match: `ip saddr`, `ip6 saddr`).
    pub fn nft(self) -> &'static str {
        match self {
            Family::Ip => "ip",
            Family::Ip6 => "ip6",
        }
    }

    fn addr_type(self) -> &'static str {
        match self {
            Family::Ip => "ipv4_addr",
            Family::Ip6 => "ipv6_addr",
        }
    }

    /// The EndpointSlice `addressType` of this family.
    pub fn address_type(self) -> &'static str {
        match self {
            Family::Ip => "IPv4",
            Family::Ip6 => "IPv6",
        }
    }

    pub fn holds(self, ip: &IpAddr) -> bool {
        ip.is_ipv6() == (self == Family::Ip6)
    }

    /// Whether a CIDR (as text) is of this family.
    fn holds_cidr(self, cidr: &str) -> bool {
        cidr.contains(':') == (self == Family::Ip6)
    }

    /// `addr:port` as a DNAT target (an IPv6 address in brackets).
    fn dnat_target(self, ip: &IpAddr, port: i32) -> String {
        match ip {
            IpAddr::V6(v6) => format!("[{v6}]:{port}"),
            IpAddr::V4(v4) => format!("{v4}:{port}"),
        }
    }

    /// The family of a table's text, from its first line (`table ip6 …`).
    fn of_table(text: &str) -> Family {
        if text.starts_with("table ip6 ") {
            Family::Ip6
        } else {
            Family::Ip
        }
    }
}
/// The mark asking postrouting to masquerade (kube-proxy's).
pub const MASQUERADE_MARK: u32 = 0x4000;
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The default ClientIP affinity timeout (3 hours), as Kubernetes'.
const DEFAULT_AFFINITY_SECONDS: i32 = 10800;

/// What the proxy knows of its node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeInfo {
    pub name: String,
    /// The addresses NodePorts are served on (an IPv6 one makes the node dual-stack: its
    /// `ip6` table is rendered too).
    pub addresses: Vec<IpAddr>,
    /// Sources inside these ranges (the node's pods) are not masqueraded on the way to a
    /// ClusterIP; every other source is, so replies come back through this node.
    pub pod_cidrs: Vec<String>,
    /// The node's own cluster DNS server: the `kube-system/kube-dns` Service is sent there
    /// instead of to endpoints, so every node answers its pods' queries itself.
    pub dns: Option<Ipv4Addr>,
}

/// The Service whose traffic goes to the node's own DNS server.
pub const DNS_SERVICE: (&str, &str) = ("kube-system", "kube-dns");

/// One endpoint of a Service port, as the proxy uses it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Target {
    pub ip: IpAddr,
    pub port: i32,
    pub local: bool,
}

/// Whether an endpoint can take traffic: ready ones, or failing those, serving ones
/// that are terminating (the API's nil conditions read as ready and serving).
fn ready(e: &Endpoint) -> bool {
    e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true)
}

fn serving_terminating(e: &Endpoint) -> bool {
    let c = e.conditions.as_ref();
    let serving = c.and_then(|c| c.serving).unwrap_or_else(|| ready(e));
    serving && c.and_then(|c| c.terminating).unwrap_or(false)
}

fn proto(p: &ServicePort) -> &str {
    p.protocol.as_deref().unwrap_or("TCP")
}

fn nft_proto(p: &ServicePort) -> Option<&'static str> {
    match proto(p) {
        "TCP" => Some("tcp"),
        "UDP" => Some("udp"),
        "SCTP" => Some("sctp"),
        _ => None,
    }
}

/// The endpoints of a Service port across its slices of `family`, usable ones only: the
/// ready endpoints, or if none is ready the serving terminating ones. Sorted, without
/// duplicates.
pub fn targets(svc: &Service, port: &ServicePort, slices: &[&EndpointSlice], node: &str, family: Family) -> Vec<Target> {
    let name = svc.metadata.name.as_deref();
    let ns = svc.metadata.namespace.as_deref();
    let port_name = port.name.as_deref().unwrap_or("");
    let mut ready_set = BTreeSet::new();
    let mut fallback = BTreeSet::new();
    for s in slices.iter().filter(|s| s.address_type == family.address_type() && s.metadata.namespace.as_deref() == ns) {
        if s.metadata.labels.as_ref().and_then(|l| l.get(SERVICE_NAME_LABEL)).map(String::as_str) != name {
            continue;
        }
        let Some(number) = s.ports.iter().flatten().find(|p| p.name.as_deref().unwrap_or("") == port_name && p.protocol.as_deref().unwrap_or("TCP") == proto(port)).and_then(|p| p.port) else {
            continue;
        };
        for e in &s.endpoints {
            let Some(ip) = e.addresses.first().and_then(|a| a.parse::<IpAddr>().ok()).filter(|ip| family.holds(ip)) else { continue };
            let t = Target { ip, port: number, local: e.node_name.as_deref() == Some(node) };
            if ready(e) {
                ready_set.insert(t);
            } else if serving_terminating(e) {
                fallback.insert(t);
            }
        }
    }
    let chosen = if ready_set.is_empty() { fallback } else { ready_set };
    // One address may appear in two slices while a pod moves between them.
    let mut seen = BTreeSet::new();
    chosen.into_iter().filter(|t| seen.insert((t.ip, t.port))).collect()
}

fn set_elements<I: IntoIterator<Item = String>>(out: &mut String, items: I) {
    let items: Vec<String> = items.into_iter().collect();
    if !items.is_empty() {
        let _ = writeln!(out, "\t\telements = {{ {} }}", items.join(", "));
    }
}

fn affinity_set(chain: &str) -> String {
    format!("affinity-{}", &chain[3..])
}

/// One of the table's four dispatch maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Map {
    /// `daddr . proto . dport` → the Service port's chain (ClusterIPs, externalIPs, ingress IPs).
    ServiceIps,
    /// `proto . dport` on the node's addresses → the external chain (NodePorts).
    ServiceNodeports,
    /// `daddr . proto . dport` → reject or drop (a port without usable endpoints).
    NoEndpointServices,
    /// `proto . dport` → reject or drop (a NodePort without usable endpoints).
    NoEndpointNodeports,
}

impl Map {
    pub const ALL: [Map; 4] = [Map::ServiceIps, Map::ServiceNodeports, Map::NoEndpointServices, Map::NoEndpointNodeports];

    pub fn name(self) -> &'static str {
        match self {
            Map::ServiceIps => "service-ips",
            Map::ServiceNodeports => "service-nodeports",
            Map::NoEndpointServices => "no-endpoint-services",
            Map::NoEndpointNodeports => "no-endpoint-nodeports",
        }
    }

    fn key_type(self, family: Family) -> String {
        match self {
            Map::ServiceIps | Map::NoEndpointServices => format!("{} . inet_proto . inet_service", family.addr_type()),
            Map::ServiceNodeports | Map::NoEndpointNodeports => "inet_proto . inet_service".into(),
        }
    }
}

/// Everything one Service contributes to the table. Chains jump only to chains of the
/// same Service (and to the table's fixed chains), and sets are used only by them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceRules {
    /// Chain name → its rules, in order (`svc-`, `ext-`, `ep-` chains of every port).
    pub chains: BTreeMap<String, Vec<String>>,
    /// Affinity set name → its declaration lines (`type …`, `flags …`, `timeout …`).
    pub sets: BTreeMap<String, Vec<String>>,
    /// (map, key) → verdict. A key belongs to one Service only (the first by namespace
    /// and name when two claim it).
    pub elements: BTreeMap<(Map, String), String>,
}

/// The rendered table as data: what a full sync writes and what a diff compares.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Model {
    /// The table's family.
    pub family: Family,
    /// The node's addresses of that family (elements of `nodeport-ips`).
    pub node_ips: BTreeSet<IpAddr>,
    /// `<namespace>/<name>` → that Service's rules (shared with the [`RenderCache`] and
    /// the previous model while the Service is unchanged).
    pub services: BTreeMap<String, Arc<ServiceRules>>,
}

/// The chain that spreads over `targets` (after ClientIP affinity), or None without targets.
fn balance(r: &mut ServiceRules, f: Family, name: &str, prefix: &str, targets: &[Target], affinity: Option<i32>, masquerade_unless: Option<&[String]>) {
    let mut body = Vec::new();
    if let Some(cidrs) = masquerade_unless {
        if cidrs.is_empty() {
            body.push("jump mark-for-masquerade".to_string());
        } else {
            body.push(format!("{} saddr != {{ {} }} jump mark-for-masquerade", f.nft(), cidrs.join(", ")));
        }
    }
    let eps: Vec<String> = targets.iter().map(|t| ep_chain(prefix, t)).collect();
    if affinity.is_some() {
        for ep in &eps {
            body.push(format!("{} saddr @{} goto {ep}", f.nft(), affinity_set(ep)));
        }
    }
    if eps.len() == 1 {
        body.push(format!("goto {}", eps[0]));
    } else {
        let entries: Vec<String> = eps.iter().enumerate().map(|(i, ep)| format!("{i} : goto {ep}")).collect();
        body.push(format!("numgen random mod {} vmap {{ {} }}", eps.len(), entries.join(", ")));
    }
    r.chains.insert(name.to_string(), body);
}

/// The name of an endpoint's chain: `ep-<prefix>/<ip>/<port>`, an IPv6 address with its
/// colons as dashes (nft names hold no colon).
fn ep_chain(prefix: &str, t: &Target) -> String {
    format!("ep-{prefix}/{}/{}", t.ip.to_string().replace(':', "-"), t.port)
}

fn endpoint_chain(r: &mut ServiceRules, f: Family, ep: &str, t: &Target, affinity: Option<i32>, l4: &str) {
    if r.chains.contains_key(ep) {
        return;
    }
    let mut body = vec![format!("{} saddr {} jump mark-for-masquerade", f.nft(), t.ip)];
    if let Some(timeout) = affinity {
        let set = affinity_set(ep);
        r.sets.insert(set.clone(), vec![format!("type {}", f.addr_type()), "flags dynamic,timeout".into(), format!("timeout {timeout}s")]);
        body.push(format!("update @{set} {{ {} saddr }}", f.nft()));
    }
    body.push(format!("meta l4proto {l4} dnat to {}", f.dnat_target(&t.ip, t.port)));
    r.chains.insert(ep.to_string(), body);
}

fn element(r: &mut ServiceRules, map: Map, key: String, verdict: String) {
    r.elements.entry((map, key)).or_insert(verdict);
}

fn render_port(r: &mut ServiceRules, f: Family, svc: &Service, port: &ServicePort, slices: &[&EndpointSlice], node: &NodeInfo) {
    let Some(spec) = svc.spec.as_ref() else { return };
    let Some(l4) = nft_proto(port) else { return };
    let ns = svc.metadata.namespace.as_deref().unwrap_or("default");
    let name = svc.metadata.name.as_deref().unwrap_or("");
    let prefix = format!("{ns}/{name}/{l4}/{}", port.port);
    let svc_chain = format!("svc-{prefix}");
    let ext_chain = format!("ext-{prefix}");
    let affinity = (spec.session_affinity.as_deref() == Some("ClientIP")).then(|| {
        spec.session_affinity_config.as_ref().and_then(|c| c.client_ip.as_ref()).and_then(|c| c.timeout_seconds).unwrap_or(DEFAULT_AFFINITY_SECONDS)
    });
    let all = match node.dns {
        Some(ip) if (ns, name) == DNS_SERVICE && f == Family::Ip => vec![Target { ip: ip.into(), port: 53, local: true }],
        _ => targets(svc, port, slices, &node.name, f),
    };
    let internal_local = spec.internal_traffic_policy.as_deref() == Some("Local");
    let external_local = spec.external_traffic_policy.as_deref() == Some("Local");
    let internal: Vec<Target> = if internal_local { all.iter().filter(|t| t.local).cloned().collect() } else { all.clone() };
    let external: Vec<Target> = if external_local { all.iter().filter(|t| t.local).cloned().collect() } else { all.clone() };

    let pod_cidrs: Vec<String> = node.pod_cidrs.iter().filter(|c| f.holds_cidr(c)).cloned().collect();
    let of_family = |ip: &String| ip.parse::<IpAddr>().ok().filter(|ip| f.holds(ip));
    let mut cluster_ips: Vec<IpAddr> = spec.cluster_ips.iter().flatten().chain(spec.cluster_ip.iter()).filter_map(of_family).collect();
    cluster_ips.sort();
    cluster_ips.dedup();
    let mut external_ips: Vec<IpAddr> = spec.external_ips.iter().flatten().filter_map(of_family).collect();
    if spec.type_.as_deref() == Some("LoadBalancer") {
        let ingress = svc.status.as_ref().and_then(|s| s.load_balancer.as_ref()).and_then(|l| l.ingress.as_ref());
        external_ips.extend(ingress.iter().flat_map(|i| i.iter()).filter_map(|i| i.ip.as_ref().and_then(of_family)));
    }
    external_ips.sort();
    external_ips.dedup();
    let node_port = port.node_port.filter(|_| matches!(spec.type_.as_deref(), Some("NodePort" | "LoadBalancer")));
    let has_external = node_port.is_some() || !external_ips.is_empty();

    // Without usable endpoints anywhere: reject; with a Local policy and none here: drop.
    let verdict = |t: &[Target]| if all.is_empty() { Some("goto reject-chain") } else if t.is_empty() { Some("drop") } else { None };
    let ip_key = |ip: &IpAddr| format!("{ip} . {l4} . {}", port.port);
    if let Some(v) = verdict(&internal) {
        for ip in &cluster_ips {
            element(r, Map::NoEndpointServices, ip_key(ip), v.to_string());
        }
    } else {
        balance(r, f, &svc_chain, &prefix, &internal, affinity, Some(&pod_cidrs));
        for ip in &cluster_ips {
            element(r, Map::ServiceIps, ip_key(ip), format!("goto {svc_chain}"));
        }
    }
    // External traffic from this node's pods or from the node itself is the cluster's
    // own: with a Local policy it goes to every endpoint, as it would through the
    // ClusterIP, instead of being dropped where no endpoint is local.
    let short_circuit = has_external && external_local && !all.is_empty();
    if short_circuit {
        let cluster_chain = if internal_local {
            let chain = format!("cluster-{prefix}");
            balance(r, f, &chain, &prefix, &all, affinity, Some(&pod_cidrs));
            chain
        } else {
            svc_chain.clone()
        };
        if external.is_empty() {
            r.chains.insert(ext_chain.clone(), vec!["drop".to_string()]);
        } else {
            balance(r, f, &ext_chain, &prefix, &external, affinity, None);
        }
        let mut first = Vec::new();
        if !pod_cidrs.is_empty() {
            first.push(format!("{} saddr {{ {} }} goto {cluster_chain}", f.nft(), pod_cidrs.join(", ")));
        }
        first.push("fib saddr type local jump mark-for-masquerade".to_string());
        first.push(format!("fib saddr type local goto {cluster_chain}"));
        r.chains.entry(ext_chain.clone()).or_default().splice(0..0, first);
        for ip in &external_ips {
            element(r, Map::ServiceIps, ip_key(ip), format!("goto {ext_chain}"));
        }
        if let Some(np) = node_port {
            element(r, Map::ServiceNodeports, format!("{l4} . {np}"), format!("goto {ext_chain}"));
        }
    } else if has_external {
        if let Some(v) = verdict(&external) {
            for ip in &external_ips {
                element(r, Map::NoEndpointServices, ip_key(ip), v.to_string());
            }
            if let Some(np) = node_port {
                element(r, Map::NoEndpointNodeports, format!("{l4} . {np}"), v.to_string());
            }
        } else {
            let ext_targets = if external_local { &external } else { &all };
            // Cluster policy: everything external is masqueraded (the source is lost, the
            // reply comes back here). Local: the source is kept, only local endpoints.
            balance(r, f, &ext_chain, &prefix, ext_targets, affinity, if external_local { None } else { Some(&[]) });
            for ip in &external_ips {
                element(r, Map::ServiceIps, ip_key(ip), format!("goto {ext_chain}"));
            }
            if let Some(np) = node_port {
                element(r, Map::ServiceNodeports, format!("{l4} . {np}"), format!("goto {ext_chain}"));
            }
        }
    }
    let mut used: Vec<&Target> = Vec::new();
    if verdict(&internal).is_none() {
        used.extend(internal.iter());
    }
    if short_circuit {
        used.extend(all.iter());
    } else if has_external && verdict(&external).is_none() {
        used.extend(if external_local { external.iter() } else { all.iter() });
    }
    for t in used {
        endpoint_chain(r, f, &ep_chain(&prefix, t), t, affinity, l4);
    }
}

/// A UDP flow a Service port may have sent to an endpoint: (virtual IP, port, endpoint IP).
pub type UdpFlow = (IpAddr, u16, IpAddr);

/// The UDP flows the rules allow: every ClusterIP, external and ingress IP of a UDP
/// Service port paired with each endpoint it may reach. Those that disappear between two
/// syncs have their conntrack entries flushed, or a UDP client would keep talking to a gone
/// endpoint (conntrack keeps UDP "connections" while packets flow).
pub fn udp_flows(services: &[&Service], slices: &[&EndpointSlice], node: &NodeInfo) -> BTreeSet<UdpFlow> {
    let mut out = BTreeSet::new();
    for svc in services.iter().copied().filter(|s| proxied(s)) {
        let Some(spec) = svc.spec.as_ref() else { continue };
        let mut ips: Vec<IpAddr> = spec.cluster_ips.iter().flatten().chain(spec.cluster_ip.iter()).chain(spec.external_ips.iter().flatten()).filter_map(|ip| ip.parse().ok()).collect();
        let ingress = svc.status.as_ref().and_then(|s| s.load_balancer.as_ref()).and_then(|l| l.ingress.as_ref());
        ips.extend(ingress.iter().flat_map(|i| i.iter()).filter_map(|i| i.ip.as_deref()?.parse::<IpAddr>().ok()));
        for port in spec.ports.iter().flatten().filter(|p| proto(p) == "UDP") {
            let Ok(number) = u16::try_from(port.port) else { continue };
            for f in Family::ALL {
                for t in targets(svc, port, slices, &node.name, f) {
                    out.extend(ips.iter().filter(|ip| f.holds(ip)).map(|ip| (*ip, number, t.ip)));
                }
            }
        }
    }
    out
}

/// Whether the proxy serves this Service at all (ExternalName and headless Services have
/// no virtual IP to rewrite).
pub fn proxied(svc: &Service) -> bool {
    let Some(spec) = svc.spec.as_ref() else { return false };
    spec.type_.as_deref() != Some("ExternalName") && spec.cluster_ip.as_deref().is_some_and(|ip| ip != "None" && !ip.is_empty())
}

/// The node's rules. Deterministic: the same input renders the same model whatever the
/// order of services and slices, so an unchanged ruleset need not be applied again.
pub fn render(services: &[&Service], slices: &[&EndpointSlice], node: &NodeInfo) -> Model {
    render_family(services, slices, node, Family::Ip)
}

/// [`render`] of the table of `family`.
pub fn render_family(services: &[&Service], slices: &[&EndpointSlice], node: &NodeInfo, family: Family) -> Model {
    let by_key = proxied_by_key(services.iter().copied());
    let slices_of = slices_by_service(slices.iter().copied());
    let rendered = by_key.iter().map(|((ns, name), svc)| {
        let slices = slices_of.get(&(ns.as_str(), name.as_str())).map(Vec::as_slice).unwrap_or(&[]);
        (format!("{ns}/{name}"), Arc::new(render_service(svc, slices, node, family)))
    });
    assemble(node, family, rendered.collect())
}

/// Per-Service rules kept from one sync to the next, reused while a Service and its
/// slices are the very same objects: a reflector's store hands out the same `Arc` until
/// the object changes, so a sync renders only the Services that changed.
#[derive(Debug, Default)]
pub struct RenderCache {
    /// The family this cache renders (IPv4 by default; see [`RenderCache::of`]).
    family: Family,
    node: Option<NodeInfo>,
    entries: HashMap<String, CacheEntry>,
}

impl RenderCache {
    /// A cache rendering the table of `family`.
    pub fn of(family: Family) -> Self {
        RenderCache { family, ..Default::default() }
    }
}

#[derive(Debug)]
struct CacheEntry {
    service: Arc<Service>,
    slices: Vec<Arc<EndpointSlice>>,
    rules: Arc<ServiceRules>,
}

/// [`render`] over shared objects, rendering again only the Services whose object or
/// slices are not those of the last call. Gives exactly what [`render`] gives.
pub fn render_cached(cache: &mut RenderCache, services: &[Arc<Service>], slices: &[Arc<EndpointSlice>], node: &NodeInfo) -> Model {
    if cache.node.as_ref() != Some(node) {
        cache.entries.clear();
        cache.node = Some(node.clone());
    }
    let by_key = proxied_by_key(services.iter());
    let mut slices_of: BTreeMap<(&str, &str), Vec<&Arc<EndpointSlice>>> = BTreeMap::new();
    for s in slices {
        if let Some(svc) = s.metadata.labels.as_ref().and_then(|l| l.get(SERVICE_NAME_LABEL)) {
            slices_of.entry((s.metadata.namespace.as_deref().unwrap_or(""), svc.as_str())).or_default().push(s);
        }
    }
    let mut entries = HashMap::with_capacity(by_key.len());
    let mut rendered = Vec::with_capacity(by_key.len());
    for ((ns, name), svc) in &by_key {
        let key = format!("{ns}/{name}");
        let mut mine: Vec<Arc<EndpointSlice>> = slices_of.get(&(ns.as_str(), name.as_str())).map(|v| v.iter().map(|s| Arc::clone(s)).collect()).unwrap_or_default();
        mine.sort_by_key(|s| Arc::as_ptr(s) as usize);
        let entry = match cache.entries.remove(&key) {
            Some(e) if Arc::ptr_eq(&e.service, svc) && e.slices.len() == mine.len() && e.slices.iter().zip(&mine).all(|(a, b)| Arc::ptr_eq(a, b)) => e,
            _ => {
                let refs: Vec<&EndpointSlice> = mine.iter().map(|s| s.as_ref()).collect();
                CacheEntry { service: Arc::clone(svc), rules: Arc::new(render_service(svc, &refs, node, cache.family)), slices: mine }
            }
        };
        rendered.push((key.clone(), Arc::clone(&entry.rules)));
        entries.insert(key, entry);
    }
    cache.entries = entries;
    assemble(node, cache.family, rendered)
}

/// The proxied Services by (namespace, name).
fn proxied_by_key<'a, S: std::borrow::Borrow<Service> + 'a>(services: impl Iterator<Item = &'a S>) -> BTreeMap<(String, String), &'a S> {
    let mut by_key = BTreeMap::new();
    for s in services.filter(|s| proxied((*s).borrow())) {
        let m = &(*s).borrow().metadata;
        by_key.insert((m.namespace.clone().unwrap_or_default(), m.name.clone().unwrap_or_default()), s);
    }
    by_key
}

fn slices_by_service<'a>(slices: impl Iterator<Item = &'a EndpointSlice>) -> BTreeMap<(&'a str, &'a str), Vec<&'a EndpointSlice>> {
    let mut slices_of: BTreeMap<(&str, &str), Vec<&EndpointSlice>> = BTreeMap::new();
    for s in slices {
        if let Some(svc) = s.metadata.labels.as_ref().and_then(|l| l.get(SERVICE_NAME_LABEL)) {
            slices_of.entry((s.metadata.namespace.as_deref().unwrap_or(""), svc.as_str())).or_default().push(s);
        }
    }
    slices_of
}

/// The model of Services rendered one by one, in key order. Two Services may claim one
/// key (the same externalIP and port): the first keeps it.
fn assemble(node: &NodeInfo, family: Family, mut rendered: Vec<(String, Arc<ServiceRules>)>) -> Model {
    let mut lost: Vec<(usize, Vec<(Map, String)>)> = Vec::new();
    {
        let mut claimed: HashSet<&(Map, String)> = HashSet::new();
        for (i, (_, r)) in rendered.iter().enumerate() {
            let taken: Vec<(Map, String)> = r.elements.keys().filter(|k| !claimed.insert(*k)).cloned().collect();
            if !taken.is_empty() {
                lost.push((i, taken));
            }
        }
    }
    for (i, taken) in lost {
        let elements = &mut Arc::make_mut(&mut rendered[i].1).elements;
        for k in taken {
            elements.remove(&k);
        }
    }
    Model { family, node_ips: node.addresses.iter().copied().filter(|ip| family.holds(ip)).collect(), services: rendered.into_iter().collect() }
}

/// One Service's rules (its slices already picked out).
pub fn render_service(svc: &Service, slices: &[&EndpointSlice], node: &NodeInfo, family: Family) -> ServiceRules {
    let mut r = ServiceRules::default();
    let mut ports = svc.spec.as_ref().and_then(|s| s.ports.clone()).unwrap_or_default();
    ports.sort_by_key(|p| (p.port, proto(p).to_string()));
    for port in &ports {
        render_port(&mut r, family, svc, port, slices, node);
    }
    r
}

/// The table's fixed chains. nft 1.0.6 refuses `priority dstnat` on the output hook: numbers.
const BASE_CHAINS: &str = concat!(
    "\tchain filter-input {\n\t\ttype filter hook input priority -110; policy accept;\n\t\tct state new jump endpoints-check\n\t}\n",
    "\tchain filter-forward {\n\t\ttype filter hook forward priority -110; policy accept;\n\t\tct state new jump endpoints-check\n\t}\n",
    "\tchain filter-output {\n\t\ttype filter hook output priority -110; policy accept;\n\t\tct state new jump endpoints-check\n\t}\n",
    "\tchain endpoints-check {\n\t\tip daddr . meta l4proto . th dport vmap @no-endpoint-services\n\t\tip daddr @nodeport-ips meta l4proto . th dport vmap @no-endpoint-nodeports\n\t}\n",
    "\tchain reject-chain {\n\t\tmeta l4proto tcp reject with tcp reset\n\t\treject\n\t}\n",
    "\tchain nat-prerouting {\n\t\ttype nat hook prerouting priority -100; policy accept;\n\t\tjump services\n\t}\n",
    "\tchain nat-output {\n\t\ttype nat hook output priority -100; policy accept;\n\t\tjump services\n\t}\n",
    "\tchain nat-postrouting {\n\t\ttype nat hook postrouting priority 100; policy accept;\n\t\tjump masquerading\n\t}\n",
    "\tchain masquerading {\n\t\tmeta mark & 0x4000 == 0 return\n\t\tmeta mark set meta mark xor 0x4000\n\t\tmasquerade fully-random\n\t}\n",
    "\tchain mark-for-masquerade {\n\t\tmeta mark set meta mark | 0x4000\n\t}\n",
    "\tchain services {\n\t\tip daddr . meta l4proto . th dport vmap @service-ips\n\t\tip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports\n\t}\n",
);

impl Model {
    /// The whole table, as `nft -f` reads it (the body of a full sync).
    pub fn table(&self) -> String {
        let mut out = String::new();
        let f = self.family;
        let _ = writeln!(out, "table {} {TABLE} {{", f.nft());
        for map in Map::ALL {
            let _ = writeln!(out, "\tmap {} {{\n\t\ttype {} : verdict", map.name(), map.key_type(f));
            let elements = self.services.values().flat_map(|s| s.elements.iter()).filter(|((m, _), _)| *m == map);
            set_elements(&mut out, elements.map(|((_, k), v)| format!("{k} : {v}")));
            out.push_str("\t}\n");
        }
        let _ = writeln!(out, "\tset nodeport-ips {{\n\t\ttype {}", f.addr_type());
        set_elements(&mut out, self.node_ips.iter().map(|a| a.to_string()));
        out.push_str("\t}\n");
        for (name, decl) in self.services.values().flat_map(|s| s.sets.iter()) {
            let _ = writeln!(out, "\tset {name} {{");
            for line in decl {
                let _ = writeln!(out, "\t\t{line}");
            }
            out.push_str("\t}\n");
        }
        match f {
            Family::Ip => out.push_str(BASE_CHAINS),
            Family::Ip6 => out.push_str(&BASE_CHAINS.replace("ip daddr", "ip6 daddr")),
        }
        for (name, rules) in self.services.values().flat_map(|s| s.chains.iter()) {
            let _ = writeln!(out, "\tchain {name} {{");
            for rule in rules {
                let _ = writeln!(out, "\t\t{rule}");
            }
            out.push_str("\t}\n");
        }
        out.push_str("}\n");
        out
    }
}

/// The `nft -f` script replacing the table in one transaction: the table is declared (so
/// the delete cannot fail on a first run), deleted and written anew. No other table is
/// named; the family is the one the table's text declares.
pub fn replace_script(table: &str) -> String {
    format!("{}{table}", delete_script(Family::of_table(table)))
}

/// The script removing the table of `family` (when the proxy stops, or a node's IPv6
/// table when it is no longer dual-stack).
pub fn delete_script(family: Family) -> String {
    let f = family.nft();
    format!("table {f} {TABLE}\ndelete table {f} {TABLE}\n")
}

#[cfg(test)]
#[path = "render_tests.rs"]
pub(crate) mod tests;
