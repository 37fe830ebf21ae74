//! The client-side API balancer: a TCP forwarder on loopback in front of every server's
//! API. A component's kube-rs client talks to `https://127.0.0.1:<port>` and never
//! notices which server answers: each new connection goes to the first server in order of
//! preference (the component's own server first) that is healthy, and connections to a
//! server that stops being healthy are closed so that long watches move too.
//!
//! Health is `GET /readyz` over TLS every `check_every` (the API server's readiness
//! includes a linearizable read of its store, so a server cut off from the quorum is
//! unhealthy), plus passive marking: a server that refuses a connection is unhealthy at
//! once. TLS goes end to end through the forwarder; every serving certificate names
//! `127.0.0.1`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// What the balancer does not forgive.
#[derive(Debug, thiserror::Error)]
pub enum BalancerError {
    #[error("binding the balancer's loopback port: {0}")]
    Bind(#[source] std::io::Error),
    #[error("the cluster CA certificate: {0}")]
    Ca(String),
    #[error("no API server address given")]
    NoServers,
}

/// How often the balancer checks each server, and how long a check may take.
#[derive(Clone, Copy, Debug)]
pub struct HealthTimings {
    pub check_every: Duration,
    pub timeout: Duration,
}

impl Default for HealthTimings {
    fn default() -> Self {
        Self { check_every: Duration::from_secs(2), timeout: Duration::from_secs(2) }
    }
}

struct Server {
    addr: SocketAddr,
    healthy: bool,
    /// Cancelled (and replaced) when the server is marked unhealthy: closes every
    /// connection forwarded to it.
    epoch: CancellationToken,
}

struct Pool {
    servers: Vec<Server>,
}

impl Pool {
    /// The servers to try for a new connection: healthy ones in order of preference, then
    /// the unhealthy ones (a check may be stale; better a try than no answer).
    fn candidates(&self) -> Vec<(SocketAddr, CancellationToken)> {
        let healthy = self.servers.iter().filter(|s| s.healthy);
        let unhealthy = self.servers.iter().filter(|s| !s.healthy);
        healthy.chain(unhealthy).map(|s| (s.addr, s.epoch.clone())).collect()
    }

    fn mark(&mut self, addr: SocketAddr, healthy: bool) {
        if let Some(s) = self.servers.iter_mut().find(|s| s.addr == addr) {
            if s.healthy && !healthy {
                tracing::info!(server = %addr, "API server unhealthy; moving its connections");
                s.epoch.cancel();
                s.epoch = CancellationToken::new();
            } else if !s.healthy && healthy {
                tracing::info!(server = %addr, "API server healthy again");
            }
            s.healthy = healthy;
        }
    }
}

/// A running balancer.
#[derive(Clone)]
pub struct ApiBalancer {
    local: SocketAddr,
    pool: Arc<Mutex<Pool>>,
    tls: Arc<rustls::ClientConfig>,
}

impl ApiBalancer {
    /// Starts forwarding from a fresh loopback port to `servers` (in order of preference;
    /// the first is the component's own server) until `shutdown`.
    pub async fn start(servers: Vec<SocketAddr>, ca_pem: &str, health: HealthTimings, shutdown: CancellationToken) -> Result<Self, BalancerError> {
        if servers.is_empty() {
            return Err(BalancerError::NoServers);
        }
        let listener = TcpListener::bind("127.0.0.1:0").await.map_err(BalancerError::Bind)?;
        let local = listener.local_addr().map_err(BalancerError::Bind)?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_pemfile::certs(&mut ca_pem.as_bytes()) {
            let cert = cert.map_err(|e| BalancerError::Ca(e.to_string()))?;
            roots.add(cert).map_err(|e| BalancerError::Ca(e.to_string()))?;
        }
        let tls = Arc::new(rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth());
        let pool = Pool { servers: servers.into_iter().map(|addr| Server { addr, healthy: true, epoch: CancellationToken::new() }).collect() };
        let b = Self { local, pool: Arc::new(Mutex::new(pool)), tls };
        tokio::spawn(b.clone().accept_loop(listener, shutdown.clone()));
        tokio::spawn(b.clone().health_loop(health, shutdown));
        Ok(b)
    }

    /// The loopback address clients connect to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// `https://127.0.0.1:<port>`, the URL a client of the balancer uses.
    pub fn url(&self) -> String {
        format!("https://{}", self.local)
    }

    /// Adds servers learnt later (kept after the ones known), in order.
    pub fn add_servers(&self, addrs: impl IntoIterator<Item = SocketAddr>) {
        let mut pool = self.pool.lock().expect("balancer lock");
        for addr in addrs {
            if !pool.servers.iter().any(|s| s.addr == addr) {
                tracing::info!(server = %addr, "API server added to the balancer");
                pool.servers.push(Server { addr, healthy: true, epoch: CancellationToken::new() });
            }
        }
    }

    /// Every server known, in order of preference, with its health.
    pub fn servers(&self) -> Vec<(SocketAddr, bool)> {
        self.pool.lock().expect("balancer lock").servers.iter().map(|s| (s.addr, s.healthy)).collect()
    }

