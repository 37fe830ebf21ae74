//! Everything a server of the cluster holds in its PKI directory: the CA (certificate
//! and key), the Secrets encryption key, the service-account signing key and the
//! initial server join token.
//!
//! Files: `ca.crt`, `ca.key`, `secrets.key` (32 raw bytes), `sa.key` (PKCS#8 PEM,
//! ECDSA P-256), `server-token`. Private files are mode 0600.

use std::path::Path;

use ring::rand::{SecureRandom, SystemRandom};

use crate::{write_file_bytes, ClusterCa, JoinToken, PkiError};

/// The cluster's shared key material.
pub struct ClusterMaterial {
    pub ca: ClusterCa,
    pub secrets_key: Vec<u8>,
    pub service_account_key_pem: String,
}

fn read(path: &Path) -> Result<Vec<u8>, PkiError> {
    std::fs::read(path).map_err(|source| PkiError::Io { path: path.to_path_buf(), source })
}

impl ClusterMaterial {
    /// Loads the material from `dir`, or `None` when `dir` holds no CA.
    pub fn load(dir: &Path) -> Result<Option<Self>, PkiError> {
        let Some(ca) = ClusterCa::load(dir)? else { return Ok(None) };
        let secrets_key = read(&dir.join("secrets.key"))?;
        let service_account_key_pem = String::from_utf8_lossy(&read(&dir.join("sa.key"))?).into_owned();
        Ok(Some(Self { ca, secrets_key, service_account_key_pem }))
    }

    /// Loads the material from `dir`, creating what is missing (a new cluster).
    pub fn load_or_create(dir: &Path, cluster_name: &str) -> Result<Self, PkiError> {
        ClusterCa::load_or_create(dir, cluster_name)?;
        let sk = dir.join("secrets.key");
        if !sk.exists() {
            let mut key = [0u8; 32];
            SystemRandom::new().fill(&mut key).expect("the system RNG works");
            write_file_bytes(&sk, &key, true)?;
        }
        let sa = dir.join("sa.key");
        if !sa.exists() {
            write_file_bytes(&sa, rcgen::KeyPair::generate()?.serialize_pem().as_bytes(), true)?;
        }
        Ok(Self::load(dir)?.expect("just created"))
    }

    /// Puts an existing cluster's Secrets key into `dir` (a new PKI directory, for a
    /// cluster restored from a backup), so that [`Self::load_or_create`] keeps it and
    /// creates only a new CA and service-account key around it.
    pub fn place_secrets_key(dir: &Path, key: &[u8]) -> Result<(), PkiError> {
        std::fs::create_dir_all(dir).map_err(|source| PkiError::Io { path: dir.to_path_buf(), source })?;
        write_file_bytes(&dir.join("secrets.key"), key, true)
    }

    /// Saves material received when joining.
    pub fn save(dir: &Path, ca_cert_pem: &str, ca_key_pem: &str, secrets_key: &[u8], sa_key_pem: &str) -> Result<Self, PkiError> {
        std::fs::create_dir_all(dir).map_err(|source| PkiError::Io { path: dir.to_path_buf(), source })?;
        ClusterCa::from_pem(ca_cert_pem, ca_key_pem)?.save(dir)?;
        write_file_bytes(&dir.join("secrets.key"), secrets_key, true)?;
        write_file_bytes(&dir.join("sa.key"), sa_key_pem.as_bytes(), true)?;
        Ok(Self::load(dir)?.expect("just saved"))
    }

    /// The initial server join token (`server-token`), created once.
    pub fn server_token(&self, dir: &Path) -> Result<JoinToken, PkiError> {
        let path = dir.join("server-token");
        if let Ok(text) = std::fs::read_to_string(&path) {
            if let Ok(t) = JoinToken::parse(&text) {
                return Ok(t);
            }
        }
        let t = JoinToken::generate(self.ca.cert_pem())?;
        write_file_bytes(&path, format!("{t}\n").as_bytes(), true)?;
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_placed_secrets_key_is_kept_by_a_new_cluster() {
        let dir = tempfile::tempdir().unwrap();
        ClusterMaterial::place_secrets_key(&dir.path().join("pki"), &[7u8; 32]).unwrap();
        let m = ClusterMaterial::load_or_create(&dir.path().join("pki"), "restored").unwrap();
        assert_eq!(m.secrets_key, vec![7u8; 32]);
        assert!(!m.service_account_key_pem.is_empty());
    }

    #[test]
    fn created_once_then_loaded_and_copied_by_joiners() {
        let dir = tempfile::tempdir().unwrap();
        let a = ClusterMaterial::load_or_create(dir.path(), "c").unwrap();
        let b = ClusterMaterial::load_or_create(dir.path(), "c").unwrap();
        assert_eq!(a.secrets_key, b.secrets_key);
        assert_eq!(a.secrets_key.len(), 32);
        assert_eq!(a.service_account_key_pem, b.service_account_key_pem);
        let t1 = a.server_token(dir.path()).unwrap();
        assert_eq!(t1, b.server_token(dir.path()).unwrap());
        assert_eq!(t1.ca_hash, crate::ca_hash(a.ca.cert_pem()).unwrap());
        let joined = tempfile::tempdir().unwrap();
        let c = ClusterMaterial::save(joined.path(), a.ca.cert_pem(), &a.ca.key_pem(), &a.secrets_key, &a.service_account_key_pem).unwrap();
        assert_eq!(c.ca.cert_pem(), a.ca.cert_pem());
        assert!(ClusterMaterial::load(tempfile::tempdir().unwrap().path()).unwrap().is_none());
    }
}
