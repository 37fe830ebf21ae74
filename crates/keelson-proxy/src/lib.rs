//! The service proxy of a node (kube-proxy's nftables mode): Services and EndpointSlices
//! from reflectors, rendered by the pure [`render::render`] into a [`render::Model`] of the
//! table, applied with `nft -f -` in one transaction whenever the model changes; bursts of
//! changes are coalesced into one sync. The first sync writes the whole table, as does a
//! resync every [`ProxyConfig::resync`] and the sync after any failed apply; every other
//! sync applies only [`diff::diff`] of the last applied model and the new one, so its cost
//! follows what changed, not the table's size. Its tables (`ip keelson-proxy`, and
//! `ip6 keelson-proxy` on a dual-stack node, both in each transaction) are the only ones it
//! touches, and they are removed when the proxy stops. After a sync, the conntrack
//! entries of UDP flows to endpoints the rules no longer allow are flushed.

pub mod diff;
pub mod healthcheck;
pub mod metrics;
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
    /// The whole table is written again this long after the last full sync, even without a
    /// change (repairing whatever else altered it).
    pub resync: Duration,
    /// Where syncs are counted and timed.
    pub metrics: metrics::ProxyMetrics,
}

/// The full resync period kube-proxy's nftables mode uses too.
pub const DEFAULT_RESYNC: Duration = Duration::from_secs(3600);

/// One sync's `nft -f` script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyncPlan {
    /// The whole table replaced.
    Full(String),
    /// Only what changed since the model the kernel holds.
    Incremental(String),
}

impl SyncPlan {
    pub fn script(&self) -> &str {
        match self {
            SyncPlan::Full(s) | SyncPlan::Incremental(s) => s,
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            SyncPlan::Full(_) => "full",
            SyncPlan::Incremental(_) => "incremental",
        }
    }
}

/// What to apply to bring the kernel from `applied` (the model it holds, None when unknown:
/// the first sync or after a failed one) to `next`: the whole table when the state is
/// unknown or `resync_due`, else the diff, or nothing when the models are equal.
pub fn plan(applied: Option<&[render::Model]>, next: &[render::Model], resync_due: bool) -> Option<SyncPlan> {
    let same_tables = |prev: &[render::Model]| prev.len() == next.len() && prev.iter().zip(next).all(|(a, b)| a.family == b.family);
    match applied {
        Some(prev) if !resync_due && same_tables(prev) => {
            let script: String = prev.iter().zip(next).map(|(a, b)| diff::diff(a, b)).collect();
            (!script.is_empty()).then_some(SyncPlan::Incremental(script))
        }
        _ => {
            // A family whose table is no longer kept (the node lost its IPv6 address) has
            // it removed in the same transaction.
            let dropped = render::Family::ALL.into_iter().filter(|f| applied.is_some_and(|p| p.iter().any(|m| m.family == *f)) && !next.iter().any(|m| m.family == *f));
            let script: String = dropped.map(render::delete_script).chain(next.iter().map(|m| render::replace_script(&m.table()))).collect();
            Some(SyncPlan::Full(script))
        }
    }
}

/// The families a node's proxy keeps a table of: IPv4, and IPv6 as well on a dual-stack
/// node (one with an IPv6 address or pod CIDR).
pub fn families(node: &NodeInfo) -> Vec<render::Family> {
    let dual = node.addresses.iter().any(std::net::IpAddr::is_ipv6) || node.pod_cidrs.iter().any(|c| c.contains(':'));
    if dual {
        render::Family::ALL.to_vec()
    } else {
        vec![render::Family::Ip]
    }
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
/// The model, the UDP flows it allows and the health check node ports it serves.
type Current = (Vec<render::Model>, BTreeSet<render::UdpFlow>, std::collections::BTreeMap<u16, healthcheck::HealthCheck>);

/// One render cache per table kept.
fn current(caches: &mut [render::RenderCache], services: &Store<Service>, slices: &Store<EndpointSlice>, node: &NodeInfo) -> Current {
    let svcs = services.state();
    let sls = slices.state();
    let model = caches.iter_mut().map(|cache| render::render_cached(cache, &svcs, &sls, node)).collect();
    let svcs: Vec<&Service> = svcs.iter().map(|s| s.as_ref()).collect();
    let sls: Vec<&EndpointSlice> = sls.iter().map(|s| s.as_ref()).collect();
    (model, render::udp_flows(&svcs, &sls, node), healthcheck::desired(&svcs, &sls, node))
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
    // The model the kernel holds; None when unknown (first sync, after a failed apply).
    let mut applied: Option<Vec<render::Model>> = None;
    let families = families(&cfg.node);
    let mut caches: Vec<render::RenderCache> = families.iter().map(|f| render::RenderCache::of(*f)).collect();
    let mut last_full = Instant::now();
    let mut flows: BTreeSet<render::UdpFlow> = BTreeSet::new();
    let mut conntrack_missing = false;
    let mut health = healthcheck::HealthServers::new(cfg.node.addresses.clone(), shutdown.clone());
    while !shutdown.is_cancelled() {
        if applied.is_some() {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep_until((last_full + cfg.resync).into()) => {}
                _ = changed.notified() => {
                    tokio::select! {
                        _ = shutdown.cancelled() => break,
                        _ = tokio::time::sleep(cfg.coalesce) => {}
                    }
                }
            }
        }
        let span = tracing::info_span!("proxy-sync", node = %cfg.node.name, trace_id = tracing::field::Empty);
        keelson_tracecontext::continue_trace(&span, None);
        let _enter = span.enter();
        let started = Instant::now();
        let (model, new_flows, checks) = current(&mut caches, &services, &slices, &cfg.node);
        let rendered = started.elapsed();
        let next = plan(applied.as_deref(), &model, last_full.elapsed() >= cfg.resync);
        drop(_enter);
        health.update(checks).await;
        let Some(sync) = next else {
            continue;
        };
        match nft::apply(sync.script()).await {
            Ok(()) => {
                let at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs_f64();
                cfg.metrics.synced(matches!(sync, SyncPlan::Full(_)), started.elapsed(), at);
                tracing::info!(node = %cfg.node.name, kind = sync.kind(), render_us = rendered.as_micros() as u64, sync_ms = started.elapsed().as_millis() as u64, bytes = sync.script().len(), "service rules synced");
                if let SyncPlan::Full(_) = sync {
                    last_full = Instant::now();
                }
                applied = Some(model);
                for (vip, port, ep) in flows.difference(&new_flows) {
                    if !nft::flush_udp(*vip, *port, *ep).await && !conntrack_missing {
                        conntrack_missing = true;
                        tracing::warn!("conntrack is missing: UDP flows to removed endpoints are not flushed");
                    }
                }
                flows = new_flows;
            }
            Err(e) => {
                // The kernel's table is no longer known for sure: the retry writes it whole.
                cfg.metrics.failed();
                tracing::warn!(error = %e, kind = sync.kind(), "service rules not applied; retrying with a full sync");
                applied = None;
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        }
    }
    svc_task.abort();
    slice_task.abort();
    let script: String = families.into_iter().map(render::delete_script).collect();
    nft::apply(&script).await.map_err(ProxyError::Cleanup)
}
