//! The scheduler's loop while it leads: reflectors of pods, nodes and namespaces feed
//! the queue; each popped pod is decided on a fresh [`Snapshot`] (with the pods this
//! scheduler has assumed onto nodes), bound asynchronously through `pods/binding` with
//! the term's fenced client, and reported with Kubernetes' Events and conditions. A pod
//! that fits nowhere may preempt ([`crate::preemption`]): it is nominated to the chosen
//! node (`status.nominatedNodeName`) and the victims get `DisruptionTarget` and are
//! deleted gracefully; the pod is retried when pods go.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use keelson_component::events::{EventRecorder, EventType};
use keelson_component::denied::DenialReporter;
use keelson_component::{fence, Leadership};
use kube::Resource;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, watcher};
use kube::runtime::WatchStreamExt;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::Instrument;

use crate::framework::{schedule_timed, with_post_filter, CycleTimes, Decision, Profile};
use crate::preemption::{preempt, PostFilter};
use crate::queue::{PodKey, SchedulingQueue};
use crate::cache::SchedulerCache;
use crate::metrics::{AttemptResult, SchedulerMetrics};

/// What the reflectors and bind tasks tell the loop.
enum Change {
    /// A pod was added or changed.
    Pod(Arc<Pod>),
    /// A pod was deleted.
    PodGone(Arc<Pod>),
    /// A node was added or changed.
    Node(Arc<Node>),
    /// A node was deleted.
    NodeGone(String),
    /// The node watch re-listed: nodes not in the store are gone.
    NodesResync,
    /// A namespace changed (namespace selectors of affinity terms).
    Namespaces,
    /// A claim, volume or StorageClass changed (VolumeBinding).
    Volumes,
    /// A PodDisruptionBudget changed (preemption).
    Pdbs,
    /// A watch re-listed: the queue is checked against the store.
    Resync,
    /// A bind ended; the cycle that chose the node began at `started`.
    Bound { key: PodKey, result: BindResult, started: std::time::Instant },
}

enum BindResult {
    Ok,
    /// Someone else bound it first (409 from the binding).
    AlreadyBound,
    Fenced,
    Failed(String),
}

fn key_of(pod: &Pod) -> PodKey {
    format!("{}/{}", pod.metadata.namespace.as_deref().unwrap_or("default"), pod.metadata.name.as_deref().unwrap_or(""))
}

fn is_ours_and_pending(pod: &Pod) -> bool {
    let Some(spec) = pod.spec.as_ref() else { return false };
    spec.node_name.as_deref().is_none_or(str::is_empty)
        && spec.scheduler_name.as_deref().unwrap_or(crate::SCHEDULER_NAME) == crate::SCHEDULER_NAME
        && pod.metadata.deletion_timestamp.is_none()
        && !matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}


/// Any change but the start of a list: the volume state is rebuilt.
fn volumes_changed<K>(ev: watcher::Event<K>) -> Option<Change> {
    (!matches!(ev, watcher::Event::Init)).then_some(Change::Volumes)
}

/// Runs `stream` of a reflector, telling the loop what changed through `on`.
fn follow<K, F>(api: Api<K>, writer: reflector::store::Writer<K>, tx: mpsc::UnboundedSender<Change>, denials: Arc<DenialReporter>, on: F) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    F: Fn(watcher::Event<K>) -> Option<Change> + Send + 'static,
{
    let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()).modify(keelson_component::mirror::strip_for_mirror));
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(ev) => {
                    if let Some(change) = on(ev) {
                        if tx.send(change).is_err() {
                            return;
                        }
                    }
                }
                Err(e) => {
                    match keelson_component::denied::forbidden_in_watch(&e) {
                        Some(m) => denials.report(&m).await,
                        None => tracing::debug!(error = %e, "scheduler watch; retrying"),
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    })
}

struct Scheduler {
    term: Leadership,
    profile: Profile,
    pods: Store<Pod>,
    nodes: Store<Node>,
    namespaces: Store<Namespace>,
    claims: Store<PersistentVolumeClaim>,
    volumes: Store<PersistentVolume>,
    classes: Store<StorageClass>,
    pdbs: Store<PodDisruptionBudget>,
    queue: SchedulingQueue,
    /// What cycles decide on, kept current from the watches and the assumptions.
    cache: SchedulerCache,
    /// Pods this scheduler decided to bind, with their node, until the watch shows them bound.
    assumed: HashMap<PodKey, Arc<Pod>>,
    recorder: EventRecorder,
    tx: mpsc::UnboundedSender<Change>,
    start: usize,
    metrics: SchedulerMetrics,
}

