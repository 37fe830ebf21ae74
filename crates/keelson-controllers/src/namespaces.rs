//! The reflectors and work queues of the namespace controllers (namespace deletion, the
//! `default` ServiceAccount, the `kube-root-ca.crt` ConfigMap): a Namespace goes to all
//! three, the `default` ServiceAccount and the root CA ConfigMap of a namespace to their
//! own controller. One term runs them until it ends.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use keelson_component::Leadership;
use kube::api::Api;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;

use crate::rootcacert::ROOT_CA_CONFIGMAP;
use crate::serviceaccount::DEFAULT_SERVICE_ACCOUNT;
use crate::work::{named_queue, WorkQueue};

/// What the namespace controllers of one term share. Queue keys are namespace names.
pub struct NamespaceCtx {
    pub term: Leadership,
    pub namespaces: Store<Namespace>,
    /// Only the `default` ServiceAccount of each namespace.
    pub default_accounts: Store<ServiceAccount>,
    /// Only the `kube-root-ca.crt` ConfigMap of each namespace.
    pub root_ca_maps: Store<ConfigMap>,
    pub namespace_queue: WorkQueue,
    pub account_queue: WorkQueue,
    pub root_ca_queue: WorkQueue,
    /// The cluster CA certificate (PEM) that `kube-root-ca.crt` publishes.
    pub root_ca_pem: String,
    /// The namespaced resources the namespace controller sweeps, from the term's last
    /// discovery (see [`crate::namespace::SweptResources`]).
    pub swept: crate::namespace::SweptResources,
}

impl crate::informers::TermContext for NamespaceCtx {
    fn term(&self) -> &Leadership {
        &self.term
    }
}

fn named(name: &str) -> watcher::Config {
    watcher::Config::default().fields(&format!("metadata.name={name}"))
}

/// Runs the namespace controllers until the term ends.
pub async fn run(term: Leadership, root_ca_pem: String) {
    let client = term.client.clone();
    let (namespace_queue, namespace_rx) = named_queue(&term, "namespace");
    let (account_queue, account_rx) = named_queue(&term, "serviceaccount");
    let (root_ca_queue, root_ca_rx) = named_queue(&term, "root_ca_cert_publisher");
    let (namespaces, namespace_task) = {
        let (nq, aq, cq) = (namespace_queue.clone(), account_queue.clone(), root_ca_queue.clone());
        crate::informers::reflect_selected(Api::<Namespace>::all(client.clone()), watcher::Config::default(), term.denials.clone(), move |ns: &Namespace| {
            let name = ns.metadata.name.as_deref().unwrap_or("");
            nq.add(name);
            aq.add(name);
            cq.add(name);
        })
    };
    let (default_accounts, account_task) = {
        let aq = account_queue.clone();
        crate::informers::reflect_selected(Api::<ServiceAccount>::all(client.clone()), named(DEFAULT_SERVICE_ACCOUNT), term.denials.clone(), move |sa: &ServiceAccount| {
            aq.add(sa.metadata.namespace.as_deref().unwrap_or(""))
        })
    };
    let (root_ca_maps, root_ca_task) = {
        let cq = root_ca_queue.clone();
        crate::informers::reflect_selected(Api::<ConfigMap>::all(client.clone()), named(ROOT_CA_CONFIGMAP), term.denials.clone(), move |cm: &ConfigMap| {
            cq.add(cm.metadata.namespace.as_deref().unwrap_or(""))
        })
    };
    let ctx = Arc::new(NamespaceCtx { term: term.clone(), namespaces, default_accounts, root_ca_maps, namespace_queue, account_queue, root_ca_queue, root_ca_pem, swept: Default::default() });
    let ready = async {
        let _ = ctx.namespaces.wait_until_ready().await;
        let _ = ctx.default_accounts.wait_until_ready().await;
        let _ = ctx.root_ca_maps.wait_until_ready().await;
    };
    tokio::select! {
        _ = term.ended.cancelled() => {}
        _ = async {
            ready.await;
            tracing::info!("namespace controllers active");
            tokio::join!(
                crate::informers::work(&ctx, namespace_rx, &ctx.namespace_queue, "namespace", crate::namespace::sync),
                crate::informers::work(&ctx, account_rx, &ctx.account_queue, "serviceaccount", crate::serviceaccount::sync),
                crate::informers::work(&ctx, root_ca_rx, &ctx.root_ca_queue, "root-ca-cert-publisher", crate::rootcacert::sync),
            );
        } => {}
    }
    for t in [namespace_task, account_task, root_ca_task] {
        t.abort();
    }
}
