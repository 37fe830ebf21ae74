//! Encryption at rest of Secrets: AES-256-GCM, applied when an object is written to the
//! store and removed when it is read, so neither the Raft log nor the state machine
//! (nor a snapshot) ever holds a Secret's plaintext.
//!
//! Stored form: `k8s:enc:aesgcm:v1:<key name>:` + 12-byte nonce + ciphertext‖tag, with
//! the object's store key as associated data (a ciphertext moved to another key does
//! not decrypt).

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
use ring::rand::{SecureRandom, SystemRandom};

/// Prefix of every encrypted value.
pub const PREFIX: &[u8] = b"k8s:enc:aesgcm:v1:";

/// An encryption failure.
#[derive(Debug, thiserror::Error)]
pub enum EncryptionError {
    /// The key file does not hold 32 bytes.
    #[error("the encryption key must be 32 bytes, got {0}")]
    KeyLength(usize),
    /// The stored value is encrypted with a key this server does not have.
    #[error("stored value is encrypted with key {0:?}, which this server does not have")]
    UnknownKey(String),
    /// The stored value does not decrypt (corrupt, or moved to another key).
    #[error("stored value does not decrypt (corrupt or tampered)")]
    Decrypt,
}

/// The Secrets cipher of a cluster.
pub struct SecretsCipher {
    name: String,
    key: LessSafeKey,
    rng: SystemRandom,
}

impl std::fmt::Debug for SecretsCipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SecretsCipher({})", self.name)
    }
}

impl SecretsCipher {
    /// `name` identifies the key in stored values (so keys can be rotated later).
    pub fn new(name: &str, key: &[u8]) -> Result<Self, EncryptionError> {
        let unbound = UnboundKey::new(&AES_256_GCM, key).map_err(|_| EncryptionError::KeyLength(key.len()))?;
        Ok(Self { name: name.into(), key: LessSafeKey::new(unbound), rng: SystemRandom::new() })
    }

    /// 32 random bytes for a new key.
    pub fn generate_key() -> [u8; 32] {
        let mut k = [0u8; 32];
        SystemRandom::new().fill(&mut k).expect("the system RNG works");
        k
    }

    fn header(&self) -> Vec<u8> {
        let mut h = PREFIX.to_vec();
        h.extend_from_slice(self.name.as_bytes());
        h.push(b':');
        h
    }

    pub fn encrypt(&self, store_key: &[u8], plaintext: &[u8]) -> Vec<u8> {
        let mut nonce = [0u8; 12];
        self.rng.fill(&mut nonce).expect("the system RNG works");
        let mut buf = plaintext.to_vec();
        self.key
            .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(store_key), &mut buf)
            .expect("AES-GCM sealing cannot fail for in-memory buffers");
        let mut out = self.header();
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&buf);
        out
    }

    /// Decrypts a stored value; values without the prefix are returned as they are
    /// (written before encryption was enabled).
    pub fn decrypt(&self, store_key: &[u8], stored: &[u8]) -> Result<Vec<u8>, EncryptionError> {
        let Some(rest) = stored.strip_prefix(PREFIX) else { return Ok(stored.to_vec()) };
        let colon = rest.iter().position(|b| *b == b':').ok_or(EncryptionError::Decrypt)?;
        let (name, body) = (&rest[..colon], &rest[colon + 1..]);
        if name != self.name.as_bytes() {
            return Err(EncryptionError::UnknownKey(String::from_utf8_lossy(name).into()));
        }
        if body.len() < 12 + 16 {
            return Err(EncryptionError::Decrypt);
        }
        let nonce = Nonce::try_assume_unique_for_key(&body[..12]).map_err(|_| EncryptionError::Decrypt)?;
        let mut buf = body[12..].to_vec();
        let plain = self.key.open_in_place(nonce, Aad::from(store_key), &mut buf).map_err(|_| EncryptionError::Decrypt)?;
        Ok(plain.to_vec())
    }
}

/// Whether objects under this store key are encrypted.
pub fn encrypts(store_key: &[u8]) -> bool {
    store_key.starts_with(b"/registry/core/secrets/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_hides_plaintext_and_binds_the_key() {
        let c = SecretsCipher::new("key1", &SecretsCipher::generate_key()).unwrap();
        let k = b"/registry/core/secrets/default/s";
        let sealed = c.encrypt(k, b"{\"data\":{\"password\":\"hunter2\"}}");
        assert!(sealed.starts_with(b"k8s:enc:aesgcm:v1:key1:"));
        assert!(!sealed.windows(7).any(|w| w == b"hunter2"));
        assert_eq!(c.decrypt(k, &sealed).unwrap(), b"{\"data\":{\"password\":\"hunter2\"}}");
        assert!(matches!(c.decrypt(b"/registry/core/secrets/default/other", &sealed), Err(EncryptionError::Decrypt)));
        let mut tampered = sealed.clone();
        *tampered.last_mut().unwrap() ^= 1;
        assert!(c.decrypt(k, &tampered).is_err());
        let other = SecretsCipher::new("key2", &SecretsCipher::generate_key()).unwrap();
        assert!(matches!(other.decrypt(k, &sealed), Err(EncryptionError::UnknownKey(_))));
        assert_eq!(c.decrypt(k, b"{\"plain\":1}").unwrap(), b"{\"plain\":1}");
        assert!(SecretsCipher::new("x", &[0u8; 16]).is_err());
    }
}
