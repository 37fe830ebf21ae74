//! Which Node gets which pod CIDRs, as a pure function of the cluster CIDRs (one, or an
//! IPv4 and an IPv6 one on a dual-stack cluster), their per-node masks and the Nodes as
//! they are: the lowest free block of each cluster CIDR for every Node without one,
//! never a block that overlaps a CIDR some Node already has (so a deleted Node's block
//! is free again once it is gone).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// Kubernetes' default is none; Keelson's cluster CIDR is k3s's.
pub const DEFAULT_CLUSTER_CIDR: &str = "10.42.0.0/16";
/// `--node-cidr-mask-size-ipv4`, as in kube-controller-manager.
pub const DEFAULT_NODE_CIDR_MASK_SIZE: u8 = 24;
/// `--node-cidr-mask-size-ipv6`, as in kube-controller-manager.
pub const DEFAULT_NODE_CIDR_MASK_SIZE_V6: u8 = 64;
/// kube-controller-manager refuses a cluster CIDR split into more than 2^16 node blocks.
pub const MAX_NODE_BLOCK_BITS: u8 = 16;

/// A configuration or a CIDR is not usable.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IpamError {
    /// Not `address/n` with n within the family's bits.
    #[error("invalid CIDR {0:?}: expected a network such as 10.42.0.0/16 or fd42::/48")]
    InvalidCidr(String),
    /// The node mask is not inside the cluster CIDR's, leaves too many blocks or blocks
    /// of fewer than 4 addresses.
    #[error("node CIDR mask size {mask} does not fit cluster CIDR {cluster}: it must be between {} and {}", .cluster.prefix, NodeRange::max_mask(.cluster))]
    MaskSize { cluster: IpCidr, mask: u8 },
    /// Not one cluster CIDR, or one of each family.
    #[error("cluster CIDRs {0:?}: expected one CIDR, or an IPv4 and an IPv6 one, comma-separated")]
    Families(String),
}

/// An IPv4 or IPv6 network, its address masked to the prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IpCidr {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl IpCidr {
    /// 32 or 128.
    pub fn bits(&self) -> u8 {
        if self.addr.is_ipv6() { 128 } else { 32 }
    }

    pub fn is_ipv6(&self) -> bool {
        self.addr.is_ipv6()
    }

    fn start(&self) -> u128 {
        number(self.addr)
    }

    fn last(&self) -> u128 {
        self.start() | host_bits(self.bits(), self.prefix)
    }
}

