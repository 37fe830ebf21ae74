//! The service account controller: every active namespace has a `default`
//! ServiceAccount (the one pods run as unless they name another), re-created if deleted.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use kube::runtime::reflector::ObjectRef;

use crate::informers::SyncError;
use crate::namespaces::NamespaceCtx;

pub const DEFAULT_SERVICE_ACCOUNT: &str = "default";

/// Whether new content may be created in `ns` (it is not being deleted).
pub fn is_active(ns: &Namespace) -> bool {
    ns.metadata.deletion_timestamp.is_none() && ns.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Terminating")
}

/// The `default` ServiceAccount `ns` lacks, if it lacks one.
pub fn reconcile(ns: &Namespace, existing: Option<&ServiceAccount>) -> Option<ServiceAccount> {
    if !is_active(ns) || existing.is_some() {
        return None;
    }
    Some(ServiceAccount {
        metadata: ObjectMeta { name: Some(DEFAULT_SERVICE_ACCOUNT.into()), namespace: ns.metadata.name.clone(), ..Default::default() },
        ..Default::default()
    })
}

/// Whether a create failed only because it raced: the object exists, or the namespace
/// is gone or terminating (the next sync sees that).
pub(crate) fn raced(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409 || s.code == 404 || (s.code == 403 && s.message.contains("being terminated")))
}

pub(crate) async fn sync(ctx: Arc<NamespaceCtx>, name: String) -> Result<Option<Duration>, SyncError> {
    let Some(ns) = ctx.namespaces.get(&ObjectRef::new(&name)) else { return Ok(None) };
    let existing = ctx.default_accounts.get(&ObjectRef::new(DEFAULT_SERVICE_ACCOUNT).within(&name));
    let Some(account) = reconcile(&ns, existing.as_deref()) else { return Ok(None) };
    let api: Api<ServiceAccount> = Api::namespaced(ctx.term.client.clone(), &name);
    match api.create(&PostParams::default(), &account).await {
        Ok(_) => {
            tracing::info!(namespace = %name, "created the default ServiceAccount");
            Ok(None)
        }
        Err(e) if raced(&e) => Ok(None),
        Err(e) => Err(SyncError::from_kube(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ns(v: serde_json::Value) -> Namespace {
        serde_json::from_value(v).expect("namespace")
    }

    #[test]
    fn an_active_namespace_without_one_gets_a_default_service_account() {
        let team = ns(json!({"metadata": {"name": "team"}, "status": {"phase": "Active"}}));
        let sa = reconcile(&team, None).expect("a default ServiceAccount");
        assert_eq!((sa.metadata.name.as_deref(), sa.metadata.namespace.as_deref()), (Some("default"), Some("team")));
        assert_eq!(reconcile(&team, Some(&sa)), None, "an existing one is left alone");
    }

    #[test]
    fn a_terminating_namespace_gets_none() {
        let deleting = ns(json!({"metadata": {"name": "team", "deletionTimestamp": "2026-01-01T00:00:00Z"}}));
        let terminating = ns(json!({"metadata": {"name": "team"}, "status": {"phase": "Terminating"}}));
        assert_eq!(reconcile(&deleting, None), None);
        assert_eq!(reconcile(&terminating, None), None);
    }
}
