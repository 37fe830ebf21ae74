//! The HTTP front: TLS accept loop, authentication, routing to handlers.

mod discovery;
mod list;
mod metrics_api;
mod patch;
mod node_admission;
mod node_proxy;
mod websocket_handshake;
mod review;
pub mod negotiate;
pub mod request;
mod resource;
mod subresource;
pub mod tls;
mod watch;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::{Method, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use keelson_client::StoreClient;
use serde_json::Value;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::audit::{AuditEntry, AuditLog};
use crate::auth::authn::{user, TokenAuthenticator, TokenIdentity};
use crate::auth::authz::RbacAuthorizer;
use crate::auth::sa_token::TokenSigner;
use crate::error::ApiError;
use crate::registry::Registry;
use crate::storage::ObjectStore;
use crate::ApiServerError;
use request::{parse_query, route, Route};
use tls::Identity;

/// What the API server needs to start.
#[derive(Clone, Debug)]
pub struct ApiServerConfig {
    pub listen: SocketAddr,
    /// Serving certificate and key (PEM).
    pub cert_pem: String,
    pub key_pem: String,
    /// CA whose client certificates are accepted (PEM).
    pub client_ca_pem: String,
    /// The replica's store endpoint (`host:port`) the API server reads and writes through.
    pub store_endpoint: String,
    /// Client identity for the replica's store API when it requires mutual TLS (live: a
    /// replaced certificate is used for every later connection).
    pub store_tls: Option<Arc<keelson_client::PeerIdentity>>,
    /// The cluster's Secrets encryption key (32 bytes); `None` stores Secrets in plaintext.
    pub secrets_key: Option<Vec<u8>>,
    /// PKCS#8 PEM ECDSA P-256 key signing ServiceAccount tokens.
    pub service_account_key_pem: Option<String>,
    /// Static bearer tokens (`token,user,uid,"groups"` per line).
    pub token_auth_file: Option<std::path::PathBuf>,
    /// Audit log of mutating requests.
    pub audit: Option<AuditConfig>,
    /// Key material handed to servers joining with a token; `None` disables joining here.
    pub join: Option<crate::join::JoinMaterial>,
    /// Reissue the serving certificate before it expires.
    pub cert_rotation: Option<keelson_pki::rotation::CertRotation>,
    /// A join token (id, secret) to register if absent (the first server's token; no
    /// expiry, usable by servers and nodes).
    pub initial_join_token: Option<(String, String)>,
    /// Keep this server's identity Lease (how clients' balancers find every server).
    pub identity: Option<crate::identity_lease::ServerIdentity>,
    /// Read-only and mutating requests served at once before 429 (0: no limit); see
    /// [`crate::inflight`].
    pub max_requests_inflight: usize,
    pub max_mutating_requests_inflight: usize,
    /// Failed authentication attempts per source before it is locked out; see
    /// [`crate::auth::lockout`].
    pub auth_failures: crate::auth::lockout::AuthFailureLimits,
}

/// Where the audit log goes and how it rotates.
#[derive(Clone, Debug)]
pub struct AuditConfig {
    pub path: std::path::PathBuf,
    pub max_bytes: u64,
    pub backups: usize,
}

/// A running API server.
pub struct ServingApi {
    pub addr: SocketAddr,
    pub task: JoinHandle<()>,
    /// True once the built-in namespaces, RBAC defaults and the rest exist.
    defaults: tokio::sync::watch::Receiver<bool>,
}

impl ServingApi {
    /// Returns once the built-in objects exist in the store, among them the RBAC roles of
    /// the system components: a component started before would be denied its first
    /// requests.
    pub async fn defaults_created(&self) {
        let _ = self.defaults.clone().wait_for(|created| *created).await;
    }
}

pub(crate) struct ApiState {
    pub registry: Registry,
    pub shutdown: CancellationToken,
    pub advertise: String,
    pub authn: TokenAuthenticator,
    pub authz: Arc<RbacAuthorizer>,
    pub audit: Option<AuditLog>,
    pub join: Option<crate::join::JoinMaterial>,
    pub ca_pem: String,
    pub metrics: crate::metrics::ApiMetrics,
    pub watch_cache: Arc<crate::watch_cache::WatchCache>,
    /// How this server reaches node agents (logs); `None` without the CA key.
    pub kubelet: Option<node_proxy::KubeletClient>,
    pub inflight: crate::inflight::InflightLimits,
    pub status_page: Arc<crate::ui::StatusPage>,
    pub auth_failures: crate::auth::lockout::AuthFailures,
}

/// Longest a client's TLS handshake may take before its connection is dropped.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Binds the listener and serves until `shutdown` is cancelled.
pub async fn serve(cfg: ApiServerConfig, shutdown: CancellationToken) -> Result<ServingApi, ApiServerError> {
    let serving = Arc::new(
        keelson_client::tls::ReloadableCert::new(&cfg.cert_pem, &cfg.key_pem).map_err(|e| ApiServerError::Tls(format!("serving certificate: {e}")))?,
    );
    let tls = Arc::new(tls::server_config(serving.clone(), &cfg.client_ca_pem)?);
    if let Some(rot) = cfg.cert_rotation.clone() {
        tokio::spawn(keelson_pki::rotation::run(serving, rot, shutdown.clone()));
    }
    let client = match &cfg.store_tls {
        Some(identity) => StoreClient::with_identity(&[cfg.store_endpoint.as_str()], identity.clone()),
        None => StoreClient::new(&[cfg.store_endpoint.as_str()]),
    }
    .map_err(|e| ApiServerError::Store(e.to_string()))?;
    let cipher = match &cfg.secrets_key {
        Some(k) => Some(Arc::new(crate::encryption::SecretsCipher::new("key1", k).map_err(|e| ApiServerError::Encryption(e.to_string()))?)),
        None => None,
    };
    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .map_err(|source| ApiServerError::Listen { addr: cfg.listen, source })?;
    let addr = listener.local_addr().map_err(|source| ApiServerError::Listen { addr: cfg.listen, source })?;
    let signer = match &cfg.service_account_key_pem {
        Some(pem) => Some(Arc::new(TokenSigner::from_pem(pem).map_err(|e| ApiServerError::Auth(e.to_string()))?)),
        None => None,
    };
    let mut authn = TokenAuthenticator::new(signer);
    if let Some(path) = &cfg.token_auth_file {
        authn.load_token_file(path).map_err(|e| ApiServerError::Auth(e.to_string()))?;
    }
    let audit = match &cfg.audit {
        Some(a) => Some(AuditLog::open(&a.path, a.max_bytes, a.backups).map_err(|e| ApiServerError::Auth(format!("audit log {}: {e}", a.path.display())))?),
        None => None,
    };
    let sampler_store = client.clone();
    let store = ObjectStore::new(client, cipher);
    let metrics = crate::metrics::ApiMetrics::default();
    let watch_cache = crate::watch_cache::WatchCache::new(store.clone(), metrics.watch_cache(), shutdown.clone());
    let sampler = crate::ui::Sampler::new(sampler_store, cfg.store_tls.clone(), watch_cache.clone(), &cfg.client_ca_pem).map_err(ApiServerError::Tls)?;
    let server_name = cfg.identity.as_ref().map_or_else(|| addr.to_string(), |id| id.name.clone());
    let status_page = crate::ui::StatusPage::start(server_name, sampler, shutdown.clone());
    let state = Arc::new(ApiState {
        registry: Registry::new(store.clone()),
        shutdown: shutdown.clone(),
        advertise: addr.to_string(),
        authn,
        authz: RbacAuthorizer::start(store.clone(), shutdown.clone()),
        audit,
        join: cfg.join.clone(),
        ca_pem: cfg.client_ca_pem.clone(),
        metrics,
        watch_cache,
        kubelet: cfg.join.as_ref().and_then(|j| match node_proxy::KubeletClient::new(j) {
            Ok(k) => Some(k),
            Err(e) => {
                tracing::warn!(error = %e, "no kubelet client identity: pods/log is unavailable");
                None
            }
        }),
        inflight: crate::inflight::InflightLimits::new(cfg.max_requests_inflight, cfg.max_mutating_requests_inflight),
        status_page,
        auth_failures: crate::auth::lockout::AuthFailures::new(cfg.auth_failures),
    });
    if let Some(id) = cfg.identity.clone() {
        tokio::spawn(crate::identity_lease::keep(state.registry.clone(), id, shutdown.clone()));
    }
    let bootstrap_state = state.clone();
    let initial_token = cfg.initial_join_token.clone();
    let bootstrap_token = shutdown.clone();
    let (created, defaults) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        // The store may still be electing a leader: retry until the defaults exist.
        loop {
            let r = async {
                crate::namespaces::ensure_builtin(&bootstrap_state.registry).await?;
                crate::namespaces::ensure_system_priority_classes(&bootstrap_state.registry).await?;
                if let Some((id, secret)) = &initial_token {
                    crate::namespaces::ensure_join_token(&bootstrap_state.registry, id, secret).await?;
                }
                crate::namespaces::ensure_rbac_defaults(&bootstrap_state.registry).await?;
                crate::namespaces::ensure_ingress_class(&bootstrap_state.registry).await
            }
            .await;
            match r {
                Ok(()) => {
                    created.send_replace(true);
                    break;
                }
                Err(e) => tracing::debug!(error = %e, "creating built-in namespaces, RBAC defaults and the IngressClass; retrying"),
            }
            tokio::select! {
                _ = bootstrap_token.cancelled() => return,
                _ = tokio::time::sleep(std::time::Duration::from_millis(500)) => {}
            }
        }
    });
    let (accept, mut incoming) = keelson_client::tls::spawn_accept(listener, tls, HANDSHAKE_TIMEOUT, shutdown.clone());
    let task = tokio::spawn(async move {
        use futures::StreamExt;
        while let Some(conn) = incoming.next().await {
            let Ok(tls) = conn else { continue };
            let state = state.clone();
            let token = shutdown.clone();
            tokio::spawn(async move {
                let identity = tls.get_ref().1.peer_certificates().and_then(|c| c.first()).and_then(tls::identity_of);
                let peer = tls.get_ref().0.peer_addr().map(|a| a.to_string()).unwrap_or_default();
                let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let state = state.clone();
                    let identity = identity.clone();
                    let peer = peer.clone();
                    async move {
                        let req = req.map(Body::new);
                        let media = negotiate::response_media(req.headers());
                        Ok::<_, std::convert::Infallible>(crate::protobuf::respond(media, handle(state, identity, peer, req).await).await)
                    }
                });
                let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                builder.http1().max_buf_size(MAX_HEADER_BYTES + (64 << 10));
                builder.http2().max_header_list_size(MAX_HEADER_BYTES as u32);
                let conn = builder.serve_connection_with_upgrades(TokioIo::new(tls), svc);
                tokio::pin!(conn);
                tokio::select! {
                    _ = conn.as_mut() => {}
                    _ = token.cancelled() => {
                        conn.as_mut().graceful_shutdown();
                        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), conn).await;
                    }
                }
            });
        }
        let _ = accept.await;
    });
    Ok(ServingApi { addr, task, defaults })
}

