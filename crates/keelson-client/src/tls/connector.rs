//! Dialing replicas over a [`PeerIdentity`]'s TLS, as a tonic connector: TCP (no
//! delay), then a TLS handshake with the identity's client configuration as it is at that
//! moment, checking the server's certificate against the host of the dialed URI (a DNS
//! name, or an IP address matched against the certificate's IP SANs).
//!
//! Channels made with [`PeerIdentity::lazy_channel`] connect through it, so every new
//! connection presents the certificate in use when it is made.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tonic::codegen::Service;
use tonic::transport::{Channel, Endpoint, Uri};

use super::{PeerIdentity, HANDSHAKE_TIMEOUT};

/// Why a connection to a replica could not be made. Every message says "connect", so a
/// call that failed this way is recognised as never sent ([`crate::never_sent`]).
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    /// The URI has no usable host and port.
    #[error("cannot connect to {uri}: no host and port, or a host that is not a valid server name")]
    Address { uri: String },
    /// The TCP connection failed.
    #[error("cannot connect to {addr}: {source}")]
    Tcp { addr: String, #[source] source: std::io::Error },
    /// The TLS handshake failed (certificate refused on either side, not TLS, …).
    #[error("cannot connect to {addr}: TLS handshake: {source}")]
    Handshake { addr: String, #[source] source: std::io::Error },
    /// The TLS handshake did not finish within [`HANDSHAKE_TIMEOUT`].
    #[error("cannot connect to {addr}: TLS handshake timed out")]
    HandshakeTimeout { addr: String },
}

/// Where to dial for `uri`: host (without IPv6 brackets), port, and the name the server's
/// certificate must carry.
fn target(uri: &Uri) -> Result<(String, u16, ServerName<'static>), DialError> {
    let bad = || DialError::Address { uri: uri.to_string() };
    let host = uri.host().ok_or_else(bad)?;
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host).to_string();
    let port = uri.port_u16().ok_or_else(bad)?;
    let name = ServerName::try_from(host.clone()).map_err(|_| bad())?;
    Ok((host, port, name))
}

async fn dial(config: Arc<ClientConfig>, uri: Uri) -> Result<TlsStream<TcpStream>, DialError> {
    let (host, port, name) = target(&uri)?;
    let addr = format!("{host}:{port}");
    let tcp = TcpStream::connect((host.as_str(), port)).await.map_err(|source| DialError::Tcp { addr: addr.clone(), source })?;
    let _ = tcp.set_nodelay(true);
    let handshake = tokio_rustls::TlsConnector::from(config).connect(name, tcp);
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
        Ok(Ok(tls)) => Ok(tls),
        Ok(Err(source)) => Err(DialError::Handshake { addr, source }),
        Err(_) => Err(DialError::HandshakeTimeout { addr }),
    }
}

/// The tonic connector: each call dials with the identity's client configuration.
#[derive(Clone)]
struct TlsDialer {
    config: Arc<ClientConfig>,
}

impl Service<Uri> for TlsDialer {
    type Response = TokioIo<TlsStream<TcpStream>>;
    type Error = DialError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, DialError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), DialError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let config = self.config.clone();
        Box::pin(async move { dial(config, uri).await.map(TokioIo::new) })
    }
}

