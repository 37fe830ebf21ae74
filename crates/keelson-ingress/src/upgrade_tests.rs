//! The extended CONNECT heads (pure), and WebSocket through the proxy on loopback: over
//! HTTP/2 (h2c by prior knowledge) and over HTTP/1.1, to a backend that speaks only
//! HTTP/1.1 and checks the WebSocket handshake it gets.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use http::{header, request, Method, Request, Response, StatusCode, Version};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::ext::Protocol;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::upgrade::{backend_request, base64, client_response, websocket_key, UpgradeError};

/// SHA-1 (RFC 3174), for the `Sec-WebSocket-Accept` the test backend computes.
fn sha1(data: &[u8]) -> [u8; 20] {
    use sha1::Digest;
    sha1::Sha1::digest(data).into()
}

/// The `Sec-WebSocket-Accept` for `key` (RFC 6455 §4.2.2).
fn accept(key: &str) -> String {
    base64(&sha1(format!("{key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11").as_bytes()))
}

fn peer() -> SocketAddr {
    "192.0.2.7:50000".parse().unwrap()
}

#[test]
fn base64_sha1_and_the_websocket_accept_match_the_rfc_examples() {
    let cases = [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg=="), ("fooba", "Zm9vYmE="), ("foobar", "Zm9vYmFy")];
    for (plain, encoded) in cases {
        assert_eq!(base64(plain.as_bytes()), encoded, "base64 of {plain:?}");
    }
    let hex: String = sha1(b"abc").iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(hex, "a9993e364706816aba3e25717850c26c9cd0d89d");
    assert_eq!(accept("dGhlIHNhbXBsZSBub25jZQ=="), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", "RFC 6455 §1.3");
}

#[test]
fn made_up_websocket_keys_are_16_bytes_of_base64_and_differ() {
    let keys: Vec<String> = (0..64).map(|_| websocket_key()).collect();
    for k in &keys {
        assert_eq!(k.len(), 24, "{k}");
        assert!(k.ends_with("==") && !k[..22].contains('='), "{k}");
    }
    let mut unique = keys.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), keys.len(), "keys repeat: {keys:?}");
}

fn h2_connect(uri: &str, protocol: &'static str) -> request::Parts {
    Request::builder()
        .method(Method::CONNECT)
        .uri(uri)
        .version(Version::HTTP_2)
        .extension(Protocol::from_static(protocol))
        .header("sec-websocket-version", "13")
        .header("sec-websocket-protocol", "chat, superchat")
        .header("sec-websocket-extensions", "permessage-deflate")
        .header("sec-websocket-key", "c2VudCBieSB0aGUgY2xpZW50")
        .header("cookie", "a=1")
        .header("cookie", "b=2")
        .header("te", "trailers")
        .header("x-forwarded-for", "6.6.6.6")
        .header("content-length", "0")
        .body(())
        .unwrap()
        .into_parts()
        .0
}

#[test]
fn an_h2_websocket_connect_becomes_an_http1_upgrade_get() {
    let client = h2_connect("https://chat.test/ws/room?id=1", "websocket");
    let head = backend_request(&client, "websocket", "bWFkZSB1cCBieSBwcm94eQ==", "chat.test", peer(), true).unwrap();
    assert_eq!(head.method, Method::GET);
    assert_eq!(head.version, Version::HTTP_11);
    assert_eq!(head.uri, "/ws/room?id=1");
    assert!(head.extensions.get::<Protocol>().is_none(), "the client's extensions stay behind");
    let h = |n: &str| head.headers.get_all(n).iter().map(|v| v.to_str().unwrap().to_string()).collect::<Vec<_>>();
    assert_eq!(h("connection"), ["upgrade"]);
    assert_eq!(h("upgrade"), ["websocket"]);
    assert_eq!(h("sec-websocket-key"), ["bWFkZSB1cCBieSBwcm94eQ=="], "the proxy's key replaces whatever the client sent");
    assert_eq!(h("sec-websocket-version"), ["13"]);
    assert_eq!(h("sec-websocket-protocol"), ["chat, superchat"]);
    assert_eq!(h("sec-websocket-extensions"), ["permessage-deflate"]);
    assert_eq!(h("cookie"), ["a=1; b=2"]);
    assert_eq!(h("host"), ["chat.test"]);
    assert_eq!(h("x-forwarded-host"), ["chat.test"]);
    assert_eq!(h("x-forwarded-for"), ["192.0.2.7"], "the incoming X-Forwarded-For is replaced");
    assert_eq!(h("x-real-ip"), ["192.0.2.7"]);
    assert_eq!(h("x-forwarded-proto"), ["https"]);
    assert!(h("te").is_empty() && h("content-length").is_empty());

    // Another protocol: no WebSocket key made up (nor the client's passed on).
    let other = backend_request(&h2_connect("http://chat.test/", "connect-ip"), "connect-ip", "unused", "chat.test", peer(), false).unwrap();
    assert_eq!(other.headers["upgrade"], "connect-ip");
    assert!(other.headers.get("sec-websocket-key").is_none());
    assert_eq!(other.headers["x-forwarded-proto"], "http");
    assert_eq!(other.uri, "/");

    let bad = backend_request(&client, "bad\nprotocol", "k", "chat.test", peer(), false);
    assert_eq!(bad.unwrap_err(), UpgradeError::BadProtocol("bad\nprotocol".into()));
}

