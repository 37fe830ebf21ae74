//! Mutual TLS for every gRPC connection to a replica: replica to replica (Raft transport,
//! forwarded writes, ReadIndex, membership calls) and store clients to replicas.
//!
//! A [`PeerTls`] holds the cluster CA and one process's certificate and key. With it:
//! - a replica's server accepts only connections that present a certificate signed by
//!   the cluster CA (client authentication is required, not optional), and proves its own
//!   identity with its certificate;
//! - a client (a store client or a replica calling a peer) dials `https://host:port`,
//!   trusts only the cluster CA, checks the server's certificate against `host` (a DNS
//!   name, or an IP address matched against the certificate's IP SANs) and presents its
//!   own certificate.
//!
//! Crypto is rustls with the ring provider.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

/// Longest a TLS handshake may take, on either side, before the connection is dropped
/// (so a stopped peer cannot hold a connection attempt open).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Unusable TLS material.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read.
    #[error("{path}: {source}")]
    Read { path: PathBuf, #[source] source: std::io::Error },
    /// A PEM text holds no usable certificate or key.
    #[error("{what}: {reason}")]
    Pem { what: &'static str, reason: String },
}

/// The cluster CA plus this process's certificate and private key, all PEM.
///
/// The certificate must be signed by the CA and carry the extended key usages its holder
/// needs: ClientAuth to call replicas, and (for a replica) also ServerAuth with a SAN for
/// every host part other processes dial it by (`keelson_pki::ClusterCa::issue_serving`
/// issues exactly that; `issue_client` gives a client-only certificate).
#[derive(Clone, PartialEq, Eq)]
pub struct PeerTls {
    /// The cluster CA certificate: the only issuer trusted, for servers and clients alike.
    pub ca_pem: String,
    /// This process's certificate (optionally followed by intermediates).
    pub cert_pem: String,
    /// The private key of `cert_pem` (PKCS#8, SEC1 or PKCS#1).
    pub key_pem: String,
}

impl fmt::Debug for PeerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the private key.
        f.debug_struct("PeerTls").field("ca_pem", &self.ca_pem).field("cert_pem", &self.cert_pem).finish_non_exhaustive()
    }
}

/// The admin client identity kept in a cluster PKI directory (`ca.crt`, `admin.crt`,
/// `admin.key`), or `None` when the directory holds no admin certificate.
pub fn admin_tls(pki_dir: &Path) -> Result<Option<PeerTls>, TlsError> {
    let (ca, cert, key) = (pki_dir.join("ca.crt"), pki_dir.join("admin.crt"), pki_dir.join("admin.key"));
    if !ca.exists() || !cert.exists() || !key.exists() {
        return Ok(None);
    }
    PeerTls::from_files(&ca, &cert, &key).map(Some)
}

impl PeerTls {
    /// Material from PEM texts. Not checked here; see [`PeerTls::validate`].
    pub fn new(ca_pem: impl Into<String>, cert_pem: impl Into<String>, key_pem: impl Into<String>) -> Self {
        Self { ca_pem: ca_pem.into(), cert_pem: cert_pem.into(), key_pem: key_pem.into() }
    }

    /// Reads the three PEM files and validates them.
    pub fn from_files(ca: &Path, cert: &Path, key: &Path) -> Result<Self, TlsError> {
        let read = |p: &Path| std::fs::read_to_string(p).map_err(|source| TlsError::Read { path: p.to_path_buf(), source });
        let tls = Self::new(read(ca)?, read(cert)?, read(key)?);
        tls.validate()?;
        Ok(tls)
    }

    /// Checks that the CA and the certificate each hold at least one certificate and the
    /// key one private key. Does not check that they belong together: a mismatch shows up
    /// when a server starts or a connection is made.
    pub fn validate(&self) -> Result<(), TlsError> {
        certs("CA certificate", &self.ca_pem)?;
        certs("certificate", &self.cert_pem)?;
        PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes())
            .map_err(|e| TlsError::Pem { what: "private key", reason: e.to_string() })?;
        Ok(())
    }

    /// The server side: serve with this certificate and REQUIRE every client to present
    /// a certificate signed by the CA. Handshakes are bounded by [`HANDSHAKE_TIMEOUT`].
    ///
    /// Installs rustls's ring provider as the process default if none is installed yet
    /// (tonic's server takes the process default).
    pub fn server_config(&self) -> ServerTlsConfig {
        install_ring_provider();
        ServerTlsConfig::new()
            .identity(Identity::from_pem(&self.cert_pem, &self.key_pem))
            .client_ca_root(Certificate::from_pem(&self.ca_pem))
            .client_auth_optional(false)
            .timeout(HANDSHAKE_TIMEOUT)
    }

    /// The client side: trust only the CA and present this certificate. The server name
    /// checked is the host part of the `https://host:port` URI dialed (tonic's default);
    /// handshakes are bounded by [`HANDSHAKE_TIMEOUT`].
    pub fn client_config(&self) -> ClientTlsConfig {
        install_ring_provider();
        ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca_pem))
            .identity(Identity::from_pem(&self.cert_pem, &self.key_pem))
            .timeout(HANDSHAKE_TIMEOUT)
    }
}

fn certs(what: &'static str, pem: &str) -> Result<(), TlsError> {
    let mut n = 0;
    for c in CertificateDer::pem_slice_iter(pem.as_bytes()) {
        c.map_err(|e| TlsError::Pem { what, reason: e.to_string() })?;
        n += 1;
    }
    if n == 0 {
        return Err(TlsError::Pem { what, reason: "no PEM certificate found".into() });
    }
    Ok(())
}

/// Makes ring the process's rustls provider unless one is already installed (then that
/// one stays).
fn install_ring_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn material() -> PeerTls {
        let ca = keelson_pki::ClusterCa::generate("t").expect("CA");
        let c = ca.issue_serving("r1", &["127.0.0.1".into()]).expect("cert");
        PeerTls::new(ca.cert_pem(), c.cert_pem, c.key_pem)
    }

    #[test]
    fn validate_accepts_issued_material_and_rejects_missing_parts() {
        let good = material();
        good.validate().expect("valid");
        for bad in [
            PeerTls { ca_pem: String::new(), ..good.clone() },
            PeerTls { cert_pem: "not a certificate".into(), ..good.clone() },
            PeerTls { key_pem: good.cert_pem.clone(), ..good.clone() },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn from_files_reads_and_validates() {
        let dir = tempfile::tempdir().expect("dir");
        let m = material();
        for (name, text) in [("ca.crt", &m.ca_pem), ("r.crt", &m.cert_pem), ("r.key", &m.key_pem)] {
            std::fs::write(dir.path().join(name), text).expect("write");
        }
        let p = |n: &str| dir.path().join(n);
        assert_eq!(PeerTls::from_files(&p("ca.crt"), &p("r.crt"), &p("r.key")).expect("load"), m);
        assert!(matches!(PeerTls::from_files(&p("ca.crt"), &p("r.crt"), &p("missing")), Err(TlsError::Read { .. })));
        assert!(matches!(PeerTls::from_files(&p("ca.crt"), &p("r.crt"), &p("r.crt")), Err(TlsError::Pem { .. })));
    }

    #[test]
    fn debug_never_shows_the_private_key() {
        let m = material();
        assert!(!format!("{m:?}").contains("PRIVATE KEY"));
    }
}
