//! Service ClusterIP and NodePort allocation.
//!
//! Each allocated address is a key in the store (`/registry/ranges/serviceips/<ip>`,
//! `/registry/ranges/servicenodeports/<port>`) created in the same transaction as the
//! Service, fenced on the key being absent: two replicas can never hand out the same
//! address, and a delete releases the keys in the Service's own delete transaction.

use std::net::Ipv4Addr;

use rand::Rng;
use serde_json::{json, Value};

use crate::catalog::ResourceDef;
use crate::error::{ApiError, Cause};
use crate::storage::SideWrite;

/// The service CIDR: 10.43.0.0/16. `.0` is the network, `.1` the `kubernetes` Service.
pub const SERVICE_CIDR: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 43, 0, 0), 16);
pub const NODE_PORT_RANGE: std::ops::RangeInclusive<i64> = 30000..=32767;

fn ip_key(ip: &str) -> Vec<u8> {
    format!("/registry/ranges/serviceips/{ip}").into_bytes()
}

fn port_key(port: i64) -> Vec<u8> {
    format!("/registry/ranges/servicenodeports/{port}").into_bytes()
}

pub fn in_service_cidr(ip: Ipv4Addr) -> bool {
    let (net, bits) = SERVICE_CIDR;
    let mask = u32::MAX << (32 - bits);
    u32::from(ip) & mask == u32::from(net) & mask
}

fn random_ip() -> Ipv4Addr {
    let (net, bits) = SERVICE_CIDR;
    let size = 1u32 << (32 - bits);
    let offset = rand::thread_rng().gen_range(2..size - 1);
    Ipv4Addr::from(u32::from(net) + offset)
}

fn is_service(def: &ResourceDef) -> bool {
    def.group.is_empty() && def.kind == "Service"
}

/// Picks the addresses a new object needs (fills them into `obj`) and returns the keys
/// to create with it. Not a Service: nothing.
pub fn allocate(def: &ResourceDef, owner_key: &[u8], obj: &mut Value) -> Result<Vec<SideWrite>, ApiError> {
    if !is_service(def) {
        return Ok(Vec::new());
    }
    let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
    let invalid = |field: &str, msg: String| ApiError::invalid("Service", "", &name, vec![Cause::invalid(field, msg)]);
    let mut side = Vec::new();
    let ty = obj.pointer("/spec/type").and_then(Value::as_str).unwrap_or("ClusterIP").to_string();
    if ty != "ExternalName" {
        let requested = obj.pointer("/spec/clusterIP").and_then(Value::as_str).unwrap_or("").to_string();
        let ip = match requested.as_str() {
            "None" => None,
            "" => Some(random_ip()),
            s => {
                let ip: Ipv4Addr = s.parse().map_err(|_| invalid("spec.clusterIP", format!("Invalid value: {s:?}: must be a valid IP address")))?;
                if !in_service_cidr(ip) {
                    return Err(invalid("spec.clusterIP", format!("Invalid value: {s:?}: provided IP is not in the valid range. The range of valid IPs is 10.43.0.0/16")));
                }
                Some(ip)
            }
        };
        match ip {
            Some(ip) => {
                obj["spec"]["clusterIP"] = json!(ip.to_string());
                obj["spec"]["clusterIPs"] = json!([ip.to_string()]);
                side.push((ip_key(&ip.to_string()), Some(owner_key.to_vec())));
            }
            None => {
                obj["spec"]["clusterIPs"] = json!(["None"]);
            }
        }
        obj["spec"]["ipFamilies"] = json!(["IPv4"]);
        obj["spec"]["ipFamilyPolicy"] = json!("SingleStack");
        obj["spec"]["internalTrafficPolicy"] = json!("Cluster");
    }
    if ty == "NodePort" || ty == "LoadBalancer" {
        obj["spec"]["externalTrafficPolicy"] = obj.pointer("/spec/externalTrafficPolicy").cloned().unwrap_or(json!("Cluster"));
        // A LoadBalancer Service gets node ports unless it says otherwise (then only the
        // ones it names), as Kubernetes defaults `allocateLoadBalancerNodePorts`.
        let allocate = if ty == "LoadBalancer" {
            let v = obj.pointer("/spec/allocateLoadBalancerNodePorts").and_then(Value::as_bool).unwrap_or(true);
            obj["spec"]["allocateLoadBalancerNodePorts"] = json!(v);
            v
        } else {
            true
        };
        let mut used: Vec<i64> = Vec::new();
        if let Some(ports) = obj.pointer_mut("/spec/ports").and_then(Value::as_array_mut) {
            for (i, p) in ports.iter_mut().enumerate() {
                let port = match p.get("nodePort").and_then(Value::as_i64) {
                    Some(n) if NODE_PORT_RANGE.contains(&n) => n,
                    Some(n) => return Err(invalid(&format!("spec.ports[{i}].nodePort"), format!("Invalid value: {n}: provided port is not in the valid range. The range of valid ports is 30000-32767"))),
                    None if !allocate => continue,
                    None => loop {
                        let n = rand::thread_rng().gen_range(NODE_PORT_RANGE);
                        if !used.contains(&n) {
                            break n;
                        }
                    },
                };
                if used.contains(&port) {
                    return Err(invalid(&format!("spec.ports[{i}].nodePort"), format!("Duplicate value: {port}")));
                }
                used.push(port);
                p["nodePort"] = json!(port);
                side.push((port_key(port), Some(owner_key.to_vec())));
            }
        }
    }
    Ok(side)
}