fn switching(upgrade: Option<&str>) -> http::response::Parts {
    let mut b = Response::builder().status(StatusCode::SWITCHING_PROTOCOLS);
    if let Some(u) = upgrade {
        b = b.header("upgrade", u);
    }
    b.header("connection", "Upgrade, keep-alive")
        .header("keep-alive", "timeout=5")
        .header("sec-websocket-accept", "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
        .header("sec-websocket-protocol", "chat")
        .header("sec-websocket-extensions", "permessage-deflate")
        .header("set-cookie", "session=1")
        .header("content-length", "0")
        .body(())
        .unwrap()
        .into_parts()
        .0
}

#[test]
fn the_backends_101_becomes_a_200_without_its_handshake_headers() {
    let head = client_response(&switching(Some("WebSocket")), "websocket").unwrap();
    assert_eq!(head.status, StatusCode::OK);
    let mut names: Vec<&str> = head.headers.keys().map(|k| k.as_str()).collect();
    names.sort();
    assert_eq!(names, ["sec-websocket-extensions", "sec-websocket-protocol", "set-cookie"]);
    assert_eq!(head.headers["sec-websocket-protocol"], "chat");

    let err = client_response(&switching(Some("h2c")), "websocket").unwrap_err();
    assert_eq!(err, UpgradeError::WrongProtocol { want: "websocket".into(), got: "h2c".into() });
    assert!(client_response(&switching(None), "websocket").is_err(), "a 101 must say what it switched to");
}

// ---- On loopback ----

/// What the test backend saw of each request.
type Seen = mpsc::UnboundedReceiver<request::Parts>;

/// An HTTP/1.1 backend: `/refuse` answers 403, `/plain` 200, and a WebSocket upgrade
/// with a key gets a 101 with the right accept (and the first offered subprotocol),
/// after which bytes are echoed.
async fn backend(req: Request<Incoming>, seen: mpsc::UnboundedSender<request::Parts>) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = req.into_parts();
    let _ = seen.send(parts.clone());
    let mut req = Request::from_parts(parts, body);
    let resp = |status: StatusCode, body: &'static str| {
        let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
        *r.status_mut() = status;
        r
    };
    match req.uri().path() {
        "/refuse" => return Ok(resp(StatusCode::FORBIDDEN, "forbidden by backend")),
        "/plain" => return Ok(resp(StatusCode::OK, "plain page")),
        _ => {}
    }
    let h = req.headers();
    let websocket = h.get(header::UPGRADE).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"websocket"))
        && h.get(header::CONNECTION).and_then(|v| v.to_str().ok()).is_some_and(|v| v.to_ascii_lowercase().contains("upgrade"))
        && h.get("sec-websocket-version").is_some_and(|v| v == "13");
    let Some(key) = h.get("sec-websocket-key").and_then(|k| k.to_str().ok()).filter(|_| websocket) else {
        return Ok(resp(StatusCode::BAD_REQUEST, "not a WebSocket handshake"));
    };
    let mut r = resp(StatusCode::SWITCHING_PROTOCOLS, "");
    r.headers_mut().insert(header::UPGRADE, "websocket".parse().unwrap());
    r.headers_mut().insert(header::CONNECTION, "Upgrade".parse().unwrap());
    r.headers_mut().insert("sec-websocket-accept", accept(key).parse().unwrap());
    if let Some(first) = h.get("sec-websocket-protocol").and_then(|v| v.to_str().ok()).and_then(|v| v.split(',').next()) {
        r.headers_mut().insert("sec-websocket-protocol", first.trim().parse().unwrap());
    }
    let upgraded = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let Ok(up) = upgraded.await else { return };
        let mut io = TokioIo::new(up);
        let mut buf = [0u8; 1024];
        while let Ok(n @ 1..) = io.read(&mut buf).await {
            if io.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    });
    Ok(r)
}

