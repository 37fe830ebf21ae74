//! Reads the cluster into a [`ClusterStatus`]: every replica's own status over the store
//! port, every server's `/readyz` over its API (the admin kubeconfig's context of the same
//! name), the component Leases from the store and the Nodes and their pods from a ready
//! API. Every server is asked at once, each with its own timeout, so a stopped server
//! costs one timeout and shows as down.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::core::v1::{Node, Pod};
use keelson_apiserver::component_leases;
use keelson_client::api::{MemberInfo, MemberListReply};
use keelson_client::StoreClient;
use kube::api::{Api, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

use super::report::{ApiHealth, ClusterStatus, LeaseStatus, NodeStatus, ServerStatus};
use crate::cli_cluster::Target;

/// How long one replica's status (or the member list) may take.
const STORE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one server's `/readyz` may take (its own store check takes up to 1.5 s).
const API_TIMEOUT: Duration = Duration::from_secs(3);
/// How long the Lease reads and the Node and Pod lists may take.
const LIST_TIMEOUT: Duration = Duration::from_secs(5);

/// The component Leases shown, as the components name them in `kube-system`.

/// Reads the cluster once. Fails only when no server gives the member list.
pub async fn gather(target: &Target, kubeconfig: Option<&Path>) -> anyhow::Result<ClusterStatus> {
    let client = target.client().await?;
    let list = member_list(&client, target.endpoints()?.len()).await?;
    let tls = target.tls()?;
    let kubeconfig = match kubeconfig {
        Some(path) => Kubeconfig::read_from(path).map_err(|e| format!("reading {}: {e}", path.display())),
        None => Err("no kubeconfig (give --kubeconfig)".to_string()),
    };
    let probes = list.members.iter().map(|m| probe_server(m, tls.as_ref(), &kubeconfig));
    let (probed, leases) = tokio::join!(futures::future::join_all(probes), component_leases(&client));
    let mut servers = Vec::new();
    let mut api_client = None;
    for (server, client) in probed {
        if api_client.is_none() && server.api.is_ready() {
            api_client = client;
        }
        servers.push(server);
    }
    servers.sort_by(|a, b| a.name.cmp(&b.name));
    let nodes = match api_client {
        Some(c) => nodes(&c).await,
        None => Err("no server's API is ready".to_string()),
    };
    Ok(ClusterStatus { leader: list.leader, servers, leases, nodes })
}

/// The member list from the first server that gives it.
async fn member_list(client: &StoreClient, servers: usize) -> anyhow::Result<MemberListReply> {
    let mut last = String::from("no servers");
    for _ in 0..servers.max(1) {
        match tokio::time::timeout(STORE_TIMEOUT, client.member_list()).await {
            Ok(Ok(l)) => return Ok(l),
            Ok(Err(e)) => last = e.to_string(),
            Err(_) => last = format!("no answer within {STORE_TIMEOUT:?}"),
        }
        client.rotate();
    }
    Err(anyhow::anyhow!(last)).context("no server gave the member list")
}

/// One server's replica status and API health, and a client of its API when it is ready.
async fn probe_server(m: &MemberInfo, tls: Option<&keelson_client::PeerTls>, kubeconfig: &Result<Kubeconfig, String>) -> (ServerStatus, Option<kube::Client>) {
    let raft = async {
        let c = StoreClient::with_transport(&[m.addr.as_str()], tls).map_err(|e| e.to_string())?;
        match tokio::time::timeout(STORE_TIMEOUT, c.status()).await {
            Ok(Ok(s)) => Ok(s),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {STORE_TIMEOUT:?}")),
        }
    };
    let (raft, (api, client)) = tokio::join!(raft, api_health(kubeconfig, &m.name));
    (ServerStatus { id: m.id, name: m.name.clone(), addr: m.addr.clone(), voter: m.voter, raft, api }, client)
}

/// `GET /readyz` through the kubeconfig context named as the server.
async fn api_health(kubeconfig: &Result<Kubeconfig, String>, context: &str) -> (ApiHealth, Option<kube::Client>) {
    let unknown = |reason: String| (ApiHealth::Unknown { reason }, None);
    let kc = match kubeconfig {
        Ok(kc) => kc,
        Err(e) => return unknown(e.clone()),
    };
    if !kc.contexts.iter().any(|c| c.name == context) {
        return unknown(format!("the kubeconfig has no context {context}"));
    }
    let opts = KubeConfigOptions { context: Some(context.to_string()), ..Default::default() };
    let mut config = match kube::Config::from_custom_kubeconfig(kc.clone(), &opts).await {
        Ok(c) => c,
        Err(e) => return unknown(format!("context {context}: {e}")),
    };
    let url = config.cluster_url.to_string().trim_end_matches('/').to_string();
    // One try each: a 503 is the answer, not something to wait out. (The timeout is
    // the one around the request below, so a silent server always reads the same.)
    config.default_retry = false;
    let client = match kube::Client::try_from(config) {
        Ok(c) => c,
        Err(e) => return unknown(format!("context {context}: {e}")),
    };
    let request = http::Request::get("/readyz").body(Vec::new()).expect("a static request is valid");
    let health = match tokio::time::timeout(API_TIMEOUT, client.request_text(request)).await {
        Ok(Ok(_)) => return (ApiHealth::Ready { url }, Some(client)),
        Ok(Err(kube::Error::Api(s))) => ApiHealth::NotReady { url, reason: format!("{} {}", s.code, first_line(&s.message)) },
        Ok(Err(e)) => ApiHealth::Down { url, reason: e.to_string() },
        Err(_) => ApiHealth::Down { url, reason: format!("no answer within {API_TIMEOUT:?}") },
    };
    (health, None)
}

fn first_line(s: &str) -> &str {
    s.trim().lines().next().unwrap_or_default()
}

/// The scheduler's and controller manager's Leases, read from the store.
async fn component_leases(client: &StoreClient) -> Result<Vec<LeaseStatus>, String> {
    let mut out = Vec::new();
    for name in component_leases::NAMES {
        let key = format!("/registry/coordination.k8s.io/leases/{}/{name}", component_leases::NAMESPACE);
        let reply = match tokio::time::timeout(LIST_TIMEOUT, client.get(key.as_bytes())).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Err(format!("reading Lease {name}: {e}")),
            Err(_) => return Err(format!("reading Lease {name}: no answer within {LIST_TIMEOUT:?}")),
        };
        let lease = reply.response.kvs.first().and_then(|kv| serde_json::from_slice::<serde_json::Value>(&kv.value).ok());
        out.push(LeaseStatus::read(name, lease.as_ref()));
    }
    Ok(out)
}

