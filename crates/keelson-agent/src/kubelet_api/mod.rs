//! The agent's HTTPS API on port 10250, as the kubelet's: the API server reaches it for
//! `pods/log`, `pods/exec` and `pods/attach` (WebSocket or SPDY, [`exec`], bridged to the
//! runtime over SPDY by [`cri_stream`]) and `pods/portforward` (SPDY, [`port_forward`], or
//! a WebSocket naming its ports, [`port_forward_ws`]);
//! metrics-style readers get `/stats/summary` (`nodes/stats`) and `/metrics/resource`
//! (`nodes/metrics`) from the node's [`StatsCollector`](crate::stats::StatsCollector), and
//! `/metrics` (`nodes/metrics`) the agent's own [`AgentMetrics`](crate::metrics::AgentMetrics).
//! Callers authenticate with a client certificate of the cluster CA and are authorized
//! by a SubjectAccessReview on the node (`nodes/proxy`, `nodes/log`, `nodes/stats`), as the kubelet's webhook mode
//! does; answers are cached 5 minutes (allowed) or 30 seconds (denied).
//!
//! The serving certificate is self-signed at start (the kubelet's default); the API
//! server, like kube-apiserver without `--kubelet-certificate-authority`, does not check it.

pub mod cri_stream;
pub mod exec;
pub mod logs;
pub mod port_forward;
pub mod port_forward_ws;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{Response, StatusCode};
use axum::routing::get;
use axum::{Extension, Router};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::runtime::{ContainerState, Runtime};
use logs::LogOptions;

/// The default kubelet API port.
pub const KUBELET_PORT: u16 = 10250;

/// Starting the API failed.
#[derive(Debug, thiserror::Error)]
pub enum KubeletApiError {
    #[error("binding {addr}: {source}")]
    Bind { addr: SocketAddr, #[source] source: std::io::Error },
    #[error("TLS: {0}")]
    Tls(String),
}

/// Who called, from the client certificate.
#[derive(Clone, Debug)]
pub(crate) struct Caller {
    user: String,
    groups: Vec<String>,
}

pub(crate) struct ApiState {
    client: kube::Client,
    runtime: Arc<dyn Runtime>,
    node: String,
    logs_dir: PathBuf,
    stats: Arc<crate::stats::StatsCollector>,
    metrics: crate::metrics::AgentMetrics,
    decisions: Mutex<HashMap<AccessQuestion, AccessDecision>>,
}

/// Who asked to do what to which subresource: (user, groups, verb, subresource).
type AccessQuestion = (String, Vec<String>, &'static str, &'static str);
/// A SubjectAccessReview's answer, and until when it is trusted (as kubelet caches them).
type AccessDecision = (bool, Instant);

/// What the API serves to metrics readers.
pub struct Served {
    pub stats: Arc<crate::stats::StatsCollector>,
    pub metrics: crate::metrics::AgentMetrics,
}

/// Serves the API on `listen` until `shutdown`; returns the bound address.
#[allow(clippy::too_many_arguments)]
pub async fn serve(
    listen: SocketAddr,
    client: kube::Client,
    runtime: Arc<dyn Runtime>,
    served: Served,
    node: &str,
    node_ip: &str,
    ca_pem: &str,
    logs_dir: &Path,
    shutdown: CancellationToken,
) -> Result<SocketAddr, KubeletApiError> {
    let tls = Arc::new(tls_config(node, node_ip, ca_pem)?);
    let listener = tokio::net::TcpListener::bind(listen).await.map_err(|source| KubeletApiError::Bind { addr: listen, source })?;
    let addr = listener.local_addr().map_err(|source| KubeletApiError::Bind { addr: listen, source })?;
    let state = Arc::new(ApiState { client, runtime, node: node.into(), logs_dir: logs_dir.to_path_buf(), stats: served.stats, metrics: served.metrics, decisions: Mutex::default() });
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/stats/summary", get(stats_summary))
        .route("/metrics/resource", get(metrics_resource))
        .route("/metrics", get(agent_metrics))
        .route("/containerLogs/{namespace}/{pod}/{container}", get(container_logs))
        .route("/exec/{namespace}/{pod}/{container}", get(exec::exec).post(exec::exec))
        .route("/exec/{namespace}/{pod}/{uid}/{container}", get(exec::exec).post(exec::exec))
        .route("/attach/{namespace}/{pod}/{container}", get(exec::attach).post(exec::attach))
        .route("/attach/{namespace}/{pod}/{uid}/{container}", get(exec::attach).post(exec::attach))
        .route("/portForward/{namespace}/{pod}", get(port_forward::port_forward).post(port_forward::port_forward))
        .route("/portForward/{namespace}/{pod}/{uid}", get(port_forward::port_forward).post(port_forward::port_forward))
        .with_state(state);
    let (accept, mut incoming) = keelson_client::tls::spawn_accept(listener, tls, Duration::from_secs(10), shutdown.clone());
    tokio::spawn(async move {
        use futures::StreamExt;
        while let Some(conn) = incoming.next().await {
            let Ok(tls) = conn else { continue };
            let caller = tls.get_ref().1.peer_certificates().and_then(|c| c.first()).and_then(|c| keelson_pki::client_identity(c.as_ref())).map(|(user, groups)| Caller { user, groups });
            let Some(caller) = caller else { continue };
            let app = app.clone().layer(Extension(caller));
            let token = shutdown.clone();
            tokio::spawn(async move {
                let svc = hyper_util::service::TowerToHyperService::new(app);
                let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                let conn = builder.serve_connection_with_upgrades(TokioIo::new(tls), svc);
                tokio::pin!(conn);
                tokio::select! {
                    _ = conn.as_mut() => {}
                    _ = token.cancelled() => {}
                }
            });
        }
        let _ = accept.await;
    });
    tracing::info!(%addr, "kubelet API serving");
    Ok(addr)
}

fn tls_config(node: &str, node_ip: &str, ca_pem: &str) -> Result<rustls::ServerConfig, KubeletApiError> {
    let err = |e: &dyn std::fmt::Display| KubeletApiError::Tls(e.to_string());
    let own = keelson_pki::ClusterCa::generate(&format!("{node}-kubelet")).map_err(|e| err(&e))?;
    let cert = own.issue_serving(node, &[node.to_string(), node_ip.to_string(), "127.0.0.1".into()]).map_err(|e| err(&e))?;
    let chain: Vec<_> = rustls_pemfile::certs(&mut cert.cert_pem.as_bytes()).collect::<Result<_, _>>().map_err(|e| err(&e))?;
    let key = rustls_pemfile::private_key(&mut cert.key_pem.as_bytes()).map_err(|e| err(&e))?.ok_or_else(|| KubeletApiError::Tls("no key".into()))?;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pemfile::certs(&mut ca_pem.as_bytes()) {
        roots.add(c.map_err(|e| err(&e))?).map_err(|e| err(&e))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone()).build().map_err(|e| err(&e))?;
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| err(&e))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|e| err(&e))?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(cfg)
}

