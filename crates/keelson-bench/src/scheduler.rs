//! `keelson bench scheduler`: hollow nodes and a burst of pods against a 3-server cluster
//! (started by the bench, or any cluster a kubeconfig names). Pods are created by
//! concurrent clients spread over the servers; a watch records when each pod is first
//! seen bound. Reported: pods/s from the first create to the last bind, and per-pod
//! create→bind latency percentiles. `--constraints` gives every pod a zone spread
//! constraint and a preferred anti-affinity, so the scheduler's heavier plugins work.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::watcher::{self, watcher};
use serde_json::json;

use crate::percentile::percentile;

#[derive(Args, Clone, Debug)]
pub struct SchedulerBenchArgs {
    /// Hollow nodes to register.
    #[arg(long, default_value_t = 1000)]
    pub nodes: usize,
    /// Pods to create.
    #[arg(long, default_value_t = 10000)]
    pub pods: usize,
    /// Concurrent creating clients.
    #[arg(long, default_value_t = 32)]
    pub clients: usize,
    /// Every pod spreads over zones and prefers other pods' absence.
    #[arg(long)]
    pub constraints: bool,
    /// Longest the bench waits for every pod to be bound, in seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout_secs: u64,
    #[command(flatten)]
    pub target: crate::api::BenchTarget,
}

/// What `--json` prints.
#[derive(Debug, serde::Serialize)]
pub struct SchedulerReport {
    pub nodes: usize,
    pub pods: usize,
    pub bound: usize,
    pub constraints: bool,
    pub pods_per_s: f64,
    pub creates_per_s: f64,
    pub create_to_bind_p50_ms: f64,
    pub create_to_bind_p99_ms: f64,
    pub create_to_bind_max_ms: f64,
    pub seconds: f64,
}

const NS: &str = "default";
const ZONES: usize = 3;

