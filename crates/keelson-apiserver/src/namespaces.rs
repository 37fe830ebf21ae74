//! Built-in namespaces, PriorityClasses, the IngressClass `keelson`, join tokens and the
//! default RBAC policy, created at start.
//!
//! Deleting a namespace marks it `Terminating` (nothing new may be created in it); the
//! controller manager's namespace controller then deletes everything in it through the
//! API and removes the `kubernetes` finalizer, which deletes the namespace.

use serde_json::{json, Value};

use crate::catalog::{self, ResourceDef};
use crate::error::ApiError;
use crate::registry::Registry;

pub const BUILTIN: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

/// Creates `obj` unless it exists (an existing one is left as the administrator changed it).
async fn create_absent(registry: &Registry, def: &ResourceDef, ns: Option<&str>, obj: Value) -> Result<(), ApiError> {
    match registry.create(def, ns, obj, false).await {
        Ok(_) | Err(ApiError::AlreadyExists { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Creates the built-in namespaces that do not exist yet.
pub async fn ensure_builtin(registry: &Registry) -> Result<(), ApiError> {
    let def = catalog::lookup("", "v1", "namespaces").expect("namespaces are served");
    for ns in BUILTIN {
        create_absent(registry, def, None, json!({"metadata": {"name": ns}})).await?;
    }
    Ok(())
}

/// Creates the built-in `system-cluster-critical` and `system-node-critical`
/// PriorityClasses that do not exist yet.
pub async fn ensure_system_priority_classes(registry: &Registry) -> Result<(), ApiError> {
    let def = catalog::lookup("scheduling.k8s.io", "v1", "priorityclasses").expect("served");
    for obj in crate::admission::priority::system_priority_classes() {
        create_absent(registry, def, None, obj).await?;
    }
    Ok(())
}

/// Registers a join token (usable by servers and nodes, no expiry) if absent.
pub async fn ensure_join_token(registry: &Registry, id: &str, secret: &str) -> Result<(), ApiError> {
    let def = catalog::lookup("", "v1", "secrets").expect("served");
    create_absent(registry, def, Some("kube-system"), crate::join::token_secret(id, secret, None, &["server", "node"])).await
}

/// Creates the default ClusterRoles and ClusterRoleBindings that do not exist yet
/// (existing ones are left as the administrator changed them).
pub async fn ensure_rbac_defaults(registry: &Registry) -> Result<(), ApiError> {
    for obj in keelson_rbac::bootstrap_policy() {
        let kind = obj.get("kind").and_then(|k| k.as_str()).unwrap_or("");
        let Some(def) = catalog::by_kind("rbac.authorization.k8s.io", "v1", kind) else { continue };
        create_absent(registry, def, None, obj).await?;
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
    create_absent(registry, def, None, default_ingress_class()).await
}
