//! [`ApiCluster`]: a [`TestCluster`] whose replicas also serve the Kubernetes API
//! in-process, with a cluster CA, and kube-rs clients per replica or through a failover
//! proxy ([`FailoverProxy`], what a load balancer in front of the servers does).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use anyhow::Context;
use keelson_pki::{ClusterCa, IssuedCert, KubeconfigContext};
use tokio_util::sync::CancellationToken;

use crate::{ClusterOptions, TestCluster};

/// API server options of an [`ApiCluster`].
#[derive(Clone, Debug, Default)]
pub struct ApiOptions {
    /// Static bearer-token file.
    pub token_file: Option<std::path::PathBuf>,
    /// Validity of the serving certificates (default one year).
    pub serving_validity: Option<std::time::Duration>,
    /// Rotate serving certificates: (renew when less than this is left, check interval).
    pub rotation: Option<(std::time::Duration, std::time::Duration)>,
    /// `--max-requests-inflight` / `--max-mutating-requests-inflight` (None: the defaults).
    pub inflight: Option<(usize, usize)>,
    /// An audit log per server: `audit-<i>.log` in this directory.
    pub audit_dir: Option<std::path::PathBuf>,
}

pub struct ApiCluster {
    pub store: TestCluster,
    ca: ClusterCa,
    admin: IssuedCert,
    secrets_key: Vec<u8>,
    sa_key: String,
    opts: ApiOptions,
    api_addrs: Vec<SocketAddr>,
}

/// A loopback address free now, for a server that binds it later (and again after a
/// restart); see [`keelson_runner::free_loopback_port`].
fn free_addr() -> anyhow::Result<SocketAddr> {
    Ok(SocketAddr::from(([127, 0, 0, 1], keelson_runner::free_loopback_port()?)))
}

impl ApiCluster {
    pub async fn start(n: usize, opts: ClusterOptions) -> anyhow::Result<Self> {
        Self::start_with(n, opts, ApiOptions::default()).await
    }

    /// Like [`ApiCluster::start`], with a static bearer-token file for the API servers.
    pub async fn start_with_tokens(n: usize, opts: ClusterOptions, token_file: Option<std::path::PathBuf>) -> anyhow::Result<Self> {
        Self::start_with(n, opts, ApiOptions { token_file, ..Default::default() }).await
    }

