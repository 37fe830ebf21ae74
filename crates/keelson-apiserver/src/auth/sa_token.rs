//! ServiceAccount tokens: ES256 JWTs signed with the cluster's service-account key.
//!
//! Claims follow Kubernetes' bound tokens: `iss`, `sub` = `system:serviceaccount:NS:NAME`,
//! `aud`, `iat`, `nbf`, `exp`, and `kubernetes.io` = {namespace, serviceaccount {name,
//! uid}}. Verification checks the signature, the time window and the audience; the
//! caller checks that the ServiceAccount still exists with that uid.

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair, UnparsedPublicKey, ECDSA_P256_SHA256_FIXED, ECDSA_P256_SHA256_FIXED_SIGNING};
use serde::{Deserialize, Serialize};

/// The issuer every token carries and every verifier expects.
pub const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// A token failure.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The signing key is not a PKCS#8 ECDSA P-256 key.
    #[error("service-account signing key: {0}")]
    Key(String),
    /// The token is not a well-formed JWT of ours.
    #[error("malformed token")]
    Malformed,
    /// The signature does not verify.
    #[error("invalid token signature")]
    Signature,
    /// Outside its validity window.
    #[error("token has expired")]
    Expired,
    /// Not meant for this API server.
    #[error("token audience does not match")]
    Audience,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceAccountRef {
    pub name: String,
    pub uid: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubeClaims {
    pub namespace: String,
    pub serviceaccount: ServiceAccountRef,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    pub iss: String,
    pub sub: String,
    pub aud: Vec<String>,
    pub iat: i64,
    pub nbf: i64,
    pub exp: i64,
    #[serde(rename = "kubernetes.io")]
    pub kubernetes: KubeClaims,
}

/// Signs and verifies ServiceAccount tokens.
pub struct TokenSigner {
    key: EcdsaKeyPair,
    rng: SystemRandom,
}

impl TokenSigner {
    /// From a PKCS#8 PEM ECDSA P-256 private key (what `rcgen::KeyPair::serialize_pem` writes).
    pub fn from_pem(pem: &str) -> Result<Self, TokenError> {
        let b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        let der = base64::engine::general_purpose::STANDARD.decode(b64.trim()).map_err(|e| TokenError::Key(e.to_string()))?;
        let rng = SystemRandom::new();
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &der, &rng).map_err(|e| TokenError::Key(e.to_string()))?;
        Ok(Self { key, rng })
    }

    pub fn sign(&self, claims: &Claims) -> String {
        let header = B64.encode(br#"{"alg":"ES256","typ":"JWT"}"#);
        let body = B64.encode(serde_json::to_vec(claims).expect("claims serialize"));
        let signing_input = format!("{header}.{body}");
        let sig = self.key.sign(&self.rng, signing_input.as_bytes()).expect("ECDSA signing works");
        format!("{signing_input}.{}", B64.encode(sig.as_ref()))
    }

    /// Verifies a token at time `now` (Unix seconds) for `audience`.
    pub fn verify(&self, token: &str, now: i64, audience: &str) -> Result<Claims, TokenError> {
        let mut parts = token.split('.');
        let (Some(h), Some(b), Some(s), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
            return Err(TokenError::Malformed);
        };
        let header: serde_json::Value = serde_json::from_slice(&B64.decode(h).map_err(|_| TokenError::Malformed)?).map_err(|_| TokenError::Malformed)?;
        if header["alg"] != "ES256" {
            return Err(TokenError::Malformed);
        }
        let sig = B64.decode(s).map_err(|_| TokenError::Malformed)?;
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, self.key.public_key().as_ref())
            .verify(format!("{h}.{b}").as_bytes(), &sig)
            .map_err(|_| TokenError::Signature)?;
        let claims: Claims = serde_json::from_slice(&B64.decode(b).map_err(|_| TokenError::Malformed)?).map_err(|_| TokenError::Malformed)?;
        if claims.iss != ISSUER {
            return Err(TokenError::Malformed);
        }
        if now < claims.nbf - 60 || now >= claims.exp {
            return Err(TokenError::Expired);
        }
        if !claims.aud.iter().any(|a| a == audience) {
            return Err(TokenError::Audience);
        }
        Ok(claims)
    }
}

/// Claims of a token for `namespace/name` (uid) valid from `now` for `ttl_secs`.
pub fn claims_for(namespace: &str, name: &str, uid: &str, audiences: Vec<String>, now: i64, ttl_secs: i64) -> Claims {
    Claims {
        iss: ISSUER.into(),
        sub: format!("system:serviceaccount:{namespace}:{name}"),
        aud: audiences,
        iat: now,
        nbf: now,
        exp: now + ttl_secs,
        kubernetes: KubeClaims { namespace: namespace.into(), serviceaccount: ServiceAccountRef { name: name.into(), uid: uid.into() } },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signer() -> TokenSigner {
        TokenSigner::from_pem(&rcgen_key_pem()).unwrap()
    }

    /// A fresh PKCS#8 P-256 key in PEM.
    fn rcgen_key_pem() -> String {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        format!("-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n", base64::engine::general_purpose::STANDARD.encode(pkcs8.as_ref()))
    }

    #[test]
    fn signed_tokens_verify_and_tampering_fails() {
        let s = signer();
        let t = s.sign(&claims_for("default", "build", "u1", vec![ISSUER.into()], 1000, 3600));
        let c = s.verify(&t, 1500, ISSUER).unwrap();
        assert_eq!(c.sub, "system:serviceaccount:default:build");
        assert!(matches!(s.verify(&t, 4600, ISSUER), Err(TokenError::Expired)));
        assert!(matches!(s.verify(&t, 1500, "other"), Err(TokenError::Audience)));
        let mut parts: Vec<String> = t.split('.').map(String::from).collect();
        let forged = claims_for("kube-system", "admin", "u2", vec![ISSUER.into()], 1000, 3600);
        parts[1] = B64.encode(serde_json::to_vec(&forged).unwrap());
        assert!(matches!(s.verify(&parts.join("."), 1500, ISSUER), Err(TokenError::Signature)));
        let other = signer();
        assert!(matches!(other.verify(&t, 1500, ISSUER), Err(TokenError::Signature)));
        assert!(matches!(s.verify("a.b", 1500, ISSUER), Err(TokenError::Malformed)));
    }
}