fn pod(i: usize, constraints: bool) -> Pod {
    let mut p = json!({
        "metadata": {"name": format!("sched-{i}"), "labels": {"bench": "scheduler", "group": format!("g{}", i % 10)}},
        "spec": {"containers": [{"name": "c", "image": "example.com/pause:1", "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]},
    });
    if constraints {
        p["spec"]["topologySpreadConstraints"] = json!([{"maxSkew": 5, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"group": format!("g{}", i % 10)}}}]);
        p["spec"]["affinity"] = json!({"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 10, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"group": format!("g{}", i % 10)}}}}]}});
    }
    serde_json::from_value(p).expect("a valid pod")
}


pub async fn run_scheduler_bench(args: SchedulerBenchArgs) -> anyhow::Result<()> {
    let args_ref = &args;
    crate::api::run_on_cluster(&args.target, |clients| async move { bench(args_ref, &clients).await }, print_summary).await?;
    Ok(())
}

fn print_summary(r: &SchedulerReport) {
    println!(
        "{} pods on {} hollow nodes{}: {} bound in {:.1} s: {:.0} pods/s (creates {:.0}/s); create→bind p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        r.pods,
        r.nodes,
        if r.constraints { " (spread + anti-affinity)" } else { "" },
        r.bound,
        r.seconds,
        r.pods_per_s,
        r.creates_per_s,
        r.create_to_bind_p50_ms,
        r.create_to_bind_p99_ms,
        r.create_to_bind_max_ms
    );
}

/// Registers hollow nodes (carrying label `label`) and serves them until `shutdown`;
/// returns once every one is registered.
pub(crate) async fn start_hollow_nodes(
    client: &kube::Client,
    cfg: keelson_agent::hollow::HollowConfig,
    label: &str,
    shutdown: &tokio_util::sync::CancellationToken,
) -> anyhow::Result<tokio::task::JoinHandle<Result<(), keelson_agent::hollow::HollowError>>> {
    // Registration waits for the namespace machinery like any client.
    let deadline = Instant::now() + Duration::from_secs(60);
    let nodes: Api<Node> = Api::all(client.clone());
    while nodes.list(&ListParams::default().limit(1)).await.is_err() {
        if Instant::now() > deadline {
            bail!("the API does not answer");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let count = cfg.count;
    eprintln!("bench: registering {count} hollow nodes");
    let t = Instant::now();
    let hollow = tokio::spawn(keelson_agent::hollow::run(client.clone(), cfg, shutdown.clone()));
    loop {
        let n = nodes.list(&ListParams::default().labels(label)).await.map(|l| l.items.len()).unwrap_or(0);
        if n >= count {
            break;
        }
        if hollow.is_finished() {
            bail!("the hollow nodes stopped before all were registered");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!("bench: {count} nodes registered in {:.1} s", t.elapsed().as_secs_f64());
    Ok(hollow)
}

async fn bench(args: &SchedulerBenchArgs, clients: &[kube::Client]) -> anyhow::Result<SchedulerReport> {
    let shutdown = tokio_util::sync::CancellationToken::new();
    let _stop = shutdown.clone().drop_guard();
    let mut cfg = keelson_agent::hollow::HollowConfig::new("bench-node", args.nodes);
    cfg.labels = |i| [("topology.kubernetes.io/zone".to_string(), format!("zone-{}", i % ZONES))].into();
    let _hollow = start_hollow_nodes(&clients[0], cfg, "topology.kubernetes.io/zone", &shutdown).await?;

    // Bind times, from a watch started before the first create.
    let bound: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let pods: Api<Pod> = Api::namespaced(clients[0].clone(), NS);
    let seen = bound.clone();
    let watch = tokio::spawn(async move {
        let stream = watcher(pods, watcher::Config::default().labels("bench=scheduler"));
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            if let Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = ev {
                if p.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty()) {
                    seen.lock().expect("lock").entry(p.metadata.name.unwrap_or_default()).or_insert_with(Instant::now);
                }
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;

    eprintln!("bench: creating {} pods with {} clients", args.pods, args.clients);
    let next = Arc::new(AtomicUsize::new(0));
    let created: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..args.clients {
        let api: Api<Pod> = Api::namespaced(clients[c % clients.len()].clone(), NS);
        let (next, created, total, constraints) = (next.clone(), created.clone(), args.pods, args.constraints);
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    return Ok::<(), anyhow::Error>(());
                }
                let p = pod(i, constraints);
                let t = Instant::now();
                let mut tries = 0;
                while let Err(e) = api.create(&PostParams::default(), &p).await {
                    tries += 1;
                    if tries > 20 {
                        return Err(anyhow::anyhow!("creating sched-{i}: {e}"));
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                created.lock().expect("lock").insert(format!("sched-{i}"), t);
            }
        }));
    }
    for t in tasks {
        t.await.context("a creating client")??;
    }
    let creates_done = start.elapsed();
    let deadline = Instant::now() + Duration::from_secs(args.timeout_secs);
    while bound.lock().expect("lock").len() < args.pods {
        if Instant::now() > deadline {
            eprintln!("bench: timed out with {} of {} pods bound", bound.lock().expect("lock").len(), args.pods);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    watch.abort();
    let bound = bound.lock().expect("lock").clone();
    let created = created.lock().expect("lock").clone();
    let last = bound.values().max().copied().unwrap_or(start);
    let seconds = last.duration_since(start).as_secs_f64().max(1e-9);
    let mut lat: Vec<f64> = created.iter().filter_map(|(n, c)| bound.get(n).map(|b| b.saturating_duration_since(*c).as_secs_f64() * 1000.0)).collect();
    lat.sort_by(|a, b| a.total_cmp(b));
    Ok(SchedulerReport {
        nodes: args.nodes,
        pods: args.pods,
        bound: bound.len(),
        constraints: args.constraints,
        pods_per_s: bound.len() as f64 / seconds,
        creates_per_s: args.pods as f64 / creates_done.as_secs_f64().max(1e-9),
        create_to_bind_p50_ms: percentile(&lat, 0.5),
        create_to_bind_p99_ms: percentile(&lat, 0.99),
        create_to_bind_max_ms: lat.last().copied().unwrap_or(0.0),
        seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constrained_pods_spread_by_zone() {
        let p = pod(7, true);
        let spec = p.spec.unwrap();
        assert_eq!(spec.topology_spread_constraints.unwrap()[0].topology_key, "topology.kubernetes.io/zone");
        assert!(pod(7, false).spec.unwrap().topology_spread_constraints.is_none());
    }
}
