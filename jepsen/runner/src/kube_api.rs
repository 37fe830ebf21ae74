//! What the Kubernetes-API workloads share: admin clients for every API server of the
//! cluster (built from the cluster CA), and the classification of a failed API call.
//!
//! Outcome classification of a failed write (what the checkers may assume):
//! - `fail` (definitely not applied): the API server answered with a 4xx (409 Conflict /
//!   AlreadyExists, 404, 422, …: every such answer is given before anything is written,
//!   or after a conditional write's compare failed), or a 503 whose message says the
//!   store had no leader / was not the leader / could not be reached at all; or the
//!   request never left the client (the TCP or TLS connection to the API server could
//!   not be made);
//! - `info` (unknown): 504, 500, any other 503 (the API server also answers 503 when its
//!   replica reports "replica unavailable", which includes "leader changed while the
//!   write was in flight; outcome unknown"), a connection that broke after the request
//!   was sent, a timeout, an undecodable answer.
//!
//! kube-rs retries 429/503/504 by default (`Config::default_retry`); that would re-send
//! a write whose first attempt may have been applied and hide the outcome, so the
//! clients built here turn it off.

use std::path::PathBuf;
use std::sync::Once;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::Api;

use crate::register::WriteOutcome;

/// Namespace of every object the workloads touch.
pub const NAMESPACE: &str = "default";

/// Connect (TCP + TLS) timeout of the API clients: a connection that could not be made
/// carried no request, so the operation definitely failed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Where the Kubernetes API of a cluster is and how to get in.
#[derive(Clone, Debug)]
pub struct KubeTarget {
    /// `ip:port` of every server's API (HTTPS), in server order.
    pub api_endpoints: Vec<String>,
    /// The cluster CA directory (`ca.crt`, `ca.key`).
    pub pki_dir: PathBuf,
    /// The servers' store endpoints (for the authoritative store-side watch).
    pub store_endpoints: Vec<String>,
    /// The identity the store port requires (mutual TLS), `None` for plaintext.
    pub store_tls: Option<keelson_client::PeerTls>,
}

static CRYPTO: Once = Once::new();

