//! The CronJob controller: starts a CronJob's Jobs on its schedule ([`schedule`] reads
//! cron expressions, [`reconcile::reconcile`] decides). The Job name is fixed by the
//! scheduled time, so a create repeated after a lost status write is refused as
//! existing rather than run twice.

pub mod reconcile;
pub mod schedule;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{CronJob, Job};
use keelson_component::events::EventType;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::Resource;

use crate::informers::SyncError;
use crate::workloads::WorkloadCtx;

fn not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

pub(crate) async fn sync(ctx: Arc<WorkloadCtx>, key: String) -> Result<Option<Duration>, SyncError> {
    let (ns, name) = key.split_once('/').expect("namespace/name");
    let Some(cj) = ctx.cronjobs.get(&ObjectRef::new(name).within(ns)) else { return Ok(None) };
    let all = ctx.jobs.state();
    let jobs: Vec<&Job> = all.iter().filter(|j| j.metadata.namespace.as_deref() == Some(ns)).map(|j| j.as_ref()).collect();
    let mut plan = reconcile::reconcile(&cj, &jobs, jiff::Timestamp::now());
    let reference = cj.object_ref(&());
    let job_api: Api<Job> = Api::namespaced(ctx.term.client.clone(), ns);
    let delete = |job: String| {
        let api = job_api.clone();
        let ctx = ctx.clone();
        let reference = reference.clone();
        async move {
            match api.delete(&job, &DeleteParams::background()).await {
                Ok(_) => {
                    ctx.cronjob_events.publish(&reference, EventType::Normal, "SuccessfulDelete", &format!("Deleted job {job}")).await;
                    Ok(())
                }
                Err(e) if not_found(&e) => Ok(()),
                Err(e) => Err(SyncError::from_kube(e)),
            }
        }
    };
    for job in plan.replace.clone() {
        delete(job.clone()).await?;
        if let Some(active) = plan.status.active.as_mut() {
            active.retain(|r| r.name.as_deref() != Some(job.as_str()));
        }
    }
    if let Some(job) = &plan.create {
        let job_name = job.metadata.name.clone().unwrap_or_default();
        match job_api.create(&PostParams::default(), job).await {
            Ok(created) => {
                ctx.cronjob_events.publish(&reference, EventType::Normal, "SuccessfulCreate", &format!("Created job {job_name}")).await;
                let r = k8s_openapi::api::core::v1::ObjectReference {
                    api_version: Some("batch/v1".into()),
                    kind: Some("Job".into()),
                    name: created.metadata.name.clone(),
                    namespace: created.metadata.namespace.clone(),
                    uid: created.metadata.uid.clone(),
                    ..Default::default()
                };
                plan.status.active.get_or_insert_with(Vec::new).push(r);
            }
            // Started before (its status write was lost): lastScheduleTime records it now.
            Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => {}
            Err(e) => {
                if keelson_component::fence::is_fenced(&e) {
                    return Err(SyncError::Fenced);
                }
                ctx.cronjob_events.publish(&reference, EventType::Warning, "FailedCreate", &format!("Error creating job: {e}")).await;
                return Err(SyncError::Api(e));
            }
        }
    }
    if cj.status.as_ref() != Some(&plan.status) {
        let cronjobs: Api<CronJob> = Api::namespaced(ctx.term.client.clone(), ns);
        let mut updated = (*cj).clone();
        updated.status = Some(plan.status.clone());
        cronjobs.replace_status(name, &PostParams::default(), &updated).await.map_err(SyncError::from_kube)?;
    }
    for job in plan.delete_history.clone() {
        delete(job).await?;
    }
    for e in &plan.events {
        let ty = if e.warning { EventType::Warning } else { EventType::Normal };
        ctx.cronjob_events.publish(&reference, ty, e.reason, &e.message).await;
    }
    Ok(plan.requeue)
}
