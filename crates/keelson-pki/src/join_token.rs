//! Join tokens: `K10<CA hash>::<id>.<secret>`.
//!
//! The CA hash (SHA-256 of the CA certificate's DER, hex) lets a joiner trust the
//! cluster CA it downloads over an unauthenticated connection; `<id>.<secret>` is the
//! bearer credential. Servers keep tokens as Secrets `kube-system/bootstrap-token-<id>`
//! (encrypted at rest) with an expiry and usages (`server`, `node`).

use ring::rand::{SecureRandom, SystemRandom};

use crate::PkiError;

/// A parsed join token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinToken {
    /// Hex SHA-256 of the CA certificate (DER).
    pub ca_hash: String,
    /// 6 characters `[a-z0-9]`.
    pub id: String,
    /// 16 characters `[a-z0-9]`.
    pub secret: String,
}

const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";

fn random_string(n: usize) -> String {
    let rng = SystemRandom::new();
    let mut out = String::with_capacity(n);
    let mut buf = [0u8; 1];
    while out.len() < n {
        rng.fill(&mut buf).expect("the system RNG works");
        // Rejection sampling keeps the distribution uniform.
        if (buf[0] as usize) < 252 {
            out.push(ALPHABET[buf[0] as usize % ALPHABET.len()] as char);
        }
    }
    out
}

/// Hex SHA-256 of the first certificate in `ca_pem`.
pub fn ca_hash(ca_pem: &str) -> Result<String, PkiError> {
    let der = pem_der(ca_pem).ok_or_else(|| PkiError::Unsupported("no certificate in the CA PEM".into()))?;
    let d = ring::digest::digest(&ring::digest::SHA256, &der);
    Ok(d.as_ref().iter().map(|b| format!("{b:02x}")).collect())
}

fn pem_der(pem: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    let start = pem.find("-----BEGIN CERTIFICATE-----")? + "-----BEGIN CERTIFICATE-----".len();
    let end = pem[start..].find("-----END CERTIFICATE-----")? + start;
    let b64: String = pem[start..end].chars().filter(|c| !c.is_whitespace()).collect();
    base64::engine::general_purpose::STANDARD.decode(b64).ok()
}

impl JoinToken {
    /// A new random token for the cluster whose CA is `ca_pem`.
    pub fn generate(ca_pem: &str) -> Result<Self, PkiError> {
        Ok(Self { ca_hash: ca_hash(ca_pem)?, id: random_string(6), secret: random_string(16) })
    }

    pub fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let rest = s.strip_prefix("K10").ok_or("a join token starts with K10")?;
        let (hash, cred) = rest.split_once("::").ok_or("a join token has the form K10<hash>::<id>.<secret>")?;
        let (id, secret) = cred.split_once('.').ok_or("a join token has the form K10<hash>::<id>.<secret>")?;
        let ok = |x: &str, n: usize| x.len() == n && x.bytes().all(|b| ALPHABET.contains(&b));
        if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err("the CA hash of a join token is 64 hex digits".into());
        }
        if !ok(id, 6) || !ok(secret, 16) {
            return Err("a join token's id is 6 and its secret 16 characters of [a-z0-9]".into());
        }
        Ok(Self { ca_hash: hash.to_ascii_lowercase(), id: id.into(), secret: secret.into() })
    }

    /// The bearer credential: `<id>.<secret>`.
    pub fn credential(&self) -> String {
        format!("{}.{}", self.id, self.secret)
    }
}

impl std::fmt::Display for JoinToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "K10{}::{}.{}", self.ca_hash, self.id, self.secret)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_bind_the_ca() {
        let ca = crate::ClusterCa::generate("t").unwrap();
        let t = JoinToken::generate(ca.cert_pem()).unwrap();
        assert_eq!(JoinToken::parse(&t.to_string()).unwrap(), t);
        assert_eq!(t.ca_hash, ca_hash(ca.cert_pem()).unwrap());
        let other = crate::ClusterCa::generate("t").unwrap();
        assert_ne!(ca_hash(other.cert_pem()).unwrap(), t.ca_hash);
        for bad in ["", "K10abc::x.y", &t.to_string().replace("::", ":"), &format!("K10{}::ABCDEF.0123456789abcdef", t.ca_hash)] {
            assert!(JoinToken::parse(bad).is_err(), "{bad}");
        }
    }
}
