//! Creating a controller's pods as Kubernetes' controllers do: in slow-start batches
//! (1, 2, 4, … so a failing template costs one request, not hundreds), each created pod
//! recorded in the controller's expectations before the watch shows it, a
//! `SuccessfulCreate` Event per pod and a `FailedCreate` Event for the batch that failed.
//! ReplicaSets, Jobs and DaemonSets share it, and the writes that adopt and release a
//! pod ([`adopt`], [`release`]) for the controllers that claim pods by selector.

use tokio::time::Instant;

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use keelson_component::events::{EventRecorder, EventType};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::expectations::Expectations;
use crate::informers::SyncError;
use crate::replicaset::reconcile::slow_start_batches;

/// Who is creating: the controller's expectations key, Event recorder and object.
pub struct Creator<'a> {
    pub expectations: &'a Expectations,
    pub key: &'a str,
    pub events: &'a EventRecorder,
    pub reference: &'a ObjectReference,
}

/// Creates `pods` in slow-start batches until one fails; a fenced create ends the term.
pub async fn create_in_batches(api: &Api<Pod>, who: &Creator<'_>, pods: &[Pod]) -> Result<(), SyncError> {
    let pp = PostParams::default();
    let mut rest = pods;
    for batch in slow_start_batches(pods.len()) {
        let (now, later) = rest.split_at(batch);
        rest = later;
        let results = futures::future::join_all(now.iter().map(|p| api.create(&pp, p))).await;
        let mut failure = None;
        let mut names = Vec::new();
        for r in results {
            match r {
                Ok(p) => names.push(p.metadata.name.unwrap_or_default()),
                Err(e) => failure = Some(e),
            }
        }
        who.expectations.created(who.key, names.iter().cloned(), Instant::now());
        for name in &names {
            who.events.publish(who.reference, EventType::Normal, "SuccessfulCreate", &format!("Created pod: {name}")).await;
        }
        if let Some(e) = failure {
            if keelson_component::fence::is_fenced(&e) {
                return Err(SyncError::Fenced);
            }
            who.events.publish(who.reference, EventType::Warning, "FailedCreate", &format!("Error creating: {e}")).await;
            return Err(SyncError::Api(e));
        }
    }
    Ok(())
}

fn gone(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// Adopts orphan `pod` (the copy the decision was taken on): `owner` becomes its
/// controller and `finalizer`, if any, is added — conditional on that copy's version,
/// so a pod changed since (perhaps adopted by another) is left for the next sync.
pub async fn adopt(api: &Api<Pod>, pod: &Pod, owner: &OwnerReference, finalizer: Option<&str>) -> Result<(), SyncError> {
    let mut refs = pod.metadata.owner_references.clone().unwrap_or_default();
    refs.retain(|r| r.uid != owner.uid);
    refs.push(owner.clone());
    let mut patch = json!({"metadata": {"ownerReferences": refs, "uid": pod.metadata.uid, "resourceVersion": pod.metadata.resource_version}});
    if let Some(f) = finalizer {
        let mut finalizers = pod.metadata.finalizers.clone().unwrap_or_default();
        if !finalizers.iter().any(|x| x == f) {
            finalizers.push(f.to_string());
        }
        patch["metadata"]["finalizers"] = json!(finalizers);
    }
    write(api, pod, patch).await
}

/// Whether the controller `owner` may adopt orphans, judged on a live read (as
/// Kubernetes' `RecheckDeletionTimestamp`): the cache may not show yet that it is being
/// deleted, and an owner being deleted with `orphan` must not take back what the garbage
/// collector just released.
pub async fn may_adopt<K>(owners: &Api<K>, owner: &OwnerReference) -> Result<bool, SyncError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match owners.get(&owner.name).await {
        Ok(o) => Ok(o.meta().uid.as_deref() == Some(owner.uid.as_str()) && o.meta().deletion_timestamp.is_none()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(SyncError::from_kube(e)),
    }
}

/// Releases `pod` from the owner of uid `owner_uid` (and drops `finalizer`, if any).
pub async fn release(api: &Api<Pod>, pod: &Pod, owner_uid: &str, finalizer: Option<&str>) -> Result<(), SyncError> {
    let refs: Vec<&OwnerReference> = pod.metadata.owner_references.iter().flatten().filter(|o| o.uid != owner_uid).collect();
    let refs = if refs.is_empty() { serde_json::Value::Null } else { json!(refs) };
    let mut patch = json!({"metadata": {"ownerReferences": refs, "uid": pod.metadata.uid, "resourceVersion": pod.metadata.resource_version}});
    if let Some(f) = finalizer {
        let kept: Vec<&String> = pod.metadata.finalizers.iter().flatten().filter(|x| *x != f).collect();
        patch["metadata"]["finalizers"] = if kept.is_empty() { serde_json::Value::Null } else { json!(kept) };
    }
    write(api, pod, patch).await
}

async fn write(api: &Api<Pod>, pod: &Pod, patch: serde_json::Value) -> Result<(), SyncError> {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    match api.patch(name, &PatchParams::default(), &Patch::Merge(patch)).await {
        Ok(_) => Ok(()),
        Err(e) if gone(&e) => Ok(()),
        Err(e) => Err(SyncError::from_kube(e)),
    }
}
