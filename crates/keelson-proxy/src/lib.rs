//! The service proxy of a node (kube-proxy's nftables mode): Services and EndpointSlices
//! from reflectors, rendered as one table by the pure [`render::render`], applied with
//! `nft -f -` in one transaction whenever the rendered text changes; bursts of changes
//! are coalesced into one sync. The table (`ip keelson-proxy`) is the only one it
//! touches, and it is removed when the proxy stops. After a sync, the conntrack entries
//! of UDP flows to endpoints the rules no longer allow are flushed.

pub mod nft;
pub mod render;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::runtime::reflector::Store;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

pub use render::NodeInfo;

/// How a proxy runs.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    pub node: NodeInfo,
    /// Changes arriving within this window after the first are synced together.
    pub coalesce: Duration,
}

/// The proxy stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The table could not be removed at shutdown.
    #[error("removing the proxy's table: {0}")]
    Cleanup(#[source] nft::NftError),
}

fn reflect<K>(api: Api<K>, changed: Arc<Notify>) -> (Store<K>, tokio::task::JoinHandle<()>)
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    keelson_component::mirror::notifying_reflector(api, changed, "proxy")
}

/// Renders what the stores hold now, with the UDP flows the rules allow.
fn current(services: &Store<Service>, slices: &Store<EndpointSlice>, node: &NodeInfo) -> (String, BTreeSet<render::UdpFlow>) {
    let svcs = services.state();
    let sls = slices.state();
    let svcs: Vec<&Service> = svcs.iter().map(|s| s.as_ref()).collect();
    let sls: Vec<&EndpointSlice> = sls.iter().map(|s| s.as_ref()).collect();
    (render::render(&svcs, &sls, node), render::udp_flows(&svcs, &sls, node))
}

/// Runs the proxy until `shutdown`, then removes its table.
pub async fn run(client: kube::Client, cfg: ProxyConfig, shutdown: CancellationToken) -> Result<(), ProxyError> {
    let changed = Arc::new(Notify::new());
    let (services, svc_task) = reflect(Api::<Service>::all(client.clone()), changed.clone());
    let (slices, slice_task) = reflect(Api::<EndpointSlice>::all(client), changed.clone());
    let ready = async {
        let _ = services.wait_until_ready().await;
        let _ = slices.wait_until_ready().await;
    };
    tokio::select! {
        _ = shutdown.cancelled() => {}
        _ = ready => {}
    }
    let mut applied: Option<String> = None;
    let mut flows: BTreeSet<render::UdpFlow> = BTreeSet::new();
    let mut conntrack_missing = false;
    while !shutdown.is_cancelled() {
        if applied.is_some() {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = changed.notified() => {}
            }
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(cfg.coalesce) => {}
            }
        }
        let span = tracing::info_span!("proxy-sync", node = %cfg.node.name);
        let _enter = span.enter();
        let started = Instant::now();
        let (table, new_flows) = current(&services, &slices, &cfg.node);
        let rendered = started.elapsed();
        if applied.as_deref() == Some(table.as_str()) {
            continue;
        }
        drop(_enter);
        match nft::apply(&render::replace_script(&table)).await {
            Ok(()) => {
                tracing::info!(node = %cfg.node.name, render_us = rendered.as_micros() as u64, sync_ms = started.elapsed().as_millis() as u64, bytes = table.len(), "service rules synced");
                applied = Some(table);
                for (vip, port, ep) in flows.difference(&new_flows) {
                    if !nft::flush_udp(*vip, *port, *ep).await && !conntrack_missing {
                        conntrack_missing = true;
                        tracing::warn!("conntrack is missing: UDP flows to removed endpoints are not flushed");
                    }
                }
                flows = new_flows;
            }
            Err(e) => {
                tracing::warn!(error = %e, "service rules not applied; retrying");
                changed.notify_one();
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
                // A first failure leaves `applied` unset: keep retrying without waiting
                // for a change.
                if applied.is_none() {
                    continue;
                }
            }
        }
    }
    svc_task.abort();
    slice_task.abort();
    nft::apply(&render::delete_script()).await.map_err(ProxyError::Cleanup)
}
