//! The executor: HTTP and HTTPS listeners (HTTP/1.1, and HTTP/2 by ALPN or prior
//! knowledge), each request decided by the current [`RouteTable`] and proxied to a
//! ready endpoint over HTTP/1.1. Endpoints are tried round robin; one that refuses the
//! connection is passed over for the next. Bodies stream both ways; an `Upgrade` request
//! (WebSocket) that the backend accepts with 101 becomes a byte pipe between the two
//! upgraded connections. Over HTTP/2 the same is asked for with an extended CONNECT
//! (RFC 8441, advertised in the server's SETTINGS), which [`crate::upgrade`] turns into
//! an HTTP/1.1 upgrade to the backend; a CONNECT without `:protocol` (a plain tunnel
//! request, either version) is refused with 405.
//! `X-Forwarded-For` and `X-Real-IP` are set to the client's address (an incoming
//! `X-Forwarded-For` is replaced, not trusted), `X-Forwarded-Proto` and
//! `X-Forwarded-Host` to what the client asked for.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri, Version};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::routes::{Backend, Decision, RouteTable};

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub(crate) type Body = BoxBody<Bytes, BoxError>;

/// How long a connection to an endpoint may take before the next one is tried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a TLS handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long open connections get to finish when the proxy stops.
const DRAIN: Duration = Duration::from_secs(5);

/// What every request reads.
pub struct Shared {
    pub table: RwLock<Arc<RouteTable>>,
    /// The HTTPS port redirects point to (`None`: no HTTPS listener, no redirects).
    pub https_port: Option<u16>,
}

impl Shared {
    fn table(&self) -> Arc<RouteTable> {
        self.table.read().expect("route table lock").clone()
    }
}

/// Serves plain HTTP on `listener` until `shutdown`.
pub async fn serve_http(listener: TcpListener, shared: Arc<Shared>, shutdown: CancellationToken) {
    loop {
        let (conn, peer) = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = listener.accept() => match r { Ok(c) => c, Err(_) => continue },
        };
        no_delay(&conn);
        tokio::spawn(serve_connection(conn, peer, false, shared.clone(), shutdown.clone()));
    }
}

/// Serves HTTPS on `listener` until `shutdown`; each handshake runs in its own task.
pub async fn serve_https(listener: TcpListener, acceptor: TlsAcceptor, shared: Arc<Shared>, shutdown: CancellationToken) {
    loop {
        let (conn, peer) = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = listener.accept() => match r { Ok(c) => c, Err(_) => continue },
        };
        no_delay(&conn);
        let (acceptor, shared, shutdown) = (acceptor.clone(), shared.clone(), shutdown.clone());
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(conn)).await {
                Ok(Ok(tls)) => serve_connection(tls, peer, true, shared, shutdown).await,
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "ingress TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "ingress TLS handshake timed out"),
            }
        });
    }
}

/// Answers leave as soon as they are written: a response's head and body go out as
/// separate writes, and Nagle's algorithm would hold the second back for the peer's
/// delayed ACK (40 ms on Linux).
fn no_delay(conn: &TcpStream) {
    if let Err(e) = conn.set_nodelay(true) {
        tracing::debug!(error = %e, "TCP_NODELAY not set");
    }
}

async fn serve_connection<IO>(io: IO, peer: SocketAddr, tls: bool, shared: Arc<Shared>, shutdown: CancellationToken)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let svc = hyper::service::service_fn(move |req| {
        let shared = shared.clone();
        async move { Ok::<_, Infallible>(handle(&shared, peer, tls, req).await) }
    });
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    // RFC 8441: HTTP/2 clients may ask for WebSocket (or another Upgrade protocol) with
    // an extended CONNECT once the SETTINGS say so.
    builder.http2().enable_connect_protocol();
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), svc);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(DRAIN, conn).await;
        }
    }
}

pub(crate) fn text(status: StatusCode, body: String) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(body)).map_err(|e| match e {}).boxed());
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

/// The host a request names: its Host header, else (HTTP/2) the URI's authority.
fn request_host<B>(req: &Request<B>) -> String {
    let h = req.headers().get(header::HOST).and_then(|h| h.to_str().ok());
    h.map(str::to_string).or_else(|| req.uri().authority().map(|a| a.to_string())).unwrap_or_default()
}

async fn handle(shared: &Shared, peer: SocketAddr, tls: bool, req: Request<Incoming>) -> Response<Body> {
    let host = request_host(&req);
    let span = tracing::debug_span!("ingress-request", method = %req.method(), %host, path = %req.uri().path(), tls, %peer);
    async move {
        let name = crate::host::normalize(&host);
        let decision = shared.table().route(&name, req.uri().path(), tls);
        let resp = match decision {
            Decision::NotFound => text(StatusCode::NOT_FOUND, "default backend - 404\n".into()),
            Decision::Unavailable(b) => text(StatusCode::SERVICE_UNAVAILABLE, format!("503 Service Unavailable: {} has no ready endpoints\n", b.name)),
            Decision::RedirectHttps => redirect(&name, shared.https_port, req.uri()),
            Decision::Proxy(b) => match crate::upgrade::extended_connect(&req) {
                Some(protocol) => {
                    let protocol = protocol.to_string();
                    crate::upgrade::forward_connect(req, &b, peer, tls, host, protocol).await
                }
                None if req.method() == Method::CONNECT => text(StatusCode::METHOD_NOT_ALLOWED, "405 Method Not Allowed: CONNECT is served only with a :protocol (RFC 8441)\n".into()),
                None => forward(req, &b, peer, tls, host).await,
            },
        };
        tracing::debug!(status = resp.status().as_u16(), "answered");
        resp
    }
    .instrument(span)
    .await
}

