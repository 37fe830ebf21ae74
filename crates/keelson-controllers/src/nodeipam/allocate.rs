//! Which Node gets which pod CIDR, as a pure function of the cluster CIDR, the per-node
//! mask and the Nodes as they are: the lowest free block of the cluster CIDR for every
//! Node without one, never a block that overlaps a CIDR some Node already has (so a
//! deleted Node's block is free again once it is gone).

use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

/// Kubernetes' default is none; Keelson's cluster CIDR is k3s's.
pub const DEFAULT_CLUSTER_CIDR: &str = "10.42.0.0/16";
/// `--node-cidr-mask-size` for IPv4, as in kube-controller-manager.
pub const DEFAULT_NODE_CIDR_MASK_SIZE: u8 = 24;
/// kube-controller-manager refuses a cluster CIDR split into more than 2^16 node blocks.
pub const MAX_NODE_BLOCK_BITS: u8 = 16;

/// A configuration or a CIDR is not usable.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IpamError {
    /// Not `a.b.c.d/n` with n ≤ 32.
    #[error("invalid CIDR {0:?}: expected an IPv4 network such as 10.42.0.0/16")]
    InvalidCidr(String),
    /// The node mask is not inside the cluster CIDR's, or leaves too many blocks.
    #[error("node CIDR mask size {mask} does not fit cluster CIDR {cluster}: it must be between {} and {} (and at most 30)", .cluster.prefix, .cluster.prefix + MAX_NODE_BLOCK_BITS)]
    MaskSize { cluster: Ipv4Cidr, mask: u8 },
}

/// An IPv4 network, its address masked to the prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ipv4Cidr {
    pub addr: Ipv4Addr,
    pub prefix: u8,
}

impl Ipv4Cidr {
    fn start(&self) -> u32 {
        u32::from(self.addr)
    }

    fn last(&self) -> u32 {
        self.start() | host_bits(self.prefix)
    }
}

fn host_bits(prefix: u8) -> u32 {
    if prefix >= 32 { 0 } else { u32::MAX >> prefix }
}

impl FromStr for Ipv4Cidr {
    type Err = IpamError;

    fn from_str(s: &str) -> Result<Self, IpamError> {
        let bad = || IpamError::InvalidCidr(s.to_string());
        let (addr, prefix) = s.trim().split_once('/').ok_or_else(bad)?;
        let addr: Ipv4Addr = addr.parse().map_err(|_| bad())?;
        let prefix: u8 = prefix.parse().map_err(|_| bad())?;
        if prefix > 32 {
            return Err(bad());
        }
        Ok(Ipv4Cidr { addr: Ipv4Addr::from(u32::from(addr) & !host_bits(prefix)), prefix })
    }
}

impl fmt::Display for Ipv4Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// The cluster CIDR and the size of each Node's block of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpamConfig {
    pub cluster_cidr: Ipv4Cidr,
    pub node_mask: u8,
}

impl Default for IpamConfig {
    fn default() -> Self {
        Self::new(DEFAULT_CLUSTER_CIDR.parse().expect("a valid default"), DEFAULT_NODE_CIDR_MASK_SIZE).expect("a valid default")
    }
}

impl IpamConfig {
    pub fn new(cluster_cidr: Ipv4Cidr, node_mask: u8) -> Result<Self, IpamError> {
        if node_mask < cluster_cidr.prefix || node_mask > 30 || node_mask - cluster_cidr.prefix > MAX_NODE_BLOCK_BITS {
            return Err(IpamError::MaskSize { cluster: cluster_cidr, mask: node_mask });
        }
        Ok(Self { cluster_cidr, node_mask })
    }

    /// How many node blocks the cluster CIDR holds.
    pub fn blocks(&self) -> u32 {
        1 << (self.node_mask - self.cluster_cidr.prefix)
    }

    /// Block `i` (0-based) of the cluster CIDR.
    pub fn block(&self, i: u32) -> Ipv4Cidr {
        let addr = self.cluster_cidr.start() + (i << (32 - u32::from(self.node_mask)));
        Ipv4Cidr { addr: Ipv4Addr::from(addr), prefix: self.node_mask }
    }

    /// The blocks `cidr` overlaps, if any (first and last index).
    fn overlapped(&self, cidr: &Ipv4Cidr) -> Option<(u32, u32)> {
        let (start, last) = (cidr.start().max(self.cluster_cidr.start()), cidr.last().min(self.cluster_cidr.last()));
        if start > last {
            return None;
        }
        let shift = 32 - u32::from(self.node_mask);
        let base = self.cluster_cidr.start();
        Some(((start - base) >> shift, (last - base) >> shift))
    }
}

/// What the allocator knows of one Node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeCidrs<'a> {
    pub name: &'a str,
    /// `spec.podCIDRs` (or `spec.podCIDR` when that is all there is); empty when none.
    pub pod_cidrs: Vec<&'a str>,
}

/// The allocator's decision for one Node without a pod CIDR.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Allocation {
    /// Set `spec.podCIDR` and `spec.podCIDRs` to this block.
    Assign { node: String, cidr: Ipv4Cidr },
    /// Every block is taken (Kubernetes' `CIDRNotAvailable`).
    Exhausted { node: String },
}

