//! `keelson bench api`'s pod-shaped phases: what the scheduler and the node agents ask of
//! the API.
//!
//! - Simulated nodes: a Node (tainted so no real pod lands on it, Ready) and its Lease in
//!   `kube-node-lease` per node, the Lease renewed every 10 s as `keelson agent` renews
//!   it, by an update of the Lease last written (`--lease-renewal apply`: by a forced
//!   server-side apply instead), the renewals spread evenly over the interval. The servers' CPU
//!   is sampled over a window with the renewals and one without: the difference is what
//!   the renewals cost. They go on through the pod rounds.
//! - Pod rounds: a create with no `nodeName` (and the bench's own `schedulerName`, so the
//!   cluster's scheduler leaves it alone), a `pods/binding` to a simulated node, and a
//!   status patch to Running — one scheduled and started pod.
//! - With the pods loaded (topped up to `--pods`): the largest server's RSS, then lists of
//!   every pod, of one node's pods by `spec.nodeName=` (as every agent lists at start) and
//!   of one client's by a label selector, each checked against the full list.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::bail;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use keelson_agent::node_lease::{NodeLease, NODE_LEASE_DURATION_SECS};

use crate::agent_process::server_processes;
use crate::api::{closed_loop, ApiBenchArgs};
use crate::report::PhaseResult;

const NS: &str = "bench-pods";
const TAINT: &str = "keelson.dev/bench";
const LEASE_NS: &str = "kube-node-lease";

/// The local `keelson server` processes of the cluster at `apis` (`host:port`), measured.
#[derive(Clone, Debug)]
pub(crate) struct ServerSample {
    /// How many of the servers run here (0 when the cluster runs elsewhere).
    pub(crate) count: usize,
    /// CPU seconds of all of them together.
    pub(crate) cpu_seconds: f64,
    /// The largest one's resident memory, MiB.
    pub(crate) largest_rss_mb: f64,
}

impl ServerSample {
    pub(crate) fn now(apis: &[String]) -> Self {
        let servers: Vec<_> = server_processes().into_iter().filter(|s| s.api_listen.as_ref().is_some_and(|a| apis.contains(a))).collect();
        Self {
            count: servers.len(),
            cpu_seconds: servers.iter().map(|s| s.cpu_seconds).sum(),
            largest_rss_mb: servers.iter().map(|s| s.rss_bytes).max().unwrap_or(0) as f64 / (1024.0 * 1024.0),
        }
    }

    /// Server CPU milliseconds (all servers) per operation between `self` and `later`.
    pub(crate) fn cpu_ms_per_op(&self, later: &Self, ops: u64) -> Option<f64> {
        (self.count > 0 && ops > 0).then(|| (later.cpu_seconds - self.cpu_seconds) * 1000.0 / ops as f64)
    }
}

/// What the Lease renewals of the simulated nodes measured.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct LeaseRenewals {
    pub nodes: usize,
    pub interval_secs: u64,
    /// How they renewed.
    pub by: LeaseRenewal,
    /// Every renewal made while the bench ran (alone, then alongside the pod rounds).
    pub renewals: Option<PhaseResult>,
    /// Servers' CPU, in cores (all servers together), over a window without renewals and
    /// one with them alone.
    pub idle_cores: Option<f64>,
    pub with_renewals_cores: Option<f64>,
    /// `with_renewals_cores − idle_cores`: what the renewals cost, in cores.
    pub renewals_cost_cores: Option<f64>,
}

/// What the pod-shaped phases measured.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct PodPhases {
    pub leases: Option<LeaseRenewals>,
    /// Create, bind and status patch of one pod, each op one round.
    pub rounds: Option<PhaseResult>,
    /// Server CPU milliseconds (all servers) per pod round.
    pub round_server_cpu_ms: Option<f64>,
    pub pods_loaded: usize,
    /// The largest server's RSS before the simulated nodes and pods, MiB.
    pub rss_before_pods_mb: Option<f64>,
    /// The largest server's RSS with the pods loaded, MiB.
    pub rss_with_pods_mb: Option<f64>,
    /// (what was listed, the phase).
    pub lists: Vec<(String, PhaseResult)>,
}

fn node_name(i: usize) -> String {
    format!("bench-node-{i}")
}

fn micro_now() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

fn second_now() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A pod of client `client`; `node` set when it is created already bound.
fn pod(name: &str, client: usize, node: Option<&str>) -> Value {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"bench": "api-pods", "client": client.to_string()}},
        "spec": {
            "schedulerName": "keelson-bench",
            "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"],
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}],
            // The simulated nodes' taint, and every NoExecute taint: the node lifecycle
            // controller must not evict the bench's pods while their lists are counted.
            "tolerations": [{"key": TAINT, "operator": "Exists"}, {"operator": "Exists", "effect": "NoExecute"}],
        },
    });
    if let Some(node) = node {
        p["spec"]["nodeName"] = json!(node);
    }
    p
}

