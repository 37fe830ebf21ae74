//! Pure parts of the namespace topology: names, address choice. Nothing here does I/O.
//!
//! Run `<id>` owns the bridge namespace `kc<id>-br`, the root-namespace veth `kc<id>h`
//! (the host's address `N.1` on the run's /24) and one namespace `kc<id>-n<j>` per member
//! `j` (servers first, then nodes) at `N.(10+j)`. Node `k` gets the podCIDR
//! `P.k.0/24` of the run's pod /16 `P.0.0/16` (10.42.0.0/16 unless that is in use).

use std::net::{Ipv4Addr, Ipv6Addr};

/// Network namespace holding the bridge.
pub fn bridge_ns(run: &str) -> String {
    format!("kc{run}-br")
}

/// Network namespace of member `j`.
pub fn member_ns(run: &str, j: usize) -> String {
    format!("kc{run}-n{j}")
}

/// The root-namespace end of the host veth (≤ 15 characters for a 6-character run id).
pub fn host_veth(run: &str) -> String {
    format!("kc{run}h")
}

/// The run id in a namespace or veth name of ours (`kc<hex>-…` or `kc<hex>h`).
pub fn run_id_of(name: &str) -> Option<&str> {
    let rest = name.strip_prefix("kc")?;
    let end = rest.find(|c: char| !c.is_ascii_hexdigit()).unwrap_or(rest.len());
    let (id, tail) = rest.split_at(end);
    let ours = !id.is_empty()
        && (tail == "h"
            || tail == "-br"
            || tail.strip_prefix("-n").is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())));
    ours.then_some(id)
}

/// Address of the host end (`.1`) of the subnet whose network address is `net`.
pub fn host_addr(net: Ipv4Addr) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(net) + 1)
}

/// Address of member `j` (`.(10+j)`).
pub fn member_addr(net: Ipv4Addr, j: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(net) + 10 + j as u32)
}

/// The podCIDR of node `k` in the pod network `pod_net` (a /16).
pub fn pod_cidr(pod_net: Ipv4Addr, k: usize) -> String {
    format!("{}/24", Ipv4Addr::from(u32::from(pod_net) + ((k as u32) << 8)))
}

/// A dual-stack run's IPv6 networks: two unique local /48s (RFC 4193) from one random
/// 40-bit global ID, the members' on its even value (members on its first /64), the
/// pods' on the odd one (node `k`'s podCIDR is its /64 number `k`).
pub fn ula_nets(global_id: u64) -> (Ipv6Addr, Ipv6Addr) {
    let id = u128::from(global_id & 0xff_ffff_fffe);
    let net = |id: u128| Ipv6Addr::from((0xfd_u128 << 120) | (id << 80));
    (net(id), net(id | 1))
}

/// IPv6 address of the host end (`::1`) of the members' /64 `net`.
pub fn host_addr6(net: Ipv6Addr) -> Ipv6Addr {
    Ipv6Addr::from(u128::from(net) + 1)
}

/// IPv6 address of member `j` (`::1<j>`, so member 3 is `…::13` as it is `N.13`).
pub fn member_addr6(net: Ipv6Addr, j: usize) -> Ipv6Addr {
    Ipv6Addr::from(u128::from(net) + 0x10 + j as u128)
}

/// The IPv6 podCIDR of node `k` in the pod network `pod_net6` (a /48).
pub fn pod_cidr6(pod_net6: Ipv6Addr, k: usize) -> String {
    format!("{}/64", Ipv6Addr::from(u128::from(pod_net6) + ((k as u128) << 64)))
}

/// The IPv6 service network (the API server's secondary ClusterIP range).
pub const SERVICE_NET6: (Ipv6Addr, u8) = (Ipv6Addr::new(0xfd43, 0, 0, 0, 0, 0, 0, 0), 112);

/// The cluster's service network (the API server allocates ClusterIPs from it).
pub const SERVICE_NET: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 43, 0, 0), 16);

