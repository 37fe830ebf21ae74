//! The node-agent subresources of pods: the API server calls the agent of the pod's node
//! on its kubelet API (`https://<InternalIP>:<daemonEndpoints.kubeletEndpoint.Port>`) as
//! user `kube-apiserver-kubelet-client` (group `system:masters`), with a certificate it
//! issues itself from the cluster CA, and streams the answer back. Like kube-apiserver
//! without `--kubelet-certificate-authority`, it does not verify the agent's
//! self-signed serving certificate.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::response::Response;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use serde_json::Value;

use crate::error::ApiError;
use crate::join::JoinMaterial;

/// The user the API server is on the agents' APIs.
pub const KUBELET_CLIENT_USER: &str = "kube-apiserver-kubelet-client";

/// TLS client configuration for agents' APIs.
pub(crate) struct KubeletClient {
    tls: Arc<rustls::ClientConfig>,
}

impl KubeletClient {
    /// Issues the API server's kubelet client certificate from the cluster CA.
    pub(crate) fn new(join: &JoinMaterial) -> Result<Self, String> {
        let ca = keelson_pki::ClusterCa::from_pem(&join.ca_cert_pem, &join.ca_key_pem).map_err(|e| e.to_string())?;
        let cert = ca.issue_client(KUBELET_CLIENT_USER, &["system:masters"]).map_err(|e| e.to_string())?;
        let chain: Vec<_> = rustls_pemfile::certs(&mut cert.cert_pem.as_bytes()).collect::<Result<_, _>>().map_err(|e| e.to_string())?;
        let key = rustls_pemfile::private_key(&mut cert.key_pem.as_bytes()).map_err(|e| e.to_string())?.ok_or("no private key")?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(crate::join_client::AcceptAnyServer(provider)))
            .with_client_auth_cert(chain, key)
            .map_err(|e| e.to_string())?;
        Ok(Self { tls: Arc::new(tls) })
    }

    /// An HTTP/1.1 connection (upgrades allowed) to the agent at `addr`.
    async fn connect(&self, addr: &str, host: &str) -> Result<hyper::client::conn::http1::SendRequest<http_body_util::Empty<bytes::Bytes>>, ApiError> {
        let unreachable = |e: &dyn std::fmt::Display| ApiError::Unavailable(format!("dialing the node agent at {addr}: {e}"));
        let tcp = tokio::time::timeout(std::time::Duration::from_secs(10), tokio::net::TcpStream::connect(addr))
            .await
            .map_err(|_| unreachable(&"dial tcp: i/o timeout"))?
            .map_err(|e| unreachable(&format!("dial tcp {addr}: connect: {e}")))?;
        let name = ServerName::try_from(host.to_string()).map_err(|e| unreachable(&e))?;
        let tls = tokio_rustls::TlsConnector::from(self.tls.clone()).connect(name, tcp).await.map_err(|e| unreachable(&e))?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.map_err(|e| unreachable(&e))?;
        tokio::spawn(conn.with_upgrades());
        Ok(sender)
    }

    /// `GET path` on the agent at `addr`; the response streams through.
    async fn get(&self, addr: &str, host: &str, path: &str) -> Result<Response, ApiError> {
        let mut sender = self.connect(addr, host).await?;
        let req = http::Request::get(path).header("host", addr).body(http_body_util::Empty::<bytes::Bytes>::new()).expect("a valid request");
        let resp = sender.send_request(req).await.map_err(|e| ApiError::Unavailable(format!("Get \"https://{addr}{path}\": {e}")))?;
        let (parts, body) = resp.into_parts();
        Ok(Response::from_parts(parts, Body::new(body)))
    }

    /// `GET path` on the agent at `addr`, answered as JSON within `timeout` (dial and
    /// answer together).
    pub(crate) async fn get_json(&self, addr: &str, host: &str, path: &str, timeout: std::time::Duration) -> Result<Value, ApiError> {
        let slow = || ApiError::Unavailable(format!("Get \"https://{addr}{path}\": no answer within {timeout:?}"));
        tokio::time::timeout(timeout, async {
            let resp = self.get(addr, host, path).await?;
            let code = resp.status();
            let body = axum::body::to_bytes(resp.into_body(), 64 << 20).await.map_err(|e| ApiError::Unavailable(format!("Get \"https://{addr}{path}\": {e}")))?;
            if !code.is_success() {
                return Err(ApiError::Unavailable(format!("Get \"https://{addr}{path}\": {code}: {}", String::from_utf8_lossy(&body))));
            }
            serde_json::from_slice(&body).map_err(|e| ApiError::Unavailable(format!("Get \"https://{addr}{path}\": {e}")))
        })
        .await
        .map_err(|_| slow())?
    }

    /// Sends `req`'s method and upgrade headers to `path` on the agent; a `101` answer
    /// joins the two upgraded connections byte for byte until either side closes.
    async fn upgrade(&self, addr: &str, host: &str, path: &str, mut req: axum::extract::Request) -> Result<Response, ApiError> {
        let mut sender = self.connect(addr, host).await?;
        let mut upstream = http::Request::builder().method(req.method().clone()).uri(path).header("host", addr);
        for (k, v) in req.headers() {
            let name = k.as_str();
            if matches!(name, "connection" | "upgrade" | "x-stream-protocol-version") || name.starts_with("sec-websocket-") {
                upstream = upstream.header(k, v);
            }
        }
        let upstream = upstream.body(http_body_util::Empty::<bytes::Bytes>::new()).map_err(|e| ApiError::BadRequest(e.to_string()))?;
        let client_side = hyper::upgrade::on(&mut req);
        let mut resp = sender.send_request(upstream).await.map_err(|e| ApiError::Unavailable(format!("the node agent at {addr}: {e}")))?;
        if resp.status() != http::StatusCode::SWITCHING_PROTOCOLS {
            let (parts, body) = resp.into_parts();
            return Ok(Response::from_parts(parts, Body::new(body)));
        }
        let agent_side = hyper::upgrade::on(&mut resp);
        tokio::spawn(async move {
            let (Ok(client), Ok(agent)) = tokio::join!(client_side, agent_side) else { return };
            let (mut client, mut agent) = (TokioIo::new(client), TokioIo::new(agent));
            let _ = tokio::io::copy_bidirectional(&mut client, &mut agent).await;
        });
        let mut out = Response::builder().status(http::StatusCode::SWITCHING_PROTOCOLS);
        for (k, v) in resp.headers() {
            out = out.header(k, v);
        }
        out.body(Body::empty()).map_err(|e| ApiError::Internal(e.to_string()))
    }
}

