//! The HTTP front: TLS accept loop, authentication, routing to handlers.

mod discovery;
mod list;
mod patch;
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
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

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
    /// The cluster's Secrets encryption key (32 bytes); `None` stores Secrets in plaintext.
    pub secrets_key: Option<Vec<u8>>,
}

/// A running API server.
pub struct ServingApi {
    pub addr: SocketAddr,
    pub task: JoinHandle<()>,
}

pub(crate) struct ApiState {
    pub registry: Registry,
    pub shutdown: CancellationToken,
    pub advertise: String,
}

/// Binds the listener and serves until `shutdown` is cancelled.
pub async fn serve(cfg: ApiServerConfig, shutdown: CancellationToken) -> Result<ServingApi, ApiServerError> {
    let tls = Arc::new(tls::server_config(&cfg.cert_pem, &cfg.key_pem, &cfg.client_ca_pem)?);
    let client = StoreClient::new(&[cfg.store_endpoint.as_str()]).map_err(|e| ApiServerError::Store(e.to_string()))?;
    let cipher = match &cfg.secrets_key {
        Some(k) => Some(Arc::new(crate::encryption::SecretsCipher::new("key1", k).map_err(|e| ApiServerError::Encryption(e.to_string()))?)),
        None => None,
    };
    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .map_err(|source| ApiServerError::Listen { addr: cfg.listen, source })?;
    let addr = listener.local_addr().map_err(|source| ApiServerError::Listen { addr: cfg.listen, source })?;
    let state = Arc::new(ApiState {
        registry: Registry::new(ObjectStore::new(client, cipher)),
        shutdown: shutdown.clone(),
        advertise: addr.to_string(),
    });
    let bootstrap_state = state.clone();
    let bootstrap_token = shutdown.clone();
    tokio::spawn(async move {
        // The store may still be electing a leader: retry until the namespaces exist.
        loop {
            match crate::namespaces::ensure_builtin(&bootstrap_state.registry).await {
                Ok(()) => break,
                Err(e) => tracing::debug!(error = %e, "creating built-in namespaces; retrying"),
            }
            tokio::select! {
                _ = bootstrap_token.cancelled() => return,
                _ = tokio::time::sleep(std::time::Duration::from_millis(500)) => {}
            }
        }
    });
    let acceptor = TlsAcceptor::from(tls);
    let task = tokio::spawn(async move {
        loop {
            let (tcp, peer) = tokio::select! {
                _ = shutdown.cancelled() => break,
                r = listener.accept() => match r {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept");
                        continue;
                    }
                },
            };
            let _ = tcp.set_nodelay(true);
            let acceptor = acceptor.clone();
            let state = state.clone();
            let token = shutdown.clone();
            tokio::spawn(async move {
                let tls = match tokio::time::timeout(std::time::Duration::from_secs(10), acceptor.accept(tcp)).await {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        tracing::debug!(%peer, error = %e, "TLS handshake failed");
                        return;
                    }
                    Err(_) => return,
                };
                let identity = tls.get_ref().1.peer_certificates().and_then(|c| c.first()).and_then(tls::identity_of);
                let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let state = state.clone();
                    let identity = identity.clone();
                    async move {
                        let req = req.map(Body::new);
                        Ok::<_, std::convert::Infallible>(handle(state, identity, req).await)
                    }
                });
                let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
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
    });
    Ok(ServingApi { addr, task })
}

/// A JSON response.
pub(crate) fn json_response(code: StatusCode, v: &Value) -> Response {
    let body = serde_json::to_vec(v).expect("JSON values serialize");
    (code, [(http::header::CONTENT_TYPE, "application/json")], body).into_response()
}

pub(crate) fn error_response(e: &ApiError) -> Response {
    json_response(StatusCode::from_u16(e.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), &e.status())
}

async fn handle(state: Arc<ApiState>, identity: Option<Identity>, req: Request) -> Response {
    let span = tracing::info_span!(
        "request",
        method = %req.method(),
        path = %req.uri().path(),
        user = identity.as_ref().map(|i| i.user.as_str()).unwrap_or("")
    );
    let _enter = span.enter();
    drop(_enter);
    use tracing::Instrument;
    async move {
        let r = route(req.uri().path());
        // Health endpoints answer anyone (load balancers); everything else needs credentials.
        if !matches!(r, Route::Health(_)) && identity.is_none() {
            return error_response(&ApiError::Unauthorized);
        }
        match dispatch(&state, r, req).await {
            Ok(resp) => resp,
            Err(e) => {
                if e.code() >= 500 {
                    tracing::warn!(error = %e, "request failed");
                }
                error_response(&e)
            }
        }
    }
    .instrument(span)
    .await
}

async fn dispatch(state: &Arc<ApiState>, r: Route, req: Request) -> Result<Response, ApiError> {
    let method = req.method().clone();
    let get_only = |resp: Result<Response, ApiError>| if method == Method::GET { resp } else { Err(ApiError::MethodNotAllowed) };
    match r {
        Route::Version => get_only(Ok(json_response(StatusCode::OK, &discovery::version()))),
        Route::Health(_) => Ok((StatusCode::OK, [(http::header::CONTENT_TYPE, "text/plain")], "ok").into_response()),
        Route::Metrics => Err(ApiError::NoRoute),
        Route::GroupList { legacy } => get_only(Ok(json_response(StatusCode::OK, &discovery::group_list(legacy, &state.advertise)))),
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
        Route::Resource(rr) => {
            let query = parse_query(req.uri().query());
            match rr.subresource {
                Some(sub) => subresource::handle(state, rr.clone(), sub, query, req).await,
                None => resource::handle(state, rr, query, req).await,
            }
        }
    }
}
