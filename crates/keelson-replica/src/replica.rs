//! [`Replica`]: the store operations every replica serves, whatever its Raft role.
//!
//! # Guarantees
//! - Writes go through the Raft leader. A follower forwards them; the caller never needs
//!   to know who leads. A write is acknowledged only once committed and applied.
//! - Linearizable reads on any replica: the replica obtains a read index confirmed by the
//!   leader (ReadIndex, batched so one round trip serves every read waiting for it), waits
//!   until it has applied that far, then reads its own state.
//! - When the outcome of a write is unknown (the leader changed or the forward broke off
//!   after the entry may have been appended) the error says so instead of retrying.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use keelson_client::api::*;
use keelson_mvcc::{Command, CommandResponse, MvccError, RangeRequest, RejectReason, Revision, TxnRequest};
use keelson_proto::v1::cluster_client::ClusterClient;
use keelson_proto::v1::store_client::StoreClient as GrpcStore;
use keelson_raft::network::PeerDialer;
use keelson_raft::{KeelsonRaftNode, LogCommand, MemberNode, NodeId, StateHandle};
use keelson_rocks::RocksBackend;
use openraft::async_runtime::WatchReceiver;
use openraft::{ChangeMembers, ServerState};
use tokio::time::Instant;
use tonic::transport::Channel;

use crate::forward::{status_to_forward, Forward, ForwardBatcher};
use crate::read_index::ReadIndexBatcher;
use crate::stats::ReplicaStats;

/// How long a request waits for a leader (elections take about a second).
pub const LEADER_WAIT: Duration = Duration::from_secs(5);

/// The largest transaction a replica takes (as etcd's `--max-request-bytes` default,
/// 1.5 MiB): a larger one is refused before it reaches the log, so no entry, snapshot
/// chunk or watch event is ever bigger than about this.
pub const MAX_TXN_BYTES: usize = 3 << 19;

/// Refuses a transaction larger than [`MAX_TXN_BYTES`].
pub fn check_txn_size(request: &TxnRequest) -> Result<(), StoreError> {
    let size = request.wire_size();
    if size > MAX_TXN_BYTES {
        return Err(StoreError::RequestTooLarge { size: size as u64, limit: MAX_TXN_BYTES as u64 });
    }
    Ok(())
}

/// gRPC metadata key marking a request another replica forwarded (never forwarded twice).
pub const FORWARDED_HEADER: &str = "x-keelson-forwarded";

/// A running replica's store operations. Cheap to clone.
#[derive(Clone)]
pub struct Replica {
    pub(crate) inner: Arc<ReplicaInner>,
}

pub(crate) struct ReplicaInner {
    pub id: NodeId,
    pub name: String,
    pub addr: String,
    pub raft: KeelsonRaftNode<RocksBackend>,
    pub state: StateHandle<RocksBackend>,
    pub read_index: ReadIndexBatcher,
    pub forwarder: ForwardBatcher,
    pub peers: PeerChannels,
    pub stats: ReplicaStats,
    /// The newest log entry format every member decodes (see [`crate::log_format`]).
    pub log_format: crate::log_format::LogFormatGate,
    /// What the last corruption check this replica led found (see [`crate::corruption`]).
    pub corrupt: std::sync::Mutex<Vec<NodeId>>,
    /// The data directory's free-space reserve (see [`crate::disk_space`]).
    pub disk: keelson_raft::disk_guard::DiskGuard,
    /// Peers that refused this replica's appends for space.
    pub peer_space: keelson_raft::disk_guard::PeerSpaceReports,
}

/// Cached gRPC channels to other replicas, by address, dialed as the replica's
/// [`PeerDialer`] says (plaintext or mutual TLS).
pub(crate) struct PeerChannels {
    dialer: PeerDialer,
    chans: std::sync::Mutex<std::collections::HashMap<String, Channel>>,
}

impl PeerChannels {
    pub fn new(dialer: PeerDialer) -> Self {
        Self { dialer, chans: Default::default() }
    }

    pub fn get(&self, addr: &str) -> Result<Channel, StoreError> {
        let mut chans = self.chans.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(ch) = chans.get(addr) {
            return Ok(ch.clone());
        }
        let ch = self.dialer.channel(addr).map_err(|e| StoreError::Unavailable(format!("{addr}: {e}")))?;
        chans.insert(addr.to_string(), ch.clone());
        Ok(ch)
    }
}

