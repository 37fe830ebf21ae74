//! The Raft transport's client side: openraft's `RaftNetworkV2` over tonic gRPC.
//!
//! Peers are dialed plaintext or with TLS, as the [`PeerDialer`] given to the
//! [`GrpcNetworkFactory`] says (TLS through a connector the caller provides).
//!
//! API boundary: this module and [`crate::transport_service`] alone know how Raft
//! messages travel between replicas.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use keelson_proto::v1::raft_transport_client::RaftTransportClient;
use keelson_proto::v1::SnapshotChunk;
use openraft::errors::{NetworkError, RPCError, RaftError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory};
use openraft::network::v2::RaftNetworkV2;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest, TransferLeaderResponse, VoteRequest,
    VoteResponse,
};
use openraft::OptionalSend;
use tokio::io::AsyncReadExt;
use tonic::transport::{Channel, Endpoint};

use crate::disk_guard::{PeerSpaceReports, DISK_LOW_MARK};
use crate::snapshot_file::SnapshotFile;
use crate::types::{KeelsonRaft, MemberNode, NodeId, Vote};
use crate::wire;

type Snapshot = openraft::alias::SnapshotOf<KeelsonRaft, SnapshotFile>;

/// Size of one snapshot chunk on the wire.
pub const SNAPSHOT_CHUNK_BYTES: usize = 1 << 20;

/// Opens a (lazily connected) plaintext gRPC channel to a replica's `host:port`.
pub fn channel(addr: &str) -> Result<Channel, tonic::transport::Error> {
    PeerDialer::plaintext().channel(addr)
}

/// Makes a lazily connected channel to an endpoint through the caller's TLS connector;
/// see [`PeerDialer::tls`].
pub type TlsChannel = Arc<dyn Fn(Endpoint) -> Channel + Send + Sync>;

/// How a replica dials its peers: plaintext, or TLS done by a connector the caller
/// provides.
///
/// The endpoints handed to the connector are `http://host:port` with this module's
/// settings (connect timeout, TCP no-delay, HTTP/2 keep-alive); the connector does the
/// TLS (trusted CA, this replica's client identity, checking the peer's certificate
/// against `host`), so a connector that reads a live identity presents the current
/// certificate on every new connection.
#[derive(Clone, Default)]
pub struct PeerDialer {
    tls: Option<TlsChannel>,
}

impl fmt::Debug for PeerDialer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerDialer").field("tls", &self.tls.is_some()).finish()
    }
}

impl PeerDialer {
    /// Plaintext channels (the default).
    pub fn plaintext() -> Self {
        Self { tls: None }
    }

    /// TLS channels: `connect` turns each configured `http://host:port` endpoint into a
    /// lazily connected channel whose connections it makes with TLS (for example
    /// `keelson_client::PeerIdentity::lazy_channel`).
    pub fn tls(connect: impl Fn(Endpoint) -> Channel + Send + Sync + 'static) -> Self {
        Self { tls: Some(Arc::new(connect)) }
    }

    /// Whether channels use TLS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Opens a lazily connected channel to a replica's `host:port`. Fails only when the
    /// address is unusable; unreachable peers fail per call.
    pub fn channel(&self, addr: &str) -> Result<Channel, tonic::transport::Error> {
        let ep = Endpoint::from_shared(format!("http://{addr}"))?
            .connect_timeout(Duration::from_millis(500))
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(5))
            .keep_alive_timeout(Duration::from_secs(5));
        Ok(match &self.tls {
            Some(connect) => connect(ep),
            None => ep.connect_lazy(),
        })
    }
}

/// Creates one [`GrpcPeer`] per replication target; its channels come from the
/// factory's [`PeerDialer`] (plaintext by default).
#[derive(Clone, Default)]
pub struct GrpcNetworkFactory {
    dialer: PeerDialer,
    space: PeerSpaceReports,
}

impl GrpcNetworkFactory {
    /// A factory whose peers are dialed with `dialer`.
    pub fn new(dialer: PeerDialer) -> Self {
        Self { dialer, space: PeerSpaceReports::default() }
    }

