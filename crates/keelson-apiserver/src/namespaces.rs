//! Built-in namespaces, join tokens, the default RBAC policy and the built-in
//! IngressClass, created at start.
//!
//! Deleting a namespace marks it `Terminating` (nothing new may be created in it); the
//! controller manager's namespace controller then deletes everything in it through the
//! API and removes the `kubernetes` finalizer, which deletes the namespace.

use serde_json::json;

use crate::catalog;
use crate::error::ApiError;
use crate::registry::Registry;

pub const BUILTIN: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

/// Creates the built-in namespaces that do not exist yet.
pub async fn ensure_builtin(registry: &Registry) -> Result<(), ApiError> {
    let def = catalog::lookup("", "v1", "namespaces").expect("namespaces are served");
    for ns in BUILTIN {
        match registry.create(def, None, json!({"metadata": {"name": ns}}), false).await {
            Ok(_) | Err(ApiError::AlreadyExists { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Registers a join token (usable by servers and nodes, no expiry) if absent.
pub async fn ensure_join_token(registry: &Registry, id: &str, secret: &str) -> Result<(), ApiError> {
    let def = catalog::lookup("", "v1", "secrets").expect("served");
    let obj = crate::join::token_secret(id, secret, None, &["server", "node"]);
    match registry.create(def, Some("kube-system"), obj, false).await {
        Ok(_) | Err(ApiError::AlreadyExists { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Creates the default ClusterRoles and ClusterRoleBindings that do not exist yet
/// (existing ones are left as the administrator changed them).
pub async fn ensure_rbac_defaults(registry: &Registry) -> Result<(), ApiError> {
    for obj in keelson_rbac::bootstrap_policy() {
        let kind = obj.get("kind").and_then(|k| k.as_str()).unwrap_or("");
        let Some(def) = catalog::by_kind("rbac.authorization.k8s.io", "v1", kind) else { continue };
        match registry.create(def, None, obj, false).await {
            Ok(_) | Err(ApiError::AlreadyExists { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The IngressClass of the ingress controller every node agent runs (keelson-ingress),
/// marked as the default class.
pub fn default_ingress_class() -> serde_json::Value {
    json!({
        "metadata": {"name": "keelson", "annotations": {"ingressclass.kubernetes.io/is-default-class": "true"}},
        "spec": {"controller": "keelson.io/ingress"},
    })
}

/// Creates the built-in IngressClass `keelson` if absent (one changed or deleted by an
/// administrator is left as it is until the next start).
pub async fn ensure_ingress_class(registry: &Registry) -> Result<(), ApiError> {
    let def = catalog::lookup("networking.k8s.io", "v1", "ingressclasses").expect("ingressclasses are served");
    match registry.create(def, None, default_ingress_class(), false).await {
        Ok(_) | Err(ApiError::AlreadyExists { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}