/// One term as the active scheduler.
pub(crate) async fn lead(term: Leadership, metrics: SchedulerMetrics) {
    let span = tracing::info_span!("scheduler", token = term.token);
    run(term, metrics).instrument(span).await;
}

async fn run(term: Leadership, metrics: SchedulerMetrics) {
    let client = term.client.clone();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (pods, pod_writer) = reflector::store::<Pod>();
    let (nodes, node_writer) = reflector::store::<Node>();
    let (namespaces, ns_writer) = reflector::store::<Namespace>();
    let (claims, claim_writer) = reflector::store::<PersistentVolumeClaim>();
    let (volumes, volume_writer) = reflector::store::<PersistentVolume>();
    let (classes, class_writer) = reflector::store::<StorageClass>();
    let (pdbs, pdb_writer) = reflector::store::<PodDisruptionBudget>();
    let tasks = [
        follow(Api::<Pod>::all(client.clone()), pod_writer, tx.clone(), term.denials.clone(), |ev| match ev {
            watcher::Event::Apply(p) | watcher::Event::InitApply(p) => Some(Change::Pod(Arc::new(p))),
            watcher::Event::Delete(p) => Some(Change::PodGone(Arc::new(p))),
            watcher::Event::InitDone => Some(Change::Resync),
            watcher::Event::Init => None,
        }),
        follow(Api::<Node>::all(client.clone()), node_writer, tx.clone(), term.denials.clone(), |ev| match ev {
            watcher::Event::Apply(n) | watcher::Event::InitApply(n) => Some(Change::Node(Arc::new(n))),
            watcher::Event::Delete(n) => Some(Change::NodeGone(n.metadata.name.unwrap_or_default())),
            watcher::Event::InitDone => Some(Change::NodesResync),
            watcher::Event::Init => None,
        }),
        follow(Api::<Namespace>::all(client.clone()), ns_writer, tx.clone(), term.denials.clone(), |ev| (!matches!(ev, watcher::Event::Init)).then_some(Change::Namespaces)),
        follow(Api::<PersistentVolumeClaim>::all(client.clone()), claim_writer, tx.clone(), term.denials.clone(), volumes_changed),
        follow(Api::<PersistentVolume>::all(client.clone()), volume_writer, tx.clone(), term.denials.clone(), volumes_changed),
        follow(Api::<StorageClass>::all(client.clone()), class_writer, tx.clone(), term.denials.clone(), volumes_changed),
        follow(Api::<PodDisruptionBudget>::all(client.clone()), pdb_writer, tx.clone(), term.denials.clone(), |ev| (!matches!(ev, watcher::Event::Init)).then_some(Change::Pdbs)),
    ];
    let recorder = EventRecorder::new(client.clone(), crate::SCHEDULER_NAME, &term.identity);
    let mut s = Scheduler {
        term: term.clone(),
        profile: crate::plugins::default_profile(),
        pods,
        nodes,
        namespaces,
        claims,
        volumes,
        classes,
        pdbs,
        queue: SchedulingQueue::default(),
        cache: SchedulerCache::default(),
        assumed: HashMap::new(),
        recorder,
        tx,
        start: 0,
        metrics,
    };
    tracing::info!("scheduler active");
    let ready = async {
        let _ = s.pods.wait_until_ready().await;
        let _ = s.nodes.wait_until_ready().await;
    };
    tokio::select! {
        _ = term.ended.cancelled() => {}
        _ = ready => s.serve(&mut rx).await,
    }
    for t in tasks {
        t.abort();
    }
    tracing::info!("scheduler inactive");
}

