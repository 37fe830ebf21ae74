//! The built-in local-path provisioner (as k3s's local-path-provisioner, without its
//! helper pods): a claim of a class whose provisioner is [`LOCAL_PATH_PROVISIONER`] gets
//! a `hostPath` volume `pvc-<claim uid>` in the directory
//! `<node's local-path dir>/pvc-<claim uid>_<namespace>_<claim>` of the node the
//! scheduler selected, with node affinity to that node, the claim's request as capacity,
//! its access modes and the class's reclaim policy. The volume is pre-bound to the claim
//! (`claimRef` with its uid), so the binder completes the binding. The node's agent
//! creates the directory when a pod mounts it and removes it when the volume is deleted.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::json;

/// The provisioner name of the built-in local-path provisioner.
pub const LOCAL_PATH_PROVISIONER: &str = "keelson.io/local-path";
/// The default StorageClass the controller manager makes.
pub const LOCAL_PATH_CLASS: &str = "local-path";
/// Set on every volume a provisioner made (Kubernetes' annotation).
pub const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
/// The node annotation where an agent says under which directory its local volumes live
/// (`<data dir>/storage`).
pub const NODE_LOCAL_PATH_DIR: &str = "keelson.io/local-path-dir";
/// Where volumes go on a node that does not say.
pub const DEFAULT_LOCAL_PATH_DIR: &str = "/var/lib/keelson/storage";

/// The default StorageClass: `local-path`, WaitForFirstConsumer, reclaim Delete.
pub fn default_class() -> StorageClass {
    serde_json::from_value(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": LOCAL_PATH_CLASS, "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": LOCAL_PATH_PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
    }))
    .expect("the local-path StorageClass")
}

/// The name of the volume provisioned for a claim (Kubernetes': `pvc-<claim uid>`).
pub fn volume_name(claim: &PersistentVolumeClaim) -> String {
    format!("pvc-{}", claim.metadata.uid.as_deref().unwrap_or(""))
}

/// The directory of a claim's volume under the node's local-path directory
/// (local-path-provisioner's `<volume>_<namespace>_<claim>`).
pub fn directory(claim: &PersistentVolumeClaim, base: &str) -> String {
    format!(
        "{}/{}_{}_{}",
        base.trim_end_matches('/'),
        volume_name(claim),
        claim.metadata.namespace.as_deref().unwrap_or("default"),
        claim.metadata.name.as_deref().unwrap_or("")
    )
}

/// The node's local-path directory.
pub fn node_dir(node: Option<&Node>) -> String {
    node.and_then(|n| n.metadata.annotations.as_ref()).and_then(|a| a.get(NODE_LOCAL_PATH_DIR)).cloned().unwrap_or_else(|| DEFAULT_LOCAL_PATH_DIR.into())
}

/// Whether the built-in provisioner made `v` (so it may delete it).
pub fn provisioned_here(v: &PersistentVolume) -> bool {
    v.metadata.annotations.as_ref().and_then(|a| a.get(PROVISIONED_BY)).map(String::as_str) == Some(LOCAL_PATH_PROVISIONER)
}

/// A provisioning that cannot be done.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProvisionError {
    /// A local volume must live on one node.
    #[error("configuration error, no node was specified")]
    NoNode,
    /// local-path volumes are one node's directory.
    #[error("NodePath only supports ReadWriteOnce and ReadWriteOncePod access modes")]
    AccessMode,
}

/// The volume for `claim` of `class` on `node`.
pub fn provision(claim: &PersistentVolumeClaim, class: &StorageClass, node: Option<&Node>) -> Result<PersistentVolume, ProvisionError> {
    let node = node.ok_or(ProvisionError::NoNode)?;
    let spec = claim.spec.clone().unwrap_or_default();
    let modes = spec.access_modes.clone().filter(|m| !m.is_empty()).unwrap_or_else(|| vec!["ReadWriteOnce".into()]);
    if modes.iter().any(|m| m != "ReadWriteOnce" && m != "ReadWriteOncePod") {
        return Err(ProvisionError::AccessMode);
    }
    let storage = spec.resources.as_ref().and_then(|r| r.requests.as_ref()).and_then(|r| r.get("storage")).cloned().unwrap_or(Quantity("0".into()));
    let node_name = node.metadata.name.clone().unwrap_or_default();
    let hostname = node.metadata.labels.as_ref().and_then(|l| l.get("kubernetes.io/hostname")).cloned().unwrap_or_else(|| node_name.clone());
    let mut annotations = BTreeMap::new();
    annotations.insert(PROVISIONED_BY.to_string(), LOCAL_PATH_PROVISIONER.to_string());
    annotations.insert("local.path.provisioner/selected-node".to_string(), node_name.clone());
    let pv = json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": volume_name(claim), "annotations": annotations},
        "spec": {
            "capacity": {"storage": storage},
            "accessModes": modes,
            "persistentVolumeReclaimPolicy": class.reclaim_policy.clone().unwrap_or_else(|| "Delete".into()),
            "storageClassName": class.metadata.name,
            "volumeMode": spec.volume_mode.clone().unwrap_or_else(|| "Filesystem".into()),
            "hostPath": {"path": directory(claim, &node_dir(Some(node))), "type": "DirectoryOrCreate"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [hostname]}]}]}},
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": claim.metadata.namespace, "name": claim.metadata.name,
                "uid": claim.metadata.uid, "resourceVersion": claim.metadata.resource_version},
        },
    });
    Ok(serde_json::from_value(pv).expect("a valid PersistentVolume"))
}
