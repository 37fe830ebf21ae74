//! The garbage collector for the workload objects the controller manager reflects: a
//! sweep every second over the snapshot, decisions by [`reconcile::collect`], and an
//! executor that checks with live reads before it deletes anything. The workload
//! controllers run the same [`sweep`] over their own snapshot, for their own owner kinds.

pub mod generic;
pub mod reconcile;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use keelson_component::Leadership;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use serde_json::json;

use crate::informers::{Ctx, SyncError};
use reconcile::{collect_owned_by, still_orphaned, GcAction, ObjectKey, OWNER_KINDS};

const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// How the collector reaches objects of each kind it judges: the resource and whether
/// it is namespaced.
#[derive(Clone, Default)]
pub struct Kinds(HashMap<String, (ApiResource, bool)>);

impl Kinds {
    /// The kinds the controller manager's own reflectors hold.
    pub fn workloads() -> Self {
        let mut k = Kinds::default();
        k.add("Deployment", ApiResource::erase::<Deployment>(&()), true);
        k.add("ReplicaSet", ApiResource::erase::<ReplicaSet>(&()), true);
        k.add("Pod", ApiResource::erase::<Pod>(&()), true);
        k.add("Job", ApiResource::erase::<Job>(&()), true);
        k.add("CronJob", ApiResource::erase::<CronJob>(&()), true);
        k.add("DaemonSet", ApiResource::erase::<DaemonSet>(&()), true);
        k.add("StatefulSet", ApiResource::erase::<StatefulSet>(&()), true);
        k.add("PersistentVolumeClaim", ApiResource::erase::<PersistentVolumeClaim>(&()), true);
        k
    }

    /// Adds a kind; the first resource of a kind is kept.
    pub fn add(&mut self, kind: &str, resource: ApiResource, namespaced: bool) {
        self.0.entry(kind.to_string()).or_insert((resource, namespaced));
    }

    pub fn knows(&self, kind: &str) -> bool {
        self.0.contains_key(kind)
    }

    /// The API of `key`'s object (its namespace ignored for a cluster-scoped kind).
    fn api(&self, client: &kube::Client, key: &ObjectKey) -> Option<Api<DynamicObject>> {
        let (resource, namespaced) = self.0.get(&key.kind)?;
        Some(if *namespaced { Api::namespaced_with(client.clone(), &key.namespace, resource) } else { Api::all_with(client.clone(), resource) })
    }
}

/// Sweeps until the term ends.
pub(crate) async fn run(ctx: Arc<Ctx>) {
    loop {
        tokio::select! {
            _ = ctx.term.ended.cancelled() => return,
            _ = tokio::time::sleep(SWEEP_EVERY) => {}
        }
        let (deployments, sets, pods) = (ctx.deployments.state(), ctx.replicasets.state(), ctx.pods.state());
        let mut objects: Vec<(&str, &ObjectMeta)> = Vec::with_capacity(deployments.len() + sets.len() + pods.len());
        objects.extend(deployments.iter().map(|d| ("Deployment", &d.metadata)));
        objects.extend(sets.iter().map(|r| ("ReplicaSet", &r.metadata)));
        objects.extend(pods.iter().map(|p| ("Pod", &p.metadata)));
        if !sweep(&ctx.term, &Kinds::workloads(), &objects, &OWNER_KINDS).await {
            return;
        }
    }
}

/// One sweep over `objects` for owners of `owner_kinds`; `false` when a write was fenced
/// (the term is over).
pub(crate) async fn sweep(term: &Leadership, kinds: &Kinds, objects: &[(&str, &ObjectMeta)], owner_kinds: &[&str]) -> bool {
    for action in collect_owned_by(objects, owner_kinds) {
        let span = tracing::info_span!("reconcile", controller = "garbagecollector", action = ?action, trace_id = tracing::field::Empty);
        keelson_tracecontext::continue_trace(&span, None);
        match tracing::Instrument::instrument(execute(&term.client, kinds, owner_kinds, &action), span).await {
            Ok(()) => {}
            Err(SyncError::Fenced) => {
                term.step_down();
                return false;
            }
            Err(e) => tracing::debug!(error = %e, ?action, "garbage collection step failed; the next sweep retries"),
        }
    }
    true
}

