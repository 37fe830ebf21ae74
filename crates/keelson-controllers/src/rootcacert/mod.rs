//! The root CA publisher: every active namespace has the ConfigMap `kube-root-ca.crt`
//! holding the cluster CA certificate (`ca.crt`), which pods' projected service-account
//! volumes mount to verify the API server. A changed or deleted copy is put back.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use kube::runtime::reflector::ObjectRef;

use crate::informers::SyncError;
use crate::namespaces::NamespaceCtx;
use crate::serviceaccount::{is_active, raced};

pub const ROOT_CA_CONFIGMAP: &str = "kube-root-ca.crt";
pub const CA_KEY: &str = "ca.crt";
const DESCRIPTION_ANNOTATION: &str = "kubernetes.io/description";
const DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";

/// What the publisher does for one namespace.
#[derive(Clone, Debug, PartialEq)]
pub enum RootCaAction {
    Create(ConfigMap),
    /// Replace the existing ConfigMap (its resourceVersion kept, so a concurrent change
    /// conflicts instead of being overwritten unseen).
    Update(ConfigMap),
}

/// What namespace `ns` needs so that its `kube-root-ca.crt` holds exactly `ca_pem`.
pub fn reconcile(ns: &Namespace, existing: Option<&ConfigMap>, ca_pem: &str) -> Option<RootCaAction> {
    if !is_active(ns) {
        return None;
    }
    let data = BTreeMap::from([(CA_KEY.to_string(), ca_pem.to_string())]);
    match existing {
        None => {
            let annotations = BTreeMap::from([(DESCRIPTION_ANNOTATION.to_string(), DESCRIPTION.to_string())]);
            let metadata = ObjectMeta { name: Some(ROOT_CA_CONFIGMAP.into()), namespace: ns.metadata.name.clone(), annotations: Some(annotations), ..Default::default() };
            Some(RootCaAction::Create(ConfigMap { metadata, data: Some(data), ..Default::default() }))
        }
        Some(cm) => {
            let described = cm.metadata.annotations.as_ref().and_then(|a| a.get(DESCRIPTION_ANNOTATION)).map(String::as_str) == Some(DESCRIPTION);
            if cm.data.as_ref() == Some(&data) && cm.binary_data.is_none() && described {
                return None;
            }
            let mut fixed = cm.clone();
            fixed.data = Some(data);
            fixed.binary_data = None;
            fixed.metadata.annotations.get_or_insert_with(BTreeMap::new).insert(DESCRIPTION_ANNOTATION.into(), DESCRIPTION.into());
            Some(RootCaAction::Update(fixed))
        }
    }
}

pub(crate) async fn sync(ctx: Arc<NamespaceCtx>, name: String) -> Result<Option<Duration>, SyncError> {
    let Some(ns) = ctx.namespaces.get(&ObjectRef::new(&name)) else { return Ok(None) };
    let existing = ctx.root_ca_maps.get(&ObjectRef::new(ROOT_CA_CONFIGMAP).within(&name));
    let Some(action) = reconcile(&ns, existing.as_deref(), &ctx.root_ca_pem) else { return Ok(None) };
    let api: Api<ConfigMap> = Api::namespaced(ctx.term.client.clone(), &name);
    let written = match &action {
        RootCaAction::Create(cm) => api.create(&PostParams::default(), cm).await,
        RootCaAction::Update(cm) => api.replace(ROOT_CA_CONFIGMAP, &PostParams::default(), cm).await,
    };
    match written {
        Ok(_) => {
            tracing::info!(namespace = %name, "published {ROOT_CA_CONFIGMAP}");
            Ok(None)
        }
        // A conflicting update means the watch is behind: the next event syncs again.
        Err(e) if raced(&e) => Ok(None),
        Err(e) => Err(SyncError::from_kube(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

    fn ns(v: serde_json::Value) -> Namespace {
        serde_json::from_value(v).expect("namespace")
    }

    fn created(action: Option<RootCaAction>) -> ConfigMap {
        match action {
            Some(RootCaAction::Create(cm)) => cm,
            other => panic!("expected a create, got {other:?}"),
        }
    }

    #[test]
    fn a_namespace_without_the_configmap_gets_the_ca_with_kubernetes_description() {
        let cm = created(reconcile(&ns(json!({"metadata": {"name": "team"}})), None, CA));
        assert_eq!((cm.metadata.name.as_deref(), cm.metadata.namespace.as_deref()), (Some("kube-root-ca.crt"), Some("team")));
        assert_eq!(cm.data.as_ref().and_then(|d| d.get("ca.crt")).map(String::as_str), Some(CA));
        assert!(cm.metadata.annotations.as_ref().is_some_and(|a| a["kubernetes.io/description"].starts_with("Contains a CA bundle")));
    }

    #[test]
    fn an_up_to_date_copy_is_left_and_a_changed_one_restored() {
        let team = ns(json!({"metadata": {"name": "team"}}));
        let mut cm = created(reconcile(&team, None, CA));
        cm.metadata.resource_version = Some("7".into());
        assert_eq!(reconcile(&team, Some(&cm), CA), None);
        let mut edited = cm.clone();
        edited.data.as_mut().expect("data").insert("extra".into(), "x".into());
        match reconcile(&team, Some(&edited), CA) {
            Some(RootCaAction::Update(fixed)) => {
                assert_eq!(fixed.data, cm.data, "exactly ca.crt again");
                assert_eq!(fixed.metadata.resource_version.as_deref(), Some("7"), "the update is conditional on the copy it saw");
            }
            other => panic!("expected an update, got {other:?}"),
        }
        let rotated = "-----BEGIN CERTIFICATE-----\nNEW\n-----END CERTIFICATE-----\n";
        assert!(matches!(reconcile(&team, Some(&cm), rotated), Some(RootCaAction::Update(_))));
    }

    #[test]
    fn a_terminating_namespace_is_left_alone() {
        let deleting = ns(json!({"metadata": {"name": "team", "deletionTimestamp": "2026-01-01T00:00:00Z"}}));
        assert_eq!(reconcile(&deleting, None, CA), None);
    }
}