/// Installs the ring TLS provider as the process default (once).
pub fn install_crypto_provider() {
    CRYPTO.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// One client configuration per API server: an admin client certificate freshly issued
/// by the cluster CA, no automatic retries, a short connect timeout.
pub async fn api_configs(target: &KubeTarget) -> Result<Vec<kube::Config>, String> {
    install_crypto_provider();
    let ca = keelson_pki::ClusterCa::load(&target.pki_dir)
        .map_err(|e| format!("loading the cluster CA from {}: {e}", target.pki_dir.display()))?
        .ok_or_else(|| format!("no cluster CA in {}", target.pki_dir.display()))?;
    let admin = ca
        .issue_client(keelson_pki::ADMIN_USER, &[keelson_pki::ADMIN_GROUP])
        .map_err(|e| format!("issuing the admin client certificate: {e}"))?;
    let contexts: Vec<keelson_pki::KubeconfigContext> = target
        .api_endpoints
        .iter()
        .enumerate()
        .map(|(i, ep)| keelson_pki::KubeconfigContext { name: format!("n{i}"), server: format!("https://{ep}") })
        .collect();
    let yaml = keelson_pki::kubeconfig(&contexts, ca.cert_pem(), "jepsen-admin", &admin);
    let kc = Kubeconfig::from_yaml(&yaml).map_err(|e| format!("parsing the generated kubeconfig: {e}"))?;
    let mut out = Vec::new();
    for ctx in &contexts {
        let opts = KubeConfigOptions { context: Some(ctx.name.clone()), ..Default::default() };
        let mut cfg = kube::Config::from_custom_kubeconfig(kc.clone(), &opts)
            .await
            .map_err(|e| format!("kubeconfig context {}: {e}", ctx.name))?;
        cfg.default_retry = false;
        cfg.connect_timeout = Some(CONNECT_TIMEOUT);
        cfg.read_timeout = None;
        cfg.write_timeout = Some(Duration::from_secs(5));
        out.push(cfg);
    }
    if out.is_empty() {
        return Err("no API endpoints".into());
    }
    Ok(out)
}

/// Fresh clients (own connection pools) for every server.
pub fn clients(configs: &[kube::Config]) -> Result<Vec<kube::Client>, String> {
    configs.iter().map(|c| kube::Client::try_from(c.clone()).map_err(|e| format!("building a kube client: {e}"))).collect()
}

/// A logical client's view of the servers: one replica at a time, the next after errors.
pub struct Servers {
    clients: Vec<kube::Client>,
    current: usize,
}

impl Servers {
    pub fn new(clients: Vec<kube::Client>, start: usize) -> Self {
        let current = start % clients.len().max(1);
        Self { clients, current }
    }

    pub fn current(&self) -> &kube::Client {
        &self.clients[self.current]
    }

    pub fn rotate(&mut self) {
        self.current = (self.current + 1) % self.clients.len();
    }

    pub fn configmaps(&self) -> Api<k8s_openapi::api::core::v1::ConfigMap> {
        Api::namespaced(self.current().clone(), NAMESPACE)
    }
}

/// Waits until the `default` namespace exists (the API servers create it shortly after
/// the store has a leader), asking the servers in turn.
pub async fn wait_for_namespace(configs: &[kube::Config], timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    let clients = clients(configs)?;
    let mut i = 0usize;
    loop {
        let api: Api<Namespace> = Api::all(clients[i % clients.len()].clone());
        let last = match tokio::time::timeout(Duration::from_secs(3), api.get_opt(NAMESPACE)).await {
            Ok(Ok(Some(_))) => return Ok(()),
            Ok(Ok(None)) => "namespace default does not exist yet".to_string(),
            Ok(Err(e)) => e.to_string(),
            Err(_) => "timed out".to_string(),
        };
        if Instant::now() >= deadline {
            return Err(format!("namespace {NAMESPACE} did not appear within {timeout:?}: {last}"));
        }
        i += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// True when the request never left this process: the connection (TCP or TLS) to the
/// API server could not be established.
pub fn never_sent(e: &kube::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if let Some(h) = err.downcast_ref::<hyper_util::client::legacy::Error>() {
            if h.is_connect() {
                return true;
            }
        }
        source = err.source();
    }
    false
}

/// The HTTP status of an API error answer, if the server answered.
pub fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// Whether a 503 answer says the write certainly was not applied.
fn unavailable_is_definite(message: &str) -> bool {
    message.contains("no leader available")
        || message.contains("not the leader")
        // The API server's store client could not connect to its replica.
        || (message.contains("storage is unavailable: status:") && message.contains("connect"))
}

/// Whether a failed write call may have been applied (see the module docs).
pub fn classify(e: &kube::Error) -> WriteOutcome {
    match e {
        kube::Error::Api(s) => {
            let what = format!("{} {}: {}", s.code, s.reason, s.message);
            match s.code {
                503 if unavailable_is_definite(&s.message) => WriteOutcome::Fail(what),
                400..=499 => WriteOutcome::Fail(what),
                _ => WriteOutcome::Info(what),
            }
        }
        e if never_sent(e) => WriteOutcome::Fail(format!("not sent: {e}")),
        e => WriteOutcome::Info(e.to_string()),
    }
}

/// True for failures that say nothing against the server the client talks to (a
/// conflict, a missing object): no reason to move to another replica.
pub fn served(e: &kube::Error) -> bool {
    matches!(status_code(e), Some(404 | 409 | 422))
}

/// A ConfigMap named `name` holding `data.value = value`, with `metadata.resourceVersion`
/// when `rv` is given (an update precondition).
pub fn configmap(name: &str, value: &str, rv: Option<String>) -> k8s_openapi::api::core::v1::ConfigMap {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    k8s_openapi::api::core::v1::ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(NAMESPACE.to_string()),
            resource_version: rv,
            ..Default::default()
        },
        data: Some([("value".to_string(), value.to_string())].into_iter().collect()),
        ..Default::default()
    }
}

/// `data.value` of a ConfigMap.
pub fn value_of(cm: &k8s_openapi::api::core::v1::ConfigMap) -> Option<&str> {
    cm.data.as_ref().and_then(|d| d.get("value")).map(String::as_str)
}

/// `metadata.resourceVersion` as a store revision.
pub fn revision_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<u64> {
    meta.resource_version.as_deref().and_then(|rv| rv.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_err(code: u16, message: &str) -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status {
            code,
            message: message.into(),
            reason: "X".into(),
            ..Default::default()
        }))
    }

    #[test]
    fn conflicts_and_no_leader_are_definite_but_unknown_outcomes_are_not() {
        assert!(matches!(classify(&api_err(409, "the object has been modified")), WriteOutcome::Fail(_)));
        assert!(matches!(classify(&api_err(404, "not found")), WriteOutcome::Fail(_)));
        assert!(matches!(
            classify(&api_err(503, "storage is unavailable: no leader available: no leader elected in time")),
            WriteOutcome::Fail(_)
        ));
        assert!(matches!(
            classify(&api_err(503, "storage is unavailable: not the leader (leader: Some(3))")),
            WriteOutcome::Fail(_)
        ));
        assert!(matches!(
            classify(&api_err(
                503,
                "storage is unavailable: replica unavailable: leader changed while the write was in flight; outcome unknown"
            )),
            WriteOutcome::Info(_)
        ));
        assert!(matches!(classify(&api_err(504, "the outcome of the storage operation is unknown")), WriteOutcome::Info(_)));
        assert!(matches!(classify(&api_err(500, "boom")), WriteOutcome::Info(_)));
    }
}