pub(crate) fn status(code: StatusCode, reason: &str, message: String) -> Response<Body> {
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code.as_u16()});
    Response::builder().status(code).header("content-type", "application/json").body(Body::from(body.to_string())).expect("a valid response")
}

/// The kubelet's 403 for a caller not allowed `verb` on `nodes/<sub>`.
pub(crate) fn forbidden(caller: &Caller, verb: &str, sub: &str) -> Response<Body> {
    status(StatusCode::FORBIDDEN, "Forbidden", format!("Forbidden (user={}, verb={verb}, resource=nodes, subresource={sub})", caller.user))
}

impl ApiState {
    /// Nothing when `caller` may `verb` `nodes/<sub>` of this node, else the 403 to answer.
    pub(crate) async fn allow(&self, caller: &Caller, verb: &'static str, sub: &'static str) -> Result<(), Response<Body>> {
        match self.authorized(caller, verb, sub).await {
            true => Ok(()),
            false => Err(forbidden(caller, verb, sub)),
        }
    }

    /// Whether `caller` may `verb` `nodes/<sub>` of this node (SubjectAccessReview).
    pub(crate) async fn authorized(&self, caller: &Caller, verb: &'static str, sub: &'static str) -> bool {
        let key = (caller.user.clone(), caller.groups.clone(), verb, sub);
        if let Some((allowed, until)) = self.decisions.lock().expect("lock").get(&key) {
            if Instant::now() < *until {
                return *allowed;
            }
        }
        let review = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": caller.user, "groups": caller.groups, "resourceAttributes": {"verb": verb, "resource": "nodes", "subresource": sub, "name": self.node}}});
        let req = http::Request::post("/apis/authorization.k8s.io/v1/subjectaccessreviews")
            .header("content-type", "application/json")
            .body(review.to_string().into_bytes())
            .expect("a valid request");
        let allowed = match self.client.request::<serde_json::Value>(req).await {
            Ok(v) => v["status"]["allowed"].as_bool().unwrap_or(false),
            Err(e) => {
                tracing::info!(error = %e, "SubjectAccessReview failed");
                return false;
            }
        };
        let ttl = if allowed { Duration::from_secs(300) } else { Duration::from_secs(30) };
        self.decisions.lock().expect("lock").insert(key, (allowed, Instant::now() + ttl));
        allowed
    }
}

