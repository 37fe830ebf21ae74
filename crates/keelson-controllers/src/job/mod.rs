//! The Job controller: runs a Job's pods to completion ([`reconcile::reconcile`] decides)
//! and deletes finished Jobs whose `ttlSecondsAfterFinished` has passed (Kubernetes'
//! ttl-after-finished controller, folded in here). The executor writes the status before
//! it removes any pod's tracking finalizer, so a crash in between loses no count. Orphans
//! the selector matches are adopted (with the finalizer) and pods it no longer matches
//! released (without it) before anything else.

pub mod failure_policy;
pub mod reconcile;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use keelson_component::events::EventType;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::Resource;
use serde_json::json;
use tokio::time::Instant;

use crate::informers::SyncError;
use crate::pod_creation::{adopt, create_in_batches, may_adopt, release, Creator};
use crate::pods::controller_of;
use crate::workloads::WorkloadCtx;
use reconcile::{Plan, TRACKING_FINALIZER};

fn not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

pub(crate) async fn sync(ctx: Arc<WorkloadCtx>, key: String) -> Result<Option<Duration>, SyncError> {
    let (ns, name) = key.split_once('/').expect("namespace/name");
    let pod_api: Api<Pod> = Api::namespaced(ctx.term.client.clone(), ns);
    let Some(job) = ctx.jobs.get(&ObjectRef::new(name).within(ns)) else {
        ctx.expectations.forget(&format!("job/{key}"));
        ctx.job_status_written.forget(&key);
        return release_orphans(&ctx, ns, name, &pod_api).await.map(|_| None);
    };
    let exp_key = format!("job/{key}");
    let in_store = |n: &str| ctx.pods.get(&ObjectRef::new(n).within(ns));
    let now = Instant::now();
    if !ctx.expectations.satisfied(&exp_key, now, |n| in_store(n).is_some(), |n| in_store(n).is_none_or(|p| p.metadata.deletion_timestamp.is_some())) {
        return Ok(Some(Duration::from_secs(5)));
    }
    if !ctx.job_status_written.seen(&key, job.metadata.resource_version.as_deref()) {
        // The watch brings our last status write, and with it this key again.
        return Ok(Some(Duration::from_secs(1)));
    }
    let jobs: Api<Job> = Api::namespaced(ctx.term.client.clone(), ns);
    if let Some(left) = reconcile::ttl_remaining(&job, jiff::Timestamp::now()) {
        if left.is_zero() && job.metadata.deletion_timestamp.is_none() {
            // As the ttl-after-finished controller: foreground, so its pods go first.
            tracing::info!(job = %key, "deleting a finished Job whose ttlSecondsAfterFinished has passed");
            let dp = DeleteParams { preconditions: job.metadata.uid.clone().map(|uid| kube::api::Preconditions { uid: Some(uid), resource_version: None }), ..DeleteParams::foreground() };
            return match jobs.delete(name, &dp).await {
                Ok(_) => Ok(None),
                Err(e) if not_found(&e) => Ok(None),
                Err(e) => Err(SyncError::from_kube(e)),
            };
        }
    }
    let all = ctx.pods.state();
    let pods: Vec<&Pod> = all.iter().filter(|p| p.metadata.namespace.as_deref() == Some(ns)).map(|p| p.as_ref()).collect();
    let plan = reconcile::reconcile(&job, &pods, jiff::Timestamp::now());
    execute(&ctx, &exp_key, &job, &plan, &pod_api, &jobs).await?;
    let ttl = reconcile::ttl_remaining(&Job { status: Some(plan.status.clone()), ..(*job).clone() }, jiff::Timestamp::now());
    Ok([plan.requeue, ttl.map(|t| t + Duration::from_millis(100))].into_iter().flatten().min())
}