impl Replica {
    pub fn id(&self) -> NodeId {
        self.inner.id
    }

    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The `host:port` this replica's services are reachable at.
    pub fn addr(&self) -> &str {
        &self.inner.addr
    }

    pub fn raft(&self) -> &KeelsonRaftNode<RocksBackend> {
        &self.inner.raft
    }

    pub fn state(&self) -> &StateHandle<RocksBackend> {
        &self.inner.state
    }

    /// The size of the current snapshot file, in bytes (0 when there is none, or it
    /// cannot be read just now).
    pub fn snapshot_bytes(&self) -> u64 {
        self.inner.state.snapshot_bytes().unwrap_or(0)
    }

    /// The members this replica's last corruption check as leader found divergent.
    pub fn corrupt_members(&self) -> Vec<NodeId> {
        self.inner.corrupt.lock().expect("corrupt members lock").clone()
    }

    pub(crate) fn set_corrupt_members(&self, members: Vec<NodeId>) {
        self.inner.stats.corrupt_members.set(members.len() as i64);
        *self.inner.corrupt.lock().expect("corrupt members lock") = members;
    }

    /// The digest of this replica's history at `revision` (once applied that far; see
    /// [`keelson_mvcc::KvHash`]).
    pub async fn hash_kv(&self, revision: Revision) -> Result<keelson_mvcc::KvHash, StoreError> {
        tokio::time::timeout(LEADER_WAIT, self.inner.state.wait_revision(revision))
            .await
            .map_err(|_| StoreError::Unavailable(format!("replica did not apply revision {revision} in time")))?
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        let state = self.inner.state.clone();
        tokio::task::spawn_blocking(move || state.store.hash_kv(revision))
            .await
            .map_err(|e| StoreError::Unavailable(e.to_string()))?
            .map_err(mvcc_error)
    }

    /// Request and watch counters (also exported as metrics).
    pub fn stats(&self) -> &ReplicaStats {
        &self.inner.stats
    }

    pub fn header(&self, revision: Revision) -> ResponseHeader {
        ResponseHeader { member_id: self.inner.id, revision, raft_term: self.inner.raft.metrics().borrow_watched().current_term }
    }

    /// The leader as this replica knows it: id and address.
    pub fn leader(&self) -> Option<(NodeId, String)> {
        let m = self.inner.raft.metrics();
        let m = m.borrow_watched();
        let id = m.current_leader?;
        let node = m.membership_config.membership().get_node(&id)?;
        Some((id, node.raft_addr.clone()))
    }

    pub(crate) fn is_leader(&self) -> bool {
        self.inner.raft.metrics().borrow_watched().state == ServerState::Leader
    }

