//! A pod's resolv.conf (nameservers, search path, options) from its `dnsPolicy` and
//! `dnsConfig`, as the kubelet decides it (pure):
//!
//! - `ClusterFirst` (the default): the cluster DNS, the search path
//!   `<ns>.svc.<domain> svc.<domain> <domain>` then the node's, `ndots:5`; a pod on the
//!   host network gets `Default` instead, unless its policy is `ClusterFirstWithHostNet`;
//!   without a cluster DNS address it gets `Default` too;
//! - `Default`: the node's own resolv.conf;
//! - `None`: only what `dnsConfig` says.
//!
//! `dnsConfig` nameservers and searches are appended (no duplicates), options override by
//! name; at most 3 nameservers and 32 searches are kept, as the kubelet does.

use k8s_openapi::api::core::v1::Pod;

const MAX_NAMESERVERS: usize = 3;
const MAX_SEARCHES: usize = 32;

/// The parts of a resolv.conf.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResolvConf {
    pub servers: Vec<String>,
    pub searches: Vec<String>,
    pub options: Vec<String>,
}

/// Reads the nameserver, search/domain and options lines of a resolv.conf.
pub fn parse_resolv_conf(text: &str) -> ResolvConf {
    let mut r = ResolvConf::default();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        match words.next() {
            Some("nameserver") => r.servers.extend(words.next().map(str::to_string)),
            Some("search" | "domain") => r.searches = words.map(str::to_string).collect(),
            Some("options") => r.options.extend(words.map(str::to_string)),
            _ => {}
        }
    }
    r
}

fn push_unique(list: &mut Vec<String>, items: impl IntoIterator<Item = String>) {
    for i in items {
        if !list.contains(&i) {
            list.push(i);
        }
    }
}

fn option_name(o: &str) -> &str {
    o.split_once(':').map_or(o, |(n, _)| n)
}

/// The pod's DNS settings, given the cluster DNS addresses, the cluster domain and the
/// node's own resolv.conf.
pub fn pod_dns(pod: &Pod, cluster_dns: &[String], domain: &str, node: &ResolvConf) -> ResolvConf {
    let spec = pod.spec.as_ref();
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let host_network = spec.and_then(|s| s.host_network).unwrap_or(false);
    let policy = spec.and_then(|s| s.dns_policy.as_deref()).unwrap_or("ClusterFirst");
    let cluster = match policy {
        "ClusterFirstWithHostNet" => true,
        "ClusterFirst" => !host_network,
        _ => false,
    };
    let mut out = if policy == "None" {
        ResolvConf::default()
    } else if cluster && !cluster_dns.is_empty() {
        let mut searches = vec![format!("{ns}.svc.{domain}"), format!("svc.{domain}"), domain.to_string()];
        push_unique(&mut searches, node.searches.iter().cloned());
        ResolvConf { servers: cluster_dns.to_vec(), searches, options: vec!["ndots:5".into()] }
    } else {
        node.clone()
    };
    if let Some(cfg) = spec.and_then(|s| s.dns_config.as_ref()) {
        push_unique(&mut out.servers, cfg.nameservers.iter().flatten().cloned());
        push_unique(&mut out.searches, cfg.searches.iter().flatten().cloned());
        for o in cfg.options.iter().flatten() {
            let text = match &o.value {
                Some(v) => format!("{}:{v}", o.name.as_deref().unwrap_or("")),
                None => o.name.clone().unwrap_or_default(),
            };
            let name = option_name(&text).to_string();
            out.options.retain(|e| option_name(e) != name);
            out.options.push(text);
        }
    }
    out.servers.truncate(MAX_NAMESERVERS);
    out.searches.truncate(MAX_SEARCHES);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> Pod {
        let mut s = json!({"containers": [{"name": "c"}]});
        for (k, v) in spec.as_object().unwrap() {
            s[k.as_str()] = v.clone();
        }
        serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "shop"}, "spec": s})).unwrap()
    }

    fn node() -> ResolvConf {
        parse_resolv_conf("# comment\nnameserver 192.168.1.1\nnameserver 192.168.1.2\nsearch corp.example\noptions edns0\n")
    }

    const DNS: &str = "10.43.0.10";

    #[test]
    fn cluster_first_is_the_cluster_dns_with_the_kubernetes_search_path() {
        let r = pod_dns(&pod(json!({})), &[DNS.into()], "cluster.local", &node());
        assert_eq!(r.servers, [DNS]);
        assert_eq!(r.searches, ["shop.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"]);
        assert_eq!(r.options, ["ndots:5"]);
    }

    #[test]
    fn host_network_pods_use_the_node_unless_cluster_first_with_host_net() {
        assert_eq!(pod_dns(&pod(json!({"hostNetwork": true})), &[DNS.into()], "cluster.local", &node()), node());
        let r = pod_dns(&pod(json!({"hostNetwork": true, "dnsPolicy": "ClusterFirstWithHostNet"})), &[DNS.into()], "cluster.local", &node());
        assert_eq!(r.servers, [DNS]);
    }

    #[test]
    fn default_is_the_node_and_cluster_first_without_cluster_dns_too() {
        assert_eq!(pod_dns(&pod(json!({"dnsPolicy": "Default"})), &[DNS.into()], "cluster.local", &node()), node());
        assert_eq!(pod_dns(&pod(json!({})), &[], "cluster.local", &node()), node());
    }

    #[test]
    fn none_takes_only_dns_config_and_options_override_by_name() {
        let p = pod(json!({"dnsPolicy": "None", "dnsConfig": {"nameservers": ["1.1.1.1"], "searches": ["a.example"], "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}]}}));
        let r = pod_dns(&p, &[DNS.into()], "cluster.local", &node());
        assert_eq!(r, ResolvConf { servers: vec!["1.1.1.1".into()], searches: vec!["a.example".into()], options: vec!["ndots:2".into(), "edns0".into()] });
        let p = pod(json!({"dnsConfig": {"nameservers": ["1.1.1.1", DNS, "8.8.8.8", "9.9.9.9"], "options": [{"name": "ndots", "value": "1"}]}}));
        let r = pod_dns(&p, &[DNS.into()], "cluster.local", &node());
        assert_eq!(r.servers, [DNS, "1.1.1.1", "8.8.8.8"], "no duplicates, at most three");
        assert_eq!(r.options, ["ndots:1"]);
    }
}
