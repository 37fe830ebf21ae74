//! The cluster's public-key infrastructure.
//!
//! - [`ClusterCa`]: the cluster CA (ECDSA P-256), created once by `--cluster-init` or
//!   `keelson up`, kept as `ca.crt` / `ca.key` in a PKI directory;
//! - [`IssuedCert`]: serving certificates for replicas and client certificates for users
//!   (CN = user, one O per group, as Kubernetes reads them; see `client_cert`);
//! - [`kubeconfig`]: a kubeconfig with one context per API endpoint;
//! - [`rotation`]: reissuing a certificate in use before it expires.
//!
//! Architecture invariant: this crate does no networking; it only makes and stores keys.

mod client_cert;
mod join_token;
mod kubeconfig;
mod material;
pub mod rotation;

pub use client_cert::ClientCertError;
pub use join_token::{ca_hash, JoinToken};
pub use kubeconfig::{kubeconfig, KubeconfigContext};
pub use material::ClusterMaterial;

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    SanType,
};
pub use time::Duration;
use time::OffsetDateTime;

/// How long the CA is valid.
pub const CA_VALIDITY: Duration = Duration::days(3650);
/// How long leaf certificates are valid.
pub const LEAF_VALIDITY: Duration = Duration::days(365);

/// A PKI failure.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// Reading or writing a key or certificate file failed.
    #[error("{path}: {source}")]
    Io { path: PathBuf, #[source] source: std::io::Error },
    /// The text given is not a (PEM) certificate.
    #[error("{0}")]
    Unsupported(String),
    /// Key generation, parsing or signing failed.
    #[error("certificate: {0}")]
    Cert(#[from] rcgen::Error),
    /// A client certificate could not be issued.
    #[error(transparent)]
    ClientCert(#[from] ClientCertError),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> PkiError + '_ {
    move |source| PkiError::Io { path: path.to_path_buf(), source }
}

/// A certificate and its private key, both PEM.
#[derive(Clone, Debug)]
pub struct IssuedCert {
    pub cert_pem: String,
    pub key_pem: String,
}

impl IssuedCert {
    /// Writes `NAME.crt` and `NAME.key` (mode 0600) into `dir`.
    pub fn save(&self, dir: &Path, name: &str) -> Result<(), PkiError> {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        write_file(&dir.join(format!("{name}.crt")), &self.cert_pem, false)?;
        write_file(&dir.join(format!("{name}.key")), &self.key_pem, true)
    }

    /// Reads `NAME.crt` and `NAME.key` from `dir`, if both exist.
    pub fn load(dir: &Path, name: &str) -> Result<Option<Self>, PkiError> {
        let (c, k) = (dir.join(format!("{name}.crt")), dir.join(format!("{name}.key")));
        if !c.exists() || !k.exists() {
            return Ok(None);
        }
        Ok(Some(Self {
            cert_pem: std::fs::read_to_string(&c).map_err(io_err(&c))?,
            key_pem: std::fs::read_to_string(&k).map_err(io_err(&k))?,
        }))
    }
}

/// The cluster certificate authority.
pub struct ClusterCa {
    cert_pem: String,
    key: KeyPair,
}

impl ClusterCa {
    /// Creates a new CA named after the cluster.
    pub fn generate(cluster_name: &str) -> Result<Self, PkiError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, format!("{cluster_name}-ca"));
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let now = OffsetDateTime::now_utc();
        params.not_before = now - Duration::hours(1);
        params.not_after = now + CA_VALIDITY;
        let cert = params.self_signed(&key)?;
        Ok(Self { cert_pem: cert.pem(), key })
    }

    /// A CA from its certificate and key (PEM).
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, PkiError> {
        Ok(Self { cert_pem: cert_pem.to_string(), key: KeyPair::from_pem(key_pem)? })
    }

    /// The CA's private key (PEM): only for servers of the cluster.
    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }

    /// The CA certificate (PEM), what clients trust.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// Loads `ca.crt`/`ca.key` from `dir`, or creates and saves a new CA there.
    pub fn load_or_create(dir: &Path, cluster_name: &str) -> Result<Self, PkiError> {
        if let Some(ca) = Self::load(dir)? {
            return Ok(ca);
        }
        let ca = Self::generate(cluster_name)?;
        ca.save(dir)?;
        Ok(ca)
    }

    /// Loads `ca.crt`/`ca.key` from `dir` if present.
    pub fn load(dir: &Path) -> Result<Option<Self>, PkiError> {
        match IssuedCert::load(dir, "ca")? {
            None => Ok(None),
            Some(c) => Ok(Some(Self { cert_pem: c.cert_pem, key: KeyPair::from_pem(&c.key_pem)? })),
        }
    }

    pub fn save(&self, dir: &Path) -> Result<(), PkiError> {
        IssuedCert { cert_pem: self.cert_pem.clone(), key_pem: self.key.serialize_pem() }.save(dir, "ca")
    }

    fn issue_for(&self, mut params: CertificateParams, validity: Duration) -> Result<IssuedCert, PkiError> {
        let key = KeyPair::generate()?;
        let now = OffsetDateTime::now_utc();
        params.not_before = now - Duration::hours(1);
        params.not_after = now + validity;
        params.use_authority_key_identifier_extension = true;
        let issuer = Issuer::from_ca_cert_pem(&self.cert_pem, &self.key)?;
        let cert = params.signed_by(&key, &issuer)?;
        Ok(IssuedCert { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
    }

    /// A serving certificate for `names` (DNS names or IP addresses).
    pub fn issue_serving(&self, common_name: &str, names: &[String]) -> Result<IssuedCert, PkiError> {
        self.issue_serving_valid_for(common_name, names, LEAF_VALIDITY)
    }

    /// A serving certificate valid for `validity` from now.
    pub fn issue_serving_valid_for(&self, common_name: &str, names: &[String], validity: Duration) -> Result<IssuedCert, PkiError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, common_name);
        for n in names {
            let san = match n.parse::<IpAddr>() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName(n.clone().try_into()?),
            };
            if !params.subject_alt_names.contains(&san) {
                params.subject_alt_names.push(san);
            }
        }
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        self.issue_for(params, validity)
    }

    /// A client certificate: CN = `user`, and one O attribute per group, in order
    /// (Kubernetes reads every O as a group). Valid for [`LEAF_VALIDITY`].
    pub fn issue_client(&self, user: &str, groups: &[&str]) -> Result<IssuedCert, PkiError> {
        Ok(client_cert::issue(&self.cert_pem, &self.key, user, groups, LEAF_VALIDITY)?)
    }

    /// Loads `NAME.crt`/`NAME.key` from `dir`, or issues them with `make` and saves them.
    pub fn load_or_issue(
        &self,
        dir: &Path,
        name: &str,
        make: impl FnOnce(&Self) -> Result<IssuedCert, PkiError>,
    ) -> Result<IssuedCert, PkiError> {
        if let Some(c) = IssuedCert::load(dir, name)? {
            return Ok(c);
        }
        let c = make(self)?;
        c.save(dir, name)?;
        Ok(c)
    }
}