/// The first pod /16 (10.42.0.0/16, 10.44.0.0/16, … 10.250.0.0/16; never the service
/// network) no prefix in use overlaps.
pub fn choose_pod_net(in_use: &[(Ipv4Addr, u8)]) -> Option<Ipv4Addr> {
    (42..=250u8)
        .map(|b| Ipv4Addr::new(10, b, 0, 0))
        .filter(|net| !overlaps_net(*net, 16, SERVICE_NET.0, SERVICE_NET.1))
        .find(|net| in_use.iter().all(|(p, l)| !overlaps_net(*net, 16, *p, *l)))
}

/// The /24 networks the harness may use, in order of preference: the three documentation
/// networks (RFC 5737), then the benchmarking range 198.18.0.0/15 (RFC 2544).
pub fn candidate_subnets() -> impl Iterator<Item = Ipv4Addr> {
    let docs = [Ipv4Addr::new(192, 0, 2, 0), Ipv4Addr::new(198, 51, 100, 0), Ipv4Addr::new(203, 0, 113, 0)];
    let bench = (0..512u32).map(|k| Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 18, 0, 0)) + (k << 8)));
    docs.into_iter().chain(bench)
}

/// Prefixes (`address`, `length`) named by `ip -4 -o route show table all` and
/// `ip -4 -o addr show` output. Default routes are left out: they overlap everything and
/// a more specific route of ours wins over them.
pub fn parse_prefixes(text: &str) -> Vec<(Ipv4Addr, u8)> {
    const ROUTE_TYPES: [&str; 10] = [
        "unicast",
        "local",
        "broadcast",
        "multicast",
        "anycast",
        "unreachable",
        "prohibit",
        "blackhole",
        "throw",
        "nat",
    ];
    let mut out = Vec::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        // `ip -o addr`: "4: eth0    inet 192.0.2.2/24 brd ..." — the word after "inet".
        let token = if let Some(p) = words.iter().position(|w| *w == "inet") {
            words.get(p + 1).copied()
        } else {
            words.iter().copied().find(|w| !ROUTE_TYPES.contains(w))
        };
        let Some(token) = token else { continue };
        if token == "default" {
            continue;
        }
        let (addr, len) = match token.split_once('/') {
            Some((a, l)) => (a, l.parse::<u8>().ok()),
            None => (token, Some(32)),
        };
        if let (Ok(a), Some(l)) = (addr.parse::<Ipv4Addr>(), len) {
            if l <= 32 && l > 0 {
                out.push((a, l));
            }
        }
    }
    out
}

/// True when the /24 at `net` and `prefix/len` share any address.
pub fn overlaps(net: Ipv4Addr, prefix: Ipv4Addr, len: u8) -> bool {
    overlaps_net(net, 24, prefix, len)
}

/// True when `net/net_len` and `prefix/len` share any address.
pub(crate) fn overlaps_net(net: Ipv4Addr, net_len: u8, prefix: Ipv4Addr, len: u8) -> bool {
    let l = len.min(net_len) as u32;
    let mask = if l == 0 { 0 } else { u32::MAX << (32 - l) };
    u32::from(net) & mask == u32::from(prefix) & mask
}

