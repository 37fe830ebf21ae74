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
    /// Join the cluster the replica at this `host:port` belongs to.
    #[arg(long)]
    join: Option<String>,
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
    /// Extra names (DNS or IP) for the API serving certificate.
    #[arg(long = "tls-san")]
    tls_sans: Vec<String>,
}

/// The CA, this server's serving certificate, and (on `--cluster-init`) the admin
/// kubeconfig `PKI_DIR/admin.kubeconfig`.
fn api_tls(args: &ServerArgs) -> anyhow::Result<(String, keelson_pki::IssuedCert)> {
    let pki_dir = args.pki_dir.clone().unwrap_or_else(|| args.data_dir.join("pki"));
    let ca = if args.cluster_init {
        keelson_pki::ClusterCa::load_or_create(&pki_dir, "keelson")?
    } else {
        keelson_pki::ClusterCa::load(&pki_dir)?.with_context(|| {
            format!("no cluster CA in {} (copy ca.crt and ca.key from the first server, or pass --pki-dir)", pki_dir.display())
        })?
    };
    let mut names = vec!["localhost".to_string(), "127.0.0.1".to_string(), "kubernetes".into(), "kubernetes.default".into(), "kubernetes.default.svc".into(), "10.43.0.1".into()];
    if let Ok(h) = std::fs::read_to_string("/etc/hostname") {
        names.push(h.trim().to_string());
    }
    if !args.api_listen.ip().is_unspecified() {
        names.push(args.api_listen.ip().to_string());
    }
    if let Some(host) = args.advertise.as_deref().and_then(|a| a.rsplit_once(':')).map(|(h, _)| h.to_string()) {
        names.push(host);
    }
    names.extend(args.tls_sans.iter().cloned());
    names.retain(|n| !n.is_empty());
    // Reissued at every start, so new names take effect.
    let serving = ca.issue_serving(&args.name, &names)?;
    serving.save(&args.data_dir.join("tls"), "apiserver")?;
    if args.cluster_init {
        let admin = ca.load_or_issue(&pki_dir, "admin", |ca| ca.issue_client(keelson_pki::ADMIN_USER, &[keelson_pki::ADMIN_GROUP]))?;
        let path = pki_dir.join("admin.kubeconfig");
        if !path.exists() {
            let host = if args.api_listen.ip().is_unspecified() { "127.0.0.1".to_string() } else { args.api_listen.ip().to_string() };
            let ctx = keelson_pki::KubeconfigContext { name: args.name.clone(), server: format!("https://{host}:{}", args.api_listen.port()) };
            std::fs::write(&path, keelson_pki::kubeconfig(&[ctx], ca.cert_pem(), "admin", &admin))?;
        }
    }
    Ok((ca.cert_pem().to_string(), serving))
}

/// The cluster's Secrets encryption key: created with the CA (`PKI_DIR/secrets.key`),
/// copied into the data directory on a server's first start and read from there.
fn secrets_key(args: &ServerArgs) -> anyhow::Result<Vec<u8>> {
    use std::os::unix::fs::OpenOptionsExt;
    let write_new = |path: &std::path::Path, key: &[u8]| -> anyhow::Result<()> {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
        f.write_all(key)?;
        f.sync_all()?;
        Ok(())
    };
    let local = args.data_dir.join("secrets.key");
    if local.exists() {
        return Ok(std::fs::read(&local)?);
    }
    let pki_dir = args.pki_dir.clone().unwrap_or_else(|| args.data_dir.join("pki"));
    let shared = pki_dir.join("secrets.key");
    if !shared.exists() {
        if !args.cluster_init {
            anyhow::bail!("no Secrets encryption key in {} (it is created with the cluster CA)", shared.display());
        }
        std::fs::create_dir_all(&pki_dir)?;
        write_new(&shared, &keelson_apiserver::encryption::SecretsCipher::generate_key())?;
    }
    let key = std::fs::read(&shared)?;
    write_new(&local, &key)?;
    Ok(key)
}

pub async fn run(args: ServerArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.data_dir).with_context(|| format!("creating {}", args.data_dir.display()))?;
    let (ca_pem, serving) = api_tls(&args).context("preparing the API server's certificates")?;
    let secrets_key = secrets_key(&args).context("loading the Secrets encryption key")?;
    let api_listen = args.api_listen;
    let bootstrap = match (args.cluster_init, args.join) {
        (true, _) => Bootstrap::ClusterInit,
        (false, Some(peer)) => Bootstrap::Join(peer),
        (false, None) => Bootstrap::Resume,
    };
    let mut cfg = ReplicaConfig::new(args.name, args.data_dir, args.listen, bootstrap);
    cfg.advertise_addr = args.advertise;
    cfg.metrics_addr = args.metrics_addr;
    cfg.log_retention = keelson_raft::LogRetention { snapshot_every: args.snapshot_every.max(1), keep_behind_snapshot: args.keep_logs };
    cfg.compaction = CompactionPolicy {
        retention: Duration::from_secs(args.compaction_retention_secs),
        keep_revisions: args.compaction_keep_revisions,
        interval: Duration::from_secs(args.compaction_interval_secs.max(1)),
    };
    let running = keelson_replica::start(cfg).await.context("starting the replica")?;
    tracing::info!(id = format!("{:x}", running.replica.id()), addr = running.replica.addr(), "serving");
    let api = keelson_apiserver::serve(
        keelson_apiserver::ApiServerConfig {
            listen: api_listen,
            cert_pem: serving.cert_pem,
            key_pem: serving.key_pem,
            client_ca_pem: ca_pem,
            store_endpoint: running.replica.addr().to_string(),
            secrets_key: Some(secrets_key),
        },
        running.shutdown_token(),
    )
    .await
    .context("starting the API server")?;
    tracing::info!(addr = %api.addr, "serving the Kubernetes API");
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutting down");
    running.shutdown().await;
    Ok(())
}