impl Scheduler {
    async fn serve(&mut self, rx: &mut mpsc::UnboundedReceiver<Change>) {
        loop {
            while let Ok(change) = rx.try_recv() {
                self.apply(change);
            }
            if self.term.ended.is_cancelled() {
                return;
            }
            if let Some(key) = self.queue.pop(Instant::now()) {
                self.schedule_one(key).await;
                self.metrics.queues(self.queue.lengths());
                continue;
            }
            self.metrics.queues(self.queue.lengths());
            let wake = self.queue.next_ready().unwrap_or_else(|| Instant::now() + Duration::from_secs(30));
            tokio::select! {
                _ = self.term.ended.cancelled() => return,
                change = rx.recv() => match change {
                    Some(c) => self.apply(c),
                    None => return,
                },
                _ = tokio::time::sleep_until(wake) => {}
            }
        }
    }

    fn apply(&mut self, change: Change) {
        let now = Instant::now();
        match change {
            Change::Pod(pod) => {
                let key = key_of(&pod);
                // An assumed pod keeps its assumed node until the watch shows it bound.
                if !(self.assumed.contains_key(&key) && is_ours_and_pending(&pod)) {
                    self.cache.set_pod(pod.clone());
                }
                if is_ours_and_pending(&pod) {
                    if !self.assumed.contains_key(&key) {
                        self.queue.add(&key, pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0), now);
                    }
                } else {
                    self.queue.remove(&key);
                    if pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty()) {
                        self.assumed.remove(&key);
                    }
                    if pod.metadata.deletion_timestamp.is_some() || matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed")) {
                        self.queue.cluster_changed(now);
                    }
                }
            }
            Change::PodGone(pod) => {
                let key = key_of(&pod);
                self.cache.pod_gone(pod.metadata.uid.as_deref().unwrap_or(""));
                self.queue.remove(&key);
                self.assumed.remove(&key);
                self.queue.cluster_changed(now);
            }
            Change::Node(node) => {
                self.cache.set_node(node);
                self.queue.cluster_changed(now);
            }
            Change::NodeGone(name) => self.cache.remove_node(&name),
            Change::NodesResync => {
                let known: std::collections::HashSet<String> = self.nodes.state().iter().filter_map(|n| n.metadata.name.clone()).collect();
                self.cache.retain_nodes(|n| known.contains(n));
                self.queue.cluster_changed(now);
            }
            Change::Namespaces => {
                let namespaces = self
                    .namespaces
                    .state()
                    .into_iter()
                    .map(|n| (n.metadata.name.clone().unwrap_or_default(), n.metadata.labels.clone().unwrap_or_default()))
                    .collect();
                self.cache.set_namespaces(namespaces);
                self.queue.cluster_changed(now);
            }
            Change::Volumes => {
                let state = crate::plugins::volume::VolumeState {
                    claims: self.claims.state().into_iter().map(|c| (format!("{}/{}", c.metadata.namespace.as_deref().unwrap_or("default"), c.metadata.name.as_deref().unwrap_or("")), c)).collect(),
                    volumes: self.volumes.state().into_iter().map(|v| (v.metadata.name.clone().unwrap_or_default(), v)).collect(),
                    classes: self.classes.state().into_iter().map(|c| (c.metadata.name.clone().unwrap_or_default(), c)).collect(),
                };
                self.cache.set_volumes(state);
                self.queue.cluster_changed(now);
            }
            Change::Pdbs => self.cache.set_pdbs(self.pdbs.state()),
            Change::Resync => {
                let present: std::collections::HashSet<String> = self.pods.state().iter().filter_map(|p| p.metadata.uid.clone()).collect();
                let assumed: std::collections::HashSet<String> = self.assumed.values().filter_map(|p| p.metadata.uid.clone()).collect();
                self.cache.retain_pods(|u| present.contains(u) || assumed.contains(u));
                for pod in self.pods.state() {
                    if is_ours_and_pending(&pod) && !self.queue.contains(&key_of(&pod)) && !self.assumed.contains_key(&key_of(&pod)) {
                        self.queue.add(&key_of(&pod), pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0), now);
                    }
                }
                self.queue.cluster_changed(now);
            }
            Change::Bound { key, result, started } => match result {
                BindResult::Ok => self.metrics.e2e(AttemptResult::Scheduled, started.elapsed()),
                BindResult::AlreadyBound => {
                    // Bound by someone else: the watch brings where; until then forget ours.
                    if let Some(p) = self.assumed.remove(&key) {
                        self.cache.remove_pod(p.metadata.uid.as_deref().unwrap_or(""));
                    }
                    self.queue.remove(&key);
                }
                BindResult::Fenced => {
                    tracing::warn!(pod = %key, "binding fenced: another scheduler holds the lease");
                    self.term.step_down();
                }
                BindResult::Failed(why) => {
                    self.metrics.attempt(AttemptResult::Error, Duration::ZERO);
                    self.metrics.e2e(AttemptResult::Error, started.elapsed());
                    tracing::info!(pod = %key, error = %why, "binding failed; retrying after backoff");
                    if let Some(p) = self.assumed.remove(&key) {
                        self.cache.remove_pod(p.metadata.uid.as_deref().unwrap_or(""));
                    }
                    self.queue.backoff(&key, now);
                }
            },
        }
    }

    async fn schedule_one(&mut self, key: PodKey) {
        let (ns, name) = key.split_once('/').expect("keys are namespace/name");
        let Some(pod) = self.pods.get(&ObjectRef::new(name).within(ns)) else {
            self.queue.remove(&key);
            return;
        };
        if !is_ours_and_pending(&pod) {
            self.queue.remove(&key);
            return;
        }
        let snapshot = self.cache.snapshot();
        let nodes = snapshot.nodes.len();
        // The cycle continues the trace of the request that created the pod, if it was
        // recorded; otherwise it is a trace of its own, not part of the term's span.
        let span = tracing::info_span!(
            "schedule",
            pod = %key,
            nodes,
            node = tracing::field::Empty,
            pre_filter_us = tracing::field::Empty,
            filter_us = tracing::field::Empty,
            score_us = tracing::field::Empty,
            plugins_us = tracing::field::Empty,
            trace_id = tracing::field::Empty
        );
        keelson_tracecontext::continue_trace(&span, keelson_tracecontext::from_annotations(pod.metadata.annotations.as_ref()));
        let _enter = span.enter();
        let started = std::time::Instant::now();
        let mut times = CycleTimes::default();
        let decision = schedule_timed(&self.profile, &pod, snapshot, self.start, rand::random(), &mut times);
        let result = if matches!(decision, Decision::Bind { .. }) { AttemptResult::Scheduled } else { AttemptResult::Unschedulable };
        self.metrics.attempt(result, started.elapsed());
        self.metrics.cycle(result, &times);
        record_cycle_times(&span, &times);
        if result == AttemptResult::Unschedulable {
            self.metrics.e2e(result, started.elapsed());
        }
        if nodes > 0 {
            self.start = (self.start + 1) % nodes;
        }
        match decision {
            Decision::Bind { node, .. } => {
                span.record("node", node.as_str());
                tracing::debug!(%node, "scheduled");
                let claims: Vec<String> = crate::plugins::volume::delayed_claims(&snapshot.volumes, &pod).iter().filter_map(|c| c.metadata.name.clone()).collect();

                let mut assumed = (*pod).clone();
                assumed.spec.get_or_insert_with(Default::default).node_name = Some(node.clone());
                let assumed = Arc::new(assumed);
                self.cache.set_pod(assumed.clone());
                self.assumed.insert(key.clone(), assumed);
                tokio::spawn(bind(self.term.clone(), self.recorder.clone(), pod, node, claims, (key, started), self.tx.clone()).in_current_span());
            }
            Decision::Unschedulable { message, resolvable, .. } => {
                self.queue.unschedulable(&key, Instant::now());
                let post_filter = preempt(&self.profile, &pod, snapshot, &resolvable, self.start);
                self.metrics.preemption_attempt(match &post_filter {
                    PostFilter::Preempt { victims, .. } => Some(victims.len()),
                    _ => None,
                });
                match post_filter {
                    PostFilter::Preempt { node, victims, pdb_violations } => {
                        tracing::debug!(%node, victims = victims.len(), pdb_violations, "preempting");
                        let mut nominated = (*pod).clone();
                        nominated.status.get_or_insert_with(Default::default).nominated_node_name = Some(node.clone());
                        self.cache.nominate(Arc::new(nominated));
                        tokio::spawn(preempt_victims(self.term.clone(), self.recorder.clone(), pod, node, victims, message).in_current_span());
                    }
                    PostFilter::Fail(why) => {
                        let message = with_post_filter(&message, &why);
                        tracing::debug!(%message, "unschedulable");
                        tokio::spawn(report_unschedulable(self.term.clone(), self.recorder.clone(), pod, message, Nomination::Keep).in_current_span());
                    }
                    PostFilter::NoCandidate(why) => {
                        let message = with_post_filter(&message, &why);
                        let uid = pod.metadata.uid.clone().unwrap_or_default();
                        let nomination = if self.cache.is_nominated(&uid) || crate::snapshot::nominated_node_name(&pod).is_some() {
                            tracing::debug!(%message, "unschedulable; its nomination is withdrawn");
                            self.cache.withdraw_nomination(&uid);
                            Nomination::Clear
                        } else {
                            tracing::debug!(%message, "unschedulable");
                            Nomination::Keep
                        };
                        tokio::spawn(report_unschedulable(self.term.clone(), self.recorder.clone(), pod, message, nomination).in_current_span());
                    }
                }
            }
        }
    }
}