/// `GET /stats/summary`: the kubelet's Summary API (`nodes/stats`).
async fn stats_summary(State(state): State<Arc<ApiState>>, Extension(caller): Extension<Caller>) -> Response<Body> {
    if let Err(denied) = state.allow(&caller, "get", "stats").await {
        return denied;
    }
    let body = state.stats.summary().await;
    Response::builder().header("content-type", "application/json").body(Body::from(body.to_string())).expect("a valid response")
}

/// `GET /metrics/resource`: resource usage in Prometheus text (`nodes/metrics`).
async fn metrics_resource(State(state): State<Arc<ApiState>>, Extension(caller): Extension<Caller>) -> Response<Body> {
    if let Err(denied) = state.allow(&caller, "get", "metrics").await {
        return denied;
    }
    let text = crate::stats::resource_metrics(&state.stats.summary().await);
    Response::builder().header("content-type", "text/plain; version=0.0.4").body(Body::from(text)).expect("a valid response")
}

/// `GET /metrics`: the agent's own metrics (`nodes/metrics`).
async fn agent_metrics(State(state): State<Arc<ApiState>>, Extension(caller): Extension<Caller>) -> Response<Body> {
    if let Err(denied) = state.allow(&caller, "get", "metrics").await {
        return denied;
    }
    Response::builder().header("content-type", "application/openmetrics-text; version=1.0.0; charset=utf-8").body(Body::from(state.metrics.render())).expect("a valid response")
}

/// The newest log folder of pod `namespace/name` (`<ns>_<name>_<uid>`) and its uid.
fn pod_log_dir(logs_dir: &Path, namespace: &str, pod: &str) -> Option<(PathBuf, String)> {
    let prefix = format!("{namespace}_{pod}_");
    std::fs::read_dir(logs_dir)
        .ok()?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            let uid = name.strip_prefix(&prefix)?.to_string();
            let modified = e.metadata().and_then(|m| m.modified()).ok()?;
            Some((modified, e.path(), uid))
        })
        .max_by_key(|(m, _, _)| *m)
        .map(|(_, p, uid)| (p, uid))
}

/// The container's log files by attempt, oldest first.
fn attempts(dir: &Path) -> Vec<(u32, PathBuf)> {
    let mut v: Vec<(u32, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().strip_suffix(".log")?.parse::<u32>().ok()?;
            Some((n, e.path()))
        })
        .collect();
    v.sort();
    v
}

