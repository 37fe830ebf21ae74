//! `metrics.k8s.io/v1beta1` served by the API server itself, as metrics-server's
//! aggregated API would be (`kubectl top`): each request asks the agents concerned for
//! their `/stats/summary` through the [`KubeletClient`], all at once with
//! [`NODE_TIMEOUT`] each, and converts the answers (`crate::resource_metrics`, pure).
//! Nodes that do not answer are left out, as metrics-server leaves them out. Hollow
//! nodes (addresses in 240.0.0.0/4, never routed) have no agent API and are not dialled.
//! Label and field selectors select the Nodes and Pods whose metrics are returned.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use axum::response::Response;
use futures::future::join_all;
use http::StatusCode;
use serde_json::Value;

use super::list::{list, Selectors};
use super::node_proxy::{kubelet_address, KubeletClient};
use super::request::{MetricsRequest, MetricsResource, ResourceRequest};
use super::{json_response, ApiState};
use crate::catalog;
use crate::error::ApiError;
use crate::resource_metrics::{list as metrics_list, node_metrics, pod_metrics};

/// How long one agent may take to answer `/stats/summary`.
pub const NODE_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether a Node is a hollow node's (its InternalIP in 240.0.0.0/4): no agent API.
pub(crate) fn is_hollow(node: &Value) -> bool {
    node.pointer("/status/addresses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|a| a["type"] == "InternalIP")
        .filter_map(|a| a["address"].as_str()?.parse::<std::net::Ipv4Addr>().ok())
        .any(|ip| ip.octets()[0] >= 240)
}

/// The summaries of `nodes` that answered, by node name.
async fn summaries(kubelet: &KubeletClient, nodes: &[Value]) -> HashMap<String, Value> {
    let asks = nodes.iter().filter(|n| !is_hollow(n)).filter_map(|n| {
        let name = n.pointer("/metadata/name")?.as_str()?.to_string();
        let (addr, host) = kubelet_address(n)?;
        Some(async move {
            match kubelet.get_json(&addr, &host, "/stats/summary", NODE_TIMEOUT).await {
                Ok(v) => Some((name, v)),
                Err(e) => {
                    tracing::info!(node = %name, error = %e, "no summary from the node's agent: left out of resource metrics");
                    None
                }
            }
        })
    });
    join_all(asks).await.into_iter().flatten().collect()
}

fn def(plural: &str) -> Result<&'static catalog::ResourceDef, ApiError> {
    catalog::lookup("", "v1", plural).ok_or(ApiError::NoRoute)
}

fn not_found(resource: &str, name: String) -> ApiError {
    ApiError::NotFound { resource: format!("{resource}.metrics.k8s.io"), name }
}

/// Answers a `metrics.k8s.io/v1beta1` GET.
pub(crate) async fn handle(state: &Arc<ApiState>, m: MetricsRequest, q: &HashMap<String, String>) -> Result<Response, ApiError> {
    let Some(kubelet) = state.kubelet.as_ref() else { return Err(ApiError::Unavailable("this API server has no kubelet client identity (no cluster CA key)".into())) };
    let now = crate::registry::now_rfc3339();
    match m.resource {
        MetricsResource::Nodes => {
            let nodes_def = def("nodes")?;
            let nodes: Vec<Value> = match &m.name {
                Some(name) => match state.registry.get(nodes_def, None, name).await {
                    Ok(s) => vec![s.obj],
                    Err(ApiError::NotFound { .. }) => return Err(not_found("nodemetrics", name.clone())),
                    Err(e) => return Err(e),
                },
                None => {
                    let sel = Selectors::parse(nodes_def, q)?;
                    let rr = ResourceRequest { def: nodes_def, namespace: None, name: None, subresource: None };
                    list(&state.registry, Some(&state.watch_cache), &rr, &HashMap::new(), &sel).await?.items.into_iter().map(|s| s.obj.clone()).collect()
                }
            };
            let answers = summaries(kubelet, &nodes).await;
            let items: Vec<Value> = nodes
                .iter()
                .filter_map(|n| node_metrics(n, answers.get(n.pointer("/metadata/name")?.as_str()?)?, &now))
                .collect();
            match &m.name {
                Some(name) => items.into_iter().next().map(|v| json_response(StatusCode::OK, &v)).ok_or_else(|| not_found("nodemetrics", name.clone())),
                None => Ok(json_response(StatusCode::OK, &metrics_list("NodeMetrics", items))),
            }
        }
        MetricsResource::Pods => {
            let pods_def = def("pods")?;
            let pods: Vec<Value> = match (&m.namespace, &m.name) {
                (Some(ns), Some(name)) => match state.registry.get(pods_def, Some(ns), name).await {
                    Ok(s) => vec![s.obj],
                    Err(ApiError::NotFound { .. }) => return Err(not_found("podmetrics", format!("{ns}/{name}"))),
                    Err(e) => return Err(e),
                },
                _ => {
                    let sel = Selectors::parse(pods_def, q)?;
                    let rr = ResourceRequest { def: pods_def, namespace: m.namespace.clone(), name: None, subresource: None };
                    list(&state.registry, Some(&state.watch_cache), &rr, &HashMap::new(), &sel).await?.items.into_iter().map(|s| s.obj.clone()).collect()
                }
            };
            // Only running pods have usage; ask only their nodes.
            let mut by_node: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
            for p in &pods {
                let node = p.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or("");
                let phase = p.pointer("/status/phase").and_then(Value::as_str).unwrap_or("");
                if !node.is_empty() && phase == "Running" {
                    by_node.entry(node.to_string()).or_default().push(p);
                }
            }
            let nodes_def = def("nodes")?;
            let nodes: Vec<Value> = join_all(by_node.keys().map(|n| state.registry.get(nodes_def, None, n))).await.into_iter().filter_map(|r| r.ok().map(|s| s.obj)).collect();
            let answers = summaries(kubelet, &nodes).await;
            let mut items = Vec::new();
            for (node, pods) in &by_node {
                let Some(summary) = answers.get(node) else { continue };
                items.extend(pods.iter().filter_map(|p| pod_metrics(p, summary, &now)));
            }
            match (&m.namespace, &m.name) {
                (Some(ns), Some(name)) => items.into_iter().next().map(|v| json_response(StatusCode::OK, &v)).ok_or_else(|| not_found("podmetrics", format!("{ns}/{name}"))),
                _ => Ok(json_response(StatusCode::OK, &metrics_list("PodMetrics", items))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn hollow_nodes_are_recognised_by_their_reserved_address() {
        assert!(is_hollow(&json!({"status": {"addresses": [{"type": "InternalIP", "address": "240.0.0.7"}]}})));
        assert!(!is_hollow(&json!({"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.7"}]}})));
        assert!(!is_hollow(&json!({"status": {"addresses": [{"type": "Hostname", "address": "n1"}]}})));
    }
}
