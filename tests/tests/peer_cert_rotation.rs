//! The replicas' peer certificates (Raft and store gRPC) are reissued before they expire,
//! without a restart and without a failed write: new handshakes get the new
//! certificates, open connections keep working, and after the old certificates have
//! expired the replicas still connect to each other (so they dial with the new ones).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use keelson_client::PeerTls;
use keelson_tests::{read_value, ClusterOptions, PeerRotation, TestCluster};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_util::sync::CancellationToken;

/// How long the replicas' first certificates are valid: rotation is due at once, and the
/// test waits until they have expired.
const FIRST_VALIDITY: Duration = Duration::from_secs(25);

/// A certificate as a new TLS handshake sees it.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    serial: String,
    not_after: i64,
}

fn seen(der: &[u8]) -> Seen {
    let (_, cert) = x509_parser::parse_x509_certificate(der).expect("certificate");
    Seen { serial: cert.tbs_certificate.raw_serial_as_string(), not_after: cert.validity().not_after.timestamp() }
}

fn unix_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs() as i64
}

/// A fresh mutual-TLS handshake with the replica at `addr`, presenting `me` (no session
/// resumption: a new client configuration every time). Returns the replica's certificate.
async fn handshake(addr: &str, me: &PeerTls) -> Result<Seen, std::io::Error> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(me.ca_pem.as_bytes()) {
        roots.add(c.expect("CA")).expect("root");
    }
    let chain: Vec<_> = CertificateDer::pem_slice_iter(me.cert_pem.as_bytes()).map(|c| c.expect("cert")).collect();
    let key = PrivateKeyDer::from_pem_slice(me.key_pem.as_bytes()).expect("key");
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .expect("client certificate");
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(cfg)).connect(ServerName::try_from("127.0.0.1").expect("name"), tcp).await?;
    // TLS 1.3: a refused client certificate shows up as an alert after the client is done;
    // an HTTP/2 preface and a read make the server's verdict visible.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    tls.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00").await?;
    let mut frame = [0u8; 9];
    tls.read_exact(&mut frame).await?;
    let der = tls.get_ref().1.peer_certificates().expect("server certificate")[0].to_vec();
    Ok(seen(&der))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn peer_certificates_rotate_without_a_failed_write() {
    let opts = ClusterOptions { tls: true, peer_cert_validity: Some(FIRST_VALIDITY), ..Default::default() };
    let mut cluster = TestCluster::start(3, opts).await.expect("TLS cluster");
    let me = cluster.client_tls().expect("client material").clone();
    let leader = cluster.leader().await.expect("leader");
    let (writer, restarted) = ((leader + 1) % 3, (leader + 2) % 3);

    // Writes through a follower (forwarded to the leader over peer TLS) for the whole test.
    let stop = CancellationToken::new();
    let (written, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let load = {
        let (client, stop, written, failed) = (cluster.client(writer), stop.clone(), written.clone(), failed.clone());
        tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.is_cancelled() {
                match client.put(format!("/rot/{n}").as_bytes(), n.to_string().as_bytes()).await {
                    Ok(_) => written.fetch_add(1, Ordering::SeqCst),
                    Err(e) => {
                        eprintln!("write {n} failed: {e}");
                        failed.fetch_add(1, Ordering::SeqCst)
                    }
                };
                n += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            n
        })
    };

    let mut first = Vec::new();
    for i in 0..3 {
        let s = handshake(&cluster.addr(i), &me).await.expect("handshake with the first certificate");
        assert!(s.not_after <= unix_now() + FIRST_VALIDITY.as_secs() as i64 + 1, "replica {i}: {s:?}");
        first.push(s);
    }

    cluster.rotate_peer_certs(PeerRotation {
        validity: Duration::from_secs(86400),
        renew_before: Duration::from_secs(3600),
        check_every: Duration::from_millis(200),
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    for (i, old) in first.iter().enumerate() {
        let new = loop {
            let s = handshake(&cluster.addr(i), &me).await.expect("handshake during rotation");
            if s != *old {
                break s;
            }
            assert!(tokio::time::Instant::now() < deadline, "replica {i} still serves {old:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_ne!(new.serial, old.serial, "replica {i}");
        assert!(new.not_after > old.not_after + 3600, "replica {i}: {new:?} vs {old:?}");
        eprintln!("replica {i}: {} (until {}) -> {} (until {})", old.serial, old.not_after, new.serial, new.not_after);
    }

    // Let every first certificate expire: from then on a connection made with one is
    // refused (shown below with another expired certificate of the CA).
    let expired_at = first.iter().map(|s| s.not_after).max().expect("three");
    while unix_now() <= expired_at + 1 {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let ca = cluster.ca().expect("TLS cluster has a CA");
    let short = ca.issue_serving_valid_for("expired", &["127.0.0.1".into()], keelson_pki::Duration::seconds(1)).expect("certificate");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let expired = PeerTls::new(ca.cert_pem(), short.cert_pem, short.key_pem);
    assert!(handshake(&cluster.addr(leader), &expired).await.is_err(), "an expired client certificate is refused");

    // Replicas still reach each other over new connections: a restarted follower is
    // dialed by the leader (its client certificate is checked now) and dials the leader
    // for its linearizable reads, then catches up.
    cluster.kill(restarted).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster.restart(restarted).await.expect("restart");
    let marker = "/rot/after-expiry";
    cluster.client(writer).put(marker.as_bytes(), b"yes").await.expect("write after the old certificates expired");
    assert_eq!(read_value(&cluster.client(restarted), marker).await.as_deref(), Some(&b"yes"[..]), "the restarted replica caught up");
    let committed = cluster.status(leader).await.expect("status").committed_index;
    cluster.wait_applied(restarted, committed).await.expect("catch up");

    stop.cancel();
    let attempted = load.await.expect("writer");
    let (ok, bad) = (written.load(Ordering::SeqCst), failed.load(Ordering::SeqCst));
    eprintln!("{ok} writes, {bad} failed, over the rotation");
    assert_eq!(bad, 0, "no write may fail while certificates rotate");
    assert_eq!(ok, attempted);
    assert!(ok > 100, "the load kept running: {ok} writes");
    let last = format!("/rot/{}", attempted - 1);
    for i in 0..3 {
        assert_eq!(read_value(&cluster.client(i), &last).await, Some((attempted - 1).to_string().into_bytes()), "replica {i}");
    }
    cluster.shutdown().await;
}
