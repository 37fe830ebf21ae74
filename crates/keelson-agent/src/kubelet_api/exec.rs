//! `exec` and `attach`, as the kubelet serves them, in either of the client's forms:
//! WebSocket (`v5.channel.k8s.io`, kubectl 1.30+; `v4.channel.k8s.io`), one binary
//! message per frame with the channel first (0 stdin, 1 stdout, 2 stderr, 3 status,
//! 4 resize; v5's `[255, 0]` closes stdin), or SPDY/3.1 (kubectl 1.27–1.29; v5 or v4), one
//! stream per channel named by its `streamType` header. Either way the agent asks the
//! runtime for the session (CRI `Exec` or `Attach`), reaches the runtime's streaming
//! server over SPDY ([`super::cri_stream`]) and relays: stdin and resizes to the runtime,
//! its stdout, stderr and status back. The end of the client's stdin (v5 close, SPDY FIN)
//! becomes a FIN on the runtime's stdin stream, so `kubectl exec -i … -- cat` and
//! `kubectl cp` into a pod end. The status is the runtime's (the kubelet's wording:
//! `Success`, or `NonZeroExitCode` with an `ExitCode` cause); the agent writes one of its
//! own only when it cannot reach the runtime.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path as UrlPath, State};
use axum::http::{Response, StatusCode};
use axum::response::IntoResponse;
use axum::Extension;
use futures::{SinkExt, StreamExt};
use hyper_util::rt::TokioIo;
use keelson_spdy::{StreamReader, StreamWriter};
use tokio::sync::mpsc;

use super::cri_stream::{self, RuntimeSession};
use super::{status, ApiState, Caller};
use crate::runtime::{ContainerState, Streams};

/// The WebSocket subprotocols the agent answers, most preferred first.
pub const PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];

/// What an exec request asks: the command and the streams (kubelet query names
/// `input`/`output`/`error`/`tty`, or kubectl's `stdin`/`stdout`/`stderr`/`tty`).
pub fn exec_request(query: &str) -> (Vec<String>, Streams) {
    let mut command = Vec::new();
    let mut s = Streams::default();
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        let on = v == "1" || v == "true";
        match k.as_ref() {
            "command" => command.push(v.into_owned()),
            "input" | "stdin" => s.stdin = on,
            "output" | "stdout" => s.stdout = on,
            "error" | "stderr" => s.stderr = on,
            "tty" => s.tty = on,
            _ => {}
        }
    }
    (command, s)
}

/// Channel numbers of the WebSocket framing.
pub mod channel {
    pub const STDIN: u8 = 0;
    pub const STDOUT: u8 = 1;
    pub const STDERR: u8 = 2;
    pub const ERROR: u8 = 3;
    pub const RESIZE: u8 = 4;
    /// v5: `[CLOSE, ch]` half-closes channel `ch`.
    pub const CLOSE: u8 = 255;
}

/// What one binary WebSocket message of the client means.
#[derive(Debug, PartialEq, Eq)]
pub enum ClientFrame<'a> {
    Stdin(&'a [u8]),
    /// v5 only: the client's stdin ended.
    CloseStdin,
    Resize(&'a [u8]),
    /// Unknown channels, and closes of other channels, are dropped (as the kubelet does).
    Ignored,
}

/// Reads a client's binary message under protocol v5 (`v5`) or v4.
pub fn client_frame(msg: &[u8], v5: bool) -> ClientFrame<'_> {
    match msg {
        [channel::STDIN, data @ ..] => ClientFrame::Stdin(data),
        [channel::RESIZE, data @ ..] => ClientFrame::Resize(data),
        [channel::CLOSE, channel::STDIN, ..] if v5 => ClientFrame::CloseStdin,
        _ => ClientFrame::Ignored,
    }
}

/// The SPDY remote-command versions served, most preferred first (over SPDY v5 is v4:
/// a stream half-closes on its own).
pub const SPDY_PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];

/// The version to answer a SPDY client offering `offered` (`X-Stream-Protocol-Version`).
pub fn spdy_protocol(offered: &[String]) -> Option<&'static str> {
    SPDY_PROTOCOLS.into_iter().find(|p| offered.iter().any(|o| o == p))
}