    /// Waits (up to `deadline`) for a leader other than this replica to be known.
    async fn remote_leader(&self, deadline: Instant) -> Result<Option<(NodeId, String)>, StoreError> {
        loop {
            if self.is_leader() {
                return Ok(None);
            }
            if let Some((id, addr)) = self.leader() {
                if id != self.inner.id {
                    return Ok(Some((id, addr)));
                }
            }
            if Instant::now() >= deadline {
                return Err(StoreError::NoLeader("no leader elected in time".into()));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    // ---- reads ----

    /// Makes the next local read linearizable: waits until this replica has applied
    /// everything committed before the call.
    pub async fn linearize(&self) -> Result<(), StoreError> {
        let index = self.inner.read_index.read_index().await?;
        tokio::time::timeout(LEADER_WAIT, self.inner.state.wait_applied(index))
            .await
            .map_err(|_| StoreError::Unavailable(format!("replica did not apply up to read index {index} in time")))?
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        Ok(())
    }

    /// Confirms leadership and returns the index a linearizable read must wait for.
    /// Leader only; on a follower it returns [`StoreError::NotLeader`].
    pub async fn leader_read_index(&self) -> Result<u64, StoreError> {
        match self.inner.raft.get_read_linearizer(openraft::ReadPolicy::ReadIndex).await {
            Ok(lin) => Ok(lin.read_log_id().index()),
            Err(e) => match e.forward_to_leader() {
                Some(f) => Err(StoreError::NotLeader { leader: f.leader_id }),
                None => Err(StoreError::NoLeader(e.to_string())),
            },
        }
    }

    /// Returns once this replica knows a leader other than `leader` (or none).
    async fn leader_replaced(&self, leader: NodeId) {
        let mut metrics = self.inner.raft.metrics();
        loop {
            if metrics.borrow_watched().current_leader != Some(leader) {
                return;
            }
            if metrics.changed().await.is_err() {
                return;
            }
        }
    }

    /// Fetches a read index from wherever the leader is (used by the batcher); a remote
    /// leader is asked inside `trace`, when the round carries one.
    pub(crate) async fn fetch_read_index(&self, trace: Option<keelson_tracecontext::TraceParent>) -> Result<u64, StoreError> {
        let deadline = Instant::now() + LEADER_WAIT;
        loop {
            let attempt = match self.remote_leader(deadline).await? {
                None => self.leader_read_index().await,
                Some((leader, addr)) => {
                    let ch = self.inner.peers.get(&addr)?;
                    let env = wire_encode(&())?;
                    // Bounded, so that a leader that stopped answering cannot hold one of
                    // the batcher's rounds for ever; and abandoned as soon as another
                    // leader is known, so that reads move on with the election instead of
                    // waiting out the deadline on a paused or cut-off old leader.
                    let mut store = GrpcStore::new(ch);
                    let mut request = tonic::Request::new(env);
                    if let Some(value) = trace.and_then(|t| t.to_string().parse::<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>().ok()) {
                        request.metadata_mut().insert(keelson_tracecontext::HEADER, value);
                    }
                    tokio::select! {
                        r = tokio::time::timeout_at(deadline, store.read_index(request)) => match r {
                            Ok(Ok(resp)) => wire_decode::<Result<ReadIndexReply, StoreError>>(resp.get_ref())?.map(|r| r.index),
                            Ok(Err(s)) => Err(StoreError::Unavailable(format!("leader {addr}: {}", s.message()))),
                            Err(_) => Err(StoreError::Unavailable(format!("leader {addr} did not answer a read index request in time"))),
                        },
                        _ = self.leader_replaced(leader) => Err(StoreError::Unavailable(format!("leader {addr} was replaced while a read index request was out"))),
                    }
                }
            };
            match attempt {
                Ok(i) => return Ok(i),
                Err(e) if Instant::now() < deadline => {
                    tracing::debug!(error = %e, "read index attempt failed; retrying");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads a range with the requested consistency. An invalid request (negative
    /// revision, `range_end` not after `key`) is refused before anything waits.
    pub async fn range(&self, call: RangeCall) -> Result<RangeReply, StoreError> {
        validate_range(&call.request)?;
        if call.consistency == ReadConsistency::Linearizable {
            self.linearize().await?;
        }
        self.inner.stats.reads.inc();
        let (response, revision) = self.inner.state.store.range(&call.request).map_err(mvcc_error)?;
        Ok(RangeReply { header: self.header(revision), response })
    }

    /// A linearizable read of the current revision.
    pub async fn current_revision(&self) -> Result<Revision, StoreError> {
        self.linearize().await?;
        Ok(self.inner.state.store.current_revision())
    }

    // ---- writes ----

    /// Runs a transaction through the leader.
    pub async fn txn(&self, request: TxnRequest, forwarded: bool) -> Result<TxnReply, StoreError> {
        check_txn_size(&request)?;
        let (revision, resp) = self.propose(Command::Txn(request), forwarded).await?;
        match resp {
            CommandResponse::Txn(response) => Ok(TxnReply { header: self.header(revision), response }),
            CommandResponse::Rejected(r) => Err(reject_error(r)),
            CommandResponse::Compacted { .. } => Err(StoreError::Unavailable("unexpected compaction reply".into())),
        }
    }

    /// Runs transactions forwarded together by a follower: on the leader they are
    /// submitted to Raft as one batch, each in the trace `traces` names for it (if any);
    /// each gets its own reply, in order. Elsewhere each is refused with `NotLeader`
    /// (nothing appended). One larger than [`MAX_TXN_BYTES`] is refused alone.
    pub async fn txn_batch(&self, requests: Vec<TxnRequest>, traces: Vec<Option<keelson_tracecontext::TraceParent>>) -> Vec<Result<TxnReply, StoreError>> {
        let refused: Vec<Option<StoreError>> = requests.iter().map(|t| check_txn_size(t).err()).collect();
        if refused.iter().all(Option::is_none) {
            return self.txn_batch_checked(requests, traces).await;
        }
        let mut traces = traces.into_iter();
        let (mut kept, mut kept_traces) = (Vec::new(), Vec::new());
        for (request, refusal) in requests.into_iter().zip(&refused) {
            let trace = traces.next().flatten();
            if refusal.is_none() {
                kept.push(request);
                kept_traces.push(trace);
            }
        }
        let mut replies = self.txn_batch_checked(kept, kept_traces).await.into_iter();
        refused
            .into_iter()
            .map(|refusal| match refusal {
                Some(e) => Err(e),
                None => replies.next().unwrap_or_else(|| Err(StoreError::Unavailable("no reply from raft; outcome unknown".into()))),
            })
            .collect()
    }

    async fn txn_batch_checked(&self, requests: Vec<TxnRequest>, traces: Vec<Option<keelson_tracecontext::TraceParent>>) -> Vec<Result<TxnReply, StoreError>> {
        use futures::StreamExt;
        use openraft::errors::ClientWriteError as W;
        let n = requests.len();
        let not_leader = |leader| (0..n).map(|_| Err(StoreError::NotLeader { leader })).collect();
        if !self.is_leader() {
            return not_leader(self.leader().map(|l| l.0));
        }
        if let Some(e) = self.space_refusal() {
            return (0..n).map(|_| Err(e.clone())).collect();
        }
        // An item forwarded inside a recorded trace is written in it (the follower's
        // proposal span is its parent); the others as any proposal here.
        let mut traces = traces.into_iter();
        let format = self.inner.log_format.cluster();
        let cmds = requests.into_iter().map(|t| match traces.next().flatten() {
            Some(p) => LogCommand::in_trace(Command::Txn(t), Some(p), format),
            None => LogCommand::proposed(Command::Txn(t), format),
        });
        let appended = std::time::Instant::now();
        let mut stream = match self.inner.raft.client_write_many(cmds).await {
            Ok(s) => s,
            Err(e) => return (0..n).map(|_| Err(StoreError::Unavailable(e.to_string()))).collect(),
        };
        let mut out = Vec::with_capacity(n);
        let no_space = self.out_of_space_outcome_unknown();
        tokio::pin!(no_space);
        loop {
            let item = tokio::select! {
                item = stream.next() => match item {
                    Some(item) => item,
                    None => break,
                },
                e = &mut no_space => {
                    while out.len() < n {
                        out.push(Err(e.clone()));
                    }
                    break;
                }
            };
            let ok = matches!(&item, Ok(Ok(_)));
            let not_leader = matches!(&item, Ok(Err(W::ForwardToLeader(_))));
            self.count_proposal(ok, not_leader, appended);
            out.push(match item {
                Err(fatal) => Err(StoreError::Unavailable(fatal.to_string())),
                Ok(Err(W::ForwardToLeader(f))) => Err(StoreError::NotLeader { leader: f.leader_id }),
                Ok(Err(W::LogEntryDiscarded(_))) => {
                    Err(StoreError::Unavailable("leader changed while the write was in flight; outcome unknown".into()))
                }
                Ok(Err(other)) => Err(StoreError::Unavailable(other.to_string())),
                Ok(Ok(resp)) => {
                    self.inner.stats.writes.inc();
                    match resp.response.response {
                        Some(CommandResponse::Txn(response)) => {
                            Ok(TxnReply { header: self.header(resp.response.revision), response })
                        }
                        Some(CommandResponse::Rejected(r)) => Err(reject_error(r)),
                        _ => Err(StoreError::Unavailable("unexpected reply to a transaction".into())),
                    }
                }
            });
        }
        // A stream cut short leaves the rest unknown.
        while out.len() < n {
            out.push(Err(StoreError::Unavailable("no reply from raft; outcome unknown".into())));
        }
        out
    }

    /// Compacts history up to `revision` on every replica.
    pub async fn compact(&self, revision: Revision, forwarded: bool) -> Result<ResponseHeader, StoreError> {
        let (rev, resp) = self.propose(Command::Compact { revision }, forwarded).await?;
        match resp {
            CommandResponse::Compacted { .. } | CommandResponse::Txn(_) => Ok(self.header(rev)),
            CommandResponse::Rejected(r) => Err(reject_error(r)),
        }
    }

    /// Counts one append in the proposal metrics: committed (`ok`) or failed, unless it
    /// was refused for this replica not being the leader (nothing was appended here).
    fn count_proposal(&self, ok: bool, not_leader: bool, appended: std::time::Instant) {
        let st = &self.inner.stats;
        match (ok, not_leader) {
            (true, _) => {
                st.proposals_committed.inc();
                st.proposal_duration.observe(appended.elapsed().as_secs_f64());
            }
            (false, true) => {}
            (false, false) => {
                st.proposals_failed.inc();
            }
        }
    }

    async fn propose(&self, cmd: Command, forwarded: bool) -> Result<(Revision, CommandResponse), StoreError> {
        let deadline = Instant::now() + LEADER_WAIT;
        loop {
            // Inside a recorded trace the proposal gets a span (its length is the time to
            // commit and apply here) and the entry carries the trace to every replica.
            let span = match keelson_tracecontext::TraceParent::current_sampled() {
                Some(_) => tracing::info_span!("raft-propose", leader = self.inner.id, term = tracing::field::Empty, index = tracing::field::Empty),
                None => tracing::Span::none(),
            };
            // A leader low on disk appends nothing: it waits for its hand-over (then the
            // write is forwarded) or, past the deadline or with a majority low, refuses.
            if self.is_leader() {
                if let Some(e) = self.space_refusal() {
                    if Instant::now() >= deadline || !self.inner.disk.is_low() {
                        return Err(e);
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            }
            let entry = span.in_scope(|| LogCommand::proposed(cmd.clone(), self.inner.log_format.cluster()));
            let appended = std::time::Instant::now();
            let write = tracing::Instrument::instrument(self.inner.raft.client_write(entry), span.clone());
            let written = tokio::select! {
                written = write => written,
                e = self.out_of_space_outcome_unknown() => return Err(e),
            };
            let not_leader = matches!(&written, Err(e) if matches!(e.api_error(), Some(openraft::errors::ClientWriteError::ForwardToLeader(_))));
            self.count_proposal(written.is_ok(), not_leader, appended);
            match written {
                Ok(resp) => {
                    span.record("term", resp.log_id.leader_id.term).record("index", resp.log_id.index);
                    self.inner.stats.writes.inc();
                    let out = resp.data;
                    let reply = out.response.ok_or_else(|| StoreError::Unavailable("entry applied without a reply".into()))?;
                    return Ok((out.revision, reply));
                }
                Err(e) => {
                    use openraft::errors::ClientWriteError as W;
                    match e.api_error() {
                        Some(W::ForwardToLeader(f)) => {
                            // Rejected before it was appended: safe to send elsewhere.
                            let leader = f.leader_id.zip(f.leader_node.clone());
                            if let Some((id, node)) = leader.filter(|(id, _)| *id != self.inner.id) {
                                if forwarded {
                                    return Err(StoreError::NotLeader { leader: Some(id) });
                                }
                                let forwarded = match &cmd {
                                    // Forwarded inside the proposal's span: the leader's
                                    // entry is its child.
                                    Command::Txn(t) => tracing::Instrument::instrument(self.inner.forwarder.txn(&node.raft_addr, t.clone()), span.clone())
                                        .await
                                        .map(|r| (r.header.revision, CommandResponse::Txn(r.response))),
                                    Command::Compact { revision } => self.forward_compact(*revision, &node.raft_addr).await,
                                };
                                match forwarded {
                                    // The leader we knew is gone and the request never left:
                                    // wait for the next leader.
                                    Err(Forward::NeverSent(e)) if Instant::now() < deadline => {
                                        tracing::debug!(error = %e, "leader unreachable; waiting for a new one");
                                    }
                                    Err(Forward::NeverSent(e)) | Err(Forward::Failed(e)) => return Err(e),
                                    Ok(r) => return Ok(r),
                                }
                            }
                        }
                        Some(W::LogEntryDiscarded(_)) => {
                            return Err(StoreError::Unavailable(
                                "leader changed while the write was in flight; outcome unknown".into(),
                            ))
                        }
                        _ => return Err(StoreError::Unavailable(e.to_string())),
                    }
                    if Instant::now() >= deadline {
                        return Err(StoreError::NoLeader("no leader elected in time".into()));
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }

    async fn forward_compact(&self, revision: Revision, addr: &str) -> Result<(Revision, CommandResponse), Forward> {
        self.inner.stats.forwarded.inc();
        let ch = self.inner.peers.get(addr).map_err(Forward::Failed)?;
        let call = wire_encode(&CompactCall { revision }).map_err(Forward::Failed)?;
        let resp = GrpcStore::new(ch).compact(forwarded_request(call)).await.map_err(|s| status_to_forward(addr, &s))?;
        let header: ResponseHeader = wire_decode::<Result<ResponseHeader, StoreError>>(resp.get_ref())
            .map_err(Forward::Failed)?
            .map_err(Forward::Failed)?;
        Ok((header.revision, CommandResponse::Compacted { revision }))
    }

    // ---- membership ----

    /// The members of the effective (latest appended) membership config, with the leader
    /// this replica knows.
    ///
    /// While a membership change is in its joint phase (old and new voter sets both
    /// needed for a quorum), the voters listed are those of the config the change started
    /// from: a member being promoted is listed as a voter only once the change has left
    /// the joint phase, and one being removed until then. So the count of voters changes
    /// only when the new config alone decides quorums. Callers wait for "`n` voters" before
    /// stopping members; during the joint phase of adding C to {A, B}, stopping B leaves
    /// {A, B} without a majority, and nothing (not even the rest of the change) can commit
    /// until B is back.
    pub fn members(&self) -> MemberListReply {
        let m = self.inner.raft.metrics();
        let m = m.borrow_watched();
        let membership = m.membership_config.membership();
        let voters: BTreeSet<NodeId> = membership.get_joint_config().first().cloned().unwrap_or_default();
        let members = membership
            .nodes()
            .map(|(id, n)| MemberInfo { id: *id, name: n.name.clone(), addr: n.raft_addr.clone(), voter: voters.contains(id) })
            .collect();
        MemberListReply { leader: m.current_leader, members }
    }

    /// Adds a member: first as a learner that catches up (from the log or a snapshot),
    /// then as a voter. Runs on the leader; forwarded there from any replica.
    pub async fn member_add(&self, call: MemberAddCall, forwarded: bool) -> Result<MemberListReply, StoreError> {
        if let Some((_, addr)) = self.remote_leader(Instant::now() + LEADER_WAIT).await? {
            if forwarded {
                return Err(StoreError::NotLeader { leader: self.leader().map(|l| l.0) });
            }
            return self.forward_cluster(&addr, async |mut c, env| c.member_add(env).await, &call).await;
        }
        let node = MemberNode { name: call.name.clone(), raft_addr: call.addr.clone() };
        tracing::info!(id = call.id, name = %call.name, addr = %call.addr, "adding member as learner");
        self.inner.raft.add_learner(call.id, node, true).await.map_err(|e| StoreError::Membership(e.to_string()))?;
        tracing::info!(id = call.id, "promoting member to voter");
        self.inner
            .raft
            .change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([call.id])), false)
            .await
            .map_err(|e| StoreError::Membership(e.to_string()))?;
        Ok(self.members())
    }

    /// Removes a member (voter or learner) from the cluster.
    pub async fn member_remove(&self, id: NodeId, forwarded: bool) -> Result<MemberListReply, StoreError> {
        if let Some((_, addr)) = self.remote_leader(Instant::now() + LEADER_WAIT).await? {
            if forwarded {
                return Err(StoreError::NotLeader { leader: self.leader().map(|l| l.0) });
            }
            return self
                .forward_cluster(&addr, async |mut c, env| c.member_remove(env).await, &MemberRemoveCall { id })
                .await;
        }
        // A voter of any config, also one only being promoted, is removed as a voter.
        let (known, voter) = {
            let m = self.inner.raft.metrics();
            let m = m.borrow_watched();
            let membership = m.membership_config.membership();
            let voter = membership.voter_ids().any(|v| v == id);
            (membership.get_node(&id).is_some(), voter)
        };
        if !known {
            return Err(StoreError::Membership(format!("no member with id {id:x}")));
        }
        let change = if voter {
            ChangeMembers::RemoveVoters(BTreeSet::from([id]))
        } else {
            ChangeMembers::RemoveNodes(BTreeSet::from([id]))
        };
        tracing::info!(id, "removing member");
        self.inner.raft.change_membership(change, false).await.map_err(|e| StoreError::Membership(e.to_string()))?;
        Ok(self.members())
    }

    async fn forward_cluster<Req: serde::Serialize>(
        &self,
        addr: &str,
        call: impl AsyncFnOnce(ClusterClient<Channel>, tonic::Request<keelson_proto::v1::Envelope>) -> Result<tonic::Response<keelson_proto::v1::Envelope>, tonic::Status>,
        req: &Req,
    ) -> Result<MemberListReply, StoreError> {
        let ch = self.inner.peers.get(addr)?;
        let resp = call(ClusterClient::new(ch), forwarded_request(wire_encode(req)?))
            .await
            .map_err(|s| StoreError::Unavailable(format!("leader {addr}: {}", s.message())))?;
        wire_decode::<Result<MemberListReply, StoreError>>(resp.get_ref())?
    }

    /// This replica's own status.
    pub fn status(&self) -> MemberStatus {
        let m = self.inner.raft.metrics();
        let m = m.borrow_watched().clone();
        let role = match m.state {
            ServerState::Leader => "leader",
            ServerState::Follower => "follower",
            ServerState::Candidate => "candidate",
            ServerState::Learner => "learner",
            ServerState::Shutdown => "shutdown",
        };
        MemberStatus {
            id: self.inner.id,
            name: self.inner.name.clone(),
            addr: self.inner.addr.clone(),
            role: role.to_string(),
            term: m.current_term,
            leader: m.current_leader,
            last_log_index: m.last_log_index.unwrap_or(0),
            committed_index: m.local_committed.map(|l| l.index).unwrap_or(0),
            applied_index: m.last_applied.map(|l| l.index).unwrap_or(0),
            snapshot_index: m.snapshot.map(|l| l.index).unwrap_or(0),
            purged_index: m.purged.map(|l| l.index).unwrap_or(0),
            revision: self.inner.state.store.current_revision(),
            compacted_revision: self.inner.state.store.compacted_revision(),
            members: self.members().members,
            log_format: keelson_raft::LOG_FORMAT,
            cluster_log_format: self.inner.log_format.cluster(),
        }
    }
}

pub(crate) fn forwarded_request<T>(msg: T) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    req.metadata_mut().insert(FORWARDED_HEADER, tonic::metadata::MetadataValue::from_static("1"));
    req
}

pub(crate) fn wire_encode<T: serde::Serialize>(msg: &T) -> Result<keelson_proto::v1::Envelope, StoreError> {
    postcard::to_stdvec(msg)
        .map(|payload| keelson_proto::v1::Envelope { payload })
        .map_err(|e| StoreError::Unavailable(format!("encode: {e}")))
}

pub(crate) fn wire_decode<T: serde::de::DeserializeOwned>(env: &keelson_proto::v1::Envelope) -> Result<T, StoreError> {
    postcard::from_bytes(&env.payload).map_err(|e| StoreError::Unavailable(format!("malformed reply from peer: {e}")))
}

pub(crate) fn mvcc_error(e: MvccError) -> StoreError {
    match e {
        MvccError::Compacted { compacted, .. } => StoreError::Compacted { compacted },
        MvccError::FutureRevision { current, .. } => StoreError::FutureRevision { current },
        other => StoreError::Unavailable(other.to_string()),
    }
}

fn reject_error(r: RejectReason) -> StoreError {
    match r {
        RejectReason::Compacted { compacted } => StoreError::Compacted { compacted },
        RejectReason::FutureRevision { current } => StoreError::FutureRevision { current },
        RejectReason::InvalidTxn(m) => StoreError::InvalidRequest(m),
    }
}

/// Keeps only what a `RangeRequest` needs to be valid.
fn validate_range(req: &RangeRequest) -> Result<(), StoreError> {
    if req.revision < 0 {
        return Err(StoreError::InvalidRequest("negative revision".into()));
    }
    if !req.range.range_end.is_empty() && req.range.range_end != [0] && req.range.range_end <= req.range.key {
        return Err(StoreError::InvalidRequest("range_end must be greater than key".into()));
    }
    Ok(())
}
