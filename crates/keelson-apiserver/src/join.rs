//! Joining a cluster with a token: the server side.
//!
//! - `GET /keelson/v1/cacerts` (no credentials): the cluster CA certificate. A joiner
//!   checks it against the CA hash inside its token before trusting it.
//! - `POST /keelson/v1/join` with `Authorization: Bearer <id>.<secret>` and a body
//!   `{"usage": "server"|"node", "name": NAME}`: for `server`, the cluster's key material
//!   (CA, Secrets key, service-account key) and the peers' store addresses; for `node`,
//!   the CA and a client certificate `system:node:NAME` in group `system:nodes`.
//!
//! Tokens are Secrets `kube-system/bootstrap-token-<id>` of type
//! `bootstrap.kubernetes.io/token` with `token-id`, `token-secret`, `expiration`
//! (RFC 3339, optional) and `usage-bootstrap-server` / `usage-bootstrap-node`.

use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::catalog;
use crate::error::ApiError;
use crate::registry::Registry;

/// What a server hands to joiners.
#[derive(Clone, Debug)]
pub struct JoinMaterial {
    pub ca_cert_pem: String,
    pub ca_key_pem: String,
    pub secrets_key: Vec<u8>,
    pub service_account_key_pem: String,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JoinRequest {
    pub usage: String,
    pub name: String,
}

/// The answer to a server joining.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerJoin {
    pub ca_cert: String,
    pub ca_key: String,
    /// base64
    pub secrets_key: String,
    pub service_account_key: String,
    /// Store (Raft) addresses of the current members.
    pub peers: Vec<String>,
}

/// The answer to a node joining.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeJoin {
    pub ca_cert: String,
    pub client_cert: String,
    pub client_key: String,
}

pub const TOKEN_SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";

/// The Secret that holds a join token.
pub fn token_secret(id: &str, secret: &str, expiration: Option<&str>, usages: &[&str]) -> Value {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let mut data = json!({"token-id": b64(id), "token-secret": b64(secret)});
    if let Some(e) = expiration {
        data["expiration"] = json!(b64(e));
    }
    for u in usages {
        data[format!("usage-bootstrap-{u}")] = json!(b64("true"));
    }
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system"}, "type": TOKEN_SECRET_TYPE, "data": data})
}

fn secret_field(secret: &Value, key: &str) -> Option<String> {
    let b = secret.pointer(&format!("/data/{key}"))?.as_str()?;
    String::from_utf8(base64::engine::general_purpose::STANDARD.decode(b).ok()?).ok()
}

/// Checks a bearer credential `<id>.<secret>` against the token Secret (pure).
pub fn check_token(secret_obj: Option<&Value>, credential: &str, usage: &str, now_unix: i64) -> Result<(), String> {
    let (id, secret) = credential.split_once('.').ok_or("malformed join token")?;
    let obj = secret_obj.ok_or("unknown join token")?;
    if obj.get("type").and_then(Value::as_str) != Some(TOKEN_SECRET_TYPE) || secret_field(obj, "token-id").as_deref() != Some(id) {
        return Err("unknown join token".into());
    }
    let stored = secret_field(obj, "token-secret").unwrap_or_default();
    if !constant_time_eq(stored.as_bytes(), secret.as_bytes()) {
        return Err("wrong join token".into());
    }
    if let Some(exp) = secret_field(obj, "expiration") {
        let at: jiff::Timestamp = exp.parse().map_err(|_| "join token has an unreadable expiration")?;
        if at.as_second() <= now_unix {
            return Err("join token has expired".into());
        }
    }
    if secret_field(obj, &format!("usage-bootstrap-{usage}")).as_deref() != Some("true") {
        return Err(format!("join token may not be used to join a {usage}"));
    }
    Ok(())
}

/// Compares without an early exit, so timing does not reveal how much matched.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Handles `POST /keelson/v1/join`.
pub async fn join(registry: &Registry, material: &JoinMaterial, bearer: Option<&str>, body: &[u8]) -> Result<Value, ApiError> {
    let credential = bearer.ok_or(ApiError::Unauthorized)?;
    let req: JoinRequest = serde_json::from_slice(body).map_err(|e| ApiError::BadRequest(format!("join request: {e}")))?;
    if !["server", "node"].contains(&req.usage.as_str()) {
        return Err(ApiError::BadRequest(format!("usage must be server or node, got {:?}", req.usage)));
    }
    if crate::meta::dns_subdomain_problem(&req.name).is_some() {
        return Err(ApiError::BadRequest(format!("invalid name {:?}", req.name)));
    }
    let id = credential.split('.').next().unwrap_or("");
    let secrets = catalog::lookup("", "v1", "secrets").expect("served");
    let stored = match registry.get(secrets, Some("kube-system"), &format!("bootstrap-token-{id}")).await {
        Ok(s) => Some(s.obj),
        Err(ApiError::NotFound { .. }) => None,
        Err(e) => return Err(e),
    };
    if let Err(why) = check_token(stored.as_ref(), credential, &req.usage, jiff::Timestamp::now().as_second()) {
        tracing::warn!(name = %req.name, usage = %req.usage, %why, "join refused");
        return Err(ApiError::Forbidden(format!("join refused: {why}")));
    }
    tracing::info!(name = %req.name, usage = %req.usage, "join accepted");
    if req.usage == "server" {
        let members = registry.store.client().member_list().await.map_err(ApiError::from)?;
        let reply = ServerJoin {
            ca_cert: material.ca_cert_pem.clone(),
            ca_key: material.ca_key_pem.clone(),
            secrets_key: base64::engine::general_purpose::STANDARD.encode(&material.secrets_key),
            service_account_key: material.service_account_key_pem.clone(),
            peers: members.members.iter().filter(|m| m.voter).map(|m| m.addr.clone()).collect(),
        };
        return Ok(serde_json::to_value(reply).expect("serializable"));
    }
    let ca = keelson_pki::ClusterCa::from_pem(&material.ca_cert_pem, &material.ca_key_pem).map_err(|e| ApiError::Internal(e.to_string()))?;
    let cert = ca.issue_client(&format!("system:node:{}", req.name), &["system:nodes"]).map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(serde_json::to_value(NodeJoin { ca_cert: material.ca_cert_pem.clone(), client_cert: cert.cert_pem, client_key: cert.key_pem }).expect("serializable"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_checks() {
        let s = token_secret("abcdef", "0123456789abcdef", Some("2030-01-01T00:00:00Z"), &["server"]);
        let now = 1_900_000_000 - 100_000_000; // 2030 is later
        assert_eq!(check_token(Some(&s), "abcdef.0123456789abcdef", "server", now), Ok(()));
        assert!(check_token(Some(&s), "abcdef.0123456789abcdeX", "server", now).unwrap_err().contains("wrong"));
        assert!(check_token(Some(&s), "abcdef.0123456789abcdef", "node", now).unwrap_err().contains("node"));
        assert!(check_token(Some(&s), "abcdef.0123456789abcdef", "server", 1_900_000_000).unwrap_err().contains("expired"));
        assert!(check_token(None, "abcdef.0123456789abcdef", "server", now).is_err());
        assert!(check_token(Some(&s), "nodot", "server", now).is_err());
        let mut opaque = s.clone();
        opaque["type"] = json!("Opaque");
        assert!(check_token(Some(&opaque), "abcdef.0123456789abcdef", "server", now).is_err());
    }
}