/// The client's SPDY streams, gathered by `streamType` until those expected are there.
pub struct Expected<T> {
    want: Vec<&'static str>,
    got: HashMap<&'static str, T>,
}

impl<T> Expected<T> {
    pub fn new(want: Vec<&'static str>) -> Self {
        Self { want, got: HashMap::new() }
    }

    /// Adds a stream of type `kind`; one not expected, or a second of a type, is refused
    /// (and handed back with the reason).
    pub fn add(&mut self, kind: Option<&str>, stream: T) -> Result<(), (String, T)> {
        let Some(k) = self.want.iter().copied().find(|w| Some(*w) == kind) else {
            return Err((format!("unexpected stream of type {:?}", kind.unwrap_or("")), stream));
        };
        if self.got.contains_key(k) {
            return Err((format!("a {k} stream is already open"), stream));
        }
        self.got.insert(k, stream);
        Ok(())
    }

    pub fn complete(&self) -> bool {
        self.got.len() == self.want.len()
    }

    pub fn take(&mut self, kind: &str) -> Option<T> {
        self.got.remove(kind)
    }
}

/// A failure status (`metav1.Status`) for the error channel, as the kubelet writes an
/// internal error.
pub fn failure_status(message: &str) -> String {
    serde_json::json!({"metadata": {}, "status": "Failure", "message": message, "reason": "InternalError", "details": {"causes": [{"message": message}]}, "code": 500}).to_string()
}

/// How long the streams of a SPDY client may take to arrive (the kubelet's stream creation timeout).
const STREAM_WAIT: Duration = Duration::from_secs(30);

/// Which session a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    Exec,
    Attach,
}

pub(super) async fn exec(state: State<Arc<ApiState>>, caller: Extension<Caller>, path: UrlPath<HashMap<String, String>>, req: axum::extract::Request) -> Response<Body> {
    session(state, caller, path, req, Mode::Exec).await
}

pub(super) async fn attach(state: State<Arc<ApiState>>, caller: Extension<Caller>, path: UrlPath<HashMap<String, String>>, req: axum::extract::Request) -> Response<Body> {
    session(state, caller, path, req, Mode::Attach).await
}