    /// The same factory recording peers' refusals for space in `space`.
    pub fn with_space_reports(mut self, space: PeerSpaceReports) -> Self {
        self.space = space;
        self
    }
}

impl RaftNetworkFactory<KeelsonRaft> for GrpcNetworkFactory {
    type Network = GrpcPeer;

    async fn new_client(&mut self, target: NodeId, node: &MemberNode) -> GrpcPeer {
        GrpcPeer { target, addr: node.raft_addr.clone(), dialer: self.dialer.clone(), client: None, space: self.space.clone() }
    }
}

/// The connection to one peer replica.
pub struct GrpcPeer {
    target: NodeId,
    addr: String,
    dialer: PeerDialer,
    client: Option<RaftTransportClient<Channel>>,
    space: PeerSpaceReports,
}

impl GrpcPeer {
    fn client(&mut self) -> Result<RaftTransportClient<Channel>, RPCError<KeelsonRaft>> {
        if self.client.is_none() {
            let ch = self.dialer.channel(&self.addr).map_err(|e| RPCError::Unreachable(Unreachable::new(&e)))?;
            self.client = Some(
                RaftTransportClient::new(ch)
                    .max_decoding_message_size(256 << 20)
                    .max_encoding_message_size(256 << 20),
            );
        }
        Ok(self.client.clone().expect("client set above"))
    }
}

fn status_to_rpc(target: NodeId, s: tonic::Status) -> RPCError<KeelsonRaft> {
    match s.code() {
        tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Cancelled => {
            RPCError::Unreachable(Unreachable::from_string(format!("replica {target:x}: {}", s.message())))
        }
        _ => RPCError::Network(NetworkError::from_string(format!("replica {target:x}: {s}"))),
    }
}

/// Whether a peer refused for want of disk space.
fn is_space_refusal(s: &tonic::Status) -> bool {
    s.code() == tonic::Code::ResourceExhausted && s.message().contains(DISK_LOW_MARK)
}

/// The gRPC request carrying `rpc`, with the RPC's deadline.
fn request<T: serde::Serialize>(what: &'static str, rpc: &T, option: &RPCOption) -> Result<tonic::Request<keelson_proto::v1::Envelope>, RPCError<KeelsonRaft>> {
    let env = wire::encode(what, rpc).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
    let mut req = tonic::Request::new(env);
    req.set_timeout(option.hard_ttl());
    Ok(req)
}

/// A peer's reply: its result, its error (a `RaftError`, or `Fatal` for a transfer)
/// counted as a network error.
fn decode_reply<T: serde::de::DeserializeOwned, E: serde::de::DeserializeOwned + fmt::Display>(
    what: &'static str,
    env: &keelson_proto::v1::Envelope,
) -> Result<T, RPCError<KeelsonRaft>> {
    let res: Result<T, E> = wire::decode(what, env).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
    res.map_err(|e| RPCError::Network(NetworkError::from_string(e.to_string())))
}

/// The answer of a peer without the `PreVote` RPC (a server older than it, during a
/// rolling upgrade): a grant, as openraft's default `pre_vote` gives, so such a peer
/// leaves elections as they were before Pre-Vote. Unreachable peers are errors, never
/// grants, so an isolated node cannot gather a Pre-Vote quorum.
fn pre_vote_granted_by_default(rpc: VoteRequest<KeelsonRaft>) -> VoteResponse<KeelsonRaft> {
    VoteResponse::new(rpc.vote, None, true)
}

