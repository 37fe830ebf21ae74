//! Partition shapes and the nftables rulesets that realise them (pure; no I/O).
//!
//! A partition is a set of blocked directed pairs `(a, b)`: packets from server `a` to
//! server `b` are dropped. Each pair becomes an `output` rule in `a`'s namespace
//! (`ip daddr b drop`) and an `input` rule in `b`'s (`ip saddr a drop`). The host address
//! never appears in a rule, so clients reach every server whatever the partition.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use rand::seq::SliceRandom;
use rand::Rng;

/// Blocked directed pairs `(from, to)` of server indexes.
pub type Blocked = BTreeSet<(usize, usize)>;

/// The nftables table every partition lives in (family `inet`).
pub const NFT_TABLE: &str = "keelson_chaos";

/// A majority/minority split of the servers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Halves {
    /// `n / 2 + 1` servers.
    pub majority: Vec<usize>,
    /// The rest.
    pub minority: Vec<usize>,
}

/// Splits `n` servers at random into a majority and a minority (both sorted).
pub fn split_halves(n: usize, rng: &mut impl Rng) -> Halves {
    let mut all: Vec<usize> = (0..n).collect();
    all.shuffle(rng);
    let size = if n == 0 { 0 } else { n / 2 + 1 };
    let mut majority = all[..size].to_vec();
    let mut minority = all[majority.len()..].to_vec();
    majority.sort_unstable();
    minority.sort_unstable();
    Halves { majority, minority }
}

/// Two halves connected only through one bridge node (Jepsen's "bridge").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BridgeShape {
    pub left: Vec<usize>,
    /// Talks to both halves.
    pub bridge: usize,
    pub right: Vec<usize>,
}

/// Picks a bridge node at random and halves the others (`left` gets the extra one when
/// they are odd in number). Needs `n >= 3`.
pub fn bridge_shape(n: usize, rng: &mut impl Rng) -> BridgeShape {
    assert!(n >= 3, "a bridge needs at least 3 servers");
    let mut all: Vec<usize> = (0..n).collect();
    all.shuffle(rng);
    let bridge = all[0];
    let rest = &all[1..];
    let cut = rest.len().div_ceil(2);
    let mut left = rest[..cut].to_vec();
    let mut right = rest[cut..].to_vec();
    left.sort_unstable();
    right.sort_unstable();
    BridgeShape { left, bridge, right }
}

/// Pairs that cut `node` off from every other of `n` servers, both ways.
pub fn isolate_pairs(n: usize, node: usize) -> Blocked {
    (0..n).filter(|&j| j != node).flat_map(|j| [(node, j), (j, node)]).collect()
}

/// Pairs that cut every server of `a` off from every server of `b`, both ways.
pub fn cut_pairs(a: &[usize], b: &[usize]) -> Blocked {
    a.iter().flat_map(|&x| b.iter().flat_map(move |&y| [(x, y), (y, x)])).collect()
}