impl KubeletClient {
    /// A WebSocket exec or attach, answered to the client before the session opens on the
    /// agent. client-go registers its channels only once its handshake has returned and
    /// drops what arrives on a channel not yet registered ("Unknown stream id 1, discarding
    /// message"); proxying the agent's `101` would let a quick command's output follow it
    /// in the same packet. So, as kube-apiserver does, the agent is dialled first (an
    /// unreachable agent is still a 503), the client gets its `101`, and only then is the
    /// session asked of the agent, so the command starts a round trip after kubectl's
    /// handshake. If the agent refuses, its `Status` goes out on the error channel.
    async fn remote_command_websocket(&self, addr: &str, host: &str, path: &str, protocol: &'static str, mut req: axum::extract::Request) -> Result<Response, ApiError> {
        use super::websocket_handshake::{accept_key, failed_session_frames};
        let (key, version) = {
            let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
            (header("sec-websocket-key"), header("sec-websocket-version").unwrap_or_else(|| "13".into()))
        };
        let Some(key) = key else { return Err(ApiError::BadRequest("a WebSocket upgrade needs a Sec-WebSocket-Key".into())) };
        let method = req.method().clone();
        let mut sender = self.connect(addr, host).await?;
        let upstream = http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", addr)
            .header("connection", "Upgrade")
            .header("upgrade", "websocket")
            .header("sec-websocket-version", version)
            .header("sec-websocket-key", &key)
            .header("sec-websocket-protocol", protocol)
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .map_err(|e| ApiError::BadRequest(e.to_string()))?;
        let client_side = hyper::upgrade::on(&mut req);
        let addr = addr.to_string();
        let span = tracing::info_span!("remote-command-proxy", agent = %addr, protocol);
        tokio::spawn(tracing::Instrument::instrument(
            async move {
                use tokio::io::AsyncWriteExt;
                let Ok(client) = client_side.await else { return };
                let mut client = TokioIo::new(client);
                let mut resp = match sender.send_request(upstream).await {
                    Ok(resp) => resp,
                    Err(e) => {
                        let message = format!("error dialing backend: the node agent at {addr}: {e}");
                        let _ = client.write_all(&failed_session_frames(502, message.as_bytes())).await;
                        return;
                    }
                };
                if resp.status() != http::StatusCode::SWITCHING_PROTOCOLS {
                    let code = resp.status().as_u16();
                    let body = http_body_util::Limited::new(resp.into_body(), 64 << 10);
                    let body = http_body_util::BodyExt::collect(body).await.map(|b| b.to_bytes()).unwrap_or_default();
                    tracing::info!(code, "the node agent refused the session");
                    let _ = client.write_all(&failed_session_frames(code, &body)).await;
                    let _ = client.shutdown().await;
                    return;
                }
                let Ok(agent) = hyper::upgrade::on(&mut resp).await else { return };
                let _ = tokio::io::copy_bidirectional(&mut client, &mut TokioIo::new(agent)).await;
            },
            span,
        ));
        Response::builder()
            .status(http::StatusCode::SWITCHING_PROTOCOLS)
            .header("connection", "Upgrade")
            .header("upgrade", "websocket")
            .header("sec-websocket-accept", accept_key(&key))
            .header("sec-websocket-protocol", protocol)
            .body(Body::empty())
            .map_err(|e| ApiError::Internal(e.to_string()))
    }
}

