//! TLS termination: certificates from the `kubernetes.io/tls` Secrets named by
//! `spec.tls[].secretName`, for that entry's hosts, chosen by SNI (exact name, then
//! wildcard; [`crate::host`]), and a self-signed default certificate for every other
//! name. The choice of Secret per host is pure ([`choose_secrets`]); [`CertResolver`]
//! answers each handshake from the current table, which [`CertResolver::replace`] swaps,
//! so a changed Secret is served to new connections while open ones keep theirs.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::networking::v1::Ingress;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::host::{self, HostMap};
use crate::routes::Problem;

/// The Secret type the certificates come from.
pub const TLS_SECRET_TYPE: &str = "kubernetes.io/tls";

/// A certificate could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// `tls.crt` or `tls.key` is missing or holds no PEM certificate or key.
    #[error("{0}")]
    Pem(String),
    /// The key is of a kind rustls cannot sign with.
    #[error("unusable private key: {0}")]
    Key(#[source] rustls::Error),
    /// The default certificate could not be made.
    #[error("making the default certificate: {0}")]
    Generate(#[source] rcgen::Error),
}

/// `namespace/name` of a Secret.
pub type SecretKey = (String, String);

/// Which Secret serves which host pattern: for each of our Ingresses, oldest first, each
/// `spec.tls` entry's hosts (the rules' hosts when it lists none) go to its Secret unless
/// an older Ingress named one for that host. An entry without `secretName` leaves its
/// hosts to the default certificate.
pub fn choose_secrets(ours_oldest_first: &[&Ingress]) -> HostMap<SecretKey> {
    let mut out = HostMap::default();
    for ing in ours_oldest_first {
        let ns = ing.metadata.namespace.clone().unwrap_or_default();
        let Some(spec) = &ing.spec else { continue };
        for t in spec.tls.iter().flatten() {
            let Some(secret) = &t.secret_name else { continue };
            let hosts: Vec<String> = match &t.hosts {
                Some(h) if !h.is_empty() => h.clone(),
                _ => spec.rules.iter().flatten().filter_map(|r| r.host.clone()).collect(),
            };
            for h in hosts {
                out.entry_or(&h, || (ns.clone(), secret.clone()));
            }
        }
    }
    out
}

/// The certificate chain and key of a `kubernetes.io/tls` Secret.
pub fn certified_key(secret: &Secret) -> Result<CertifiedKey, TlsError> {
    let data = secret.data.as_ref();
    let field = |k: &str| data.and_then(|d| d.get(k)).map(|b| b.0.clone()).ok_or_else(|| TlsError::Pem(format!("no {k}")));
    let (crt, key) = (field("tls.crt")?, field("tls.key")?);
    let certs: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut crt.as_slice()).filter_map(Result::ok).collect();
    if certs.is_empty() {
        return Err(TlsError::Pem("tls.crt holds no PEM certificate".into()));
    }
    let key = rustls_pemfile::private_key(&mut key.as_slice()).ok().flatten().ok_or_else(|| TlsError::Pem("tls.key holds no PEM private key".into()))?;
    let signer = rustls::crypto::ring::sign::any_supported_type(&key).map_err(TlsError::Key)?;
    Ok(CertifiedKey::new(certs, signer))
}

/// The certificates by host for our Ingresses and the Secrets at hand, and the problems
/// (a Secret missing, of another type, or unreadable) on the Ingresses that name them.
pub fn build(ours_oldest_first: &[&Ingress], secrets: &[&Secret]) -> (HostMap<Arc<CertifiedKey>>, Vec<Problem>) {
    let by_key: HashMap<SecretKey, &Secret> =
        secrets.iter().filter_map(|s| Some(((s.metadata.namespace.clone()?, s.metadata.name.clone()?), *s))).collect();
    let mut problems = Vec::new();
    let mut loaded: HashMap<SecretKey, Option<Arc<CertifiedKey>>> = HashMap::new();
    for ing in ours_oldest_first {
        let ns = ing.metadata.namespace.clone().unwrap_or_default();
        for t in ing.spec.iter().flat_map(|s| s.tls.iter().flatten()) {
            let Some(name) = &t.secret_name else { continue };
            let key = (ns.clone(), name.clone());
            let result = match by_key.get(&key) {
                None => Err(("SecretNotFound", format!("TLS Secret {ns}/{name} does not exist; its hosts get the default certificate"))),
                Some(s) if s.type_.as_deref() != Some(TLS_SECRET_TYPE) => Err(("SecretNotTLS", format!("Secret {ns}/{name} is not of type {TLS_SECRET_TYPE}; its hosts get the default certificate"))),
                Some(s) => certified_key(s).map_err(|e| ("SecretUnusable", format!("TLS Secret {ns}/{name}: {e}; its hosts get the default certificate"))),
            };
            match result {
                Ok(ck) => {
                    loaded.insert(key, Some(Arc::new(ck)));
                }
                Err((reason, message)) => {
                    loaded.insert(key, None);
                    problems.push(Problem { namespace: ns.clone(), ingress: ing.metadata.name.clone().unwrap_or_default(), reason, message });
                }
            }
        }
    }
    let chosen = choose_secrets(ours_oldest_first);
    let mut table = HostMap::default();
    chosen.for_each_pattern(|pattern, key| {
        if let Some(Some(ck)) = loaded.get(key) {
            table.entry_or(pattern, || ck.clone());
        }
    });
    (table, problems)
}

/// A self-signed certificate for names no Secret covers.
pub fn default_certificate() -> Result<CertifiedKey, TlsError> {
    let made = rcgen::generate_simple_self_signed(vec!["keelson-ingress-default.invalid".to_string()]).map_err(TlsError::Generate)?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(made.signing_key.serialize_der()));
    let signer = rustls::crypto::ring::sign::any_supported_type(&key).map_err(TlsError::Key)?;
    Ok(CertifiedKey::new(vec![made.cert.der().clone()], signer))
}

/// Answers each handshake with the certificate for its SNI name from the current table.
#[derive(Debug)]
pub struct CertResolver {
    current: RwLock<Arc<HostMap<Arc<CertifiedKey>>>>,
    default: Arc<CertifiedKey>,
}

impl CertResolver {
    pub fn new(default: CertifiedKey) -> Self {
        Self { current: RwLock::new(Arc::new(HostMap::default())), default: Arc::new(default) }
    }

    /// Makes `table` the one new handshakes read.
    pub fn replace(&self, table: HostMap<Arc<CertifiedKey>>) {
        *self.current.write().expect("certificate table lock") = Arc::new(table);
    }

    /// The certificate for `sni` (the default one without a name or a match).
    pub fn for_name(&self, sni: Option<&str>) -> Arc<CertifiedKey> {
        let table = self.current.read().expect("certificate table lock").clone();
        sni.and_then(|n| table.lookup(&host::normalize(n)).cloned()).unwrap_or_else(|| self.default.clone())
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.for_name(hello.server_name()))
    }
}

/// The server configuration over `resolver`: HTTP/2 and HTTP/1.1 by ALPN.
pub fn server_config(resolver: Arc<CertResolver>) -> Result<rustls::ServerConfig, rustls::Error> {
    let mut cfg = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(cfg)
}