/// The most a request's header block may hold (Go's `http.DefaultMaxHeaderBytes`, which
/// kube-apiserver serves with): more gets 431 over HTTP/1.1, a refused stream over HTTP/2.
pub const MAX_HEADER_BYTES: usize = 1 << 20;

/// How long the readiness check's store read may take.
const READY_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(1500);

/// `/livez` answers while the process serves; `/readyz` and `/healthz` also need a
/// linearizable read of the store to succeed (as Kubernetes' etcd check), so a server cut
/// off from the Raft quorum is not ready and balancers move away from it.
async fn health(state: &ApiState, check: &str) -> Response {
    let text = |code, body: String| (code, [(http::header::CONTENT_TYPE, "text/plain")], body).into_response();
    if check == "livez" {
        return text(StatusCode::OK, "ok".into());
    }
    match tokio::time::timeout(READY_TIMEOUT, state.registry.store.current_revision()).await {
        Ok(Ok(_)) => text(StatusCode::OK, "ok".into()),
        Ok(Err(e)) => text(StatusCode::SERVICE_UNAVAILABLE, format!("[-]etcd failed: {e}\n{check} check failed")),
        Err(_) => text(StatusCode::SERVICE_UNAVAILABLE, format!("[-]etcd failed: no linearizable read within {READY_TIMEOUT:?}\n{check} check failed")),
    }
}