fn not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

async fn execute(client: &kube::Client, kinds: &Kinds, owner_kinds: &[&str], action: &GcAction) -> Result<(), SyncError> {
    match action {
        GcAction::DeleteOrphaned { object, owners } => {
            // The snapshot may lag both ways: the dependent is judged again as stored now
            // (an orphaning owner may just have released it), an owner counts as gone only
            // if a live read says so, and the delete holds only for the copy judged.
            let Some(a) = kinds.api(client, object) else { return Ok(()) };
            let Some(dependent) = live(&a, &object.name).await? else { return Ok(()) };
            if !still_orphaned(&dependent.metadata, owners, owner_kinds) {
                return Ok(());
            }
            for (owner, uid) in owners {
                let Some(owners_api) = kinds.api(client, owner) else { return Ok(()) };
                match owners_api.get(&owner.name).await {
                    Ok(o) if o.metadata.uid.as_deref() == Some(uid.as_str()) => return Ok(()),
                    Ok(_) => {}
                    Err(e) if not_found(&e) => {}
                    Err(e) => return Err(SyncError::from_kube(e)),
                }
            }
            let judged = Preconditions { uid: dependent.metadata.uid.clone(), resource_version: dependent.metadata.resource_version.clone() };
            match delete(client, kinds, object, DeleteParams { preconditions: Some(judged), ..DeleteParams::background() }).await {
                // Changed since it was judged: the next sweep judges it again.
                Err(SyncError::Api(kube::Error::Api(s))) if s.code == 409 => Ok(()),
                other => other,
            }
        }
        GcAction::DeleteForeground { object } => delete(client, kinds, object, DeleteParams::foreground()).await,
        GcAction::DropOwners { object, uids } => {
            let Some(a) = kinds.api(client, object) else { return Ok(()) };
            let Some(live) = live(&a, &object.name).await? else { return Ok(()) };
            let kept: Vec<_> = live.metadata.owner_references.unwrap_or_default().into_iter().filter(|o| !uids.contains(&o.uid)).collect();
            let kept = if kept.is_empty() { serde_json::Value::Null } else { json!(kept) };
            let patch = json!({"metadata": {"ownerReferences": kept, "resourceVersion": live.metadata.resource_version}});
            a.patch(&object.name, &PatchParams::default(), &Patch::Merge(patch)).await.map_err(SyncError::from_kube)?;
            Ok(())
        }
        GcAction::RemoveFinalizer { object, finalizer } => {
            let Some(a) = kinds.api(client, object) else { return Ok(()) };
            let Some(live) = live(&a, &object.name).await? else { return Ok(()) };
            let kept: Vec<String> = live.metadata.finalizers.unwrap_or_default().into_iter().filter(|f| f != finalizer).collect();
            let kept = if kept.is_empty() { serde_json::Value::Null } else { json!(kept) };
            let patch = json!({"metadata": {"finalizers": kept, "resourceVersion": live.metadata.resource_version}});
            a.patch(&object.name, &PatchParams::default(), &Patch::Merge(patch)).await.map_err(SyncError::from_kube)?;
            Ok(())
        }
    }
}

/// The object as stored now, or `None` if it is gone.
async fn live(a: &Api<DynamicObject>, name: &str) -> Result<Option<DynamicObject>, SyncError> {
    match a.get(name).await {
        Ok(o) => Ok(Some(o)),
        Err(e) if not_found(&e) => Ok(None),
        Err(e) => Err(SyncError::from_kube(e)),
    }
}

async fn delete(client: &kube::Client, kinds: &Kinds, object: &ObjectKey, params: DeleteParams) -> Result<(), SyncError> {
    let Some(a) = kinds.api(client, object) else { return Ok(()) };
    match a.delete(&object.name, &params).await {
        Ok(_) => {
            tracing::debug!(kind = %object.kind, name = %object.name, "garbage collected");
            Ok(())
        }
        Err(e) if not_found(&e) => Ok(()),
        Err(e) => Err(SyncError::from_kube(e)),
    }
}
