//! Live TLS identities: a certified key that can be replaced while connections use it.
//!
//! - [`ReloadableCert`]: a certificate and key that both rustls sides resolve at every
//!   handshake, replaceable at any time (the API server's serving certificate is one);
//! - [`PeerIdentity`]: a process's mutual-TLS identity for replica gRPC traffic: the
//!   cluster CA plus a [`ReloadableCert`], and the rustls server and client
//!   configurations built on them. Replacing the certificate changes what every later
//!   handshake presents, on both sides; connections already open keep theirs (TLS
//!   authenticates only at the handshake).
//!
//! Session resumption is off for peer traffic: every new connection is a full handshake
//! that presents and checks the certificates in use at that moment (a resumed session
//! would carry the identity of the certificate it was first made with).

use std::fmt;
use std::sync::{Arc, RwLock};

use keelson_pki::rotation::LiveCert;
use keelson_pki::IssuedCert;
use rustls::client::{ResolvesClientCert, Resumption};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{PrivateKeyDer, UnixTime};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::{NoServerSessionStorage, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore, ServerConfig, SignatureScheme};

use super::{pem_certs, PeerTls, TlsError};

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A certificate chain and its private key, checked to belong together.
fn certified_key(cert_pem: &str, key_pem: &str) -> Result<Arc<CertifiedKey>, TlsError> {
    let certs = pem_certs("certificate", cert_pem)?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| TlsError::Pem { what: "private key", reason: e.to_string() })?;
    let ck = CertifiedKey::from_der(certs, key, &provider()).map_err(|e| TlsError::Key(e.to_string()))?;
    Ok(Arc::new(ck))
}

/// A certificate and key that rustls resolves at every handshake, as a server
/// ([`ResolvesServerCert`]) or as a client ([`ResolvesClientCert`]), replaceable while
/// in use.
pub struct ReloadableCert {
    current: RwLock<(Arc<CertifiedKey>, String)>,
}

impl fmt::Debug for ReloadableCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The certificate only; never the key.
        f.debug_struct("ReloadableCert").field("cert_pem", &self.cert_pem()).finish_non_exhaustive()
    }
}

impl ReloadableCert {
    /// A certificate chain (PEM, end entity first) and its private key (PEM). Fails when
    /// either does not parse or the key is not the certificate's.
    pub fn new(cert_pem: &str, key_pem: &str) -> Result<Self, TlsError> {
        Ok(Self { current: RwLock::new((certified_key(cert_pem, key_pem)?, cert_pem.to_string())) })
    }

    /// Presents `cert_pem`/`key_pem` from the next handshake on; checked as in
    /// [`ReloadableCert::new`], and on failure the current certificate stays.
    pub fn replace(&self, cert_pem: &str, key_pem: &str) -> Result<(), TlsError> {
        let ck = certified_key(cert_pem, key_pem)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = (ck, cert_pem.to_string());
        Ok(())
    }

    /// The certificate presented now (PEM).
    pub fn cert_pem(&self) -> String {
        self.current.read().unwrap_or_else(|e| e.into_inner()).1.clone()
    }

    fn key(&self) -> Arc<CertifiedKey> {
        self.current.read().unwrap_or_else(|e| e.into_inner()).0.clone()
    }
}

impl ResolvesServerCert for ReloadableCert {
    fn resolve(&self, _hello: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.key())
    }
}