    pub async fn start_with(n: usize, opts: ClusterOptions, api: ApiOptions) -> anyhow::Result<Self> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let store = TestCluster::start(n, opts).await?;
        let ca = ClusterCa::generate("test")?;
        let admin = ca.issue_client(keelson_pki::ADMIN_USER, &[keelson_pki::ADMIN_GROUP])?;
        let secrets_key = keelson_apiserver::encryption::SecretsCipher::generate_key().to_vec();
        let sa_key = rcgen::KeyPair::generate()?.serialize_pem();
        let mut c = Self { store, ca, admin, secrets_key, sa_key, opts: api, api_addrs: Vec::new() };
        for i in 0..n {
            c.api_addrs.push(free_addr()?);
            c.serve_api(i).await?;
        }
        Ok(c)
    }

    /// Starts replica `i`'s API server; it stops when the replica shuts down.
    async fn serve_api(&self, i: usize) -> anyhow::Result<()> {
        let names = vec!["127.0.0.1".to_string(), "localhost".to_string()];
        let serving = match self.opts.serving_validity {
            Some(v) => self.ca.issue_serving_valid_for("api", &names, keelson_pki::Duration::seconds(v.as_secs() as i64))?,
            None => self.ca.issue_serving("api", &names)?,
        };
        let cert_rotation = self.opts.rotation.map(|(renew_before, check_every)| keelson_pki::rotation::CertRotation {
            purpose: "API serving",
            ca_cert_pem: self.ca.cert_pem().to_string(),
            ca_key_pem: self.ca.key_pem(),
            common_name: "api".into(),
            names: names.clone(),
            validity: self.opts.serving_validity.unwrap_or(std::time::Duration::from_secs(86400 * 365)),
            renew_before,
            check_every,
            save_as: None,
        });
        let running = self.store.running(i).context("replica not running")?;
        let cfg = keelson_apiserver::ApiServerConfig {
            listen: self.api_addrs[i],
            cert_pem: serving.cert_pem,
            key_pem: serving.key_pem,
            client_ca_pem: self.ca.cert_pem().to_string(),
            store_endpoint: self.store.addr(i),
            store_tls: self.store.client_tls().map(|t| t.identity()).transpose()?,
            secrets_key: Some(self.secrets_key.clone()),
            service_account_key_pem: Some(self.sa_key.clone()),
            token_auth_file: self.opts.token_file.clone(),
            audit: self.opts.audit_dir.as_ref().map(|d| keelson_apiserver::AuditConfig { path: d.join(format!("audit-{i}.log")), max_bytes: 64 << 20, backups: 1 }),
            join: None,
            initial_join_token: None,
            cert_rotation,
            identity: Some(keelson_apiserver::identity_lease::ServerIdentity { name: format!("server-{i}"), address: self.api_addrs[i] }),
            max_requests_inflight: self.opts.inflight.map_or(keelson_apiserver::inflight::DEFAULT_MAX_REQUESTS_INFLIGHT, |l| l.0),
            max_mutating_requests_inflight: self.opts.inflight.map_or(keelson_apiserver::inflight::DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT, |l| l.1),
            auth_failures: Default::default(),
        };
        let mut last = None;
        for _ in 0..50 {
            match keelson_apiserver::serve(cfg.clone(), running.shutdown_token()).await {
                Ok(_) => return Ok(()),
                Err(e) => last = Some(e),
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        Err(last.expect("tried").into())
    }

    pub fn api_addr(&self, i: usize) -> SocketAddr {
        self.api_addrs[i]
    }

    /// Kills replica `i` (and with it its API server).
    pub async fn kill(&mut self, i: usize) {
        self.store.kill(i).await;
    }

    /// Restarts replica `i` and its API server on the same addresses.
    pub async fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        self.store.restart(i).await?;
        self.serve_api(i).await
    }

    /// Admin kubeconfig YAML for `server` (an `https://` URL).
    pub fn kubeconfig(&self, server: &str) -> String {
        keelson_pki::kubeconfig(&[KubeconfigContext { name: "test".into(), server: server.into() }], self.ca.cert_pem(), "admin", &self.admin)
    }

    /// A kube-rs client for `https://ADDR`.
    pub async fn kube_client_for(&self, addr: SocketAddr) -> anyhow::Result<kube::Client> {
        let kc = kube::config::Kubeconfig::from_yaml(&self.kubeconfig(&format!("https://{addr}")))?;
        let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default()).await?;
        Ok(kube::Client::try_from(cfg)?)
    }

    /// A kube-rs client to replica `i` authenticating with a bearer token.
    pub async fn kube_client_with_token(&self, i: usize, token: &str) -> anyhow::Result<kube::Client> {
        use base64::Engine;
        let ca = base64::engine::general_purpose::STANDARD.encode(self.ca.cert_pem());
        let yaml = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://{}\n    certificate-authority-data: {ca}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user:\n    token: {token}\n",
            self.api_addrs[i]
        );
        let cfg = kube::Config::from_custom_kubeconfig(kube::config::Kubeconfig::from_yaml(&yaml)?, &kube::config::KubeConfigOptions::default()).await?;
        Ok(kube::Client::try_from(cfg)?)
    }

    /// A kube-rs client to replica `i` with a client certificate for `user` in `groups`
    /// (CN = user, one O per group).
    pub async fn kube_client_as(&self, i: usize, user: &str, groups: &[&str]) -> anyhow::Result<kube::Client> {
        let cert = self.ca.issue_client(user, groups)?;
        let yaml = keelson_pki::kubeconfig(&[KubeconfigContext { name: "c".into(), server: format!("https://{}", self.api_addrs[i]) }], self.ca.cert_pem(), "u", &cert);
        let cfg = kube::Config::from_custom_kubeconfig(kube::config::Kubeconfig::from_yaml(&yaml)?, &kube::config::KubeConfigOptions::default()).await?;
        Ok(kube::Client::try_from(cfg)?)
    }

    /// A kube-rs client and its configuration for `https://ADDR` as `user` in `groups`.
    pub async fn kube_config_as(&self, addr: SocketAddr, user: &str, groups: &[&str]) -> anyhow::Result<(kube::Client, kube::Config)> {
        let cert = self.ca.issue_client(user, groups)?;
        Ok(keelson_component::client::config_for(&format!("https://{addr}"), self.ca.cert_pem(), user, &cert).await?)
    }

    /// What a control-plane component of server `i` gets: a balancer in front of that
    /// server's API, the cluster CA, and short election timings.
    pub async fn control_plane_access(&self, i: usize, shutdown: CancellationToken) -> anyhow::Result<keelson_component::ControlPlaneAccess> {
        let balancer = keelson_component::ApiBalancer::start(vec![self.api_addrs[i]], self.ca.cert_pem(), Default::default(), shutdown).await?;
        Ok(keelson_component::ControlPlaneAccess {
            balancer,
            ca: Arc::new(ClusterCa::from_pem(self.ca.cert_pem(), &self.ca.key_pem())?),
            server_name: format!("server-{i}"),
            timings: keelson_component::ElectionTimings {
                lease_duration: std::time::Duration::from_secs(2),
                renew_deadline: std::time::Duration::from_millis(1500),
                retry_period: std::time::Duration::from_millis(300),
            },
            metrics: Default::default(),
        })
    }

    /// The cluster CA certificate (PEM).
    pub fn ca_pem(&self) -> &str {
        self.ca.cert_pem()
    }

    /// A kube-rs client talking to replica `i`.
    pub async fn kube_client(&self, i: usize) -> anyhow::Result<kube::Client> {
        self.kube_client_for(self.api_addrs[i]).await
    }

    pub async fn shutdown(self) {
        self.store.shutdown().await;
    }
}