fn number(addr: IpAddr) -> u128 {
    match addr {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

fn address(bits: u8, n: u128) -> IpAddr {
    if bits == 32 { IpAddr::V4(Ipv4Addr::from(n as u32)) } else { IpAddr::V6(Ipv6Addr::from(n)) }
}

/// The host part of a `prefix`-long network of a `bits`-bit family, as a mask.
fn host_bits(bits: u8, prefix: u8) -> u128 {
    if prefix >= bits { 0 } else { (u128::MAX >> (128 - u32::from(bits))) >> prefix }
}

impl FromStr for IpCidr {
    type Err = IpamError;

    fn from_str(s: &str) -> Result<Self, IpamError> {
        let bad = || IpamError::InvalidCidr(s.to_string());
        let (addr, prefix) = s.trim().split_once('/').ok_or_else(bad)?;
        let addr: IpAddr = addr.parse().map_err(|_| bad())?;
        if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let prefix: u8 = prefix.parse().map_err(|_| bad())?;
        let bits = if addr.is_ipv6() { 128 } else { 32 };
        if prefix > bits {
            return Err(bad());
        }
        Ok(IpCidr { addr: address(bits, number(addr) & !host_bits(bits, prefix)), prefix })
    }
}

impl fmt::Display for IpCidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// One cluster CIDR and the size of each Node's block of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeRange {
    pub cluster_cidr: IpCidr,
    pub node_mask: u8,
}

impl NodeRange {
    pub fn new(cluster_cidr: IpCidr, node_mask: u8) -> Result<Self, IpamError> {
        if node_mask < cluster_cidr.prefix || node_mask > Self::max_mask(&cluster_cidr) {
            return Err(IpamError::MaskSize { cluster: cluster_cidr, mask: node_mask });
        }
        Ok(Self { cluster_cidr, node_mask })
    }

    /// The longest node mask of `cluster`: at most 2^16 blocks, each of at least 4
    /// addresses (a /30 or a /126).
    pub fn max_mask(cluster: &IpCidr) -> u8 {
        (cluster.prefix + MAX_NODE_BLOCK_BITS).min(cluster.bits() - 2)
    }

    /// How many node blocks the cluster CIDR holds.
    pub fn blocks(&self) -> u32 {
        1 << (self.node_mask - self.cluster_cidr.prefix)
    }

    fn shift(&self) -> u32 {
        u32::from(self.cluster_cidr.bits() - self.node_mask)
    }

    /// Block `i` (0-based) of the cluster CIDR.
    pub fn block(&self, i: u32) -> IpCidr {
        // A shift by 128 (one block, all of IPv6) is block 0.
        let n = self.cluster_cidr.start() + u128::from(i).checked_shl(self.shift()).unwrap_or(0);
        IpCidr { addr: address(self.cluster_cidr.bits(), n), prefix: self.node_mask }
    }

    /// The blocks `cidr` overlaps, if any (first and last index).
    fn overlapped(&self, cidr: &IpCidr) -> Option<(u32, u32)> {
        if cidr.is_ipv6() != self.cluster_cidr.is_ipv6() {
            return None;
        }
        let (start, last) = (cidr.start().max(self.cluster_cidr.start()), cidr.last().min(self.cluster_cidr.last()));
        if start > last {
            return None;
        }
        let base = self.cluster_cidr.start();
        let index = |n: u128| (n - base).checked_shr(self.shift()).unwrap_or(0) as u32;
        Some((index(start), index(last)))
    }
}

/// The cluster CIDRs: one, or on a dual-stack cluster one of each family, the first
/// primary (a Node's `spec.podCIDR`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpamConfig {
    pub primary: NodeRange,
    pub secondary: Option<NodeRange>,
}

impl Default for IpamConfig {
    fn default() -> Self {
        Self::new(DEFAULT_CLUSTER_CIDR.parse().expect("a valid default"), DEFAULT_NODE_CIDR_MASK_SIZE).expect("a valid default")
    }
}

impl IpamConfig {
    /// A single-stack cluster.
    pub fn new(cluster_cidr: IpCidr, node_mask: u8) -> Result<Self, IpamError> {
        Ok(Self { primary: NodeRange::new(cluster_cidr, node_mask)?, secondary: None })
    }

    /// From kube-controller-manager's flags: `--cluster-cidr` (one CIDR, or an IPv4 and
    /// an IPv6 one, comma-separated) and the node mask of each family.
    pub fn from_flags(cluster_cidrs: &str, v4_mask: u8, v6_mask: u8) -> Result<Self, IpamError> {
        let parts: Vec<&str> = cluster_cidrs.split(',').collect();
        if parts.len() > 2 || parts.iter().any(|p| p.trim().is_empty()) {
            return Err(IpamError::Families(cluster_cidrs.to_string()));
        }
        let cidrs = parts.into_iter().map(str::parse).collect::<Result<Vec<IpCidr>, _>>()?;
        let range = |c: &IpCidr| NodeRange::new(*c, if c.is_ipv6() { v6_mask } else { v4_mask });
        match cidrs.as_slice() {
            [one] => Ok(Self { primary: range(one)?, secondary: None }),
            [a, b] if a.is_ipv6() != b.is_ipv6() => Ok(Self { primary: range(a)?, secondary: Some(range(b)?) }),
            _ => Err(IpamError::Families(cluster_cidrs.to_string())),
        }
    }

    /// The ranges, primary first.
    pub fn ranges(&self) -> impl Iterator<Item = &NodeRange> {
        std::iter::once(&self.primary).chain(self.secondary.as_ref())
    }
}

impl fmt::Display for IpamConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cidrs: Vec<String> = self.ranges().map(|r| r.cluster_cidr.to_string()).collect();
        f.write_str(&cidrs.join(","))
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
    /// Set `spec.podCIDR` to the first and `spec.podCIDRs` to all (one per range).
    Assign { node: String, cidrs: Vec<IpCidr> },
    /// Every block of some range is taken (Kubernetes' `CIDRNotAvailable`).
    Exhausted { node: String },
}