impl ResolvesClientCert for ReloadableCert {
    fn resolve(&self, _root_hint_subjects: &[&[u8]], _sigschemes: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        Some(self.key())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

impl LiveCert for ReloadableCert {
    fn cert_pem(&self) -> String {
        ReloadableCert::cert_pem(self)
    }

    fn install(&self, cert: &IssuedCert) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        Ok(self.replace(&cert.cert_pem, &cert.key_pem)?)
    }
}

/// A process's live mutual-TLS identity for replica traffic (see the module docs).
///
/// Servers built on [`PeerIdentity::server_config`] require a client certificate signed
/// by the cluster CA; clients built on [`PeerIdentity::client_config`] trust only the
/// cluster CA. Both present the current certificate, which [`PeerIdentity::replace`]
/// swaps. Shared as an `Arc` by the replica's server, its peer dialer, store clients and
/// the rotation task.
pub struct PeerIdentity {
    ca_pem: String,
    verifier: Arc<dyn ClientCertVerifier>,
    cert: Arc<ReloadableCert>,
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
}

impl fmt::Debug for PeerIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerIdentity").field("ca_pem", &self.ca_pem).field("cert", &self.cert).finish_non_exhaustive()
    }
}

impl PeerIdentity {
    /// The identity `tls` describes. Fails when the CA, the certificate or the key does
    /// not parse, or the key is not the certificate's. The certificate itself is not
    /// checked against the CA here (a peer that does not trust it refuses it).
    pub fn new(tls: &PeerTls) -> Result<Arc<Self>, TlsError> {
        let provider = provider();
        let mut roots = RootCertStore::empty();
        for c in pem_certs("CA certificate", &tls.ca_pem)? {
            roots.add(c).map_err(|e| TlsError::Pem { what: "CA certificate", reason: e.to_string() })?;
        }
        let roots = Arc::new(roots);
        let cert = Arc::new(ReloadableCert::new(&tls.cert_pem, &tls.key_pem)?);
        let config_err = |e: rustls::Error| TlsError::Config(e.to_string());

        let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .map_err(|e| TlsError::Config(e.to_string()))?;
        let mut server = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(config_err)?
            .with_client_cert_verifier(verifier.clone())
            .with_cert_resolver(cert.clone());
        server.alpn_protocols = vec![b"h2".to_vec()];
        server.session_storage = Arc::new(NoServerSessionStorage {});
        server.send_tls13_tickets = 0;

        let mut client = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(config_err)?
            .with_root_certificates(roots)
            .with_client_cert_resolver(cert.clone());
        client.alpn_protocols = vec![b"h2".to_vec()];
        client.resumption = Resumption::disabled();

        Ok(Arc::new(Self { ca_pem: tls.ca_pem.clone(), verifier, cert, server: Arc::new(server), client: Arc::new(client) }))
    }

    /// The cluster CA certificate (PEM).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The certificate presented now (PEM).
    pub fn cert_pem(&self) -> String {
        self.cert.cert_pem()
    }

    /// The server side: presents the current certificate, requires a client certificate
    /// signed by the cluster CA, speaks HTTP/2 (ALPN `h2`).
    pub fn server_config(&self) -> Arc<ServerConfig> {
        self.server.clone()
    }

    /// The client side: trusts only the cluster CA, presents the current certificate,
    /// speaks HTTP/2 (ALPN `h2`). The server name to check is given per connection.
    pub fn client_config(&self) -> Arc<ClientConfig> {
        self.client.clone()
    }

    /// Presents `cert_pem`/`key_pem` from the next handshake on, on both sides. The new
    /// certificate must parse, match its key, and be valid now as a client certificate of
    /// the cluster CA (what every peer will check); otherwise the current one stays.
    pub fn replace(&self, cert_pem: &str, key_pem: &str) -> Result<(), TlsError> {
        let chain = pem_certs("certificate", cert_pem)?;
        let (end_entity, intermediates) = chain.split_first().expect("pem_certs returns at least one");
        self.verifier
            .verify_client_cert(end_entity, intermediates, UnixTime::now())
            .map_err(|e| TlsError::Untrusted(e.to_string()))?;
        self.cert.replace(cert_pem, key_pem)
    }
}

impl LiveCert for PeerIdentity {
    fn cert_pem(&self) -> String {
        PeerIdentity::cert_pem(self)
    }

    fn install(&self, cert: &IssuedCert) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        Ok(self.replace(&cert.cert_pem, &cert.key_pem)?)
    }
}
