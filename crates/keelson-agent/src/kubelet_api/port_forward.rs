//! `port-forward` over SPDY/3.1 (`portforward.k8s.io`), as the kubelet serves it: the
//! client opens two streams per forwarded connection, `streamType=error` and
//! `streamType=data`, with the same `requestID` and the pod port in `port`. For each pair
//! the agent connects to `localhost:port` inside the pod's network namespace (a thread of
//! its own enters the namespace, connects, and hands the socket back: a socket stays in
//! the namespace it was made in) and copies bytes both ways, passing half-closes on. A
//! failed connection is reported as text on the error stream, which kubectl prints.
//! A WebSocket asking `?port=` is served by [`super::port_forward_ws`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Path as UrlPath, State};
use axum::http::{Response, StatusCode};
use axum::Extension;
use hyper_util::rt::TokioIo;
use keelson_spdy::{Headers, Stream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{port_forward_ws, status, ApiState, Caller};
use crate::runtime::ContainerState;

/// The only port-forward protocol version there is.
pub const PROTOCOL: &str = "portforward.k8s.io";
/// How long the first stream of a pair waits for the other (the kubelet's stream creation timeout).
const PAIR_TIMEOUT: Duration = Duration::from_secs(30);

/// Which half of a pair a stream is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Error,
    Data,
}

/// The pair key (`requestID`, or for clients that send none, the error stream's id: the
/// data stream follows it as id + 2, as the kubelet assumes) and the kind of a stream.
pub(crate) fn classify(id: u32, h: &Headers) -> Result<(String, Kind), String> {
    let kind = match h.get("streamType") {
        Some("error") => Kind::Error,
        Some("data") => Kind::Data,
        other => return Err(format!("invalid stream type {:?}", other.unwrap_or(""))),
    };
    let key = match h.get("requestID").filter(|r| !r.is_empty()) {
        Some(r) => r.to_string(),
        None if kind == Kind::Data => id.saturating_sub(2).to_string(),
        None => id.to_string(),
    };
    Ok((key, kind))
}

/// The port of a data stream's `port` header.
pub(crate) fn port_of(h: &Headers) -> Result<u16, String> {
    let raw = h.get("port").unwrap_or("");
    match raw.parse::<u16>() {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(format!("invalid port header {raw:?}")),
    }
}

/// Streams waiting for their other half.
pub(crate) struct Pairs<T> {
    waiting: HashMap<String, (Option<T>, Option<T>, Instant)>,
}

impl<T> Default for Pairs<T> {
    fn default() -> Self {
        Self { waiting: HashMap::new() }
    }
}

impl<T> Pairs<T> {
    /// Adds a stream; the pair `(error, data)` once both are there. A second stream of
    /// the same kind and key is refused (and handed back).
    pub(crate) fn add(&mut self, key: String, kind: Kind, stream: T, now: Instant) -> Result<Option<(T, T)>, (String, T)> {
        let entry = self.waiting.entry(key.clone()).or_insert((None, None, now));
        let slot = match kind {
            Kind::Error => &mut entry.0,
            Kind::Data => &mut entry.1,
        };
        if slot.is_some() {
            return Err((format!("{} stream already assigned for request {key}", if kind == Kind::Error { "error" } else { "data" }), stream));
        }
        *slot = Some(stream);
        if entry.0.is_some() && entry.1.is_some() {
            let (e, d, _) = self.waiting.remove(&key).expect("present");
            return Ok(Some((e.expect("error"), d.expect("data"))));
        }
        Ok(None)
    }

    /// Removes the pairs incomplete since before `now - timeout`: their streams.
    pub(crate) fn expire(&mut self, now: Instant, timeout: Duration) -> Vec<T> {
        let old: Vec<String> = self.waiting.iter().filter(|(_, (_, _, since))| now.duration_since(*since) >= timeout).map(|(k, _)| k.clone()).collect();
        old.into_iter().filter_map(|k| self.waiting.remove(&k)).flat_map(|(e, d, _)| e.into_iter().chain(d)).collect()
    }
}

