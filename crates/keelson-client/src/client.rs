//! [`StoreClient`]: talks to one replica at a time and moves to the next one when a
//! replica cannot be reached.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use keelson_mvcc::{
    Compare, CompareOp, CompareTarget, DeleteRangeRequest, KeyRange, Op, PutRequest, RangeRequest, Revision,
    TxnRequest,
};
use keelson_proto::v1::cluster_client::ClusterClient;
use keelson_proto::v1::store_client::StoreClient as GrpcStoreClient;
use keelson_proto::v1::Envelope;
use serde::{de::DeserializeOwned, Serialize};
use tonic::transport::{Channel, Endpoint};

use crate::api::*;
use crate::call_mux::{CallMux, LeaderHint, NOT_SENT};
use crate::tls::{PeerIdentity, PeerTls, TlsError};

/// A client-side failure.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The store answered with an error.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The replica could not be reached or the call broke off. For a write the outcome is
    /// unknown: it may or may not have been applied.
    #[error("transport error talking to {endpoint}: {status}")]
    Transport { endpoint: String, status: tonic::Status },
    /// A reply could not be decoded.
    #[error("malformed reply: {0}")]
    Decode(String),
    /// The client was given no endpoints, or one it cannot parse.
    #[error("bad endpoint {0}")]
    BadEndpoint(String),
    /// The TLS material given to [`StoreClient::with_tls`] is unusable.
    #[error("TLS: {0}")]
    Tls(#[from] TlsError),
}

/// True when a call failed before anything was sent: the channel could not connect, so
/// the server never saw the request. (tonic reports that as `Unavailable` with a connect
/// error message; a batched call that was never written says [`NOT_SENT`].)
pub fn never_sent(status: &tonic::Status) -> bool {
    status.code() == tonic::Code::Unavailable
        && (status.message().contains("connect") || status.message().starts_with(NOT_SENT))
}

impl ClientError {
    /// True when another replica may succeed where this one failed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ClientError::Transport { .. }
                | ClientError::Store(StoreError::Unavailable(_))
                | ClientError::Store(StoreError::NoLeader(_))
        )
    }
}

/// A store client over a fixed list of replica endpoints (`host:port`), plaintext or
/// mutual TLS (see [`crate::tls`]).
///
/// Clones share one connection per endpoint, and range and transaction calls to an
/// endpoint share one `Store.Batch` stream on it (see the `call_mux` module), so many
/// concurrent callers cost about as much as a few.
///
/// Reads go to the current endpoint. Transactions go to the leader when one of the
/// endpoints is known to be it (replies name the leader), saving the hop a follower would
/// make to forward them; otherwise to the current endpoint, which forwards them.
#[derive(Clone)]
pub struct StoreClient {
    endpoints: Arc<Vec<ReplicaEndpoint>>,
    current: Arc<AtomicUsize>,
    leader: Arc<LeaderHint>,
}

struct ReplicaEndpoint {
    addr: String,
    channel: Channel,
    calls: CallMux,
}

impl StoreClient {
    /// Creates a plaintext client (`http://`); connections are made lazily.
    /// `endpoints[0]` is tried first.
    pub fn new<S: AsRef<str>>(endpoints: &[S]) -> Result<Self, ClientError> {
        Self::with_transport(endpoints, None)
    }

    /// Creates a client that speaks mutual TLS to every replica: it trusts only
    /// `tls.ca_pem`, checks each replica's certificate against the host part of its
    /// endpoint (DNS name or IP SAN) and presents `tls.cert_pem` as its identity.
    /// Connections are made lazily; `endpoints[0]` is tried first. Fails with
    /// [`ClientError::Tls`] when the PEM material is unusable.
    pub fn with_tls<S: AsRef<str>>(endpoints: &[S], tls: &PeerTls) -> Result<Self, ClientError> {
        Self::with_identity(endpoints, tls.identity()?)
    }

    /// [`StoreClient::with_tls`] with a live identity: every new connection presents the
    /// identity's certificate of that moment (so a replaced certificate is used from then
    /// on).
    pub fn with_identity<S: AsRef<str>>(endpoints: &[S], identity: Arc<PeerIdentity>) -> Result<Self, ClientError> {
        Self::build(endpoints, Some(identity))
    }

    /// [`StoreClient::with_tls`] when `tls` is set, else [`StoreClient::new`].
    pub fn with_transport<S: AsRef<str>>(endpoints: &[S], tls: Option<&PeerTls>) -> Result<Self, ClientError> {
        match tls {
            Some(t) => Self::with_tls(endpoints, t),
            None => Self::build(endpoints, None),
        }
    }

