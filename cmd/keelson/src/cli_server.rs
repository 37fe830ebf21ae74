//! `keelson server`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use keelson_replica::{Bootstrap, CompactionPolicy, ReplicaConfig};

#[derive(Args)]
pub struct ServerArgs {
    /// This replica's name (kept in its data directory on first start).
    #[arg(long, default_value = "keelson-1")]
    name: String,
    #[arg(long, default_value = "keelson-data")]
    data_dir: PathBuf,
    /// Address of the replica's gRPC endpoint (Raft, store, cluster services).
    #[arg(long, default_value = "127.0.0.1:2380")]
    listen: SocketAddr,
    /// `host:port` other replicas reach this one at (default: the listen address).
    #[arg(long)]
    advertise: Option<String>,
    /// Create a new cluster with this replica as its first member.
    #[arg(long, conflicts_with = "join")]
    cluster_init: bool,
    /// Join a cluster: `https://SERVER:6443` with `--token`, or (with the CA already in
    /// the PKI directory) the store address `host:port` of a member.
    #[arg(long)]
    join: Option<String>,
    /// Join token (`K10…`), printed in `PKI_DIR/server-token` of the first server.
    #[arg(long, env = "KEELSON_TOKEN")]
    token: Option<String>,
    /// Static bearer tokens: `token,user,uid,"group1,group2"` per line.
    #[arg(long)]
    token_auth_file: Option<PathBuf>,
    /// Audit log of mutating requests (default DATA_DIR/audit.log).
    #[arg(long)]
    audit_log_path: Option<PathBuf>,
    /// Rotate the audit log at this size, in MiB.
    #[arg(long, default_value_t = 100)]
    audit_log_maxsize_mb: u64,
    /// Read-only requests served at once before 429 with Retry-After (0: no limit),
    /// shared by priority levels and fairly by users within a level (API Priority and
    /// Fairness' suggested levels). Watches, exec, attach, port-forward, proxy and logs
    /// are not counted; system:masters and health probes are never refused.
    #[arg(long, default_value_t = keelson_apiserver::inflight::DEFAULT_MAX_REQUESTS_INFLIGHT)]
    max_requests_inflight: usize,
    /// Mutating requests served at once before 429 (0: no limit), shared out the same way.
    #[arg(long, default_value_t = keelson_apiserver::inflight::DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT)]
    max_mutating_requests_inflight: usize,
    /// Failed authentication attempts (bad or expired tokens, no credentials) a source
    /// address may make in a row before its token and anonymous requests get 429 with
    /// Retry-After; one more is earned back every --auth-failure-refill (0: no limit).
    /// Client certificates are never limited.
    #[arg(long, default_value_t = 10)]
    auth_failure_burst: u32,
    /// Time to earn back one failed authentication attempt: `6s`, `500ms`, `1m`.
    #[arg(long, default_value = "6s", value_parser = crate::components::parse_duration)]
    auth_failure_refill: std::time::Duration,
    /// Rotated audit logs kept.
    #[arg(long, default_value_t = 10)]
    audit_log_maxbackup: usize,
    /// Reissue the API serving certificate and the peer (Raft and store gRPC) certificate
    /// when fewer days than this are left; both are replaced without a restart.
    #[arg(long, default_value_t = 30)]
    cert_renew_before_days: u64,
    /// Serve Prometheus metrics at this address.
    #[arg(long)]
    metrics_addr: Option<SocketAddr>,
    /// Keep every revision younger than this many seconds.
    #[arg(long, default_value_t = 300)]
    compaction_retention_secs: u64,
    /// Also keep at least this many latest revisions.
    #[arg(long)]
    compaction_keep_revisions: Option<i64>,
    /// Snapshot the state after this many applied log entries.
    #[arg(long, default_value_t = 100_000)]
    snapshot_every: u64,
    /// Log entries kept behind a snapshot for lagging followers.
    #[arg(long, default_value_t = 5_000)]
    keep_logs: u64,
    /// How often the leader considers compacting, in seconds.
    #[arg(long, default_value_t = 10)]
    compaction_interval_secs: u64,
    /// Where the Kubernetes API is served (HTTPS).
    #[arg(long, default_value = "0.0.0.0:6443")]
    api_listen: SocketAddr,
    /// Directory of the cluster CA (`ca.crt`, `ca.key`); `--cluster-init` creates it.
    /// Default: DATA_DIR/pki.
    #[arg(long)]
    pki_dir: Option<PathBuf>,
    /// While leading, compare every member's history digest this often (`5m`; `0`
    /// turns the check off); a member that differs raises keelson_corrupt_members.
    #[arg(long, default_value = "5m", value_parser = crate::components::parse_duration)]
    corruption_check_interval: Duration,
    /// Take a backup of this server's store this often (`12h`, `30m`; `0` turns
    /// scheduled backups off), into --backup-dir.
    #[arg(long, default_value = "12h", value_parser = crate::components::parse_duration)]
    backup_every: Duration,
    /// Where scheduled backups go (default DATA_DIR/backups), named SERVER-UNIXTIME.backup.
    #[arg(long)]
    backup_dir: Option<PathBuf>,
    /// Scheduled backups kept; older ones are removed.
    #[arg(long, default_value_t = 5)]
    backup_retention: usize,
    /// Free space this server keeps on its data directory's file system (a quantity:
    /// `64Mi`, `1Gi`, `0` for none); below it the server appends nothing to its log.
    #[arg(long, default_value = "64Mi", value_parser = parse_byte_quantity)]
    storage_reserve: u64,
    /// Extra names (DNS or IP) for the API serving certificate.
    #[arg(long = "tls-san")]
    tls_sans: Vec<String>,
    #[command(flatten)]
    components: crate::components::ComponentArgs,
}