async fn container_logs(
    State(state): State<Arc<ApiState>>,
    Extension(caller): Extension<Caller>,
    UrlPath((namespace, pod, container)): UrlPath<(String, String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Response<Body> {
    if let Err(denied) = state.allow(&caller, "get", "proxy").await {
        return denied;
    }
    let opts = match LogOptions::from_query(&q, jiff::Timestamp::now().as_nanosecond()) {
        Ok(o) => o,
        Err(e) => return status(StatusCode::BAD_REQUEST, "BadRequest", e),
    };
    let span = tracing::info_span!("container-logs", pod = %format!("{namespace}/{pod}"), container = %container, follow = opts.follow);
    let _enter = span.enter();
    let Some((dir, uid)) = pod_log_dir(&state.logs_dir, &namespace, &pod) else {
        return status(StatusCode::NOT_FOUND, "NotFound", format!("pod \"{pod}\" not found on node {}", state.node));
    };
    let files = attempts(&dir.join(&container));
    let chosen = if opts.previous { files.len().checked_sub(2).map(|i| files[i].clone()) } else { files.last().cloned() };
    let Some((attempt, path)) = chosen else {
        let msg = if opts.previous {
            format!("previous terminated container \"{container}\" in pod \"{pod}\" not found")
        } else {
            format!("container \"{container}\" in pod \"{pod}\" is waiting to start: ContainerCreating")
        };
        return status(StatusCode::BAD_REQUEST, "BadRequest", msg);
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<bytes::Bytes, std::io::Error>>(16);
    let runtime = state.runtime.clone();
    let follow = opts.follow && !opts.previous;
    tokio::spawn(async move { stream_log(path, opts, follow, runtime, uid, container, attempt, tx).await });
    Response::builder()
        .header("content-type", "text/plain")
        .header("transfer-encoding", "chunked")
        .body(Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx)))
        .expect("a valid response")
}

/// Whether the container's instance `attempt` of pod `uid` is still running.
async fn running(runtime: &dyn Runtime, uid: &str, container: &str, attempt: u32) -> bool {
    match runtime.pod_containers(uid).await {
        Ok(cs) => cs.iter().any(|c| c.name == container && c.attempt == attempt && matches!(c.state, ContainerState::Running { .. } | ContainerState::Created)),
        Err(_) => false,
    }
}

/// The response body, at most `limitBytes` long.
struct Sink {
    tx: tokio::sync::mpsc::Sender<Result<bytes::Bytes, std::io::Error>>,
    budget: usize,
}

impl Sink {
    /// Sends `text` (cut to the budget); false once the client is gone.
    async fn send(&mut self, mut text: String) -> bool {
        if text.len() > self.budget {
            let mut cut = self.budget;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
        }
        self.budget -= text.len();
        text.is_empty() || self.tx.send(Ok(bytes::Bytes::from(text))).await.is_ok()
    }
}

/// How much of a log file one read takes: a large log streams through a chunk at a time.
const LOG_CHUNK: usize = 1 << 20;
/// Each read asks the file for this much: a follower waiting on a quiet log holds no
/// more than that (and its partial record).
const LOG_READ: usize = 64 << 10;

/// Reads up to [`LOG_CHUNK`] more bytes of `file` onto `pending`: how many.
async fn read_chunk(file: &mut tokio::fs::File, pending: &mut Vec<u8>) -> usize {
    use tokio::io::AsyncReadExt;
    let mut total = 0;
    while total < LOG_CHUNK {
        pending.reserve(LOG_READ);
        match file.read_buf(pending).await {
            Ok(0) | Err(_) => break,
            Ok(n) => total += n,
        }
    }
    total
}

/// Drops the records sent (`used` bytes) and the room a large read needed.
fn consume(pending: &mut Vec<u8>, used: usize) {
    pending.drain(..used);
    pending.shrink_to(LOG_READ.max(pending.len()));
}

/// Sends the selected lines of the log at `path`, a chunk at a time, then, when
/// following, what is appended (read from where the last read ended, every 200 ms) until
/// the container stops.
#[allow(clippy::too_many_arguments)]
async fn stream_log(path: PathBuf, opts: LogOptions, follow: bool, runtime: Arc<dyn Runtime>, uid: String, container: String, attempt: u32, tx: tokio::sync::mpsc::Sender<Result<bytes::Bytes, std::io::Error>>) {
    let mut sink = Sink { tx, budget: opts.limit_bytes.unwrap_or(usize::MAX) };
    let mut file = tokio::fs::File::open(&path).await.ok();
    let mut pending = Vec::new();
    let mut selector = logs::Selector::new(&opts);
    while let Some(f) = file.as_mut() {
        if read_chunk(f, &mut pending).await == 0 {
            break;
        }
        let (lines, used) = logs::parse_bytes(&pending);
        consume(&mut pending, used);
        let now = selector.feed(lines);
        if !sink.send(logs::render(&now, opts.timestamps)).await || sink.budget == 0 {
            return;
        }
    }
    if !sink.send(logs::render(&selector.finish(), opts.timestamps)).await || !follow || sink.budget == 0 {
        return;
    }
    let mut checked = Instant::now();
    let mut alive = true;
    // A full chunk means more is likely waiting: read on without the pause.
    let mut behind = false;
    loop {
        if !behind {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        if file.is_none() {
            file = tokio::fs::File::open(&path).await.ok();
        }
        let read = match file.as_mut() {
            Some(f) => read_chunk(f, &mut pending).await,
            None => 0,
        };
        behind = read == LOG_CHUNK;
        if read > 0 {
            let (lines, used) = logs::parse_bytes(&pending);
            consume(&mut pending, used);
            let lines: Vec<_> = lines.into_iter().filter(|l| opts.since_nanos.is_none_or(|s| l.nanos >= s)).collect();
            if !sink.send(logs::render(&lines, opts.timestamps)).await || sink.budget == 0 {
                return;
            }
            continue;
        }
        if !alive {
            return;
        }
        if sink.tx.is_closed() {
            return;
        }
        if checked.elapsed() >= Duration::from_secs(1) {
            checked = Instant::now();
            // One more read after the container stops, for what it wrote last.
            alive = running(runtime.as_ref(), &uid, &container, attempt).await;
        }
    }
}
