//! The built-in ingress controller, run by every node agent (as a DaemonSet of ingress
//! proxies would be): Ingresses of class `keelson` (or of no class while `keelson` is
//! the default class), with Services, EndpointSlices, IngressClasses and
//! `kubernetes.io/tls` Secrets mirrored from the API, become a route table
//! ([`routes::build`], pure) and a certificate table ([`tls::build`]); the executor
//! ([`proxy`]) serves HTTP and HTTPS on the node's address from whatever tables are
//! current, WebSocket included (HTTP/1.1 upgrades, and HTTP/2 extended CONNECT through
//! [`upgrade`]). Problems a user should hear of (a missing Service or Secret) become Warning
//! Events on the Ingress ([`events`]).
//!
//! **Architecture invariant:** reaches the cluster only through the Kubernetes API
//! (reflectors and Event creates); writes no Ingress status (the controller manager's
//! `ingressstatus` does).

pub mod events;
pub mod host;
pub mod proxy;
pub mod routes;
pub mod tls;
pub mod upgrade;

#[cfg(test)]
mod routes_tests;
#[cfg(test)]
mod tls_tests;
#[cfg(test)]
mod upgrade_tests;

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use kube::api::Api;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The IngressClass served.
pub const CLASS: &str = "keelson";
/// The controller named by that IngressClass.
pub const CONTROLLER: &str = "keelson.io/ingress";
/// The Node annotations by which an agent announces the ports its ingress serves on the
/// node's address (absent: that one is off), so clients of the API can find every
/// node's ingress.
pub const HTTP_PORT_ANNOTATION: &str = "keelson.io/ingress-http-port";
pub const HTTPS_PORT_ANNOTATION: &str = "keelson.io/ingress-https-port";

/// How the ingress controller runs.
#[derive(Debug, Clone)]
pub struct IngressConfig {
    /// Where plain HTTP is served (`None`: not at all).
    pub http: Option<SocketAddr>,
    /// Where HTTPS is served (`None`: not at all).
    pub https: Option<SocketAddr>,
    /// The IngressClass served ([`CLASS`]).
    pub class: String,
    /// Names this instance in the Events it records.
    pub instance: String,
}

/// The ingress controller could not start.
#[derive(Debug, thiserror::Error)]
pub enum IngressError {
    /// A listen address could not be bound.
    #[error("binding {addr}: {source}")]
    Bind { addr: SocketAddr, #[source] source: std::io::Error },
    /// The default certificate could not be made.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// rustls refused the server configuration.
    #[error("TLS configuration: {0}")]
    TlsConfig(#[source] rustls::Error),
}

/// The ports actually bound (a configured port 0 picks a free one).
#[derive(Debug, Clone, Copy)]
pub struct Bound {
    pub http: Option<SocketAddr>,
    pub https: Option<SocketAddr>,
}

fn reflect<K>(api: Api<K>, config: watcher::Config, changed: Arc<Notify>) -> (Store<K>, tokio::task::JoinHandle<()>)
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    let route = move |c: keelson_component::mirror::Change<'_, K>| {
        if !matches!(c, keelson_component::mirror::Change::Init | keelson_component::mirror::Change::InitApply(_)) {
            changed.notify_one();
        }
    };
    keelson_component::mirror::routed_reflector(api, config, route, |e| async move { tracing::debug!(error = %e, component = "ingress", "watch; retrying") })
}

async fn bind(addr: Option<SocketAddr>) -> Result<Option<TcpListener>, IngressError> {
    match addr {
        None => Ok(None),
        Some(addr) => TcpListener::bind(addr).await.map(Some).map_err(|source| IngressError::Bind { addr, source }),
    }
}

