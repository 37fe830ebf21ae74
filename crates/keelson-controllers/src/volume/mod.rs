//! The PersistentVolume controller: binds claims to volumes ([`binder`]) and provisions
//! volumes of the built-in local-path class ([`provisioner`]), as Kubernetes'
//! `persistentvolume` controller and k3s's local-path-provisioner do. A claim of an
//! Immediate class is bound (or provisioned for) at once; one of a WaitForFirstConsumer
//! class waits, with the `WaitForFirstConsumer` Event, until the scheduler annotates it
//! with the node of its first pod ([`binder::SELECTED_NODE`]). A volume whose claim is
//! gone is Released, then deleted under reclaim policy Delete (the node's agent removes
//! the directory) or kept under Retain.
//!
//! # Guarantees
//! - A volume is given to one claim: the volume's `claimRef` is written first, with the
//!   resourceVersion the decision was made on, so of two binders (or two claims racing
//!   for one volume) one write fails with a conflict and that claim is synced again.
//! - A volume is released only after a live read shows its claim gone.

pub mod binder;
pub mod provisioner;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::reflector::ObjectRef;
use kube::Resource;
use keelson_component::events::EventType;
use serde_json::json;

use crate::informers::SyncError;
use crate::volumes::VolumeCtx;
use binder::{ClaimAction, VolumeAction, BIND_COMPLETED, BOUND_BY_CONTROLLER, SELECTED_NODE};

fn conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

fn not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

pub(crate) async fn sync_claim(ctx: Arc<VolumeCtx>, key: String) -> Result<Option<Duration>, SyncError> {
    let (ns, name) = key.split_once('/').expect("namespace/name");
    let Some(claim) = ctx.claims.get(&ObjectRef::new(name).within(ns)) else {
        ctx.forget_event(&key);
        return Ok(None);
    };
    let all_classes = ctx.classes.state();
    let classes: Vec<&k8s_openapi::api::storage::v1::StorageClass> = all_classes.iter().map(|c| c.as_ref()).collect();
    if let Some(default) = binder::retroactive_default_class(&claim, &classes) {
        let mut c = (*claim).clone();
        c.spec.get_or_insert_with(Default::default).storage_class_name = Some(default.clone());
        let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.term.client.clone(), ns);
        return match api.replace(name, &PostParams::default(), &c).await {
            Ok(_) => {
                tracing::info!(claim = %key, class = %default, "gave the claim the default StorageClass");
                Ok(None)
            }
            Err(e) if conflict(&e) || not_found(&e) => Ok(None),
            Err(e) => Err(SyncError::from_kube(e)),
        };
    }
    let all = ctx.volumes.state();
    let volumes: Vec<&PersistentVolume> = all.iter().map(|v| v.as_ref()).collect();
    let class_name = binder::claim_class(&claim).to_string();
    let class = (!class_name.is_empty()).then(|| ctx.classes.get(&ObjectRef::new(&class_name))).flatten();
    let selected = binder::annotation(&claim.metadata, SELECTED_NODE).and_then(|n| ctx.nodes.get(&ObjectRef::new(n)));
    match binder::reconcile_claim(&claim, &volumes, class.as_deref(), selected.as_deref()) {
        ClaimAction::None => Ok(None),
        ClaimAction::Bind { volume } => {
            let Some(pv) = ctx.volumes.get(&ObjectRef::new(&volume)) else { return Ok(Some(Duration::from_millis(500))) };
            bind(&ctx, &claim, &pv).await
        }
        ClaimAction::Provision { node } => {
            let Some(class) = class else { return Ok(None) };
            let node = node.and_then(|n| ctx.nodes.get(&ObjectRef::new(&n)));
            let regarding = claim.object_ref(&());
            match provisioner::provision(&claim, &class, node.as_deref()) {
                Ok(pv) => {
                    let pv_name = pv.metadata.name.clone().unwrap_or_default();
                    let api: Api<PersistentVolume> = Api::all(ctx.term.client.clone());
                    match api.create(&PostParams::default(), &pv).await {
                        Ok(_) => {
                            tracing::info!(claim = %key, volume = %pv_name, "provisioned a local-path volume");
                            ctx.events.publish(&regarding, EventType::Normal, "ProvisioningSucceeded", &format!("Successfully provisioned volume {pv_name}")).await;
                            Ok(None)
                        }
                        Err(e) if conflict(&e) => Ok(None),
                        Err(e) => Err(SyncError::from_kube(e)),
                    }
                }
                Err(e) => {
                    let message = format!("failed to provision volume with StorageClass \"{class_name}\": {e}");
                    if ctx.new_event(&key, "ProvisioningFailed", &message) {
                        ctx.events.publish(&regarding, EventType::Warning, "ProvisioningFailed", &message).await;
                    }
                    Ok(None)
                }
            }
        }
        ClaimAction::Pending { reason, message, warning } => {
            if binder::claim_phase(&claim) != Some("Pending") {
                set_claim_phase(&ctx, &claim, "Pending").await?;
            }
            if ctx.new_event(&key, reason, &message) {
                let t = if warning { EventType::Warning } else { EventType::Normal };
                ctx.events.publish(&claim.object_ref(&()), t, reason, &message).await;
            }
            Ok(None)
        }
        ClaimAction::Lost { message } => {
            set_claim_phase(&ctx, &claim, "Lost").await?;
            ctx.events.publish(&claim.object_ref(&()), EventType::Warning, "ClaimLost", &message).await;
            Ok(None)
        }
    }
}

