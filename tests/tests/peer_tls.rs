//! Mutual TLS on the replicas' gRPC port: a TLS cluster elects, replicates, reads
//! linearizably on followers and fails over; clients and replicas without a certificate
//! of the cluster CA are refused, while a correctly configured client succeeds against
//! the same replicas in the same test.

use std::time::Duration;

use keelson_client::api::ReadConsistency;
use keelson_client::{ClientError, PeerTls, StoreClient};
use keelson_mvcc::{KeyRange, RangeRequest};
use keelson_pki::ClusterCa;
use keelson_proto::v1::cluster_client::ClusterClient;
use keelson_proto::v1::Envelope;
use keelson_replica::{Bootstrap, ReplicaConfig};
use keelson_tests::{within, ClusterOptions, TestCluster, CALL_LIMIT};
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

fn tls_opts() -> ClusterOptions {
    ClusterOptions { tls: true, ..Default::default() }
}

/// The value of `key` and the store revision, read linearizably through `c`.
async fn read(c: &StoreClient, key: &str) -> (Option<String>, i64) {
    let range = c.range(RangeRequest { range: KeyRange::single(key), ..Default::default() }, ReadConsistency::Linearizable);
    let r = within(format!("linearizable read of {key} on {}", c.endpoint()), CALL_LIMIT, range)
        .await
        .expect("the read finishes")
        .expect("linearizable read");
    let v = r.response.kvs.first().map(|kv| String::from_utf8(kv.value.clone()).expect("utf8"));
    (v, r.header.revision)
}

