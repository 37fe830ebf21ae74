//! The DaemonSet controller: one daemon pod per eligible node ([`reconcile::reconcile`]
//! decides), placed by the scheduler through node affinity on the node's name, rolled
//! to a new template by RollingUpdate or left for OnDelete.

pub mod reconcile;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use keelson_component::events::EventType;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::Resource;
use tokio::time::Instant;

use crate::informers::SyncError;
use crate::pod_creation::{create_in_batches, Creator};
use crate::workloads::WorkloadCtx;

/// While pods are not all available the set is looked at again this often (availability
/// after minReadySeconds comes with time, not with an event).
const ROLLOUT_RECHECK: Duration = Duration::from_secs(5);

fn not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

pub(crate) async fn sync(ctx: Arc<WorkloadCtx>, key: String) -> Result<Option<Duration>, SyncError> {
    let (ns, name) = key.split_once('/').expect("namespace/name");
    let exp_key = format!("daemonset/{key}");
    let Some(ds) = ctx.daemonsets.get(&ObjectRef::new(name).within(ns)) else {
        ctx.expectations.forget(&exp_key);
        return Ok(None);
    };
    let in_store = |n: &str| ctx.pods.get(&ObjectRef::new(n).within(ns));
    if !ctx.expectations.satisfied(&exp_key, Instant::now(), |n| in_store(n).is_some(), |n| in_store(n).is_none_or(|p| p.metadata.deletion_timestamp.is_some())) {
        return Ok(Some(ROLLOUT_RECHECK));
    }
    let all_nodes = ctx.nodes.state();
    let nodes: Vec<&Node> = all_nodes.iter().map(|n| n.as_ref()).collect();
    let all_pods = ctx.pods.state();
    let pods: Vec<&Pod> = all_pods.iter().filter(|p| p.metadata.namespace.as_deref() == Some(ns)).map(|p| p.as_ref()).collect();
    let plan = reconcile::reconcile(&ds, &nodes, &pods, jiff::Timestamp::now());
    let hash = reconcile::revision_hash(&ds);
    let all_revisions = ctx.revisions.state();
    let revisions: Vec<&ControllerRevision> = all_revisions.iter().filter(|r| r.metadata.namespace.as_deref() == Some(ns)).map(|r| r.as_ref()).collect();
    let uid = ds.metadata.uid.clone();
    let in_use: BTreeSet<String> = pods
        .iter()
        .filter(|p| crate::pods::controller_of(&p.metadata).is_some_and(|o| Some(&o.uid) == uid.as_ref()))
        .filter_map(|p| p.metadata.labels.as_ref()?.get(reconcile::REVISION_HASH).cloned())
        .collect();
    let template = ds.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default();
    let limit = ds.spec.as_ref().and_then(|s| s.revision_history_limit).unwrap_or(10);
    let owner = crate::pods::controller_ref("apps/v1", "DaemonSet", &ds.metadata);
    let history = crate::revisions::history(&ds.metadata, owner, &format!("{name}-{hash}"), &hash, &template, &revisions, &in_use, limit);
    crate::workloads::apply_history(&ctx, ns, &history).await?;
    let reference = ds.object_ref(&());
    let api: Api<Pod> = Api::namespaced(ctx.term.client.clone(), ns);
    if !plan.delete.is_empty() {
        ctx.expectations.deleted(&exp_key, plan.delete.iter().cloned(), Instant::now());
        let dp = DeleteParams::default();
        let results = futures::future::join_all(plan.delete.iter().map(|n| api.delete(n, &dp))).await;
        for (pod, r) in plan.delete.iter().zip(results) {
            match r {
                Ok(_) => ctx.daemonset_events.publish(&reference, EventType::Normal, "SuccessfulDelete", &format!("Deleted pod: {pod}")).await,
                Err(e) if not_found(&e) => {}
                Err(e) => return Err(SyncError::from_kube(e)),
            }
        }
    }
    if !plan.create.is_empty() {
        let who = Creator { expectations: &ctx.expectations, key: &exp_key, events: &ctx.daemonset_events, reference: &reference };
        let templates: Vec<Pod> = plan.create.iter().map(|node| reconcile::pod_for(&ds, node, &hash)).collect();
        create_in_batches(&api, &who, &templates).await?;
    }
    let mut status = plan.status.clone();
    status.conditions = ds.status.as_ref().and_then(|s| s.conditions.clone());
    if ds.status.as_ref() != Some(&status) {
        let sets: Api<DaemonSet> = Api::namespaced(ctx.term.client.clone(), ns);
        let mut updated = (*ds).clone();
        updated.status = Some(status.clone());
        sets.replace_status(name, &PostParams::default(), &updated).await.map_err(SyncError::from_kube)?;
    }
    let settled = status.number_available.unwrap_or(0) == status.desired_number_scheduled && status.updated_number_scheduled.unwrap_or(0) == status.desired_number_scheduled;
    Ok((!settled).then_some(ROLLOUT_RECHECK))
}