/// A block of every range for every Node in `nodes` that has no pod CIDR, in name
/// order, skipping every block that overlaps a Node's CIDR or one of `reserved` (blocks
/// given out whose Nodes do not show them yet). A CIDR that does not parse takes nothing.
pub fn allocate(config: &IpamConfig, nodes: &[NodeCidrs<'_>], reserved: &[IpCidr]) -> Vec<Allocation> {
    let taken: Vec<IpCidr> = nodes.iter().flat_map(|n| n.pod_cidrs.iter().filter_map(|c| c.parse::<IpCidr>().ok())).chain(reserved.iter().copied()).collect();
    let mut free: Vec<_> = config
        .ranges()
        .map(|range| {
            let mut used = vec![false; range.blocks() as usize];
            for (first, last) in taken.iter().filter_map(|c| range.overlapped(c)) {
                used[first as usize..=last as usize].iter_mut().for_each(|u| *u = true);
            }
            used.into_iter().enumerate().filter(|(_, u)| !*u).map(move |(i, _)| range.block(i as u32))
        })
        .collect();
    let mut waiting: Vec<&str> = nodes.iter().filter(|n| n.pod_cidrs.is_empty()).map(|n| n.name).collect();
    waiting.sort_unstable();
    waiting
        .into_iter()
        .map(|node| match free.iter_mut().map(Iterator::next).collect::<Option<Vec<IpCidr>>>() {
            Some(cidrs) => Allocation::Assign { node: node.to_string(), cidrs },
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

    fn cidr(s: &str) -> IpCidr {
        s.parse().unwrap()
    }

    fn assigned(a: &[Allocation]) -> Vec<(String, String)> {
        a.iter()
            .map(|a| match a {
                Allocation::Assign { node, cidrs } => (node.clone(), cidrs.iter().map(ToString::to_string).collect::<Vec<_>>().join(",")),
                Allocation::Exhausted { node } => (node.clone(), "exhausted".into()),
            })
            .collect()
    }

    #[test]
    fn cidrs_parse_mask_and_print() {
        assert_eq!(cidr("10.42.7.9/16").to_string(), "10.42.0.0/16");
        assert_eq!(cidr("0.0.0.0/0").to_string(), "0.0.0.0/0");
        assert_eq!(cidr("fd42:0:0:7::9/48").to_string(), "fd42::/48");
        for bad in ["10.42.0.0", "10.42.0.0/33", "10.42.0/16", "10.42.0.0/+8", "fd00::/129", "fd00::/", "x/8"] {
            assert!(bad.parse::<IpCidr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn the_node_mask_must_fit_the_cluster_cidr() {
        for (cluster, mask, why) in [
            ("10.42.0.0/16", 15, "wider than the cluster CIDR"),
            ("10.42.0.0/24", 31, "blocks of 2 addresses"),
            ("10.0.0.0/8", 25, "2^17 blocks"),
            ("fd42::/48", 47, "wider than the cluster CIDR"),
            ("fd42::/120", 127, "blocks of 2 addresses"),
            ("fd42::/47", 64, "2^17 blocks"),
        ] {
            assert!(matches!(IpamConfig::new(cidr(cluster), mask), Err(IpamError::MaskSize { .. })), "{cluster} /{mask}: {why}");
        }
        let err = IpamConfig::new(cidr("fd42::/47"), 64).unwrap_err().to_string();
        assert_eq!(err, "node CIDR mask size 64 does not fit cluster CIDR fd42::/47: it must be between 47 and 63");
        assert_eq!(IpamConfig::new(cidr("10.42.0.0/16"), 24).unwrap().primary.blocks(), 256);
        assert_eq!(IpamConfig::new(cidr("fd42::/48"), 64).unwrap().primary.blocks(), 65536);
        assert_eq!(IpamConfig::default().primary.block(3).to_string(), "10.42.3.0/24");
        // One block of all of IPv6 (a shift by 128).
        let all = IpamConfig::new(cidr("::/0"), 0).unwrap();
        assert_eq!(assigned(&allocate(&all, &[node("a", &[])], &[])), [("a".to_string(), "::/0".to_string())]);
        assert_eq!(assigned(&allocate(&all, &[node("a", &["fd00::/64"]), node("b", &[])], &[])), [("b".to_string(), "exhausted".to_string())]);
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

    #[test]
    fn a_dual_stack_cluster_gives_each_new_node_a_block_of_each_family() {
        let cfg = IpamConfig::from_flags("10.42.0.0/16,fd42::/48", 24, 64).unwrap();
        assert_eq!(cfg.to_string(), "10.42.0.0/16,fd42::/48");
        assert_eq!(cfg.secondary.unwrap().block(3).to_string(), "fd42:0:0:3::/64");
        // a's IPv6 block takes IPv6 block 0 only; b's IPv4 one IPv4 block 1 only; a
        // reserved IPv6 block takes only itself.
        let nodes = [node("c", &[]), node("a", &["10.42.0.0/24", "fd42::/64"]), node("b", &["10.42.1.0/24"]), node("d", &[])];
        for (reserved, want) in [
            (vec![], [("c", "10.42.2.0/24,fd42:0:0:1::/64"), ("d", "10.42.3.0/24,fd42:0:0:2::/64")]),
            (vec![cidr("fd42:0:0:1::/64")], [("c", "10.42.2.0/24,fd42:0:0:2::/64"), ("d", "10.42.3.0/24,fd42:0:0:3::/64")]),
        ] {
            assert_eq!(assigned(&allocate(&cfg, &nodes, &reserved)), want.map(|(n, c)| (n.to_string(), c.to_string())), "reserved {reserved:?}");
        }
        // The order given is kept: an IPv6-primary cluster gives its IPv6 block first.
        let six_first = IpamConfig::from_flags("fd42::/48,10.42.0.0/16", 24, 64).unwrap();
        assert_eq!(assigned(&allocate(&six_first, &[node("x", &[])], &[])), [("x".to_string(), "fd42::/64,10.42.0.0/24".to_string())]);
    }

    #[test]
    fn one_exhausted_family_leaves_the_node_without_either() {
        let cfg = IpamConfig::from_flags("10.42.0.0/16,fd42::/63", 24, 64).unwrap();
        let nodes = [node("a", &[]), node("b", &[]), node("c", &[])];
        assert_eq!(assigned(&allocate(&cfg, &nodes, &[])), [("a", "10.42.0.0/24,fd42::/64"), ("b", "10.42.1.0/24,fd42:0:0:1::/64"), ("c", "exhausted")].map(|(n, c)| (n.to_string(), c.to_string())));
    }

    #[test]
    fn cluster_cidr_flags_take_one_cidr_or_one_of_each_family() {
        let single6 = IpamConfig::from_flags("fd42::/56", 24, 64).unwrap();
        assert_eq!((single6.primary.blocks(), single6.secondary), (256, None));
        for (flags, why) in [
            ("10.42.0.0/16,10.43.0.0/16", "two IPv4"),
            ("fd42::/48,fd43::/48", "two IPv6"),
            ("10.42.0.0/16,fd42::/48,10.44.0.0/16", "three"),
            ("10.42.0.0/16,", "an empty one"),
        ] {
            assert!(IpamConfig::from_flags(flags, 24, 64).is_err(), "{why}");
        }
        assert!(matches!(IpamConfig::from_flags("10.42.0.0/16,fd42::/47", 24, 64), Err(IpamError::MaskSize { .. })), "2^17 IPv6 blocks");
        assert!(matches!(IpamConfig::from_flags("fd42::/48", 24, 127), Err(IpamError::MaskSize { .. })));
        assert_eq!(IpamConfig::from_flags("10.42.0.0/16,10.1.0.0/16", 24, 64).unwrap_err().to_string(), "cluster CIDRs \"10.42.0.0/16,10.1.0.0/16\": expected one CIDR, or an IPv4 and an IPv6 one, comma-separated");
        assert_eq!(IpamConfig::from_flags("10.42.0.0/16,", 24, 64), Err(IpamError::Families("10.42.0.0/16,".into())));
        assert_eq!(IpamConfig::from_flags("10.42.0.0/16,fd42::48", 24, 64), Err(IpamError::InvalidCidr("fd42::48".into())));
    }
}