    fn build<S: AsRef<str>>(endpoints: &[S], tls: Option<Arc<PeerIdentity>>) -> Result<Self, ClientError> {
        if endpoints.is_empty() {
            return Err(ClientError::BadEndpoint("(none given)".into()));
        }
        let names: Vec<String> = endpoints
            .iter()
            .map(|e| {
                let e = e.as_ref();
                e.strip_prefix("https://").or_else(|| e.strip_prefix("http://")).unwrap_or(e).to_string()
            })
            .collect();
        let leader = Arc::new(LeaderHint::new(names.clone()));
        let mut chans = Vec::new();
        for e in names {
            // TLS, when wanted, is done by the identity's connector, under an http:// URI.
            let ep = Endpoint::from_shared(format!("http://{e}"))
                .map_err(|_| ClientError::BadEndpoint(e.clone()))?
                .connect_timeout(Duration::from_millis(500))
                .tcp_nodelay(true);
            let ch = match &tls {
                Some(identity) => identity.lazy_channel(ep),
                None => ep.connect_lazy(),
            };
            chans.push(ReplicaEndpoint { calls: CallMux::new(e.clone(), ch.clone(), leader.clone()), addr: e, channel: ch });
        }
        Ok(Self { endpoints: Arc::new(chans), current: Arc::new(AtomicUsize::new(0)), leader })
    }

    /// A client that starts on endpoint `index` (so many clients spread over replicas).
    pub fn starting_at(&self, index: usize) -> Self {
        Self {
            endpoints: self.endpoints.clone(),
            current: Arc::new(AtomicUsize::new(index % self.endpoints.len())),
            leader: self.leader.clone(),
        }
    }

    /// The endpoint calls currently go to.
    pub fn endpoint(&self) -> &str {
        &self.pick().addr
    }

    fn pick(&self) -> &ReplicaEndpoint {
        &self.endpoints[self.current.load(Ordering::Relaxed) % self.endpoints.len()]
    }

    /// Moves to the next replica, and forgets the leader until a reply names it again
    /// (so a caller that gives up on a replica does not keep writing to it as the leader).
    pub fn rotate(&self) {
        self.current.fetch_add(1, Ordering::Relaxed);
        self.leader.clear();
    }

    async fn call<Req: Serialize, Rep: DeserializeOwned>(
        &self,
        req: &Req,
        invoke: impl AsyncFnOnce(Channel, Envelope) -> Result<tonic::Response<Envelope>, tonic::Status>,
    ) -> Result<Rep, ClientError> {
        let ep = self.pick();
        let env = Envelope { payload: postcard::to_stdvec(req).map_err(|e| ClientError::Decode(e.to_string()))? };
        let resp = invoke(ep.channel.clone(), env)
            .await
            .map_err(|status| ClientError::Transport { endpoint: ep.addr.clone(), status })?;
        let reply: Result<Rep, StoreError> =
            postcard::from_bytes(&resp.get_ref().payload).map_err(|e| ClientError::Decode(e.to_string()))?;
        Ok(reply?)
    }

    /// Reads a range. Retries on other replicas when one is unreachable (reads are
    /// idempotent), up to one pass over the endpoints.
    pub async fn range(&self, request: RangeRequest, consistency: ReadConsistency) -> Result<RangeReply, ClientError> {
        let call = StoreCall::Range(RangeCall { request, consistency });
        let mut last = None;
        for _ in 0..self.endpoints.len() {
            let reply = self.batched(call.clone()).await.and_then(|r| match r {
                StoreCallReply::Range(r) => Ok(r?),
                StoreCallReply::Txn(_) => Err(ClientError::Decode("a transaction reply to a range call".into())),
            });
            match reply {
                Err(e) if e.is_retryable() => {
                    last = Some(e);
                    self.rotate();
                }
                other => return other,
            }
        }
        Err(last.expect("at least one endpoint"))
    }

    /// Runs a transaction once (no retry: after a transport error the outcome is unknown).
    pub async fn txn(&self, request: TxnRequest) -> Result<TxnReply, ClientError> {
        let to_leader = self.leader.get().map(|i| &self.endpoints[i]);
        let reply = match to_leader {
            Some(ep) => ep.calls.call(StoreCall::Txn(request)).await.map_err(|status| {
                self.leader.clear();
                ClientError::Transport { endpoint: ep.addr.clone(), status }
            }),
            None => self.batched(StoreCall::Txn(request)).await,
        };
        match reply? {
            StoreCallReply::Txn(r) => Ok(r?),
            StoreCallReply::Range(_) => Err(ClientError::Decode("a range reply to a transaction".into())),
        }
    }

    /// One call on the current endpoint's batch stream.
    async fn batched(&self, call: StoreCall) -> Result<StoreCallReply, ClientError> {
        let ep = self.pick();
        ep.calls.call(call).await.map_err(|status| ClientError::Transport { endpoint: ep.addr.clone(), status })
    }

    pub async fn compact(&self, revision: Revision) -> Result<ResponseHeader, ClientError> {
        self.call(&CompactCall { revision }, async |ch, env| grpc(ch).compact(env).await).await
    }