async fn set_claim_phase(ctx: &VolumeCtx, claim: &PersistentVolumeClaim, phase: &str) -> Result<(), SyncError> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.term.client.clone(), claim.metadata.namespace.as_deref().unwrap_or("default"));
    match api.patch_status(claim.metadata.name.as_deref().unwrap_or(""), &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": phase}}))).await {
        Ok(_) => Ok(()),
        Err(e) if not_found(&e) => Ok(()),
        Err(e) => Err(SyncError::from_kube(e)),
    }
}

/// Binds `claim` to `pv`: the volume's `claimRef` (conditional on the version decided
/// on), its phase Bound, the claim's `volumeName` and annotations, its status.
async fn bind(ctx: &VolumeCtx, claim: &PersistentVolumeClaim, pv: &PersistentVolume) -> Result<Option<Duration>, SyncError> {
    let ns = claim.metadata.namespace.clone().unwrap_or_else(|| "default".into());
    let name = claim.metadata.name.clone().unwrap_or_default();
    let pv_name = pv.metadata.name.clone().unwrap_or_default();
    let volumes: Api<PersistentVolume> = Api::all(ctx.term.client.clone());
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.term.client.clone(), &ns);
    let has_uid = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()).and_then(|r| r.uid.as_deref()) == claim.metadata.uid.as_deref();
    let mut pv = pv.clone();
    if !(binder::refers_to(&pv, claim) && has_uid) {
        let spec = pv.spec.get_or_insert_with(Default::default);
        if spec.claim_ref.is_none() {
            pv.metadata.annotations.get_or_insert_with(Default::default).insert(BOUND_BY_CONTROLLER.into(), "yes".into());
        }
        let spec = pv.spec.get_or_insert_with(Default::default);
        spec.claim_ref = Some(ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("PersistentVolumeClaim".into()),
            namespace: Some(ns.clone()),
            name: Some(name.clone()),
            uid: claim.metadata.uid.clone(),
            resource_version: claim.metadata.resource_version.clone(),
            ..Default::default()
        });
        pv = match volumes.replace(&pv_name, &PostParams::default(), &pv).await {
            Ok(v) => v,
            // Another claim or binder got the volume first: decide again on the new state.
            Err(e) if conflict(&e) => return Ok(Some(Duration::from_millis(200))),
            Err(e) if not_found(&e) => return Ok(Some(Duration::from_millis(200))),
            Err(e) => return Err(SyncError::from_kube(e)),
        };
    }
    if pv.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Bound") {
        volumes.patch_status(&pv_name, &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": "Bound", "message": null}}))).await.map_err(SyncError::from_kube)?;
    }
    let mut c = claim.clone();
    let spec = c.spec.get_or_insert_with(Default::default);
    let by_controller = spec.volume_name.as_deref().is_none_or(str::is_empty);
    spec.volume_name = Some(pv_name.clone());
    let annotations = c.metadata.annotations.get_or_insert_with(Default::default);
    let mut changed = by_controller || !annotations.contains_key(BIND_COMPLETED);
    annotations.insert(BIND_COMPLETED.into(), "yes".into());
    if by_controller {
        changed |= annotations.insert(BOUND_BY_CONTROLLER.into(), "yes".into()).is_none();
    }
    if changed {
        c = match claims.replace(&name, &PostParams::default(), &c).await {
            Ok(c) => c,
            Err(e) if conflict(&e) => return Ok(Some(Duration::from_millis(200))),
            Err(e) if not_found(&e) => return Ok(None),
            Err(e) => return Err(SyncError::from_kube(e)),
        };
    }
    let pv_spec = pv.spec.clone().unwrap_or_default();
    let status = json!({"status": {"phase": "Bound", "accessModes": pv_spec.access_modes, "capacity": pv_spec.capacity}});
    claims.patch_status(&name, &PatchParams::default(), &Patch::Merge(status)).await.map_err(SyncError::from_kube)?;
    let _ = c;
    tracing::info!(claim = %format!("{ns}/{name}"), volume = %pv_name, "bound");
    ctx.forget_event(&format!("{ns}/{name}"));
    Ok(None)
}

