//! Cluster DNS, built into every node agent (no CoreDNS pod): `cluster.local` answered
//! from Service and EndpointSlice reflectors ([`zone::build`], [`answer::answer`], both
//! pure), other names forwarded to the node's own resolvers (REFUSED without any). It
//! listens on UDP and TCP port 53 of the node's address; the proxy sends the
//! `kube-system/kube-dns` ClusterIP there (see keelson-proxy's `NodeInfo::dns`).

pub mod answer;
pub mod zone;

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use hickory_proto::op::{Message, ResponseCode};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::runtime::reflector::Store;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How the DNS server runs.
#[derive(Debug, Clone)]
pub struct DnsConfig {
    pub listen: SocketAddr,
    pub domain: String,
    /// Where names outside the cluster domain go.
    pub upstreams: Vec<SocketAddr>,
}

/// The server could not start.
#[derive(Debug, thiserror::Error)]
pub enum DnsError {
    /// The listen address could not be bound.
    #[error("binding {addr}: {source}")]
    Bind { addr: SocketAddr, #[source] source: std::io::Error },
}

/// The nameservers of a resolv.conf, port 53, other than `except`.
pub fn upstreams_from_resolv_conf(text: &str, except: &[std::net::IpAddr]) -> Vec<SocketAddr> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("nameserver"))
        .filter_map(|ip| ip.trim().parse::<std::net::IpAddr>().ok())
        .filter(|ip| !except.contains(ip))
        .map(|ip| SocketAddr::new(ip, 53))
        .collect()
}

fn reflect<K>(api: Api<K>, changed: Arc<Notify>) -> (Store<K>, tokio::task::JoinHandle<()>)
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    keelson_component::mirror::notifying_reflector(api, changed, "dns")
}

struct Server {
    zone: RwLock<Arc<zone::Zone>>,
    upstreams: Vec<SocketAddr>,
}

impl Server {
    /// The reply to the request in `bytes`, or None for garbage.
    async fn handle(&self, bytes: &[u8]) -> Option<Vec<u8>> {
        let req = Message::from_vec(bytes).ok()?;
        let zone = self.zone.read().expect("zone lock").clone();
        match answer::answer(&zone, &req) {
            answer::Outcome::Reply(m) => m.to_vec().ok(),
            answer::Outcome::Forward => match self.forward(bytes).await {
                Some(r) => Some(r),
                None => Message::error_msg(req.metadata.id, req.metadata.op_code, if self.upstreams.is_empty() { ResponseCode::Refused } else { ResponseCode::ServFail }).to_vec().ok(),
            },
        }
    }

    /// Relays the request to each upstream in turn until one answers.
    async fn forward(&self, bytes: &[u8]) -> Option<Vec<u8>> {
        for up in &self.upstreams {
            let bind: SocketAddr = if up.is_ipv4() { "0.0.0.0:0".parse().ok()? } else { "[::]:0".parse().ok()? };
            let Ok(sock) = UdpSocket::bind(bind).await else { continue };
            if sock.send_to(bytes, up).await.is_err() {
                continue;
            }
            let mut buf = vec![0u8; 4096];
            if let Ok(Ok((n, _))) = tokio::time::timeout(Duration::from_secs(2), sock.recv_from(&mut buf)).await {
                buf.truncate(n);
                return Some(buf);
            }
        }
        None
    }
}

/// Cuts a UDP reply that does not fit 512 bytes down to its header and question with
/// the TC bit, so the client asks again over TCP.
fn fit_udp(reply: Vec<u8>) -> Vec<u8> {
    if reply.len() <= 512 {
        return reply;
    }
    match Message::from_vec(&reply) {
        Ok(m) => m.truncate().to_vec().unwrap_or(reply),
        Err(_) => reply,
    }
}

/// Serves DNS until `shutdown`.
pub async fn run(client: kube::Client, cfg: DnsConfig, shutdown: CancellationToken) -> Result<(), DnsError> {
    let udp = Arc::new(UdpSocket::bind(cfg.listen).await.map_err(|source| DnsError::Bind { addr: cfg.listen, source })?);
    let tcp = TcpListener::bind(cfg.listen).await.map_err(|source| DnsError::Bind { addr: cfg.listen, source })?;
    let changed = Arc::new(Notify::new());
    let (services, svc_task) = reflect(Api::<Service>::all(client.clone()), changed.clone());
    let (slices, slice_task) = reflect(Api::<EndpointSlice>::all(client), changed.clone());
    let server = Arc::new(Server { zone: RwLock::new(Arc::new(zone::Zone { domain: cfg.domain.clone(), ..Default::default() })), upstreams: cfg.upstreams.clone() });
    tracing::info!(listen = %cfg.listen, upstreams = ?cfg.upstreams, "cluster DNS serving");
    let rebuild = {
        let server = server.clone();
        let domain = cfg.domain.clone();
        async move {
            loop {
                changed.notified().await;
                tokio::time::sleep(Duration::from_millis(20)).await;
                let span = tracing::debug_span!("dns-sync");
                let _e = span.enter();
                let (svcs, sls) = (services.state(), slices.state());
                let svcs: Vec<&Service> = svcs.iter().map(|s| s.as_ref()).collect();
                let sls: Vec<&EndpointSlice> = sls.iter().map(|s| s.as_ref()).collect();
                let z = zone::build(&domain, &svcs, &sls);
                *server.zone.write().expect("zone lock") = Arc::new(z);
            }
        }
    };
    let serve_udp = {
        let server = server.clone();
        let udp = udp.clone();
        async move {
            let mut buf = vec![0u8; 4096];
            loop {
                let Ok((n, from)) = udp.recv_from(&mut buf).await else { continue };
                let (server, udp, req) = (server.clone(), udp.clone(), buf[..n].to_vec());
                tokio::spawn(async move {
                    if let Some(reply) = server.handle(&req).await {
                        let _ = udp.send_to(&fit_udp(reply), from).await;
                    }
                });
            }
        }
    };
    let serve_tcp = {
        let server = server.clone();
        async move {
            loop {
                let Ok((mut conn, _)) = tcp.accept().await else { continue };
                let server = server.clone();
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(Duration::from_secs(10), async move {
                        let len = conn.read_u16().await? as usize;
                        let mut req = vec![0u8; len];
                        conn.read_exact(&mut req).await?;
                        if let Some(reply) = server.handle(&req).await {
                            conn.write_u16(reply.len() as u16).await?;
                            conn.write_all(&reply).await?;
                        }
                        Ok::<_, std::io::Error>(())
                    })
                    .await;
                });
            }
        }
    };
    tokio::select! {
        _ = shutdown.cancelled() => {}
        _ = rebuild => {}
        _ = serve_udp => {}
        _ = serve_tcp => {}
    }
    svc_task.abort();
    slice_task.abort();
    Ok(())
}
