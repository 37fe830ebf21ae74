//! The pod network of a node: a CNI configuration for containerd's CRI plugin (a Linux
//! bridge with host-local addresses from the node's podCIDR), and routes to the other
//! nodes' podCIDRs through their InternalIPs (flannel's host-gw). Both are pure
//! renderings; the agent writes the file and applies the routes with `ip`.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::{json, Value};

/// The bridge pods are attached to.
pub const BRIDGE: &str = "keelson0";

/// The CIDRs of a node's pod CIDR list (comma-separated, as `--pod-cidr` and containerd
/// take them: one of each family on a dual-stack node).
pub fn split_pod_cidrs(pod_cidrs: &str) -> Vec<&str> {
    pod_cidrs.split(',').map(str::trim).filter(|c| !c.is_empty()).collect()
}

/// The CNI network list for a node whose pods take addresses from `pod_cidrs` (the
/// node's podCIDRs, comma-separated as containerd takes them: one of each family on a
/// dual-stack node, each pod then getting an address of each).
pub fn conflist(pod_cidrs: &str, ipam_dir: &Path, with_portmap: bool) -> Value {
    let cidrs = split_pod_cidrs(pod_cidrs);
    let ranges: Vec<Value> = cidrs.iter().map(|c| json!([{"subnet": c}])).collect();
    let routes: Vec<Value> = cidrs.iter().map(|c| json!({"dst": if c.contains(':') { "::/0" } else { "0.0.0.0/0" }})).collect();
    let mut plugins = vec![json!({
        "type": "bridge", "bridge": BRIDGE, "isGateway": true, "ipMasq": false, "hairpinMode": true,
        "ipam": {"type": "host-local", "ranges": ranges, "routes": routes, "dataDir": ipam_dir.display().to_string()},
    })];
    if with_portmap {
        plugins.push(json!({"type": "portmap", "capabilities": {"portMappings": true}}));
    }
    json!({"cniVersion": "1.0.0", "name": "keelson", "plugins": plugins})
}

/// A route to another node's pods.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PodRoute {
    pub cidr: String,
    pub via: String,
}

/// A Node's podCIDRs: `spec.podCIDRs`, or `spec.podCIDR` alone; empty when none.
pub fn node_pod_cidrs(node: &k8s_openapi::api::core::v1::Node) -> Vec<&str> {
    let spec = node.spec.as_ref();
    match spec.and_then(|s| s.pod_cidrs.as_ref()).filter(|c| !c.is_empty()) {
        Some(list) => list.iter().map(String::as_str).collect(),
        None => spec.and_then(|s| s.pod_cidr.as_deref()).filter(|c| !c.is_empty()).into_iter().collect(),
    }
}

/// Routes to every other node's podCIDRs, each through that node's InternalIP of the
/// same family (a dual-stack node has one of each; a family without an address of the
/// node gets no route).
pub fn routes(own: &str, nodes: &[k8s_openapi::api::core::v1::Node]) -> BTreeSet<PodRoute> {
    let mut out = BTreeSet::new();
    for n in nodes.iter().filter(|n| n.metadata.name.as_deref() != Some(own)) {
        let internal: Vec<&str> = n.status.as_ref().and_then(|s| s.addresses.as_ref()).into_iter().flatten().filter(|a| a.type_ == "InternalIP").map(|a| a.address.as_str()).collect();
        for cidr in node_pod_cidrs(n) {
            let v6 = cidr.contains(':');
            if let Some(via) = internal.iter().find(|a| a.contains(':') == v6) {
                out.insert(PodRoute { cidr: cidr.to_string(), via: via.to_string() });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bridge_takes_addresses_from_the_pod_cidr() {
        let c = conflist("10.42.3.0/24", Path::new("/d/ipam"), false);
        assert_eq!(c["plugins"][0]["ipam"]["ranges"][0][0]["subnet"], "10.42.3.0/24");
        assert_eq!(c["plugins"][0]["bridge"], BRIDGE);
        assert_eq!(c["plugins"].as_array().unwrap().len(), 1);
        assert_eq!(conflist("10.42.3.0/24", Path::new("/d"), true)["plugins"][1]["type"], "portmap");
    }

    #[test]
    fn a_dual_stack_node_gives_each_pod_an_address_of_each_family() {
        let c = conflist("10.42.3.0/24, fd42:0:0:3::/64", Path::new("/d/ipam"), false);
        let ipam = &c["plugins"][0]["ipam"];
        assert_eq!(ipam["ranges"], json!([[{"subnet": "10.42.3.0/24"}], [{"subnet": "fd42:0:0:3::/64"}]]));
        assert_eq!(ipam["routes"], json!([{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]));
    }

    #[test]
    fn routes_go_to_other_nodes_through_their_internal_ip() {
        let node = |name: &str, cidr: Option<&str>, ip: &str| -> k8s_openapi::api::core::v1::Node {
            serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"podCIDR": cidr}, "status": {"addresses": [{"type": "InternalIP", "address": ip}]}})).unwrap()
        };
        let nodes = [node("a", Some("10.42.0.0/24"), "10.0.0.1"), node("b", Some("10.42.1.0/24"), "10.0.0.2"), node("c", None, "10.0.0.3")];
        let r: Vec<PodRoute> = routes("a", &nodes).into_iter().collect();
        assert_eq!(r, vec![PodRoute { cidr: "10.42.1.0/24".into(), via: "10.0.0.2".into() }]);
    }

    #[test]
    fn a_dual_stack_node_is_routed_to_per_family_through_its_address_of_that_family() {
        let node = |name: &str, cidrs: &[&str], ips: &[&str]| -> k8s_openapi::api::core::v1::Node {
            let addresses: Vec<Value> = ips.iter().map(|ip| json!({"type": "InternalIP", "address": ip})).chain([json!({"type": "Hostname", "address": name})]).collect();
            serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"podCIDR": cidrs.first(), "podCIDRs": cidrs}, "status": {"addresses": addresses}})).unwrap()
        };
        let nodes = [
            node("a", &["10.42.0.0/24", "fd42:0:0:0::/64"], &["10.0.0.1", "fd00::1"]),
            node("b", &["10.42.1.0/24", "fd42:0:0:1::/64"], &["10.0.0.2", "fd00::2"]),
            // IPv6 pods but no IPv6 address to reach them by: no IPv6 route.
            node("c", &["10.42.2.0/24", "fd42:0:0:2::/64"], &["10.0.0.3"]),
        ];
        let r: Vec<(String, String)> = routes("a", &nodes).into_iter().map(|r| (r.cidr, r.via)).collect();
        let want = [("10.42.1.0/24", "10.0.0.2"), ("10.42.2.0/24", "10.0.0.3"), ("fd42:0:0:1::/64", "fd00::2")];
        assert_eq!(r, want.map(|(c, v)| (c.to_string(), v.to_string())));
    }
}
