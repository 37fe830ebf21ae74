//! The Deployment controller: rolls the Deployment's template out through ReplicaSets.

pub mod reconcile;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use keelson_component::events::EventType;
use kube::Resource;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use serde_json::json;

use crate::informers::{Ctx, SyncError};
use crate::pods::controller_of;
use crate::work::WorkReceiver;
use reconcile::{Action, REVISION};

/// While a rollout is under way the Deployment is looked at again this often (progress
/// deadlines, availability that comes with time).
const ROLLOUT_RECHECK: Duration = Duration::from_secs(5);
/// A sync that found its cache behind the store looks again this soon.
const CACHE_CATCH_UP: Duration = Duration::from_millis(200);

pub(crate) async fn run(ctx: Arc<Ctx>, rx: WorkReceiver) {
    let queue = ctx.deployment_queue.clone();
    crate::informers::work(&ctx, rx, &queue, "deployment", sync).await;
}


fn now_rfc3339() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

async fn sync(ctx: Arc<Ctx>, key: String) -> Result<Option<Duration>, SyncError> {
    let (ns, name) = key.split_once('/').expect("namespace/name");
    let Some(d) = ctx.deployments.get(&ObjectRef::new(name).within(ns)) else { return Ok(None) };
    if d.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let uid = d.metadata.uid.clone().unwrap_or_default();
    let all = ctx.replicasets.state();
    let owned: Vec<&ReplicaSet> = all
        .iter()
        .filter(|rs| rs.metadata.namespace.as_deref() == Some(ns) && controller_of(&rs.metadata).is_some_and(|o| o.uid == uid))
        .map(|rs| rs.as_ref())
        .collect();
    let plan = reconcile::reconcile(&d, &owned, &now_rfc3339());
    let sets: Api<ReplicaSet> = Api::namespaced(ctx.term.client.clone(), ns);
    let deployments: Api<Deployment> = Api::namespaced(ctx.term.client.clone(), ns);
    let mut status = plan.status.clone();
    for action in &plan.actions {
        match action {
            Action::Create(rs) => match sets.create(&PostParams::default(), rs).await {
                Ok(created) => {
                    let replicas = created.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
                    let rs_name = created.metadata.name.unwrap_or_default();
                    if replicas > 0 {
                        ctx.deployment_events.publish(&d.object_ref(&()), EventType::Normal, "ScalingReplicaSet", &format!("Scaled up replica set {rs_name} from 0 to {replicas}")).await;
                    }
                }
                Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => {
                    let rs_name = rs.metadata.name.clone().unwrap_or_default();
                    let existing = sets.get_opt(&rs_name).await.map_err(SyncError::from_kube)?;
                    if existing.as_ref().is_none_or(|e| reconcile::is_current_set_of(&d, e)) {
                        // Ours, made by an earlier sync this cache has not caught up with
                        // (or gone again): the next sync sees it. Nothing else is written
                        // from this view, least of all a collision.
                        return Ok(Some(CACHE_CATCH_UP));
                    }
                    // A set of that name that is not ours: a hash collision; the next name differs.
                    status.collision_count = Some(status.collision_count.unwrap_or(0) + 1);
                }
                Err(e) => return Err(SyncError::from_kube(e)),
            },
            Action::Scale { name: rs_name, replicas, revision, from } => {
                let (want, surge) = (d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1), reconcile::surge_and_unavailable(&d).0);
                let mut annotations = serde_json::Map::new();
                annotations.insert(reconcile::DESIRED_REPLICAS.into(), json!(want.to_string()));
                annotations.insert(reconcile::MAX_REPLICAS.into(), json!((want + surge).to_string()));
                if let Some(rev) = revision {
                    annotations.insert(REVISION.into(), json!(rev));
                }
                let patch = json!({"spec": {"replicas": replicas}, "metadata": {"annotations": annotations}});
                sets.patch(rs_name, &PatchParams::default(), &Patch::Merge(patch)).await.map_err(SyncError::from_kube)?;
                if replicas != from {
                    let way = if replicas > from { "up" } else { "down" };
                    ctx.deployment_events.publish(&d.object_ref(&()), EventType::Normal, "ScalingReplicaSet", &format!("Scaled {way} replica set {rs_name} from {from} to {replicas}")).await;
                }
            }
            Action::Delete(rs_name) => match sets.delete(rs_name, &DeleteParams::background()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(SyncError::from_kube(e)),
            },
        }
    }
    let current_revision = d.metadata.annotations.as_ref().and_then(|a| a.get(REVISION)).cloned();
    if plan.revision.is_some() && plan.revision != current_revision {
        deployments
            .patch(name, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"annotations": {REVISION: plan.revision}}})))
            .await
            .map_err(SyncError::from_kube)?;
    }
    if d.status.as_ref() != Some(&status) {
        deployments.patch_status(name, &PatchParams::default(), &Patch::Merge(json!({"status": status}))).await.map_err(SyncError::from_kube)?;
    }
    let complete = status.conditions.iter().flatten().any(|c| c.type_ == "Progressing" && c.reason.as_deref() == Some("NewReplicaSetAvailable"));
    Ok((!complete).then_some(ROLLOUT_RECHECK))
}
