//! The PersistentVolume binder's decisions, pure: which volume a claim gets (Kubernetes'
//! `findBestMatchForClaim`: a volume pre-bound to the claim first, else the smallest
//! available one of the claim's class that has its access modes, volume mode, labels and
//! at least its request, on the selected node for WaitForFirstConsumer), and what the
//! binder does next for a claim or a volume. Writes follow Kubernetes' order: the
//! volume's `claimRef` first, then the claim's `volumeName`, then both statuses.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;

use super::provisioner::LOCAL_PATH_PROVISIONER;

/// Set on a claim whose binding the controller finished.
pub const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// Set on the side of a binding that the controller (not the user) made.
pub const BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// The node the scheduler chose for the first pod of a WaitForFirstConsumer claim.
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// The provisioner that is to provision a claim (and its beta spelling).
pub const STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
pub const BETA_STORAGE_PROVISIONER: &str = "volume.beta.kubernetes.io/storage-provisioner";
/// The message of the `WaitForFirstConsumer` Event, as Kubernetes words it.
pub const WAIT_FOR_FIRST_CONSUMER: &str = "waiting for first consumer to be created before binding";

pub fn annotation<'a>(meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// The class a claim asks for ("" = none).
pub fn claim_class(c: &PersistentVolumeClaim) -> &str {
    c.spec.as_ref().and_then(|s| s.storage_class_name.as_deref()).unwrap_or("")
}

pub fn volume_class(v: &PersistentVolume) -> &str {
    v.spec.as_ref().and_then(|s| s.storage_class_name.as_deref()).unwrap_or("")
}

/// Bytes of a quantity (rounded up); 0 when malformed.
pub fn bytes(q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>) -> i128 {
    q.and_then(|q| keelson_apimachinery::quantity::parse_quantity_milli(&q.0)).map(|m| (m + 999).div_euclid(1000)).unwrap_or(0)
}

/// The storage a claim requests.
pub fn requested(c: &PersistentVolumeClaim) -> i128 {
    bytes(c.spec.as_ref().and_then(|s| s.resources.as_ref()).and_then(|r| r.requests.as_ref()).and_then(|r| r.get("storage")))
}

pub fn capacity(v: &PersistentVolume) -> i128 {
    bytes(v.spec.as_ref().and_then(|s| s.capacity.as_ref()).and_then(|c| c.get("storage")))
}

fn volume_mode<'a>(m: Option<&'a String>) -> &'a str {
    m.map(String::as_str).unwrap_or("Filesystem")
}

/// Whether the volume's `claimRef` names this claim (by namespace and name, and uid when
/// the reference has one).
pub fn refers_to(v: &PersistentVolume, c: &PersistentVolumeClaim) -> bool {
    let Some(r) = v.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else { return false };
    r.namespace == c.metadata.namespace && r.name == c.metadata.name && r.uid.as_deref().is_none_or(|u| u.is_empty() || Some(u) == c.metadata.uid.as_deref())
}

fn claimed(v: &PersistentVolume) -> bool {
    v.spec.as_ref().and_then(|s| s.claim_ref.as_ref()).is_some()
}

/// Whether `node` satisfies the volume's required node affinity (a volume without one is
/// reachable from every node).
pub fn reachable_from(v: &PersistentVolume, node: &Node) -> bool {
    let Some(required) = v.spec.as_ref().and_then(|s| s.node_affinity.as_ref()).and_then(|a| a.required.as_ref()) else { return true };
    required.node_selector_terms.iter().any(|t| keelson_scheduler::selectors::term_matches(t, node))
}

/// Why `v` cannot serve `c` (class, access modes, volume mode, size, selector), or `None`
/// when it can. Kubernetes' `checkVolumeSatisfyClaim` plus the selector.
pub fn mismatch(v: &PersistentVolume, c: &PersistentVolumeClaim) -> Option<String> {
    let (vs, cs) = (v.spec.as_ref()?, c.spec.as_ref()?);
    if volume_class(v) != claim_class(c) {
        return Some("storageClassName does not match".into());
    }
    let have = vs.access_modes.clone().unwrap_or_default();
    if cs.access_modes.iter().flatten().any(|m| !have.contains(m)) {
        return Some("incompatible accessMode".into());
    }
    if volume_mode(vs.volume_mode.as_ref()) != volume_mode(cs.volume_mode.as_ref()) {
        return Some("incompatible volumeMode".into());
    }
    if capacity(v) < requested(c) {
        return Some("requested PV is too small".into());
    }
    if let Some(sel) = &cs.selector {
        if !keelson_scheduler::selectors::label_selector_matches(sel, v.metadata.labels.as_ref().unwrap_or(&BTreeMap::new())) {
            return Some("volume's labels do not match the claim's selector".into());
        }
    }
    None
}

