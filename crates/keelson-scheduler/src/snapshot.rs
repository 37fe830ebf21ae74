//! The immutable picture one scheduling cycle decides on: every node with the pods
//! assigned to it (bound, being bound, or assumed by this scheduler) and what they take.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};

use crate::resources::{pod_requests, Resources, PODS};

/// A host port in use: (protocol, host IP, port); an empty or `0.0.0.0` IP is every address.
pub type HostPort = (String, String, i32);

/// One node and what is placed on it.
#[derive(Clone, Debug)]
pub struct NodeInfo {
    pub name: String,
    pub node: Arc<Node>,
    pub pods: Vec<Arc<Pod>>,
    /// Sum of the requests of `pods`, with `pods` counting them.
    pub requested: Resources,
    pub allocatable: Resources,
    pub host_ports: Vec<HostPort>,
    /// Requested cpu (millicores) and memory (bytes), counting pods that request none
    /// as Kubernetes' scoring does (100m, 200 MB).
    pub non_zero_requested: (i64, i64),
}

/// Requests used for scoring a pod that requests nothing (Kubernetes' non-zero defaults).
pub const DEFAULT_CPU_MILLIS: i64 = 100;
pub const DEFAULT_MEMORY_BYTES: i64 = 200 * 1024 * 1024;

/// A pod's cpu and memory requests for scoring: Kubernetes' defaults where it has none.
pub fn non_zero_requests(requests: &Resources) -> (i64, i64) {
    let or = |v: i64, d: i64| if v == 0 { d } else { v };
    (or(requests.get(crate::resources::CPU), DEFAULT_CPU_MILLIS), or(requests.get(crate::resources::MEMORY), DEFAULT_MEMORY_BYTES))
}

impl NodeInfo {
    pub fn new(node: Arc<Node>) -> Self {
        let allocatable = Resources::from_map(node.status.as_ref().and_then(|s| s.allocatable.as_ref()));
        let name = node.metadata.name.clone().unwrap_or_default();
        Self { name, node, pods: Vec::new(), requested: Resources::default(), allocatable, host_ports: Vec::new(), non_zero_requested: (0, 0) }
    }

    pub fn add_pod(&mut self, pod: Arc<Pod>) {
        let requests = pod_requests(&pod);
        let (cpu, mem) = non_zero_requests(&requests);
        self.non_zero_requested.0 += cpu;
        self.non_zero_requested.1 += mem;
        self.requested.add(&requests);
        *self.requested.0.entry(PODS.into()).or_default() += 1;
        self.host_ports.extend(host_ports(&pod));
        self.pods.push(pod);
    }

    /// Removes the pod with `uid`; returns whether it was here.
    pub fn remove_pod(&mut self, uid: &str) -> bool {
        let before = self.pods.len();
        self.pods.retain(|p| p.metadata.uid.as_deref() != Some(uid));
        if self.pods.len() == before {
            return false;
        }
        let pods = std::mem::take(&mut self.pods);
        self.requested = Resources::default();
        self.host_ports.clear();
        self.non_zero_requested = (0, 0);
        for p in pods {
            self.add_pod(p);
        }
        true
    }

    pub fn labels(&self) -> &BTreeMap<String, String> {
        static NONE: BTreeMap<String, String> = BTreeMap::new();
        self.node.metadata.labels.as_ref().unwrap_or(&NONE)
    }
}

/// The host ports a pod asks for.
pub fn host_ports(pod: &Pod) -> Vec<HostPort> {
    let Some(spec) = pod.spec.as_ref() else { return Vec::new() };
    spec.containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let port = p.host_port.filter(|&h| h > 0)?;
            Some((p.protocol.clone().unwrap_or_else(|| "TCP".into()), p.host_ip.clone().unwrap_or_default(), port))
        })
        .collect()
}

/// A pod's `status.nominatedNodeName`, if set and not empty.
pub fn nominated_node_name(pod: &Pod) -> Option<&str> {
    pod.status.as_ref().and_then(|s| s.nominated_node_name.as_deref()).filter(|n| !n.is_empty())
}

/// Whether a pod holds node resources: assigned and not finished.
pub fn occupies_node(pod: &Pod) -> bool {
    let assigned = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty());
    let finished = matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"));
    assigned && !finished
}