/// The status an agent reports for a started pod on node `node`.
fn running_status(node: usize, seq: u64) -> Value {
    let (now, host) = (second_now(), format!("10.{}.{}.1", 200 + node / 256 % 50, node % 256));
    let pod_ip = format!("10.{}.{}.{}", 100 + node / 256 % 50, node % 256, 2 + seq % 250);
    let cond = |t: &str| json!({"type": t, "status": "True", "lastTransitionTime": now});
    json!({"status": {
        "phase": "Running", "hostIP": host, "hostIPs": [{"ip": host}], "podIP": pod_ip, "podIPs": [{"ip": pod_ip}],
        "startTime": now, "qosClass": "Burstable",
        "conditions": [cond("PodReadyToStartContainers"), cond("Initialized"), cond("Ready"), cond("ContainersReady"), cond("PodScheduled")],
        "containerStatuses": [{"name": "c", "image": "busybox", "imageID": "", "ready": true, "started": true, "restartCount": 0,
            "containerID": format!("containerd://{seq:064x}"), "state": {"running": {"startedAt": now}}}],
    }})
}

/// Creates the bench's namespace and `nodes` simulated Nodes (Ready, tainted) with Leases.
async fn create_nodes(client: &kube::Client, nodes: usize) -> anyhow::Result<()> {
    let nsapi: Api<Namespace> = Api::all(client.clone());
    let _ = nsapi.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": NS}}))?).await;
    let node_api: Api<Node> = Api::all(client.clone());
    futures::stream::iter(0..nodes)
        .map(|i| {
            let node_api = node_api.clone();
            async move {
                let name = node_name(i);
                let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"bench": "api-pods"}},
                    "spec": {"taints": [{"key": TAINT, "value": "true", "effect": "NoSchedule"}]}});
                if let Err(e) = node_api.create(&PostParams::default(), &serde_json::from_value(node)?).await {
                    if !matches!(&e, kube::Error::Api(s) if s.code == 409) {
                        return Err(e.into());
                    }
                }
                let now = second_now();
                let status = json!({"status": {
                    "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"}, "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
                        "lastHeartbeatTime": now, "lastTransitionTime": now}]}});
                node_api.patch_status(&name, &PatchParams::default(), &Patch::Merge(status)).await?;
                Ok::<_, anyhow::Error>(())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// How the simulated nodes renew their Leases.
#[derive(clap::ValueEnum, serde::Serialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LeaseRenewal {
    /// An update of the Lease last written, as `keelson agent` and the kubelet renew.
    #[default]
    Update,
    /// A forced server-side apply of the Lease's spec (how the agent renewed before).
    Apply,
}

/// One simulated node's Lease and how it is renewed.
struct SimulatedLease {
    by: LeaseRenewal,
    api: Api<Lease>,
    lease: NodeLease,
}

impl SimulatedLease {
    fn new(client: &kube::Client, i: usize, by: LeaseRenewal) -> Self {
        let name = node_name(i);
        SimulatedLease { by, api: Api::namespaced(client.clone(), LEASE_NS), lease: NodeLease::new(client.clone(), &name, NODE_LEASE_DURATION_SECS) }
    }

    async fn renew(&mut self) -> Result<(), kube::Error> {
        match self.by {
            LeaseRenewal::Update => self.lease.renew(None).await,
            LeaseRenewal::Apply => {
                let name = self.lease.name();
                let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name},
                    "spec": {"holderIdentity": name, "leaseDurationSeconds": NODE_LEASE_DURATION_SECS, "renewTime": micro_now()}});
                self.api.patch(name, &PatchParams::apply("kubelet").force(), &Patch::Apply(lease)).await.map(|_| ())
            }
        }
    }
}

/// Renewal latencies (µs) and errors, filled until the token is cancelled.
#[derive(Default)]
struct RenewalLog {
    latencies: Mutex<Vec<u32>>,
    errors: AtomicU64,
}

