//! The controller manager's term: its mirrors (one per kind, [`SharedReflectors`]) and
//! the routing of their events to the controllers' work queues: a pod to the ReplicaSet
//! that controls it (or, for an orphan, every ReplicaSet of its namespace that might
//! adopt it), a ReplicaSet to itself and its Deployment, a Deployment to itself.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use keelson_component::events::EventRecorder;
use keelson_component::Leadership;
use kube::api::Api;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::Resource;

use crate::expectations::Expectations;
use crate::pods::controller_of;
use crate::shared_reflectors::SharedReflectors;
use crate::work::{named_queue, WorkQueue};

/// A sync failed.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// A write was fenced: another controller manager holds the lease.
    #[error("fenced: another controller manager holds the lease")]
    Fenced,
    #[error("{0}")]
    Api(#[from] kube::Error),
}

impl SyncError {
    pub fn from_kube(e: kube::Error) -> Self {
        if keelson_component::fence::is_fenced(&e) {
            SyncError::Fenced
        } else {
            SyncError::Api(e)
        }
    }
}

/// What the controllers of one term share.
pub struct Ctx {
    pub term: Leadership,
    pub pods: Store<Pod>,
    pub replicasets: Store<ReplicaSet>,
    pub deployments: Store<Deployment>,
    pub pdbs: Store<PodDisruptionBudget>,
    pub rs_queue: WorkQueue,
    pub deployment_queue: WorkQueue,
    pub pdb_queue: WorkQueue,
    pub expectations: Expectations,
    pub rs_events: EventRecorder,
    pub deployment_events: EventRecorder,
}

pub fn key_of<K: Resource>(o: &K) -> String {
    format!("{}/{}", o.meta().namespace.as_deref().unwrap_or("default"), o.meta().name.as_deref().unwrap_or(""))
}

pub(crate) fn reflect<K, F>(api: Api<K>, denials: Arc<keelson_component::denied::DenialReporter>, route: F) -> (Store<K>, tokio::task::JoinHandle<()>)
where
    K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    F: Fn(&K) + Send + 'static,
{
    reflect_selected(api, watcher::Config::default(), denials, route)
}

/// [`reflect`] of the objects `config` selects (by label or field). A watch the
/// component's role does not allow is reported as a denial.
pub(crate) fn reflect_selected<K, F>(api: Api<K>, config: watcher::Config, denials: Arc<keelson_component::denied::DenialReporter>, route: F) -> (Store<K>, tokio::task::JoinHandle<()>)
where
    K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    F: Fn(&K) + Send + 'static,
{
    keelson_component::mirror::routed_reflector(api, config, move |c| c.object().into_iter().for_each(&route), watch_error_reporter(denials))
}

/// What a controller reflector does with a watch error (before it retries): one the
/// component's role does not allow is reported as a denial, others only logged.
pub(crate) fn watch_error_reporter(denials: Arc<keelson_component::denied::DenialReporter>) -> impl Fn(watcher::Error) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> + Send + 'static {
    move |e: watcher::Error| {
        let denials = denials.clone();
        Box::pin(async move {
            match keelson_component::denied::forbidden_in_watch(&e) {
                Some(m) => denials.report(&m).await,
                None => tracing::debug!(error = %e, "controller watch; retrying"),
            }
        })
    }
}