pub(super) async fn port_forward(
    State(state): State<Arc<ApiState>>,
    Extension(caller): Extension<Caller>,
    UrlPath(path): UrlPath<HashMap<String, String>>,
    mut req: axum::extract::Request,
) -> Response<Body> {
    if !state.authorized(&caller, "create", "proxy").await && !state.authorized(&caller, "get", "proxy").await {
        return super::forbidden(&caller, "create", "proxy");
    }
    let (ns, pod) = (path.get("namespace").cloned().unwrap_or_default(), path.get("pod").cloned().unwrap_or_default());
    let headers = req.headers();
    let upgrade = headers.get("upgrade").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    // The WebSocket form names its ports in the query; SPDY names one per stream.
    let websocket = if upgrade.eq_ignore_ascii_case("websocket") {
        match port_forward_ws::ports_of(req.uri().query().unwrap_or("")) {
            Ok(ports) => Some(ports),
            Err(e) => return status(StatusCode::BAD_REQUEST, "BadRequest", e),
        }
    } else if upgrade.eq_ignore_ascii_case("SPDY/3.1") {
        let offered: Vec<String> = headers.get_all("x-stream-protocol-version").iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(',')).map(|v| v.trim().to_string()).collect();
        if !offered.is_empty() && !offered.iter().any(|p| p == PROTOCOL) {
            return status(StatusCode::FORBIDDEN, "Forbidden", format!("unable to upgrade: unable to negotiate protocol: client supports {offered:?}, server supports [{PROTOCOL}]"));
        }
        None
    } else {
        return status(StatusCode::BAD_REQUEST, "BadRequest", "port-forward needs an upgrade: SPDY/3.1, or a WebSocket (v4.channel.k8s.io) naming its ports in ?port=".into());
    };
    let containers = state.runtime.list_containers().await.unwrap_or_default();
    let uid = path.get("uid").cloned();
    let Some(target) = containers
        .iter()
        .filter(|c| c.pod_namespace == ns && c.pod_name == pod && uid.as_ref().is_none_or(|u| *u == c.pod_uid) && matches!(c.state, ContainerState::Running { .. }))
        .max_by_key(|c| c.created_at_ns)
    else {
        return status(StatusCode::NOT_FOUND, "NotFound", format!("pod {ns}/{pod} has no running container on node {}", state.node));
    };
    let netns = match state.runtime.sandbox_netns(&target.sandbox_id).await {
        Ok(Some(n)) => n,
        Ok(None) => return status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", format!("the runtime reports no network namespace for pod {ns}/{pod}")),
        Err(e) => return status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", e.to_string()),
    };
    let who = Target { pod: format!("{ns}/{pod}"), uid: target.pod_uid.clone(), netns };
    if let Some(ports) = websocket {
        use axum::extract::FromRequest;
        use axum::response::IntoResponse;
        let ws = match axum::extract::ws::WebSocketUpgrade::from_request(req, &()).await {
            Ok(ws) => ws,
            Err(e) => return status(StatusCode::BAD_REQUEST, "BadRequest", format!("port-forward's WebSocket upgrade: {e}")),
        };
        let span = tracing::info_span!("port-forward", pod = %who.pod, ports = ?ports, protocol = "websocket");
        return ws
            .protocols(port_forward_ws::PROTOCOLS)
            .on_upgrade(move |socket| tracing::Instrument::instrument(port_forward_ws::serve(socket, ports, Arc::new(who)), span))
            .into_response();
    }
    let on_upgrade = hyper::upgrade::on(&mut req);
    let span = tracing::info_span!("port-forward", pod = %who.pod);
    tokio::spawn(tracing::Instrument::instrument(
        async move {
            match on_upgrade.await {
                Ok(io) => serve_pairs(keelson_spdy::serve(TokioIo::new(io)), Arc::new(who)).await,
                Err(e) => tracing::info!(error = %e, "port-forward upgrade"),
            }
        },
        span,
    ));
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header("connection", "Upgrade")
        .header("upgrade", "SPDY/3.1")
        .header("x-stream-protocol-version", PROTOCOL)
        .body(Body::empty())
        .expect("a valid response")
}