    pub async fn get(&self, key: &[u8]) -> Result<RangeReply, ClientError> {
        self.range(RangeRequest { range: KeyRange::single(key), ..Default::default() }, ReadConsistency::Linearizable)
            .await
    }

    pub async fn put(&self, key: &[u8], value: &[u8]) -> Result<TxnReply, ClientError> {
        self.txn(TxnRequest {
            success: vec![Op::Put(PutRequest { key: key.to_vec(), value: value.to_vec(), prev_kv: false })],
            ..Default::default()
        })
        .await
    }

    pub async fn delete(&self, range: KeyRange) -> Result<TxnReply, ClientError> {
        self.txn(TxnRequest { success: vec![Op::DeleteRange(DeleteRangeRequest { range, prev_kv: false })], ..Default::default() })
            .await
    }

    /// Puts `value` only if `key` was last modified at `mod_revision` (0 = key absent).
    pub async fn put_if_mod_revision(&self, key: &[u8], value: &[u8], mod_revision: Revision) -> Result<TxnReply, ClientError> {
        self.txn(TxnRequest {
            compare: vec![Compare { key: key.to_vec(), op: CompareOp::Equal, target: CompareTarget::ModRevision(mod_revision) }],
            success: vec![Op::Put(PutRequest { key: key.to_vec(), value: value.to_vec(), prev_kv: false })],
            failure: vec![],
        })
        .await
    }

    /// Opens a watch stream on the current replica. The stream ends when the replica
    /// goes away; resume on another replica from the last seen revision + 1.
    pub async fn watch(
        &self,
        create: WatchCreate,
    ) -> Result<(tokio::sync::mpsc::Sender<WatchRequest>, impl Stream<Item = Result<WatchResponse, ClientError>>), ClientError> {
        let ep = self.pick();
        let (endpoint, ch) = (ep.addr.clone(), ep.channel.clone());
        let (tx, rx) = tokio::sync::mpsc::channel::<WatchRequest>(16);
        tx.send(WatchRequest::Create(create)).await.map_err(|_| ClientError::Decode("watch closed".into()))?;
        let outbound = tokio_stream::wrappers::ReceiverStream::new(rx)
            .map(|r| Envelope { payload: postcard::to_stdvec(&r).unwrap_or_default() });
        let resp = grpc(ch)
            .watch(outbound)
            .await
            .map_err(|status| ClientError::Transport { endpoint: endpoint.clone(), status })?;
        let stream = resp.into_inner().map(move |item| match item {
            Ok(env) => postcard::from_bytes::<WatchResponse>(&env.payload).map_err(|e| ClientError::Decode(e.to_string())),
            Err(status) => Err(ClientError::Transport { endpoint: endpoint.clone(), status }),
        });
        Ok((tx, stream))
    }

    pub async fn status(&self) -> Result<MemberStatus, ClientError> {
        self.call(&(), async |ch, env| cluster(ch).status(env).await).await
    }

    pub async fn member_list(&self) -> Result<MemberListReply, ClientError> {
        self.call(&(), async |ch, env| cluster(ch).member_list(env).await).await
    }

    pub async fn member_add(&self, call: MemberAddCall) -> Result<MemberListReply, ClientError> {
        self.call(&call, async |ch, env| cluster(ch).member_add(env).await).await
    }

    pub async fn member_remove(&self, id: u64) -> Result<MemberListReply, ClientError> {
        self.call(&MemberRemoveCall { id }, async |ch, env| cluster(ch).member_remove(env).await).await
    }

    /// A backup of the store from the current replica: the chunks of a snapshot file
    /// covering every write acknowledged before the call, then one chunk with no data
    /// whose `header` is the SHA-256 of all the data (see `keelson.v1.Cluster.Backup`).
    pub async fn backup(&self) -> Result<impl Stream<Item = Result<keelson_proto::v1::SnapshotChunk, ClientError>>, ClientError> {
        let ep = self.pick();
        let endpoint = ep.addr.clone();
        let env = Envelope { payload: postcard::to_stdvec(&()).map_err(|e| ClientError::Decode(e.to_string()))? };
        let resp = cluster(ep.channel.clone())
            .backup(env)
            .await
            .map_err(|status| ClientError::Transport { endpoint: endpoint.clone(), status })?;
        Ok(resp.into_inner().map(move |item| item.map_err(|status| ClientError::Transport { endpoint: endpoint.clone(), status })))
    }
}

fn grpc(ch: Channel) -> GrpcStoreClient<Channel> {
    GrpcStoreClient::new(ch).max_decoding_message_size(256 << 20).max_encoding_message_size(256 << 20)
}

fn cluster(ch: Channel) -> ClusterClient<Channel> {
    ClusterClient::new(ch)
}