/// The first candidate /24 that no prefix in use overlaps.
pub fn choose_subnet(in_use: &[(Ipv4Addr, u8)]) -> Option<Ipv4Addr> {
    candidate_subnets().find(|net| in_use.iter().all(|(p, l)| !overlaps(*net, *p, *l)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_interface_limits_and_parse_back() {
        assert_eq!(bridge_ns("a1b2c3"), "kca1b2c3-br");
        assert_eq!(member_ns("a1b2c3", 4), "kca1b2c3-n4");
        assert!(host_veth("a1b2c3").len() <= 15);
        assert_eq!(run_id_of("kca1b2c3-n12"), Some("a1b2c3"));
        assert_eq!(run_id_of("kca1b2c3-br"), Some("a1b2c3"));
        assert_eq!(run_id_of("kca1b2c3h"), Some("a1b2c3"));
        for other in ["kc-n1", "kcxyz-n1", "kca1-n", "kca1-nx", "kca1-foo", "keelson-1", "kca1b2"] {
            assert_eq!(run_id_of(other), None, "{other}");
        }
    }

    #[test]
    fn addresses_follow_the_layout() {
        let net = Ipv4Addr::new(198, 51, 100, 0);
        assert_eq!(host_addr(net), Ipv4Addr::new(198, 51, 100, 1));
        assert_eq!(member_addr(net, 0), Ipv4Addr::new(198, 51, 100, 10));
        assert_eq!(member_addr(net, 4), Ipv4Addr::new(198, 51, 100, 14));
    }

    #[test]
    fn subnet_choice_avoids_routes_and_addresses_in_use() {
        // This sandbox's own uplink: 192.0.2.2/24 with its gateway at 192.0.2.1.
        let routes = "default via 192.0.2.1 dev eth0 \n\
            192.0.2.0/24 dev eth0 proto kernel scope link src 192.0.2.2 \n\
            local 127.0.0.0/8 dev lo table local proto kernel scope host src 127.0.0.1 \n\
            broadcast 192.0.2.255 dev eth0 table local proto kernel scope link src 192.0.2.2 \n";
        let addrs = "4: eth0    inet 192.0.2.2/24 brd 192.0.2.255 scope global eth0\\       valid_lft forever\n";
        let mut used = parse_prefixes(routes);
        used.extend(parse_prefixes(addrs));
        assert!(used.contains(&(Ipv4Addr::new(192, 0, 2, 0), 24)));
        assert!(used.contains(&(Ipv4Addr::new(127, 0, 0, 0), 8)));
        assert!(used.contains(&(Ipv4Addr::new(192, 0, 2, 255), 32)));
        assert!(!used.iter().any(|(_, l)| *l == 0), "default routes are ignored");
        assert_eq!(choose_subnet(&used), Some(Ipv4Addr::new(198, 51, 100, 0)));
        assert_eq!(choose_subnet(&[]), Some(Ipv4Addr::new(192, 0, 2, 0)));
        // A wide route over the documentation nets and half the bench range.
        let wide = [
            (Ipv4Addr::new(192, 0, 0, 0), 16),
            (Ipv4Addr::new(198, 51, 100, 7), 32),
            (Ipv4Addr::new(203, 0, 113, 0), 24),
            (Ipv4Addr::new(198, 18, 0, 0), 16),
        ];
        assert_eq!(choose_subnet(&wide), Some(Ipv4Addr::new(198, 19, 0, 0)));
    }

    #[test]
    fn pod_networks_avoid_routes_in_use() {
        assert_eq!(choose_pod_net(&[]), Some(Ipv4Addr::new(10, 42, 0, 0)));
        let used = [(Ipv4Addr::new(10, 42, 7, 0), 24), (Ipv4Addr::new(10, 43, 0, 0), 16)];
        assert_eq!(choose_pod_net(&used), Some(Ipv4Addr::new(10, 44, 0, 0)));
        assert_eq!(choose_pod_net(&[(Ipv4Addr::new(10, 0, 0, 0), 8)]), None);
        assert_eq!(choose_pod_net(&[(Ipv4Addr::new(10, 42, 0, 0), 16)]), Some(Ipv4Addr::new(10, 44, 0, 0)), "never the service network");
        assert_eq!(pod_cidr(Ipv4Addr::new(10, 42, 0, 0), 3), "10.42.3.0/24");
    }

    #[test]
    fn a_dual_stack_run_takes_two_unique_local_48s_from_one_global_id() {
        let (members, pods) = ula_nets(0x12_3456_789b);
        assert_eq!((members.to_string(), pods.to_string()), ("fd12:3456:789a::".to_string(), "fd12:3456:789b::".to_string()));
        assert_eq!(host_addr6(members).to_string(), "fd12:3456:789a::1");
        assert_eq!(member_addr6(members, 3).to_string(), "fd12:3456:789a::13");
        assert_eq!(pod_cidr6(pods, 0), "fd12:3456:789b::/64");
        assert_eq!(pod_cidr6(pods, 2), "fd12:3456:789b:2::/64");
        // Bits beyond the 40-bit global ID do not leak into the prefix.
        assert_eq!(ula_nets(u64::MAX).0.to_string(), "fdff:ffff:fffe::");
    }
}
