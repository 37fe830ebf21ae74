//! Pre-Vote over the real gRPC transport: three in-process nodes (in-memory log, MVCC
//! state machine, `RaftTransportService` on loopback) with `default_config`.
//!
//! A follower that loses its leader without the leader being gone — its server cut off
//! (a partition: it still reaches the others, nobody reaches it) or restarted with its
//! server up only later — must not move the leader's term once it is back; a killed
//! leader must still be replaced. Timeouts below bound waiting only; nothing asserts on
//! how long something took.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use keelson_mvcc::{Command, MemBackend, MvccStore, Op, PutRequest, TxnRequest};
use keelson_proto::v1::raft_transport_server::RaftTransportServer;
use keelson_raft::network::GrpcNetworkFactory;
use keelson_raft::transport_service::RaftTransportService;
use keelson_raft::{KeelsonRaftNode, KeelsonStateMachine, LogCommand, LogRetention, MemLogStore, MemberNode, NodeId};
use openraft::async_runtime::WatchReceiver;
use openraft::ServerState;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Generous bound for anything the tests wait for.
const WAIT: Duration = Duration::from_secs(30);

/// `default_config`, with elections four times slower so that a loaded test machine
/// does not miss heartbeats by accident (the heartbeat interval and Pre-Vote are the
/// defaults).
fn config() -> Arc<openraft::Config> {
    let base = keelson_raft::default_config("pre-vote-test", LogRetention::default());
    let cfg = openraft::Config { election_timeout_min: 1000, election_timeout_max: 2000, ..base };
    Arc::new(cfg.validate().expect("valid config"))
}

/// Longer than a follower's election timeout, so a cut-off follower does time out.
const CUT_OFF: Duration = Duration::from_secs(5);

struct Server {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), tonic::transport::Error>>,
}

struct Node {
    id: NodeId,
    addr: String,
    log: MemLogStore,
    raft: KeelsonRaftNode<MemBackend>,
    server: Option<Server>,
    dirs: Vec<tempfile::TempDir>,
}

async fn new_raft(id: NodeId, log: MemLogStore) -> (KeelsonRaftNode<MemBackend>, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = MvccStore::open(MemBackend::new()).expect("store");
    let (sm, _state) = KeelsonStateMachine::open(store, dir.path()).expect("state machine");
    let raft = openraft::Raft::new(id, config(), GrpcNetworkFactory::default(), log, sm).await.expect("raft");
    (raft, dir)
}

fn serve(raft: KeelsonRaftNode<MemBackend>, listener: TcpListener, dir: &std::path::Path) -> Server {
    let (stop, stopped) = oneshot::channel::<()>();
    let svc = RaftTransportServer::new(RaftTransportService::new(raft, dir.join("incoming"), keelson_raft::disk_guard::DiskGuard::new(dir, 0)));
    let task = tokio::spawn(
        tonic::transport::Server::builder().add_service(svc).serve_with_incoming_shutdown(
            tokio_stream::wrappers::TcpListenerStream::new(listener),
            async {
                let _ = stopped.await;
            },
        ),
    );
    Server { stop, task }
}

impl Node {
    /// Cuts the node's server off: nobody reaches it, it still reaches the others.
    async fn cut_off(&mut self) {
        let server = self.server.take().expect("server running");
        let _ = server.stop.send(());
        tokio::time::timeout(WAIT, server.task).await.expect("server stops").expect("join").expect("serve");
    }

    /// Serves the node again at its address.
    async fn reconnect(&mut self) {
        assert!(self.server.is_none(), "server already running");
        let listener = TcpListener::bind(&self.addr).await.expect("rebind");
        self.server = Some(serve(self.raft.clone(), listener, self.dirs[0].path()));
    }

    /// Stops the node's Raft and its server (its log stays, as on disk).
    async fn kill(&mut self) {
        if self.server.is_some() {
            self.cut_off().await;
        }
        self.raft.shutdown().await.expect("shutdown");
    }

    /// Starts a new Raft over the node's log; its server stays down (see `reconnect`).
    async fn restart_unreachable(&mut self) {
        let (raft, dir) = new_raft(self.id, self.log.clone()).await;
        self.raft = raft;
        self.dirs.push(dir);
    }

    fn term(&self) -> u64 {
        self.raft.metrics().borrow_watched().current_term
    }
}

struct Cluster {
    nodes: Vec<Node>,
}

