//! The node lifecycle controller (Kubernetes' `nodelifecycle`): every monitor period it
//! looks at every Node with its Lease, decides with [`reconcile::observe`] and
//! [`reconcile::reconcile`], and writes what they say: the Node's conditions (nodes/status),
//! its taints, pods' Ready conditions, and the Events Kubernetes records
//! (`RegisteredNode` and `NodeNotReady` on the Node, `NodeNotReady` on each pod marked).
//!
//! # Caveats
//! Kubernetes rate-limits tainting per zone (0.1 node/s, less when a zone is mostly
//! down, none when all are); Keelson taints at once.

pub mod reconcile;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use keelson_component::events::{EventRecorder, EventType};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::Resource;
use serde_json::json;

use crate::informers::SyncError;
use crate::node_informers::{NodeInformers, NODE_LEASE_NAMESPACE};
pub use reconcile::{Actions, LifecycleConfig, NodeHealth, PodKey};

/// Monitors until the term ends.
pub(crate) async fn run(informers: Arc<NodeInformers>, config: LifecycleConfig) {
    let term = &informers.term;
    let events = EventRecorder::new(term.client.clone(), "node-controller", &term.identity);
    let mut health: HashMap<String, NodeHealth> = HashMap::new();
    loop {
        let now = Timestamp::now();
        let nodes = informers.nodes.state();
        let pods = informers.pods.state();
        let mut by_node: HashMap<&str, Vec<&Pod>> = HashMap::new();
        for p in &pods {
            if let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
                by_node.entry(n).or_default().push(p.as_ref());
            }
        }
        let present: HashSet<&str> = nodes.iter().filter_map(|n| n.metadata.name.as_deref()).collect();
        health.retain(|name, _| present.contains(name.as_str()));
        for node in &nodes {
            let name = node.metadata.name.clone().unwrap_or_default();
            let lease = informers.leases.get(&ObjectRef::new(&name).within(NODE_LEASE_NAMESPACE));
            let saved = health.get(&name);
            if saved.is_none() {
                let message = format!("Registered Node {name} in Controller");
                events.publish(&node.object_ref(&()), EventType::Normal, "RegisteredNode", &message).await;
            }
            let observed = reconcile::observe(saved, node, lease.as_deref(), now);
            let on_node = by_node.get(name.as_str()).map(Vec::as_slice).unwrap_or(&[]);
            let actions = reconcile::reconcile(node, &observed, on_node, now, &config);
            health.insert(name.clone(), observed);
            let span = tracing::info_span!("reconcile", controller = "nodelifecycle", node = %name, trace_id = tracing::field::Empty);
            keelson_tracecontext::continue_trace(&span, None);
            match tracing::Instrument::instrument(execute(&informers, &events, node, &actions, now), span).await {
                Ok(()) => {}
                Err(SyncError::Fenced) => {
                    tracing::warn!(controller = "nodelifecycle", "a write was fenced; stepping down");
                    term.step_down();
                    return;
                }
                Err(e) => tracing::info!(node = %name, error = %e, "node lifecycle step failed; the next pass retries"),
            }
        }
        tokio::select! {
            _ = term.ended.cancelled() => return,
            _ = tokio::time::sleep(config.monitor_period) => {}
        }
    }
}

fn gone_or_moved(e: &SyncError) -> bool {
    matches!(e, SyncError::Api(kube::Error::Api(s)) if s.code == 404 || s.code == 409)
}

/// Writes one Node's actions: conditions, then taints, then pods.
async fn execute(informers: &NodeInformers, events: &EventRecorder, node: &Node, actions: &Actions, now: Timestamp) -> Result<(), SyncError> {
    let client = &informers.term.client;
    let name = node.metadata.name.as_deref().unwrap_or("");
    let nodes_api: Api<Node> = Api::all(client.clone());
    let mut resource_version = node.metadata.resource_version.clone();
    if let Some(conditions) = &actions.conditions {
        tracing::info!(node = %name, "node stopped posting status; conditions set Unknown");
        let patch = json!({"metadata": {"resourceVersion": resource_version}, "status": {"conditions": conditions}});
        let written = nodes_api.patch_status(name, &PatchParams::default(), &Patch::Merge(patch)).await.map_err(SyncError::from_kube)?;
        resource_version = written.metadata.resource_version;
    }
    if let Some(change) = actions.status_change {
        events.publish(&node.object_ref(&()), EventType::Normal, change, &format!("Node {name} status is now: {change}")).await;
    }
    if let Some(taints) = &actions.taints {
        tracing::info!(node = %name, taints = ?taints.iter().map(|t| format!("{}:{}", t.key, t.effect)).collect::<Vec<_>>(), "node taints updated");
        let taints = if taints.is_empty() { serde_json::Value::Null } else { json!(taints) };
        let patch = json!({"metadata": {"resourceVersion": resource_version}, "spec": {"taints": taints}});
        nodes_api.patch(name, &PatchParams::default(), &Patch::Merge(patch)).await.map_err(SyncError::from_kube)?;
    }
    for key in &actions.pods_not_ready {
        match mark_not_ready(informers, events, key, now).await {
            Err(e) if gone_or_moved(&e) => tracing::debug!(pod = %key.name, "pod changed while being marked not ready; the next pass retries"),
            r => r?,
        }
    }
    Ok(())
}

/// Sets the pod's Ready condition False (Kubernetes' MarkPodsNotReady).
async fn mark_not_ready(informers: &NodeInformers, events: &EventRecorder, key: &PodKey, now: Timestamp) -> Result<(), SyncError> {
    let Some(pod) = informers.pods.get(&ObjectRef::new(&key.name).within(&key.namespace)) else { return Ok(()) };
    let mut conditions = pod.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    for c in conditions.iter_mut().filter(|c| c.type_ == "Ready" && c.status != "False") {
        c.status = "False".into();
        c.last_transition_time = Some(Time(now));
    }
    let api: Api<Pod> = Api::namespaced(informers.term.client.clone(), &key.namespace);
    let patch = json!({"metadata": {"resourceVersion": pod.metadata.resource_version}, "status": {"conditions": conditions}});
    api.patch_status(&key.name, &PatchParams::default(), &Patch::Merge(patch)).await.map_err(SyncError::from_kube)?;
    tracing::info!(pod = %format!("{}/{}", key.namespace, key.name), "pod marked not ready");
    events.publish(&pod.object_ref(&()), EventType::Warning, "NodeNotReady", "Node is not ready").await;
    Ok(())
}