/// A JSON response.
pub(crate) fn json_response(code: StatusCode, v: &Value) -> Response {
    json_bytes_response(code, serde_json::to_vec(v).expect("JSON values serialize"))
}

/// A response of JSON already serialized.
pub(crate) fn json_bytes_response(code: StatusCode, body: Vec<u8>) -> Response {
    (code, [(http::header::CONTENT_TYPE, "application/json")], body).into_response()
}

pub(crate) fn error_response(e: &ApiError) -> Response {
    json_response(StatusCode::from_u16(e.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), &e.status())
}

/// The requester: who, and who they authenticated as when impersonating.
#[derive(Clone)]
pub(crate) struct Caller {
    pub user: keelson_rbac::UserInfo,
    pub impersonator: Option<String>,
}

/// Authenticates a request: client certificate, then bearer token.
async fn authenticate(state: &ApiState, identity: Option<Identity>, headers: &http::HeaderMap) -> Result<keelson_rbac::UserInfo, ApiError> {
    if let Some(id) = identity {
        return Ok(user(id.user, id.groups));
    }
    let bearer = headers.get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer ")).map(str::trim);
    let Some(token) = bearer.filter(|t| !t.is_empty()) else { return Err(ApiError::Unauthorized) };
    match state.authn.authenticate(token, jiff::Timestamp::now().as_second()) {
        TokenIdentity::User(u) => Ok(u),
        TokenIdentity::ServiceAccount(u, claim) => {
            // A token outlives nothing: its ServiceAccount must still exist, with its uid.
            match review::service_account_uid(state, &claim.namespace, &claim.name).await? {
                Some(uid) if uid == claim.uid => Ok(u),
                _ => Err(ApiError::Unauthorized),
            }
        }
        TokenIdentity::Invalid(why) => {
            tracing::debug!(%why, "bearer token rejected");
            Err(ApiError::Unauthorized)
        }
    }
}