/// Renews every Lease of `leases` once per `interval`, spread evenly, until `stop`. A
/// renewal that is slow does not hold back the other nodes'.
async fn renew_leases(leases: Vec<Arc<tokio::sync::Mutex<SimulatedLease>>>, interval: Duration, log: Arc<RenewalLog>, stop: CancellationToken) {
    let mut tick = tokio::time::interval((interval / leases.len().max(1) as u32).max(Duration::from_micros(100)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let in_flight = Arc::new(tokio::sync::Semaphore::new(256));
    for k in 0usize.. {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let Ok(permit) = in_flight.clone().acquire_owned().await else { return };
        let (lease, log) = (leases[k % leases.len()].clone(), log.clone());
        tokio::spawn(async move {
            let mut lease = lease.lock().await;
            let t = Instant::now();
            match lease.renew().await {
                Ok(()) => log.latencies.lock().expect("lock").push(t.elapsed().as_micros().min(u32::MAX as u128) as u32),
                Err(e) => {
                    if log.errors.fetch_add(1, Ordering::Relaxed) == 0 {
                        eprintln!("bench: first failed lease renewal: {e}");
                    }
                }
            }
            drop(permit);
        });
    }
}

/// Cores used by the servers over `secs` seconds from now.
async fn cores_over(servers: &[String], secs: u64) -> Option<f64> {
    let before = ServerSample::now(servers);
    let t = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let after = ServerSample::now(servers);
    (before.count > 0).then(|| (after.cpu_seconds - before.cpu_seconds) / t.elapsed().as_secs_f64())
}

/// The pod-shaped phases; `clients` holds one client per server, `servers` their addresses.
pub(crate) async fn pod_phases(args: &ApiBenchArgs, clients: &[kube::Client], servers: &[String]) -> anyhow::Result<PodPhases> {
    let mut out = PodPhases::default();
    let sample = ServerSample::now(servers);
    out.rss_before_pods_mb = (sample.count > 0).then_some(sample.largest_rss_mb);
    let nodes = args.lease_nodes.max(1);
    eprintln!("bench: {nodes} simulated nodes (Node, Lease)");
    create_nodes(&clients[0], nodes).await?;
    // Node i talks to server i mod 3 throughout, as an agent keeps its connection.
    let leases: Vec<_> = (0..nodes).map(|i| Arc::new(tokio::sync::Mutex::new(SimulatedLease::new(&clients[i % clients.len()], i, args.lease_renewal)))).collect();
    futures::stream::iter(leases.clone())
        .map(|l| async move { l.lock().await.renew().await })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await?;

    let stop = CancellationToken::new();
    let log = Arc::new(RenewalLog::default());
    let renewing = args.lease_nodes > 0;
    let interval = Duration::from_secs(args.lease_interval_secs.max(1));
    let started = Instant::now();
    if renewing {
        eprintln!("bench: server CPU idle, then with {} Lease renewals every {} s", args.lease_nodes, args.lease_interval_secs);
        // The controllers' reactions to the new nodes die down first.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let idle = cores_over(servers, args.duration_secs).await;
        tokio::spawn(renew_leases(leases[..args.lease_nodes].to_vec(), interval, log.clone(), stop.clone()));
        let with = cores_over(servers, args.duration_secs).await;
        out.leases = Some(LeaseRenewals {
            nodes: args.lease_nodes,
            interval_secs: args.lease_interval_secs,
            by: args.lease_renewal,
            idle_cores: idle,
            with_renewals_cores: with,
            renewals_cost_cores: idle.zip(with).map(|(i, w)| (w - i).max(0.0)),
            ..Default::default()
        });
    }

    let result = rounds_and_lists(args, clients, servers, nodes, &mut out).await;
    stop.cancel();
    if let Some(l) = out.leases.as_mut() {
        let lat = std::mem::take(&mut *log.latencies.lock().expect("lock"));
        l.renewals = Some(PhaseResult::from_latencies(clients.len(), lat, log.errors.load(Ordering::Relaxed), started.elapsed().as_secs_f64()));
    }
    cleanup(&clients[0], nodes).await;
    result.map(|()| out)
}

async fn rounds_and_lists(args: &ApiBenchArgs, clients: &[kube::Client], servers: &[String], nodes: usize, out: &mut PodPhases) -> anyhow::Result<()> {
    let apis: Vec<Api<Pod>> = clients.iter().map(|c| Api::namespaced(c.clone(), NS)).collect();
    let n = apis.len();
    eprintln!("bench: pod rounds (create, bind, status; {} clients, {} s)", args.clients, args.duration_secs);
    let a = apis.clone();
    let before = ServerSample::now(servers);
    let rounds = closed_loop(args.clients, args.duration_secs, move |c, seq| {
        let api = a[c % n].clone();
        async move {
            let name = format!("p{c}-{seq}");
            let created = api.create(&PostParams::default(), &serde_json::from_value(pod(&name, c, None))?).await?;
            let node = (c * 7919 + seq as usize) % nodes;
            let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "uid": created.metadata.uid},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node_name(node)}});
            api.create_subresource::<_, Value>("binding", &name, &PostParams::default(), &binding).await?;
            api.patch_status(&name, &PatchParams::default(), &Patch::Merge(running_status(node, seq))).await?;
            Ok(())
        }
    })
    .await;
    out.round_server_cpu_ms = before.cpu_ms_per_op(&ServerSample::now(servers), rounds.ops);
    out.rounds = Some(rounds);

    // Top up to --pods with pods created bound (as a controller's pods bound at once would be).
    let have = apis[0].list_metadata(&ListParams::default().labels("bench=api-pods")).await?.items.len();
    eprintln!("bench: loading pods to {} (have {have})", args.pods);
    futures::stream::iter(have..args.pods.max(have))
        .map(|i| {
            let api = apis[i % n].clone();
            async move {
                let node = i % nodes;
                let name = format!("l{i}");
                api.create(&PostParams::default(), &serde_json::from_value(pod(&name, i % args.clients.max(1), Some(node_name(node).as_str())))?).await?;
                api.patch_status(&name, &PatchParams::default(), &Patch::Merge(running_status(node, i as u64))).await?;
                Ok::<_, anyhow::Error>(())
            }
        })
        .buffer_unordered(64)
        .try_collect::<Vec<_>>()
        .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let sample = ServerSample::now(servers);
    out.rss_with_pods_mb = (sample.count > 0).then_some(sample.largest_rss_mb);

    // What each list must return, from one full list.
    let all = apis[0].list(&ListParams::default().labels("bench=api-pods")).await?;
    out.pods_loaded = all.items.len();
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    for p in &all.items {
        if let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
            *per_node.entry(n).or_default() += 1;
        }
    }
    let client0 = all.items.iter().filter(|p| p.metadata.labels.as_ref().and_then(|l| l.get("client")).map(String::as_str) == Some("0")).count();
    let node0 = per_node.get(&node_name(0)).copied().unwrap_or(0);
    let lists = [
        (format!("pods, all ({})", out.pods_loaded), ListParams::default().labels("bench=api-pods"), out.pods_loaded),
        (format!("pods by nodeName ({node0})"), ListParams::default().fields(&format!("spec.nodeName={}", node_name(0))), node0),
        (format!("pods by label ({client0})"), ListParams::default().labels("bench=api-pods,client=0"), client0),
    ];
    for (what, params, expected) in lists {
        eprintln!("bench: list {what}");
        let listers = apis.clone();
        let params = Arc::new(params);
        let phase = closed_loop(4, args.duration_secs, move |c, _| {
            let (api, params) = (listers[c % n].clone(), params.clone());
            async move {
                let got = api.list(&params).await?.items.len();
                if got != expected {
                    bail!("listed {got} pods, expected {expected}");
                }
                Ok(())
            }
        })
        .await;
        out.lists.push((what, phase));
    }
    Ok(())
}

