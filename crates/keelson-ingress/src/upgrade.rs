//! WebSocket (or another `Upgrade` protocol) over HTTP/2: the extended CONNECT of
//! RFC 8441. The client's `CONNECT` with `:protocol` (routed like any request of its
//! `:authority` and `:path`) becomes an HTTP/1.1 `GET` with `Connection: Upgrade` and
//! `Upgrade: <protocol>` to the chosen endpoint; the endpoint's 101 becomes the
//! client's 200, and the HTTP/2 stream and the upgraded endpoint connection are then
//! spliced both ways.
//!
//! - WebSocket: HTTP/2 carries no `Sec-WebSocket-Key` (RFC 8441 §5), so one is made up
//!   for the endpoint. Its `Sec-WebSocket-Accept` answers only that key and is not
//!   passed on (the client checks none); `Sec-WebSocket-Version`, `-Protocol` and
//!   `-Extensions` pass through both ways.
//! - A 101 naming another protocol than asked for, or a 2xx instead of a 101 (which the
//!   client would take for an open tunnel), is a 502; any other status of the endpoint
//!   is answered as it is.
//!
//! The heads are made by pure functions ([`backend_request`], [`client_response`]);
//! [`forward_connect`] does the I/O.

use std::net::SocketAddr;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{request, response, Method, Request, Response, StatusCode, Uri, Version};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;

use crate::proxy::{self, Body, BoxError};
use crate::routes::Backend;

/// The protocol whose handshake needs a made-up key (compared case-insensitively).
const WEBSOCKET: &str = "websocket";
const SEC_WEBSOCKET_KEY: HeaderName = HeaderName::from_static("sec-websocket-key");
const SEC_WEBSOCKET_ACCEPT: HeaderName = HeaderName::from_static("sec-websocket-accept");

/// Why an extended CONNECT could not be passed on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpgradeError {
    /// The `:protocol` cannot be written as an `Upgrade` header.
    #[error("the :protocol {0:?} is not a valid Upgrade header value")]
    BadProtocol(String),
    /// The endpoint's 101 switched to something else than asked for.
    #[error("the endpoint switched protocols to {got:?}, not {want:?}")]
    WrongProtocol { want: String, got: String },
}

/// The `:protocol` of an extended CONNECT request; `None` for any other request.
pub fn extended_connect<B>(req: &Request<B>) -> Option<&str> {
    if req.method() != Method::CONNECT {
        return None;
    }
    req.extensions().get::<hyper::ext::Protocol>().map(|p| p.as_str())
}

/// The HTTP/1.1 upgrade request head sent to the endpoint for the client's extended
/// CONNECT `client` asking for `protocol`: a `GET` of the same path and query, the
/// client's headers less hop-by-hop ones, `Connection: upgrade`, `Upgrade: protocol`,
/// `Host` and `X-Forwarded-*` as for any request, cookies joined into one header
/// (RFC 9113 §8.2.3) and, for WebSocket, `key` as the `Sec-WebSocket-Key`.
pub fn backend_request(client: &request::Parts, protocol: &str, key: &str, host: &str, peer: SocketAddr, tls: bool) -> Result<request::Parts, UpgradeError> {
    let upgrade = HeaderValue::from_str(protocol).map_err(|_| UpgradeError::BadProtocol(protocol.to_string()))?;
    let (mut head, ()) = Request::new(()).into_parts();
    head.method = Method::GET;
    head.version = Version::HTTP_11;
    let pq = client.uri.path_and_query().map(|p| p.as_str()).filter(|p| p.starts_with('/')).unwrap_or("/");
    head.uri = pq.parse().unwrap_or_else(|_| Uri::from_static("/"));
    let mut h = client.headers.clone();
    proxy::strip_hop_by_hop(&mut h, false);
    join_cookies(&mut h);
    for n in [SEC_WEBSOCKET_KEY, header::CONTENT_LENGTH] {
        h.remove(n);
    }
    h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    h.insert(header::UPGRADE, upgrade);
    if protocol.eq_ignore_ascii_case(WEBSOCKET) {
        if let Ok(v) = HeaderValue::from_str(key) {
            h.insert(SEC_WEBSOCKET_KEY, v);
        }
    }
    proxy::set_forwarded(&mut h, host, peer, tls);
    head.headers = h;
    Ok(head)
}

