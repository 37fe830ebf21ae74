//! The agent of one real node: it registers the Node, reports its status every 10 s,
//! renews its Lease in `kube-node-lease` every 10 s, routes to other nodes' pods, and runs
//! one [`crate::pod::worker`] per pod bound to it (a pod with `spec.nodeName` set is all
//! it needs). On start it adopts what the runtime already runs for those pods and removes
//! what belongs to pods that no longer exist.

pub mod machine;
mod node;

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::watcher::{self, watcher};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::pod::worker::{self, PodContext};
use crate::runtime::Runtime;

pub use node::{NodeError, NodeReporter};

/// How an agent runs.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    pub node_name: String,
    pub node_ip: Ipv4Addr,
    /// The node's IPv6 address on a dual-stack node (its second InternalIP): the proxy
    /// serves NodePorts on it and other nodes route to its IPv6 pods through it.
    pub node_ip6: Option<std::net::Ipv6Addr>,
    pub data_dir: PathBuf,
    pub max_pods: u32,
    /// Node status and Lease renewal period (the kubelet's: 10 s).
    pub heartbeat: Duration,
    /// The podCIDR to use when the Node gets none from the controller manager.
    pub pod_cidr: Option<String>,
    pub dns_servers: Vec<String>,
    /// Add `ip route`s to other nodes' podCIDRs.
    pub manage_routes: bool,
    /// Stop every pod when the agent stops (as a machine powering off would).
    pub stop_pods_on_exit: bool,
    /// Whether the CNI `portmap` plugin (hostPort) can be used.
    pub with_portmap: bool,
    /// The kubelet API port (10250; 0 picks a free one) on the node's address.
    pub kubelet_port: u16,
    /// The cluster CA (PEM) whose client certificates the kubelet API accepts.
    pub ca_pem: String,
    /// Below these the node reports memory or disk pressure.
    pub eviction: machine::EvictionThresholds,
    /// The ingress controller's HTTP and HTTPS ports on the node's address (80 and 443;
    /// 0 leaves that one off).
    pub ingress_http_port: u16,
    pub ingress_https_port: u16,
    /// Run the node's service proxy, cluster DNS server and ingress controller (off for
    /// a simulated node: its pods have no network to serve).
    pub node_services: bool,
    /// A deliberate bug, for proving that the self-heal checker catches it (`keelson agent
    /// --inject-bug`; never set otherwise).
    pub injected_bug: Option<InjectedBug>,
}

impl AgentConfig {
    /// The ingress' HTTP and HTTPS ports this node serves: none on a node without node
    /// services, and none for a port set to 0.
    pub fn ingress_ports(&self) -> (Option<u16>, Option<u16>) {
        let served = |p: u16| (self.node_services && p != 0).then_some(p);
        (served(self.ingress_http_port), served(self.ingress_https_port))
    }
}

/// Bugs the agent can be told to have, so a test can show the self-heal checker catches
/// them. Each is a behaviour the agent once had or a plausible mistake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InjectedBug {
    /// A pod's status is written only when it differs (transition times aside) from what
    /// the agent last wrote, never when the API's copy was changed behind the agent's back
    /// (the node lifecycle controller marking Ready False on a node it stopped hearing
    /// from): such a pod stays not Ready after its node comes back.
    StalePodStatus,
}