/// Removes the simulated nodes, their Leases and the bench's pods (they would otherwise
/// stay in a cluster named by `--kubeconfig`).
async fn cleanup(client: &kube::Client, nodes: usize) {
    let nsapi: Api<Namespace> = Api::all(client.clone());
    let _ = nsapi.delete(NS, &DeleteParams::default()).await;
    let node_api: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE_NS);
    futures::stream::iter(0..nodes)
        .map(|i| {
            let (node_api, leases) = (node_api.clone(), leases.clone());
            async move {
                let _ = node_api.delete(&node_name(i), &DeleteParams::default()).await;
                let _ = leases.delete(&node_name(i), &DeleteParams::default()).await;
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
}

pub(crate) fn print_pod_phases(p: &PodPhases, row: &dyn Fn(&str, &PhaseResult)) {
    if let Some(r) = &p.rounds {
        row("pod round (3 writes)", r);
    }
    for (what, l) in &p.lists {
        row(what, l);
    }
    if let Some(l) = &p.leases {
        if let Some(r) = &l.renewals {
            row(&format!("lease renewals ({}, by {:?})", l.nodes, l.by), r);
        }
        if let Some(cost) = l.renewals_cost_cores {
            println!("lease renewals ({:?}) of {} nodes every {} s: {:.1}% of one core (all servers; idle {:.1}%, with renewals {:.1}%)",
                l.by, l.nodes, l.interval_secs, cost * 100.0, l.idle_cores.unwrap_or(0.0) * 100.0, l.with_renewals_cores.unwrap_or(0.0) * 100.0);
        }
    }
    if let Some(ms) = p.round_server_cpu_ms {
        println!("server CPU per pod round: {ms:.2} ms (all servers)");
    }
    if let Some(mb) = p.rss_with_pods_mb {
        println!("largest server RSS with {} pods: {mb:.0} MiB (before the nodes and pods: {:.0} MiB)", p.pods_loaded, p.rss_before_pods_mb.unwrap_or(0.0));
    }
}