/// The client's side of the upgrade, once negotiated.
enum Upgrade {
    Spdy { version: &'static str, on_upgrade: hyper::upgrade::OnUpgrade },
    WebSocket(WebSocketUpgrade),
}

async fn session(State(state): State<Arc<ApiState>>, Extension(caller): Extension<Caller>, UrlPath(path): UrlPath<HashMap<String, String>>, mut req: axum::extract::Request, mode: Mode) -> Response<Body> {
    if !state.authorized(&caller, "create", "proxy").await && !state.authorized(&caller, "get", "proxy").await {
        return super::forbidden(&caller, "create", "proxy");
    }
    let get = |k: &str| path.get(k).cloned().unwrap_or_default();
    let (ns, pod, container, uid) = (get("namespace"), get("pod"), get("container"), path.get("uid").cloned());
    let (command, streams) = exec_request(req.uri().query().unwrap_or(""));
    if mode == Mode::Exec && command.is_empty() {
        return status(StatusCode::BAD_REQUEST, "BadRequest", "you must specify at least 1 command".into());
    }
    if !streams.stdin && !streams.stdout && !streams.stderr {
        return status(StatusCode::BAD_REQUEST, "BadRequest", "you must specify at least 1 of stdin, stdout, stderr".into());
    }
    let upgrade = req.headers().get("upgrade").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let client = if upgrade.eq_ignore_ascii_case("SPDY/3.1") {
        let offered: Vec<String> = req.headers().get_all("x-stream-protocol-version").iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(',')).map(|v| v.trim().to_string()).collect();
        let Some(version) = spdy_protocol(&offered) else {
            return status(StatusCode::FORBIDDEN, "Forbidden", format!("unable to upgrade: unable to negotiate protocol: client supports {offered:?}, server supports {SPDY_PROTOCOLS:?}"));
        };
        Upgrade::Spdy { version, on_upgrade: hyper::upgrade::on(&mut req) }
    } else {
        use axum::extract::FromRequest;
        match WebSocketUpgrade::from_request(req, &()).await {
            Ok(ws) => Upgrade::WebSocket(ws),
            Err(_) => return status(StatusCode::BAD_REQUEST, "BadRequest", "exec and attach need an upgrade: WebSocket (v5.channel.k8s.io or v4.channel.k8s.io) or SPDY/3.1".into()),
        }
    };
    let containers = state.runtime.list_containers().await.unwrap_or_default();
    let Some(target) = containers
        .iter()
        .filter(|c| c.pod_namespace == ns && c.pod_name == pod && c.name == container && uid.as_ref().is_none_or(|u| *u == c.pod_uid) && matches!(c.state, ContainerState::Running { .. }))
        .max_by_key(|c| c.attempt)
    else {
        return status(StatusCode::NOT_FOUND, "NotFound", format!("container {container} of pod {ns}/{pod} is not running on node {}", state.node));
    };
    let url = match mode {
        Mode::Exec => state.runtime.exec_stream(&target.id, &command, streams).await,
        Mode::Attach => state.runtime.attach_stream(&target.id, streams).await,
    };
    let url = match url {
        Ok(u) => u,
        Err(e) => return status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", e.to_string()),
    };
    let runtime = match cri_stream::dial(&url, streams).await {
        Ok(r) => r,
        Err(e) => {
            tracing::info!(error = %e, "runtime streaming server");
            return status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", e.to_string());
        }
    };
    let span = tracing::info_span!("remote-command", mode = ?mode, pod = %format!("{ns}/{pod}"), container = %container);
    match client {
        Upgrade::Spdy { version, on_upgrade } => {
            tokio::spawn(tracing::Instrument::instrument(
                async move {
                    match on_upgrade.await {
                        Ok(io) => bridge_spdy(keelson_spdy::serve(TokioIo::new(io)), streams, runtime).await,
                        Err(e) => {
                            tracing::info!(error = %e, "upgrade");
                            runtime.conn.close().await;
                        }
                    }
                },
                span,
            ));
            Response::builder()
                .status(StatusCode::SWITCHING_PROTOCOLS)
                .header("connection", "Upgrade")
                .header("upgrade", "SPDY/3.1")
                .header("x-stream-protocol-version", version)
                .body(Body::empty())
                .expect("a valid response")
        }
        Upgrade::WebSocket(ws) => ws
            .protocols(PROTOCOLS)
            .on_upgrade(move |socket| {
                let v5 = socket.protocol().is_some_and(|p| p.as_bytes() == PROTOCOLS[0].as_bytes());
                tracing::Instrument::instrument(bridge_websocket(socket, v5, streams, runtime), span)
            })
            .into_response(),
    }
}

/// Copies what the runtime sends on one stream until it ends (a closed connection ends
/// it too, as Go's SPDY streams read EOF then).
async fn pump<F, Fut>(from: Option<StreamReader>, mut to: F)
where
    F: FnMut(bytes::Bytes) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let Some(mut from) = from else { return };
    while let Ok(Some(b)) = from.recv().await {
        if !to(b).await {
            break;
        }
    }
}

