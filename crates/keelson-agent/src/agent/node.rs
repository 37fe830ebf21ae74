//! The Node half of the agent: registration, status every heartbeat, the Lease, the pod
//! network configuration and routes to other nodes' pods.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{machine, AgentConfig};
use crate::cni::{self, PodRoute};
use crate::node_lease::{NodeLease, NODE_LEASE_DURATION_SECS};
use crate::runtime::Runtime;
use crate::status::{node_status_of, NodeFacts};

/// The Node could not be registered or configured.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("registering node {node}: {source}")]
    Register { node: String, #[source] source: kube::Error },
    #[error("the kubelet API: {0}")]
    KubeletApi(#[source] crate::kubelet_api::KubeletApiError),
    #[error("writing the CNI configuration {path}: {source}")]
    Cni { path: String, #[source] source: std::io::Error },
}

/// Reports one node.
#[derive(Clone)]
pub struct NodeReporter {
    client: kube::Client,
    runtime: Arc<dyn Runtime>,
    cfg: AgentConfig,
}

fn now() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}


/// The annotations of the ports the node's ingress serves (None: removed, that one is
/// off). Set once its listeners are bound, removed when it stops.
pub(crate) fn ingress_announcements(http: Option<u16>, https: Option<u16>) -> std::collections::BTreeMap<&'static str, Option<String>> {
    std::collections::BTreeMap::from([
        (keelson_ingress::HTTP_PORT_ANNOTATION, http.map(|p| p.to_string())),
        (keelson_ingress::HTTPS_PORT_ANNOTATION, https.map(|p| p.to_string())),
    ])
}

/// The annotations the agent keeps on its Node at registration: where local volumes
/// live, and no ingress ports (a previous run's are removed; this run's ingress
/// announces its own once it has bound them).
fn announcements(storage: &str) -> std::collections::BTreeMap<&'static str, Option<String>> {
    let mut a = ingress_announcements(None, None);
    a.insert(crate::local_path::NODE_LOCAL_PATH_DIR, Some(storage.to_string()));
    a
}

/// Sets (or, with None, removes) the ingress port annotations of Node `node`.
pub(crate) async fn announce_ingress(client: &kube::Client, node: &str, http: Option<u16>, https: Option<u16>) -> Result<(), kube::Error> {
    let patch = json!({"metadata": {"annotations": ingress_announcements(http, https)}});
    Api::<Node>::all(client.clone()).patch(node, &PatchParams::default(), &Patch::Merge(patch)).await.map(|_| ())
}

impl NodeReporter {
    pub fn new(client: kube::Client, runtime: Arc<dyn Runtime>, cfg: AgentConfig) -> Self {
        Self { client, runtime, cfg }
    }

    fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    /// Creates the Node (or finds it registered before) and reports its first status.
    pub async fn register(&self) -> Result<(), NodeError> {
        let name = &self.cfg.node_name;
        let err = |source| NodeError::Register { node: name.clone(), source };
        let storage = crate::local_path::storage_dir(&self.cfg.data_dir).display().to_string();
        let announced = announcements(&storage);
        let mut body = json!({"metadata": {"name": name, "annotations": announced.iter().filter_map(|(k, v)| Some((*k, v.clone()?))).collect::<std::collections::BTreeMap<_, _>>(), "labels": {
            "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64"}}});
        // A configured podCIDR is the Node's own from the start, so the controller
        // manager's allocator counts it as taken instead of giving another.
        if let Some(cidr) = &self.cfg.pod_cidr {
            let cidrs = cni::split_pod_cidrs(cidr);
            body["spec"] = json!({"podCIDR": cidrs.first(), "podCIDRs": cidrs});
        }
        let node: Node = serde_json::from_value(body).expect("a valid Node");
        let current = match self.nodes().create(&PostParams::default(), &node).await {
            Ok(created) => {
                tracing::info!(node = %name, "node registered");
                Some(created)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {
                tracing::info!(node = %name, "node was registered before");
                self.nodes().get_opt(name).await.map_err(err)?
            }
            Err(e) => return Err(err(e)),
        };
        let have = current.as_ref().and_then(|n| n.metadata.annotations.as_ref());
        if announced.iter().any(|(k, v)| have.and_then(|a| a.get(*k)) != v.as_ref()) {
            let patch = json!({"metadata": {"annotations": announced}});
            self.nodes().patch(name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(patch)).await.map_err(err)?;
        }
        self.report(current.as_ref()).await.map_err(err)?;
        Ok(())
    }

    /// The node's podCIDR: the one the controller manager gave the Node, else the
    /// configured one, waiting for the first if neither is there yet.
    pub async fn wait_pod_cidr(&self, shutdown: &CancellationToken) -> Result<Option<String>, NodeError> {
        let mut warned = false;
        loop {
            // All the Node's podCIDRs (one of each family when dual-stack), comma-separated.
            let node = self.nodes().get_opt(&self.cfg.node_name).await.ok().flatten();
            let given = node.as_ref().map(cni::node_pod_cidrs).filter(|c| !c.is_empty()).map(|c| c.join(","));
            if let Some(c) = given.or_else(|| self.cfg.pod_cidr.clone()) {
                return Ok(Some(c));
            }
            if !warned {
                tracing::info!("waiting for the controller manager to give this node a podCIDR (or set --pod-cidr)");
                warned = true;
            }
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(None),
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }

    /// Writes the CNI network for `pod_cidr` where the node's containerd reads it.
    pub fn write_cni_config(&self, pod_cidr: &str) -> Result<(), NodeError> {
        let dir = self.cfg.data_dir.join("cni/net.d");
        let path = dir.join("10-keelson.conflist");
        let err = |source| NodeError::Cni { path: path.display().to_string(), source };
        std::fs::create_dir_all(&dir).map_err(err)?;
        let conf = cni::conflist(pod_cidr, &self.cfg.data_dir.join("cni/ipam"), self.cfg.with_portmap);
        std::fs::write(&path, serde_json::to_vec_pretty(&conf).expect("serializable")).map_err(err)?;
        tracing::info!(pod_cidr, "pod network configured");
        Ok(())
    }

    async fn facts(&self) -> (NodeFacts, crate::status::NodeHealth) {
        let (machine_id, boot_id, kernel_version, os_image) = machine::identity();
        let mut health = machine::health(&self.cfg.data_dir, &self.cfg.eviction);
        let runtime_version = match self.runtime.version().await {
            Ok(v) => v,
            Err(e) => {
                health.not_ready = Some(format!("container runtime is down: {e}"));
                String::new()
            }
        };
        let images = self.runtime.list_images().await.unwrap_or_default().into_iter().map(|i| (i.names, i.size_bytes)).collect();
        let facts = NodeFacts {
            name: self.cfg.node_name.clone(),
            address: self.cfg.node_ip,
            address6: self.cfg.node_ip6,
            capacity: machine::capacity(&self.cfg.data_dir, self.cfg.max_pods),
            machine_id,
            boot_id,
            kernel_version,
            os_image,
            runtime_version,
            kubelet_port: self.cfg.kubelet_port,
            images,
        };
        (facts, health)
    }

    /// Writes the Node's status once; `current` is the Node as last read.
    pub async fn report(&self, current: Option<&Node>) -> Result<(), kube::Error> {
        let (facts, health) = self.facts().await;
        let mut status = node_status_of(&facts, &health, &now());
        // Conditions keep their lastTransitionTime while their status holds.
        if let Some(old) = current.cloned() {
            let old_conditions = old.status.and_then(|s| s.conditions).unwrap_or_default();
            for c in status["conditions"].as_array_mut().into_iter().flatten() {
                if let Some(o) = old_conditions.iter().find(|o| Some(o.type_.as_str()) == c["type"].as_str() && Some(o.status.as_str()) == c["status"].as_str()) {
                    if let Some(t) = &o.last_transition_time {
                        c["lastTransitionTime"] = json!(t.0.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
                    }
                }
            }
        }
        self.nodes().patch_status(&self.cfg.node_name, &PatchParams::default(), &Patch::Merge(json!({"status": status}))).await?;
        Ok(())
    }

    async fn sync_routes(&self, applied: &mut BTreeSet<PodRoute>) {
        let Ok(nodes) = self.nodes().list(&ListParams::default()).await else { return };
        let wanted = cni::routes(&self.cfg.node_name, &nodes.items);
        for r in wanted.difference(applied) {
            if ip(&["route", "replace", &r.cidr, "via", &r.via]).await {
                tracing::info!(cidr = %r.cidr, via = %r.via, "route to another node's pods");
            }
        }
        for r in applied.difference(&wanted) {
            ip(&["route", "del", &r.cidr, "via", &r.via]).await;
        }
        *applied = wanted;
    }

    /// Status, Lease and routes, every heartbeat, until `shutdown`.
    pub fn spawn(&self, shutdown: CancellationToken) -> Vec<tokio::task::JoinHandle<()>> {
        let me = self.clone();
        let status = tokio::spawn(async move {
            let mut routes = BTreeSet::new();
            let mut lease = NodeLease::new(me.client.clone(), &me.cfg.node_name, NODE_LEASE_DURATION_SECS);
            loop {
                // One read of the Node per heartbeat: its uid owns the Lease, its
                // conditions' transition times carry over into the status.
                let current = match me.nodes().get_opt(&me.cfg.node_name).await {
                    Ok(n) => n,
                    Err(e) => {
                        tracing::info!(error = %e, "reading the Node");
                        None
                    }
                };
                // The Node's uid owns the Lease.
                let owner = current.as_ref().and_then(|n| n.metadata.uid.as_deref());
                if let Err(e) = lease.renew(owner).await {
                    tracing::info!(error = %e, "renewing the node lease");
                }
                if let Err(e) = me.report(current.as_ref()).await {
                    tracing::info!(error = %e, "reporting node status");
                }
                if me.cfg.manage_routes {
                    me.sync_routes(&mut routes).await;
                }
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(me.cfg.heartbeat) => {}
                }
            }
        });
        vec![status]
    }
}

async fn ip(args: &[&str]) -> bool {
    match tokio::process::Command::new("ip").args(args).output().await {
        Ok(o) if o.status.success() => true,
        Ok(o) => {
            tracing::info!(args = ?args, error = %String::from_utf8_lossy(&o.stderr).trim(), "ip");
            false
        }
        Err(e) => {
            tracing::info!(error = %e, "running ip");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_announces_its_volumes_and_only_the_ingress_ports_it_serves() {
        let at_registration = announcements("/var/lib/keelson/storage");
        assert_eq!(at_registration[crate::local_path::NODE_LOCAL_PATH_DIR].as_deref(), Some("/var/lib/keelson/storage"));
        assert_eq!(at_registration[keelson_ingress::HTTP_PORT_ANNOTATION], None, "no ingress port before the ingress has bound it");
        let a = ingress_announcements(Some(80), None);
        assert_eq!(a[keelson_ingress::HTTP_PORT_ANNOTATION].as_deref(), Some("80"));
        assert_eq!(a[keelson_ingress::HTTPS_PORT_ANNOTATION], None, "an unserved port is removed from the Node");
        // As a merge patch, None is JSON null: the annotation is deleted.
        let patch = json!({"metadata": {"annotations": a}});
        assert!(patch["metadata"]["annotations"][keelson_ingress::HTTPS_PORT_ANNOTATION].is_null());
    }
}
