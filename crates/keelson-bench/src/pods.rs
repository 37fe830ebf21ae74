//! `keelson bench pods`: pod startup on real nodes. Against a cluster whose nodes run
//! `keelson agent` on containerd (`keelson up --agents 2` as root, or any cluster a
//! kubeconfig names), N busybox pods are created at once; a watch records when each is
//! first seen Running and Ready. Reported: create→Running percentiles (Kubernetes' SLO:
//! p99 ≤ 5 s without image pulls), and the agents' resident memory and CPU time — read
//! from `/proc` for the `keelson agent` processes on this machine.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::watcher::{self, watcher};
use serde_json::json;

use crate::agent_process::agent_processes;
use crate::percentile::percentile;

#[derive(Args, Clone, Debug)]
pub struct PodsBenchArgs {
    /// Admin kubeconfig of a cluster with real nodes (`keelson up --agents 2`'s DIR/kubeconfig).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: PathBuf,
    /// Pods to create.
    #[arg(long, default_value_t = 100)]
    pub pods: usize,
    /// Longest the bench waits for every pod to run, in seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout_secs: u64,
    /// Print one JSON object on stdout instead of the summary.
    #[arg(long)]
    pub json: bool,
}

/// What `--json` prints.
#[derive(Debug, serde::Serialize)]
pub struct PodsReport {
    pub nodes: usize,
    pub pods: usize,
    pub running: usize,
    pub startup_p50_ms: f64,
    pub startup_p99_ms: f64,
    pub startup_max_ms: f64,
    /// Largest resident set of an agent process with every pod running.
    pub agent_rss_mb: f64,
    /// CPU time of all agents while the pods started.
    pub agent_cpu_seconds: f64,
    /// Time from the deletions to every pod gone.
    pub delete_all_seconds: f64,
}

const NS: &str = "default";
const LABEL: &str = "keelson-bench";

fn running_and_ready(p: &Pod) -> bool {
    let s = p.status.as_ref();
    s.and_then(|s| s.phase.as_deref()) == Some("Running") && s.and_then(|s| s.conditions.as_ref()).is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

pub async fn run_pods_bench(args: PodsBenchArgs) -> anyhow::Result<()> {
    let kc = kube::config::Kubeconfig::read_from(&args.kubeconfig).with_context(|| format!("reading {}", args.kubeconfig.display()))?;
    let client = kube::Client::try_from(kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?)?;
    let nodes: Api<Node> = Api::all(client.clone());
    let real: Vec<Node> = nodes
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|n| n.status.as_ref().and_then(|s| s.node_info.as_ref()).is_some_and(|i| i.container_runtime_version.starts_with("containerd://")))
        .collect();
    if real.is_empty() {
        bail!("the cluster has no real nodes: start one with `keelson up --agents 2` (as root) and pass its kubeconfig");
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let (seen_tx, mut seen_rx) = tokio::sync::mpsc::unbounded_channel::<(String, Instant)>();
    let watch_api = pods.clone();
    let watch = tokio::spawn(async move {
        let stream = watcher(watch_api, watcher::Config::default().labels(LABEL));
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            if let Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = ev {
                if running_and_ready(&p) {
                    let _ = seen_tx.send((p.metadata.name.unwrap_or_default(), Instant::now()));
                }
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let cpu_before: f64 = agent_processes().iter().map(|a| a.cpu_seconds).sum();
    let mut created: HashMap<String, Instant> = HashMap::new();
    let run = format!("{:x}", std::process::id());
    let creates = (0..args.pods).map(|i| {
        let pods = pods.clone();
        let name = format!("bench-{run}-{i}");
        async move {
            let pod: Pod = serde_json::from_value(json!({"metadata": {"name": name, "labels": {LABEL: "pods"}},
                "spec": {"terminationGracePeriodSeconds": 0, "containers": [{"name": "c", "image": "keelson.local/busybox:stable", "command": ["sleep", "3600"],
                    "resources": {"requests": {"cpu": "10m", "memory": "8Mi"}}}]}}))
            .expect("a valid pod");
            let at = Instant::now();
            pods.create(&PostParams::default(), &pod).await.map(|_| (name, at))
        }
    });
    let results = futures::stream::iter(creates).buffer_unordered(16).collect::<Vec<_>>().await;
    for r in results {
        let (name, at) = r.context("creating a pod")?;
        created.insert(name, at);
    }
    let deadline = Instant::now() + Duration::from_secs(args.timeout_secs);
    let mut latencies: HashMap<String, f64> = HashMap::new();
    while latencies.len() < created.len() && Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_secs(1), seen_rx.recv()).await {
            Ok(Some((name, at))) => {
                if let Some(c) = created.get(&name) {
                    latencies.entry(name).or_insert(at.duration_since(*c).as_secs_f64() * 1000.0);
                }
            }
            Ok(None) => break,
            Err(_) => {}
        }
    }
    let agents_now = agent_processes();
    let cpu_after: f64 = agents_now.iter().map(|a| a.cpu_seconds).sum();
    let rss = agents_now.iter().map(|a| a.rss_bytes).max().unwrap_or(0);
    watch.abort();
    let deleting = Instant::now();
    let dp = DeleteParams::default();
    for name in created.keys() {
        let _ = pods.delete(name, &dp).await;
    }
    loop {
        let left = pods.list(&ListParams::default().labels(LABEL)).await?.items.len();
        if left == 0 || deleting.elapsed() > Duration::from_secs(args.timeout_secs) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let mut v: Vec<f64> = latencies.values().copied().collect();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let report = PodsReport {
        nodes: real.len(),
        pods: args.pods,
        running: v.len(),
        startup_p50_ms: percentile(&v, 0.5),
        startup_p99_ms: percentile(&v, 0.99),
        startup_max_ms: v.last().copied().unwrap_or(0.0),
        agent_rss_mb: rss as f64 / (1024.0 * 1024.0),
        agent_cpu_seconds: cpu_after - cpu_before,
        delete_all_seconds: deleting.elapsed().as_secs_f64(),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("pods: {} on {} real node(s), {} running", report.pods, report.nodes, report.running);
        println!("create→Running+Ready: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms (Kubernetes SLO p99 ≤ 5 s)", report.startup_p50_ms, report.startup_p99_ms, report.startup_max_ms);
        println!("agents: largest RSS {:.1} MiB with every pod running; {:.2} CPU-seconds in all while they started", report.agent_rss_mb, report.agent_cpu_seconds);
        println!("deleting all: {:.1} s", report.delete_all_seconds);
    }
    if report.running < report.pods {
        bail!("{} of {} pods never ran within {} s", report.pods - report.running, report.pods, args.timeout_secs);
    }
    Ok(())
}