/// The volume `c` should be bound to, among `volumes`: one pre-bound to it (its
/// `claimRef` names the claim) if it fits, else the smallest unclaimed fitting one (ties
/// by name). With `delay_binding` (WaitForFirstConsumer) only pre-bound volumes count
/// unless the claim has a selected node, and then only volumes reachable from it.
pub fn best_match<'a>(c: &PersistentVolumeClaim, volumes: &[&'a PersistentVolume], delay_binding: bool, selected: Option<&Node>) -> Option<&'a PersistentVolume> {
    let usable = |v: &&&PersistentVolume| v.metadata.deletion_timestamp.is_none() && !matches!(phase(v), Some("Released" | "Failed")) && mismatch(v, c).is_none();
    if let Some(v) = volumes.iter().filter(usable).find(|v| refers_to(v, c)) {
        return Some(v);
    }
    if delay_binding && selected.is_none() {
        return None;
    }
    volumes
        .iter()
        .filter(usable)
        .filter(|v| !claimed(v))
        .filter(|v| selected.is_none_or(|n| reachable_from(v, n)))
        .min_by(|a, b| capacity(a).cmp(&capacity(b)).then_with(|| a.metadata.name.cmp(&b.metadata.name)))
        .copied()
}

fn phase(v: &PersistentVolume) -> Option<&str> {
    v.status.as_ref().and_then(|s| s.phase.as_deref())
}

pub fn claim_phase(c: &PersistentVolumeClaim) -> Option<&str> {
    c.status.as_ref().and_then(|s| s.phase.as_deref())
}

/// The default class to give an unbound claim that names none (`storageClassName`
/// absent, not ""), as Kubernetes' retroactive default StorageClass assignment does for a
/// claim created while no default class existed: the newest class annotated
/// `storageclass.kubernetes.io/is-default-class: "true"` (then by name).
pub fn retroactive_default_class(c: &PersistentVolumeClaim, classes: &[&StorageClass]) -> Option<String> {
    let spec = c.spec.as_ref()?;
    if spec.storage_class_name.is_some() || spec.volume_name.as_deref().is_some_and(|v| !v.is_empty()) || c.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let default = |sc: &&&StorageClass| {
        ["storageclass.kubernetes.io/is-default-class", "storageclass.beta.kubernetes.io/is-default-class"].iter().any(|a| annotation(&sc.metadata, a) == Some("true"))
    };
    classes
        .iter()
        .filter(default)
        .max_by(|a, b| a.metadata.creation_timestamp.as_ref().map(|t| t.0).cmp(&b.metadata.creation_timestamp.as_ref().map(|t| t.0)).then_with(|| b.metadata.name.cmp(&a.metadata.name)))
        .and_then(|sc| sc.metadata.name.clone())
}

/// Whether a class delays binding until a pod uses the claim.
pub fn waits_for_consumer(class: Option<&StorageClass>) -> bool {
    class.and_then(|c| c.volume_binding_mode.as_deref()) == Some("WaitForFirstConsumer")
}

/// What the binder does for a claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClaimAction {
    /// Nothing to change.
    None,
    /// Bind the claim to this volume (the volume's side first if it lacks it).
    Bind { volume: String },
    /// Provision a volume on this node with the built-in local-path provisioner.
    Provision { node: Option<String> },
    /// Stay Pending; an Event with this reason and message (Normal unless `warning`).
    Pending { reason: &'static str, message: String, warning: bool },
    /// The claim's volume is gone or given to another claim: phase Lost.
    Lost { message: String },
}

/// What the binder does for claim `c` over the known volumes, its class and the node
/// the scheduler selected for it (if any).
pub fn reconcile_claim(c: &PersistentVolumeClaim, volumes: &[&PersistentVolume], class: Option<&StorageClass>, selected: Option<&Node>) -> ClaimAction {
    if c.metadata.deletion_timestamp.is_some() {
        return ClaimAction::None;
    }
    let completed = annotation(&c.metadata, BIND_COMPLETED).is_some();
    if let Some(vname) = c.spec.as_ref().and_then(|s| s.volume_name.as_deref()).filter(|n| !n.is_empty()) {
        let Some(v) = volumes.iter().find(|v| v.metadata.name.as_deref() == Some(vname)) else {
            if completed {
                return lost(c, "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!");
            }
            return ClaimAction::Pending { reason: "FailedBinding", message: format!("volume \"{vname}\" not found"), warning: true };
        };
        if refers_to(v, c) && v.spec.as_ref().and_then(|s| s.claim_ref.as_ref()).and_then(|r| r.uid.as_deref()).is_some_and(|u| !u.is_empty()) {
            // Both sides agree: make sure the claim says so.
            return if completed && claim_phase(c) == Some("Bound") { ClaimAction::None } else { ClaimAction::Bind { volume: vname.into() } };
        }
        if claimed(v) && !refers_to(v, c) {
            if completed {
                return lost(c, "Two claims are bound to the same volume, this one is bound incorrectly");
            }
            return ClaimAction::Pending { reason: "FailedBinding", message: format!("volume \"{vname}\" already bound to a different claim."), warning: true };
        }
        // The user named the volume: bind it if it fits.
        return match mismatch(v, c) {
            None => ClaimAction::Bind { volume: vname.into() },
            Some(why) => ClaimAction::Pending { reason: "VolumeMismatch", message: format!("Cannot bind to requested volume \"{vname}\": {why}"), warning: true },
        };
    }
    let delay = waits_for_consumer(class);
    if let Some(v) = best_match(c, volumes, delay, selected) {
        return ClaimAction::Bind { volume: v.metadata.name.clone().unwrap_or_default() };
    }
    if delay && selected.is_none() {
        return pending("WaitForFirstConsumer", WAIT_FOR_FIRST_CONSUMER.into(), false);
    }
    match class {
        Some(sc) if sc.provisioner == LOCAL_PATH_PROVISIONER => {
            let node = selected.and_then(|n| n.metadata.name.clone());
            if volumes.iter().any(|v| refers_to(v, c)) {
                // Already provisioned for it (the watch shows it soon, or it is being deleted).
                return ClaimAction::None;
            }
            ClaimAction::Provision { node }
        }
        Some(sc) => pending("ExternalProvisioning", format!("Waiting for a volume to be created either by the external provisioner '{}' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered.", sc.provisioner), false),
        None if claim_class(c).is_empty() => pending("FailedBinding", "no persistent volumes available for this claim and no storage class is set".into(), false),
        None => pending("ProvisioningFailed", format!("storageclass.storage.k8s.io \"{}\" not found", claim_class(c)), true),
    }
}

