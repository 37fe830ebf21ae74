//! What the node controllers of a term share: the term's mirrors of Nodes and pods, a
//! reflector of the node Leases in `kube-node-lease`, and wake-ups on Node changes for the
//! controllers that act on them at once (IPAM, taint eviction); the lifecycle controller
//! looks at every Node each monitor period, as Kubernetes' does, and the pod garbage
//! collector every 20 s.

use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use keelson_component::Leadership;
use kube::api::Api;
use kube::runtime::reflector::Store;
use tokio::sync::Notify;

use crate::informers::reflect;
use crate::shared_reflectors::SharedReflectors;
use crate::ControllerConfig;

/// The namespace of node heartbeat Leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

pub(crate) struct NodeInformers {
    pub term: Leadership,
    pub nodes: Store<Node>,
    pub leases: Store<Lease>,
    pub pods: Store<Pod>,
    pub ipam_wake: Arc<Notify>,
    pub eviction_wake: Arc<Notify>,
}

/// Runs the node controllers until the term ends.
pub(crate) async fn run(term: Leadership, reflectors: Arc<SharedReflectors>, config: ControllerConfig) {
    let pods = reflectors.store::<Pod>();
    let client = term.client.clone();
    let (ipam_wake, eviction_wake) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let nodes = {
        let (a, b) = (ipam_wake.clone(), eviction_wake.clone());
        reflectors.watch(move |_: &Node| {
            a.notify_one();
            b.notify_one();
        })
    };
    let (leases, lease_task) = reflect(Api::<Lease>::namespaced(client, NODE_LEASE_NAMESPACE), term.denials.clone(), |_: &Lease| {});
    let informers = Arc::new(NodeInformers { term: term.clone(), nodes, leases, pods, ipam_wake, eviction_wake });
    tokio::select! {
        _ = term.ended.cancelled() => {}
        _ = async {
            reflectors.listed().await;
            let _ = informers.leases.wait_until_ready().await;
            tokio::join!(
                crate::nodeipam::run(informers.clone(), config.node_ipam),
                crate::nodelifecycle::run(informers.clone(), config.node_lifecycle.clone()),
                crate::tainteviction::run(informers.clone()),
                crate::podgc::run(informers.clone()),
            );
        } => {}
    }
    lease_task.abort();
}