/// Binds `pod` to `node`, first telling the PersistentVolume controller the node of its
/// unbound WaitForFirstConsumer `claims` (the `volume.kubernetes.io/selected-node`
/// annotation, as Kubernetes' VolumeBinding PreBind does).
/// The extension points' and plugins' times of one cycle as attributes of its
/// `schedule` span (microseconds; a point that did not run is left out). The plugins
/// are `Point/Plugin=us` pairs, comma-separated.
fn record_cycle_times(span: &tracing::Span, times: &CycleTimes) {
    let us = |d: std::time::Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
    for (field, took) in [("pre_filter_us", times.pre_filter), ("filter_us", times.filter), ("score_us", times.score)] {
        if let Some(took) = took {
            span.record(field, us(took));
        }
    }
    if !times.plugins.is_empty() {
        let plugins: Vec<String> = times.plugins.iter().map(|(plugin, point, took)| format!("{point}/{plugin}={}", us(*took))).collect();
        span.record("plugins_us", plugins.join(","));
    }
}

async fn bind(term: Leadership, recorder: EventRecorder, pod: Arc<Pod>, node: String, claims: Vec<String>, (key, started): (PodKey, std::time::Instant), tx: mpsc::UnboundedSender<Change>) {
    let ns = pod.metadata.namespace.clone().unwrap_or_else(|| "default".into());
    let name = pod.metadata.name.clone().unwrap_or_default();
    let claim_api: Api<PersistentVolumeClaim> = Api::namespaced(term.client.clone(), &ns);
    for claim in &claims {
        let patch = json!({"metadata": {"annotations": {crate::plugins::volume::SELECTED_NODE: node}}});
        let result = match claim_api.patch(claim, &PatchParams::default(), &Patch::Merge(patch)).await {
            Ok(_) => None,
            Err(e) if fence::is_fenced(&e) => Some(BindResult::Fenced),
            Err(e) => {
                term.denials.check(&e).await;
                Some(BindResult::Failed(format!("selecting node {node} for claim {claim}: {e}")))
            }
        };
        if let Some(result) = result {
            let _ = tx.send(Change::Bound { key, result, started });
            return;
        }
    }
    let api: Api<Pod> = Api::namespaced(term.client.clone(), &ns);
    let binding = json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": name, "namespace": ns, "uid": pod.metadata.uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    });
    let result = match api.create_subresource::<_, serde_json::Value>("binding", &name, &PostParams::default(), &binding).await {
        Ok(_) => {
            recorder.publish(&pod.object_ref(&()), EventType::Normal, "Scheduled", &format!("Successfully assigned {ns}/{name} to {node}")).await;
            BindResult::Ok
        }
        Err(e) if fence::is_fenced(&e) => BindResult::Fenced,
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => BindResult::AlreadyBound,
        Err(e) => {
            term.denials.check(&e).await;
            BindResult::Failed(e.to_string())
        }
    };
    let _ = tx.send(Change::Bound { key, result, started });
}