async fn handle(state: Arc<ApiState>, identity: Option<Identity>, peer: String, req: Request) -> Response {
    use tracing::field::Empty;
    let r = route(req.uri().path());
    // One span per request, continuing the caller's `traceparent` (as kube-apiserver
    // does) or starting a trace. Health probes, which balancers send every few hundred
    // milliseconds, get a debug span: logged when asked for, never exported.
    let span = if matches!(r, Route::Health(_)) {
        tracing::debug_span!("request", method = %req.method(), path = %req.uri().path(), verb = Empty, resource = Empty, namespace = Empty, name = Empty, user = Empty, code = Empty, trace_id = Empty)
    } else {
        tracing::info_span!("request", method = %req.method(), path = %req.uri().path(), verb = Empty, resource = Empty, namespace = Empty, name = Empty, user = Empty, code = Empty, trace_id = Empty)
    };
    keelson_tracecontext::continue_trace(&span, keelson_tracecontext::from_headers(req.headers()));
    use tracing::Instrument;
    async move {
        let method = req.method().clone();
        let uri = req.uri().path_and_query().map(|p| p.to_string()).unwrap_or_default();
        let query = parse_query(req.uri().query());
        let ua = req.headers().get(http::header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        let command = req.headers().get("kubectl-command").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        let attrs = crate::auth::attributes::attributes(&method, &r, req.uri().path(), &query);
        let here = tracing::Span::current();
        match &attrs {
            keelson_rbac::Attributes::Resource(a) => {
                here.record("verb", a.verb.as_str());
                here.record("resource", match &a.subresource { Some(sub) => format!("{}/{sub}", a.resource), None => a.resource.clone() });
                if let Some(ns) = &a.namespace {
                    here.record("namespace", ns.as_str());
                }
                if let Some(name) = &a.name {
                    here.record("name", name.as_str());
                }
            }
            keelson_rbac::Attributes::NonResource(a) => {
                here.record("verb", a.verb.as_str());
            }
        }
        // Health, the CA certificate and joining (which checks its own token) need no
        // credentials; everything else does.
        let public = matches!(r, Route::Health(_) | Route::KeelsonCaCerts | Route::KeelsonJoin);
        let request = AuditedRequest { attrs: &attrs, uri: &uri, peer: &peer, user_agent: &ua, command: &command };
        let caller = if public {
            None
        } else {
            // A source that failed to authenticate too often is refused before its
            // credential is looked at (client certificates were checked by TLS already).
            let source = peer.parse::<SocketAddr>().ok().map(|a| a.ip());
            let now = std::time::Instant::now();
            if let (None, Some(ip)) = (&identity, source) {
                if let Err(wait) = state.auth_failures.check(ip, now) {
                    let e = ApiError::TooManyRequests(format!("too many failed authentication attempts from {ip}; try again in {}s", wait.as_secs().max(1)));
                    let mut resp = error_response(&e);
                    let retry = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
                    resp.headers_mut().insert(http::header::RETRY_AFTER, http::HeaderValue::from(retry.max(1)));
                    tracing::Span::current().record("code", 429);
                    audit_denial(&state, &request, None, 429);
                    return resp;
                }
            }
            let from_certificate = identity.is_some();
            let headers = req.headers().clone();
            match authorize(&state, identity, &headers, &attrs).instrument(tracing::info_span!("authorize")).await {
                Ok(c) => Some(c),
                Err(denied) => {
                    let resp = error_response(&denied.error);
                    let code = resp.status().as_u16();
                    if let (401, false, Some(ip)) = (code, from_certificate, source) {
                        state.auth_failures.failed(ip, now);
                    }
                    tracing::Span::current().record("code", code);
                    audit_denial(&state, &request, denied.user.as_ref(), code);
                    return resp;
                }
            }
        };
        if let Some(c) = &caller {
            tracing::Span::current().record("user", c.user.name.as_str());
        }
        let kind = crate::inflight::kind_of(&attrs);
        let limited = kind != crate::inflight::RequestKind::LongRunning;
        let deadline = match limited.then(|| request::request_deadline(&query)).transpose() {
            Ok(d) => d,
            Err(e) => {
                tracing::Span::current().record("code", e.code());
                return error_response(&e);
            }
        };
        let class = crate::inflight::priority::classify(&attrs, caller.as_ref().map(|c| &c.user));
        let slot = match state.inflight.admit(kind, &class) {
            Ok(slot) => (slot, limited.then(|| state.metrics.in_flight(kind.label())), limited.then(|| state.metrics.executing(&class))),
            Err(refused) => {
                state.metrics.dropped(kind.label());
                state.metrics.rejected(&class, refused.reason);
                tracing::Span::current().record("code", 429);
                let mut resp = error_response(&refused.error());
                resp.headers_mut().insert(http::header::RETRY_AFTER, http::HeaderValue::from_static("1"));
                return resp;
            }
        };
        let started = std::time::Instant::now();
        let result = match deadline {
            None => {
                let _slot = slot;
                dispatch(&state, r, caller.as_ref(), req).await
            }
            // Past its deadline the client gets 504 while the request runs on to its end
            // (a write half done is never cut short), holding its seat until then, as
            // kube-apiserver's timeout filter does.
            Some(deadline) => {
                let (state, caller) = (state.clone(), caller.clone());
                let served = tokio::spawn(
                    async move {
                        let _slot = slot;
                        dispatch(&state, r, caller.as_ref(), req).await
                    }
                    .instrument(tracing::Span::current()),
                );
                match tokio::time::timeout(deadline, served).await {
                    Ok(Ok(result)) => result,
                    Ok(Err(panicked)) => Err(ApiError::Internal(format!("the request's handler failed: {panicked}"))),
                    Err(_) => Err(ApiError::Timeout(format!("request did not complete within requested timeout ({deadline:?})"))),
                }
            }
        };
        let resp = match result {
            Ok(resp) => resp,
            Err(e) => {
                if e.code() >= 500 {
                    tracing::warn!(error = %e, "request failed");
                }
                error_response(&e)
            }
        };
        tracing::Span::current().record("code", resp.status().as_u16());
        if let keelson_rbac::Attributes::Resource(a) = &attrs {
            let resource = match &a.subresource {
                Some(sub) => format!("{}/{sub}", a.resource),
                None => a.resource.clone(),
            };
            state.metrics.observe(&a.verb, &resource, resp.status().as_u16(), started.elapsed());
        }
        if let (Some(log), Some(c)) = (&state.audit, &caller) {
            if matches!(method, Method::POST | Method::PUT | Method::PATCH | Method::DELETE) {
                log.record(&request.entry(Some(c), resp.status().as_u16()));
            }
        }
        resp
    }
    .instrument(span)
    .await
}

/// A request refused by authentication or authorization, and who made it when known.
struct Denied {
    error: ApiError,
    /// The authenticated user (`None` when authentication failed).
    user: Option<keelson_rbac::UserInfo>,
}

/// Authentication, impersonation and RBAC: the caller, or 401/403.
async fn authorize(state: &ApiState, identity: Option<Identity>, headers: &http::HeaderMap, attrs: &keelson_rbac::Attributes) -> Result<Caller, Denied> {
    let authenticated = authenticate(state, identity, headers).await.map_err(|error| Denied { error, user: None })?;
    let who = authenticated.clone();
    let denied = |error| Denied { error, user: Some(who.clone()) };
    let (user, impersonator) = review::impersonate(state, authenticated, headers).await.map_err(denied)?;
    match state.authz.authorize(&user, attrs).await.map_err(denied)? {
        keelson_rbac::Decision::Allow { .. } => Ok(Caller { user, impersonator }),
        keelson_rbac::Decision::Deny { .. } => Err(denied(ApiError::Forbidden(keelson_rbac::forbidden_message(&user, attrs)))),
    }
}

/// What the audit log says of a request, whatever its answer.
struct AuditedRequest<'a> {
    attrs: &'a keelson_rbac::Attributes,
    uri: &'a str,
    peer: &'a str,
    user_agent: &'a str,
    command: &'a str,
}