/// The backend and the proxy in front of it: `echo.test` routes to the backend,
/// `empty.test` to a Service without ready endpoints. Stops when dropped.
struct Fixture {
    proxy: SocketAddr,
    seen: Seen,
    stop: CancellationToken,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn fixture() -> Fixture {
    let stop = CancellationToken::new();
    let (tx, seen) = mpsc::unbounded_channel();
    let backend_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend_addr = backend_listener.local_addr().unwrap();
    let token = stop.clone();
    tokio::spawn(async move {
        loop {
            let conn = tokio::select! {
                _ = token.cancelled() => return,
                c = backend_listener.accept() => match c { Ok((c, _)) => c, Err(_) => continue },
            };
            let tx = tx.clone();
            let svc = hyper::service::service_fn(move |req| backend(req, tx.clone()));
            tokio::spawn(hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(conn), svc).with_upgrades());
        }
    });

    let rule = |host: &str, svc: &str| json!({"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": {"service": {"name": svc, "port": {"number": 80}}}}]}});
    let ingress = serde_json::from_value(json!({"metadata": {"name": "ws", "namespace": "t", "uid": "u1"},
        "spec": {"ingressClassName": crate::CLASS, "rules": [rule("echo.test", "echo"), rule("empty.test", "empty")]}}))
    .unwrap();
    let service = |name: &str| serde_json::from_value(json!({"metadata": {"name": name, "namespace": "t"}, "spec": {"ports": [{"port": 80, "targetPort": backend_addr.port()}]}})).unwrap();
    let slice = |svc: &str, ready: bool| {
        serde_json::from_value(json!({"metadata": {"name": format!("{svc}-1"), "namespace": "t", "labels": {"kubernetes.io/service-name": svc}},
            "addressType": "IPv4", "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": ready}}],
            "ports": [{"port": backend_addr.port(), "protocol": "TCP"}]}))
        .unwrap()
    };
    let (services, slices) = ([service("echo"), service("empty")], [slice("echo", true), slice("empty", false)]);
    let inputs = crate::routes::Inputs { ingresses: vec![&ingress], classes: vec![], services: services.iter().collect(), slices: slices.iter().collect() };
    let (table, problems) = crate::routes::build(&inputs, crate::CLASS);
    assert!(problems.is_empty(), "{problems:?}");
    let shared = Arc::new(crate::proxy::Shared { table: RwLock::new(Arc::new(table)), https_port: None });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = listener.local_addr().unwrap();
    tokio::spawn(crate::proxy::serve_http(listener, shared, stop.clone()));
    Fixture { proxy, seen, stop }
}

/// An h2c (prior knowledge) connection to the proxy, once its SETTINGS have allowed
/// extended CONNECT.
async fn h2_client(addr: SocketAddr) -> hyper::client::conn::http2::SendRequest<Empty<Bytes>> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp)).await.unwrap();
    let mut conn = Box::pin(conn);
    for _ in 0..200 {
        if conn.is_extended_connect_protocol_enabled() {
            tokio::spawn(conn);
            return sender;
        }
        tokio::select! {
            r = conn.as_mut() => panic!("the HTTP/2 connection ended early: {r:?}"),
            _ = tokio::time::sleep(Duration::from_millis(10)) => {}
        }
    }
    panic!("the proxy's HTTP/2 SETTINGS never enabled the extended CONNECT protocol");
}

fn extended_connect(uri: &str) -> Request<Empty<Bytes>> {
    Request::builder()
        .method(Method::CONNECT)
        .uri(uri)
        .extension(Protocol::from_static("websocket"))
        .header("sec-websocket-version", "13")
        .header("sec-websocket-protocol", "chat, superchat")
        .body(Empty::new())
        .unwrap()
}