/// A TCP proxy that forwards new connections to one of several targets, in order,
/// skipping targets that refuse connections: a client behind it moves to another
/// replica when its replica dies, as behind a load balancer.
pub struct FailoverProxy {
    pub addr: SocketAddr,
    current: Arc<AtomicUsize>,
    token: CancellationToken,
}

impl FailoverProxy {
    pub async fn start(targets: Vec<SocketAddr>) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let current = Arc::new(AtomicUsize::new(0));
        let token = CancellationToken::new();
        let (cur, tok) = (current.clone(), token.clone());
        tokio::spawn(async move {
            loop {
                let (mut inbound, _) = tokio::select! {
                    _ = tok.cancelled() => return,
                    r = listener.accept() => match r { Ok(c) => c, Err(_) => continue },
                };
                let targets = targets.clone();
                let cur = cur.clone();
                let conn_token = tok.clone();
                tokio::spawn(async move {
                    for _ in 0..targets.len() {
                        let i = cur.load(Ordering::SeqCst) % targets.len();
                        match tokio::net::TcpStream::connect(targets[i]).await {
                            Ok(mut outbound) => {
                                tokio::select! {
                                    _ = conn_token.cancelled() => {}
                                    _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                                }
                                return;
                            }
                            Err(_) => {
                                let _ = cur.compare_exchange(i, i + 1, Ordering::SeqCst, Ordering::SeqCst);
                            }
                        }
                    }
                });
            }
        });
        Ok(Self { addr, current, token })
    }

    /// Index of the target new connections go to.
    pub fn target(&self) -> usize {
        self.current.load(Ordering::SeqCst)
    }
}

impl Drop for FailoverProxy {
    fn drop(&mut self) {
        self.token.cancel();
    }
}
