//! Network faults of nodes, as nftables rulesets for a node's own namespace (pure; no I/O).
//!
//! A node is cut in its own namespace only: everything it sends, receives or forwards (its
//! pods' traffic passes through it) to or from the cut-off addresses is dropped. Cut from
//! the servers, the node goes silent to the control plane while its pods keep running;
//! cut from the other nodes, it loses their addresses and their pods' networks while the
//! control plane still hears it. The host address never appears in a rule.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use crate::partition::NFT_TABLE;

/// What one node is cut off from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeCut {
    /// Every server's address.
    pub servers: bool,
    /// Every other node's address and pod network.
    pub nodes: bool,
}

/// Cuts by node index (0-based among the nodes).
pub type NodeCuts = BTreeMap<usize, NodeCut>;

/// One node as a ruleset needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeAddrs {
    pub addr: Ipv4Addr,
    /// Its pod network (`10.42.1.0/24`).
    pub pod_cidr: String,
}

/// The nftables script for node `k`'s namespace: atomically replaces the table
/// `inet keelson_chaos` with one dropping what `cut` names (or, with nothing cut, deletes
/// it). Feed it to `nft -f -`.
pub fn render_node_ruleset(k: usize, cut: NodeCut, servers: &[Ipv4Addr], nodes: &[NodeAddrs]) -> String {
    let mut peers: Vec<String> = Vec::new();
    if cut.servers {
        peers.extend(servers.iter().map(Ipv4Addr::to_string));
    }
    if cut.nodes {
        for (_, n) in nodes.iter().enumerate().filter(|(i, _)| *i != k) {
            peers.push(n.addr.to_string());
            if !n.pod_cidr.is_empty() {
                peers.push(n.pod_cidr.clone());
            }
        }
    }
    let mut s = format!("table inet {NFT_TABLE}\ndelete table inet {NFT_TABLE}\n");
    if peers.is_empty() {
        return s;
    }
    let set = format!("{{ {} }}", peers.join(", "));
    s.push_str(&format!("table inet {NFT_TABLE} {{\n"));
    s.push_str(&format!("\tchain input {{\n\t\ttype filter hook input priority 0; policy accept;\n\t\tip saddr {set} drop\n\t}}\n"));
    s.push_str(&format!("\tchain output {{\n\t\ttype filter hook output priority 0; policy accept;\n\t\tip daddr {set} drop\n\t}}\n"));
    s.push_str(&format!(
        "\tchain forward {{\n\t\ttype filter hook forward priority 0; policy accept;\n\t\tip saddr {set} drop\n\t\tip daddr {set} drop\n\t}}\n"
    ));
    s.push_str("}\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn servers() -> Vec<Ipv4Addr> {
        vec![Ipv4Addr::new(192, 0, 2, 10), Ipv4Addr::new(192, 0, 2, 11), Ipv4Addr::new(192, 0, 2, 12)]
    }

    fn nodes() -> Vec<NodeAddrs> {
        (0..3)
            .map(|i| NodeAddrs { addr: Ipv4Addr::new(192, 0, 2, 13 + i as u8), pod_cidr: format!("10.42.{i}.0/24") })
            .collect()
    }

    const HEAL: &str = "table inet keelson_chaos\ndelete table inet keelson_chaos\n";

    #[test]
    fn nothing_cut_deletes_the_table() {
        assert_eq!(render_node_ruleset(1, NodeCut::default(), &servers(), &nodes()), HEAL);
    }

    #[test]
    fn cut_from_servers_drops_every_server_both_ways_and_forwarded() {
        let r = render_node_ruleset(0, NodeCut { servers: true, nodes: false }, &servers(), &nodes());
        let set = "{ 192.0.2.10, 192.0.2.11, 192.0.2.12 }";
        assert!(r.starts_with(HEAL), "{r}");
        for rule in [format!("ip saddr {set} drop"), format!("ip daddr {set} drop")] {
            // input or output, and forward.
            assert_eq!(r.matches(&rule).count(), 2, "{rule} in {r}");
        }
        assert!(!r.contains("192.0.2.14") && !r.contains("10.42."), "{r}");
        assert!(!r.contains("192.0.2.1,") && !r.contains("192.0.2.1 "), "the host address is never cut: {r}");
    }

    #[test]
    fn cut_from_nodes_names_the_others_and_their_pod_networks_only() {
        let r = render_node_ruleset(1, NodeCut { servers: false, nodes: true }, &servers(), &nodes());
        assert!(r.contains("{ 192.0.2.13, 10.42.0.0/24, 192.0.2.15, 10.42.2.0/24 }"), "{r}");
        assert!(!r.contains("192.0.2.14") && !r.contains("10.42.1.0/24"), "its own addresses stay: {r}");
        assert!(!r.contains("192.0.2.10"), "servers stay reachable: {r}");
    }
}
