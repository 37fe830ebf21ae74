//! The reflectors and work queues of the workload controllers (Job, CronJob, DaemonSet,
//! StatefulSet), apart from the ReplicaSet/Deployment ones in [`crate::informers`]: a pod
//! goes to the Job, DaemonSet or StatefulSet that controls it (an orphan to every Job
//! whose selector matches it), a Job to itself and its
//! CronJob, a Node to every DaemonSet. One term runs them all until it ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod};
use keelson_component::events::EventRecorder;
use keelson_component::Leadership;
use kube::api::Api;
use kube::runtime::reflector::Store;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::expectations::Expectations;
use crate::garbage::reconcile::WORKLOAD_OWNER_KINDS;
use crate::informers::{key_of, SyncError};
use crate::pods::controller_of;
use crate::selector::Selector;
use crate::work::{named_queue, WorkQueue};

/// The resourceVersion of each object's last status write by this term, so that a sync
/// waits until the watch shows it: a decision taken on an older copy could otherwise
/// count a finished pod twice (as Kubernetes' Job controller guards finalizer removals).
#[derive(Default)]
pub struct WrittenVersions(Mutex<HashMap<String, u64>>);

impl WrittenVersions {
    pub fn wrote(&self, key: &str, resource_version: Option<&str>) {
        if let Some(rv) = resource_version.and_then(|v| v.parse().ok()) {
            self.0.lock().expect("versions lock").insert(key.to_string(), rv);
        }
    }

    /// Whether the copy at `resource_version` includes the last write (forgetting it then).
    pub fn seen(&self, key: &str, resource_version: Option<&str>) -> bool {
        let mut m = self.0.lock().expect("versions lock");
        let Some(&want) = m.get(key) else { return true };
        let have: Option<u64> = resource_version.and_then(|v| v.parse().ok());
        if have.is_none_or(|h| h >= want) {
            m.remove(key);
            return true;
        }
        false
    }

    pub fn forget(&self, key: &str) {
        self.0.lock().expect("versions lock").remove(key);
    }
}

/// What the workload controllers of one term share.
pub struct WorkloadCtx {
    pub term: Leadership,
    pub pods: Store<Pod>,
    pub jobs: Store<Job>,
    pub cronjobs: Store<CronJob>,
    pub daemonsets: Store<DaemonSet>,
    pub nodes: Store<Node>,
    pub statefulsets: Store<StatefulSet>,
    pub claims: Store<PersistentVolumeClaim>,
    pub revisions: Store<ControllerRevision>,
    pub job_queue: WorkQueue,
    pub cronjob_queue: WorkQueue,
    pub daemonset_queue: WorkQueue,
    pub statefulset_queue: WorkQueue,
    pub expectations: Expectations,
    /// Job status writes not yet seen through the watch.
    pub job_status_written: WrittenVersions,
    pub job_events: EventRecorder,
    pub cronjob_events: EventRecorder,
    pub daemonset_events: EventRecorder,
    pub statefulset_events: EventRecorder,
}

fn owner_key(meta: &ObjectMeta, kind: &str) -> Option<String> {
    let owner = controller_of(meta).filter(|o| o.kind == kind)?;
    Some(format!("{}/{}", meta.namespace.as_deref().unwrap_or("default"), owner.name))
}