impl AuditedRequest<'_> {
    fn entry(&self, caller: Option<&Caller>, code: u16) -> AuditEntry {
        let (verb, resource, namespace, name) = match self.attrs {
            keelson_rbac::Attributes::Resource(a) => (
                a.verb.clone(),
                match &a.subresource { Some(s) => format!("{}/{s}", a.resource), None => a.resource.clone() },
                a.namespace.clone().unwrap_or_default(),
                a.name.clone().unwrap_or_default(),
            ),
            keelson_rbac::Attributes::NonResource(a) => (a.verb.clone(), String::new(), String::new(), String::new()),
        };
        let (user, groups, impersonated_user) = match caller {
            Some(c) => (c.impersonator.clone().unwrap_or_else(|| c.user.name.clone()), c.user.groups.clone(), c.impersonator.as_ref().map(|_| c.user.name.clone())),
            None => (ANONYMOUS.to_string(), Vec::new(), None),
        };
        AuditEntry {
            time: crate::registry::now_rfc3339(),
            user,
            groups,
            impersonated_user,
            verb,
            request_uri: self.uri.to_string(),
            resource,
            namespace,
            name,
            code,
            source: self.peer.to_string(),
            user_agent: self.user_agent.to_string(),
            command: self.command.to_string(),
        }
    }
}

