//! The taint eviction controller (Kubernetes' NoExecute taint manager): pods on Nodes
//! with NoExecute taints are deleted when [`reconcile::decide`] says so: at once when a
//! taint is not tolerated, when a toleration's `tolerationSeconds` run out otherwise.
//! A pass runs on every Node change, at the next deadline, and at least every second
//! (which is how newly bound pods are seen); each eviction records `TaintManagerEviction`,
//! sets the pod's `DisruptionTarget` condition and sends a graceful delete, as
//! Kubernetes' does. A pod whose deletion was due and then is not (the taint went away)
//! gets the `Cancelling deletion` Event.

pub mod reconcile;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use keelson_component::events::{EventRecorder, EventType};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::Resource;
use serde_json::json;

use crate::informers::SyncError;
use crate::node_informers::NodeInformers;
pub use reconcile::{decide, tolerates, Eviction};

/// The longest a pass waits without a reason.
const RESYNC: Duration = Duration::from_secs(1);

/// A taint of a Node, as (key, value, effect).
type TaintId = (String, Option<String>, String);

/// Evicts until the term ends.
pub(crate) async fn run(informers: Arc<NodeInformers>) {
    let term = &informers.term;
    let events = EventRecorder::new(term.client.clone(), "taint-eviction-controller", &term.identity);
    // When a NoExecute taint without `timeAdded` was first seen.
    let mut first_seen: HashMap<(String, TaintId), Timestamp> = HashMap::new();
    let mut evicted: HashSet<String> = HashSet::new();
    let mut scheduled: HashMap<String, (String, String)> = HashMap::new();
    loop {
        let now = Timestamp::now();
        let mut tainted: HashMap<String, Vec<Taint>> = HashMap::new();
        let mut seen_taints = HashSet::new();
        for node in informers.nodes.state() {
            let name = node.metadata.name.clone().unwrap_or_default();
            let mut taints: Vec<Taint> = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
            taints.retain(|t| t.effect == "NoExecute");
            for t in taints.iter_mut().filter(|t| t.time_added.is_none()) {
                let id = (name.clone(), (t.key.clone(), t.value.clone(), t.effect.clone()));
                t.time_added = Some(Time(*first_seen.entry(id.clone()).or_insert(now)));
                seen_taints.insert(id);
            }
            if !taints.is_empty() {
                tainted.insert(name, taints);
            }
        }
        first_seen.retain(|id, _| seen_taints.contains(id));
        let pods = informers.pods.state();
        let mut next: Option<Timestamp> = None;
        let mut due = HashSet::new();
        for pod in &pods {
            let Some(taints) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).and_then(|n| tainted.get(n)) else { continue };
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            let key = (pod.metadata.namespace.clone().unwrap_or_default(), pod.metadata.name.clone().unwrap_or_default());
            match decide(pod, taints, now) {
                Eviction::Keep => {}
                Eviction::DeleteAt(at) => {
                    next = Some(next.map_or(at, |n| n.min(at)));
                    due.insert(uid.clone());
                    scheduled.insert(uid, key);
                }
                Eviction::DeleteNow => {
                    due.insert(uid.clone());
                    if !evicted.insert(uid.clone()) {
                        continue;
                    }
                    let span = tracing::info_span!("reconcile", controller = "tainteviction", pod = %format!("{}/{}", key.0, key.1), trace_id = tracing::field::Empty);
                    keelson_tracecontext::continue_trace(&span, None);
                    match tracing::Instrument::instrument(evict(&informers, &events, pod, now), span).await {
                        Ok(()) => {}
                        Err(SyncError::Fenced) => {
                            tracing::warn!(controller = "tainteviction", "a write was fenced; stepping down");
                            term.step_down();
                            return;
                        }
                        Err(e) => {
                            tracing::info!(pod = %key.1, error = %e, "evicting a pod failed; the next pass retries");
                            evicted.remove(&uid);
                        }
                    }
                }
            }
        }
        // Deletions that were due and no longer are: the taint went or the pod did.
        let live: HashMap<&str, &Arc<Pod>> = pods.iter().map(|p| (p.metadata.uid.as_deref().unwrap_or(""), p)).collect();
        scheduled.retain(|uid, (ns, name)| {
            if due.contains(uid) {
                return true;
            }
            if let Some(p) = live.get(uid.as_str()).filter(|p| p.metadata.deletion_timestamp.is_none() && !evicted.contains(uid)) {
                let (events, regarding, message) = (events.clone(), p.object_ref(&()), format!("Cancelling deletion of Pod {ns}/{name}"));
                tokio::spawn(async move { events.publish(&regarding, EventType::Normal, "TaintManagerEviction", &message).await });
            }
            false
        });
        evicted.retain(|uid| live.contains_key(uid.as_str()));
        let wait = next.map(|at| Duration::try_from(at.duration_since(now)).unwrap_or(Duration::ZERO) + Duration::from_millis(5)).unwrap_or(RESYNC).min(RESYNC);
        tokio::select! {
            _ = term.ended.cancelled() => return,
            _ = informers.eviction_wake.notified() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// Records the eviction, marks the pod's DisruptionTarget condition and deletes it
/// (gracefully, only the pod that was judged).
async fn evict(informers: &NodeInformers, events: &EventRecorder, pod: &Pod, now: Timestamp) -> Result<(), SyncError> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let name = pod.metadata.name.as_deref().unwrap_or("");
    let api: Api<Pod> = Api::namespaced(informers.term.client.clone(), ns);
    tracing::info!(pod = %format!("{ns}/{name}"), "evicting a pod from a NoExecute-tainted node");
    events.publish(&pod.object_ref(&()), EventType::Normal, "TaintManagerEviction", &format!("Marking for deletion Pod {ns}/{name}")).await;
    let mut conditions = pod.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    conditions.retain(|c| c.type_ != "DisruptionTarget");
    let target = json!({"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
        "message": "Taint manager: deleting due to NoExecute taint", "lastTransitionTime": Time(now)});
    let mut list = serde_json::to_value(&conditions).unwrap_or_else(|_| json!([]));
    if let Some(a) = list.as_array_mut() {
        a.push(target);
    }
    let patch = json!({"metadata": {"resourceVersion": pod.metadata.resource_version}, "status": {"conditions": list}});
    if let Err(e) = api.patch_status(name, &PatchParams::default(), &Patch::Merge(patch)).await {
        // The condition is informative; the deletion is what matters.
        if keelson_component::fence::is_fenced(&e) {
            return Err(SyncError::Fenced);
        }
        tracing::debug!(pod = %name, error = %e, "setting DisruptionTarget");
    }
    let dp = DeleteParams { preconditions: Some(Preconditions { uid: pod.metadata.uid.clone(), resource_version: None }), ..Default::default() };
    match api.delete(name, &dp).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(SyncError::from_kube(e)),
    }
}