/// Asserts `r` failed in the transport (connection or TLS), not with a store answer.
fn assert_refused<T: std::fmt::Debug>(what: &str, r: Result<T, ClientError>) {
    match r {
        Err(ClientError::Transport { status, .. }) => {
            eprintln!("{what}: refused as expected: {:?} {}", status.code(), status.message());
            assert_ne!(status.code(), tonic::Code::Ok);
        }
        other => panic!("{what}: expected a transport-level refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tls_cluster_replicates_reads_on_followers_and_survives_losing_its_leader() {
    let mut cluster = TestCluster::start(3, tls_opts()).await.expect("TLS cluster");
    assert!(cluster.client_tls().is_some());
    let leader = cluster.leader().await.expect("leader");

    // Writes through every replica (followers forward to the leader over TLS), each read
    // linearizably on every replica (followers fetch a read index over TLS).
    for round in 0..9 {
        let writer = round % 3;
        let (key, value) = (format!("/tls/{round}"), format!("v{round}"));
        cluster.client(writer).put(key.as_bytes(), value.as_bytes()).await.expect("put over TLS");
        for reader in 0..3 {
            assert_eq!(
                read(&cluster.client(reader), &key).await.0.as_deref(),
                Some(value.as_str()),
                "replica {reader} (leader {leader}) missed write {round} made through replica {writer}"
            );
        }
    }

    // The port really is TLS-only: the same replica refuses plaintext.
    assert_refused("plaintext status", StoreClient::new(&[cluster.addr(0)]).expect("client").status().await);

    // Kill the leader: the others elect a new one over TLS and writes continue.
    cluster.kill(leader).await;
    let new = cluster.leader().await.expect("new leader");
    assert_ne!(new, leader);
    let survivor = (0..3).find(|&i| i != leader && i != new).expect("a follower survives");
    for i in 0..10 {
        cluster.client(survivor).put(format!("/after/{i}").as_bytes(), b"x").await.expect("write after failover");
    }
    assert_eq!(read(&cluster.client(survivor), "/after/9").await.0.as_deref(), Some("x"));
    assert_eq!(read(&cluster.client(new), "/tls/0").await.0.as_deref(), Some("v0"));

    // The old leader comes back and catches up over TLS.
    cluster.restart(leader).await.expect("restart");
    assert_eq!(read(&cluster.client(leader), "/after/9").await.0.as_deref(), Some("x"));
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn plaintext_clients_are_refused_and_change_nothing() {
    let cluster = TestCluster::start(3, tls_opts()).await.expect("TLS cluster");
    cluster.client_all(0).put(b"/guarded", b"original").await.expect("TLS put");
    let (_, before) = read(&cluster.client(0), "/guarded").await;
    for i in 0..3 {
        let plain = StoreClient::new(&[cluster.addr(i)]).expect("client");
        assert_refused(&format!("plaintext put on replica {i}"), plain.put(b"/guarded", b"overwritten").await);
        assert_refused(&format!("plaintext get on replica {i}"), plain.get(b"/guarded").await);
        // Same replica, same call, with TLS: works.
        assert_eq!(read(&cluster.client(i), "/guarded").await, (Some("original".to_string()), before));
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn certificates_of_another_ca_are_refused_for_clients_and_replicas() {
    let cluster = TestCluster::start(3, tls_opts()).await.expect("TLS cluster");
    let cluster_ca = cluster.ca().expect("TLS cluster has a CA").cert_pem().to_string();
    cluster.client(0).put(b"/guarded", b"original").await.expect("TLS put");
    let (_, before) = read(&cluster.client(0), "/guarded").await;

    let other = ClusterCa::generate("intruder").expect("other CA");
    // Trusts the cluster CA (so the client side accepts the replica) but presents a
    // certificate the cluster CA did not sign: only the server's check can refuse it.
    let foreign_client = other.issue_client("intruder", &[]).expect("client cert");
    let foreign = PeerTls::new(cluster_ca.clone(), foreign_client.cert_pem, foreign_client.key_pem);
    for i in 0..3 {
        let c = StoreClient::with_tls(&[cluster.addr(i)], &foreign).expect("client");
        assert_refused(&format!("foreign-CA put on replica {i}"), c.put(b"/guarded", b"overwritten").await);
        assert_refused(&format!("foreign-CA status on replica {i}"), c.status().await);
    }
    // A client that trusts only the other CA refuses the replicas' certificates.
    let other_all = other.issue_client("intruder", &[]).expect("client cert");
    let wrong_trust = PeerTls::new(other.cert_pem(), other_all.cert_pem, other_all.key_pem);
    assert_refused("client trusting another CA", StoreClient::with_tls(&[cluster.addr(0)], &wrong_trust).expect("client").status().await);

    // A replica whose certificate comes from the other CA cannot join: the cluster
    // refuses its calls, so membership stays at three.
    let serving = other.issue_serving("keelson-intruder", &["127.0.0.1".into(), "localhost".into()]).expect("serving cert");
    let intruder_tls = PeerTls::new(cluster_ca, serving.cert_pem, serving.key_pem);
    let addr = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port");
    let intruder_cfg = ReplicaConfig::new("keelson-intruder", cluster.dir().join("intruder"), addr, Bootstrap::Join(cluster.addr(0)))
        .with_tls(intruder_tls.identity().expect("usable material"));
    let intruder = keelson_replica::start(intruder_cfg).await.expect("the intruder starts (it only fails to join)");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let members = cluster.client(0).member_list().await.expect("TLS member list");
    assert_eq!(members.members.len(), 3, "the intruder must not be added: {members:?}");
    intruder.shutdown().await;

    // Nothing changed, and the correctly configured client still works on every replica.
    for i in 0..3 {
        assert_eq!(read(&cluster.client(i), "/guarded").await, (Some("original".to_string()), before));
    }
    cluster.shutdown().await;
}

/// A raw gRPC `Cluster.Status` call over TLS trusting `ca_pem`, presenting `identity` if given.
async fn raw_status(addr: &str, ca_pem: &str, identity: Option<&PeerTls>) -> Result<(), tonic::Status> {
    let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca_pem)).timeout(Duration::from_secs(5));
    if let Some(id) = identity {
        tls = tls.identity(Identity::from_pem(&id.cert_pem, &id.key_pem));
    }
    let ch = Endpoint::from_shared(format!("https://{addr}"))
        .expect("uri")
        .connect_timeout(Duration::from_secs(1))
        .tls_config(tls)
        .expect("TLS config")
        .connect_lazy();
    let mut client = ClusterClient::new(ch);
    let call = client.status(Envelope { payload: Vec::new() });
    tokio::time::timeout(Duration::from_secs(10), call).await.map_err(|_| tonic::Status::deadline_exceeded("hung"))??;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tls_clients_without_a_certificate_are_refused() {
    let cluster = TestCluster::start(3, tls_opts()).await.expect("TLS cluster");
    let ca = cluster.ca().expect("TLS cluster has a CA").cert_pem().to_string();
    let me = cluster.client_tls().expect("client material").clone();
    for i in 0..3 {
        let addr = cluster.addr(i);
        // Control: the identical call with a client certificate succeeds.
        raw_status(&addr, &ca, Some(&me)).await.expect("status with a client certificate");
        let err = raw_status(&addr, &ca, None).await.expect_err("a client without a certificate must be refused");
        eprintln!("no client certificate on replica {i}: refused as expected: {:?} {}", err.code(), err.message());
        assert_ne!(err.code(), tonic::Code::DeadlineExceeded, "refused by hanging instead of failing: {err}");
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lagging_replica_catches_up_through_a_snapshot_streamed_over_tls() {
    let opts = ClusterOptions {
        log_retention: keelson_replica::LogRetention { snapshot_every: 50, keep_behind_snapshot: 5 },
        ..tls_opts()
    };
    let mut cluster = TestCluster::start(3, opts).await.expect("TLS cluster");
    let leader = cluster.leader().await.expect("leader");
    let lagging = (leader + 1) % 3;
    cluster.kill(lagging).await;
    let c = cluster.client(leader);
    for i in 0..200 {
        let key = format!("/snap/{i:04}");
        let put = c.put(key.as_bytes(), b"x");
        within(format!("put {i} through the leader, replica {leader}"), CALL_LIMIT, put)
            .await
            .expect("the put finishes")
            .expect("put");
    }
    // Purging follows the snapshot asynchronously.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    let st = loop {
        let st = cluster.status(leader).await.expect("status");
        if st.purged_index > 0 || tokio::time::Instant::now() >= deadline {
            break st;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert!(st.purged_index > 0, "leader purged no log, so no snapshot would be needed: {st:?}");
    cluster.restart(lagging).await.expect("restart");
    cluster.wait_applied(lagging, st.committed_index).await.expect("catch up");
    let lst = cluster.status(lagging).await.expect("status");
    assert!(lst.snapshot_index >= st.purged_index, "lagging replica did not install a snapshot: {lst:?}");
    assert_eq!(lst.revision, st.revision);
    cluster.shutdown().await;
}
