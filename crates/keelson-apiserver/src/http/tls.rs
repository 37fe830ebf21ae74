//! HTTPS serving: TLS with optional client certificates, one identity per connection.
//!
//! The serving certificate is a [`ReloadableCert`]: `keelson_pki::rotation` replaces it
//! before it expires, and new handshakes get the new one while open connections keep
//! theirs.

use std::sync::Arc;

use keelson_client::tls::ReloadableCert;
use rustls::pki_types::CertificateDer;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

use crate::ApiServerError;

/// Who is on the other end of a connection, from its client certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub user: String,
    pub groups: Vec<String>,
}

fn pem_certs(pem: &str) -> Result<Vec<CertificateDer<'static>>, ApiServerError> {
    rustls_pemfile::certs(&mut pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ApiServerError::Tls(format!("reading certificates: {e}")))
}

/// A rustls server config serving `cert`, asking for (but not requiring) client
/// certificates signed by `client_ca_pem`.
pub fn server_config(cert: Arc<ReloadableCert>, client_ca_pem: &str) -> Result<ServerConfig, ApiServerError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    for c in pem_certs(client_ca_pem)? {
        roots.add(c).map_err(|e| ApiServerError::Tls(format!("client CA: {e}")))?;
    }
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .map_err(|e| ApiServerError::Tls(format!("client verifier: {e}")))?;
    let mut cfg = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ApiServerError::Tls(e.to_string()))?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(cert);
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(cfg)
}

/// The identity in a verified client certificate: CN = user, and every O attribute of
/// the subject a group, in order (as Kubernetes reads them).
pub fn identity_of(cert: &CertificateDer<'_>) -> Option<Identity> {
    let (user, groups) = keelson_pki::client_identity(cert.as_ref())?;
    Some(Identity { user, groups })
}