/// The WebSocket subprotocol of tunnelled port-forwarding (kubectl 1.31+).
pub const PORT_FORWARD_TUNNEL_PROTOCOL: &str = "SPDY/3.1+portforward.k8s.io";

impl KubeletClient {
    /// Port-forwarding tunnelled in a WebSocket (kube-apiserver's `streamtunnel`): dials
    /// the agent with a SPDY upgrade, then carries the raw SPDY bytes, each binary message
    /// of the client to the agent as part of one byte stream and the agent's bytes back as
    /// binary messages. Only once the agent has switched protocols does the client get its
    /// `101`; anything else the agent answers is passed back as is.
    async fn tunnel(&self, addr: &str, host: &str, path: &str, req: axum::extract::Request) -> Result<Response, ApiError> {
        use axum::extract::ws::{Message, WebSocketUpgrade};
        use axum::extract::FromRequest;
        use futures::{SinkExt, StreamExt};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let ws = WebSocketUpgrade::from_request(req, &()).await.map_err(|e| ApiError::BadRequest(e.to_string()))?;
        let mut sender = self.connect(addr, host).await?;
        let upstream = http::Request::post(path)
            .header("host", addr)
            .header("connection", "Upgrade")
            .header("upgrade", "SPDY/3.1")
            .header("x-stream-protocol-version", "portforward.k8s.io")
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        let mut resp = sender.send_request(upstream).await.map_err(|e| ApiError::Unavailable(format!("the node agent at {addr}: {e}")))?;
        if resp.status() != http::StatusCode::SWITCHING_PROTOCOLS {
            let (parts, body) = resp.into_parts();
            return Ok(Response::from_parts(parts, Body::new(body)));
        }
        let agent_side = hyper::upgrade::on(&mut resp);
        Ok(ws.protocols([PORT_FORWARD_TUNNEL_PROTOCOL]).on_upgrade(move |socket| async move {
            let Ok(agent) = agent_side.await else { return };
            let (mut agent_rd, mut agent_wr) = tokio::io::split(TokioIo::new(agent));
            let (mut ws_tx, mut ws_rx) = socket.split();
            let up = async {
                while let Some(Ok(m)) = ws_rx.next().await {
                    match m {
                        Message::Binary(b) => {
                            if agent_wr.write_all(&b).await.is_err() {
                                break;
                            }
                        }
                        Message::Close(_) => break,
                        _ => {}
                    }
                }
                let _ = agent_wr.shutdown().await;
            };
            let down = async {
                let mut buf = vec![0u8; 32 * 1024];
                loop {
                    match agent_rd.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if ws_tx.send(Message::Binary(bytes::Bytes::copy_from_slice(&buf[..n]))).await.is_err() {
                                break;
                            }
                        }
                    }
                }
                let _ = ws_tx.send(Message::Close(None)).await;
            };
            // Either side ending ends the session: kubectl closes the WebSocket to stop.
            tokio::select! {
                _ = up => {}
                _ = down => {}
            }
        }))
    }
}

