//! The EndpointSlice controller: a Service's selected pods as slices of at most 100
//! endpoints ([`reconcile::reconcile`] decides), kept as pods come, go and change
//! readiness; slices of a Service that is gone, or lost its selector, are deleted.

pub mod reconcile;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use keelson_component::events::EventType;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::Resource;

use crate::informers::SyncError;
use crate::services::ServiceCtx;

fn code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

pub(crate) async fn sync(ctx: Arc<ServiceCtx>, key: String) -> Result<Option<Duration>, SyncError> {
    let (ns, name) = key.split_once('/').expect("namespace/name");
    let all = ctx.slices.state();
    let existing: Vec<&EndpointSlice> = all.iter().filter(|s| s.metadata.namespace.as_deref() == Some(ns)).map(|s| s.as_ref()).collect();
    let api: Api<EndpointSlice> = Api::namespaced(ctx.term.client.clone(), ns);
    let Some(svc) = ctx.services.get(&ObjectRef::new(name).within(ns)) else {
        // The Service is gone: its slices go too (the garbage collector would, by owner).
        for s in existing.iter().filter(|s| reconcile::owned_slice(s, name)) {
            match api.delete(s.metadata.name.as_deref().unwrap_or(""), &DeleteParams::background()).await {
                Ok(_) => {}
                Err(e) if code(&e) == Some(404) => {}
                Err(e) => return Err(SyncError::from_kube(e)),
            }
        }
        return Ok(None);
    };
    if svc.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let pods = ctx.pods_in(ns);
    let pods: Vec<&Pod> = pods.iter().map(|p| p.as_ref()).collect();
    let started = std::time::Instant::now();
    let plan = reconcile::reconcile(&svc, &pods, &ctx.zones(), &existing);
    if plan == reconcile::SlicePlan::default() {
        return Ok(None);
    }
    let reference = svc.object_ref(&());
    let retry = match write_plan(&api, &plan).await {
        Ok(retry) => retry,
        Err(e) if keelson_component::fence::is_fenced(&e) => return Err(SyncError::Fenced),
        Err(e) => {
            publish_failure(&ctx, &reference, &svc, &e).await;
            return Err(SyncError::Api(e));
        }
    };
    tracing::debug!(created = plan.create.len(), updated = plan.update.len(), deleted = plan.delete.len(), took_ms = started.elapsed().as_millis() as u64, "slices written");
    Ok(retry)
}

/// Creates, replaces and deletes what `plan` says. A slice made or changed by an
/// earlier write the watch has not shown yet asks for a look again shortly (the
/// returned delay); a slice already gone is no error.
pub(crate) async fn write_plan(api: &Api<EndpointSlice>, plan: &reconcile::SlicePlan) -> Result<Option<Duration>, kube::Error> {
    let pp = PostParams::default();
    let mut retry = None;
    for s in &plan.create {
        match api.create(&pp, s).await {
            Ok(_) => {}
            Err(e) if code(&e) == Some(409) => retry = Some(Duration::from_millis(200)),
            Err(e) => return Err(e),
        }
    }
    for s in &plan.update {
        match api.replace(s.metadata.name.as_deref().unwrap_or(""), &pp, s).await {
            Ok(_) => {}
            Err(e) if matches!(code(&e), Some(409 | 404)) => retry = Some(Duration::from_millis(200)),
            Err(e) => return Err(e),
        }
    }
    for n in &plan.delete {
        match api.delete(n, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(e) if code(&e) == Some(404) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(retry)
}

async fn publish_failure(ctx: &ServiceCtx, reference: &k8s_openapi::api::core::v1::ObjectReference, svc: &Service, e: &kube::Error) {
    let name = svc.metadata.name.as_deref().unwrap_or("");
    ctx.slice_events.publish(reference, EventType::Warning, "FailedToUpdateEndpointSlices", &format!("Error updating Endpoint Slices for Service {}/{name}: {e}", svc.metadata.namespace.as_deref().unwrap_or(""))).await;
}
