//! The Endpoints controller: the deprecated Endpoints object of every Service with a
//! selector, kept for clients that do not read EndpointSlices ([`reconcile::reconcile`]
//! decides). The Endpoints of a Service that is gone are deleted.

pub mod reconcile;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::reflector::ObjectRef;

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
    let api: Api<Endpoints> = Api::namespaced(ctx.term.client.clone(), ns);
    let existing = ctx.endpoints.get(&ObjectRef::new(name).within(ns));
    let Some(svc) = ctx.services.get(&ObjectRef::new(name).within(ns)) else {
        // Only Endpoints this controller wrote go with their Service.
        let ours = existing.as_ref().and_then(|e| e.metadata.labels.as_ref()).is_some_and(|l| l.get(reconcile::SKIP_MIRROR).map(String::as_str) == Some("true"));
        if ours {
            match api.delete(name, &DeleteParams::background()).await {
                Ok(_) => {}
                Err(e) if code(&e) == Some(404) => {}
                Err(e) => return Err(SyncError::from_kube(e)),
            }
        }
        return Ok(None);
    };
    let pods = ctx.pods_in(ns);
    let pods: Vec<&Pod> = pods.iter().map(|p| p.as_ref()).collect();
    let pp = PostParams::default();
    let result = match reconcile::reconcile(&svc, &pods, existing.as_deref()) {
        reconcile::EndpointsPlan::Nothing => return Ok(None),
        reconcile::EndpointsPlan::Create(e) => api.create(&pp, &e).await,
        reconcile::EndpointsPlan::Update(e) => api.replace(name, &pp, &e).await,
    };
    match result {
        Ok(_) => Ok(None),
        Err(e) if matches!(code(&e), Some(409 | 404)) => Ok(Some(Duration::from_millis(200))),
        Err(e) => Err(SyncError::from_kube(e)),
    }
}