/// Whether `req` asks for tunnelled port-forwarding (a WebSocket offering
/// [`PORT_FORWARD_TUNNEL_PROTOCOL`]) rather than a SPDY upgrade.
pub(crate) fn wants_tunnel(headers: &http::HeaderMap) -> bool {
    let websocket = headers.get("upgrade").and_then(|v| v.to_str().ok()).is_some_and(|u| u.eq_ignore_ascii_case("websocket"));
    let offered = headers.get_all("sec-websocket-protocol").iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(',')).any(|p| p.trim() == PORT_FORWARD_TUNNEL_PROTOCOL);
    websocket && offered
}

/// `GET|POST pods/NAME/portforward`: a SPDY upgrade is proxied to the node's agent byte
/// for byte; a WebSocket offering `SPDY/3.1+portforward.k8s.io` is tunnelled to it; any
/// other WebSocket (ports in `?ports=`) is proxied byte for byte with its ports.
pub(crate) async fn pod_port_forward(kubelet: Option<&KubeletClient>, pod: &Value, node: &Value, req: axum::extract::Request) -> Result<Response, ApiError> {
    let name = pod.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
    let ns = pod.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("default");
    let phase = pod.pointer("/status/phase").and_then(Value::as_str).unwrap_or("");
    if phase == "Succeeded" || phase == "Failed" {
        return Err(ApiError::BadRequest(format!("cannot port-forward to a completed pod; current phase is {phase}")));
    }
    let Some(kubelet) = kubelet else { return Err(ApiError::Unavailable("this API server has no kubelet client identity (no cluster CA key)".into())) };
    let node_name = node.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
    let Some((addr, host)) = kubelet_address(node) else { return Err(ApiError::Unavailable(format!("node {node_name:?} reports no address"))) };
    let uid = pod.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or("");
    let path = if uid.is_empty() { format!("/portForward/{ns}/{name}") } else { format!("/portForward/{ns}/{name}/{uid}") };
    if wants_tunnel(req.headers()) {
        tracing::info!(pod = %format!("{ns}/{name}"), node = node_name, "port-forward tunnelled in a WebSocket");
        return kubelet.tunnel(&addr, &host, &path, req).await;
    }
    let websocket = req.headers().get("upgrade").and_then(|v| v.to_str().ok()).is_some_and(|u| u.eq_ignore_ascii_case("websocket"));
    if websocket {
        // The WebSocket form (kube-rs, and any v4.channel.k8s.io client) names its ports
        // in the query; the agent gets them as the kubelet's `port` parameters.
        let ports = port_forward_ports(req.uri().query().unwrap_or(""))?;
        let query: Vec<String> = ports.iter().map(|p| format!("port={p}")).collect();
        tracing::info!(pod = %format!("{ns}/{name}"), node = node_name, ports = ?ports, "port-forward over a WebSocket");
        return kubelet.upgrade(&addr, &host, &format!("{path}?{}", query.join("&")), req).await;
    }
    tracing::info!(pod = %format!("{ns}/{name}"), node = node_name, "port-forward over SPDY");
    kubelet.upgrade(&addr, &host, &path, req).await
}