/// Runs the workload controllers until the term ends.
pub async fn run(term: Leadership, reflectors: Arc<crate::shared_reflectors::SharedReflectors>) {
    let client = term.client.clone();
    let (job_queue, job_rx) = named_queue(&term, "job");
    let (cronjob_queue, cronjob_rx) = named_queue(&term, "cronjob");
    let (daemonset_queue, daemonset_rx) = named_queue(&term, "daemonset");
    let (statefulset_queue, statefulset_rx) = named_queue(&term, "statefulset");
    let jobs = {
        let (jq, cq) = (job_queue.clone(), cronjob_queue.clone());
        reflectors.watch(move |j: &Job| {
            jq.add(&key_of(j));
            if let Some(k) = owner_key(&j.metadata, "CronJob") {
                cq.add(&k);
            }
        })
    };
    let pods = {
        let (jq, dq, sq) = (job_queue.clone(), daemonset_queue.clone(), statefulset_queue.clone());
        let all_jobs = jobs.clone();
        reflectors.watch(move |p: &Pod| {
            if let Some(k) = owner_key(&p.metadata, "Job") {
                jq.add(&k);
            }
            if controller_of(&p.metadata).is_none() {
                // An orphan: every Job of its namespace whose selector matches may adopt it.
                let labels = p.metadata.labels.clone().unwrap_or_default();
                for j in all_jobs.state().iter().filter(|j| j.metadata.namespace == p.metadata.namespace) {
                    if j.spec.as_ref().is_some_and(|s| s.selector.as_ref().is_some_and(|sel| Selector::new(sel).matches(&labels))) {
                        jq.add(&key_of(j.as_ref()));
                    }
                }
            }
            if let Some(k) = owner_key(&p.metadata, "DaemonSet") {
                dq.add(&k);
            }
            if let Some(k) = owner_key(&p.metadata, "StatefulSet") {
                sq.add(&k);
            }
        })
    };
    let statefulsets = {
        let sq = statefulset_queue.clone();
        reflectors.watch(move |s: &StatefulSet| sq.add(&key_of(s)))
    };
    let revisions = {
        let (dq, sq) = (daemonset_queue.clone(), statefulset_queue.clone());
        reflectors.watch(move |r: &ControllerRevision| {
            if let Some(k) = owner_key(&r.metadata, "DaemonSet") {
                dq.add(&k);
            }
            if let Some(k) = owner_key(&r.metadata, "StatefulSet") {
                sq.add(&k);
            }
        })
    };
    let claims = reflectors.store::<PersistentVolumeClaim>();
    let cronjobs = {
        let cq = cronjob_queue.clone();
        reflectors.watch(move |c: &CronJob| cq.add(&key_of(c)))
    };
    let daemonsets = {
        let dq = daemonset_queue.clone();
        reflectors.watch(move |d: &DaemonSet| dq.add(&key_of(d)))
    };
    let nodes = {
        let dq = daemonset_queue.clone();
        let sets = daemonsets.clone();
        reflectors.watch(move |_: &Node| {
            for d in sets.state() {
                dq.add(&key_of(d.as_ref()));
            }
        })
    };
    let ctx = Arc::new(WorkloadCtx {
        job_events: EventRecorder::new(client.clone(), "job-controller", &term.identity),
        cronjob_events: EventRecorder::new(client.clone(), "cronjob-controller", &term.identity),
        daemonset_events: EventRecorder::new(client.clone(), "daemonset-controller", &term.identity),
        statefulset_events: EventRecorder::new(client.clone(), "statefulset-controller", &term.identity),
        term: term.clone(),
        pods,
        jobs,
        cronjobs,
        daemonsets,
        nodes,
        statefulsets,
        claims,
        revisions,
        job_queue,
        cronjob_queue,
        daemonset_queue,
        statefulset_queue,
        expectations: Expectations::default(),
        job_status_written: WrittenVersions::default(),
    });
    // Every mirror this group asked for (and any other group's so far) has listed.
    let ready = reflectors.listed();
    tokio::select! {
        _ = term.ended.cancelled() => {}
        _ = async {
            ready.await;
            tracing::info!("workload controllers active");
            tokio::join!(
                crate::informers::work(&ctx, job_rx, &ctx.job_queue, "job", crate::job::sync),
                crate::informers::work(&ctx, cronjob_rx, &ctx.cronjob_queue, "cronjob", crate::cronjob::sync),
                crate::informers::work(&ctx, daemonset_rx, &ctx.daemonset_queue, "daemonset", crate::daemonset::sync),
                crate::informers::work(&ctx, statefulset_rx, &ctx.statefulset_queue, "statefulset", crate::statefulset::sync),
                collect_garbage(&ctx),
            );
        } => {}
    }
}

/// The garbage collector's sweep for what these controllers own: Jobs of CronJobs, pods
/// of Jobs, DaemonSets and StatefulSets, claims of StatefulSets.
async fn collect_garbage(ctx: &WorkloadCtx) {
    loop {
        tokio::select! {
            _ = ctx.term.ended.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        let (cronjobs, jobs, sets, pods) = (ctx.cronjobs.state(), ctx.jobs.state(), ctx.daemonsets.state(), ctx.pods.state());
        let stateful = ctx.statefulsets.state();
        let mut objects: Vec<(&str, &ObjectMeta)> = Vec::with_capacity(cronjobs.len() + jobs.len() + sets.len() + stateful.len() + pods.len());
        objects.extend(stateful.iter().map(|s| ("StatefulSet", &s.metadata)));
        objects.extend(cronjobs.iter().map(|c| ("CronJob", &c.metadata)));
        objects.extend(jobs.iter().map(|j| ("Job", &j.metadata)));
        objects.extend(sets.iter().map(|d| ("DaemonSet", &d.metadata)));
        objects.extend(pods.iter().map(|p| ("Pod", &p.metadata)));
        // Claims a StatefulSet owns (persistentVolumeClaimRetentionPolicy whenDeleted: Delete).
        let claims = ctx.claims.state();
        objects.extend(claims.iter().map(|c| ("PersistentVolumeClaim", &c.metadata)));
        if !crate::garbage::sweep(&ctx.term, &crate::garbage::Kinds::workloads(), &objects, &WORKLOAD_OWNER_KINDS).await {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sync_waits_for_its_own_status_write() {
        let w = WrittenVersions::default();
        assert!(w.seen("d/pi", Some("5")), "nothing written");
        w.wrote("d/pi", Some("12"));
        assert!(!w.seen("d/pi", Some("11")));
        assert!(w.seen("d/pi", Some("13")));
        assert!(w.seen("d/pi", Some("1")), "forgotten once seen");
    }
}

/// Writes what [`crate::revisions::history`] decided for an owner in `ns`.
pub(crate) async fn apply_history(ctx: &WorkloadCtx, ns: &str, plan: &crate::revisions::HistoryPlan) -> Result<(), SyncError> {
    let api: Api<ControllerRevision> = Api::namespaced(ctx.term.client.clone(), ns);
    if let Some(rev) = &plan.create {
        match api.create(&kube::api::PostParams::default(), rev).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => {}
            Err(e) => return Err(SyncError::from_kube(e)),
        }
    }
    if let Some((name, revision)) = &plan.renumber {
        let patch = kube::api::Patch::Merge(serde_json::json!({"revision": revision}));
        api.patch(name, &kube::api::PatchParams::default(), &patch).await.map_err(SyncError::from_kube)?;
    }
    for name in &plan.delete {
        match api.delete(name, &kube::api::DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(SyncError::from_kube(e)),
        }
    }
    Ok(())
}

impl crate::informers::TermContext for WorkloadCtx {
    fn term(&self) -> &Leadership {
        &self.term
    }
}
