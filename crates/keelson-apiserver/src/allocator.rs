//! Service ClusterIP and NodePort allocation.
//!
//! Each allocated address is a key in the store (`/registry/ranges/serviceips/<ip>`,
//! `/registry/ranges/servicenodeports/<port>`) created in the same transaction as the
//! Service, fenced on the key being absent: two replicas can never hand out the same
//! address, and a delete releases the keys in the Service's own delete transaction.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use rand::Rng;
use serde_json::{json, Value};

use crate::catalog::ResourceDef;
use crate::error::{ApiError, Cause};
use crate::storage::SideWrite;

mod families;

pub use families::{in_service_cidr, Family, SERVICE_CIDR, SERVICE_CIDR_V6};

pub const NODE_PORT_RANGE: std::ops::RangeInclusive<i64> = 30000..=32767;

fn ip_key(ip: &str) -> Vec<u8> {
    format!("/registry/ranges/serviceips/{ip}").into_bytes()
}

fn port_key(port: i64) -> Vec<u8> {
    format!("/registry/ranges/servicenodeports/{port}").into_bytes()
}

/// A random address of `family`'s service CIDR (not its first two nor, for IPv4, the
/// broadcast address).
fn random_ip(family: Family) -> IpAddr {
    match family {
        Family::V4 => {
            let (net, bits) = SERVICE_CIDR;
            let size = 1u32 << (32 - bits);
            Ipv4Addr::from(u32::from(net) + rand::thread_rng().gen_range(2..size - 1)).into()
        }
        Family::V6 => {
            let (net, bits) = SERVICE_CIDR_V6;
            let size = 1u128 << (128 - bits);
            Ipv6Addr::from(u128::from(net) + rand::thread_rng().gen_range(2..size)).into()
        }
    }
}

/// Every ClusterIP a Service holds (`clusterIPs`, and `clusterIP`), without "None".
fn held_ips(obj: &Value) -> Vec<String> {
    let mut ips: Vec<String> = obj.pointer("/spec/clusterIPs").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).map(String::from).collect();
    if let Some(ip) = cluster_ip(obj) {
        if !ips.iter().any(|i| i == ip) {
            ips.insert(0, ip.to_string());
        }
    }
    ips.retain(|ip| ip != "None" && !ip.is_empty());
    ips
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
        let plan = families::resolve(&obj["spec"]).map_err(|c| ApiError::invalid("Service", "", &name, vec![c]))?;
        if plan.headless {
            obj["spec"]["clusterIP"] = json!("None");
            obj["spec"]["clusterIPs"] = json!(["None"]);
        } else {
            let ips: Vec<String> = plan.families.iter().zip(&plan.requested).map(|(f, ip)| ip.unwrap_or_else(|| random_ip(*f)).to_string()).collect();
            for ip in &ips {
                side.push((ip_key(ip), Some(owner_key.to_vec())));
            }
            obj["spec"]["clusterIP"] = json!(ips[0]);
            obj["spec"]["clusterIPs"] = json!(ips);
        }
        obj["spec"]["ipFamilies"] = json!(plan.families.iter().map(|f| f.name()).collect::<Vec<_>>());
        obj["spec"]["ipFamilyPolicy"] = json!(plan.policy);
        obj["spec"]["internalTrafficPolicy"] = obj.pointer("/spec/internalTrafficPolicy").cloned().unwrap_or(json!("Cluster"));
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
        // A LoadBalancer keeping the client's source gets a port for health checks:
        // every node's proxy answers there whether it has a local endpoint.
        if wants_health_check(obj) {
            let port = match obj.pointer("/spec/healthCheckNodePort").and_then(Value::as_i64) {
                Some(n) if NODE_PORT_RANGE.contains(&n) && !used.contains(&n) => n,
                Some(n) if used.contains(&n) => return Err(invalid("spec.healthCheckNodePort", format!("Duplicate value: {n}"))),
                Some(n) => return Err(invalid("spec.healthCheckNodePort", format!("Invalid value: {n}: provided port is not in the valid range. The range of valid ports is 30000-32767"))),
                None => loop {
                    let n = rand::thread_rng().gen_range(NODE_PORT_RANGE);
                    if !used.contains(&n) {
                        break n;
                    }
                },
            };
            obj["spec"]["healthCheckNodePort"] = json!(port);
            side.push((port_key(port), Some(owner_key.to_vec())));
        }
    }
    Ok(side)
}

