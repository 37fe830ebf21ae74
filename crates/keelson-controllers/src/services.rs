//! The reflectors and work queues of the service controllers (EndpointSlice, Endpoints,
//! the built-in service load balancer, the built-in ingress' own Service and the status
//! of its Ingresses), apart from the workload ones: a Service goes to itself, a pod to
//! every Service of its namespace, a slice or Endpoints object to the Service it is
//! named for, a Node to every Service (zones) and the ingress Service; an Ingress to
//! itself, an IngressClass or the ingress Service to every Ingress. One term runs them
//! until it ends, and creates the built-in Services (kube-dns, keelson-ingress) when
//! they are missing.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use keelson_component::events::EventRecorder;
use keelson_component::Leadership;
use kube::api::Api;
use kube::runtime::reflector::Store;

use crate::endpointslice::reconcile::SERVICE_NAME_LABEL;
use crate::informers::key_of;
use crate::work::{named_queue, WorkQueue};

/// What the service controllers of one term share.
pub struct ServiceCtx {
    pub term: Leadership,
    pub services: Store<Service>,
    pub pods: Store<Pod>,
    pub nodes: Store<Node>,
    pub slices: Store<EndpointSlice>,
    pub endpoints: Store<Endpoints>,
    pub slice_queue: WorkQueue,
    pub endpoints_queue: WorkQueue,
    pub lb_queue: WorkQueue,
    pub slice_events: EventRecorder,
    pub ingresses: Store<Ingress>,
    pub ingress_classes: Store<IngressClass>,
    pub ingress_queue: WorkQueue,
    pub ingress_service_queue: WorkQueue,
}

impl ServiceCtx {
    /// The zone of every node that has one.
    pub fn zones(&self) -> BTreeMap<String, String> {
        self.nodes
            .state()
            .iter()
            .filter_map(|n| Some((n.metadata.name.clone()?, n.metadata.labels.as_ref()?.get(crate::endpointslice::reconcile::ZONE_LABEL)?.clone())))
            .collect()
    }

    /// The pods of namespace `ns`.
    pub fn pods_in(&self, ns: &str) -> Vec<Arc<Pod>> {
        self.pods.state().into_iter().filter(|p| p.metadata.namespace.as_deref() == Some(ns)).collect()
    }
}

/// Queues the Service of namespace `ns` that an object is for.
fn both(sq: &WorkQueue, eq: &WorkQueue, key: &str) {
    sq.add(key);
    eq.add(key);
}

