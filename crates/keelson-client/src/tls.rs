//! Mutual TLS for every gRPC connection to a replica: replica to replica (Raft transport,
//! forwarded writes, ReadIndex, membership calls) and store clients to replicas.
//!
//! A [`PeerTls`] holds the cluster CA and one process's certificate and key, as PEM
//! texts; a [`PeerIdentity`] made from it is the live form that servers and clients use,
//! whose certificate can be replaced while they run (certificate rotation). With it:
//! - a replica's server accepts only connections that present a certificate signed by
//!   the cluster CA (client authentication is required, not optional), and proves its own
//!   identity with its certificate;
//! - a client (a store client or a replica calling a peer) dials `host:port`, trusts only
//!   the cluster CA, checks the server's certificate against `host` (a DNS name, or an IP
//!   address matched against the certificate's IP SANs) and presents its own certificate
//!   ([`PeerIdentity::lazy_channel`]).
//!
//! Every new connection presents the certificate in use at that moment; connections
//! already open keep the one they were made with. Crypto is rustls with the ring
//! provider.

mod accept;
mod connector;
mod identity;

pub use accept::{spawn_accept, TlsIncoming};
pub use connector::DialError;
pub use identity::{PeerIdentity, ReloadableCert};

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

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
    /// The private key is unusable or not the certificate's.
    #[error("private key: {0}")]
    Key(String),
    /// A replacement certificate is not valid now as a certificate of the cluster CA.
    #[error("certificate not accepted by the cluster CA: {0}")]
    Untrusted(String),
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Config(String),
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
    /// key one private key. Does not check that they belong together;
    /// [`PeerTls::identity`] does.
    pub fn validate(&self) -> Result<(), TlsError> {
        pem_certs("CA certificate", &self.ca_pem)?;
        pem_certs("certificate", &self.cert_pem)?;
        PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes())
            .map_err(|e| TlsError::Pem { what: "private key", reason: e.to_string() })?;
        Ok(())
    }

    /// The live identity this material describes (see [`PeerIdentity::new`]).
    pub fn identity(&self) -> Result<Arc<PeerIdentity>, TlsError> {
        PeerIdentity::new(self)
    }
}

/// The certificates in a PEM text (at least one).
fn pem_certs(what: &'static str, pem: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem { what, reason: e.to_string() })?;
    if certs.is_empty() {
        return Err(TlsError::Pem { what, reason: "no PEM certificate found".into() });
    }
    Ok(certs)
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
