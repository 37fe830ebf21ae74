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
}

impl NodeInfo {
    pub fn new(node: Arc<Node>) -> Self {
        let allocatable = Resources::from_map(node.status.as_ref().and_then(|s| s.allocatable.as_ref()));
        let name = node.metadata.name.clone().unwrap_or_default();
        Self { name, node, pods: Vec::new(), requested: Resources::default(), allocatable, host_ports: Vec::new() }
    }

    pub fn add_pod(&mut self, pod: Arc<Pod>) {
        self.requested.add(&pod_requests(&pod));
        *self.requested.0.entry(PODS.into()).or_default() += 1;
        self.host_ports.extend(host_ports(&pod));
        self.pods.push(pod);
    }

    pub fn labels(&self) -> BTreeMap<String, String> {
        self.node.metadata.labels.clone().unwrap_or_default()
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
}

impl Snapshot {
    /// From nodes and pods (pods not occupying a node are left out; `pods` may include
    /// assumed pods, with their node set).
    pub fn build(nodes: impl IntoIterator<Item = Arc<Node>>, pods: impl IntoIterator<Item = Arc<Pod>>) -> Self {
        let mut infos: Vec<NodeInfo> = nodes.into_iter().map(NodeInfo::new).collect();
        infos.sort_by(|a, b| a.name.cmp(&b.name));
        let index: BTreeMap<String, usize> = infos.iter().enumerate().map(|(i, n)| (n.name.clone(), i)).collect();
        for pod in pods {
            if !occupies_node(&pod) {
                continue;
            }
            let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
            if let Some(&i) = index.get(&node) {
                infos[i].add_pod(pod);
            }
        }
        Self { nodes: infos, namespaces: BTreeMap::new() }
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