/// The pod a session forwards to.
pub(super) struct Target {
    pub(super) pod: String,
    pub(super) uid: String,
    pub(super) netns: String,
}

async fn serve_pairs(mut incoming: keelson_spdy::Incoming, target: Arc<Target>) {
    let mut pairs: Pairs<Stream> = Pairs::default();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            s = incoming.accept() => {
                let Some(s) = s else { break };
                let (key, kind) = match classify(s.id, &s.headers) {
                    Ok(k) => k,
                    Err(e) => {
                        tracing::info!(error = %e, "port-forward stream");
                        let _ = s.writer.reset(keelson_spdy::frame::rst::PROTOCOL_ERROR).await;
                        continue;
                    }
                };
                match pairs.add(key, kind, s, Instant::now()) {
                    Ok(Some((error, data))) => {
                        tokio::spawn(forward(target.clone(), error, data));
                    }
                    Ok(None) => {}
                    Err((e, s)) => {
                        tracing::info!(error = %e, "port-forward stream");
                        let _ = s.writer.reset(keelson_spdy::frame::rst::PROTOCOL_ERROR).await;
                    }
                }
            }
            _ = tick.tick() => {
                for s in pairs.expire(Instant::now(), PAIR_TIMEOUT) {
                    let _ = s.writer.write(b"timed out waiting for the other stream of the pair").await;
                    let _ = s.writer.reset(keelson_spdy::frame::rst::CANCEL).await;
                }
            }
        }
    }
}

/// One forwarded connection: the pod's port to the data stream and back.
async fn forward(target: Arc<Target>, error: Stream, data: Stream) {
    let port = match port_of(&data.headers) {
        Ok(p) => p,
        Err(e) => return fail(&error, &data, &e).await,
    };
    let tcp = match connect_in_netns(target.netns.clone(), port).await {
        Ok(t) => t,
        Err(e) => {
            let msg = format!("error forwarding port {port} to pod {}, uid {}: failed to connect to localhost:{port} inside the pod's network namespace {:?}: {e}", target.pod, target.uid, target.netns);
            tracing::info!(%msg, "port-forward");
            return fail(&error, &data, &msg).await;
        }
    };
    let (mut from_pod, mut to_pod) = tcp.into_split();
    let Stream { reader: mut from_client, writer: to_client, .. } = data;
    let error = error.writer;
    let error_done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let finish_error = {
        let (error, done) = (error.clone(), error_done.clone());
        move || async move {
            if !done.swap(true, std::sync::atomic::Ordering::SeqCst) {
                let _ = error.finish().await;
            }
        }
    };
    let down = {
        let finish_error = finish_error.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 32 * 1024];
            loop {
                match from_pod.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if to_client.write(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                }
            }
            // The pod closed its side: the client's reading ends, and so does the error
            // stream (kubectl waits for it before closing its local connection).
            let _ = to_client.finish().await;
            finish_error().await;
        })
    };
    let clean = loop {
        match from_client.recv().await {
            Ok(Some(b)) => {
                if to_pod.write_all(&b).await.is_err() {
                    break false;
                }
            }
            Ok(None) => break true,
            Err(_) => break false,
        }
    };
    if clean {
        // The client half-closed: so does the connection to the pod, and the pod's
        // answer still flows back.
        let _ = to_pod.shutdown().await;
        let _ = down.await;
    } else {
        down.abort();
    }
    finish_error().await;
}

async fn fail(error: &Stream, data: &Stream, msg: &str) {
    let _ = error.writer.write(msg.as_bytes()).await;
    let _ = error.writer.finish().await;
    let _ = data.writer.finish().await;
}