/// The `ports` of a WebSocket port-forward request (PodPortForwardOptions): repeated or
/// comma-separated, each in 1..=65535, at least one.
pub(crate) fn port_forward_ports(query: &str) -> Result<Vec<u16>, ApiError> {
    let mut ports = Vec::new();
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        if k != "ports" {
            continue;
        }
        for p in v.split(',').map(str::trim) {
            match p.parse::<u16>() {
                Ok(port) if port > 0 => ports.push(port),
                _ => return Err(ApiError::BadRequest(format!("invalid port {p:?} in ports: port must be in the range 1 to 65535"))),
            }
        }
    }
    if ports.is_empty() {
        return Err(ApiError::BadRequest("at least one port must be specified in ports".into()));
    }
    Ok(ports)
}

/// The agent address of a Node: its InternalIP (else Hostname) and kubelet port.
pub(crate) fn kubelet_address(node: &Value) -> Option<(String, String)> {
    let addresses = node.pointer("/status/addresses")?.as_array()?;
    let pick = |t: &str| addresses.iter().find(|a| a["type"] == t).and_then(|a| a["address"].as_str()).map(String::from);
    let host = pick("InternalIP").or_else(|| pick("Hostname"))?;
    let port = node.pointer("/status/daemonEndpoints/kubeletEndpoint/Port").and_then(Value::as_u64).filter(|p| *p > 0).unwrap_or(10250);
    let addr = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
    Some((addr, host))
}

/// The container a `pods/log` request means: the named one, or the only one.
pub(crate) fn log_container(pod: &Value, name: &str, asked: Option<&str>) -> Result<String, ApiError> {
    let names = |key: &str| -> Vec<String> {
        pod.pointer(&format!("/spec/{key}")).and_then(Value::as_array).into_iter().flatten().filter_map(|c| c["name"].as_str().map(String::from)).collect()
    };
    let (containers, inits) = (names("containers"), names("initContainers"));
    match asked {
        Some(c) if containers.iter().chain(inits.iter()).any(|n| n == c) => Ok(c.to_string()),
        Some(c) => Err(ApiError::BadRequest(format!("container {c} is not valid for pod {name}"))),
        None if containers.len() == 1 => Ok(containers[0].clone()),
        None => {
            let mut msg = format!("a container name must be specified for pod {name}, choose one of: [{}]", containers.join(" "));
            if !inits.is_empty() {
                msg.push_str(&format!(" or one of the init containers: [{}]", inits.join(" ")));
            }
            Err(ApiError::BadRequest(msg))
        }
    }
}

const LOG_OPTIONS: &[&str] = &["follow", "previous", "timestamps", "sinceSeconds", "sinceTime", "tailLines", "limitBytes"];

/// The kubelet query of a log request: the PodLogOptions it carries, encoded.
fn log_query(q: &HashMap<String, String>) -> String {
    form_urlencoded::Serializer::new(String::new()).extend_pairs(LOG_OPTIONS.iter().filter_map(|k| Some((*k, q.get(*k)?)))).finish()
}

/// `GET pods/NAME/log`: the container's log from its node's agent.
pub(crate) async fn pod_log(kubelet: Option<&KubeletClient>, pod: &Value, node: &Value, q: &HashMap<String, String>) -> Result<Response, ApiError> {
    let name = pod.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
    let ns = pod.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("default");
    let container = log_container(pod, name, q.get("container").map(String::as_str))?;
    let Some(kubelet) = kubelet else { return Err(ApiError::Unavailable("this API server has no kubelet client identity (no cluster CA key)".into())) };
    let node_name = node.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
    let Some((addr, host)) = kubelet_address(node) else { return Err(ApiError::Unavailable(format!("node {node_name:?} reports no address")) ) };
    let query = log_query(q);
    let path = format!("/containerLogs/{ns}/{name}/{container}{}{query}", if query.is_empty() { "" } else { "?" });
    kubelet.get(&addr, &host, &path).await
}

/// Which remote-command subresource a request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RemoteCommand {
    Exec,
    Attach,
}