/// The Nodes, with the unfinished pods bound to each (one list of all pods, grouped).
async fn nodes(client: &kube::Client) -> Result<Vec<NodeStatus>, String> {
    let lists = async {
        let nodes = Api::<Node>::all(client.clone()).list(&ListParams::default()).await?;
        let pods = Api::<Pod>::all(client.clone()).list(&ListParams::default()).await?;
        Ok::<_, kube::Error>((nodes, pods))
    };
    let (nodes, pods) = match tokio::time::timeout(LIST_TIMEOUT, lists).await {
        Ok(Ok(l)) => l,
        Ok(Err(e)) => return Err(format!("listing nodes and pods: {e}")),
        Err(_) => return Err(format!("listing nodes and pods: no answer within {LIST_TIMEOUT:?}")),
    };
    let bound = unfinished_pods_per_node(&pods.items);
    Ok(nodes.items.iter().map(|n| node_status(n, &bound)).collect())
}

/// How many pods that have not finished are bound to each node.
fn unfinished_pods_per_node(pods: &[Pod]) -> BTreeMap<String, usize> {
    let mut bound: BTreeMap<String, usize> = BTreeMap::new();
    for pod in pods {
        let finished = matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"));
        if let (false, Some(node)) = (finished, pod.spec.as_ref().and_then(|s| s.node_name.clone())) {
            *bound.entry(node).or_default() += 1;
        }
    }
    bound
}

fn node_status(node: &Node, bound: &BTreeMap<String, usize>) -> NodeStatus {
    let name = node.metadata.name.clone().unwrap_or_default();
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status.clone())
        .unwrap_or_else(|| "Unknown".to_string());
    let spec = node.spec.as_ref();
    let taints = spec
        .and_then(|s| s.taints.as_ref())
        .map(|ts| {
            ts.iter()
                .map(|t| match &t.value {
                    Some(v) if !v.is_empty() => format!("{}={}:{}", t.key, v, t.effect),
                    _ => format!("{}:{}", t.key, t.effect),
                })
                .collect()
        })
        .unwrap_or_default();
    NodeStatus {
        pods: bound.get(&name).copied().unwrap_or(0),
        name,
        ready,
        unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        taints,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(node: Option<&str>, phase: &str) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"nodeName": node, "containers": []}, "status": {"phase": phase}})).unwrap()
    }

    #[test]
    fn pods_count_on_their_node_until_they_finish() {
        let pods = [pod(Some("a"), "Running"), pod(Some("a"), "Pending"), pod(Some("a"), "Succeeded"), pod(Some("b"), "Failed"), pod(None, "Pending")];
        assert_eq!(unfinished_pods_per_node(&pods), BTreeMap::from([("a".to_string(), 2)]));
    }

    #[test]
    fn a_node_reads_ready_cordon_and_taints() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1"},
            "spec": {"unschedulable": true, "taints": [
                {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
                {"key": "dedicated", "value": "db", "effect": "NoSchedule"},
            ]},
            "status": {"conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "Unknown"}]},
        }))
        .unwrap();
        let bound = BTreeMap::from([("n1".to_string(), 4)]);
        let want = NodeStatus {
            name: "n1".into(),
            ready: "Unknown".into(),
            pods: 4,
            unschedulable: true,
            taints: vec!["node.kubernetes.io/unreachable:NoExecute".into(), "dedicated=db:NoSchedule".into()],
        };
        assert_eq!(node_status(&node, &bound), want);
        let bare: Node = serde_json::from_value(json!({"metadata": {"name": "n2"}})).unwrap();
        assert_eq!(node_status(&bare, &bound), NodeStatus { name: "n2".into(), ready: "Unknown".into(), pods: 0, unschedulable: false, taints: vec![] });
    }
}