/// Binds the listeners, then serves in the background until `shutdown`; the returned
/// task ends once everything has stopped.
pub async fn start(client: kube::Client, cfg: IngressConfig, shutdown: CancellationToken) -> Result<(Bound, tokio::task::JoinHandle<()>), IngressError> {
    let http = bind(cfg.http).await?;
    let https = bind(cfg.https).await?;
    let bound = Bound { http: http.as_ref().and_then(|l| l.local_addr().ok()), https: https.as_ref().and_then(|l| l.local_addr().ok()) };
    let resolver = Arc::new(tls::CertResolver::new(tls::default_certificate()?));
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls::server_config(resolver.clone()).map_err(IngressError::TlsConfig)?));
    let shared = Arc::new(proxy::Shared { table: RwLock::new(Arc::new(routes::RouteTable::default())), https_port: bound.https.map(|a| a.port()) });
    tracing::info!(http = ?bound.http, https = ?bound.https, class = %cfg.class, "ingress serving");
    let task = tokio::spawn(async move {
        let mut serving = Vec::new();
        if let Some(l) = http {
            serving.push(tokio::spawn(proxy::serve_http(l, shared.clone(), shutdown.clone())));
        }
        if let Some(l) = https {
            serving.push(tokio::spawn(proxy::serve_https(l, acceptor, shared.clone(), shutdown.clone())));
        }
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = sync(client, cfg, shared, resolver) => {}
        }
        for t in serving {
            let _ = t.await;
        }
    });
    Ok((bound, task))
}

/// Serves until `shutdown`.
pub async fn run(client: kube::Client, cfg: IngressConfig, shutdown: CancellationToken) -> Result<(), IngressError> {
    let (_, task) = start(client, cfg, shutdown).await?;
    let _ = task.await;
    Ok(())
}

/// Keeps the route and certificate tables current: rebuilt (changes coalesced 20 ms)
/// after every change of the mirrored objects. Runs until dropped.
async fn sync(client: kube::Client, cfg: IngressConfig, shared: Arc<proxy::Shared>, resolver: Arc<tls::CertResolver>) {
    let changed = Arc::new(Notify::new());
    let all = watcher::Config::default;
    let (ingresses, t1) = reflect(Api::<Ingress>::all(client.clone()), all(), changed.clone());
    let (classes, t2) = reflect(Api::<IngressClass>::all(client.clone()), all(), changed.clone());
    let (services, t3) = reflect(Api::<Service>::all(client.clone()), all(), changed.clone());
    let (slices, t4) = reflect(Api::<EndpointSlice>::all(client.clone()), all(), changed.clone());
    let tls_only = all().fields(&format!("type={}", tls::TLS_SECRET_TYPE));
    let (secrets, t5) = reflect(Api::<Secret>::all(client.clone()), tls_only, changed.clone());
    let _abort = AbortOnDrop(vec![t1, t2, t3, t4, t5]);
    let mut reporter = events::Reporter::new(client, &cfg.instance);
    loop {
        changed.notified().await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        let span = tracing::debug_span!("ingress-sync");
        let problems = {
            let _e = span.enter();
            let (ings, cls, svcs, sls, secs) = (ingresses.state(), classes.state(), services.state(), slices.state(), secrets.state());
            let inputs = routes::Inputs {
                ingresses: ings.iter().map(|i| i.as_ref()).collect(),
                classes: cls.iter().map(|c| c.as_ref()).collect(),
                services: svcs.iter().map(|s| s.as_ref()).collect(),
                slices: sls.iter().map(|s| s.as_ref()).collect(),
            };
            let (table, mut problems) = routes::build(&inputs, &cfg.class);
            let ours = routes::ours_oldest_first(&inputs, &cfg.class);
            let secs: Vec<&Secret> = secs.iter().map(|s| s.as_ref()).collect();
            let (certs, tls_problems) = tls::build(&ours, &secs);
            *shared.table.write().expect("route table lock") = Arc::new(table);
            resolver.replace(certs);
            problems.extend(tls_problems);
            tracing::debug!(ingresses = ours.len(), problems = problems.len(), "ingress tables rebuilt");
            let uids = ours.iter().filter_map(|i| Some(((i.metadata.namespace.clone()?, i.metadata.name.clone()?), i.metadata.uid.clone()?))).collect();
            (problems, uids)
        };
        reporter.report(&problems.0, &problems.1).await;
    }
}

struct AbortOnDrop(Vec<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.iter().for_each(|t| t.abort());
    }
}