/// The agent's path for a remote command on `pod` asked with `raw` (the client's query):
/// `/{exec|attach}/{ns}/{pod}[/{uid}]/{container}` with the kubelet's query names
/// (`input`, `output`, `error`, `tty`, and for exec `command`, still encoded).
pub(crate) fn remote_command_path(kind: RemoteCommand, pod: &Value, raw: &str) -> Result<String, ApiError> {
    let name = pod.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
    let ns = pod.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("default");
    let pairs: Vec<(&str, &str)> = raw.split('&').filter(|p| !p.is_empty()).map(|p| p.split_once('=').unwrap_or((p, ""))).collect();
    let asked = pairs.iter().find(|(k, _)| *k == "container").map(|(_, v)| *v);
    let container = log_container(pod, name, asked)?;
    let phase = pod.pointer("/status/phase").and_then(Value::as_str).unwrap_or("");
    if phase == "Succeeded" || phase == "Failed" {
        return Err(ApiError::BadRequest(format!("cannot exec into or attach to a container in a completed pod; current phase is {phase}")));
    }
    if kind == RemoteCommand::Exec && !pairs.iter().any(|(k, _)| *k == "command") {
        return Err(ApiError::BadRequest("you must specify at least 1 command".into()));
    }
    let mut query = Vec::new();
    for (k, v) in &pairs {
        let on = *v == "true" || *v == "1";
        match *k {
            "command" if kind == RemoteCommand::Exec => query.push(format!("command={v}")),
            "stdin" if on => query.push("input=1".into()),
            "stdout" if on => query.push("output=1".into()),
            "stderr" if on => query.push("error=1".into()),
            "tty" if on => query.push("tty=1".into()),
            _ => {}
        }
    }
    let uid = pod.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or("");
    let sub = if kind == RemoteCommand::Exec { "exec" } else { "attach" };
    let query = query.join("&");
    Ok(if uid.is_empty() { format!("/{sub}/{ns}/{name}/{container}?{query}") } else { format!("/{sub}/{ns}/{name}/{uid}/{container}?{query}") })
}

