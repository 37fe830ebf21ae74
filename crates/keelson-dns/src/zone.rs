//! The records of `cluster.local`, as a pure function of the Services and their
//! EndpointSlices (CoreDNS' kubernetes plugin's schema):
//!
//! - `<svc>.<ns>.svc.<domain>`: A/AAAA of the ClusterIPs; for a headless Service, of
//!   every ready endpoint; an ExternalName Service is a CNAME;
//! - `_<port>._<proto>.<svc>.<ns>.svc.<domain>`: SRV for each named port (headless: one
//!   per ready endpoint, naming the endpoint);
//! - `<hostname>.<svc>.<ns>.svc.<domain>` for endpoints with a hostname (StatefulSet
//!   pods, pods with hostname and subdomain), otherwise `<a-b-c-d>.<svc>.<ns>.svc` for a
//!   headless Service's endpoints;
//! - `<a-b-c-d>.<ns>.pod.<domain>` is answered from the name itself (see `answer`).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// The data of one name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Data {
    Ip(IpAddr),
    /// SRV: port and target name (absolute, without the final dot).
    Srv { port: u16, target: String },
    /// CNAME target (absolute, without the final dot).
    Cname(String),
}

/// Every name of the cluster domain with its records. Names are lowercase, without the
/// final dot.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Zone {
    pub domain: String,
    pub names: BTreeMap<String, BTreeSet<Data>>,
    /// Names that exist only because a name below them does (`svc.cluster.local`,
    /// `<ns>.svc.cluster.local`): NODATA rather than NXDOMAIN.
    pub interior: BTreeSet<String>,
}

impl Zone {
    fn add(&mut self, name: String, data: Data) {
        let mut parent = name.as_str();
        while let Some((_, rest)) = parent.split_once('.') {
            if rest.len() < self.domain.len() {
                break;
            }
            self.interior.insert(rest.to_string());
            parent = rest;
        }
        self.names.entry(name).or_default().insert(data);
    }

    /// Whether `name` exists at all (with some records, or as an interior name).
    pub fn exists(&self, name: &str) -> bool {
        self.names.contains_key(name) || self.interior.contains(name) || name == self.domain
    }
}

fn ready(e: &k8s_openapi::api::discovery::v1::Endpoint) -> bool {
    e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true)
}

fn dashed(ip: &IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string().replace('.', "-"),
        IpAddr::V6(v6) => v6.to_string().replace(':', "-"),
    }
}

/// Builds the zone of `domain` (e.g. `cluster.local`).
pub fn build(domain: &str, services: &[&Service], slices: &[&EndpointSlice]) -> Zone {
    let domain = domain.trim_end_matches('.').to_ascii_lowercase();
    let mut zone = Zone { domain: domain.clone(), ..Default::default() };
    let mut slices_of: BTreeMap<(&str, &str), Vec<&EndpointSlice>> = BTreeMap::new();
    for s in slices {
        if let Some(svc) = s.metadata.labels.as_ref().and_then(|l| l.get(SERVICE_NAME_LABEL)) {
            slices_of.entry((s.metadata.namespace.as_deref().unwrap_or(""), svc.as_str())).or_default().push(s);
        }
    }
    for svc in services {
        let (Some(ns), Some(name), Some(spec)) = (svc.metadata.namespace.as_deref(), svc.metadata.name.as_deref(), svc.spec.as_ref()) else { continue };
        let base = format!("{name}.{ns}.svc.{domain}").to_ascii_lowercase();
        if spec.type_.as_deref() == Some("ExternalName") {
            if let Some(target) = spec.external_name.as_deref() {
                zone.add(base, Data::Cname(target.trim_end_matches('.').to_ascii_lowercase()));
            }
            continue;
        }
        let headless = spec.cluster_ip.as_deref() == Some("None");
        let ports = spec.ports.clone().unwrap_or_default();
        if !headless {
            for ip in spec.cluster_ips.iter().flatten().chain(spec.cluster_ip.iter()).filter_map(|ip| ip.parse::<IpAddr>().ok()) {
                zone.add(base.clone(), Data::Ip(ip));
            }
            for p in &ports {
                let (Some(pname), Ok(port)) = (p.name.as_deref().filter(|n| !n.is_empty()), u16::try_from(p.port)) else { continue };
                let proto = p.protocol.as_deref().unwrap_or("TCP").to_ascii_lowercase();
                zone.add(format!("_{pname}._{proto}.{base}").to_ascii_lowercase(), Data::Srv { port, target: base.clone() });
            }
            // The Service name exists even before it has an address (a ClusterIP being
            // allocated): answer NODATA, not NXDOMAIN.
            zone.names.entry(base.clone()).or_default();
            continue;
        }
        zone.names.entry(base.clone()).or_default();
        for slice in slices_of.get(&(ns, name)).into_iter().flatten() {
            for e in slice.endpoints.iter().filter(|e| ready(e)) {
                for ip in e.addresses.iter().filter_map(|a| a.parse::<IpAddr>().ok()) {
                    zone.add(base.clone(), Data::Ip(ip));
                    let label = e.hostname.clone().unwrap_or_else(|| dashed(&ip));
                    let host = format!("{label}.{base}").to_ascii_lowercase();
                    zone.add(host.clone(), Data::Ip(ip));
                    for p in slice.ports.iter().flatten() {
                        let (Some(pname), Some(Ok(port))) = (p.name.as_deref().filter(|n| !n.is_empty()), p.port.map(u16::try_from)) else { continue };
                        let proto = p.protocol.as_deref().unwrap_or("TCP").to_ascii_lowercase();
                        zone.add(format!("_{pname}._{proto}.{base}").to_ascii_lowercase(), Data::Srv { port, target: host.clone() });
                    }
                }
            }
        }
    }
    zone
}
