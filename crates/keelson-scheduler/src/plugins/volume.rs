//! VolumeBinding, reduced to what Keelson's volumes need: a pod's claims must exist and
//! not be deleting, a claim of an Immediate class must be bound already, a bound claim's
//! volume must exist and be reachable from the node (its node affinity), and an unbound
//! WaitForFirstConsumer claim needs either the built-in local-path provisioner or an
//! available volume of its class that the node can reach. Messages are Kubernetes'.
//! Binding the claims themselves is the PersistentVolume controller's: the scheduler only
//! tells it the chosen node ([`SELECTED_NODE`], at bind time).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;

use crate::framework::{Cycle, Plugin};
use crate::snapshot::NodeInfo;

/// The claim annotation naming the node of the claim's first pod.
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// The built-in provisioner, which can make a volume on any node.
pub const LOCAL_PATH_PROVISIONER: &str = "keelson.io/local-path";

pub const VOLUME_NODE_AFFINITY_CONFLICT: &str = "node(s) had volume node affinity conflict";
pub const NO_AVAILABLE_VOLUMES: &str = "node(s) didn't find available persistent volumes to bind";
pub const UNBOUND_IMMEDIATE: &str = "pod has unbound immediate PersistentVolumeClaims";
pub const MISSING_VOLUME: &str = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)";

/// The claims, volumes and classes of the cluster, as the scheduler last saw them.
#[derive(Clone, Debug, Default)]
pub struct VolumeState {
    /// By `namespace/name`.
    pub claims: BTreeMap<String, Arc<PersistentVolumeClaim>>,
    pub volumes: BTreeMap<String, Arc<PersistentVolume>>,
    pub classes: BTreeMap<String, Arc<StorageClass>>,
}

/// The claim names a pod's volumes refer to.
pub fn claim_names(pod: &Pod) -> Vec<&str> {
    pod.spec.as_ref().and_then(|s| s.volumes.as_ref()).into_iter().flatten().filter_map(|v| v.persistent_volume_claim.as_ref()).map(|c| c.claim_name.as_str()).collect()
}

fn volume_name(c: &PersistentVolumeClaim) -> Option<&str> {
    c.spec.as_ref().and_then(|s| s.volume_name.as_deref()).filter(|n| !n.is_empty())
}

fn class_of<'a>(state: &'a VolumeState, c: &PersistentVolumeClaim) -> Option<&'a StorageClass> {
    let name = c.spec.as_ref().and_then(|s| s.storage_class_name.as_deref()).unwrap_or("");
    state.classes.get(name).map(|c| c.as_ref())
}

fn waits_for_consumer(class: Option<&StorageClass>) -> bool {
    class.and_then(|c| c.volume_binding_mode.as_deref()) == Some("WaitForFirstConsumer")
}

/// The pod's unbound claims of WaitForFirstConsumer classes: the ones the scheduler
/// annotates with the chosen node when it binds the pod.
pub fn delayed_claims<'a>(state: &'a VolumeState, pod: &Pod) -> Vec<&'a PersistentVolumeClaim> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    claim_names(pod)
        .into_iter()
        .filter_map(|n| state.claims.get(&format!("{ns}/{n}")))
        .map(|c| c.as_ref())
        .filter(|c| volume_name(c).is_none() && waits_for_consumer(class_of(state, c)))
        .collect()
}

fn reachable(v: &PersistentVolume, node: &NodeInfo) -> bool {
    let Some(required) = v.spec.as_ref().and_then(|s| s.node_affinity.as_ref()).and_then(|a| a.required.as_ref()) else { return true };
    required.node_selector_terms.iter().any(|t| crate::selectors::term_matches(t, &node.node))
}

fn storage(m: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>) -> i128 {
    m.and_then(|m| m.get("storage")).and_then(|q| crate::resources::parse_quantity_milli(&q.0)).unwrap_or(0)
}

/// Whether some available volume could serve `c` on `node` (class, access modes, size).
fn has_static_volume(state: &VolumeState, c: &PersistentVolumeClaim, node: &NodeInfo) -> bool {
    let spec = c.spec.as_ref();
    let class = spec.and_then(|s| s.storage_class_name.as_deref()).unwrap_or("");
    let want = storage(spec.and_then(|s| s.resources.as_ref()).and_then(|r| r.requests.as_ref()));
    let modes = spec.and_then(|s| s.access_modes.clone()).unwrap_or_default();
    state.volumes.values().any(|v| {
        let Some(vs) = v.spec.as_ref() else { return false };
        let free = vs.claim_ref.as_ref().is_none_or(|r| r.namespace == c.metadata.namespace && r.name == c.metadata.name);
        let have = vs.access_modes.clone().unwrap_or_default();
        free && v.metadata.deletion_timestamp.is_none()
            && vs.storage_class_name.as_deref().unwrap_or("") == class
            && modes.iter().all(|m| have.contains(m))
            && storage(vs.capacity.as_ref()) >= want
            && reachable(v, node)
    })
}

pub struct VolumeBinding;

impl Plugin for VolumeBinding {
    fn name(&self) -> &'static str {
        "VolumeBinding"
    }

    fn pre_filter(&self, cx: &Cycle) -> Option<String> {
        let state = &cx.snapshot.volumes;
        let ns = cx.namespace();
        for name in claim_names(cx.pod) {
            let Some(c) = state.claims.get(&format!("{ns}/{name}")) else {
                return Some(format!("persistentvolumeclaim \"{name}\" not found"));
            };
            if c.metadata.deletion_timestamp.is_some() {
                return Some(format!("persistentvolumeclaim \"{name}\" is being deleted"));
            }
            if volume_name(c).is_none() && !waits_for_consumer(class_of(state, c)) {
                return Some(UNBOUND_IMMEDIATE.into());
            }
        }
        None
    }

    fn unresolvable(&self, _reason: &str) -> bool {
        true
    }
    fn filter(&self, cx: &Cycle, node: &NodeInfo) -> Vec<String> {
        let state = &cx.snapshot.volumes;
        let ns = cx.namespace();
        let mut reasons = Vec::new();
        for name in claim_names(cx.pod) {
            let Some(c) = state.claims.get(&format!("{ns}/{name}")) else { continue };
            match volume_name(c) {
                Some(v) => match state.volumes.get(v) {
                    None => reasons.push(MISSING_VOLUME.to_string()),
                    Some(v) if !reachable(v, node) => reasons.push(VOLUME_NODE_AFFINITY_CONFLICT.to_string()),
                    Some(_) => {}
                },
                None => {
                    let provisions = class_of(state, c).is_some_and(|sc| sc.provisioner == LOCAL_PATH_PROVISIONER);
                    if !provisions && !has_static_volume(state, c, node) {
                        reasons.push(NO_AVAILABLE_VOLUMES.to_string());
                    }
                }
            }
        }
        reasons
    }
}
