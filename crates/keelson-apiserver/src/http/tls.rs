//! HTTPS serving: TLS with optional client certificates, one identity per connection.

use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
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

/// The serving certificate, replaceable while the server runs (rotation without
/// downtime: new handshakes get the new certificate, open connections keep theirs).
#[derive(Debug)]
pub struct ReloadableCert {
    current: std::sync::RwLock<(Arc<CertifiedKey>, String)>,
}

fn certified_key(cert_pem: &str, key_pem: &str) -> Result<Arc<CertifiedKey>, ApiServerError> {
    let certs = pem_certs(cert_pem)?;
    let key: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut key_pem.as_bytes())
        .map_err(|e| ApiServerError::Tls(format!("reading the serving key: {e}")))?
        .ok_or_else(|| ApiServerError::Tls("no private key in the serving key file".into()))?;
    let signing = rustls::crypto::ring::default_provider()
        .key_provider
        .load_private_key(key)
        .map_err(|e| ApiServerError::Tls(format!("serving key: {e}")))?;
    Ok(Arc::new(CertifiedKey::new(certs, signing)))
}

impl ReloadableCert {
    pub fn new(cert_pem: &str, key_pem: &str) -> Result<Self, ApiServerError> {
        Ok(Self { current: std::sync::RwLock::new((certified_key(cert_pem, key_pem)?, cert_pem.to_string())) })
    }

    /// Serves `cert_pem`/`key_pem` from the next handshake on.
    pub fn replace(&self, cert_pem: &str, key_pem: &str) -> Result<(), ApiServerError> {
        let ck = certified_key(cert_pem, key_pem)?;
        *self.current.write().expect("lock") = (ck, cert_pem.to_string());
        Ok(())
    }

    /// The certificate being served (PEM).
    pub fn cert_pem(&self) -> String {
        self.current.read().expect("lock").1.clone()
    }
}

impl ResolvesServerCert for ReloadableCert {
    fn resolve(&self, _hello: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().expect("lock").0.clone())
    }
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

/// The identity in a verified client certificate: CN = user, O = groups.
pub fn identity_of(cert: &CertificateDer<'_>) -> Option<Identity> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let subject = parsed.subject();
    let user = subject.iter_common_name().next()?.as_str().ok()?.to_string();
    let groups = subject.iter_organization().filter_map(|o| o.as_str().ok().map(String::from)).collect();
    Some(Identity { user, groups })
}

/// Reissuing the serving certificate before it expires.
#[derive(Clone, Debug)]
pub struct CertRotation {
    pub ca_cert_pem: String,
    pub ca_key_pem: String,
    pub common_name: String,
    pub names: Vec<String>,
    /// Validity of each new certificate.
    pub validity: std::time::Duration,
    /// Reissue when less than this is left.
    pub renew_before: std::time::Duration,
    pub check_every: std::time::Duration,
    /// Where to save the new certificate (`apiserver.crt`/`.key`), if anywhere.
    pub save_dir: Option<std::path::PathBuf>,
}

/// Checks the serving certificate every `check_every` and replaces it when it is close
/// to expiry, until `shutdown`.
pub async fn rotate(cert: Arc<ReloadableCert>, rot: CertRotation, shutdown: tokio_util::sync::CancellationToken) {
    loop {
        let now = jiff::Timestamp::now().as_second();
        let due = match keelson_pki::certificate_expiry(&cert.cert_pem()) {
            Ok((exp, _)) => exp - now < rot.renew_before.as_secs() as i64,
            Err(_) => true,
        };
        if due {
            let issued = keelson_pki::ClusterCa::from_pem(&rot.ca_cert_pem, &rot.ca_key_pem).and_then(|ca| {
                ca.issue_serving_valid_for(&rot.common_name, &rot.names, keelson_pki::Duration::seconds(rot.validity.as_secs() as i64))
            });
            match issued {
                Ok(new) => match cert.replace(&new.cert_pem, &new.key_pem) {
                    Ok(()) => {
                        tracing::info!("rotated the API serving certificate");
                        if let Some(dir) = &rot.save_dir {
                            if let Err(e) = new.save(dir, "apiserver") {
                                tracing::warn!(error = %e, "saving the rotated certificate");
                            }
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "installing the rotated certificate"),
                },
                Err(e) => tracing::warn!(error = %e, "reissuing the API serving certificate"),
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(rot.check_every) => {}
        }
    }
}
