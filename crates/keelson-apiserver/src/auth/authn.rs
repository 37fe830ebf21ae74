//! Authentication: who a request is from.
//!
//! In order: the TLS client certificate (CN = user, O = groups, verified against the
//! cluster CA during the handshake), then an `Authorization: Bearer` token — a static
//! token from the token file, or a ServiceAccount token. No credentials → anonymous,
//! which the server answers with 401. Every authenticated user is also in
//! `system:authenticated`.

use std::collections::HashMap;
use std::path::Path;

use super::sa_token::{TokenError, TokenSigner};

pub const AUTHENTICATED: &str = "system:authenticated";

/// An authenticated user (the RBAC crate's identity type).
pub type User = keelson_rbac::UserInfo;

/// A user with `groups` plus `system:authenticated`.
pub fn user(name: impl Into<String>, groups: Vec<String>) -> User {
    keelson_rbac::UserInfo::new(name).with_groups(groups).with_groups([AUTHENTICATED])
}

/// An authentication setup failure.
#[derive(Debug, thiserror::Error)]
pub enum AuthnError {
    #[error("token file {path}: {message}")]
    TokenFile { path: String, message: String },
}

/// A ServiceAccount a token names; the caller confirms it exists with this uid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceAccountClaim {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// What a bearer token resolved to.
#[derive(Debug)]
pub enum TokenIdentity {
    User(User),
    /// Valid signature and window; the ServiceAccount must still exist.
    ServiceAccount(User, ServiceAccountClaim),
    Invalid(String),
}

/// Bearer-token authentication.
#[derive(Default)]
pub struct TokenAuthenticator {
    static_tokens: HashMap<String, User>,
    signer: Option<std::sync::Arc<TokenSigner>>,
}

impl TokenAuthenticator {
    pub fn new(signer: Option<std::sync::Arc<TokenSigner>>) -> Self {
        Self { static_tokens: HashMap::new(), signer }
    }

    /// Static tokens, one per line: `token,user,uid[,"group1,group2"]` (Kubernetes'
    /// token file format); `#` starts a comment.
    pub fn load_token_file(&mut self, path: &Path) -> Result<(), AuthnError> {
        let err = |m: String| AuthnError::TokenFile { path: path.display().to_string(), message: m };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields = split_csv(line);
            if fields.len() < 3 || fields[0].is_empty() || fields[1].is_empty() {
                return Err(err(format!("line {}: expected token,user,uid[,groups]", n + 1)));
            }
            let groups = fields.get(3).map(|g| g.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()).unwrap_or_default();
            let mut u = user(fields[1].clone(), groups);
            u.uid = fields[2].clone();
            self.static_tokens.insert(fields[0].clone(), u);
        }
        Ok(())
    }

    pub fn signer(&self) -> Option<&TokenSigner> {
        self.signer.as_deref()
    }

    pub fn authenticate(&self, token: &str, now: i64) -> TokenIdentity {
        if let Some(u) = self.static_tokens.get(token) {
            return TokenIdentity::User(u.clone());
        }
        let Some(signer) = &self.signer else { return TokenIdentity::Invalid("unknown token".into()) };
        match signer.verify(token, now, super::sa_token::ISSUER) {
            Ok(c) => {
                let ns = c.kubernetes.namespace.clone();
                let name = c.kubernetes.serviceaccount.name.clone();
                let mut u = user(c.sub.clone(), vec!["system:serviceaccounts".into(), format!("system:serviceaccounts:{ns}")]);
                u.uid = c.kubernetes.serviceaccount.uid.clone();
                TokenIdentity::ServiceAccount(u, ServiceAccountClaim { namespace: ns, name, uid: c.kubernetes.serviceaccount.uid })
            }
            Err(TokenError::Malformed) => TokenIdentity::Invalid("unknown token".into()),
            Err(e) => TokenIdentity::Invalid(e.to_string()),
        }
    }
}

/// Splits one CSV line; double quotes group a field containing commas.
fn split_csv(line: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut quoted = false;
    for ch in line.chars() {
        match ch {
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(String::new()),
            c => out.last_mut().expect("non-empty").push(c),
        }
    }
    out.into_iter().map(|s| s.trim().to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_file_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tokens.csv");
        std::fs::write(&p, "# comment\nt0k3n,alice,1001,\"dev,ops\"\nbobtok,bob,1002\n").unwrap();
        let mut a = TokenAuthenticator::new(None);
        a.load_token_file(&p).unwrap();
        match a.authenticate("t0k3n", 0) {
            TokenIdentity::User(u) => {
                assert_eq!(u.name, "alice");
                assert_eq!(u.groups, ["dev", "ops", AUTHENTICATED]);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(a.authenticate("bobtok", 0), TokenIdentity::User(u) if u.groups == [AUTHENTICATED]));
        assert!(matches!(a.authenticate("nope", 0), TokenIdentity::Invalid(_)));
        std::fs::write(&p, "justatoken\n").unwrap();
        assert!(TokenAuthenticator::new(None).load_token_file(&p).is_err());
    }
}