/// The name an audit entry gives a request whose caller is not known (as Kubernetes).
const ANONYMOUS: &str = "system:anonymous";

/// Audits a refused request (401, 403, or 429 for a locked-out source), of any verb:
/// denials are what an operator looks for after an attack. `user`: who authenticated,
/// when someone did.
fn audit_denial(state: &ApiState, request: &AuditedRequest<'_>, user: Option<&keelson_rbac::UserInfo>, code: u16) {
    let Some(log) = &state.audit else { return };
    let caller = user.map(|u| Caller { user: u.clone(), impersonator: None });
    log.record(&request.entry(caller.as_ref(), code));
}

async fn dispatch(state: &Arc<ApiState>, r: Route, caller: Option<&Caller>, req: Request) -> Result<Response, ApiError> {
    let method = req.method().clone();
    let get_only = |resp: Result<Response, ApiError>| if method == Method::GET { resp } else { Err(ApiError::MethodNotAllowed) };
    match r {
        Route::Version => get_only(Ok(json_response(StatusCode::OK, &discovery::version()))),
        Route::Health(check) => Ok(health(state, &check).await),
        Route::Ui { document: false } => get_only(Ok(crate::ui::page())),
        Route::Ui { document: true } => get_only(Ok(json_response(StatusCode::OK, &state.status_page.status(&state.watch_cache).await))),
        Route::Metrics => get_only(Ok((StatusCode::OK, [(http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], state.metrics.render()).into_response())),
        Route::KeelsonCaCerts => get_only(Ok((StatusCode::OK, [(http::header::CONTENT_TYPE, "text/plain")], state.ca_pem.clone()).into_response())),
        Route::KeelsonJoin => {
            if method != Method::POST {
                return Err(ApiError::MethodNotAllowed);
            }
            let material = state.join.as_ref().ok_or_else(|| ApiError::Forbidden("this server does not accept joins".into()))?;
            let bearer = req.headers().get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer ")).map(String::from);
            let (_, body) = resource::read_body(req).await?;
            let v = crate::join::join(&state.registry, material, bearer.as_deref(), &body).await?;
            Ok(json_response(StatusCode::OK, &v))
        }
        Route::GroupList { legacy } => {
            let accept = req.headers().get(http::header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
            match discovery::aggregated_version(accept) {
                Some(v) => {
                    let body = serde_json::to_vec(&discovery::aggregated(legacy, v)).expect("JSON values serialize");
                    get_only(Ok((StatusCode::OK, [(http::header::CONTENT_TYPE, discovery::aggregated_content_type(v))], body).into_response()))
                }
                None => get_only(Ok(json_response(StatusCode::OK, &discovery::group_list(legacy, &state.advertise)))),
            }
        }
        Route::Group(g) => get_only(discovery::group(&g).map(|v| json_response(StatusCode::OK, &v)).ok_or(ApiError::NoRoute)),
        Route::GroupVersion { group, version } => {
            get_only(discovery::resource_list(&group, &version).map(|v| json_response(StatusCode::OK, &v)).ok_or(ApiError::NoRoute))
        }
        Route::OpenApiV3Index => get_only(Ok(json_response(StatusCode::OK, &keelson_schema::openapi_v3_index()))),
        Route::OpenApiV3(path) => {
            get_only(keelson_schema::openapi_v3_document(&path).map(|v| json_response(StatusCode::OK, &v)).ok_or(ApiError::NoRoute))
        }
        Route::OpenApiV2 => get_only(Ok((
            StatusCode::OK,
            [(http::header::CONTENT_TYPE, "application/com.github.proto-openapi.spec.v2.v1.0+protobuf")],
            Vec::<u8>::new(),
        )
            .into_response())),
        Route::NotFound => Err(ApiError::NoRoute),
        Route::ResourceMetrics(m) => {
            let query = parse_query(req.uri().query());
            get_only(metrics_api::handle(state, m, &query).await)
        }
        Route::Virtual(v) => {
            if method != Method::POST {
                return Err(ApiError::MethodNotAllowed);
            }
            let caller = caller.ok_or(ApiError::Unauthorized)?;
            let (headers, body) = resource::read_body(req).await?;
            let obj = negotiate::decode_body(&headers, &body)?;
            let out = review::handle(state, &v, &caller.user, obj).await?;
            Ok(json_response(StatusCode::CREATED, &out))
        }
        Route::Resource(rr) => {
            let query = parse_query(req.uri().query());
            let fence = crate::lease_fence::LeaseFence::from_request(req.headers(), &query)?;
            let req = match caller {
                Some(c) => node_admission::check(state, &c.user, &rr, req).await?,
                None => req,
            };
            // Every write of a request that claims a lease fence is conditional on it.
            let reg = state.registry.fenced(fence);
            match rr.subresource {
                Some(sub) => subresource::handle(state, &reg, rr.clone(), sub, query, req).await,
                None => resource::handle(state, &reg, rr, query, req).await,
            }
        }
    }
}
