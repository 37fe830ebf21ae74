//! What a control-plane component of a server needs to reach the cluster: its own
//! identity (a client certificate from the cluster CA, as Kubernetes components have),
//! a kube-rs client through the process's [`ApiBalancer`], and an [`Elector`] for its
//! Lease.

use crate::balancer::ApiBalancer;
use crate::election::{ElectionConfig, ElectionError, ElectionTimings, Elector};
use crate::metrics::ElectionMetrics;

/// A component could not get its client.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("issuing the client certificate of {user}: {source}")]
    Certificate { user: String, #[source] source: keelson_pki::PkiError },
    #[error("the kubeconfig of {user}: {message}")]
    Config { user: String, message: String },
    #[error(transparent)]
    Election(#[from] ElectionError),
}

/// One Kubernetes control-plane component and how it identifies itself.
#[derive(Clone, Copy, Debug)]
pub struct ComponentSpec {
    /// `kube-scheduler`, `kube-controller-manager`: also its Lease's name.
    pub name: &'static str,
    /// The user of its client certificate (`system:kube-scheduler`, …).
    pub user: &'static str,
    /// Release the Lease on shutdown (Kubernetes: the scheduler does, the controller
    /// manager does not; Keelson's servers release both, so a successor is not kept
    /// waiting a whole lease after a clean stop).
    pub release_on_cancel: bool,
}

pub const KUBE_SCHEDULER: ComponentSpec = ComponentSpec { name: "kube-scheduler", user: "system:kube-scheduler", release_on_cancel: true };
pub const KUBE_CONTROLLER_MANAGER: ComponentSpec =
    ComponentSpec { name: "kube-controller-manager", user: "system:kube-controller-manager", release_on_cancel: true };

/// Namespace of the control plane's Leases.
pub const LEASE_NAMESPACE: &str = "kube-system";

/// Shared by the components of one server process.
#[derive(Clone)]
pub struct ControlPlaneAccess {
    pub balancer: ApiBalancer,
    pub ca: std::sync::Arc<keelson_pki::ClusterCa>,
    /// This server's name (the first part of holder identities).
    pub server_name: String,
    pub timings: ElectionTimings,
    pub metrics: ElectionMetrics,
}

impl ControlPlaneAccess {
    /// A client (and its configuration) for `user` in `groups`, through the balancer.
    pub async fn client_as(&self, user: &str, groups: &[&str]) -> Result<(kube::Client, kube::Config), ClientError> {
        let cert = self.ca.issue_client(user, groups).map_err(|source| ClientError::Certificate { user: user.into(), source })?;
        config_for(&self.balancer.url(), self.ca.cert_pem(), user, &cert).await
    }

    /// The elector of `spec`'s Lease, with a client of its own identity.
    pub async fn elector(&self, spec: ComponentSpec) -> Result<Elector, ClientError> {
        let (client, config) = self.client_as(spec.user, &[]).await?;
        let cfg = ElectionConfig {
            namespace: LEASE_NAMESPACE.into(),
            name: spec.name.into(),
            identity: crate::election::holder_identity(&self.server_name),
            component: spec.name.into(),
            timings: self.timings,
            release_on_cancel: spec.release_on_cancel,
        };
        Ok(Elector::new(client, config, cfg, self.metrics.clone())?)
    }
}

/// A kube-rs client configuration for `server` trusting `ca_pem`, authenticating with `cert`.
pub async fn config_for(server: &str, ca_pem: &str, user: &str, cert: &keelson_pki::IssuedCert) -> Result<(kube::Client, kube::Config), ClientError> {
    let err = |message: String| ClientError::Config { user: user.into(), message };
    let yaml = keelson_pki::kubeconfig(&[keelson_pki::KubeconfigContext { name: "keelson".into(), server: server.into() }], ca_pem, user, cert);
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&yaml).map_err(|e| err(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default()).await.map_err(|e| err(e.to_string()))?;
    let client = traced_client(config.clone()).map_err(|e| err(e.to_string()))?;
    Ok((client, config))
}

/// A kube-rs client for `config` whose requests carry the current span's `traceparent`,
/// so the API server's spans for them join the component's trace.
pub fn traced_client(config: kube::Config) -> Result<kube::Client, kube::Error> {
    Ok(kube::client::ClientBuilder::try_from(config)?.with_layer(&keelson_tracecontext::InjectLayer).build())
}