/// Whether the Service needs a health check node port: a LoadBalancer with
/// `externalTrafficPolicy: Local`, as Kubernetes allocates it.
pub fn wants_health_check(obj: &Value) -> bool {
    service_type(obj) == "LoadBalancer" && obj.pointer("/spec/externalTrafficPolicy").and_then(Value::as_str) == Some("Local")
}

fn service_type(obj: &Value) -> &str {
    obj.pointer("/spec/type").and_then(Value::as_str).unwrap_or("ClusterIP")
}

fn uses_node_ports(ty: &str) -> bool {
    ty == "NodePort" || ty == "LoadBalancer"
}

fn cluster_ip(obj: &Value) -> Option<&str> {
    obj.pointer("/spec/clusterIP").and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// The node port of `old`'s port with the same number and protocol as `p`.
fn old_node_port(old: &Value, p: &Value) -> Option<i64> {
    let proto = |v: &Value| v.get("protocol").and_then(Value::as_str).unwrap_or("TCP").to_string();
    old.pointer("/spec/ports")?.as_array()?.iter().find(|o| o.get("port") == p.get("port") && proto(o) == proto(p))?.get("nodePort")?.as_i64()
}

/// As Kubernetes' Service update: what was allocated and is left out of the new object
/// (a `kubectl replace` of the original manifest) is kept, the ClusterIP and the node
/// port of each port with the same number and protocol, while the type still uses it;
/// a type that no longer does drops them.
fn keep_allocated(old: &Value, new: &mut Value) {
    let (old_ty, new_ty) = (service_type(old).to_string(), service_type(new).to_string());
    if new_ty == "ExternalName" {
        if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
            if spec.get("clusterIP").and_then(Value::as_str).is_some_and(|ip| !ip.is_empty()) && spec.get("clusterIP") == old.pointer("/spec/clusterIP") {
                spec.remove("clusterIP");
                spec.remove("clusterIPs");
            }
            // An ExternalName Service has no IP families, as Kubernetes clears them.
            spec.remove("ipFamilies");
            spec.remove("ipFamilyPolicy");
        }
    } else if old_ty != "ExternalName" {
        if cluster_ip(new).is_none() && new.pointer("/spec/clusterIPs").is_none() {
            if let Some(ip) = cluster_ip(old).map(str::to_string) {
                new["spec"]["clusterIP"] = json!(ip);
                new["spec"]["clusterIPs"] = old.pointer("/spec/clusterIPs").cloned().unwrap_or_else(|| json!([ip]));
            }
        }
        for field in ["ipFamilyPolicy", "ipFamilies"] {
            if new.pointer(&format!("/spec/{field}")).is_none() {
                if let Some(v) = old.pointer(&format!("/spec/{field}")).cloned() {
                    new["spec"][field] = v;
                }
            }
        }
        // Down to one family (SingleStack): the secondary address and family go, as
        // Kubernetes drops them.
        let single = new.pointer("/spec/ipFamilyPolicy").and_then(Value::as_str) == Some("SingleStack");
        if single && new.pointer("/spec/clusterIPs") == old.pointer("/spec/clusterIPs") {
            for field in ["clusterIPs", "ipFamilies"] {
                if let Some(list) = new.pointer_mut(&format!("/spec/{field}")).and_then(Value::as_array_mut) {
                    list.truncate(1);
                }
            }
        }
    }
    let old_check = old.pointer("/spec/healthCheckNodePort").cloned();
    if wants_health_check(new) && wants_health_check(old) && new.pointer("/spec/healthCheckNodePort").is_none() {
        if let Some(n) = old_check {
            new["spec"]["healthCheckNodePort"] = n;
        }
    } else if !wants_health_check(new) && old_check.is_some() && new.pointer("/spec/healthCheckNodePort") == old_check.as_ref() {
        if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
            spec.remove("healthCheckNodePort");
        }
    }
    let keep = uses_node_ports(&new_ty) && uses_node_ports(&old_ty);
    for p in new.pointer_mut("/spec/ports").and_then(Value::as_array_mut).into_iter().flatten() {
        let was = old_node_port(old, p);
        if keep && p.get("nodePort").is_none() {
            if let Some(n) = was {
                p["nodePort"] = json!(n);
            }
        } else if !uses_node_ports(&new_ty) && was.is_some() && p.get("nodePort").and_then(Value::as_i64) == was {
            if let Some(o) = p.as_object_mut() {
                o.remove("nodePort");
            }
        }
    }
}