impl ServerArgs {
    /// This replica's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// A byte count written as a Kubernetes quantity (`64Mi`, `1G`, `500000`), for flags.
fn parse_byte_quantity(s: &str) -> Result<u64, String> {
    let milli = keelson_apimachinery::quantity::parse_quantity_milli(s)
        .ok_or_else(|| format!("{s:?} is not a quantity of bytes (for example 64Mi, 1Gi, 0)"))?;
    let milli = u128::try_from(milli).map_err(|_| format!("{s:?}: a byte count cannot be negative"))?;
    u64::try_from(milli.div_ceil(1000)).map_err(|_| format!("{s:?} is too large"))
}

/// Where clients reach this server's API: the API listen address, or (when it is a
/// wildcard) the host this server advertises to its peers, else loopback.
fn api_address(args: &ServerArgs) -> SocketAddr {
    let port = args.api_listen.port();
    if !args.api_listen.ip().is_unspecified() {
        return args.api_listen;
    }
    let advertised = args.advertise.as_deref().and_then(|a| a.rsplit_once(':')).and_then(|(h, _)| h.parse::<std::net::IpAddr>().ok());
    let listen = Some(args.listen.ip()).filter(|ip| !ip.is_unspecified());
    SocketAddr::new(advertised.or(listen).unwrap_or(std::net::Ipv4Addr::LOCALHOST.into()), port)
}

/// Validity of the certificates a server issues itself (API serving, peer).
const CERT_VALIDITY: Duration = Duration::from_secs(365 * 86400);
/// How often a server checks whether its certificates are due for renewal.
const CERT_CHECK_EVERY: Duration = Duration::from_secs(3600);

fn pki_dir(args: &ServerArgs) -> PathBuf {
    args.pki_dir.clone().unwrap_or_else(|| args.data_dir.join("pki"))
}

/// The cluster's key material: created by `--cluster-init`, fetched with a join token
/// by `--join https://… --token …`, otherwise read from the PKI directory. Returns the
/// material and, for a token join, the store address of a member to join through.
async fn cluster_material(args: &ServerArgs) -> anyhow::Result<(keelson_pki::ClusterMaterial, Option<String>)> {
    let dir = pki_dir(args);
    if args.cluster_init {
        return Ok((keelson_pki::ClusterMaterial::load_or_create(&dir, "keelson")?, None));
    }
    let url = args.join.as_deref().filter(|j| j.starts_with("https://"));
    match (url, keelson_pki::ClusterMaterial::load(&dir)?) {
        (Some(url), existing) => {
            let token = args.token.as_deref().context("--join https://… needs --token")?;
            let token = keelson_pki::JoinToken::parse(token).map_err(|e| anyhow::anyhow!("--token: {e}"))?;
            let joined = keelson_apiserver::join_client::join_server(url, &token, &args.name).await.with_context(|| format!("joining through {url}"))?;
            let peer = joined.peers.first().cloned().context("the cluster reported no members")?;
            let material = match existing {
                Some(m) => m,
                None => {
                    use base64::Engine;
                    let key = base64::engine::general_purpose::STANDARD.decode(&joined.secrets_key).context("secrets key")?;
                    keelson_pki::ClusterMaterial::save(&dir, &joined.ca_cert, &joined.ca_key, &key, &joined.service_account_key)?
                }
            };
            Ok((material, Some(peer)))
        }
        (None, Some(m)) => Ok((m, None)),
        (None, None) => anyhow::bail!(
            "no cluster CA in {}: start the first server with --cluster-init, join with --join https://SERVER:6443 --token TOKEN, or pass --pki-dir",
            dir.display()
        ),
    }
}

/// This server's API serving certificate, reissued at every start (so new names take
/// effect), and on `--cluster-init` the admin kubeconfig `PKI_DIR/admin.kubeconfig`.
/// The names a certificate of this server answers to: loopback, the address it listens
/// on (`listen`), its advertised host, `--tls-san`, and `extra`.
fn certificate_names(args: &ServerArgs, listen: std::net::IpAddr, extra: &[&str]) -> Vec<String> {
    let mut names: Vec<String> = ["localhost", "127.0.0.1"].iter().chain(extra).map(|s| s.to_string()).collect();
    if !listen.is_unspecified() {
        names.push(listen.to_string());
    }
    if let Some((host, _)) = args.advertise.as_deref().and_then(|a| a.rsplit_once(':')) {
        names.push(host.to_string());
    }
    names.extend(args.tls_sans.iter().cloned());
    names.retain(|n| !n.is_empty());
    names
}

fn api_serving_cert(args: &ServerArgs, ca: &keelson_pki::ClusterCa) -> anyhow::Result<(keelson_pki::IssuedCert, Vec<String>)> {
    let hostname = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
    let extra = ["kubernetes", "kubernetes.default", "kubernetes.default.svc", "10.43.0.1", hostname.trim()];
    let names = certificate_names(args, args.api_listen.ip(), &extra);
    let serving = ca.issue_serving(&args.name, &names)?;
    serving.save(&args.data_dir.join("tls"), "apiserver")?;
    if args.cluster_init {
        let dir = pki_dir(args);
        let admin = ca.load_or_issue(&dir, "admin", |ca| ca.issue_client(keelson_pki::ADMIN_USER, &[keelson_pki::ADMIN_GROUP]))?;
        let path = dir.join("admin.kubeconfig");
        if !path.exists() {
            let host = if args.api_listen.ip().is_unspecified() { "127.0.0.1".to_string() } else { args.api_listen.ip().to_string() };
            let ctx = keelson_pki::KubeconfigContext { name: args.name.clone(), server: format!("https://{host}:{}", args.api_listen.port()) };
            std::fs::write(&path, keelson_pki::kubeconfig(&[ctx], ca.cert_pem(), "admin", &admin))?;
        }
    }
    Ok((serving, names))
}

pub async fn run(args: ServerArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.data_dir).with_context(|| format!("creating {}", args.data_dir.display()))?;
    let (material, token_peer) = cluster_material(&args).await.context("preparing the cluster's certificates and keys")?;
    let (serving, serving_names) = api_serving_cert(&args, &material.ca).context("issuing the API serving certificate")?;
    let rotation = keelson_pki::rotation::CertRotation {
        purpose: "API serving",
        ca_cert_pem: material.ca.cert_pem().to_string(),
        ca_key_pem: material.ca.key_pem(),
        common_name: args.name.clone(),
        names: serving_names,
        validity: CERT_VALIDITY,
        renew_before: Duration::from_secs(args.cert_renew_before_days.max(1) * 86400),
        check_every: CERT_CHECK_EVERY,
        save_as: Some((args.data_dir.join("tls"), "apiserver".into())),
    };
    let initial_token = if args.cluster_init { Some(material.server_token(&pki_dir(&args))?) } else { None };
    let api_listen = args.api_listen;
    let audit = keelson_apiserver::AuditConfig {
        path: args.audit_log_path.clone().unwrap_or_else(|| args.data_dir.join("audit.log")),
        max_bytes: args.audit_log_maxsize_mb.max(1) * 1024 * 1024,
        backups: args.audit_log_maxbackup,
    };
    let token_auth_file = args.token_auth_file.clone();
    let bootstrap = match (args.cluster_init, token_peer, args.join.clone()) {
        (true, _, _) => Bootstrap::ClusterInit,
        (false, Some(peer), _) => Bootstrap::Join(peer),
        (false, None, Some(peer)) => Bootstrap::Join(peer),
        (false, None, None) => Bootstrap::Resume,
    };
    // Replica traffic is mutual TLS: a certificate for every name peers may dial, issued
    // at every start and reissued before it expires while the server runs.
    let peer_names = certificate_names(&args, args.listen.ip(), &[]);
    let peer_cert = material.ca.issue_serving(&args.name, &peer_names).context("issuing the peer certificate")?;
    let peer_identity = keelson_replica::PeerTls::new(material.ca.cert_pem(), peer_cert.cert_pem, peer_cert.key_pem)
        .identity()
        .context("the peer certificate")?;
    let peer_rotation = keelson_pki::rotation::CertRotation {
        purpose: "peer",
        common_name: args.name.clone(),
        names: peer_names,
        save_as: None,
        ..rotation.clone()
    };
    let api_address = api_address(&args);
    let mut cfg = ReplicaConfig::new(args.name, args.data_dir, args.listen, bootstrap).with_tls(peer_identity.clone());
    cfg.corruption_check = (!args.corruption_check_interval.is_zero()).then_some(args.corruption_check_interval);
    cfg.backups = (!args.backup_every.is_zero()).then(|| keelson_replica::backup::BackupSchedule {
        dir: args.backup_dir.clone().unwrap_or_else(|| cfg.data_dir.join("backups")),
        every: args.backup_every,
        keep: args.backup_retention.max(1),
    });
    cfg.disk_reserve = args.storage_reserve;
    cfg.advertise_addr = args.advertise;
    cfg.metrics_addr = args.metrics_addr;
    cfg.log_retention = keelson_raft::LogRetention { snapshot_every: args.snapshot_every.max(1), keep_behind_snapshot: args.keep_logs };
    cfg.compaction = CompactionPolicy {
        retention: Duration::from_secs(args.compaction_retention_secs),
        keep_revisions: args.compaction_keep_revisions,
        interval: Duration::from_secs(args.compaction_interval_secs.max(1)),
    };
    let election_metrics = keelson_component::ElectionMetrics::default();
    let rendered = election_metrics.clone();
    cfg.extra_metrics = Some(keelson_replica::ExtraMetrics(std::sync::Arc::new(move || rendered.render())));
    let components = args.components.clone();
    components.timings().context("leader election flags")?;
    let component_ca = keelson_pki::ClusterCa::from_pem(material.ca.cert_pem(), &material.ca.key_pem()).context("the cluster CA")?;
    let server_name = cfg.name.clone();
    let running = keelson_replica::start(cfg).await.context("starting the replica")?;
    tracing::info!(id = format!("{:x}", running.replica.id()), addr = running.replica.addr(), "serving");
    tokio::spawn(keelson_pki::rotation::run(peer_identity.clone(), peer_rotation, running.shutdown_token()));
    let api = keelson_apiserver::serve(
        keelson_apiserver::ApiServerConfig {
            listen: api_listen,
            cert_pem: serving.cert_pem,
            key_pem: serving.key_pem,
            client_ca_pem: material.ca.cert_pem().to_string(),
            store_endpoint: running.replica.addr().to_string(),
            store_tls: Some(peer_identity),
            secrets_key: Some(material.secrets_key.clone()),
            service_account_key_pem: Some(material.service_account_key_pem.clone()),
            token_auth_file,
            audit: Some(audit),
            join: Some(keelson_apiserver::join::JoinMaterial {
                ca_cert_pem: material.ca.cert_pem().to_string(),
                ca_key_pem: material.ca.key_pem(),
                secrets_key: material.secrets_key.clone(),
                service_account_key_pem: material.service_account_key_pem.clone(),
            }),
            initial_join_token: initial_token.map(|t| (t.id, t.secret)),
            cert_rotation: Some(rotation),
            identity: Some(keelson_apiserver::identity_lease::ServerIdentity { name: server_name.clone(), address: api_address }),
            max_requests_inflight: args.max_requests_inflight,
            auth_failures: keelson_apiserver::auth::lockout::AuthFailureLimits { burst: args.auth_failure_burst, refill_every: args.auth_failure_refill },
            max_mutating_requests_inflight: args.max_mutating_requests_inflight,
        },
        running.shutdown_token(),
    )
    .await
    .context("starting the API server")?;
    tracing::info!(addr = %api.addr, "serving the Kubernetes API");
    // The components reach this server's API over loopback when it listens on a wildcard.
    let own_api = if api.addr.ip().is_unspecified() { SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), api.addr.port()) } else { api.addr };
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    // The components start once their RBAC roles exist (on a new cluster they are being
    // created now), so their first requests are not denied.
    tokio::select! {
        _ = api.defaults_created() => {}
        _ = tokio::signal::ctrl_c() => return stop_before_components(running).await,
        _ = term.recv() => return stop_before_components(running).await,
    }
    let components = crate::components::start(&components, &server_name, own_api, component_ca, election_metrics, running.shutdown_token())
        .await
        .context("starting the scheduler and controller manager")?;
    let stopped = tokio::select! {
        _ = tokio::signal::ctrl_c() => None,
        _ = term.recv() => None,
        why = running.raft_stopped() => Some(why),
    };
    if let Some(why) = &stopped {
        tracing::error!(reason = %why, "the Raft core stopped: this server exits so that it can be restarted");
    }
    tracing::info!("shutting down");
    // Components first: they release their Leases through the API, which must still serve
    // (without Raft they cannot, so they are given a bounded time).
    if stopped.is_some() {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(10), components.stop()).await;
    } else {
        components.stop().await;
    }
    running.shutdown().await;
    match stopped {
        Some(why) => anyhow::bail!("the Raft core stopped ({why}); restart this server once the cause is mended (a full disk freed, a corrupt replica rebuilt)"),
        None => Ok(()),
    }
}

/// A stop asked for before the components started.
async fn stop_before_components(running: keelson_replica::RunningReplica) -> anyhow::Result<()> {
    tracing::info!("shutting down");
    running.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_byte_quantity;

    #[test]
    fn storage_reserve_takes_byte_quantities() {
        assert_eq!(parse_byte_quantity("64Mi"), Ok(64 << 20));
        assert_eq!(parse_byte_quantity("1G"), Ok(1_000_000_000));
        assert_eq!(parse_byte_quantity("0"), Ok(0));
        assert_eq!(parse_byte_quantity("1.5Ki"), Ok(1536));
        assert!(parse_byte_quantity("-1Mi").unwrap_err().contains("negative"));
        assert!(parse_byte_quantity("lots").unwrap_err().contains("not a quantity of bytes"));
    }
}