/// A WebSocket client: its frames to the runtime's streams and back; the socket closes
/// (1000) once the runtime's stdout, stderr and status have ended.
async fn bridge_websocket(socket: WebSocket, v5: bool, streams: Streams, runtime: RuntimeSession) {
    let RuntimeSession { error, stdin, stdout, stderr, resize, conn } = runtime;
    let (mut ws_tx, mut ws_rx) = socket.split();
    let (out, mut queued) = mpsc::channel::<Message>(64);
    // The first message names the first output channel (the kubelet's handshake).
    let first = if streams.stdout { channel::STDOUT } else if streams.stderr && !streams.tty { channel::STDERR } else { channel::ERROR };
    let _ = out.send(Message::Binary(vec![first].into())).await;
    let writer = async move {
        while let Some(m) = queued.recv().await {
            let close = matches!(m, Message::Close(_));
            if ws_tx.send(m).await.is_err() || close {
                break;
            }
        }
    };
    let frame = |ch: u8, out: mpsc::Sender<Message>| {
        move |b: bytes::Bytes| {
            let out = out.clone();
            async move {
                let mut m = Vec::with_capacity(b.len() + 1);
                m.push(ch);
                m.extend_from_slice(&b);
                out.send(Message::Binary(m.into())).await.is_ok()
            }
        }
    };
    let down = {
        let out = out.clone();
        async move {
            tokio::join!(pump(stdout, frame(channel::STDOUT, out.clone())), pump(stderr, frame(channel::STDERR, out.clone())), pump(Some(error), frame(channel::ERROR, out.clone())));
            let _ = out.send(Message::Close(Some(axum::extract::ws::CloseFrame { code: 1000, reason: "".into() }))).await;
        }
    };
    drop(out);
    let up = async {
        while let Some(Ok(m)) = ws_rx.next().await {
            match m {
                Message::Binary(b) => match client_frame(&b, v5) {
                    ClientFrame::Stdin(d) => {
                        if let Some(w) = &stdin {
                            let _ = w.write(d).await;
                        }
                    }
                    ClientFrame::CloseStdin => {
                        if let Some(w) = &stdin {
                            let _ = w.finish().await;
                        }
                    }
                    ClientFrame::Resize(d) => {
                        if let Some(w) = &resize {
                            let _ = w.write(d).await;
                        }
                    }
                    ClientFrame::Ignored => {}
                },
                Message::Close(_) => break,
                _ => {}
            }
        }
    };
    tokio::select! {
        _ = async { tokio::join!(writer, down) } => {}
        // The client went away first: the session ends with it.
        _ = up => {}
    }
    conn.close().await;
}