/// Runs the service controllers until the term ends.
pub async fn run(term: Leadership, reflectors: Arc<crate::shared_reflectors::SharedReflectors>) {
    let client = term.client.clone();
    let (slice_queue, slice_rx) = named_queue(&term, "endpoint_slice");
    let (endpoints_queue, endpoints_rx) = named_queue(&term, "endpoint");
    let (lb_queue, lb_rx) = named_queue(&term, "service");
    let (ingress_queue, ingress_rx) = named_queue(&term, "ingress_status");
    let (ingress_service_queue, ingress_service_rx) = named_queue(&term, "ingress_service");
    let ingresses = {
        let iq = ingress_queue.clone();
        reflectors.watch(move |i: &Ingress| iq.add(&key_of(i)))
    };
    let every_ingress = {
        let (iq, ings) = (ingress_queue.clone(), ingresses.clone());
        move || ings.state().iter().for_each(|i| iq.add(&key_of(i.as_ref())))
    };
    let ingress_classes = {
        let every = every_ingress.clone();
        reflectors.watch(move |_: &IngressClass| every())
    };
    let services = {
        let (sq, eq, lq, isq) = (slice_queue.clone(), endpoints_queue.clone(), lb_queue.clone(), ingress_service_queue.clone());
        let every = every_ingress.clone();
        reflectors.watch(move |s: &Service| {
            let key = key_of(s);
            both(&sq, &eq, &key);
            lq.add(&key);
            if key == crate::ingressservice::key() {
                isq.add(&key);
                every();
            }
        })
    };
    let pods = {
        let (sq, eq) = (slice_queue.clone(), endpoints_queue.clone());
        let svcs = services.clone();
        reflectors.watch(move |p: &Pod| {
            let ns = p.metadata.namespace.as_deref();
            for s in svcs.state().iter().filter(|s| s.metadata.namespace.as_deref() == ns) {
                both(&sq, &eq, &key_of(s.as_ref()));
            }
        })
    };
    let nodes = {
        let (sq, lq, isq) = (slice_queue.clone(), lb_queue.clone(), ingress_service_queue.clone());
        let svcs = services.clone();
        reflectors.watch(move |_: &Node| {
            for s in svcs.state() {
                sq.add(&key_of(s.as_ref()));
                lq.add(&key_of(s.as_ref()));
            }
            isq.add(&crate::ingressservice::key());
        })
    };
    let slices = {
        let (sq, lq, isq) = (slice_queue.clone(), lb_queue.clone(), ingress_service_queue.clone());
        reflectors.watch(move |s: &EndpointSlice| {
            if let Some(svc) = s.metadata.labels.as_ref().and_then(|l| l.get(SERVICE_NAME_LABEL)) {
                let key = format!("{}/{svc}", s.metadata.namespace.as_deref().unwrap_or("default"));
                sq.add(&key);
                lq.add(&key);
                if key == crate::ingressservice::key() {
                    isq.add(&key);
                }
            }
        })
    };
    let endpoints = {
        let eq = endpoints_queue.clone();
        reflectors.watch(move |e: &Endpoints| eq.add(&key_of(e)))
    };
    let ctx = Arc::new(ServiceCtx {
        slice_events: EventRecorder::new(client.clone(), "endpointslice-controller", &term.identity),
        term: term.clone(),
        services,
        pods,
        nodes,
        slices,
        endpoints,
        slice_queue,
        endpoints_queue,
        lb_queue,
        ingresses,
        ingress_classes,
        ingress_queue,
        ingress_service_queue,
    });
    // Every mirror this group asked for (and any other group's so far) has listed.
    let ready = reflectors.listed();
    tokio::select! {
        _ = term.ended.cancelled() => {}
        _ = async {
            ready.await;
            tracing::info!("service controllers active");
            tokio::join!(
                crate::informers::work(&ctx, slice_rx, &ctx.slice_queue, "endpointslice", crate::endpointslice::sync),
                crate::informers::work(&ctx, endpoints_rx, &ctx.endpoints_queue, "endpoints", crate::endpoints::sync),
                crate::informers::work(&ctx, lb_rx, &ctx.lb_queue, "servicelb", crate::servicelb::sync),
                crate::informers::work(&ctx, ingress_rx, &ctx.ingress_queue, "ingressstatus", crate::ingressstatus::sync),
                crate::informers::work(&ctx, ingress_service_rx, &ctx.ingress_service_queue, "ingressservice", crate::ingressservice::sync),
                ensure_service(&ctx, kube_dns_service()),
                ensure_service(&ctx, crate::ingressservice::service()),
            );
        } => {}
    }
}

/// The cluster DNS address pods are given (`--cluster-dns`'s default).
pub const KUBE_DNS_IP: &str = "10.43.0.10";

/// The `kube-system/kube-dns` Service: a fixed ClusterIP and no selector (no pods serve
/// it: every node's proxy sends it to that node's own DNS server).
pub fn kube_dns_service() -> Service {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "kube-dns", "namespace": "kube-system", "labels": {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS", "kubernetes.io/cluster-service": "true"}},
        "spec": {"type": "ClusterIP", "clusterIP": KUBE_DNS_IP, "ports": [
            {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
            {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
        ]},
    }))
    .expect("the kube-dns Service")
}

/// Creates a built-in Service once per term when it is missing (one a user changed is
/// left as it is).
async fn ensure_service(ctx: &ServiceCtx, svc: Service) {
    let (ns, name) = (svc.metadata.namespace.clone().unwrap_or_default(), svc.metadata.name.clone().unwrap_or_default());
    loop {
        if ctx.services.get(&kube::runtime::reflector::ObjectRef::new(&name).within(&ns)).is_some() {
            return;
        }
        let api: Api<Service> = Api::namespaced(ctx.term.client.clone(), &ns);
        match api.create(&kube::api::PostParams::default(), &svc).await {
            Ok(_) => {
                tracing::info!(service = %format!("{ns}/{name}"), "created a built-in Service");
                return;
            }
            Err(kube::Error::Api(s)) if s.code == 409 => return,
            Err(e) => tracing::info!(error = %e, service = %format!("{ns}/{name}"), "creating a built-in Service; retrying"),
        }
        tokio::select! {
            _ = ctx.term.ended.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
        }
    }
}

impl crate::informers::TermContext for ServiceCtx {
    fn term(&self) -> &Leadership {
        &self.term
    }
}
