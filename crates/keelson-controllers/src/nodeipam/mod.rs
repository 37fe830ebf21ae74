//! The node IPAM controller (Kubernetes' range allocator): every Node without
//! `spec.podCIDR` gets a block of the cluster CIDR in `spec.podCIDR` and `spec.podCIDRs`
//! (on a dual-stack cluster a block of each cluster CIDR, the primary's first).
//! Decisions are [`allocate::allocate`] over the Nodes as reflected; this loop writes them.
//!
//! # Guarantees
//! No two Nodes are given the same block by one term: a block given out stays reserved
//! until the reflector shows it on its Node (or the Node is gone), and every write is
//! conditional on the Node's resourceVersion, so a Node is never given two.
//! # Caveats
//! A block is free again as soon as its Node is gone from the reflector; pod CIDRs a
//! user set by hand are respected, not validated.

pub mod allocate;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use keelson_component::events::{EventRecorder, EventType};
use kube::api::{Api, Patch, PatchParams};
use kube::Resource;
use serde_json::json;

use crate::informers::SyncError;
use crate::node_informers::NodeInformers;
pub use allocate::{Allocation, IpCidr, IpamConfig, IpamError, NodeCidrs, NodeRange};

/// The allocator looks again this often even without Node events.
const RESYNC: Duration = Duration::from_secs(5);

/// The pod CIDRs a Node has: `spec.podCIDRs`, or `spec.podCIDR` alone.
pub fn pod_cidrs(node: &Node) -> Vec<&str> {
    let Some(spec) = node.spec.as_ref() else { return Vec::new() };
    match (&spec.pod_cidrs, &spec.pod_cidr) {
        (Some(list), _) if !list.is_empty() => list.iter().map(String::as_str).collect(),
        (_, Some(one)) if !one.is_empty() => vec![one.as_str()],
        _ => Vec::new(),
    }
}

/// Allocates until the term ends.
pub(crate) async fn run(informers: Arc<NodeInformers>, config: IpamConfig) {
    let term = &informers.term;
    let events = EventRecorder::new(term.client.clone(), "cidrAllocator", &term.identity);
    let nodes_api: Api<Node> = Api::all(term.client.clone());
    // Blocks given out that the reflector does not show yet, by Node.
    let mut pending: HashMap<String, Vec<IpCidr>> = HashMap::new();
    let mut reported_full: HashSet<String> = HashSet::new();
    loop {
        let nodes = informers.nodes.state();
        let waiting: HashSet<&str> = nodes.iter().filter(|n| pod_cidrs(n).is_empty()).filter_map(|n| n.metadata.name.as_deref()).collect();
        pending.retain(|name, _| waiting.contains(name.as_str()));
        let views: Vec<NodeCidrs<'_>> = nodes
            .iter()
            .filter(|n| !pending.contains_key(n.metadata.name.as_deref().unwrap_or("")))
            .map(|n| NodeCidrs { name: n.metadata.name.as_deref().unwrap_or(""), pod_cidrs: pod_cidrs(n) })
            .collect();
        let reserved: Vec<IpCidr> = pending.values().flatten().copied().collect();
        for decision in allocate::allocate(&config, &views, &reserved) {
            let span = tracing::info_span!("reconcile", controller = "nodeipam", decision = ?decision, trace_id = tracing::field::Empty);
            keelson_tracecontext::continue_trace(&span, None);
            let step = execute(&nodes_api, &events, &nodes, &decision, &mut reported_full, &config);
            match tracing::Instrument::instrument(step, span).await {
                Ok(Some((node, cidrs))) => {
                    pending.insert(node, cidrs);
                }
                Ok(None) => {}
                Err(SyncError::Fenced) => {
                    term.step_down();
                    return;
                }
                Err(e) => tracing::debug!(error = %e, "allocating a pod CIDR; the next pass retries"),
            }
        }
        tokio::select! {
            _ = term.ended.cancelled() => return,
            _ = informers.ipam_wake.notified() => {}
            _ = tokio::time::sleep(RESYNC) => {}
        }
    }
}

/// Writes one decision; returns the block given out, if one was.
async fn execute(
    nodes_api: &Api<Node>,
    events: &EventRecorder,
    nodes: &[Arc<Node>],
    decision: &Allocation,
    reported_full: &mut HashSet<String>,
    config: &IpamConfig,
) -> Result<Option<(String, Vec<IpCidr>)>, SyncError> {
    let find = |name: &str| nodes.iter().find(|n| n.metadata.name.as_deref() == Some(name)).cloned();
    match decision {
        Allocation::Assign { node, cidrs } => {
            let Some(current) = find(node) else { return Ok(None) };
            let all: Vec<String> = cidrs.iter().map(ToString::to_string).collect();
            let patch = json!({"metadata": {"resourceVersion": current.metadata.resource_version},
                "spec": {"podCIDR": all.first(), "podCIDRs": all}});
            nodes_api.patch(node, &PatchParams::default(), &Patch::Merge(patch)).await.map_err(SyncError::from_kube)?;
            tracing::info!(node = %node, cidr = %all.join(","), "pod CIDR allocated");
            Ok(Some((node.clone(), cidrs.clone())))
        }
        Allocation::Exhausted { node } => {
            if reported_full.insert(node.clone()) {
                tracing::warn!(node = %node, cluster_cidr = %config, "no pod CIDR left for a node");
                if let Some(n) = find(node) {
                    let message = format!("Node {node} status is now: CIDRNotAvailable");
                    events.publish(&n.object_ref(&()), EventType::Normal, "CIDRNotAvailable", &message).await;
                }
            }
            Ok(None)
        }
    }
}