    async fn accept_loop(self, listener: TcpListener, shutdown: CancellationToken) {
        loop {
            let inbound = tokio::select! {
                _ = shutdown.cancelled() => return,
                r = listener.accept() => match r {
                    Ok((s, _)) => s,
                    Err(e) => {
                        tracing::warn!(error = %e, "balancer accept");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            tokio::spawn(self.clone().forward(inbound, shutdown.clone()));
        }
    }

    async fn forward(self, mut inbound: TcpStream, shutdown: CancellationToken) {
        let candidates = self.pool.lock().expect("balancer lock").candidates();
        for (addr, epoch) in candidates {
            match tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(addr)).await {
                Ok(Ok(mut outbound)) => {
                    let _ = inbound.set_nodelay(true);
                    let _ = outbound.set_nodelay(true);
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = epoch.cancelled() => {}
                        _ = shutdown.cancelled() => {}
                    }
                    return;
                }
                _ => self.pool.lock().expect("balancer lock").mark(addr, false),
            }
        }
        tracing::debug!("no API server accepted a connection");
    }

    /// Servers start out healthy; the first check comes one interval after start.
    async fn health_loop(self, timings: HealthTimings, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(timings.check_every) => {}
            }
            let addrs: Vec<SocketAddr> = self.servers().into_iter().map(|(a, _)| a).collect();
            let checks = addrs.iter().map(|&a| {
                let tls = self.tls.clone();
                async move { (a, tokio::time::timeout(timings.timeout, ready(a, tls)).await.unwrap_or(false)) }
            });
            for (addr, healthy) in futures::future::join_all(checks).await {
                self.pool.lock().expect("balancer lock").mark(addr, healthy);
            }
        }
    }
}

/// `GET /readyz` over TLS answered with 200.
async fn ready(addr: SocketAddr, tls: Arc<rustls::ClientConfig>) -> bool {
    let Ok(tcp) = TcpStream::connect(addr).await else { return false };
    let name = rustls::pki_types::ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
    let Ok(mut stream) = tokio_rustls::TlsConnector::from(tls).connect(name, tcp).await else { return false };
    let req = "GET /readyz HTTP/1.1\r\nHost: kubernetes\r\nUser-Agent: keelson-balancer\r\nConnection: close\r\n\r\n";
    if stream.write_all(req.as_bytes()).await.is_err() {
        return false;
    }
    let mut head = Vec::new();
    let mut buf = [0u8; 256];
    while !head.windows(2).any(|w| w == b"\r\n") && head.len() < 1024 {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    head.starts_with(b"HTTP/1.1 200")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    fn pool(ports: &[u16]) -> Pool {
        Pool { servers: ports.iter().map(|&p| Server { addr: addr(p), healthy: true, epoch: CancellationToken::new() }).collect() }
    }

    #[test]
    fn prefers_healthy_servers_in_order_then_the_rest() {
        let mut p = pool(&[1, 2, 3]);
        let order = |p: &Pool| p.candidates().into_iter().map(|(a, _)| a.port()).collect::<Vec<_>>();
        assert_eq!(order(&p), vec![1, 2, 3]);
        p.mark(addr(1), false);
        assert_eq!(order(&p), vec![2, 3, 1]);
        p.mark(addr(3), false);
        assert_eq!(order(&p), vec![2, 1, 3]);
        p.mark(addr(1), true);
        assert_eq!(order(&p), vec![1, 2, 3]);
    }

    #[test]
    fn marking_unhealthy_closes_that_servers_connections_only() {
        let mut p = pool(&[1, 2]);
        let one = p.servers[0].epoch.clone();
        let two = p.servers[1].epoch.clone();
        p.mark(addr(1), false);
        assert!(one.is_cancelled());
        assert!(!two.is_cancelled());
        // Marking again does not cancel the fresh epoch; recovering does not either.
        let fresh = p.servers[0].epoch.clone();
        p.mark(addr(1), false);
        p.mark(addr(1), true);
        assert!(!fresh.is_cancelled());
    }

    #[tokio::test]
    async fn forwards_to_the_first_server_that_accepts() {
        // Server 1 is a port nobody listens on; server 2 echoes.
        let dead = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let dead_addr = dead.local_addr().unwrap();
        drop(dead);
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let echo_addr = echo.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        let ca = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap().cert.pem();
        let token = CancellationToken::new();
        let timings = HealthTimings { check_every: Duration::from_secs(3600), timeout: Duration::from_millis(200) };
        let b = ApiBalancer::start(vec![dead_addr, echo_addr], &ca, timings, token.clone()).await.unwrap();
        let mut c = TcpStream::connect(b.local_addr()).await.unwrap();
        c.write_all(b"ping").await.unwrap();
        let mut got = [0u8; 4];
        c.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"ping");
        assert!(b.servers().iter().any(|&(a, h)| a == dead_addr && !h), "the refusing server is marked unhealthy");
        token.cancel();
    }
}