/// The nftables script for server `node`'s namespace: atomically replaces the table
/// `inet keelson_chaos` with one dropping packets of `blocked` pairs that involve `node`
/// (or, when none do, just deletes it). `addrs[i]` is server i's address. Feed it to
/// `nft -f -`.
pub fn render_ruleset(node: usize, addrs: &[Ipv4Addr], blocked: &Blocked) -> String {
    let from: Vec<String> = blocked.iter().filter(|(_, to)| *to == node).map(|(f, _)| addrs[*f].to_string()).collect();
    let to: Vec<String> = blocked.iter().filter(|(f, _)| *f == node).map(|(_, t)| addrs[*t].to_string()).collect();
    // Declaring the table first makes the delete valid whether or not it existed.
    let mut s = format!("table inet {NFT_TABLE}\ndelete table inet {NFT_TABLE}\n");
    if from.is_empty() && to.is_empty() {
        return s;
    }
    let set = |v: &[String]| {
        let mut v = v.to_vec();
        v.sort_by_key(|a| a.parse::<Ipv4Addr>().map(u32::from).unwrap_or(0));
        v.dedup();
        format!("{{ {} }}", v.join(", "))
    };
    s.push_str(&format!("table inet {NFT_TABLE} {{\n"));
    s.push_str("\tchain input {\n\t\ttype filter hook input priority 0; policy accept;\n");
    if !from.is_empty() {
        s.push_str(&format!("\t\tip saddr {} drop\n", set(&from)));
    }
    s.push_str("\t}\n\tchain output {\n\t\ttype filter hook output priority 0; policy accept;\n");
    if !to.is_empty() {
        s.push_str(&format!("\t\tip daddr {} drop\n", set(&to)));
    }
    s.push_str("\t}\n}\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    fn addrs(n: usize) -> Vec<Ipv4Addr> {
        (0..n).map(|i| Ipv4Addr::from(u32::from(Ipv4Addr::new(192, 0, 2, 10)) + i as u32)).collect()
    }

    const HEAL: &str = "table inet keelson_chaos\ndelete table inet keelson_chaos\n";

    #[test]
    fn split_sizes_for_3_and_5() {
        let mut rng = StdRng::seed_from_u64(1);
        for (n, maj, min) in [(3, 2, 1), (5, 3, 2)] {
            for _ in 0..50 {
                let h = split_halves(n, &mut rng);
                assert_eq!((h.majority.len(), h.minority.len()), (maj, min));
                let mut all: Vec<usize> = h.majority.iter().chain(&h.minority).copied().collect();
                all.sort_unstable();
                assert_eq!(all, (0..n).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn bridge_membership_for_3_and_5() {
        let mut rng = StdRng::seed_from_u64(2);
        let mut bridges = BTreeSet::new();
        for (n, side) in [(3, 1), (5, 2)] {
            for _ in 0..50 {
                let b = bridge_shape(n, &mut rng);
                assert_eq!((b.left.len(), b.right.len()), (side, side));
                assert!(!b.left.contains(&b.bridge) && !b.right.contains(&b.bridge));
                assert!(b.left.iter().all(|x| !b.right.contains(x)));
                // The bridge plus either half is a majority.
                assert!(b.left.len() + 1 > n / 2 && b.right.len() + 1 > n / 2);
                let blocked = cut_pairs(&b.left, &b.right);
                assert!(blocked.iter().all(|(f, t)| *f != b.bridge && *t != b.bridge));
                bridges.insert((n, b.bridge));
            }
        }
        assert!(bridges.len() >= 6, "the bridge node varies: {bridges:?}");
    }

    #[test]
    fn isolate_renders_cuts_on_the_isolated_node_and_its_peers() {
        let a = addrs(3);
        let blocked = isolate_pairs(3, 1);
        assert_eq!(blocked.len(), 4);
        assert_eq!(
            render_ruleset(1, &a, &blocked),
            "table inet keelson_chaos\n\
             delete table inet keelson_chaos\n\
             table inet keelson_chaos {\n\
             \tchain input {\n\
             \t\ttype filter hook input priority 0; policy accept;\n\
             \t\tip saddr { 192.0.2.10, 192.0.2.12 } drop\n\
             \t}\n\
             \tchain output {\n\
             \t\ttype filter hook output priority 0; policy accept;\n\
             \t\tip daddr { 192.0.2.10, 192.0.2.12 } drop\n\
             \t}\n\
             }\n"
        );
        assert_eq!(
            render_ruleset(0, &a, &blocked),
            "table inet keelson_chaos\n\
             delete table inet keelson_chaos\n\
             table inet keelson_chaos {\n\
             \tchain input {\n\
             \t\ttype filter hook input priority 0; policy accept;\n\
             \t\tip saddr { 192.0.2.11 } drop\n\
             \t}\n\
             \tchain output {\n\
             \t\ttype filter hook output priority 0; policy accept;\n\
             \t\tip daddr { 192.0.2.11 } drop\n\
             \t}\n\
             }\n"
        );
        for i in 0..3 {
            assert!(!render_ruleset(i, &a, &blocked).contains("192.0.2.1 "), "never the host");
        }
    }

    #[test]
    fn split_of_five_renders_the_other_side_for_each_node() {
        let a = addrs(5);
        let blocked = cut_pairs(&[0, 2, 4], &[1, 3]);
        let majority_rules = "table inet keelson_chaos\n\
             delete table inet keelson_chaos\n\
             table inet keelson_chaos {\n\
             \tchain input {\n\
             \t\ttype filter hook input priority 0; policy accept;\n\
             \t\tip saddr { 192.0.2.11, 192.0.2.13 } drop\n\
             \t}\n\
             \tchain output {\n\
             \t\ttype filter hook output priority 0; policy accept;\n\
             \t\tip daddr { 192.0.2.11, 192.0.2.13 } drop\n\
             \t}\n\
             }\n";
        for i in [0, 2, 4] {
            assert_eq!(render_ruleset(i, &a, &blocked), majority_rules);
        }
        assert!(render_ruleset(3, &a, &blocked).contains("ip saddr { 192.0.2.10, 192.0.2.12, 192.0.2.14 } drop"));
    }

    #[test]
    fn bridge_leaves_the_bridge_node_unfiltered() {
        let a = addrs(5);
        let shape = BridgeShape { left: vec![0, 1], bridge: 2, right: vec![3, 4] };
        let blocked = cut_pairs(&shape.left, &shape.right);
        assert_eq!(render_ruleset(2, &a, &blocked), HEAL);
        assert!(render_ruleset(0, &a, &blocked).contains("ip daddr { 192.0.2.13, 192.0.2.14 } drop"));
        assert!(render_ruleset(4, &a, &blocked).contains("ip saddr { 192.0.2.10, 192.0.2.11 } drop"));
    }

    #[test]
    fn one_way_loss_filters_one_direction_only() {
        let a = addrs(3);
        let blocked: Blocked = [(0, 2)].into();
        assert_eq!(
            render_ruleset(0, &a, &blocked),
            "table inet keelson_chaos\n\
             delete table inet keelson_chaos\n\
             table inet keelson_chaos {\n\
             \tchain input {\n\
             \t\ttype filter hook input priority 0; policy accept;\n\
             \t}\n\
             \tchain output {\n\
             \t\ttype filter hook output priority 0; policy accept;\n\
             \t\tip daddr { 192.0.2.12 } drop\n\
             \t}\n\
             }\n"
        );
        assert_eq!(
            render_ruleset(2, &a, &blocked),
            "table inet keelson_chaos\n\
             delete table inet keelson_chaos\n\
             table inet keelson_chaos {\n\
             \tchain input {\n\
             \t\ttype filter hook input priority 0; policy accept;\n\
             \t\tip saddr { 192.0.2.10 } drop\n\
             \t}\n\
             \tchain output {\n\
             \t\ttype filter hook output priority 0; policy accept;\n\
             \t}\n\
             }\n"
        );
        assert_eq!(render_ruleset(1, &a, &blocked), HEAL);
        assert_eq!(render_ruleset(0, &a, &Blocked::new()), HEAL);
    }
}