/// Connects to `localhost:port` in the network namespace at `netns`, from a thread made
/// for it (never a pooled one: the thread stays in that namespace until it ends).
pub(super) async fn connect_in_netns(netns: String, port: u16) -> Result<tokio::net::TcpStream, String> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("port-forward-netns".into())
        .spawn(move || {
            let _ = tx.send(connect_blocking(&netns, port));
        })
        .map_err(|e| format!("starting a thread: {e}"))?;
    let std = rx.await.map_err(|_| "the connecting thread died".to_string())??;
    std.set_nonblocking(true).map_err(|e| e.to_string())?;
    tokio::net::TcpStream::from_std(std).map_err(|e| e.to_string())
}

fn connect_blocking(netns: &str, port: u16) -> Result<std::net::TcpStream, String> {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(netns).map_err(|e| format!("opening the network namespace: {e}"))?;
    // SAFETY: setns on a valid descriptor changes only this thread's namespace.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(format!("entering the network namespace: {}", std::io::Error::last_os_error()));
    }
    let timeout = Duration::from_secs(5);
    let v4 = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    match std::net::TcpStream::connect_timeout(&v4, timeout) {
        Ok(s) => Ok(s),
        Err(e4) => {
            let v6 = std::net::SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port));
            std::net::TcpStream::connect_timeout(&v6, timeout).map_err(|e6| format!("IPv4: dial tcp4 {v4}: {e4}; IPv6: dial tcp6 {v6}: {e6}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&str, &str)]) -> Headers {
        Headers(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
    }

    #[test]
    fn streams_are_classified_by_type_and_request() {
        assert_eq!(classify(1, &h(&[("streamtype", "error"), ("port", "80"), ("requestid", "7")])), Ok(("7".into(), Kind::Error)));
        assert_eq!(classify(3, &h(&[("streamType", "data"), ("requestID", "7")])), Ok(("7".into(), Kind::Data)));
        // Without requestID the data stream follows its error stream by two ids.
        assert_eq!(classify(5, &h(&[("streamtype", "error")])), Ok(("5".into(), Kind::Error)));
        assert_eq!(classify(7, &h(&[("streamtype", "data")])), Ok(("5".into(), Kind::Data)));
        assert!(classify(1, &h(&[("streamtype", "stdin")])).is_err());
        assert_eq!(port_of(&h(&[("port", "8080")])), Ok(8080));
        assert!(port_of(&h(&[("port", "0")])).is_err() && port_of(&h(&[("port", "x")])).is_err() && port_of(&h(&[])).is_err());
    }

    #[test]
    fn pairs_complete_in_either_order_and_expire() {
        let t0 = Instant::now();
        let mut p: Pairs<&str> = Pairs::default();
        assert_eq!(p.add("0".into(), Kind::Error, "e0", t0).unwrap(), None);
        assert_eq!(p.add("1".into(), Kind::Data, "d1", t0).unwrap(), None);
        assert_eq!(p.add("0".into(), Kind::Data, "d0", t0).unwrap(), Some(("e0", "d0")));
        assert_eq!(p.add("1".into(), Kind::Data, "d1'", t0).unwrap_err().1, "d1'", "a second data stream is refused");
        assert_eq!(p.add("1".into(), Kind::Error, "e1", t0).unwrap(), Some(("e1", "d1")));
        assert_eq!(p.add("2".into(), Kind::Error, "e2", t0).unwrap(), None);
        assert!(p.expire(t0 + Duration::from_secs(29), PAIR_TIMEOUT).is_empty());
        assert_eq!(p.expire(t0 + PAIR_TIMEOUT, PAIR_TIMEOUT), vec!["e2"]);
        assert_eq!(p.add("2".into(), Kind::Data, "d2", t0).unwrap(), None, "an expired key starts over");
    }
}
