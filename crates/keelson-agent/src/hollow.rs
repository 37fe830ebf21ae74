//! Hollow nodes: Node objects with capacity and a heartbeating Lease each, whose bound
//! pods are reported Running and Ready at once and whose deleted pods are confirmed gone
//! at once — a kubelet without containers. Their addresses are in 240.0.0.0/4, which is
//! reserved and never routed: they are data, not endpoints. So they serve no kubelet API
//! either: no logs or exec, and no `/stats/summary` — the API server does not dial them
//! and leaves them out of `metrics.k8s.io` (`kubectl top nodes` prints `<unknown>`).
//!
//! Simulated completion: a pod annotated [`EXIT_CODE_ANNOTATION`] (`"0"`, `"1"`, …) is
//! reported Running, then after [`SIMULATED_RUN`] its containers are reported terminated
//! with that code (phase Succeeded for 0, Failed otherwise), whatever its restartPolicy —
//! how tests run Jobs on nodes without containers. A deleted local-path volume of a
//! hollow node is recorded as a `LocalVolumeRemoved` Event on the Node (simulated: there
//! is no directory). Nothing else is simulated.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::watcher::{self, watcher};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::node_lease::{NodeLease, NODE_LEASE_DURATION_SECS};
use crate::status::{node_status, running_pod_status, terminated_pod_status, NodeCapacity};

/// A pod annotation (simulation only): the exit code its containers finish with on a
/// hollow node, after [`SIMULATED_RUN`].
pub const EXIT_CODE_ANNOTATION: &str = "keelson.io/hollow-exit-code";

/// How long a hollow pod with [`EXIT_CODE_ANNOTATION`] runs before it exits.
pub const SIMULATED_RUN: Duration = Duration::from_secs(1);

fn simulated_exit_code(pod: &Pod) -> Option<i32> {
    pod.metadata.annotations.as_ref()?.get(EXIT_CODE_ANNOTATION)?.trim().parse().ok()
}

/// Registering hollow nodes failed.
#[derive(Debug, thiserror::Error)]
pub enum HollowError {
    #[error("registering node {node}: {source}")]
    Register { node: String, #[source] source: kube::Error },
}

/// Which hollow nodes to run.
#[derive(Clone, Debug)]
pub struct HollowConfig {
    /// Nodes are `<prefix>-<i>` for i in `first..first + count`.
    pub prefix: String,
    pub first: usize,
    pub count: usize,
    pub capacity: NodeCapacity,
    /// Labels of node `i` besides `kubernetes.io/hostname`.
    pub labels: fn(usize) -> BTreeMap<String, String>,
    /// Lease renewal period (the kubelet's is 10 s, for a 40 s lease).
    pub heartbeat: Duration,
}

impl HollowConfig {
    pub fn new(prefix: &str, count: usize) -> Self {
        Self { prefix: prefix.into(), first: 0, count, capacity: NodeCapacity::default(), labels: |_| BTreeMap::new(), heartbeat: Duration::from_secs(10) }
    }

    pub fn node_name(&self, i: usize) -> String {
        format!("{}-{i}", self.prefix)
    }

    /// The indices of the nodes this configuration runs (so separate runs with the same
    /// prefix run, and stop, separate nodes with distinct addresses).
    pub fn indices(&self) -> std::ops::Range<usize> {
        self.first..self.first + self.count
    }
}

fn now() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Host address of hollow node `i` (240.0.0.0/8) and the `n`th pod address on it (241.0.0.0/8).
fn host_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::from(0xF000_0000u32 + 1 + i as u32)
}

fn pod_ip(i: usize, n: u32) -> Ipv4Addr {
    Ipv4Addr::from(0xF100_0000u32 + ((i as u32) << 8) + (n % 254) + 1)
}

/// Where a hollow node says its local volumes live (nothing is ever created there).
pub fn hollow_storage_dir(node: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(format!("/var/lib/keelson-hollow/{node}/storage"))
}

/// Registers the nodes, then heartbeats them and serves their pods until `shutdown`.
pub async fn run(client: kube::Client, cfg: HollowConfig, shutdown: CancellationToken) -> Result<(), HollowError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let index: HashMap<String, usize> = cfg.indices().map(|i| (cfg.node_name(i), i)).collect();
    for i in cfg.indices() {
        let name = cfg.node_name(i);
        let mut labels = (cfg.labels)(i);
        labels.insert("kubernetes.io/hostname".into(), name.clone());
        labels.insert("kubernetes.io/os".into(), "linux".into());
        let annotations = json!({crate::local_path::NODE_LOCAL_PATH_DIR: hollow_storage_dir(&name).display().to_string()});
        let node: Node = serde_json::from_value(json!({"metadata": {"name": name, "labels": labels, "annotations": annotations}})).expect("a valid Node");
        match nodes.create(&PostParams::default(), &node).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(source) => return Err(HollowError::Register { node: name, source }),
        }
        let status = json!({"status": node_status(&name, host_ip(i), &cfg.capacity, &now())});
        nodes.patch_status(&name, &PatchParams::default(), &Patch::Merge(status)).await.map_err(|source| HollowError::Register { node: name.clone(), source })?;
    }
    tracing::info!(count = cfg.count, prefix = %cfg.prefix, "hollow nodes registered");
    tokio::spawn(heartbeat(client.clone(), cfg.clone(), shutdown.clone()));
    let storage = index.keys().map(|n| (n.clone(), hollow_storage_dir(n))).collect();
    tokio::spawn(crate::local_path::reclaim(client.clone(), storage, true, shutdown.clone()));
    serve_pods(client, Arc::new(index), shutdown).await;
    Ok(())
}