/// Every node and its pods, and the namespaces' labels (for namespace selectors).
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub nodes: Vec<NodeInfo>,
    pub namespaces: BTreeMap<String, BTreeMap<String, String>>,
    /// Placed pods with required pod anti-affinity (they may repel the pod being
    /// scheduled), by node index: few in most clusters, so the check is cheap.
    pub repelling: Vec<(usize, Arc<Pod>)>,
    /// On how many nodes each image (as `status.images` names it) is present.
    pub image_spread: BTreeMap<String, usize>,
    /// Claims, volumes and classes (VolumeBinding).
    pub volumes: crate::plugins::volume::VolumeState,
    /// Pending pods nominated to a node (`status.nominatedNodeName`, or this scheduler's
    /// own nomination not yet seen in the watch), by node name.
    pub nominated: BTreeMap<String, Vec<Arc<Pod>>>,
    /// PodDisruptionBudgets (preemption prefers victims that violate none).
    pub pdbs: Vec<Arc<k8s_openapi::api::policy::v1::PodDisruptionBudget>>,
}

pub fn has_required_anti_affinity(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref())
        .is_some_and(|t| !t.is_empty())
}

impl Snapshot {
    /// From nodes and pods (pods not occupying a node are left out; `pods` may include
    /// assumed pods, with their node set).
    pub fn build(nodes: impl IntoIterator<Item = Arc<Node>>, pods: impl IntoIterator<Item = Arc<Pod>>) -> Self {
        let mut infos: Vec<NodeInfo> = nodes.into_iter().map(NodeInfo::new).collect();
        infos.sort_by(|a, b| a.name.cmp(&b.name));
        let index: BTreeMap<String, usize> = infos.iter().enumerate().map(|(i, n)| (n.name.clone(), i)).collect();
        let mut repelling = Vec::new();
        for pod in pods {
            if !occupies_node(&pod) {
                continue;
            }
            let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
            if let Some(&i) = index.get(&node) {
                if has_required_anti_affinity(&pod) {
                    repelling.push((i, pod.clone()));
                }
                infos[i].add_pod(pod);
            }
        }
        let mut image_spread: BTreeMap<String, usize> = BTreeMap::new();
        for n in &infos {
            for image in n.node.status.as_ref().and_then(|s| s.images.as_ref()).into_iter().flatten() {
                for name in image.names.iter().flatten() {
                    *image_spread.entry(crate::plugins::node::normalized_image(name)).or_default() += 1;
                }
            }
        }
        Self { nodes: infos, namespaces: BTreeMap::new(), repelling, image_spread, volumes: Default::default(), nominated: BTreeMap::new(), pdbs: Vec::new() }
    }

    /// With these pods nominated to their `status.nominatedNodeName`.
    pub fn with_nominated(mut self, pods: impl IntoIterator<Item = Arc<Pod>>) -> Self {
        for p in pods {
            if let Some(n) = nominated_node_name(&p) {
                self.nominated.entry(n.to_string()).or_default().push(p);
            }
        }
        self
    }

    /// With these PodDisruptionBudgets.
    pub fn with_pdbs(mut self, pdbs: Vec<Arc<k8s_openapi::api::policy::v1::PodDisruptionBudget>>) -> Self {
        self.pdbs = pdbs;
        self
    }

    /// The node `pod` is nominated to: its own `status.nominatedNodeName`, or the
    /// nomination recorded here for its uid.
    pub fn nominated_node_of(&self, pod: &Pod) -> Option<&str> {
        if let Some(n) = nominated_node_name(pod) {
            return self.nodes.iter().find(|i| i.name == n).map(|i| i.name.as_str());
        }
        let uid = pod.metadata.uid.as_deref()?;
        self.nominated.iter().find(|(_, ps)| ps.iter().any(|p| p.metadata.uid.as_deref() == Some(uid))).map(|(n, _)| n.as_str())
    }

    /// Places `pod` on node `index` (as [`NodeInfo::add_pod`], keeping `repelling`).
    pub fn add_to_node(&mut self, index: usize, pod: Arc<Pod>) {
        if has_required_anti_affinity(&pod) {
            self.repelling.push((index, pod.clone()));
        }
        self.nodes[index].add_pod(pod);
    }

    /// Takes the pod with `uid` off node `index`.
    pub fn remove_from_node(&mut self, index: usize, uid: &str) {
        if self.nodes[index].remove_pod(uid) {
            self.repelling.retain(|(_, p)| p.metadata.uid.as_deref() != Some(uid));
        }
    }

    /// With the cluster's claims, volumes and classes.
    pub fn with_volumes(mut self, volumes: crate::plugins::volume::VolumeState) -> Self {
        self.volumes = volumes;
        self
    }

    /// With the labels of every namespace.
    pub fn with_namespaces(mut self, namespaces: BTreeMap<String, BTreeMap<String, String>>) -> Self {
        self.namespaces = namespaces;
        self
    }

    pub fn node(&self, name: &str) -> Option<&NodeInfo> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// Every pod on any node.
    pub fn all_pods(&self) -> impl Iterator<Item = (&NodeInfo, &Arc<Pod>)> {
        self.nodes.iter().flat_map(|n| n.pods.iter().map(move |p| (n, p)))
    }
}