impl Cluster {
    async fn start() -> Cluster {
        let mut listeners = Vec::new();
        for _ in 0..3 {
            listeners.push(TcpListener::bind("127.0.0.1:0").await.expect("bind"));
        }
        let mut nodes = Vec::new();
        let mut members = BTreeMap::new();
        for (i, listener) in listeners.into_iter().enumerate() {
            let id = 100 + i as NodeId;
            let addr = listener.local_addr().expect("addr").to_string();
            members.insert(id, MemberNode { name: format!("node-{i}"), raft_addr: addr.clone() });
            let log = MemLogStore::new();
            let (raft, dir) = new_raft(id, log.clone()).await;
            let server = serve(raft.clone(), listener, dir.path());
            nodes.push(Node { id, addr, log, raft, server: Some(server), dirs: vec![dir] });
        }
        nodes[0].raft.initialize(members).await.expect("initialize");
        let c = Cluster { nodes };
        c.leader(&[0, 1, 2]).await;
        c
    }

    /// The index of the node of `among` that leads, as every node of `among` sees it.
    async fn leader(&self, among: &[usize]) -> usize {
        let ids: Vec<NodeId> = among.iter().map(|&i| self.nodes[i].id).collect();
        let first = &self.nodes[among[0]].raft;
        let m = first
            .wait(Some(WAIT))
            .metrics(|m| m.current_leader.is_some_and(|l| ids.contains(&l)), "a leader")
            .await
            .expect("a leader is elected");
        let id = m.current_leader.expect("leader");
        let leader = self.nodes.iter().position(|n| n.id == id).expect("leader is a member");
        for &i in among {
            self.nodes[i]
                .raft
                .wait(Some(WAIT))
                .metrics(|m| m.current_leader == Some(id) && m.current_term == self.nodes[leader].term(), "same leader")
                .await
                .expect("every node follows the same leader");
        }
        self.nodes[leader]
            .raft
            .wait(Some(WAIT))
            .state(ServerState::Leader, "leader state")
            .await
            .expect("the leader knows it leads");
        leader
    }

    async fn write(&self, on: usize, key: &str) {
        let put = Op::Put(PutRequest { key: key.as_bytes().to_vec(), value: b"v".to_vec(), prev_kv: false });
        let cmd = LogCommand::V1(Command::Txn(TxnRequest { compare: vec![], success: vec![put], failure: vec![] }));
        // A leader refuses writes while its quorum lease is not (yet) confirmed; the replica's
        // clients retry such refusals, and so does this.
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let res = tokio::time::timeout(WAIT, self.nodes[on].raft.client_write(cmd.clone())).await.expect("write completes");
            match res {
                Ok(_) => return,
                Err(openraft::errors::RaftError::APIError(openraft::errors::ClientWriteError::ForwardToLeader(f)))
                    if tokio::time::Instant::now() < deadline =>
                {
                    eprintln!("write refused ({:?}); again", f.reason);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("write failed: {e}"),
            }
        }
    }

    /// Waits until node `i` has the leader's whole log and follows it.
    async fn caught_up(&self, i: usize, leader: usize) {
        let (leader_id, last) = {
            let m = self.nodes[leader].raft.metrics().borrow_watched().clone();
            (m.id, m.last_log_index)
        };
        self.nodes[i]
            .raft
            .wait(Some(WAIT))
            .metrics(|m| m.current_leader == Some(leader_id) && m.last_applied.map(|l| l.index) >= last, "caught up")
            .await
            .expect("the follower catches up with the leader");
    }

