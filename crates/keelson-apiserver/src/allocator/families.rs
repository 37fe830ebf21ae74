//! A Service's IP families, as Kubernetes resolves them on a dual-stack cluster whose
//! primary family is IPv4: `spec.ipFamilyPolicy`, `spec.ipFamilies` and
//! `spec.clusterIPs` are checked against each other and completed. Pure: the allocator
//! then picks an address for every family that has none asked for.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde_json::Value;

use crate::error::Cause;

/// The IPv4 service CIDR: 10.43.0.0/16. `.0` is the network, `.1` the `kubernetes`
/// Service.
pub const SERVICE_CIDR: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 43, 0, 0), 16);
/// The IPv6 service CIDR: fd43::/112 (as many addresses as the IPv4 one).
pub const SERVICE_CIDR_V6: (Ipv6Addr, u8) = (Ipv6Addr::new(0xfd43, 0, 0, 0, 0, 0, 0, 0), 112);

/// An IP family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub fn of(ip: &IpAddr) -> Family {
        if ip.is_ipv4() {
            Family::V4
        } else {
            Family::V6
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        }
    }

    fn other(self) -> Family {
        match self {
            Family::V4 => Family::V6,
            Family::V6 => Family::V4,
        }
    }

    fn parse(s: &str) -> Option<Family> {
        match s {
            "IPv4" => Some(Family::V4),
            "IPv6" => Some(Family::V6),
            _ => None,
        }
    }

    /// This family's service CIDR, as text.
    pub fn cidr(self) -> String {
        match self {
            Family::V4 => format!("{}/{}", SERVICE_CIDR.0, SERVICE_CIDR.1),
            Family::V6 => format!("{}/{}", SERVICE_CIDR_V6.0, SERVICE_CIDR_V6.1),
        }
    }
}

/// The cluster's primary family: a Service that names none gets it.
pub const PRIMARY: Family = Family::V4;

/// Whether `ip` is in its family's service CIDR.
pub fn in_service_cidr(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V4(ip) => {
            let (net, bits) = SERVICE_CIDR;
            let mask = u32::MAX << (32 - bits);
            u32::from(*ip) & mask == u32::from(net) & mask
        }
        IpAddr::V6(ip) => {
            let (net, bits) = SERVICE_CIDR_V6;
            let mask = u128::MAX << (128 - bits);
            u128::from(*ip) & mask == u128::from(net) & mask
        }
    }
}

/// What a Service's families come to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// `SingleStack`, `PreferDualStack` or `RequireDualStack`.
    pub policy: String,
    /// One or two, primary first.
    pub families: Vec<Family>,
    /// Per family, the address asked for (None: to be picked); empty for a headless
    /// Service.
    pub requested: Vec<Option<IpAddr>>,
    pub headless: bool,
}

fn strings(spec: &Value, field: &str) -> Vec<String> {
    spec.get(field).and_then(Value::as_array).into_iter().flatten().map(|v| v.as_str().unwrap_or("").to_string()).collect()
}