/// The addresses an updated object needs: what it held is kept (see
/// [`keep_allocated`]), what it newly needs is picked, and the keys to create (held from
/// now on) and to delete (let go of) in the update's transaction are returned. The
/// ClusterIP may not change once set, as in Kubernetes.
pub fn reallocate(def: &ResourceDef, owner_key: &[u8], old: &Value, new: &mut Value) -> Result<Vec<SideWrite>, ApiError> {
    if !is_service(def) {
        return Ok(Vec::new());
    }
    keep_allocated(old, new);
    if service_type(old) != "ExternalName" && service_type(new) != "ExternalName" {
        let name = new.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
        let refuse = |field: &str, now: &str| ApiError::invalid("Service", "", &name, vec![Cause::invalid(field, format!("Invalid value: {now:?}: may not change once set"))]);
        let (was, now) = (held_ips(old), held_ips(new));
        for i in 0..2 {
            if let (Some(w), Some(n)) = (was.get(i), now.get(i)) {
                if w != n {
                    return Err(refuse(&format!("spec.clusterIPs[{i}]"), n));
                }
            }
        }
        let first_family = |o: &Value| o.pointer("/spec/ipFamilies/0").and_then(Value::as_str).map(String::from);
        if let (Some(w), Some(n)) = (first_family(old), first_family(new)) {
            if w != n {
                return Err(refuse("spec.ipFamilies[0]", &n));
            }
        }
    }
    let before: std::collections::BTreeSet<Vec<u8>> = release(def, old).into_iter().map(|(k, _)| k).collect();
    let after: std::collections::BTreeSet<Vec<u8>> = allocate(def, owner_key, new)?.into_iter().map(|(k, _)| k).collect();
    let taken = after.difference(&before).map(|k| (k.clone(), Some(owner_key.to_vec())));
    let freed = before.difference(&after).map(|k| (k.clone(), None));
    Ok(taken.chain(freed).collect())
}

/// The addresses a Service asks for by name (its ClusterIP, its node ports): each key
/// with the error that says it is already taken, as Kubernetes words it.
pub fn requested(def: &ResourceDef, obj: &Value) -> Vec<(Vec<u8>, Cause)> {
    if !is_service(def) {
        return Vec::new();
    }
    let mut out = Vec::new();
    for ip in held_ips(obj) {
        out.push((ip_key(&ip), Cause::invalid("spec.clusterIPs", format!("Invalid value: []string{{{ip:?}}}: failed to allocate IP {ip}: provided IP is already allocated"))));
    }
    for (i, p) in obj.pointer("/spec/ports").and_then(Value::as_array).into_iter().flatten().enumerate() {
        if let Some(n) = p.get("nodePort").and_then(Value::as_i64) {
            out.push((port_key(n), Cause::invalid(format!("spec.ports[{i}].nodePort"), format!("Invalid value: {n}: provided port is already allocated"))));
        }
    }
    if let Some(n) = obj.pointer("/spec/healthCheckNodePort").and_then(Value::as_i64) {
        out.push((port_key(n), Cause::invalid("spec.healthCheckNodePort", format!("Invalid value: {n}: provided port is already allocated"))));
    }
    out
}