/// The Kubernetes identity in a (verified) client certificate, DER: CN = user and every
/// O attribute of the subject a group, in order.
pub fn client_identity(der: &[u8]) -> Option<(String, Vec<String>)> {
    let (_, parsed) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = parsed.subject();
    let user = subject.iter_common_name().next()?.as_str().ok()?.to_string();
    let groups = subject.iter_organization().filter_map(|o| o.as_str().ok().map(String::from)).collect();
    Some((user, groups))
}

/// When a PEM certificate expires (Unix seconds), and its subject common name.
pub fn certificate_expiry(cert_pem: &str) -> Result<(i64, String), PkiError> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes()).map_err(|e| PkiError::Unsupported(format!("not a PEM certificate: {e}")))?;
    let (_, cert) = x509_parser::parse_x509_certificate(&pem.contents).map_err(|e| PkiError::Unsupported(format!("not a certificate: {e}")))?;
    let cn = cert.subject().iter_common_name().next().and_then(|c| c.as_str().ok()).unwrap_or("").to_string();
    Ok((cert.validity().not_after.timestamp(), cn))
}

/// The admin identity: user `kubernetes-admin` in group `system:masters`.
pub const ADMIN_USER: &str = "kubernetes-admin";
pub const ADMIN_GROUP: &str = "system:masters";

fn write_file(path: &Path, content: &str, private: bool) -> Result<(), PkiError> {
    write_file_bytes(path, content.as_bytes(), private)
}

fn write_file_bytes(path: &Path, content: &[u8], private: bool) -> Result<(), PkiError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(if private { 0o600 } else { 0o644 })
        .open(&tmp)
        .map_err(io_err(&tmp))?;
    f.write_all(content).map_err(io_err(&tmp))?;
    f.sync_all().map_err(io_err(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io_err(path))
}

#[cfg(test)]
mod tests;