/// A SPDY client: waits for the streams it must open, then relays stream to stream,
/// half-closes included; its streams half-close once the runtime's have ended.
async fn bridge_spdy(mut incoming: keelson_spdy::Incoming, streams: Streams, runtime: RuntimeSession) {
    let mut expected = Expected::new(cri_stream::stream_types(streams));
    let deadline = tokio::time::sleep(STREAM_WAIT);
    tokio::pin!(deadline);
    while !expected.complete() {
        tokio::select! {
            s = incoming.accept() => {
                let Some(s) = s else { return runtime.conn.close().await };
                let kind = s.headers.get("streamType").map(str::to_string);
                if let Err((e, s)) = expected.add(kind.as_deref(), s) {
                    tracing::info!(error = %e, "remote-command stream");
                    let _ = s.writer.reset(keelson_spdy::frame::rst::PROTOCOL_ERROR).await;
                }
            }
            _ = &mut deadline => {
                tracing::info!("timed out waiting for the client to create streams");
                if let Some(e) = expected.take("error") {
                    let _ = e.writer.write(failure_status("timed out waiting for client to create streams").as_bytes()).await;
                    let _ = e.writer.finish().await;
                }
                return runtime.conn.close().await;
            }
        }
    }
    let RuntimeSession { error, stdin, stdout, stderr, resize, conn } = runtime;
    let mut ups = Vec::new();
    for (kind, to) in [("stdin", stdin), ("resize", resize)] {
        let (Some(from), Some(to)) = (expected.take(kind), to) else { continue };
        let mut from = from.reader;
        ups.push(tokio::spawn(async move {
            while let Ok(Some(b)) = from.recv().await {
                if to.write(&b).await.is_err() {
                    return;
                }
            }
            // FIN (or a reset) from the client: the runtime's stream ends too.
            let _ = to.finish().await;
        }));
    }
    let copy = |to: Option<keelson_spdy::Stream>| {
        let to = to.map(|s| s.writer);
        move |b: bytes::Bytes| {
            let to = to.clone();
            async move {
                match &to {
                    Some(w) => w.write(&b).await.is_ok(),
                    None => true,
                }
            }
        }
    };
    let (c_out, c_err, c_status) = (expected.take("stdout"), expected.take("stderr"), expected.take("error"));
    let finishers: Vec<StreamWriter> = [&c_out, &c_err, &c_status].into_iter().flatten().map(|s| s.writer.clone()).collect();
    tokio::join!(pump(stdout, copy(c_out)), pump(stderr, copy(c_err)), pump(Some(error), copy(c_status)));
    for w in finishers {
        let _ = w.finish().await;
    }
    for u in ups {
        u.abort();
    }
    conn.close().await;
    // The client closes the connection once it has read the ends; later streams are refused.
    drop(incoming);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_and_streams_from_either_query_spelling() {
        let (cmd, s) = exec_request("command=sh&command=-c&command=echo%20hi%3Bexit%203&input=1&output=1&tty=1");
        assert_eq!(cmd, ["sh", "-c", "echo hi;exit 3"]);
        assert_eq!(s, Streams { stdin: true, stdout: true, stderr: false, tty: true });
        let (cmd, _) = exec_request("command=echo&command=50%25");
        assert_eq!(cmd, ["echo", "50%"], "an escape at the very end is decoded too");
        let (_, s) = exec_request("command=ls&stdout=true&stderr=true");
        assert_eq!(s, Streams { stdout: true, stderr: true, ..Default::default() });
    }

    #[test]
    fn websocket_frames_by_channel_and_v5_close() {
        assert_eq!(client_frame(b"\x00hi\n", true), ClientFrame::Stdin(b"hi\n"));
        assert_eq!(client_frame(b"\x00", false), ClientFrame::Stdin(b""), "an empty stdin message is data, not an end");
        assert_eq!(client_frame(b"\x04{\"Width\":80,\"Height\":24}\n", true), ClientFrame::Resize(b"{\"Width\":80,\"Height\":24}\n"));
        assert_eq!(client_frame(&[255, 0], true), ClientFrame::CloseStdin);
        assert_eq!(client_frame(&[255, 0], false), ClientFrame::Ignored, "v4 has no close");
        assert_eq!(client_frame(&[255, 4], true), ClientFrame::Ignored);
        assert_eq!(client_frame(b"\x01out", true), ClientFrame::Ignored, "clients do not send output");
        assert_eq!(client_frame(b"", true), ClientFrame::Ignored);
    }

    #[test]
    fn spdy_versions_v5_then_v4() {
        let o = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // kubectl 1.29 offers v5 first, 1.27/1.28 start at v4.
        assert_eq!(spdy_protocol(&o(&["v5.channel.k8s.io", "v4.channel.k8s.io", "v3.channel.k8s.io", "v2.channel.k8s.io", "channel.k8s.io"])), Some("v5.channel.k8s.io"));
        assert_eq!(spdy_protocol(&o(&["v4.channel.k8s.io", "v3.channel.k8s.io", "v2.channel.k8s.io", "channel.k8s.io"])), Some("v4.channel.k8s.io"));
        assert_eq!(spdy_protocol(&o(&["v3.channel.k8s.io", "channel.k8s.io"])), None);
        assert_eq!(spdy_protocol(&[]), None);
    }

    #[test]
    fn expected_streams_are_gathered_by_type() {
        let mut e = Expected::new(vec!["error", "stdin", "stdout"]);
        assert!(e.add(Some("stdout"), 1).is_ok());
        assert!(!e.complete());
        assert_eq!(e.add(Some("stdout"), 2).unwrap_err().1, 2, "a second stdout is refused");
        assert_eq!(e.add(Some("resize"), 3).unwrap_err().1, 3, "one not asked for too");
        assert!(e.add(None, 4).is_err());
        assert!(e.add(Some("error"), 5).is_ok() && e.add(Some("stdin"), 6).is_ok());
        assert!(e.complete());
        assert_eq!((e.take("stdin"), e.take("stderr")), (Some(6), None));
    }

    #[test]
    fn an_internal_failure_is_a_status_kubectl_prints() {
        let v: serde_json::Value = serde_json::from_str(&failure_status("boom")).unwrap();
        assert_eq!((v["status"].as_str(), v["message"].as_str(), v["reason"].as_str()), (Some("Failure"), Some("boom"), Some("InternalError")));
    }
}