/// `GET|POST pods/NAME/exec` and `pods/NAME/attach`: the upgraded session (WebSocket, or
/// SPDY from kubectl before 1.30) of the pod's node agent, proxied byte for byte.
pub(crate) async fn pod_remote_command(kubelet: Option<&KubeletClient>, kind: RemoteCommand, pod: &Value, node: &Value, req: axum::extract::Request) -> Result<Response, ApiError> {
    let path = remote_command_path(kind, pod, req.uri().query().unwrap_or(""))?;
    let Some(kubelet) = kubelet else { return Err(ApiError::Unavailable("this API server has no kubelet client identity (no cluster CA key)".into())) };
    let node_name = node.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
    let Some((addr, host)) = kubelet_address(node) else { return Err(ApiError::Unavailable(format!("node {node_name:?} reports no address"))) };
    let pod_name = pod.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
    let upgrade = req.headers().get("upgrade").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let sub = if kind == RemoteCommand::Exec { "pods/exec" } else { "pods/attach" };
    tracing::info!(pod = pod_name, node = node_name, upgrade = %upgrade, "{sub}");
    if upgrade.eq_ignore_ascii_case("websocket") {
        let offered = req.headers().get_all("sec-websocket-protocol").iter().filter_map(|v| v.to_str().ok());
        if let Some(protocol) = super::websocket_handshake::remote_command_protocol(offered) {
            return kubelet.remote_command_websocket(&addr, &host, &path, protocol, req).await;
        }
    }
    kubelet.upgrade(&addr, &host, &path, req).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_only_container_or_the_named_one() {
        let pod = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}], "initContainers": [{"name": "i"}]}});
        assert_eq!(log_container(&pod, "p", Some("b")).unwrap(), "b");
        assert_eq!(log_container(&pod, "p", Some("i")).unwrap(), "i");
        let e = log_container(&pod, "p", None).unwrap_err().to_string();
        assert!(e.contains("a container name must be specified for pod p, choose one of: [a b] or one of the init containers: [i]"), "{e}");
        assert!(log_container(&pod, "p", Some("z")).unwrap_err().to_string().contains("container z is not valid for pod p"));
        let one = json!({"spec": {"containers": [{"name": "only"}]}});
        assert_eq!(log_container(&one, "p", None).unwrap(), "only");
    }

    #[test]
    fn only_a_websocket_offering_the_tunnel_protocol_is_tunnelled() {
        let h = |pairs: &[(&str, &str)]| {
            let mut m = http::HeaderMap::new();
            for (k, v) in pairs {
                m.append(http::HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap());
            }
            m
        };
        assert!(wants_tunnel(&h(&[("upgrade", "websocket"), ("sec-websocket-protocol", "SPDY/3.1+portforward.k8s.io")])));
        assert!(wants_tunnel(&h(&[("upgrade", "WebSocket"), ("sec-websocket-protocol", "v4.channel.k8s.io, SPDY/3.1+portforward.k8s.io")])));
        assert!(!wants_tunnel(&h(&[("upgrade", "SPDY/3.1"), ("x-stream-protocol-version", "portforward.k8s.io")])));
        assert!(!wants_tunnel(&h(&[("upgrade", "websocket"), ("sec-websocket-protocol", "v5.channel.k8s.io")])));
    }

    #[test]
    fn websocket_port_forwards_name_their_ports() {
        assert_eq!(port_forward_ports("ports=80%2C1234").unwrap(), vec![80, 1234], "kube-rs's form");
        assert_eq!(port_forward_ports("ports=80&ports=8080").unwrap(), vec![80, 8080]);
        for bad in ["", "ports=", "ports=0", "ports=x", "ports=80,70000"] {
            let e = port_forward_ports(bad).unwrap_err();
            assert!(matches!(e, ApiError::BadRequest(_)), "{bad:?}: {e}");
        }
        assert!(port_forward_ports("").unwrap_err().to_string().contains("at least one port must be specified"));
    }

    #[test]
    fn agents_are_reached_on_their_internal_ip_and_kubelet_port() {
        let node = json!({"status": {"addresses": [{"type": "Hostname", "address": "n1"}, {"type": "InternalIP", "address": "10.0.0.5"}], "daemonEndpoints": {"kubeletEndpoint": {"Port": 10251}}}});
        assert_eq!(kubelet_address(&node), Some(("10.0.0.5:10251".into(), "10.0.0.5".into())));
        assert_eq!(kubelet_address(&json!({"status": {"addresses": [{"type": "Hostname", "address": "n2"}]}})), Some(("n2:10250".into(), "n2".into())));
        let q: HashMap<String, String> = [("sinceTime", "2026-01-01T00:00:00Z"), ("container", "c"), ("follow", "true")].into_iter().map(|(k, v)| (k.into(), v.into())).collect();
        assert_eq!(log_query(&q), "follow=true&sinceTime=2026-01-01T00%3A00%3A00Z", "only log options, in a fixed order, encoded");
    }

    #[test]
    fn remote_commands_reach_the_agent_with_the_kubelets_query() {
        let pod = json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u-1"}, "spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Running"}});
        let q = "command=sh&command=-c&command=echo%20hi&container=c&stdin=true&stdout=true&stderr=true&tty=false";
        assert_eq!(remote_command_path(RemoteCommand::Exec, &pod, q).unwrap(), "/exec/ns/p/u-1/c?command=sh&command=-c&command=echo%20hi&input=1&output=1&error=1");
        // Attach takes no command, and needs none.
        assert_eq!(remote_command_path(RemoteCommand::Attach, &pod, "command=x&stdin=true&stdout=true&tty=true").unwrap(), "/attach/ns/p/u-1/c?input=1&output=1&tty=1");
        assert!(remote_command_path(RemoteCommand::Exec, &pod, "stdout=true").unwrap_err().to_string().contains("you must specify at least 1 command"));
        let done = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Succeeded"}});
        let e = remote_command_path(RemoteCommand::Attach, &done, "stdin=true").unwrap_err().to_string();
        assert!(e.contains("cannot exec into or attach to a container in a completed pod; current phase is Succeeded"), "{e}");
        let no_uid = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}});
        assert_eq!(remote_command_path(RemoteCommand::Attach, &no_uid, "stdout=1").unwrap(), "/attach/default/p/c?output=1");
    }
}
