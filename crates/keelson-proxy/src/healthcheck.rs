//! Health check node ports, as kube-proxy serves them: a `type: LoadBalancer` Service
//! with `externalTrafficPolicy: Local` has a `spec.healthCheckNodePort`, and on that
//! port of every node address the proxy answers HTTP: 200 while this node has a local
//! endpoint of the Service, 503 while it has none, so a load balancer outside sends the
//! Service's traffic only to nodes that can serve it without leaving the node. What each
//! port answers ([`desired`], [`response`]) is pure; [`HealthServers`] keeps one listener
//! per port and address.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::render::{targets, Family, NodeInfo};

/// What one health check node port answers for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    pub namespace: String,
    pub name: String,
    /// The Service's distinct endpoint addresses on this node.
    pub local_endpoints: usize,
}

/// The health check node ports this node serves, by port. Two Services naming one port:
/// the first by namespace and name keeps it.
pub fn desired(services: &[&Service], slices: &[&EndpointSlice], node: &NodeInfo) -> BTreeMap<u16, HealthCheck> {
    let mut sorted: Vec<&Service> = services.to_vec();
    sorted.sort_by(|a, b| (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name)));
    let mut out = BTreeMap::new();
    for svc in sorted {
        let Some(spec) = svc.spec.as_ref() else { continue };
        if spec.type_.as_deref() != Some("LoadBalancer") || spec.external_traffic_policy.as_deref() != Some("Local") {
            continue;
        }
        let Some(port) = spec.health_check_node_port.and_then(|p| u16::try_from(p).ok()) else { continue };
        let ports = spec.ports.iter().flatten();
        let local: BTreeSet<IpAddr> = ports.flat_map(|p| Family::ALL.into_iter().flat_map(move |f| targets(svc, p, slices, &node.name, f))).filter(|t| t.local).map(|t| t.ip).collect();
        out.entry(port).or_insert_with(|| HealthCheck {
            namespace: svc.metadata.namespace.clone().unwrap_or_default(),
            name: svc.metadata.name.clone().unwrap_or_default(),
            local_endpoints: local.len(),
        });
    }
    out
}

/// The whole HTTP/1.1 answer to a health check (kube-proxy's body and headers).
pub fn response(check: &HealthCheck) -> String {
    let body = format!(
        "{{\"service\":{{\"namespace\":\"{}\",\"name\":\"{}\"}},\"localEndpoints\":{},\"serviceProxyHealthy\":true}}",
        check.namespace, check.name, check.local_endpoints
    );
    let status = if check.local_endpoints > 0 { "200 OK" } else { "503 Service Unavailable" };
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nX-Content-Type-Options: nosniff\r\nLoad-Balancing-Endpoint-Weight: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        check.local_endpoints,
        body.len()
    )
}

/// The listeners of the health check node ports, kept to [`desired`]'s ports; every
/// listener stops with `shutdown` or when its port is no longer wanted.
pub struct HealthServers {
    addresses: Vec<IpAddr>,
    shutdown: CancellationToken,
    by_port: BTreeMap<u16, (watch::Sender<HealthCheck>, CancellationToken)>,
}

impl HealthServers {
    pub fn new(addresses: Vec<IpAddr>, shutdown: CancellationToken) -> Self {
        Self { addresses, shutdown, by_port: BTreeMap::new() }
    }

    /// Starts, changes and stops listeners so that exactly `want` is served.
    pub async fn update(&mut self, want: BTreeMap<u16, HealthCheck>) {
        let gone: Vec<u16> = self.by_port.keys().filter(|p| !want.contains_key(p)).copied().collect();
        for port in gone {
            if let Some((_, stop)) = self.by_port.remove(&port) {
                stop.cancel();
            }
        }
        for (port, check) in want {
            if let Some((tx, _)) = self.by_port.get(&port) {
                tx.send_if_modified(|have| std::mem::replace(have, check.clone()) != check);
                continue;
            }
            let (tx, rx) = watch::channel(check);
            let stop = self.shutdown.child_token();
            for ip in &self.addresses {
                let addr = SocketAddr::new(*ip, port);
                match TcpListener::bind(addr).await {
                    Ok(l) => {
                        tokio::spawn(serve(l, rx.clone(), stop.clone()));
                    }
                    Err(e) => tracing::warn!(%addr, error = %e, "health check node port not served"),
                }
            }
            self.by_port.insert(port, (tx, stop));
        }
    }
}

impl Drop for HealthServers {
    fn drop(&mut self) {
        for (_, stop) in self.by_port.values() {
            stop.cancel();
        }
    }
}

/// Answers every connection with the current check until `stop`.
async fn serve(listener: TcpListener, check: watch::Receiver<HealthCheck>, stop: CancellationToken) {
    loop {
        let (mut conn, _) = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(c) => c,
                Err(_) => continue,
            },
        };
        let answer = response(&check.borrow());
        tokio::spawn(async move {
            // The request head (bounded), then the answer; a slow client gets 2 s.
            let mut head = [0u8; 4096];
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), conn.read(&mut head)).await;
            let _ = conn.write_all(answer.as_bytes()).await;
            let _ = conn.shutdown().await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node() -> NodeInfo {
        NodeInfo { name: "n1".into(), addresses: vec!["192.168.5.2".parse().unwrap()], pod_cidrs: vec![], dns: None }
    }

    fn svc(name: &str, spec: serde_json::Value) -> Service {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "d"}, "spec": spec})).unwrap()
    }

    fn slice(name: &str, eps: &[(&str, &str)]) -> EndpointSlice {
        let endpoints: Vec<_> = eps.iter().map(|(ip, node)| json!({"addresses": [ip], "nodeName": node, "conditions": {"ready": true}})).collect();
        serde_json::from_value(json!({"metadata": {"name": format!("{name}-0"), "namespace": "d", "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4", "endpoints": endpoints, "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]})).unwrap()
    }

    #[test]
    fn local_load_balancers_answer_with_their_local_endpoints() {
        let lb = |hc: i32| json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local", "healthCheckNodePort": hc, "ports": [{"name": "http", "port": 80}]});
        let services = [svc("web", lb(30100)), svc("idle", lb(30101)), svc("cluster", json!({"type": "LoadBalancer", "healthCheckNodePort": 30102, "ports": [{"name": "http", "port": 80}]})), svc("again", lb(30100))];
        let slices = [slice("web", &[("10.42.1.2", "n1"), ("10.42.1.3", "n1"), ("10.42.2.2", "n2")]), slice("idle", &[("10.42.2.3", "n2")])];
        let s: Vec<&Service> = services.iter().collect();
        let e: Vec<&EndpointSlice> = slices.iter().collect();
        let got = desired(&s, &e, &node());
        let summary: Vec<(u16, &str, usize)> = got.iter().map(|(p, c)| (*p, c.name.as_str(), c.local_endpoints)).collect();
        assert_eq!(summary, [(30100, "again", 0), (30101, "idle", 0)], "the first by name keeps a contested port; Cluster policy serves none");
        let web_only = desired(&s[..1], &e, &node());
        assert_eq!(web_only[&30100].local_endpoints, 2);
        let ok = response(&web_only[&30100]);
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n") && ok.contains("Load-Balancing-Endpoint-Weight: 2\r\n"), "{ok}");
        assert!(ok.ends_with("{\"service\":{\"namespace\":\"d\",\"name\":\"web\"},\"localEndpoints\":2,\"serviceProxyHealthy\":true}"), "{ok}");
        assert!(response(&got[&30101]).starts_with("HTTP/1.1 503 Service Unavailable\r\n"));
    }
}