/// The address keys a deleted object held.
pub fn release(def: &ResourceDef, obj: &Value) -> Vec<SideWrite> {
    if !is_service(def) {
        return Vec::new();
    }
    let mut side = Vec::new();
    for ip in held_ips(obj) {
        side.push((ip_key(&ip), None));
    }
    for p in obj.pointer("/spec/ports").and_then(Value::as_array).into_iter().flatten() {
        if let Some(n) = p.get("nodePort").and_then(Value::as_i64) {
            side.push((port_key(n), None));
        }
    }
    if let Some(n) = obj.pointer("/spec/healthCheckNodePort").and_then(Value::as_i64) {
        side.push((port_key(n), None));
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
        let ip: IpAddr = s["spec"]["clusterIP"].as_str().unwrap().parse().unwrap();
        assert!(in_service_cidr(&ip) && ip != Ipv4Addr::new(10, 43, 0, 1));
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

    fn created(spec: Value) -> Value {
        let mut s = json!({"metadata": {"name": "web"}, "spec": spec});
        allocate(lookup("", "v1", "services").unwrap(), b"k", &mut s).unwrap();
        s
    }

    fn keys(side: &[SideWrite], held: bool) -> Vec<String> {
        let mut k: Vec<String> = side.iter().filter(|(_, v)| v.is_some() == held).map(|(k, _)| String::from_utf8_lossy(k).rsplit('/').next().unwrap().to_string()).collect();
        k.sort();
        k
    }

    #[test]
    fn an_update_keeps_what_was_allocated_and_changes_only_what_the_type_needs() {
        let def = lookup("", "v1", "services").unwrap();
        let old = created(json!({"type": "NodePort", "internalTrafficPolicy": "Local", "ports": [{"port": 80, "nodePort": 30080}]}));
        assert_eq!(old["spec"]["internalTrafficPolicy"], "Local", "a given policy is kept");
        let ip = old["spec"]["clusterIP"].as_str().unwrap().to_string();

        // The original manifest again (`kubectl replace`): everything kept, nothing written.
        let mut same = json!({"metadata": {"name": "web"}, "spec": {"type": "NodePort", "ports": [{"port": 80}]}});
        assert!(reallocate(def, b"k", &old, &mut same).unwrap().is_empty());
        assert_eq!((same["spec"]["clusterIP"].as_str(), same["spec"]["ports"][0]["nodePort"].as_i64()), (Some(ip.as_str()), Some(30080)));

        // A port added: only its node port is taken.
        let mut more = json!({"metadata": {"name": "web"}, "spec": {"type": "NodePort", "ports": [{"port": 80, "name": "a"}, {"port": 81, "name": "b", "nodePort": 30081}]}});
        let side = reallocate(def, b"k", &old, &mut more).unwrap();
        assert_eq!((keys(&side, true), keys(&side, false)), (vec!["30081".to_string()], vec![]));

        // To ClusterIP (as `kubectl apply` leaves the live nodePort in): the node port is
        // dropped and let go of, the ClusterIP kept.
        let mut cip = old.clone();
        cip["spec"]["type"] = json!("ClusterIP");
        let side = reallocate(def, b"k", &old, &mut cip).unwrap();
        assert!(cip["spec"]["ports"][0].get("nodePort").is_none());
        assert_eq!((keys(&side, true), keys(&side, false)), (vec![], vec!["30080".to_string()]));

        // From ClusterIP to LoadBalancer: a node port is picked.
        let mut lb = cip.clone();
        lb["spec"]["type"] = json!("LoadBalancer");
        let side = reallocate(def, b"k", &cip, &mut lb).unwrap();
        let picked = lb["spec"]["ports"][0]["nodePort"].as_i64().unwrap();
        assert_eq!((keys(&side, true), keys(&side, false)), (vec![picked.to_string()], vec![]));

        // To ExternalName: the ClusterIP goes too.
        let mut ext = json!({"metadata": {"name": "web"}, "spec": {"type": "ExternalName", "externalName": "example.com", "clusterIP": ip}});
        let side = reallocate(def, b"k", &old, &mut ext).unwrap();
        assert!(ext["spec"].get("clusterIP").is_none());
        assert_eq!((keys(&side, true), keys(&side, false)), (vec![], vec![ip.clone(), "30080".to_string()]));

        // The ClusterIP may not change.
        let mut moved = old.clone();
        moved["spec"]["clusterIP"] = json!("10.43.9.9");
        let e = reallocate(def, b"k", &old, &mut moved).unwrap_err();
        assert_eq!(e.code(), 422);
        assert!(format!("{e:?}").contains("may not change once set"), "{e:?}");
    }

    #[test]
    fn a_local_load_balancer_gets_a_health_check_port_while_it_keeps_the_source() {
        let def = lookup("", "v1", "services").unwrap();
        let old = created(json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local", "allocateLoadBalancerNodePorts": false, "ports": [{"port": 80}]}));
        let check = old["spec"]["healthCheckNodePort"].as_i64().expect("a health check node port");
        assert!(NODE_PORT_RANGE.contains(&check));
        assert!(release(def, &old).iter().any(|(k, _)| k == &port_key(check)), "released with the Service");
        assert!(created(json!({"type": "LoadBalancer", "ports": [{"port": 80}]}))["spec"].get("healthCheckNodePort").is_none(), "not with the Cluster policy");
        // Replaced without it: kept. To the Cluster policy: dropped and freed.
        let mut same = json!({"metadata": {"name": "web"}, "spec": {"type": "LoadBalancer", "externalTrafficPolicy": "Local", "allocateLoadBalancerNodePorts": false, "ports": [{"port": 80}]}});
        same["spec"]["clusterIP"] = old["spec"]["clusterIP"].clone();
        assert!(reallocate(def, b"k", &old, &mut same).unwrap().is_empty());
        assert_eq!(same["spec"]["healthCheckNodePort"], check);
        let mut cluster = old.clone();
        cluster["spec"]["externalTrafficPolicy"] = json!("Cluster");
        let side = reallocate(def, b"k", &old, &mut cluster).unwrap();
        assert!(cluster["spec"].get("healthCheckNodePort").is_none());
        assert_eq!((keys(&side, true), keys(&side, false)), (vec![], vec![check.to_string()]));
    }

    #[test]
    fn a_dual_stack_service_holds_an_address_of_each_family_and_can_move_between_stacks() {
        let def = lookup("", "v1", "services").unwrap();
        let dual = created(json!({"ipFamilyPolicy": "PreferDualStack", "ports": [{"port": 80}]}));
        let ips: Vec<IpAddr> = dual["spec"]["clusterIPs"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().parse().unwrap()).collect();
        assert!(ips[0].is_ipv4() && ips[1].is_ipv6() && ips.iter().all(in_service_cidr), "{ips:?}");
        assert_eq!(dual["spec"]["clusterIP"], ips[0].to_string());
        assert_eq!(dual["spec"]["ipFamilies"], json!(["IPv4", "IPv6"]));
        assert_eq!(release(def, &dual).len(), 2, "both addresses are let go of with the Service");
        assert_eq!(requested(def, &dual).len(), 2);

        // Replaced with the original manifest: both kept, nothing written.
        let mut same = json!({"metadata": {"name": "web"}, "spec": {"ipFamilyPolicy": "PreferDualStack", "ports": [{"port": 80}]}});
        assert!(reallocate(def, b"k", &dual, &mut same).unwrap().is_empty());
        assert_eq!(same["spec"]["clusterIPs"], dual["spec"]["clusterIPs"]);

        // Down to SingleStack (as `kubectl apply` leaves the live lists in): the IPv6
        // address and family are dropped and let go of.
        let mut single = dual.clone();
        single["spec"]["ipFamilyPolicy"] = json!("SingleStack");
        let side = reallocate(def, b"k", &dual, &mut single).unwrap();
        assert_eq!((single["spec"]["clusterIPs"].clone(), single["spec"]["ipFamilies"].clone()), (json!([ips[0].to_string()]), json!(["IPv4"])));
        assert_eq!((keys(&side, true), keys(&side, false)), (vec![], vec![ips[1].to_string()]));

        // Up again: a new IPv6 address is picked, the IPv4 one kept.
        let mut up = single.clone();
        up["spec"]["ipFamilyPolicy"] = json!("RequireDualStack");
        let side = reallocate(def, b"k", &single, &mut up).unwrap();
        let v6 = up["spec"]["clusterIPs"][1].as_str().unwrap().to_string();
        assert!(v6.parse::<IpAddr>().unwrap().is_ipv6());
        assert_eq!((keys(&side, true), keys(&side, false)), (vec![v6], vec![]));

        // The primary family may not change.
        let mut flipped = json!({"metadata": {"name": "web"}, "spec": {"ipFamilies": ["IPv6"], "ports": [{"port": 80}]}});
        let e = reallocate(def, b"k", &single, &mut flipped).unwrap_err();
        assert!(format!("{e:?}").contains("spec.clusterIPs[0]") || format!("{e:?}").contains("spec.ipFamilies[0]"), "{e:?}");

        // An IPv6-only Service; an ExternalName one has no families.
        let v6only = created(json!({"ipFamilies": ["IPv6"], "ports": [{"port": 80}]}));
        assert!(v6only["spec"]["clusterIP"].as_str().unwrap().parse::<IpAddr>().unwrap().is_ipv6());
        let mut ext = json!({"metadata": {"name": "web"}, "spec": {"type": "ExternalName", "externalName": "example.com"}});
        reallocate(def, b"k", &v6only, &mut ext).unwrap();
        assert!(ext["spec"].get("ipFamilies").is_none() && ext["spec"].get("clusterIPs").is_none(), "{ext}");
    }
}