/// Runs every controller until the term ends.
pub async fn run_controllers(term: Leadership, config: crate::ControllerConfig) {
    let client = term.client.clone();
    let reflectors = SharedReflectors::new(&term);
    let (rs_queue, rs_rx) = named_queue(&term, "replicaset");
    let (deployment_queue, deployment_rx) = named_queue(&term, "deployment");
    let (pdb_queue, pdb_rx) = named_queue(&term, "disruption");
    let pdbs = {
        let pq = pdb_queue.clone();
        reflectors.watch(move |b: &PodDisruptionBudget| pq.add(&key_of(b)))
    };
    let replicasets = {
        let (rq, dq) = (rs_queue.clone(), deployment_queue.clone());
        reflectors.watch(move |rs: &ReplicaSet| {
            rq.add(&key_of(rs));
            if let Some(owner) = controller_of(&rs.metadata).filter(|o| o.kind == "Deployment") {
                dq.add(&format!("{}/{}", rs.metadata.namespace.as_deref().unwrap_or("default"), owner.name));
            }
        })
    };
    let pods = {
        let (rq, pq) = (rs_queue.clone(), pdb_queue.clone());
        let (sets, budgets) = (replicasets.clone(), pdbs.clone());
        reflectors.watch(move |pod: &Pod| {
            let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
            for b in budgets.state().iter().filter(|b| b.metadata.namespace.as_deref() == Some(ns)) {
                pq.add(&key_of(b.as_ref()));
            }
            match controller_of(&pod.metadata) {
                Some(owner) if owner.kind == "ReplicaSet" => rq.add(&format!("{ns}/{}", owner.name)),
                Some(_) => {}
                None => {
                    for rs in sets.state().iter().filter(|rs| rs.metadata.namespace.as_deref() == Some(ns)) {
                        rq.add(&key_of(rs.as_ref()));
                    }
                }
            }
        })
    };
    let deployments = {
        let dq = deployment_queue.clone();
        reflectors.watch(move |d: &Deployment| dq.add(&key_of(d)))
    };
    let ctx = Arc::new(Ctx {
        rs_events: EventRecorder::new(client.clone(), "replicaset-controller", &term.identity),
        deployment_events: EventRecorder::new(client.clone(), "deployment-controller", &term.identity),
        term: term.clone(),
        pods,
        replicasets,
        deployments,
        pdbs,
        rs_queue,
        deployment_queue,
        pdb_queue,
        expectations: Expectations::default(),
    });
    tracing::info!("controller manager active");
    // The controller groups with reflectors of their own run as tasks of their own (each
    // ends with the term): inside one future with the others, every sync would run on a
    // deeper stack — a debug build overflowed it once.
    let groups = vec![
        tokio::spawn(crate::volumes::run(term.clone(), reflectors.clone())),
        tokio::spawn(crate::workloads::run(term.clone(), reflectors.clone())),
        tokio::spawn(crate::namespaces::run(term.clone(), config.root_ca_pem.clone())),
        tokio::spawn(crate::services::run(term.clone(), reflectors.clone())),
        tokio::spawn(crate::garbage::generic::run(term.clone())),
        tokio::spawn(crate::node_informers::run(term.clone(), reflectors.clone(), config)),
    ];
    // Every mirror this group asked for (and any other group's so far) has listed.
    let ready = reflectors.listed();
    tokio::select! {
        _ = term.ended.cancelled() => {}
        _ = async {
            ready.await;
            tokio::join!(
                crate::replicaset::run(ctx.clone(), rs_rx),
                crate::deployment::run(ctx.clone(), deployment_rx),
                work(&ctx, pdb_rx, &ctx.pdb_queue, "disruption", crate::disruption::sync),
                crate::garbage::run(ctx.clone()),
            );
        } => {}
    }
    term.ended.cancel();
    for g in groups {
        let _ = g.await;
    }
    reflectors.stop();
    tracing::info!("controller manager inactive");
}

/// What a worker needs of its controllers' shared state: the term it works in.
pub trait TermContext: Send + Sync + 'static {
    fn term(&self) -> &Leadership;
}

impl TermContext for Ctx {
    fn term(&self) -> &Leadership {
        &self.term
    }
}

/// The shared worker loop: syncs keys until the term ends; a fenced write ends the term,
/// other failures retry the key a second later.
pub async fn work<C, F, Fut>(ctx: &Arc<C>, mut rx: crate::work::WorkReceiver, queue: &WorkQueue, name: &'static str, sync: F)
where
    C: TermContext,
    F: Fn(Arc<C>, String) -> Fut,
    Fut: std::future::Future<Output = Result<Option<Duration>, SyncError>>,
{
    let term = ctx.term();
    loop {
        let key = tokio::select! {
            _ = term.ended.cancelled() => return,
            k = rx.next() => match k { Some(k) => k, None => return },
        };
        let span = tracing::info_span!("reconcile", controller = name, object = %key, trace_id = tracing::field::Empty);
        keelson_tracecontext::continue_trace(&span, None);
        let started = std::time::Instant::now();
        let outcome = tracing::Instrument::instrument(sync(ctx.clone(), key.clone()), span).await;
        rx.worked(started.elapsed());
        match outcome {
            Ok(Some(after)) => queue.add_after(&key, after),
            Ok(None) => {}
            Err(SyncError::Fenced) => {
                tracing::warn!(controller = name, "a write was fenced; stepping down");
                term.step_down();
                return;
            }
            Err(SyncError::Api(e)) => {
                if !term.denials.check(&e).await {
                    tracing::info!(controller = name, object = %key, error = %e, "sync failed; retrying");
                }
                queue.retry(&key);
            }
        }
    }
}