fn lost(c: &PersistentVolumeClaim, message: &str) -> ClaimAction {
    if claim_phase(c) == Some("Lost") {
        return ClaimAction::None;
    }
    ClaimAction::Lost { message: message.into() }
}

fn pending(reason: &'static str, message: String, warning: bool) -> ClaimAction {
    ClaimAction::Pending { reason, message, warning }
}

/// What the binder does for a volume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VolumeAction {
    None,
    /// Set the volume's phase (Available, Bound, Released, Failed) with a message.
    Phase { phase: &'static str, message: Option<String> },
    /// Its claim is gone and the policy is Delete: delete the volume object (the node
    /// that holds the directory removes it when it sees the deletion).
    Delete,
    /// Queue the claim it names so the claim side of a binding is finished.
    SyncClaim { namespace: String, name: String },
}

/// What happens to volume `v` given the claim its `claimRef` names as it is now
/// (`None`: there is no such claim, checked live — a stale cache must not release a
/// volume).
pub fn reconcile_volume(v: &PersistentVolume, claim: Option<&PersistentVolumeClaim>) -> VolumeAction {
    if v.metadata.deletion_timestamp.is_some() {
        return VolumeAction::None;
    }
    let set = |want: &'static str, message: Option<String>| if phase(v) == Some(want) { VolumeAction::None } else { VolumeAction::Phase { phase: want, message } };
    let Some(r) = v.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else { return set("Available", None) };
    let uid = r.uid.as_deref().unwrap_or("");
    if uid.is_empty() {
        // Pre-bound by a user to a claim that may not exist yet: the claim binds it.
        return set("Available", None);
    }
    let claim = claim.filter(|c| c.metadata.uid.as_deref() == Some(uid));
    if let Some(c) = claim {
        return match c.spec.as_ref().and_then(|s| s.volume_name.as_deref()).filter(|n| !n.is_empty()) {
            Some(n) if Some(n) == v.metadata.name.as_deref() => set("Bound", None),
            // The binding is half done (the volume's side is written): the claim finishes it.
            None => VolumeAction::SyncClaim { namespace: r.namespace.clone().unwrap_or_default(), name: r.name.clone().unwrap_or_default() },
            // The claim is bound to another volume: this one is released.
            Some(_) => release(v),
        };
    }
    release(v)
}

/// The claim of a volume is gone: Released, then what its reclaim policy says.
fn release(v: &PersistentVolume) -> VolumeAction {
    let released = phase(v) == Some("Released");
    match v.spec.as_ref().and_then(|s| s.persistent_volume_reclaim_policy.as_deref()).unwrap_or("Retain") {
        "Delete" if super::provisioner::provisioned_here(v) => {
            if released {
                VolumeAction::Delete
            } else {
                VolumeAction::Phase { phase: "Released", message: None }
            }
        }
        "Delete" | "Recycle" if phase(v) == Some("Failed") => VolumeAction::None,
        "Delete" => VolumeAction::Phase {
            phase: "Failed",
            message: Some(format!("error getting deleter volume plugin for volume \"{}\": no deletable volume plugin matched", v.metadata.name.as_deref().unwrap_or(""))),
        },
        "Recycle" => VolumeAction::Phase { phase: "Failed", message: Some("Recycle is not supported; use Delete or Retain".into()) },
        _ if released => VolumeAction::None,
        _ => VolumeAction::Phase { phase: "Released", message: None },
    }
}
