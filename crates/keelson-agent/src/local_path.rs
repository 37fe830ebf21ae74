//! The node's half of the built-in local-path provisioner: where this node's local
//! volumes live (`<data dir>/storage`, announced on the Node as
//! [`NODE_LOCAL_PATH_DIR`]), and removing a volume's directory once its
//! PersistentVolume is deleted (reclaim policy Delete). Only directories of volumes the
//! provisioner made for this node, inside that directory, are ever removed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolume};
use kube::api::Api;
use kube::runtime::watcher::{self, watcher};
use tokio_util::sync::CancellationToken;

use keelson_component::events::{EventRecorder, EventType};

/// The Node annotation naming the directory of the node's local volumes.
pub const NODE_LOCAL_PATH_DIR: &str = "keelson.io/local-path-dir";
/// The built-in provisioner's name, on the volumes it made.
pub const LOCAL_PATH_PROVISIONER: &str = "keelson.io/local-path";
const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
const SELECTED_NODE: &str = "local.path.provisioner/selected-node";

/// The Event a node records when it removes (or, hollow, would remove) a volume directory.
pub const REMOVED_REASON: &str = "LocalVolumeRemoved";

/// The local volumes directory of a node with data directory `data_dir`.
pub fn storage_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("storage")
}

/// The directory to remove for deleted volume `pv` on `node`, whose local volumes live
/// in `storage`: only a volume the built-in provisioner made for this node, whose path is
/// a direct child of `storage`.
pub fn directory_to_remove(pv: &PersistentVolume, node: &str, storage: &Path) -> Option<PathBuf> {
    let annotations = pv.metadata.annotations.as_ref()?;
    if annotations.get(PROVISIONED_BY).map(String::as_str) != Some(LOCAL_PATH_PROVISIONER) || annotations.get(SELECTED_NODE).map(String::as_str) != Some(node) {
        return None;
    }
    let spec = pv.spec.as_ref()?;
    let path = PathBuf::from(spec.host_path.as_ref().map(|h| h.path.clone()).or_else(|| spec.local.as_ref().map(|l| l.path.clone()))?);
    let name = path.file_name()?.to_str()?;
    (path.parent() == Some(storage) && !name.starts_with('.')).then_some(path)
}

/// Watches PersistentVolumes and removes the directory of each deleted local volume of
/// the `nodes` (name, local volumes directory); when `simulate`, only records the Event
/// (hollow nodes have no directories). One watch serves every node of the process.
pub async fn reclaim(client: kube::Client, nodes: Vec<(String, PathBuf)>, simulate: bool, shutdown: CancellationToken) {
    let recorders: Vec<EventRecorder> = nodes.iter().map(|(n, _)| EventRecorder::new(client.clone(), "kubelet", n)).collect();
    let stream = watcher(Api::<PersistentVolume>::all(client), watcher::Config::default());
    futures::pin_mut!(stream);
    loop {
        let ev = tokio::select! {
            _ = shutdown.cancelled() => return,
            ev = stream.next() => match ev { Some(ev) => ev, None => return },
        };
        let pv = match ev {
            Ok(watcher::Event::Delete(pv)) => pv,
            Ok(_) => continue,
            Err(e) => {
                tracing::debug!(error = %e, "volume watch; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        let Some((i, dir)) = nodes.iter().enumerate().find_map(|(i, (node, storage))| directory_to_remove(&pv, node, storage).map(|d| (i, d))) else { continue };
        let (node, recorder) = (&nodes[i].0, &recorders[i]);
        let pv_name = pv.metadata.name.clone().unwrap_or_default();
        let message = if simulate {
            format!("Simulated (hollow node): would remove directory {} of deleted PersistentVolume {pv_name}", dir.display())
        } else {
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => format!("Removed directory {} of deleted PersistentVolume {pv_name}", dir.display()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => format!("Removed directory {} of deleted PersistentVolume {pv_name} (it was never created)", dir.display()),
                Err(e) => {
                    tracing::warn!(path = %dir.display(), error = %e, "removing a deleted volume's directory");
                    continue;
                }
            }
        };
        tracing::info!(volume = %pv_name, "{message}");
        let regarding = ObjectReference { api_version: Some("v1".into()), kind: Some("Node".into()), name: Some(node.clone()), uid: Some(node.clone()), ..Default::default() };
        recorder.publish(&regarding, EventType::Normal, REMOVED_REASON, &message).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pv(path: &str, node: &str, by: &str) -> PersistentVolume {
        serde_json::from_value(json!({"metadata": {"name": "pvc-1", "annotations": {PROVISIONED_BY: by, SELECTED_NODE: node}}, "spec": {"hostPath": {"path": path}}})).unwrap()
    }

    #[test]
    fn only_this_nodes_provisioned_directories_are_removed() {
        let storage = Path::new("/data/n1/storage");
        assert_eq!(directory_to_remove(&pv("/data/n1/storage/pvc-1_d_c", "n1", LOCAL_PATH_PROVISIONER), "n1", storage), Some(PathBuf::from("/data/n1/storage/pvc-1_d_c")));
        assert_eq!(directory_to_remove(&pv("/data/n1/storage/pvc-1_d_c", "n2", LOCAL_PATH_PROVISIONER), "n1", storage), None, "another node's");
        assert_eq!(directory_to_remove(&pv("/data/n1/storage/pvc-1_d_c", "n1", "example.com/nfs"), "n1", storage), None, "another provisioner's");
        assert_eq!(directory_to_remove(&pv("/etc", "n1", LOCAL_PATH_PROVISIONER), "n1", storage), None, "outside the storage directory");
        assert_eq!(directory_to_remove(&pv("/data/n1/storage", "n1", LOCAL_PATH_PROVISIONER), "n1", storage), None, "the storage directory itself");
        assert_eq!(directory_to_remove(&pv("/data/n1/storage/../../etc", "n1", LOCAL_PATH_PROVISIONER), "n1", storage), None);
    }
}