struct PodWorker {
    tx: watch::Sender<Pod>,
    removed: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

/// Runs the agent until `shutdown`.
pub async fn run(client: kube::Client, runtime: Arc<dyn Runtime>, cfg: AgentConfig, shutdown: CancellationToken) -> Result<(), NodeError> {
    let logs_dir = cfg.data_dir.join("logs/pods");
    let listen = std::net::SocketAddr::new(cfg.node_ip.into(), cfg.kubelet_port);
    let stats = crate::stats::StatsCollector::new(&cfg.node_name, cfg.data_dir.clone(), runtime.clone());
    let stats_task = stats.spawn(shutdown.clone());
    let metrics = crate::metrics::AgentMetrics::default();
    let served = crate::kubelet_api::Served { stats, metrics: metrics.clone() };
    let kubelet = crate::kubelet_api::serve(listen, client.clone(), runtime.clone(), served, &cfg.node_name, &cfg.node_ip.to_string(), &cfg.ca_pem, &logs_dir, shutdown.clone())
        .await
        .map_err(NodeError::KubeletApi)?;
    let mut cfg = cfg;
    cfg.kubelet_port = kubelet.port();
    let reporter = NodeReporter::new(client.clone(), runtime.clone(), cfg.clone());
    // As the kubelet: a registration the API refuses (a server still bootstrapping its
    // roles, a moment without a leader) is tried again, backing off to 7 s, until it
    // takes or the agent is stopped.
    let mut backoff = Duration::from_millis(200);
    loop {
        match reporter.register().await {
            Ok(()) => break,
            Err(e) => {
                tracing::warn!(error = %e, retry_in = ?backoff, "unable to register the node with the API server; will retry");
                tokio::select! {
                    _ = shutdown.cancelled() => return Err(e),
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(7));
            }
        }
    }
    let pod_cidr = reporter.wait_pod_cidr(&shutdown).await?;
    if let Some(cidr) = &pod_cidr {
        reporter.write_cni_config(cidr)?;
        if let Err(e) = runtime.update_runtime_config(cidr).await {
            tracing::warn!(error = %e, pod_cidr = %cidr, "the runtime refused the node's pod CIDR");
        }
    }
    let node_tasks = reporter.spawn(shutdown.clone());
    let mut services = if cfg.node_services { spawn_services(&client, &cfg, pod_cidr.as_deref(), &metrics, &shutdown) } else { Vec::new() };
    services.push(tokio::spawn(crate::local_path::reclaim(client.clone(), vec![(cfg.node_name.clone(), crate::local_path::storage_dir(&cfg.data_dir))], false, shutdown.clone())));
    let ctx = Arc::new(PodContext {
        events: keelson_component::events::EventRecorder::new(client.clone(), "kubelet", &cfg.node_name),
        client: client.clone(),
        runtime: runtime.clone(),
        node_name: cfg.node_name.clone(),
        host_ip: cfg.node_ip.to_string(),
        host_ip6: cfg.node_ip6.map(|ip| ip.to_string()),
        pods_dir: cfg.data_dir.join("pods"),
        logs_dir,
        dns_servers: cfg.dns_servers.clone(),
        host_dns: crate::pod::dns::parse_resolv_conf(&std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default()),
        tokens: Default::default(),
        injected_bug: cfg.injected_bug,
        metrics,
    });
    serve_pods(ctx.clone(), &cfg.node_name, shutdown.clone()).await;
    if cfg.stop_pods_on_exit {
        stop_everything(runtime.as_ref()).await;
        let pods_dir = cfg.data_dir.join("pods");
        crate::pod::volumes::unmount_under(&pods_dir);
        let _ = std::fs::remove_dir_all(&pods_dir);
    }
    for t in node_tasks {
        t.abort();
    }
    stats_task.abort();
    for t in services {
        let _ = t.await;
    }
    Ok(())
}

/// The node's service proxy, cluster DNS server and ingress controller, each a task
/// stopping with `shutdown` (the proxy removes its nftables table as it stops). DNS
/// listens on port 53 of the node's address, where the proxy sends the kube-dns Service;
/// the ingress on the node's HTTP and HTTPS ports.
fn spawn_services(client: &kube::Client, cfg: &AgentConfig, pod_cidr: Option<&str>, metrics: &crate::metrics::AgentMetrics, shutdown: &CancellationToken) -> Vec<tokio::task::JoinHandle<()>> {
    let node = keelson_proxy::NodeInfo {
        name: cfg.node_name.clone(),
        addresses: std::iter::once(std::net::IpAddr::V4(cfg.node_ip)).chain(cfg.node_ip6.map(std::net::IpAddr::V6)).collect(),
        pod_cidrs: pod_cidr.map(crate::cni::split_pod_cidrs).unwrap_or_default().into_iter().map(str::to_string).collect(),
        dns: Some(cfg.node_ip),
    };
    let mut proxy_metrics = None;
    metrics.register(|r| proxy_metrics = Some(keelson_proxy::metrics::ProxyMetrics::new(r)));
    let metrics = proxy_metrics.expect("registered");
    let proxy_cfg = keelson_proxy::ProxyConfig { node, coalesce: Duration::from_millis(50), resync: keelson_proxy::DEFAULT_RESYNC, metrics };
    let (c, s) = (client.clone(), shutdown.clone());
    let proxy = tokio::spawn(async move {
        if let Err(e) = keelson_proxy::run(c, proxy_cfg, s).await {
            tracing::warn!(error = %e, "service proxy");
        }
    });
    let resolv = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    let own: Vec<std::net::IpAddr> = cfg.dns_servers.iter().filter_map(|s| s.parse().ok()).chain([std::net::IpAddr::V4(cfg.node_ip)]).collect();
    let dns_cfg = keelson_dns::DnsConfig {
        listen: std::net::SocketAddr::new(cfg.node_ip.into(), 53),
        domain: "cluster.local".into(),
        upstreams: keelson_dns::upstreams_from_resolv_conf(&resolv, &own),
    };
    let (c, s) = (client.clone(), shutdown.clone());
    let dns = tokio::spawn(async move {
        if let Err(e) = keelson_dns::run(c, dns_cfg, s).await {
            tracing::warn!(error = %e, "cluster DNS not served");
        }
    });
    let (http, https) = cfg.ingress_ports();
    let on_node = |p: u16| std::net::SocketAddr::new(cfg.node_ip.into(), p);
    let ingress_cfg = keelson_ingress::IngressConfig {
        http: http.map(on_node),
        https: https.map(on_node),
        class: keelson_ingress::CLASS.into(),
        instance: cfg.node_name.clone(),
    };
    let (c, s, node_name) = (client.clone(), shutdown.clone(), cfg.node_name.clone());
    let ingress = tokio::spawn(async move {
        if ingress_cfg.http.is_none() && ingress_cfg.https.is_none() {
            return;
        }
        let (bound, task) = match keelson_ingress::start(c.clone(), ingress_cfg, s.clone()).await {
            Ok(started) => started,
            Err(e) => {
                tracing::warn!(error = %e, "ingress not served");
                return;
            }
        };
        // The Node says which ports serve only once they are bound (the ingress Service's
        // endpoints follow it), and stops saying so when the ingress stops.
        let port = |a: Option<std::net::SocketAddr>| a.map(|a| a.port());
        let announced = async {
            let mut backoff = Duration::from_millis(500);
            while let Err(e) = node::announce_ingress(&c, &node_name, port(bound.http), port(bound.https)).await {
                tracing::info!(error = %e, retry_in = ?backoff, "announcing the ingress ports on the Node; will retry");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(7));
            }
        };
        tokio::select! {
            _ = s.cancelled() => {}
            _ = announced => {}
        }
        let _ = task.await;
        if let Ok(Err(e)) = tokio::time::timeout(Duration::from_secs(2), node::announce_ingress(&c, &node_name, None, None)).await {
            tracing::info!(error = %e, "removing the ingress ports from the Node");
        }
    });
    vec![proxy, dns, ingress]
}