/// HTTP/2 may send cookies as several `cookie` fields; HTTP/1.1 wants one, `; `-joined.
fn join_cookies(h: &mut HeaderMap) {
    let parts: Vec<&str> = h.get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok()).collect();
    if parts.len() > 1 {
        if let Ok(v) = HeaderValue::from_str(&parts.join("; ")) {
            h.insert(header::COOKIE, v);
        }
    }
}

/// The HTTP/2 response head answering the endpoint's 101 `backend` to a request for
/// `protocol`: 200 with the endpoint's headers, less hop-by-hop ones, `Upgrade`,
/// `Sec-WebSocket-Accept` (it answers the proxy's key) and `Content-Length`.
pub fn client_response(backend: &response::Parts, protocol: &str) -> Result<response::Parts, UpgradeError> {
    let got = backend.headers.get(header::UPGRADE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let first = got.split(',').next().unwrap_or("").trim();
    // A protocol may carry a version (`name/version`); the name is what must match.
    let name = |p: &str| p.split('/').next().unwrap_or("").to_ascii_lowercase();
    if first.is_empty() || name(first) != name(protocol) {
        return Err(UpgradeError::WrongProtocol { want: protocol.to_string(), got: got.to_string() });
    }
    let (mut head, ()) = Response::new(()).into_parts();
    head.status = StatusCode::OK;
    head.version = Version::HTTP_2;
    let mut h = backend.headers.clone();
    proxy::strip_hop_by_hop(&mut h, false);
    for n in [SEC_WEBSOCKET_ACCEPT, header::CONTENT_LENGTH] {
        h.remove(n);
    }
    head.headers = h;
    Ok(head)
}

/// What the client gets for an endpoint's answer other than 101: the answer itself,
/// unless it is a success, which over CONNECT would read as an open tunnel.
fn refused(mut resp: Response<Incoming>, backend: &Backend) -> Response<Body> {
    if resp.status().is_success() {
        return proxy::text(StatusCode::BAD_GATEWAY, format!("502 Bad Gateway: {} answered the upgrade with {} instead of 101 Switching Protocols\n", backend.name, resp.status()));
    }
    proxy::strip_hop_by_hop(resp.headers_mut(), false);
    resp.map(|b| b.map_err(|e| Box::new(e) as BoxError).boxed())
}

/// A fresh `Sec-WebSocket-Key`: 16 random bytes, base64 (RFC 6455 §4.1).
pub fn websocket_key() -> String {
    base64(&rand::random::<[u8; 16]>())
}

/// Standard base64 with padding (RFC 4648 §4).
pub(crate) fn base64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Serves an extended CONNECT for `protocol` that the route table sent to `backend`.
pub async fn forward_connect(mut req: Request<Incoming>, backend: &Backend, peer: SocketAddr, tls: bool, host: String, protocol: String) -> Response<Body> {
    tracing::debug!(%protocol, "extended CONNECT");
    let client_side = hyper::upgrade::on(&mut req);
    let (client, _) = req.into_parts();
    let head = match backend_request(&client, &protocol, &websocket_key(), &host, peer, tls) {
        Ok(h) => h,
        Err(e) => return proxy::text(StatusCode::BAD_REQUEST, format!("400 Bad Request: {e}\n")),
    };
    let mut sender = match proxy::open::<Empty<Bytes>>(backend).await {
        Ok(s) => s,
        Err(resp) => return resp,
    };
    let mut resp = match sender.send_request(Request::from_parts(head, Empty::new())).await {
        Ok(r) => r,
        Err(e) => return proxy::text(StatusCode::BAD_GATEWAY, format!("502 Bad Gateway: {}: {e}\n", backend.name)),
    };
    tracing::debug!(status = resp.status().as_u16(), "proxied");
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        return refused(resp, backend);
    }
    let backend_side = hyper::upgrade::on(&mut resp);
    let (backend_head, _) = resp.into_parts();
    match client_response(&backend_head, &protocol) {
        Ok(head) => {
            proxy::splice(client_side, backend_side);
            Response::from_parts(head, Empty::new().map_err(|e| match e {}).boxed())
        }
        Err(e) => proxy::text(StatusCode::BAD_GATEWAY, format!("502 Bad Gateway: {}: {e}\n", backend.name)),
    }
}