/// Resolves the families of a Service's `spec` (not ExternalName).
pub fn resolve(spec: &Value) -> Result<Resolved, Cause> {
    let cluster_ip = spec.get("clusterIP").and_then(Value::as_str).filter(|s| !s.is_empty());
    let mut ips = strings(spec, "clusterIPs");
    match (cluster_ip, ips.first()) {
        (Some(ip), None) => ips = vec![ip.to_string()],
        (Some(ip), Some(first)) if ip != first => return Err(Cause::invalid("spec.clusterIPs[0]", format!("Invalid value: {first:?}: must be the same as spec.clusterIP {ip:?}"))),
        _ => {}
    }
    if ips.len() > 2 {
        return Err(Cause::invalid("spec.clusterIPs", format!("Invalid value: {ips:?}: may hold at most 2 addresses, one of each IP family")));
    }
    let headless = ips.first().is_some_and(|ip| ip == "None");
    let mut ip_families = Vec::new();
    let mut requested = Vec::new();
    if headless {
        if ips.len() > 1 {
            return Err(Cause::invalid("spec.clusterIPs", format!("Invalid value: {ips:?}: a headless Service has the one value \"None\"")));
        }
    } else {
        for (i, s) in ips.iter().enumerate() {
            let field = format!("spec.clusterIPs[{i}]");
            let ip: IpAddr = s.parse().map_err(|_| Cause::invalid(&field, format!("Invalid value: {s:?}: must be a valid IP address")))?;
            let family = Family::of(&ip);
            if !in_service_cidr(&ip) {
                return Err(Cause::invalid(&field, format!("Invalid value: {s:?}: provided IP is not in the valid range. The range of valid IPs is {}", family.cidr())));
            }
            if ip_families.contains(&family) {
                return Err(Cause::invalid(&field, format!("Invalid value: {s:?}: must be of the other IP family than spec.clusterIPs[0]")));
            }
            ip_families.push(family);
            requested.push(Some(ip));
        }
    }
    let named = strings(spec, "ipFamilies");
    if named.len() > 2 {
        return Err(Cause::invalid("spec.ipFamilies", format!("Invalid value: {named:?}: may hold at most 2 families")));
    }
    let mut families = Vec::new();
    for (i, s) in named.iter().enumerate() {
        let field = format!("spec.ipFamilies[{i}]");
        let family = Family::parse(s).ok_or_else(|| Cause { reason: "FieldValueNotSupported", field: field.clone(), message: format!("Unsupported value: {s:?}: supported values: \"IPv4\", \"IPv6\"") })?;
        if families.contains(&family) {
            return Err(Cause { reason: "FieldValueDuplicate", field, message: format!("Duplicate value: {s:?}") });
        }
        if ip_families.get(i).is_some_and(|f| *f != family) {
            return Err(Cause::invalid(field, format!("Invalid value: {s:?}: does not match the IP family of spec.clusterIPs[{i}]")));
        }
        families.push(family);
    }
    for f in ip_families.iter().skip(families.len()) {
        families.push(*f);
    }
    let selectorless = spec.get("selector").and_then(Value::as_object).is_none_or(|m| m.is_empty());
    let policy = match spec.get("ipFamilyPolicy").and_then(Value::as_str) {
        Some(p @ ("SingleStack" | "PreferDualStack" | "RequireDualStack")) => p.to_string(),
        Some(p) => {
            return Err(Cause {
                reason: "FieldValueNotSupported",
                field: "spec.ipFamilyPolicy".into(),
                message: format!("Unsupported value: {p:?}: supported values: \"PreferDualStack\", \"RequireDualStack\", \"SingleStack\""),
            })
        }
        None if ip_families.len() == 2 || (headless && selectorless) => "RequireDualStack".into(),
        None => "SingleStack".into(),
    };
    if policy == "SingleStack" && families.len() == 2 {
        return Err(Cause::invalid("spec.ipFamilyPolicy", "Invalid value: \"SingleStack\": must be RequireDualStack or PreferDualStack when multiple IP families are specified"));
    }
    if families.is_empty() {
        families.push(PRIMARY);
    }
    if policy != "SingleStack" && families.len() == 1 {
        families.push(families[0].other());
    }
    if !headless {
        requested.resize(families.len(), None);
    }
    Ok(Resolved { policy, families, requested, headless })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ok(spec: Value) -> (String, Vec<&'static str>, Vec<Option<String>>) {
        let r = resolve(&spec).unwrap_or_else(|e| panic!("{spec}: {e:?}"));
        (r.policy, r.families.iter().map(|f| f.name()).collect(), r.requested.iter().map(|ip| ip.map(|i| i.to_string())).collect())
    }

    fn err(spec: Value) -> String {
        let e = resolve(&spec).expect_err(&spec.to_string());
        format!("{}: {}", e.field, e.message)
    }

    #[test]
    fn families_default_to_the_primary_and_dual_stack_policies_add_the_other() {
        assert_eq!(ok(json!({"selector": {"a": "b"}})), ("SingleStack".into(), vec!["IPv4"], vec![None]));
        assert_eq!(ok(json!({"ipFamilies": ["IPv6"]})).1, ["IPv6"]);
        assert_eq!(ok(json!({"ipFamilyPolicy": "PreferDualStack"})).1, ["IPv4", "IPv6"]);
        assert_eq!(ok(json!({"ipFamilyPolicy": "RequireDualStack", "ipFamilies": ["IPv6"]})).1, ["IPv6", "IPv4"], "the named family stays first");
        assert_eq!(ok(json!({"ipFamilyPolicy": "PreferDualStack", "ipFamilies": ["IPv6", "IPv4"]})).1, ["IPv6", "IPv4"]);
        // Headless without a selector: dual-stack by default, as Kubernetes.
        let headless = resolve(&json!({"clusterIP": "None"})).unwrap();
        assert!(headless.headless && headless.requested.is_empty());
        assert_eq!((headless.policy.as_str(), headless.families.len()), ("RequireDualStack", 2));
        assert_eq!(ok(json!({"clusterIP": "None", "selector": {"a": "b"}})).0, "SingleStack");
    }

    #[test]
    fn addresses_asked_for_decide_their_families() {
        assert_eq!(ok(json!({"clusterIP": "fd43::a"})), ("SingleStack".into(), vec!["IPv6"], vec![Some("fd43::a".into())]));
        assert_eq!(ok(json!({"clusterIPs": ["10.43.0.9", "fd43::9"]})), ("RequireDualStack".into(), vec!["IPv4", "IPv6"], vec![Some("10.43.0.9".into()), Some("fd43::9".into())]));
        assert_eq!(ok(json!({"clusterIP": "10.43.0.9", "ipFamilyPolicy": "PreferDualStack"})).2, [Some("10.43.0.9".into()), None], "the secondary is picked");
    }

    #[test]
    fn contradictions_are_refused_with_the_field_at_fault() {
        assert!(err(json!({"clusterIP": "10.43.0.9", "clusterIPs": ["10.43.0.8"]})).starts_with("spec.clusterIPs[0]: "));
        assert!(err(json!({"clusterIPs": ["10.43.0.9", "10.43.0.8"]})).contains("other IP family"));
        assert!(err(json!({"clusterIPs": ["fd00::1"]})).ends_with("The range of valid IPs is fd43::/112"));
        assert!(err(json!({"clusterIPs": ["10.43.0.1", "fd43::1", "fd43::2"]})).starts_with("spec.clusterIPs: "));
        assert_eq!(err(json!({"ipFamilies": ["IPv4", "IPv4"]})), "spec.ipFamilies[1]: Duplicate value: \"IPv4\"");
        assert!(err(json!({"ipFamilies": ["IPv7"]})).starts_with("spec.ipFamilies[0]: Unsupported value: \"IPv7\""));
        assert!(err(json!({"clusterIP": "10.43.0.9", "ipFamilies": ["IPv6"]})).contains("does not match the IP family of spec.clusterIPs[0]"));
        assert!(err(json!({"ipFamilies": ["IPv4", "IPv6"]})).starts_with("spec.ipFamilyPolicy: Invalid value: \"SingleStack\""));
        assert!(err(json!({"ipFamilyPolicy": "DualStack"})).starts_with("spec.ipFamilyPolicy: Unsupported value"));
    }

    #[test]
    fn the_v6_range_is_checked_as_the_v4_one() {
        assert!(in_service_cidr(&"fd43::ffff".parse().unwrap()));
        assert!(!in_service_cidr(&"fd43::1:0".parse().unwrap()));
        assert!(in_service_cidr(&"10.43.255.254".parse().unwrap()));
        assert!(!in_service_cidr(&"10.44.0.1".parse().unwrap()));
    }
}