/// The address keys a deleted object held.
pub fn release(def: &ResourceDef, obj: &Value) -> Vec<SideWrite> {
    if !is_service(def) {
        return Vec::new();
    }
    let mut side = Vec::new();
    if let Some(ip) = obj.pointer("/spec/clusterIP").and_then(Value::as_str).filter(|s| *s != "None" && !s.is_empty()) {
        side.push((ip_key(ip), None));
    }
    for p in obj.pointer("/spec/ports").and_then(Value::as_array).into_iter().flatten() {
        if let Some(n) = p.get("nodePort").and_then(Value::as_i64) {
            side.push((port_key(n), None));
        }
    }
    side
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::lookup;

    #[test]
    fn allocates_cluster_ip_and_node_ports_and_releases_them() {
        let def = lookup("", "v1", "services").unwrap();
        let mut s = json!({"metadata": {"name": "web"}, "spec": {"type": "NodePort", "ports": [{"port": 80}, {"port": 443, "nodePort": 30443}]}});
        let side = allocate(def, b"k", &mut s).unwrap();
        let ip: Ipv4Addr = s["spec"]["clusterIP"].as_str().unwrap().parse().unwrap();
        assert!(in_service_cidr(ip) && ip != Ipv4Addr::new(10, 43, 0, 1));
        assert!(NODE_PORT_RANGE.contains(&s["spec"]["ports"][0]["nodePort"].as_i64().unwrap()));
        assert_eq!(side.len(), 3);
        assert!(side.contains(&(b"/registry/ranges/servicenodeports/30443".to_vec(), Some(b"k".to_vec()))));
        let released = release(def, &s);
        assert_eq!(released.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(), side.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>());
    }

    #[test]
    fn a_load_balancer_gets_node_ports_unless_it_declines_them() {
        let def = lookup("", "v1", "services").unwrap();
        let mut lb = json!({"metadata": {"name": "web"}, "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}});
        allocate(def, b"k", &mut lb).unwrap();
        assert_eq!(lb["spec"]["allocateLoadBalancerNodePorts"], true);
        assert!(NODE_PORT_RANGE.contains(&lb["spec"]["ports"][0]["nodePort"].as_i64().unwrap()));
        let mut none = json!({"metadata": {"name": "web"}, "spec": {"type": "LoadBalancer", "allocateLoadBalancerNodePorts": false, "ports": [{"port": 80}, {"port": 443, "nodePort": 30444}]}});
        let side = allocate(def, b"k", &mut none).unwrap();
        assert!(none["spec"]["ports"][0].get("nodePort").is_none(), "{none}");
        assert_eq!(none["spec"]["ports"][1]["nodePort"], 30444, "a named node port is still taken");
        assert_eq!(side.len(), 2, "the ClusterIP and the named node port");
    }

    #[test]
    fn rejects_out_of_range_requests() {
        let def = lookup("", "v1", "services").unwrap();
        let mut s = json!({"metadata": {"name": "web"}, "spec": {"clusterIP": "10.0.0.5", "ports": [{"port": 80}]}});
        assert_eq!(allocate(def, b"k", &mut s).unwrap_err().code(), 422);
        let mut h = json!({"metadata": {"name": "web"}, "spec": {"clusterIP": "None", "ports": [{"port": 80}]}});
        assert!(allocate(def, b"k", &mut h).unwrap().is_empty());
        let mut np = json!({"metadata": {"name": "web"}, "spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": 80}]}});
        assert_eq!(allocate(def, b"k", &mut np).unwrap_err().code(), 422);
    }
}
