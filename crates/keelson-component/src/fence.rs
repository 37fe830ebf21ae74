//! Fenced clients: every request carries `Keelson-Fence: <namespace>/<lease>:<token>`,
//! which the API server checks in the same store transaction as the write it asks for.
//! Any client can fence its writes on its own Lease this way; the token is the
//! resourceVersion returned by the write that made it the lease's holder.

/// The header the API server reads a fence claim from.
pub const HEADER: &str = "keelson-fence";

/// The header value claiming lease `namespace/name` at `token`.
pub fn claim(namespace: &str, name: &str, token: i64) -> String {
    format!("{namespace}/{name}:{token}")
}

/// A fenced client could not be made.
#[derive(Debug, thiserror::Error)]
pub enum FenceError {
    #[error("lease {0:?} cannot be named in a header")]
    Header(String),
    #[error("building the client: {0}")]
    Client(#[from] kube::Error),
}

/// A client like `config`'s whose every request claims the fence.
pub fn fenced_client(config: &kube::Config, namespace: &str, name: &str, token: i64) -> Result<kube::Client, FenceError> {
    let mut config = config.clone();
    let claim = claim(namespace, name, token);
    let value = http::HeaderValue::from_str(&claim).map_err(|_| FenceError::Header(claim.clone()))?;
    config.headers.retain(|(n, _)| n.as_str() != HEADER);
    config.headers.push((http::HeaderName::from_static(HEADER), value));
    Ok(crate::client::traced_client(config)?)
}

/// Whether a request failed because its fence no longer holds: the lease changed hands,
/// and whoever made it must stop acting.
pub fn is_fenced(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409 && s.reason == "Fenced")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_and_refusals() {
        assert_eq!(claim("kube-system", "kube-scheduler", 17), "kube-system/kube-scheduler:17");
        let fenced: kube::core::Status = serde_json::from_value(serde_json::json!({"status": "Failure", "code": 409, "reason": "Fenced", "message": "fenced"})).unwrap();
        assert!(is_fenced(&kube::Error::Api(Box::new(fenced))));
        let conflict: kube::core::Status = serde_json::from_value(serde_json::json!({"status": "Failure", "code": 409, "reason": "Conflict", "message": "x"})).unwrap();
        assert!(!is_fenced(&kube::Error::Api(Box::new(conflict))));
    }
}