pub(crate) async fn sync_volume(ctx: Arc<VolumeCtx>, name: String) -> Result<Option<Duration>, SyncError> {
    let Some(pv) = ctx.volumes.get(&ObjectRef::new(&name)) else { return Ok(None) };
    let claim_ref = pv.spec.as_ref().and_then(|s| s.claim_ref.clone());
    let mut claim = None;
    if let Some(r) = claim_ref.as_ref().filter(|r| r.uid.as_deref().is_some_and(|u| !u.is_empty())) {
        let (ns, cname) = (r.namespace.clone().unwrap_or_default(), r.name.clone().unwrap_or_default());
        claim = ctx.claims.get(&ObjectRef::new(&cname).within(&ns)).map(|c| (*c).clone());
        if claim.as_ref().and_then(|c| c.metadata.uid.as_deref()) != r.uid.as_deref() {
            // Not in the cache (or an older claim of that name): ask the API before
            // releasing anything.
            let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.term.client.clone(), &ns);
            claim = api.get_opt(&cname).await.map_err(SyncError::from_kube)?;
        }
    }
    let api: Api<PersistentVolume> = Api::all(ctx.term.client.clone());
    match binder::reconcile_volume(&pv, claim.as_ref()) {
        VolumeAction::None => Ok(None),
        VolumeAction::Phase { phase, message } => {
            match api.patch_status(&name, &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": phase, "message": message}}))).await {
                Ok(_) => Ok(None),
                Err(e) if not_found(&e) => Ok(None),
                Err(e) => Err(SyncError::from_kube(e)),
            }
        }
        VolumeAction::Delete => {
            let dp = DeleteParams { preconditions: Some(Preconditions { uid: pv.metadata.uid.clone(), resource_version: None }), ..Default::default() };
            match api.delete(&name, &dp).await {
                Ok(_) => {
                    tracing::info!(volume = %name, "deleted a released volume (reclaim policy Delete)");
                    Ok(None)
                }
                Err(e) if not_found(&e) || conflict(&e) => Ok(None),
                Err(e) => Err(SyncError::from_kube(e)),
            }
        }
        VolumeAction::SyncClaim { namespace, name } => {
            ctx.claim_queue.add(&format!("{namespace}/{name}"));
            Ok(None)
        }
    }
}