/// Renews every node's Lease in `kube-node-lease`, by updates as the real agent does.
async fn heartbeat(client: kube::Client, cfg: HollowConfig, shutdown: CancellationToken) {
    let mut leases: Vec<NodeLease> = cfg.indices().map(|i| NodeLease::new(client.clone(), &cfg.node_name(i), NODE_LEASE_DURATION_SECS)).collect();
    loop {
        for lease in &mut leases {
            if let Err(e) = lease.renew(None).await {
                tracing::debug!(node = %lease.name(), error = %e, "renewing the node lease");
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(cfg.heartbeat) => {}
        }
    }
}

/// Reports bound pods Running and confirms deleted ones, for the nodes in `index`.
async fn serve_pods(client: kube::Client, index: Arc<HashMap<String, usize>>, shutdown: CancellationToken) {
    let pods: Api<Pod> = Api::all(client.clone());
    let stream = watcher(pods, watcher::Config::default());
    futures::pin_mut!(stream);
    let counters: Arc<Mutex<HashMap<usize, u32>>> = Arc::default();
    let running: Arc<Mutex<HashSet<String>>> = Arc::default();
    let limit = Arc::new(tokio::sync::Semaphore::new(32));
    loop {
        let ev = tokio::select! {
            _ = shutdown.cancelled() => return,
            ev = stream.next() => match ev { Some(ev) => ev, None => return },
        };
        let pod = match ev {
            Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => p,
            Ok(_) => continue,
            Err(e) => {
                tracing::debug!(error = %e, "hollow node pod watch; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        let Some(&node) = pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).and_then(|n| index.get(n)) else { continue };
        let ns = pod.metadata.namespace.clone().unwrap_or_else(|| "default".into());
        let name = pod.metadata.name.clone().unwrap_or_default();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let permit = limit.clone().acquire_owned().await.expect("never closed");
        if pod.metadata.deletion_timestamp.is_some() {
            running.lock().expect("lock").remove(&uid);
            tokio::spawn(async move {
                let dp = DeleteParams { grace_period_seconds: Some(0), preconditions: Some(Preconditions { uid: Some(uid), resource_version: None }), ..Default::default() };
                let _ = api.delete(&name, &dp).await;
                drop(permit);
            });
            continue;
        }
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        let exit_code = simulated_exit_code(&pod);
        let reported = phase == Some("Running");
        if matches!(phase, Some("Succeeded" | "Failed")) || (reported && exit_code.is_none()) || !running.lock().expect("lock").insert(uid) {
            continue;
        }
        let n = {
            let mut c = counters.lock().expect("lock");
            let e = c.entry(node).or_default();
            *e += 1;
            *e
        };
        let started = pod.status.as_ref().and_then(|s| s.start_time.as_ref()).map(|t| t.0.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()).unwrap_or_else(now);
        let status = (!reported).then(|| running_pod_status(&pod, host_ip(node), pod_ip(node, n), &now()));
        tokio::spawn(async move {
            if let Some(status) = status {
                if let Err(e) = api.patch_status(&name, &PatchParams::default(), &Patch::Merge(json!({"status": status}))).await {
                    tracing::debug!(pod = %name, error = %e, "reporting a hollow pod");
                }
            }
            drop(permit);
            let Some(code) = exit_code else { return };
            tokio::time::sleep(SIMULATED_RUN).await;
            let status = terminated_pod_status(&pod, code, &started, &now());
            if let Err(e) = api.patch_status(&name, &PatchParams::default(), &Patch::Merge(json!({"status": status}))).await {
                tracing::debug!(pod = %name, error = %e, "reporting a hollow pod's exit");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separate_runs_serve_separate_nodes() {
        let mut cfg = HollowConfig::new("hollow", 2);
        cfg.first = 3;
        let names: Vec<String> = cfg.indices().map(|i| cfg.node_name(i)).collect();
        assert_eq!(names, ["hollow-3", "hollow-4"]);
        assert_eq!(HollowConfig::new("hollow", 2).indices(), 0..2);
    }

    #[test]
    fn addresses_are_reserved_and_distinct() {
        assert_eq!(host_ip(0), Ipv4Addr::new(240, 0, 0, 1));
        assert_eq!(host_ip(1000), Ipv4Addr::new(240, 0, 3, 233));
        assert_ne!(pod_ip(0, 1), pod_ip(1, 1));
        assert!(pod_ip(5, 3).octets()[0] == 241);
    }
}