/// A block for every Node in `nodes` that has no pod CIDR, in name order, skipping every
/// block that overlaps a Node's CIDR or one of `reserved` (blocks given out whose Nodes
/// do not show them yet). A CIDR that does not parse takes nothing.
pub fn allocate(config: &IpamConfig, nodes: &[NodeCidrs<'_>], reserved: &[Ipv4Cidr]) -> Vec<Allocation> {
    let mut used = vec![false; config.blocks() as usize];
    let taken = nodes.iter().flat_map(|n| n.pod_cidrs.iter().filter_map(|c| c.parse::<Ipv4Cidr>().ok())).chain(reserved.iter().copied());
    for cidr in taken {
        if let Some((first, last)) = config.overlapped(&cidr) {
            used[first as usize..=last as usize].iter_mut().for_each(|u| *u = true);
        }
    }
    let mut waiting: Vec<&str> = nodes.iter().filter(|n| n.pod_cidrs.is_empty()).map(|n| n.name).collect();
    waiting.sort_unstable();
    let mut free = used.iter().enumerate().filter(|(_, u)| !**u).map(|(i, _)| i as u32);
    waiting
        .into_iter()
        .map(|node| match free.next() {
            Some(i) => Allocation::Assign { node: node.to_string(), cidr: config.block(i) },
            None => Allocation::Exhausted { node: node.to_string() },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node<'a>(name: &'a str, cidrs: &[&'a str]) -> NodeCidrs<'a> {
        NodeCidrs { name, pod_cidrs: cidrs.to_vec() }
    }

    fn cidr(s: &str) -> Ipv4Cidr {
        s.parse().unwrap()
    }

    fn assigned(a: &[Allocation]) -> Vec<(String, String)> {
        a.iter()
            .map(|a| match a {
                Allocation::Assign { node, cidr } => (node.clone(), cidr.to_string()),
                Allocation::Exhausted { node } => (node.clone(), "exhausted".into()),
            })
            .collect()
    }

    #[test]
    fn cidrs_parse_mask_and_print() {
        assert_eq!(cidr("10.42.7.9/16").to_string(), "10.42.0.0/16");
        assert_eq!(cidr("0.0.0.0/0").to_string(), "0.0.0.0/0");
        for bad in ["10.42.0.0", "10.42.0.0/33", "10.42.0/16", "fd00::/64", "x/8"] {
            assert!(bad.parse::<Ipv4Cidr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn the_node_mask_must_fit_the_cluster_cidr() {
        let c = cidr("10.42.0.0/16");
        assert!(IpamConfig::new(c, 15).is_err());
        assert!(IpamConfig::new(c, 31).is_err());
        assert!(IpamConfig::new(cidr("10.0.0.0/8"), 25).is_err(), "2^17 blocks");
        assert_eq!(IpamConfig::new(c, 24).unwrap().blocks(), 256);
        assert_eq!(IpamConfig::default().block(3).to_string(), "10.42.3.0/24");
    }

    #[test]
    fn nodes_without_a_cidr_get_the_lowest_free_blocks_in_name_order() {
        let cfg = IpamConfig::default();
        let nodes = [node("c", &[]), node("a", &["10.42.0.0/24"]), node("b", &[]), node("d", &["10.42.2.0/24"])];
        assert_eq!(assigned(&allocate(&cfg, &nodes, &[])), [("b".into(), "10.42.1.0/24".into()), ("c".into(), "10.42.3.0/24".into())]);
    }

    #[test]
    fn a_freed_block_is_given_again_and_reserved_ones_are_not() {
        let cfg = IpamConfig::default();
        // 10.42.0.0/24 belonged to a node that is gone; 10.42.1.0/24 was just given out.
        let nodes = [node("x", &["10.42.2.0/24"]), node("y", &[]), node("z", &[])];
        assert_eq!(assigned(&allocate(&cfg, &nodes, &[cidr("10.42.1.0/24")])), [("y".into(), "10.42.0.0/24".into()), ("z".into(), "10.42.3.0/24".into())]);
    }

    #[test]
    fn cidrs_of_other_sizes_or_outside_the_range_count_by_overlap() {
        let cfg = IpamConfig::default();
        // A /23 covers blocks 0 and 1; a /8 elsewhere and garbage take nothing.
        let nodes = [node("big", &["10.42.0.0/23"]), node("far", &["192.168.0.0/16"]), node("odd", &["nonsense"]), node("new", &[])];
        assert_eq!(assigned(&allocate(&cfg, &nodes, &[])), [("new".into(), "10.42.2.0/24".into())]);
        // A supernet of the whole range takes every block.
        let nodes = [node("all", &["10.0.0.0/8"]), node("new", &[])];
        assert_eq!(assigned(&allocate(&cfg, &nodes, &[])), [("new".into(), "exhausted".into())]);
    }

    #[test]
    fn a_full_range_reports_exhaustion_and_never_repeats_a_block() {
        let cfg = IpamConfig::new(cidr("10.42.0.0/22"), 24).unwrap();
        let names: Vec<String> = (0..6).map(|i| format!("n{i}")).collect();
        let nodes: Vec<_> = names.iter().map(|n| node(n, &[])).collect();
        let got = assigned(&allocate(&cfg, &nodes, &[]));
        let cidrs: Vec<&str> = got.iter().map(|(_, c)| c.as_str()).collect();
        assert_eq!(cidrs, ["10.42.0.0/24", "10.42.1.0/24", "10.42.2.0/24", "10.42.3.0/24", "exhausted", "exhausted"]);
    }
}