impl RaftNetworkV2<KeelsonRaft> for GrpcPeer {
    type SnapshotData = SnapshotFile;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<KeelsonRaft>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<KeelsonRaft>, RPCError<KeelsonRaft>> {
        let req = request("append-entries", &rpc, &option)?;
        let resp = match self.client()?.append_entries(req).await {
            Ok(resp) => {
                // Heartbeats are taken even by a peer low on space: only entries clear it.
                if !rpc.entries.is_empty() {
                    self.space.accepted(self.target);
                }
                resp
            }
            Err(s) => {
                if is_space_refusal(&s) {
                    self.space.refused(self.target);
                }
                return Err(status_to_rpc(self.target, s));
            }
        };
        decode_reply::<_, RaftError<KeelsonRaft>>("append-entries reply", resp.get_ref())
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<KeelsonRaft>,
        option: RPCOption,
    ) -> Result<VoteResponse<KeelsonRaft>, RPCError<KeelsonRaft>> {
        let req = request("vote", &rpc, &option)?;
        let resp = self.client()?.vote(req).await.map_err(|s| status_to_rpc(self.target, s))?;
        decode_reply::<_, RaftError<KeelsonRaft>>("vote reply", resp.get_ref())
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<KeelsonRaft>,
        option: RPCOption,
    ) -> Result<VoteResponse<KeelsonRaft>, RPCError<KeelsonRaft>> {
        let req = request("pre-vote", &rpc, &option)?;
        match self.client()?.pre_vote(req).await {
            Ok(resp) => decode_reply::<_, RaftError<KeelsonRaft>>("pre-vote reply", resp.get_ref()),
            Err(s) if s.code() == tonic::Code::Unimplemented => {
                tracing::debug!(peer = self.target, "peer has no PreVote RPC (older server); counted as granting");
                Ok(pre_vote_granted_by_default(rpc))
            }
            Err(s) => Err(status_to_rpc(self.target, s)),
        }
    }

    async fn transfer_leader(
        &mut self,
        req: TransferLeaderRequest<KeelsonRaft>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<KeelsonRaft>, RPCError<KeelsonRaft>> {
        let call = request("transfer-leader", &req, &option)?;
        let resp = self.client()?.transfer_leader(call).await.map_err(|s| status_to_rpc(self.target, s))?;
        decode_reply::<_, openraft::errors::Fatal<KeelsonRaft>>("transfer-leader reply", resp.get_ref())
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<KeelsonRaft>, StreamingError<KeelsonRaft>> {
        let header = postcard::to_stdvec(&(vote, &snapshot.meta))
            .map_err(|e| StreamingError::Network(NetworkError::new(&e)))?;
        let file = tokio::fs::File::open(&snapshot.snapshot.path)
            .await
            .map_err(|e| StreamingError::Network(NetworkError::new(&e)))?;
        let (tx, rx) = tokio::sync::mpsc::channel::<SnapshotChunk>(4);
        let reader = tokio::spawn(stream_file(file, header, tx));
        let mut client = self.client().map_err(StreamingError::from)?;
        let target = self.target;
        let send = async move {
            let resp = client
                .install_snapshot(tokio_stream::wrappers::ReceiverStream::new(rx))
                .await
                .map_err(|s| StreamingError::from(status_to_rpc(target, s)))?;
            let res: Result<SnapshotResponse<KeelsonRaft>, RaftError<KeelsonRaft>> =
                wire::decode("snapshot reply", resp.get_ref())
                    .map_err(|e| StreamingError::Network(NetworkError::new(&e)))?;
            res.map_err(|e| StreamingError::Network(NetworkError::from_string(e.to_string())))
        };
        tokio::pin!(cancel);
        let out = tokio::select! {
            closed = &mut cancel => Err(StreamingError::Closed(closed)),
            res = send => res,
        };
        reader.abort();
        out
    }
}

async fn stream_file(
    mut file: tokio::fs::File,
    header: Vec<u8>,
    tx: tokio::sync::mpsc::Sender<SnapshotChunk>,
) -> std::io::Result<()> {
    let mut header = Some(header);
    loop {
        let mut buf = vec![0u8; SNAPSHOT_CHUNK_BYTES];
        let mut filled = 0;
        while filled < buf.len() {
            let n = file.read(&mut buf[filled..]).await?;
            if n == 0 {
                break;
            }
            filled += n;
        }
        buf.truncate(filled);
        let last = filled < SNAPSHOT_CHUNK_BYTES;
        let chunk = SnapshotChunk { header: header.take().unwrap_or_default(), data: buf };
        if tx.send(chunk).await.is_err() || last {
            return Ok(());
        }
    }
}