    async fn shutdown(mut self) {
        for n in &mut self.nodes {
            let _ = n.raft.shutdown().await;
            if let Some(s) = n.server.take() {
                let _ = s.stop.send(());
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cut_off_follower_does_not_move_the_leaders_term_when_it_returns() {
    let mut c = Cluster::start().await;
    let leader = c.leader(&[0, 1, 2]).await;
    let term = c.nodes[leader].term();
    let f = (leader + 1) % 3;
    c.nodes[f].cut_off().await;
    for i in 0..20 {
        c.write(leader, &format!("/cut/{i}")).await;
    }
    // The follower times out several times while nobody reaches it.
    tokio::time::sleep(CUT_OFF).await;
    assert_eq!(c.nodes[f].term(), term, "the cut-off follower raised its term");
    c.nodes[f].reconnect().await;
    c.caught_up(f, leader).await;
    c.write(leader, "/cut/after").await;
    c.caught_up(f, leader).await;
    assert_eq!(c.leader(&[0, 1, 2]).await, leader, "leadership moved");
    assert_eq!(c.nodes[leader].term(), term, "the leader's term moved");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restarted_follower_reached_late_does_not_move_the_leaders_term() {
    let mut c = Cluster::start().await;
    let leader = c.leader(&[0, 1, 2]).await;
    let term = c.nodes[leader].term();
    let f = (leader + 2) % 3;
    c.nodes[f].kill().await;
    for i in 0..20 {
        c.write(leader, &format!("/restart/{i}")).await;
    }
    // Back with its log but unreachable until its election timer has fired.
    c.nodes[f].restart_unreachable().await;
    tokio::time::sleep(CUT_OFF).await;
    assert_eq!(c.nodes[f].term(), term, "the restarted follower raised its term");
    c.nodes[f].reconnect().await;
    c.caught_up(f, leader).await;
    assert_eq!(c.leader(&[0, 1, 2]).await, leader, "leadership moved");
    assert_eq!(c.nodes[leader].term(), term, "the leader's term moved");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_leader_is_replaced_and_rejoins_as_a_follower() {
    let mut c = Cluster::start().await;
    let old = c.leader(&[0, 1, 2]).await;
    let term = c.nodes[old].term();
    c.write(old, "/kill/before").await;
    c.nodes[old].kill().await;
    let survivors: Vec<usize> = (0..3).filter(|&i| i != old).collect();
    let new = c.leader(&survivors).await;
    assert_ne!(new, old, "the killed node still leads");
    assert!(c.nodes[new].term() > term, "no new term after the leader was killed");
    c.write(new, "/kill/after").await;
    // The old leader comes back as a follower of the new one.
    c.nodes[old].restart_unreachable().await;
    c.nodes[old].reconnect().await;
    c.caught_up(old, new).await;
    assert_eq!(c.leader(&[0, 1, 2]).await, new);
    c.shutdown().await;
}

/// A server older than the `PreVote` RPC: its `RaftTransport` answers every call the
/// way a tonic server answers a method it does not know.
#[derive(Clone)]
struct OldServer;

impl tonic::server::NamedService for OldServer {
    const NAME: &'static str = "keelson.v1.RaftTransport";
}

impl tonic::codegen::Service<tonic::codegen::http::Request<tonic::body::Body>> for OldServer {
    type Response = tonic::codegen::http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: tonic::codegen::http::Request<tonic::body::Body>) -> Self::Future {
        std::future::ready(Ok(tonic::Status::unimplemented("no such method").into_http()))
    }
}

async fn pre_vote_to(addr: &str) -> Result<openraft::raft::VoteResponse<keelson_raft::KeelsonRaft>, String> {
    use openraft::network::v2::RaftNetworkV2;
    use openraft::network::{RPCOption, RaftNetworkFactory};
    let node = MemberNode { name: "old".into(), raft_addr: addr.to_string() };
    let mut peer = GrpcNetworkFactory::default().new_client(7, &node).await;
    let vote = openraft::Vote::new(3, 1);
    let req = openraft::raft::VoteRequest::new(vote, None);
    tokio::time::timeout(WAIT, peer.pre_vote(req, RPCOption::new(Duration::from_secs(5))))
        .await
        .expect("pre-vote answered in time")
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn a_peer_without_the_pre_vote_rpc_counts_as_granting() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(tonic::transport::Server::builder().add_service(OldServer).serve_with_incoming_shutdown(
        tokio_stream::wrappers::TcpListenerStream::new(listener),
        async {
            let _ = stopped.await;
        },
    ));
    let resp = pre_vote_to(&addr).await.expect("an old peer's answer is a reply, not an error");
    assert!(resp.vote_granted, "an old peer refused: {resp:?}");
    assert_eq!(resp.vote, openraft::Vote::new(3, 1));
    let _ = stop.send(());
    let _ = server.await;
}

#[tokio::test]
async fn an_unreachable_peer_is_no_pre_vote_grant() {
    // A port nothing listens on any more.
    let addr = TcpListener::bind("127.0.0.1:0").await.expect("bind").local_addr().expect("addr").to_string();
    let res = pre_vote_to(&addr).await;
    assert!(res.is_err(), "an unreachable peer answered: {res:?}");
}

#[test]
fn default_config_enables_pre_vote() {
    let cfg = keelson_raft::default_config("c", LogRetention::default());
    assert_eq!(cfg.enable_pre_vote, Some(true));
}