/// Stops and removes every sandbox and container the runtime has.
pub async fn stop_everything(runtime: &dyn Runtime) {
    if let Ok(containers) = runtime.list_containers().await {
        futures::future::join_all(containers.iter().map(|c| async move {
            let _ = runtime.stop_container(&c.id, Duration::from_secs(2)).await;
            let _ = runtime.remove_container(&c.id).await;
        }))
        .await;
    }
    if let Ok(sandboxes) = runtime.list_sandboxes().await {
        futures::future::join_all(sandboxes.iter().map(|s| async move {
            let _ = runtime.stop_sandbox(&s.id).await;
            let _ = runtime.remove_sandbox(&s.id).await;
        }))
        .await;
    }
    tracing::info!("every pod of this node stopped");
}

/// Watches the pods bound to `node` and keeps one worker per pod.
async fn serve_pods(ctx: Arc<PodContext>, node: &str, shutdown: CancellationToken) {
    let pods: Api<Pod> = Api::all(ctx.client.clone());
    let cfg = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
    let stream = watcher(pods, cfg);
    futures::pin_mut!(stream);
    let mut workers: HashMap<String, PodWorker> = HashMap::new();
    let mut listed: Option<HashSet<String>> = None;
    loop {
        let ev = tokio::select! {
            _ = shutdown.cancelled() => break,
            ev = stream.next() => match ev { Some(ev) => ev, None => break },
        };
        match ev {
            Ok(watcher::Event::Init) => listed = Some(HashSet::new()),
            Ok(watcher::Event::InitApply(p)) => {
                if let (Some(set), Some(uid)) = (listed.as_mut(), p.metadata.uid.clone()) {
                    set.insert(uid);
                }
                dispatch(&ctx, &mut workers, p, &shutdown);
            }
            Ok(watcher::Event::InitDone) => {
                let known = listed.take().unwrap_or_default();
                for (uid, w) in workers.iter() {
                    if !known.contains(uid) {
                        w.removed.cancel();
                    }
                }
                remove_orphans(&ctx, &known).await;
            }
            Ok(watcher::Event::Apply(p)) => dispatch(&ctx, &mut workers, p, &shutdown),
            Ok(watcher::Event::Delete(p)) => {
                if let Some(w) = p.metadata.uid.as_ref().and_then(|u| workers.get(u)) {
                    let _ = w.tx.send(p.clone());
                    w.removed.cancel();
                }
            }
            Err(e) => {
                tracing::info!(error = %e, "pod watch; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        workers.retain(|_, w| !w.task.is_finished());
    }
    // Workers stop at their next await; one stuck on an unreachable API is cut off.
    let tasks: Vec<_> = workers.into_values().map(|w| w.task).collect();
    let aborts: Vec<_> = tasks.iter().map(|t| t.abort_handle()).collect();
    if tokio::time::timeout(Duration::from_secs(5), futures::future::join_all(tasks)).await.is_err() {
        aborts.iter().for_each(|a| a.abort());
    }
}

fn dispatch(ctx: &Arc<PodContext>, workers: &mut HashMap<String, PodWorker>, pod: Pod, shutdown: &CancellationToken) {
    let Some(uid) = pod.metadata.uid.clone() else { return };
    if let Some(w) = workers.get(&uid) {
        let _ = w.tx.send(pod);
        return;
    }
    let (tx, rx) = watch::channel(pod);
    let removed = CancellationToken::new();
    let task = tokio::spawn(worker::run(ctx.clone(), rx, removed.clone(), shutdown.clone()));
    workers.insert(uid, PodWorker { tx, removed, task });
}

/// Removes sandboxes and containers whose pod is not bound here any more (deleted
/// while the agent was down).
async fn remove_orphans(ctx: &PodContext, known: &HashSet<String>) {
    let rt = ctx.runtime.as_ref();
    let Ok(sandboxes) = rt.list_sandboxes().await else { return };
    let containers = rt.list_containers().await.unwrap_or_default();
    for s in sandboxes.iter().filter(|s| !known.contains(&s.uid)) {
        tracing::info!(sandbox = %s.id, pod_uid = %s.uid, "removing the sandbox of a pod that no longer exists");
        for c in containers.iter().filter(|c| c.sandbox_id == s.id) {
            let _ = rt.stop_container(&c.id, Duration::from_secs(2)).await;
            let _ = rt.remove_container(&c.id).await;
        }
        let _ = rt.stop_sandbox(&s.id).await;
        let _ = rt.remove_sandbox(&s.id).await;
        crate::pod::volumes::unmount_under(&ctx.pods_dir.join(&s.uid));
        let _ = std::fs::remove_dir_all(ctx.pods_dir.join(&s.uid));
    }
}