async fn body_text(resp: Response<Incoming>) -> String {
    String::from_utf8(resp.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
}

async fn echoed<IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(io: &mut IO, msg: &[u8]) -> Vec<u8> {
    io.write_all(msg).await.unwrap();
    let mut back = vec![0u8; msg.len()];
    tokio::time::timeout(Duration::from_secs(5), io.read_exact(&mut back)).await.expect("echo in time").unwrap();
    back
}

#[tokio::test]
async fn an_h2_websocket_connect_is_spliced_to_the_http1_backend() {
    let mut f = fixture().await;
    let mut client = h2_client(f.proxy).await;
    let resp = client.send_request(extended_connect("http://echo.test/chat?room=1")).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers().get("sec-websocket-protocol").map(|v| v.to_str().unwrap()), Some("chat"), "the backend's choice reaches the client");
    for n in ["sec-websocket-accept", "upgrade", "connection"] {
        assert!(resp.headers().get(n).is_none(), "{n} leaked to the HTTP/2 client: {:?}", resp.headers());
    }

    let seen = f.seen.recv().await.unwrap();
    assert_eq!((&seen.method, seen.version, seen.uri.to_string().as_str()), (&Method::GET, Version::HTTP_11, "/chat?room=1"));
    for (n, v) in [("host", "echo.test"), ("upgrade", "websocket"), ("sec-websocket-version", "13"), ("x-forwarded-for", "127.0.0.1"), ("x-forwarded-proto", "http"), ("x-forwarded-host", "echo.test")] {
        assert_eq!(seen.headers.get(n).and_then(|v| v.to_str().ok()), Some(v), "{n} at the backend");
    }
    assert_eq!(seen.headers.get("sec-websocket-key").map(|k| k.len()), Some(24));

    let mut io = TokioIo::new(hyper::upgrade::on(resp).await.unwrap());
    assert_eq!(echoed(&mut io, b"hello over h2").await, b"hello over h2");
    let big: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let (mut rd, mut wr) = tokio::io::split(io);
    let sent = big.clone();
    let writer = tokio::spawn(async move { wr.write_all(&sent).await.unwrap() });
    let mut back = vec![0u8; big.len()];
    tokio::time::timeout(Duration::from_secs(10), rd.read_exact(&mut back)).await.expect("echo in time").unwrap();
    writer.await.unwrap();
    assert!(back == big, "100 kB came back altered");

    // The same connection still serves further streams.
    let again = client.send_request(extended_connect("http://echo.test/second")).await.unwrap();
    assert_eq!(again.status(), StatusCode::OK);
    let mut io = TokioIo::new(hyper::upgrade::on(again).await.unwrap());
    assert_eq!(echoed(&mut io, b"second stream").await, b"second stream");
}

#[tokio::test]
async fn h2_connects_the_proxy_cannot_or_the_backend_will_not_upgrade_are_answered_so() {
    let f = fixture().await;
    let mut client = h2_client(f.proxy).await;
    let cases = [
        ("http://nowhere.test/chat", StatusCode::NOT_FOUND, "default backend - 404"),
        ("http://empty.test/chat", StatusCode::SERVICE_UNAVAILABLE, "has no ready endpoints"),
        ("http://echo.test/refuse", StatusCode::FORBIDDEN, "forbidden by backend"),
        ("http://echo.test/plain", StatusCode::BAD_GATEWAY, "instead of 101 Switching Protocols"),
    ];
    for (uri, status, text) in cases {
        let resp = client.send_request(extended_connect(uri)).await.unwrap();
        assert_eq!(resp.status(), status, "{uri}");
        let body = body_text(resp).await;
        assert!(body.contains(text), "{uri}: {body}");
    }
    let tunnel = Request::builder().method(Method::CONNECT).uri("echo.test:443").body(Empty::new()).unwrap();
    let resp = client.send_request(tunnel).await.unwrap();
    assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED, "a CONNECT without :protocol is no tunnel");
}

#[tokio::test]
async fn an_http1_websocket_upgrade_is_still_spliced() {
    let f = fixture().await;
    let mut tcp = TcpStream::connect(f.proxy).await.unwrap();
    let key = "dGhlIHNhbXBsZSBub25jZQ==";
    let req = format!("GET /chat HTTP/1.1\r\nHost: echo.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n");
    tcp.write_all(req.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        assert_eq!(tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut b)).await.expect("head in time").unwrap(), 1, "closed after {head:?}");
        head.push(b[0]);
    }
    let head = String::from_utf8(head).unwrap().to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(head.contains(&format!("sec-websocket-accept: {}\r\n", accept(key).to_ascii_lowercase())), "the client's own key is answered: {head}");
    assert!(head.contains("upgrade: websocket\r\n"), "{head}");
    assert_eq!(echoed(&mut tcp, b"hello over http/1.1").await, b"hello over http/1.1");
}
