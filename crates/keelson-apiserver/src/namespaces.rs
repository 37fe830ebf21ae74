//! Built-in namespaces, and emptying a namespace that is being deleted.
//!
//! Deleting a namespace marks it `Terminating` (nothing new may be created in it); this
//! task then deletes everything in it and finally the namespace itself. Any replica may
//! run it: every step is idempotent and the last one is fenced on the namespace's
//! revision.

use serde_json::json;

use crate::catalog::{self, RESOURCES};
use crate::error::ApiError;
use crate::meta;
use crate::registry::Registry;
use crate::storage::{list_prefix, object_key};

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

/// Deletes all content of a terminating namespace, then the namespace.
#[tracing::instrument(name = "namespace_cleanup", skip(registry))]
pub async fn finalize(registry: &Registry, ns: &str) -> Result<(), ApiError> {
    let def = catalog::lookup("", "v1", "namespaces").expect("namespaces are served");
    let Some(current) = registry.store.get(&object_key(def, None, ns)).await? else { return Ok(()) };
    if !meta::is_deleting(&current.obj) {
        return Ok(());
    }
    for r in RESOURCES.iter().filter(|r| r.namespaced) {
        registry.store.delete_prefix(&list_prefix(r, Some(ns))).await?;
    }
    // Drop the namespace's own finalizer, which deletes it unless others remain.
    registry
        .update_with(def, None, ns, meta::UpdateScope::Main, false, |cur| {
            let mut o = cur.cloned().ok_or_else(|| ApiError::not_found("namespaces", ns))?;
            o["spec"]["finalizers"] = json!([]);
            Ok(Some(o))
        })
        .await
        .map(|_| ())
        .or_else(|e| if matches!(e, ApiError::NotFound { .. }) { Ok(()) } else { Err(e) })
}
