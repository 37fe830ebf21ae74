//! `exec` over WebSocket (`v5.channel.k8s.io`, as kubectl 1.30+ speaks it, and
//! `v4.channel.k8s.io`): the agent asks the runtime for an exec session (CRI `Exec`),
//! connects to the runtime's streaming server over WebSocket and relays the channel
//! frames both ways (0 stdin, 1 stdout, 2 stderr, 3 status, 4 resize — the framing is the
//! same on both sides). The runtime's server speaks v4, which cannot half-close stdin, so
//! a v5 close of stdin (`[255, 0]`) is not passed on.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path as UrlPath, RawQuery, State};
use axum::http::{Response, StatusCode};
use axum::response::IntoResponse;
use axum::Extension;
use futures::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite;

use super::{status, ApiState, Caller};
use crate::runtime::{ContainerState, Streams};

/// The subprotocols the agent answers, most preferred first.
pub const PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];

/// What an exec request asks: the command and the streams (kubelet query names
/// `input`/`output`/`error`/`tty`, or kubectl's `stdin`/`stdout`/`stderr`/`tty`).
pub fn exec_request(query: &str) -> (Vec<String>, Streams) {
    let mut command = Vec::new();
    let mut s = Streams::default();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v = percent_decode(v);
        let on = v == "1" || v == "true";
        match k {
            "command" => command.push(v),
            "input" | "stdin" => s.stdin = on,
            "output" | "stdout" => s.stdout = on,
            "error" | "stderr" => s.stderr = on,
            "tty" => s.tty = on,
            _ => {}
        }
    }
    (command, s)
}

fn percent_decode(v: &str) -> String {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                match u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz"), 16) {
                    Ok(x) => {
                        out.push(x);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub(super) async fn exec(
    State(state): State<Arc<ApiState>>,
    Extension(caller): Extension<Caller>,
    UrlPath(path): UrlPath<HashMap<String, String>>,
    RawQuery(query): RawQuery,
    ws: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response<Body> {
    if !state.authorized(&caller, "create", "proxy").await && !state.authorized(&caller, "get", "proxy").await {
        return status(StatusCode::FORBIDDEN, "Forbidden", format!("Forbidden (user={}, verb=create, resource=nodes, subresource=proxy)", caller.user));
    }
    let (ns, pod, container) = (path.get("namespace").cloned().unwrap_or_default(), path.get("pod").cloned().unwrap_or_default(), path.get("container").cloned().unwrap_or_default());
    let Ok(ws) = ws else {
        return status(StatusCode::BAD_REQUEST, "BadRequest", "exec needs a WebSocket upgrade (v5.channel.k8s.io or v4.channel.k8s.io); SPDY is not served by this agent".into());
    };
    let (command, streams) = exec_request(query.as_deref().unwrap_or(""));
    if command.is_empty() {
        return status(StatusCode::BAD_REQUEST, "BadRequest", "you must specify at least 1 command".into());
    }
    let containers = state.runtime.list_containers().await.unwrap_or_default();
    let Some(target) = containers
        .iter()
        .filter(|c| c.pod_namespace == ns && c.pod_name == pod && c.name == container && matches!(c.state, ContainerState::Running { .. }))
        .max_by_key(|c| c.attempt)
    else {
        return status(StatusCode::NOT_FOUND, "NotFound", format!("container {container} of pod {ns}/{pod} is not running on node {}", state.node));
    };
    let url = match state.runtime.exec_stream(&target.id, &command, streams).await {
        Ok(u) => u,
        Err(e) => return status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", e.to_string()),
    };
    let span = tracing::info_span!("exec", pod = %format!("{ns}/{pod}"), container = %container);
    ws.protocols(PROTOCOLS).on_upgrade(move |socket| tracing::Instrument::instrument(relay(socket, url), span)).into_response()
}

/// Relays frames between the caller and the runtime's streaming server until either ends.
async fn relay(client: WebSocket, url: String) {
    let ws_url = url.replacen("http://", "ws://", 1).replacen("https://", "wss://", 1);
    let mut request = match tungstenite::client::IntoClientRequest::into_client_request(ws_url.as_str()) {
        Ok(r) => r,
        Err(e) => return tracing::info!(error = %e, "exec URL"),
    };
    request.headers_mut().insert("Sec-WebSocket-Protocol", http::HeaderValue::from_static("v4.channel.k8s.io"));
    let (runtime, _) = match tokio_tungstenite::connect_async(request).await {
        Ok(c) => c,
        Err(e) => {
            tracing::info!(error = %e, "connecting to the runtime's streaming server");
            let (mut tx, _) = client.split();
            let status = serde_json::json!({"metadata": {}, "status": "Failure", "message": format!("connecting to the container runtime: {e}"), "reason": "InternalError", "code": 500});
            let mut frame = vec![3u8];
            frame.extend_from_slice(status.to_string().as_bytes());
            let _ = tx.send(Message::Binary(frame.into())).await;
            let _ = tx.close().await;
            return;
        }
    };
    let (mut rt_tx, mut rt_rx) = runtime.split();
    let (mut cl_tx, mut cl_rx) = client.split();
    let up = async {
        while let Some(Ok(m)) = cl_rx.next().await {
            match m {
                Message::Binary(b) if b.first() == Some(&255) => {}
                Message::Binary(b) => {
                    if rt_tx.send(tungstenite::Message::Binary(b)).await.is_err() {
                        break;
                    }
                }
                Message::Close(_) => break,
                _ => {}
            }
        }
        let _ = rt_tx.close().await;
    };
    let down = async {
        while let Some(Ok(m)) = rt_rx.next().await {
            match m {
                tungstenite::Message::Binary(b) => {
                    if cl_tx.send(Message::Binary(b)).await.is_err() {
                        break;
                    }
                }
                tungstenite::Message::Close(_) => break,
                _ => {}
            }
        }
        let _ = cl_tx.send(Message::Close(Some(axum::extract::ws::CloseFrame { code: 1000, reason: "".into() }))).await;
    };
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_and_streams_from_either_query_spelling() {
        let (cmd, s) = exec_request("command=sh&command=-c&command=echo%20hi%3Bexit%203&input=1&output=1&tty=1");
        assert_eq!(cmd, ["sh", "-c", "echo hi;exit 3"]);
        assert_eq!(s, Streams { stdin: true, stdout: true, stderr: false, tty: true });
        let (_, s) = exec_request("command=ls&stdout=true&stderr=true");
        assert_eq!(s, Streams { stdout: true, stderr: true, ..Default::default() });
    }
}
