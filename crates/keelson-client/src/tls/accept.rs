//! The TLS accept loop of every Keelson server port: a replica's gRPC port and the
//! Kubernetes API port.
//!
//! TCP connections are accepted in one task; each TLS handshake runs in its own task,
//! bounded by a timeout, so a peer that connects and stalls cannot hold up anyone else's
//! accept. Finished handshakes are handed out as a stream. With a configuration from a
//! [`crate::PeerIdentity`] (or one resolving a [`crate::tls::ReloadableCert`]), a rotated
//! certificate is used from the next handshake on; connections that fail the handshake
//! (not TLS, no certificate where one is required, another CA) never reach the server.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

/// Connections whose handshake finished, waiting for the gRPC server to take them.
const READY_BACKLOG: usize = 64;

/// The stream of established TLS connections [`spawn_accept`] hands out; it ends at
/// shutdown (handshakes under way are dropped).
pub type TlsIncoming = ReceiverStream<Result<TlsStream<TcpStream>, std::io::Error>>;

/// Starts accepting on `listener` with `config` until `shutdown`, giving each handshake
/// `handshake_timeout`; returns the accept task and the established connections (the
/// peer's address is `stream.get_ref().0.peer_addr()`).
pub fn spawn_accept(
    listener: TcpListener,
    config: Arc<ServerConfig>,
    handshake_timeout: Duration,
    shutdown: CancellationToken,
) -> (JoinHandle<()>, TlsIncoming) {
    let (tx, rx) = tokio::sync::mpsc::channel(READY_BACKLOG);
    let acceptor = TlsAcceptor::from(config);
    let task = tokio::spawn(async move {
        loop {
            let (tcp, peer) = tokio::select! {
                _ = shutdown.cancelled() => return,
                r = listener.accept() => match r {
                    Ok(c) => c,
                    Err(e) => {
                        // Out of descriptors and the like: back off instead of spinning.
                        tracing::warn!(error = %e, "accepting a connection");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            // Small replies must not wait for delayed ACKs (~40 ms).
            let _ = tcp.set_nodelay(true);
            let (acceptor, tx, shutdown) = (acceptor.clone(), tx.clone(), shutdown.clone());
            tokio::spawn(async move {
                let handshake = tokio::time::timeout(handshake_timeout, acceptor.accept(tcp));
                let r = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    r = handshake => r,
                };
                match r {
                    Ok(Ok(tls)) => {
                        let _ = tx.send(Ok(tls)).await;
                    }
                    Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake refused"),
                    Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                }
            });
        }
    });
    (task, ReceiverStream::new(rx))
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use keelson_pki::ClusterCa;
    use tokio::io::AsyncWriteExt;

    use super::*;
    use crate::tls::HANDSHAKE_TIMEOUT;
    use crate::PeerTls;

    #[tokio::test]
    async fn a_stalled_or_plaintext_peer_does_not_hold_up_a_good_handshake() {
        let ca = ClusterCa::generate("t").expect("CA");
        let cert = ca.issue_serving("r", &["127.0.0.1".into()]).expect("certificate");
        let identity = PeerTls::new(ca.cert_pem(), cert.cert_pem, cert.key_pem).identity().expect("identity");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let shutdown = CancellationToken::new();
        let (task, mut incoming) = spawn_accept(listener, identity.server_config(), HANDSHAKE_TIMEOUT, shutdown.clone());

        // One peer connects and says nothing; another speaks plaintext HTTP/2.
        let _stalled = TcpStream::connect(addr).await.expect("connect");
        let mut plaintext = TcpStream::connect(addr).await.expect("connect");
        plaintext.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await.expect("write");

        // A correct client gets through at once, well before the stalled handshake times out.
        let config = identity.client_config();
        let name = tokio_rustls::rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
        let client = tokio::spawn(async move {
            let tcp = TcpStream::connect(addr).await.expect("connect");
            tokio_rustls::TlsConnector::from(config).connect(name, tcp).await.expect("handshake")
        });
        let accepted = tokio::time::timeout(Duration::from_secs(2), incoming.next()).await.expect("not held up");
        let tls = accepted.expect("a connection").expect("established");
        assert!(tls.get_ref().1.peer_certificates().is_some_and(|c| !c.is_empty()), "the client certificate was required");
        let _client = client.await.expect("client");

        // At shutdown the stream ends, without waiting for the stalled handshake.
        shutdown.cancel();
        task.await.expect("accept loop ends");
        let rest = tokio::time::timeout(Duration::from_secs(2), incoming.next()).await.expect("stream ends");
        assert!(rest.is_none(), "nothing else was established");
    }
}
