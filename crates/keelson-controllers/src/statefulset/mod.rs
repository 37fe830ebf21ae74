//! The StatefulSet controller: pods with stable names and claims, made and removed in
//! order ([`reconcile::reconcile`] decides). A pod is created by its fixed name, so the
//! API server itself refuses a second pod of one identity. The claims' owner references
//! follow the retention policy ([`reconcile::retention_updates`]) before any pod is
//! deleted; the garbage collector does the deleting.

pub mod reconcile;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use keelson_component::events::EventType;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::Resource;
use tokio::time::Instant;

use crate::informers::SyncError;
use crate::workloads::WorkloadCtx;

/// While the set is not settled it is looked at again this often.
const RECHECK: Duration = Duration::from_secs(5);

fn exists(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists")
}

fn not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

pub(crate) async fn sync(ctx: Arc<WorkloadCtx>, key: String) -> Result<Option<Duration>, SyncError> {
    let (ns, name) = key.split_once('/').expect("namespace/name");
    let exp_key = format!("statefulset/{key}");
    let Some(sts) = ctx.statefulsets.get(&ObjectRef::new(name).within(ns)) else {
        ctx.expectations.forget(&exp_key);
        return Ok(None);
    };
    let in_store = |n: &str| ctx.pods.get(&ObjectRef::new(n).within(ns));
    if !ctx.expectations.satisfied(&exp_key, Instant::now(), |n| in_store(n).is_some(), |n| in_store(n).is_none_or(|p| p.metadata.deletion_timestamp.is_some())) {
        return Ok(Some(RECHECK));
    }
    let all_pods = ctx.pods.state();
    let pods: Vec<&Pod> = all_pods.iter().filter(|p| p.metadata.namespace.as_deref() == Some(ns)).map(|p| p.as_ref()).collect();
    let claims: BTreeSet<String> = ctx.claims.state().iter().filter(|c| c.metadata.namespace.as_deref() == Some(ns)).filter_map(|c| c.metadata.name.clone()).collect();
    let plan = reconcile::reconcile(&sts, &pods, &claims, jiff::Timestamp::now());
    let reference = sts.object_ref(&());
    let pp = PostParams::default();
    let claim_api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.term.client.clone(), ns);
    let pod_api: Api<Pod> = Api::namespaced(ctx.term.client.clone(), ns);
    for (pod, claim) in &plan.claims {
        let claim_name = claim.metadata.name.clone().unwrap_or_default();
        match claim_api.create(&pp, claim).await {
            Ok(_) => ctx.statefulset_events.publish(&reference, EventType::Normal, "SuccessfulCreate", &format!("create Claim {claim_name} Pod {pod} in StatefulSet {name} success")).await,
            Err(e) if exists(&e) => {}
            Err(e) => {
                if keelson_component::fence::is_fenced(&e) {
                    return Err(SyncError::Fenced);
                }
                ctx.statefulset_events.publish(&reference, EventType::Warning, "FailedCreate", &format!("create Claim {claim_name} for Pod {pod} in StatefulSet {name} failed error: {e}")).await;
                return Err(SyncError::Api(e));
            }
        }
    }
    // History: the update revision is kept; an older one gives pods below the partition
    // their template.
    let update = reconcile::update_revision(&sts);
    let all_revisions = ctx.revisions.state();
    let revisions: Vec<&ControllerRevision> = all_revisions.iter().filter(|r| r.metadata.namespace.as_deref() == Some(ns)).map(|r| r.as_ref()).collect();
    let uid = sts.metadata.uid.clone();
    let in_use: BTreeSet<String> = pods
        .iter()
        .filter(|p| crate::pods::controller_of(&p.metadata).is_some_and(|o| Some(&o.uid) == uid.as_ref()))
        .filter_map(|p| p.metadata.labels.as_ref()?.get(reconcile::REVISION_HASH).cloned())
        .chain(sts.status.as_ref().and_then(|s| s.current_revision.clone()))
        .collect();
    let template = sts.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default();
    let limit = sts.spec.as_ref().and_then(|s| s.revision_history_limit).unwrap_or(10);
    let hash = update.strip_prefix(&format!("{name}-")).unwrap_or(&update).to_string();
    let owner = crate::pods::controller_ref("apps/v1", "StatefulSet", &sts.metadata);
    let history = crate::revisions::history(&sts.metadata, owner, &update, &hash, &template, &revisions, &in_use, limit);
    crate::workloads::apply_history(&ctx, ns, &history).await?;
    for &ordinal in &plan.create {
        let revision = reconcile::revision_for(&sts, ordinal);
        let old_template = (revision != update)
            .then(|| revisions.iter().find(|r| r.metadata.name.as_deref() == Some(revision.as_str())).and_then(|r| crate::revisions::template_of(r)))
            .flatten();
        // An old revision that is gone can only be made at the current template.
        let revision = if revision != update && old_template.is_none() { update.clone() } else { revision };
        let pod = reconcile::pod_for(&sts, ordinal, &revision, old_template.as_ref());
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        ctx.expectations.created(&exp_key, [pod_name.clone()], Instant::now());
        match pod_api.create(&pp, &pod).await {
            Ok(_) => ctx.statefulset_events.publish(&reference, EventType::Normal, "SuccessfulCreate", &format!("create Pod {pod_name} in StatefulSet {name} successful")).await,
            Err(e) if exists(&e) => {}
            Err(e) => {
                ctx.expectations.forget(&exp_key);
                if keelson_component::fence::is_fenced(&e) {
                    return Err(SyncError::Fenced);
                }
                ctx.statefulset_events.publish(&reference, EventType::Warning, "FailedCreate", &format!("create Pod {pod_name} in StatefulSet {name} failed error: {e}")).await;
                return Err(SyncError::Api(e));
            }
        }
    }
    // The retention policy's owners, before any pod goes (a removed ordinal's claims
    // must be owned by its pod by then).
    let all_claims = ctx.claims.state();
    let ns_claims: Vec<&PersistentVolumeClaim> = all_claims.iter().filter(|c| c.metadata.namespace.as_deref() == Some(ns)).map(|c| c.as_ref()).collect();
    for (claim, refs) in reconcile::retention_updates(&sts, &pods, &ns_claims) {
        let version = ns_claims.iter().find(|c| c.metadata.name.as_deref() == Some(claim.as_str())).and_then(|c| c.metadata.resource_version.clone());
        let refs = if refs.is_empty() { serde_json::Value::Null } else { serde_json::json!(refs) };
        let patch = serde_json::json!({"metadata": {"ownerReferences": refs, "resourceVersion": version}});
        match claim_api.patch(&claim, &PatchParams::default(), &Patch::Merge(patch)).await {
            Ok(_) => {}
            Err(e) if not_found(&e) => {}
            Err(e) => return Err(SyncError::from_kube(e)),
        }
    }
    if !plan.delete.is_empty() {
        ctx.expectations.deleted(&exp_key, plan.delete.iter().cloned(), Instant::now());
        for pod in &plan.delete {
            match pod_api.delete(pod, &DeleteParams::default()).await {
                Ok(_) => ctx.statefulset_events.publish(&reference, EventType::Normal, "SuccessfulDelete", &format!("delete Pod {pod} in StatefulSet {name} successful")).await,
                Err(e) if not_found(&e) => {}
                Err(e) => return Err(SyncError::from_kube(e)),
            }
        }
    }
    let mut status = plan.status.clone();
    status.conditions = sts.status.as_ref().and_then(|s| s.conditions.clone());
    if sts.status.as_ref() != Some(&status) {
        let sets: Api<StatefulSet> = Api::namespaced(ctx.term.client.clone(), ns);
        let mut updated = (*sts).clone();
        updated.status = Some(status.clone());
        sets.replace_status(name, &PostParams::default(), &updated).await.map_err(SyncError::from_kube)?;
    }
    let replicas = sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let settled = status.replicas == replicas && status.ready_replicas == Some(replicas) && status.current_revision == status.update_revision;
    Ok((!settled).then_some(RECHECK))
}
