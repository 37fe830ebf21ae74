//! Starting and stopping a replica: storage, Raft, services, background tasks.

use openraft::async_runtime::WatchReceiver;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use keelson_client::api::MemberAddCall;
use keelson_client::{PeerIdentity, StoreClient};
use keelson_mvcc::MvccStore;
use keelson_proto::v1::cluster_server::ClusterServer;
use keelson_proto::v1::raft_transport_server::RaftTransportServer;
use keelson_proto::v1::store_server::StoreServer;
use keelson_raft::network::{GrpcNetworkFactory, PeerDialer};
use keelson_raft::transport_service::RaftTransportService;
use keelson_raft::{KeelsonStateMachine, MemberNode};
use keelson_rocks::{open_db, RocksBackend, RocksLogStore};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::{Bootstrap, ReplicaConfig};
use crate::grpc::{ClusterService, StoreService};
use crate::identity;
use crate::read_index::{self, ReadIndexBatcher};
use crate::replica::{PeerChannels, Replica, ReplicaInner};
use crate::stats::ReplicaStats;

/// The data directory's folder for the state machine's snapshots (and, under
/// `incoming/`, snapshots being received from the leader).
const SNAPSHOT_DIR: &str = "snapshots";

/// Why a replica could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("data directory {path}: {source}")]
    DataDir { path: String, #[source] source: std::io::Error },
    #[error("opening storage: {0}")]
    Storage(String),
    #[error("cannot listen on {addr}: {source}")]
    Listen { addr: String, #[source] source: std::io::Error },
    #[error("raft: {0}")]
    Raft(String),
    #[error("{0}")]
    Bootstrap(String),
}

/// A started replica; dropping it does not stop it, [`RunningReplica::shutdown`] does.
pub struct RunningReplica {
    pub replica: Replica,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
    /// Where `/metrics` is served, if enabled.
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// The RocksDB instance, stopped and released on shutdown.
    db: Arc<rocksdb::DB>,
}

impl RunningReplica {
    /// A token that is cancelled when the replica shuts down.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Resolves, with the reason, once this replica's Raft core has stopped for good: a
    /// storage error it cannot go on from (its own log refused a write, or an entry read
    /// back is corrupt). The replica then serves nothing that needs Raft, and only a
    /// restart (with the cause mended) brings it back; `keelson server` exits. Pending
    /// for as long as the core runs (a core shut down on purpose reports that it stopped).
    pub async fn raft_stopped(&self) -> String {
        let mut metrics = self.replica.raft().metrics();
        loop {
            if let Err(fatal) = &metrics.borrow_and_update().running_state {
                return fatal.to_string();
            }
            if metrics.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    /// Stops serving, stops Raft and waits for background tasks.
    pub async fn shutdown(self) {
        let RunningReplica { replica, shutdown, tasks, db, .. } = self;
        shutdown.cancel();
        if let Err(e) = replica.raft().shutdown().await {
            tracing::warn!(error = %e, "raft shutdown");
        }
        for t in tasks {
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
        drop(replica);
        // Stop RocksDB's flushes and compactions now, and give the last holders of the
        // database a moment to let go, so it is closed when shutdown returns (an open
        // database whose background threads outlive the process's static destructors
        // can crash the process at exit).
        db.cancel_all_background_work(true);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        while Arc::strong_count(&db) > 1 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if Arc::strong_count(&db) > 1 {
            tracing::debug!(holders = Arc::strong_count(&db) - 1, "RocksDB still referenced after shutdown");
        }
    }
}

/// Starts a replica as configured. Returns once it serves; joining a cluster continues in
/// the background (watch `keelson status`).
///
/// With [`ReplicaConfig::tls`] the gRPC port speaks only mutual TLS (our own accept
/// loop, [`keelson_client::tls::spawn_accept`]) and every outgoing call to a peer uses TLS; both present
/// the identity's current certificate at every new handshake, so replacing it (rotation)
/// needs no restart.
pub async fn start(cfg: ReplicaConfig) -> Result<RunningReplica, StartError> {
    let mut server = tonic::transport::Server::builder().tcp_nodelay(true);
    let dialer = match &cfg.tls {
        Some(identity) => {
            let identity = identity.clone();
            PeerDialer::tls(move |endpoint| identity.lazy_channel(endpoint))
        }
        None => PeerDialer::plaintext(),
    };
    let dir_err = |source| StartError::DataDir { path: cfg.data_dir.display().to_string(), source };
    std::fs::create_dir_all(&cfg.data_dir).map_err(dir_err)?;
    let (ident, fresh) = identity::load_or_create(&cfg.data_dir, &cfg.name).map_err(dir_err)?;
    if !fresh && cfg.bootstrap == Bootstrap::Resume {
        tracing::info!(id = ident.id, name = %ident.name, "resuming replica");
    } else if fresh && cfg.bootstrap == Bootstrap::Resume {
        return Err(StartError::Bootstrap(format!(
            "{} holds no replica; start with --cluster-init or --join",
            cfg.data_dir.display()
        )));
    }

    let db = open_db(&cfg.data_dir.join("db")).map_err(|e| StartError::Storage(e.to_string()))?;
    let db_handle = db.clone();
    let log_store = RocksLogStore::new(db.clone()).map_err(|e| StartError::Storage(e.to_string()))?;
    let store = MvccStore::open(RocksBackend::new(db, "state")).map_err(|e| StartError::Storage(e.to_string()))?;
    let (sm, state) =
        KeelsonStateMachine::open(store, &cfg.data_dir.join(SNAPSHOT_DIR)).map_err(|e| StartError::Storage(e.to_string()))?;

    let listener = tokio::net::TcpListener::bind(cfg.listen_addr)
        .await
        .map_err(|source| StartError::Listen { addr: cfg.listen_addr.to_string(), source })?;
    let bound = listener.local_addr().map_err(|source| StartError::Listen { addr: cfg.listen_addr.to_string(), source })?;
    let addr = cfg.advertise_addr.clone().unwrap_or_else(|| bound.to_string());

    let raft_config = Arc::new(
        keelson_raft::default_config(&cfg.cluster_name, cfg.log_retention).validate().map_err(|e| StartError::Raft(e.to_string()))?,
    );
    let disk = keelson_raft::disk_guard::DiskGuard::new(&cfg.data_dir, cfg.disk_reserve);
    let peer_space = keelson_raft::disk_guard::PeerSpaceReports::default();
    let network = GrpcNetworkFactory::new(dialer.clone()).with_space_reports(peer_space.clone());
    let raft = openraft::Raft::new(ident.id, raft_config, network, log_store, sm)
        .await
        .map_err(|e| StartError::Raft(e.to_string()))?;

    let shutdown = CancellationToken::new();
    let (read_index, read_index_rx) = ReadIndexBatcher::new();
    let (forwarder, forward_rx) = crate::forward::ForwardBatcher::new();
    let replica = Replica {
        inner: Arc::new(ReplicaInner {
            id: ident.id,
            name: ident.name.clone(),
            addr: addr.clone(),
            raft: raft.clone(),
            state,
            read_index,
            forwarder,
            peers: PeerChannels::new(dialer),
            stats: ReplicaStats::default(),
            log_format: Default::default(),
            corrupt: Default::default(),
            disk: disk.clone(),
            peer_space,
        }),
    };

    let mut tasks = Vec::new();
    let transport = RaftTransportService::new(raft.clone(), replica.inner.state.snapshot_dir().join("incoming"), disk);
    let grpc = server
        .add_service(
            RaftTransportServer::new(transport).max_decoding_message_size(256 << 20).max_encoding_message_size(256 << 20),
        )
        .add_service(
            StoreServer::new(StoreService {
                replica: replica.clone(),
                slow_watcher_timeout: cfg.slow_watcher_timeout,
                shutdown: shutdown.clone(),
            })
                .max_decoding_message_size(256 << 20)
                .max_encoding_message_size(256 << 20),
        )
        .add_service(ClusterServer::new(ClusterService { replica: replica.clone(), shutdown: shutdown.clone() }));
    match &cfg.tls {
        Some(identity) => {
            let (accept, incoming) = keelson_client::tls::spawn_accept(
                listener,
                identity.server_config(),
                keelson_client::tls::HANDSHAKE_TIMEOUT,
                shutdown.clone(),
            );
            tasks.push(accept);
            tasks.push(spawn_grpc(grpc, incoming, shutdown.clone()));
        }
        None => {
            // Accepted sockets need TCP_NODELAY set here: the builder's setting only applies
            // to listeners tonic binds itself. Without it, small replies wait for delayed
            // ACKs (~40 ms).
            let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
            tasks.push(spawn_grpc(grpc, incoming, shutdown.clone()));
        }
    }
    tasks.push(tokio::spawn(read_index::run(replica.clone(), read_index_rx, shutdown.clone())));
    tasks.push(tokio::spawn(crate::forward::run(replica.clone(), forward_rx, shutdown.clone())));
    tasks.push(tokio::spawn(crate::compactor::run(replica.clone(), cfg.compaction.clone(), shutdown.clone())));
    tasks.push(tokio::spawn(crate::log_format::run(replica.clone(), shutdown.clone())));
    tasks.push(tokio::spawn(crate::stats::count_leader_changes(replica.clone(), shutdown.clone())));
    tasks.push(tokio::spawn(crate::disk_space::run(replica.clone(), shutdown.clone())));
    if let Some(every) = cfg.corruption_check {
        tasks.push(tokio::spawn(crate::corruption::run(replica.clone(), every, shutdown.clone())));
    }
    if let Some(schedule) = cfg.backups.clone() {
        tasks.push(tokio::spawn(crate::backup::run_schedule(replica.clone(), schedule, shutdown.clone())));
    }

    let mut metrics_addr = None;
    if let Some(m) = cfg.metrics_addr {
        let l = tokio::net::TcpListener::bind(m).await.map_err(|source| StartError::Listen { addr: m.to_string(), source })?;
        metrics_addr = l.local_addr().ok();
        tasks.push(tokio::spawn(crate::metrics::serve(replica.clone(), cfg.extra_metrics.clone(), l, shutdown.clone())));
    }

    let initialized = raft.is_initialized().await.map_err(|e| StartError::Raft(e.to_string()))?;
    match (&cfg.bootstrap, initialized) {
        (_, true) => tracing::info!(id = ident.id, %addr, "replica resumed"),
        (Bootstrap::ClusterInit, false) => {
            let node = MemberNode { name: ident.name.clone(), raft_addr: addr.clone() };
            raft.initialize(BTreeMap::from([(ident.id, node)])).await.map_err(|e| StartError::Raft(e.to_string()))?;
            tracing::info!(id = ident.id, %addr, "initialized new cluster");
        }
        (Bootstrap::Join(peer), false) => {
            let call = MemberAddCall { id: ident.id, name: ident.name.clone(), addr: addr.clone() };
            tasks.push(tokio::spawn(join(peer.clone(), cfg.tls.clone(), call, shutdown.clone())));
        }
        (Bootstrap::Resume, false) => {
            // Identity exists but Raft was never initialized: a join that never finished.
            tracing::warn!("replica has an identity but no cluster; waiting to be added by a leader");
        }
    }
    if matches!((&cfg.bootstrap, initialized), (Bootstrap::ClusterInit, false) | (_, true)) {
        crate::backup::seal_restored(&raft, &cfg.data_dir).await.map_err(|e| StartError::Bootstrap(e.to_string()))?;
    }
    Ok(RunningReplica { replica, shutdown, tasks, metrics_addr, db: db_handle })
}

/// Serves the gRPC services on the connections `incoming` yields until `shutdown`.
fn spawn_grpc<IO, IE>(
    grpc: tonic::transport::server::Router,
    incoming: impl futures::Stream<Item = Result<IO, IE>> + Send + 'static,
    shutdown: CancellationToken,
) -> JoinHandle<()>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + tonic::transport::server::Connected + Unpin + Send + 'static,
    IE: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    tokio::spawn(async move {
        if let Err(e) = grpc.serve_with_incoming_shutdown(incoming, shutdown.cancelled_owned()).await {
            tracing::error!(error = %e, "gRPC server failed");
        }
    })
}

/// Asks the cluster at `peer` to add this replica (over TLS when `tls` is set), retrying
/// until it succeeds.
async fn join(peer: String, tls: Option<Arc<PeerIdentity>>, call: MemberAddCall, shutdown: CancellationToken) {
    let client = match tls {
        Some(identity) => StoreClient::with_identity(&[peer.as_str()], identity),
        None => StoreClient::new(&[peer.as_str()]),
    };
    let client = match client {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "cannot join");
            return;
        }
    };
    let mut delay = Duration::from_millis(200);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            r = client.member_add(call.clone()) => match r {
                Ok(_) => {
                    tracing::info!(%peer, "joined the cluster as a voter");
                    return;
                }
                Err(e) => tracing::warn!(%peer, error = %e, "join attempt failed; retrying"),
            }
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(5));
    }
}
