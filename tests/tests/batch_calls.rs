//! Range and transaction calls multiplexed on `Store.Batch` streams: every caller gets its
//! own reply, writes go straight to the leader once a reply has named it, a stream broken
//! by a replica going away is reopened, and a call reported as never sent was never
//! applied.

use std::collections::{BTreeSet, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keelson_client::api::ReadConsistency;
use keelson_client::{never_sent, ClientError, StoreClient};
use keelson_mvcc::{KeyRange, RangeRequest};
use keelson_proto::v1::store_client::StoreClient as GrpcStore;
use keelson_proto::v1::Envelope;
use keelson_tests::{read_value, ClusterOptions, TestCluster};

fn forwarded(cluster: &TestCluster) -> u64 {
    (0..cluster.len()).filter_map(|i| cluster.running(i)).map(|r| r.replica.stats().forwarded.get()).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_callers_each_get_their_own_reply_and_writes_go_to_the_leader() {
    let cluster = TestCluster::start(3, ClusterOptions::default()).await.expect("cluster");
    let leader = cluster.leader().await.expect("leader");
    let follower = (leader + 1) % 3;
    let follower_id = cluster.status(follower).await.expect("status").id;
    let client = cluster.client_all(follower);

    // Before any reply has named the leader, a write goes to the current replica, which
    // forwards it.
    let before = forwarded(&cluster);
    client.put(b"/first", b"x").await.expect("first put");
    assert_eq!(forwarded(&cluster), before + 1, "the first write was forwarded by the follower");

    // From then on writes go straight to the leader: nothing more is forwarded.
    let before = forwarded(&cluster);
    let mut tasks = Vec::new();
    for i in 0..300 {
        let c = client.clone();
        tasks.push(tokio::spawn(async move {
            let reply = c.put(format!("/k/{i}").as_bytes(), format!("v{i}").as_bytes()).await.expect("put");
            reply.header.revision
        }));
    }
    let mut revisions = HashSet::new();
    for t in tasks {
        assert!(revisions.insert(t.await.expect("task")), "two writes answered with one revision");
    }
    assert_eq!(revisions.len(), 300);
    assert_eq!(forwarded(&cluster), before, "writes were forwarded although the leader was known");

    // Reads stay on the replica the client is at, and each caller reads its own key.
    let mut tasks = Vec::new();
    for i in 0..300 {
        let c = client.clone();
        tasks.push(tokio::spawn(async move {
            let key = format!("/k/{i}");
            let r = c
                .range(RangeRequest { range: KeyRange::single(key.as_str()), ..Default::default() }, ReadConsistency::Linearizable)
                .await
                .expect("read");
            (i, r.header.member_id, r.response.kvs.first().map(|kv| kv.value.clone()))
        }));
    }
    for t in tasks {
        let (i, member, value) = t.await.expect("task");
        assert_eq!(member, follower_id, "read {i} was not served by the client's current replica");
        assert_eq!(value, Some(format!("v{i}").into_bytes()), "read {i} got another caller's reply");
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_restart_breaks_the_stream_and_a_call_reported_unsent_was_never_applied() {
    let mut cluster = TestCluster::start(3, ClusterOptions::default()).await.expect("cluster");
    let leader = cluster.leader().await.expect("leader");
    let follower = (leader + 1) % 3;
    // Only the follower: its writes are forwarded, and its going away breaks the stream.
    let client = cluster.client(follower);

    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(BTreeSet::new()));
    let unsent = Arc::new(Mutex::new(BTreeSet::new()));
    let unknown = Arc::new(Mutex::new(0usize));
    let mut tasks = Vec::new();
    for w in 0..16 {
        let (c, stop, acked, unsent, unknown) = (client.clone(), stop.clone(), acked.clone(), unsent.clone(), unknown.clone());
        tasks.push(tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("/w/{w}/{n}");
                n += 1;
                match c.put(key.as_bytes(), b"v").await {
                    Ok(_) => {
                        acked.lock().unwrap().insert(key);
                    }
                    Err(ClientError::Transport { status, .. }) if never_sent(&status) => {
                        unsent.lock().unwrap().insert(key);
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    Err(ClientError::Transport { status, .. }) => {
                        assert_eq!(status.code(), tonic::Code::Unknown, "a failed call that may have run: {status:?}");
                        *unknown.lock().unwrap() += 1;
                    }
                    // The replica refused or gave up while shutting down; what it says
                    // is its own business, the stream's classification is not involved.
                    Err(ClientError::Store(_)) => {
                        *unknown.lock().unwrap() += 1;
                    }
                    Err(e) => panic!("unexpected error: {e}"),
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster.kill(follower).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster.restart(follower).await.expect("restart");

    // The same client reopens its stream to the restarted replica.
    let deadline = Instant::now() + Duration::from_secs(30);
    let before = acked.lock().unwrap().len();
    while acked.lock().unwrap().len() < before + 100 {
        assert!(Instant::now() < deadline, "writes through the restarted replica did not resume");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("writer");
    }
    let unsent = unsent.lock().unwrap().clone();
    assert!(!unsent.is_empty(), "no call failed as never sent while the replica was down");

    let reader = cluster.client(leader);
    for key in &unsent {
        assert_eq!(read_value(&reader, key).await, None, "{key} was reported as never sent but was applied");
    }
    let acked_keys = acked.lock().unwrap().clone();
    for key in acked_keys.iter() {
        assert_eq!(read_value(&reader, key).await.as_deref(), Some(&b"v"[..]), "acknowledged {key} is missing");
    }
    eprintln!(
        "acked {}, never sent {}, outcome unknown {}",
        acked.lock().unwrap().len(),
        unsent.len(),
        unknown.lock().unwrap()
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_frame_ends_the_stream_with_invalid_argument() {
    let cluster = TestCluster::start(1, ClusterOptions::default()).await.expect("cluster");
    let mut grpc = GrpcStore::connect(format!("http://{}", cluster.addr(0))).await.expect("connect");
    let frames = futures::stream::iter(vec![Envelope { payload: vec![0xff, 0xff, 0xff, 0xff] }]);
    let mut replies = grpc.batch(frames).await.expect("stream opens").into_inner();
    let status = replies.message().await.expect_err("a malformed frame is refused");
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("malformed call frame"), "{status:?}");
    cluster.shutdown().await;
}

#[tokio::test]
async fn calls_to_a_replica_that_is_not_there_fail_as_never_sent() {
    let port = keelson_runner::free_loopback_port().expect("port");
    let client = StoreClient::new(&[format!("127.0.0.1:{port}")]).expect("client");
    match client.put(b"/k", b"v").await {
        Err(ClientError::Transport { status, .. }) => assert!(never_sent(&status), "{status:?}"),
        other => panic!("expected a transport error, got {other:?}"),
    }
    match client.get(b"/k").await {
        Err(ClientError::Transport { status, .. }) => assert!(never_sent(&status), "{status:?}"),
        other => panic!("expected a transport error, got {other:?}"),
    }
}