fn now() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A write failed: a fenced one ends the term. Returns whether to go on.
async fn written(term: &Leadership, result: Result<(), kube::Error>, what: &str) -> bool {
    match result {
        Ok(()) => true,
        Err(e) if fence::is_fenced(&e) => {
            term.step_down();
            false
        }
        Err(e) => {
            if !term.denials.check(&e).await {
                tracing::debug!(error = %e, "{what}");
            }
            true
        }
    }
}

/// What an unschedulable report does to the pod's `status.nominatedNodeName`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Nomination<'a> {
    Keep,
    Set(&'a str),
    Clear,
}

/// `PodScheduled=False` (reason `Unschedulable`) on the pod, once per new message (with
/// `status.nominatedNodeName` set or cleared as `nomination` says), and a
/// `FailedScheduling` Event.
async fn report_unschedulable(term: Leadership, recorder: EventRecorder, pod: Arc<Pod>, message: String, nomination: Nomination<'_>) -> bool {
    recorder.publish(&pod.object_ref(&()), EventType::Warning, "FailedScheduling", &message).await;
    let current = pod.status.as_ref().and_then(|s| s.conditions.as_ref()).and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"));
    let same = current.is_some_and(|c| c.status == "False" && c.reason.as_deref() == Some("Unschedulable") && c.message.as_deref() == Some(message.as_str()));
    let nominated = crate::snapshot::nominated_node_name(&pod);
    let nomination_unchanged = match nomination {
        Nomination::Keep => true,
        Nomination::Set(n) => nominated == Some(n),
        Nomination::Clear => nominated.is_none(),
    };
    if same && nomination_unchanged {
        return true;
    }
    let ns = pod.metadata.namespace.clone().unwrap_or_else(|| "default".into());
    let api: Api<Pod> = Api::namespaced(term.client.clone(), &ns);
    let mut patch = json!({"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message, "lastTransitionTime": now(), "lastProbeTime": null}]}});
    match nomination {
        Nomination::Keep => {}
        Nomination::Set(node) => patch["status"]["nominatedNodeName"] = json!(node),
        // A null in a strategic merge patch deletes the field.
        Nomination::Clear => patch["status"]["nominatedNodeName"] = serde_json::Value::Null,
    }
    let result = api.patch_status(pod.metadata.name.as_deref().unwrap_or(""), &PatchParams::default(), &Patch::Strategic(patch)).await;
    written(&term, result.map(|_| ()), "recording PodScheduled=False").await
}

/// Kubernetes' preemption executor: the preemptor is nominated to `node` (with its
/// FailedScheduling report), then each victim gets `DisruptionTarget` (reason
/// `PreemptionByScheduler`), a `Preempted` Event and a graceful delete.
async fn preempt_victims(term: Leadership, recorder: EventRecorder, pod: Arc<Pod>, node: String, victims: Vec<Arc<Pod>>, message: String) {
    if !report_unschedulable(term.clone(), recorder.clone(), pod.clone(), message, Nomination::Set(&node)).await {
        return;
    }
    let preemptor = pod.metadata.uid.clone().unwrap_or_default();
    let scheduler = pod.spec.as_ref().and_then(|s| s.scheduler_name.clone()).unwrap_or_else(|| crate::SCHEDULER_NAME.into());
    for victim in victims {
        let ns = victim.metadata.namespace.clone().unwrap_or_else(|| "default".into());
        let name = victim.metadata.name.clone().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(term.client.clone(), &ns);
        let condition = json!({"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
            "message": format!("{scheduler}: preempting to accommodate a higher priority pod"), "lastTransitionTime": now()});
        let patch = json!({"status": {"conditions": [condition]}});
        let result = api.patch_status(&name, &PatchParams::default(), &Patch::Strategic(patch)).await;
        if !written(&term, result.map(|_| ()), "marking a preemption victim").await {
            return;
        }
        recorder.publish(&victim.object_ref(&()), EventType::Normal, "Preempted", &format!("Preempted by pod {preemptor} on node {node}")).await;
        let params = DeleteParams { preconditions: Some(Preconditions { uid: victim.metadata.uid.clone(), resource_version: None }), ..Default::default() };
        let result = match api.delete(&name, &params).await {
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            r => r.map(|_| ()),
        };
        if !written(&term, result, "deleting a preemption victim").await {
            return;
        }
    }
}