fn redirect(host: &str, https_port: Option<u16>, uri: &Uri) -> Response<Body> {
    let port = match https_port {
        Some(443) | None => String::new(),
        Some(p) => format!(":{p}"),
    };
    let pq = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let mut r = text(StatusCode::PERMANENT_REDIRECT, format!("redirecting to https://{host}{port}{pq}\n"));
    if let Ok(v) = HeaderValue::from_str(&format!("https://{host}{port}{pq}")) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r
}

/// Headers that belong to one connection and are not passed on (RFC 9110 §7.6.1).
const HOP_BY_HOP: [&str; 8] = ["connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization", "te", "trailer", "transfer-encoding"];

fn wants_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
        && headers.get_all(header::CONNECTION).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(',')).any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
}

/// Removes hop-by-hop headers, and the headers the Connection header names; `Upgrade`
/// and `Connection: upgrade` stay when `upgrade`.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap, upgrade: bool) {
    let named: Vec<HeaderName> = headers.get_all(header::CONNECTION).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(',')).filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok()).collect();
    for n in named.iter().filter(|n| *n != header::UPGRADE) {
        headers.remove(n);
    }
    for h in HOP_BY_HOP {
        headers.remove(h);
    }
    if upgrade {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    } else {
        headers.remove(header::UPGRADE);
    }
}

async fn connect(backend: &Backend) -> Option<(TcpStream, SocketAddr)> {
    for ep in backend.rotation() {
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(ep)).await {
            Ok(Ok(s)) => {
                no_delay(&s);
                return Some((s, ep));
            }
            Ok(Err(e)) => tracing::debug!(endpoint = %ep, error = %e, "endpoint refused; trying the next"),
            Err(_) => tracing::debug!(endpoint = %ep, "endpoint did not answer; trying the next"),
        }
    }
    None
}

/// Sets `Host` and the `X-Forwarded-*` headers of a request to a backend.
pub(crate) fn set_forwarded(h: &mut HeaderMap, host: &str, peer: SocketAddr, tls: bool) {
    if let Ok(v) = HeaderValue::from_str(host) {
        h.insert(header::HOST, v.clone());
        h.insert("x-forwarded-host", v);
    }
    if let Ok(v) = HeaderValue::from_str(&peer.ip().to_string()) {
        h.insert("x-forwarded-for", v.clone());
        h.insert("x-real-ip", v);
    }
    h.insert("x-forwarded-proto", HeaderValue::from_static(if tls { "https" } else { "http" }));
}

/// An HTTP/1.1 connection (with upgrades) to the first endpoint of `backend` that
/// accepts one; the 502 to answer otherwise.
pub(crate) async fn open<B>(backend: &Backend) -> Result<hyper::client::conn::http1::SendRequest<B>, Response<Body>>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let Some((stream, ep)) = connect(backend).await else {
        return Err(text(StatusCode::BAD_GATEWAY, format!("502 Bad Gateway: no endpoint of {} accepted a connection\n", backend.name)));
    };
    tracing::debug!(backend = %backend.name, endpoint = %ep, "forwarding");
    let (sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(stream)).await {
        Ok(x) => x,
        Err(e) => return Err(text(StatusCode::BAD_GATEWAY, format!("502 Bad Gateway: {} ({ep}): {e}\n", backend.name))),
    };
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(error = %e, "endpoint connection");
        }
    });
    Ok(sender)
}

/// Once both sides have switched protocols, copies bytes between them both ways until
/// either ends.
pub(crate) fn splice(client_side: hyper::upgrade::OnUpgrade, backend_side: hyper::upgrade::OnUpgrade) {
    let span = tracing::Span::current();
    tokio::spawn(
        async move {
            match futures::future::try_join(client_side, backend_side).await {
                Ok((c, b)) => match tokio::io::copy_bidirectional(&mut TokioIo::new(c), &mut TokioIo::new(b)).await {
                    Ok((up, down)) => tracing::debug!(up, down, "upgraded connection closed"),
                    Err(e) => tracing::debug!(error = %e, "upgraded connection ended"),
                },
                Err(e) => tracing::debug!(error = %e, "upgrade not completed"),
            }
        }
        .instrument(span),
    );
}

async fn forward(mut req: Request<Incoming>, backend: &Backend, peer: SocketAddr, tls: bool, host: String) -> Response<Body> {
    let upgrade = req.version() == Version::HTTP_11 && wants_upgrade(req.headers());
    let client_side = upgrade.then(|| hyper::upgrade::on(&mut req));
    let (mut parts, body) = req.into_parts();
    strip_hop_by_hop(&mut parts.headers, upgrade);
    let pq = parts.uri.path_and_query().map(|p| p.as_str().to_string()).unwrap_or_else(|| "/".into());
    parts.uri = pq.parse().unwrap_or_else(|_| Uri::from_static("/"));
    parts.version = Version::HTTP_11;
    set_forwarded(&mut parts.headers, &host, peer, tls);
    let mut sender = match open(backend).await {
        Ok(s) => s,
        Err(resp) => return resp,
    };
    let mut resp = match sender.send_request(Request::from_parts(parts, body)).await {
        Ok(r) => r,
        Err(e) => return text(StatusCode::BAD_GATEWAY, format!("502 Bad Gateway: {}: {e}\n", backend.name)),
    };
    tracing::debug!(status = resp.status().as_u16(), "proxied");
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        if let Some(client_side) = client_side {
            splice(client_side, hyper::upgrade::on(&mut resp));
            let (parts, _) = resp.into_parts();
            return Response::from_parts(parts, Empty::new().map_err(|e| match e {}).boxed());
        }
    }
    strip_hop_by_hop(resp.headers_mut(), false);
    resp.map(|b| b.map_err(|e| Box::new(e) as BoxError).boxed())
}