impl PeerIdentity {
    /// A lazily connected channel to `endpoint` whose connections are made with this
    /// identity's TLS (each presenting the certificate in use at that moment). The
    /// endpoint's other settings (connect timeout, keep-alive) apply.
    ///
    /// `endpoint` must be an `http://host:port` URI: TLS is done here, and tonic refuses
    /// `https://` URIs without TLS settings of its own.
    pub fn lazy_channel(&self, endpoint: Endpoint) -> Channel {
        endpoint.connect_with_connector_lazy(TlsDialer { config: self.client_config() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_take_the_host_and_port_of_the_uri() {
        let t = |s: &str| target(&s.parse::<Uri>().expect("uri")).map(|(h, p, n)| (h, p, format!("{n:?}")));
        let (h, p, n) = t("http://127.0.0.1:2380").expect("IPv4");
        assert_eq!((h.as_str(), p), ("127.0.0.1", 2380));
        assert!(n.contains("IpAddress"), "{n}");
        let (h, p, n) = t("http://[::1]:7").expect("IPv6");
        assert_eq!((h.as_str(), p), ("::1", 7));
        assert!(n.contains("IpAddress"), "{n}");
        let (h, _, n) = t("http://keelson-2.example:2380").expect("DNS");
        assert_eq!(h, "keelson-2.example");
        assert!(n.contains("DnsName"), "{n}");
        assert!(matches!(t("http://127.0.0.1"), Err(DialError::Address { .. })), "no port");
        assert!(matches!(t("/just/a/path"), Err(DialError::Address { .. })), "no host");
    }

    #[test]
    fn every_dial_error_reads_as_a_failure_to_connect() {
        let io = || std::io::Error::other("x");
        for e in [
            DialError::Address { uri: "u".into() },
            DialError::Tcp { addr: "a".into(), source: io() },
            DialError::Handshake { addr: "a".into(), source: io() },
            DialError::HandshakeTimeout { addr: "a".into() },
        ] {
            assert!(crate::never_sent(&tonic::Status::unavailable(e.to_string())), "{e}");
        }
    }

    use std::net::SocketAddr;

    use keelson_pki::{ClusterCa, IssuedCert};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use crate::tls::{PeerTls, TlsError};

    fn identity(ca: &ClusterCa, cert: &IssuedCert) -> Arc<PeerIdentity> {
        PeerTls::new(ca.cert_pem(), cert.cert_pem.clone(), cert.key_pem.clone()).identity().expect("identity")
    }

    fn replica_cert(ca: &ClusterCa) -> IssuedCert {
        ca.issue_serving("r", &["127.0.0.1".into()]).expect("certificate")
    }

    fn first_cert_der(pem: &str) -> Vec<u8> {
        use rustls::pki_types::pem::PemObject;
        rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes()).expect("certificate").to_vec()
    }

    /// A TLS echo server on `identity`'s server configuration; reports the client
    /// certificate of every accepted handshake.
    async fn echo_server(identity: Arc<PeerIdentity>) -> (SocketAddr, tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let acceptor = tokio_rustls::TlsAcceptor::from(identity.server_config());
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                    let client = tls.get_ref().1.peer_certificates().and_then(|c| c.first()).map(|c| c.to_vec());
                    let _ = tx.send(client.unwrap_or_default());
                    let mut buf = [0u8; 64];
                    while let Ok(n) = tls.read(&mut buf).await {
                        if n == 0 || tls.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (addr, rx)
    }

    async fn echo(tls: &mut TlsStream<TcpStream>, msg: &[u8]) -> Vec<u8> {
        tls.write_all(msg).await.expect("write");
        let mut buf = vec![0u8; msg.len()];
        tls.read_exact(&mut buf).await.expect("read");
        buf
    }

    fn uri(addr: SocketAddr) -> Uri {
        format!("http://{addr}").parse().expect("uri")
    }

    #[tokio::test]
    async fn new_handshakes_present_the_replaced_certificates_while_open_connections_keep_working() {
        let ca = ClusterCa::generate("t").expect("CA");
        let (server_cert, client_cert) = (replica_cert(&ca), replica_cert(&ca));
        let (server, client) = (identity(&ca, &server_cert), identity(&ca, &client_cert));
        let (addr, mut seen) = echo_server(server.clone()).await;

        let mut old = dial(client.client_config(), uri(addr)).await.expect("mutual TLS");
        assert_eq!(old.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        assert_eq!(old.get_ref().1.peer_certificates().expect("server cert")[0].to_vec(), first_cert_der(&server_cert.cert_pem));
        assert_eq!(seen.recv().await.expect("accepted"), first_cert_der(&client_cert.cert_pem));
        assert_eq!(echo(&mut old, b"before").await, b"before");

        let (server_new, client_new) = (replica_cert(&ca), replica_cert(&ca));
        server.replace(&server_new.cert_pem, &server_new.key_pem).expect("server certificate replaced");
        client.replace(&client_new.cert_pem, &client_new.key_pem).expect("client certificate replaced");
        assert_eq!(server.cert_pem(), server_new.cert_pem);

        let mut new = dial(client.client_config(), uri(addr)).await.expect("mutual TLS after replacing");
        assert_eq!(new.get_ref().1.peer_certificates().expect("server cert")[0].to_vec(), first_cert_der(&server_new.cert_pem));
        assert_eq!(seen.recv().await.expect("accepted"), first_cert_der(&client_new.cert_pem));
        assert_eq!(echo(&mut new, b"new").await, b"new");
        assert_eq!(echo(&mut old, b"still").await, b"still", "the connection made before keeps working");
    }

    #[tokio::test]
    async fn clients_without_a_certificate_of_the_ca_are_refused() {
        let ca = ClusterCa::generate("t").expect("CA");
        let server = identity(&ca, &replica_cert(&ca));
        let (addr, _seen) = echo_server(server).await;
        // A certificate from another CA, by a client that trusts the cluster CA.
        let other = ClusterCa::generate("other").expect("CA");
        let foreign = other.issue_client("intruder", &[]).expect("certificate");
        let foreign = PeerTls::new(ca.cert_pem(), foreign.cert_pem, foreign.key_pem).identity().expect("identity");
        let refused = async |config: Arc<ClientConfig>| match dial(config, uri(addr)).await {
            // TLS 1.3: the client finishes first; the server's refusal arrives as an alert.
            Ok(mut tls) => {
                let _ = tls.write_all(b"x").await;
                let mut buf = [0u8; 1];
                assert!(tls.read_exact(&mut buf).await.is_err(), "the server must not answer");
            }
            Err(e) => assert!(matches!(e, DialError::Handshake { .. }), "{e}"),
        };
        refused(foreign.client_config()).await;
        // No client certificate at all.
        let mut roots = rustls::RootCertStore::empty();
        roots.add(rustls::pki_types::CertificateDer::from(first_cert_der(ca.cert_pem()))).expect("root");
        let anonymous = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        refused(Arc::new(anonymous)).await;
        // A client that does not trust the cluster CA refuses the server.
        let c = other.issue_client("x", &[]).expect("certificate");
        let distrustful = PeerTls::new(other.cert_pem(), c.cert_pem, c.key_pem).identity().expect("identity");
        assert!(matches!(dial(distrustful.client_config(), uri(addr)).await, Err(DialError::Handshake { .. })));
    }

    #[tokio::test]
    async fn dialing_nothing_fails_fast_with_a_connect_error() {
        let ca = ClusterCa::generate("t").expect("CA");
        let client = identity(&ca, &replica_cert(&ca));
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
        let e = dial(client.client_config(), format!("http://127.0.0.1:{port}").parse().expect("uri")).await.expect_err("nothing listens");
        assert!(matches!(e, DialError::Tcp { .. }), "{e}");
        // Through a channel, as callers see it: a status that reads as never sent.
        let ep = Endpoint::from_shared(format!("http://127.0.0.1:{port}")).expect("endpoint");
        let mut grpc = keelson_proto::v1::cluster_client::ClusterClient::new(client.lazy_channel(ep));
        let status = grpc.status(keelson_proto::v1::Envelope { payload: Vec::new() }).await.expect_err("nothing listens");
        assert!(crate::never_sent(&status), "{status:?}");
    }

    #[test]
    fn replacements_must_match_their_key_and_come_from_the_cluster_ca() {
        let ca = ClusterCa::generate("t").expect("CA");
        let first = replica_cert(&ca);
        let id = identity(&ca, &first);
        let (a, b) = (replica_cert(&ca), replica_cert(&ca));
        assert!(matches!(id.replace(&a.cert_pem, &b.key_pem), Err(TlsError::Key(_))), "key of another certificate");
        let other = ClusterCa::generate("other").expect("CA");
        let foreign = replica_cert(&other);
        assert!(matches!(id.replace(&foreign.cert_pem, &foreign.key_pem), Err(TlsError::Untrusted(_))));
        assert!(matches!(id.replace("garbage", &a.key_pem), Err(TlsError::Pem { .. })));
        assert_eq!(id.cert_pem(), first.cert_pem, "nothing was replaced");
        assert!(matches!(PeerTls::new(ca.cert_pem(), a.cert_pem.clone(), b.key_pem.clone()).identity(), Err(TlsError::Key(_))));
        id.replace(&a.cert_pem, &a.key_pem).expect("a good replacement");
        assert_eq!(id.cert_pem(), a.cert_pem);
    }
}