async fn execute(ctx: &WorkloadCtx, exp_key: &str, job: &Job, plan: &Plan, pod_api: &Api<Pod>, jobs: &Api<Job>) -> Result<(), SyncError> {
    let reference = job.object_ref(&());
    let name = job.metadata.name.as_deref().unwrap_or_default();
    let ns = job.metadata.namespace.as_deref().unwrap_or("default");
    // Claims first, as Kubernetes' ControllerRefManager: adopted pods get the finalizer.
    let owner = crate::pods::controller_ref("batch/v1", "Job", &job.metadata);
    if !plan.adopt.is_empty() && may_adopt(jobs, &owner).await? {
        for pod in &plan.adopt {
            if let Some(current) = ctx.pods.get(&ObjectRef::new(pod).within(ns)) {
                adopt(pod_api, &current, &owner, Some(TRACKING_FINALIZER)).await?;
            }
        }
    }
    for pod in &plan.release {
        if let Some(current) = ctx.pods.get(&ObjectRef::new(pod).within(ns)) {
            release(pod_api, &current, &owner.uid, Some(TRACKING_FINALIZER)).await?;
        }
    }
    // Status first: what is uncounted is recorded before any finalizer goes.
    if job.status.as_ref() != Some(&plan.status) {
        let mut updated = job.clone();
        updated.status = Some(plan.status.clone());
        let written = jobs.replace_status(name, &PostParams::default(), &updated).await.map_err(SyncError::from_kube)?;
        let key = format!("{}/{name}", job.metadata.namespace.as_deref().unwrap_or("default"));
        ctx.job_status_written.wrote(&key, written.metadata.resource_version.as_deref());
    }
    for pod in &plan.remove_finalizers {
        remove_finalizer(ctx, ns, pod_api, pod).await?;
    }
    if !plan.delete.is_empty() {
        ctx.expectations.deleted(exp_key, plan.delete.iter().cloned(), Instant::now());
        let dp = DeleteParams::default();
        let deletes = plan.delete.iter().map(|n| pod_api.delete(n, &dp));
        for (pod, r) in plan.delete.iter().zip(futures::future::join_all(deletes).await) {
            match r {
                Ok(_) => ctx.job_events.publish(&reference, EventType::Normal, "SuccessfulDelete", &format!("Deleted pod: {pod}")).await,
                Err(e) if not_found(&e) => {}
                Err(e) => return Err(SyncError::from_kube(e)),
            }
        }
    }
    if !plan.create.is_empty() {
        let who = Creator { expectations: &ctx.expectations, key: exp_key, events: &ctx.job_events, reference: &job.object_ref(&()) };
        let templates: Vec<Pod> = plan.create.iter().map(|i| reconcile::pod_for(job, *i, i.and_then(|i| plan.index_failures.get(&i).copied()).unwrap_or_default())).collect();
        create_in_batches(pod_api, &who, &templates).await?;
    }
    for e in &plan.events {
        let ty = if e.warning { EventType::Warning } else { EventType::Normal };
        ctx.job_events.publish(&reference, ty, e.reason, &e.message).await;
    }
    Ok(())
}

/// Removes the tracking finalizer from pod `ns/pod`, conditional on the version seen.
async fn remove_finalizer(ctx: &WorkloadCtx, ns: &str, api: &Api<Pod>, pod: &str) -> Result<(), SyncError> {
    let Some(current) = ctx.pods.get(&ObjectRef::new(pod).within(ns)) else { return Ok(()) };
    let kept: Vec<&String> = current.metadata.finalizers.iter().flatten().filter(|f| *f != TRACKING_FINALIZER).collect();
    let kept = if kept.is_empty() { serde_json::Value::Null } else { json!(kept) };
    let patch = json!({"metadata": {"finalizers": kept, "resourceVersion": current.metadata.resource_version}});
    match api.patch(pod, &PatchParams::default(), &Patch::Merge(patch)).await {
        Ok(_) => Ok(()),
        Err(e) if not_found(&e) => Ok(()),
        // Changed since the copy we saw: its watch event brings the Job back here.
        Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "Conflict" => Ok(()),
        Err(e) => Err(SyncError::from_kube(e)),
    }
}

/// The Job `ns/name` is gone: pods it controlled must not keep its tracking finalizer
/// (the garbage collector deletes them; the finalizer would keep them forever).
async fn release_orphans(ctx: &WorkloadCtx, ns: &str, name: &str, api: &Api<Pod>) -> Result<(), SyncError> {
    let all = ctx.pods.state();
    let orphans: Vec<String> = all
        .iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(ns))
        .filter(|p| controller_of(&p.metadata).is_some_and(|o| o.kind == "Job" && o.name == name))
        .filter(|p| p.metadata.finalizers.iter().flatten().any(|f| f == TRACKING_FINALIZER))
        .map(|p| p.metadata.name.clone().unwrap_or_default())
        .collect();
    if orphans.is_empty() {
        return Ok(());
    }
    // The snapshot may lag: only a live read saying the Job is gone (or is another) counts.
    let jobs: Api<Job> = Api::namespaced(ctx.term.client.clone(), ns);
    let live_uid = match jobs.get(name).await {
        Ok(j) => j.metadata.uid,
        Err(e) if not_found(&e) => None,
        Err(e) => return Err(SyncError::from_kube(e)),
    };
    for pod in orphans {
        let p = ctx.pods.get(&ObjectRef::new(&pod).within(ns));
        if p.is_some_and(|p| controller_of(&p.metadata).map(|o| Some(&o.uid)) == Some(live_uid.as_ref())) {
            continue;
        }
        remove_finalizer(ctx, ns, api, &pod).await?;
    }
    Ok(())
}
