//! `keelson bench api`: the Kubernetes API under load, through kube-rs, against a
//! 3-replica cluster (started by the bench, or any cluster a kubeconfig names).
//!
//! Phases: creates, updates (merge patch), gets, lists of 1k and 10k objects, and watch
//! fan-out: W watchers spread over the replicas while a writer updates objects at a
//! fixed rate; the latency is from the write's acknowledgement to each watcher's event.
//! Then the pod-shaped phases of [`crate::api_pods`]: Lease renewals of simulated nodes,
//! pod rounds (create, bind, status), pod lists with field and label selectors. The
//! servers' CPU per write and their memory with the pods loaded are read from `/proc`
//! when the servers run on this machine.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use keelson_runner::{Cluster, ClusterSpec};
use kube::api::{ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::Api;
use rand::Rng;
use serde_json::json;

use crate::api_pods::{pod_phases, print_pod_phases, PodPhases, ServerSample};
use crate::report::PhaseResult;

#[derive(Args, Clone, Debug)]
pub struct ApiBenchArgs {
    /// Concurrent clients of the create/update/get phases.
    #[arg(long, default_value_t = 32)]
    pub clients: usize,
    /// Seconds per create/update/get phase.
    #[arg(long, default_value_t = 10)]
    pub duration_secs: u64,
    /// Object counts of the list phases.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
    pub list_sizes: Vec<usize>,
    /// Watchers of the fan-out phase.
    #[arg(long, default_value_t = 1000)]
    pub watchers: usize,
    /// Writes per second during the fan-out phase.
    #[arg(long, default_value_t = 20)]
    pub watch_write_rate: u64,
    /// Seconds of writes during the fan-out phase.
    #[arg(long, default_value_t = 10)]
    pub watch_secs: u64,
    /// Simulated nodes renewing their Leases through the pod phases (0: no renewals).
    #[arg(long, default_value_t = 1000)]
    pub lease_nodes: usize,
    /// Seconds between one node's renewals (the agents' and the kubelet's 10 s).
    #[arg(long, default_value_t = 10)]
    pub lease_interval_secs: u64,
    /// How the simulated nodes renew: `update` (as the agent and the kubelet do) or
    /// `apply` (a forced server-side apply), to compare the two.
    #[arg(long, value_enum, default_value_t = crate::api_pods::LeaseRenewal::Update)]
    pub lease_renewal: crate::api_pods::LeaseRenewal,
    /// Pods loaded for the pod lists and the memory figure (0 skips the pod phases).
    #[arg(long, default_value_t = 10000)]
    pub pods: usize,
    #[command(flatten)]
    pub target: BenchTarget,
}

/// The cluster a bench drives and how it reports; shared by the API-driving benches.
#[derive(Args, Clone, Debug)]
pub struct BenchTarget {
    /// Drive the cluster of this kubeconfig (every context is used as one endpoint)
    /// instead of starting a 3-server Keelson cluster.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Print one JSON object on stdout instead of the summary.
    #[arg(long)]
    pub json: bool,
    /// One more argument for every `keelson server` of the started cluster (repeatable),
    /// for example `--server-arg=--no-components` to measure the servers without the
    /// scheduler and controller manager; ignored with `--kubeconfig`.
    #[arg(long = "server-arg", allow_hyphen_values = true)]
    pub server_args: Vec<String>,
}

/// Runs `bench` with one client per server of the target's cluster (a 3-server cluster
/// started and stopped here when no kubeconfig is named), then prints its report: JSON
/// with `--json`, else `summary`. The report is returned for the bench's own verdict.
pub(crate) async fn run_on_cluster<R, Fut>(
    target: &BenchTarget,
    bench: impl FnOnce(Vec<kube::Client>) -> Fut,
    summary: impl FnOnce(&R),
) -> anyhow::Result<R>
where
    R: serde::Serialize,
    Fut: std::future::Future<Output = anyhow::Result<R>>,
{
    run_on_cluster_at(target, |clients, _| bench(clients), summary).await
}

/// [`run_on_cluster`], the bench also given the cluster's kubeconfig (for more clients
/// of their own connections, and the servers' addresses).
pub(crate) async fn run_on_cluster_at<R, Fut>(
    target: &BenchTarget,
    bench: impl FnOnce(Vec<kube::Client>, PathBuf) -> Fut,
    summary: impl FnOnce(&R),
) -> anyhow::Result<R>
where
    R: serde::Serialize,
    Fut: std::future::Future<Output = anyhow::Result<R>>,
{
    let tmp = tempfile::tempdir()?;
    let (kubeconfig, cluster) = bench_cluster(target, tmp.path()).await?;
    let clients = clients_from(&kubeconfig).await?;
    let report = bench(clients, kubeconfig.clone()).await;
    if let Some(c) = cluster {
        c.stop(Duration::from_secs(10)).await?;
    }
    let report = report?;
    if target.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        summary(&report);
    }
    Ok(report)
}

const NS: &str = "default";

fn cm(name: &str, v: u64) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": {"bench": "api"}}, "data": {"v": v.to_string(), "pad": "x".repeat(200)}}))
        .expect("valid ConfigMap")
}

/// The API servers a kubeconfig names (`host:port`).
pub(crate) fn api_addresses(path: &std::path::Path) -> anyhow::Result<Vec<String>> {
    let kc = Kubeconfig::read_from(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(kc.clusters.iter().filter_map(|c| c.cluster.as_ref()?.server.as_deref()).map(|s| s.trim_start_matches("https://").trim_end_matches('/').to_string()).collect())
}

pub(crate) async fn clients_from(path: &std::path::Path) -> anyhow::Result<Vec<kube::Client>> {
    let kc = Kubeconfig::read_from(path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = Vec::new();
    for ctx in &kc.contexts {
        let opts = KubeConfigOptions { context: Some(ctx.name.clone()), ..Default::default() };
        let cfg = kube::Config::from_custom_kubeconfig(kc.clone(), &opts).await?;
        out.push(kube::Client::try_from(cfg)?);
    }
    if out.is_empty() {
        bail!("{} has no contexts", path.display());
    }
    Ok(out)
}

/// Runs `clients` loops of `op` for `secs`; op gets (client index, sequence number).
pub(crate) async fn closed_loop<F, Fut>(clients: usize, secs: u64, op: F) -> PhaseResult
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let op = Arc::new(op);
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (op, stop, errors) = (op.clone(), stop.clone(), errors.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut seq = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                match op(c, seq).await {
                    Ok(()) => lat.push(t.elapsed().as_micros().min(u32::MAX as u128) as u32),
                    Err(e) => {
                        // The first failure of a phase says why its errors column is not 0.
                        if errors.fetch_add(1, Ordering::Relaxed) == 0 {
                            eprintln!("bench: first error of the phase: {e:#}");
                        }
                    }
                }
                seq += 1;
            }
            lat
        }));
    }
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap_or_default());
    }
    PhaseResult::from_latencies(clients, all, errors.load(Ordering::Relaxed), start.elapsed().as_secs_f64())
}

/// Results of the API bench.
#[derive(Default, serde::Serialize)]
pub struct ApiReport {
    pub create: Option<PhaseResult>,
    pub update: Option<PhaseResult>,
    /// Server CPU milliseconds (all servers together) per create and per update, when
    /// the servers run on this machine.
    pub create_server_cpu_ms: Option<f64>,
    pub update_server_cpu_ms: Option<f64>,
    pub get: Option<PhaseResult>,
    pub lists: Vec<(usize, PhaseResult)>,
    pub watch: Option<PhaseResult>,
    pub watch_expected_events: u64,
    pub watch_received_events: u64,
    pub pods: Option<PodPhases>,
}

/// The cluster a bench drives: the one `kubeconfig` names, or a 3-server cluster of this
/// binary started in `tmp` (returned, for the bench to stop).
pub(crate) async fn bench_cluster(target: &BenchTarget, tmp: &std::path::Path) -> anyhow::Result<(PathBuf, Option<Cluster>)> {
    if let Some(k) = &target.kubeconfig {
        return Ok((k.clone(), None));
    }
    let mut spec = ClusterSpec::loopback(3, std::env::current_exe()?, tmp.join("keelson"));
    spec.server_args.extend(target.server_args.iter().cloned());
    let c = Cluster::start(spec, |m| eprintln!("bench: keelson: {m}")).await?;
    c.wait_api(Duration::from_secs(60)).await?;
    Ok((c.kubeconfig_path(), Some(c)))
}

pub async fn run_api_bench(args: ApiBenchArgs) -> anyhow::Result<()> {
    let args_ref = &args;
    let run = |clients: Vec<kube::Client>, kubeconfig: PathBuf| async move {
        let apis: Vec<Api<ConfigMap>> = clients.iter().map(|c| Api::namespaced(c.clone(), NS)).collect();
        let servers = api_addresses(&kubeconfig)?;
        let mut report = bench(args_ref, &apis, &servers).await?;
        if args_ref.pods > 0 {
            report.pods = Some(pod_phases(args_ref, &clients, &servers).await?);
        }
        Ok(report)
    };
    run_on_cluster_at(&args.target, run, print_report).await?;
    Ok(())
}

async fn bench(args: &ApiBenchArgs, apis: &[Api<ConfigMap>], servers: &[String]) -> anyhow::Result<ApiReport> {
    let mut report = ApiReport::default();
    // The namespace may still be being created right after start.
    let deadline = Instant::now() + Duration::from_secs(30);
    while apis[0].list(&ListParams::default().limit(1)).await.is_err() {
        if Instant::now() > deadline {
            bail!("the API does not answer");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let n = apis.len();
    let a = apis.to_vec();
    eprintln!("bench: creates ({} clients, {} s)", args.clients, args.duration_secs);
    // Each client creates c{client}-{0,1,2,…}; the count it reached is what later phases use.
    let created: Arc<Vec<AtomicU64>> = Arc::new((0..args.clients).map(|_| AtomicU64::new(0)).collect());
    let counts = created.clone();
    let before = ServerSample::now(servers);
    let create = closed_loop(args.clients, args.duration_secs, move |c, _| {
        let api = a[c % n].clone();
        let counts = counts.clone();
        async move {
            let seq = counts[c].load(Ordering::SeqCst);
            api.create(&PostParams::default(), &cm(&format!("c{c}-{seq}"), seq)).await?;
            counts[c].fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    })
    .await;
    let created_per_client = created.iter().map(|c| c.load(Ordering::SeqCst)).min().unwrap_or(0);
    report.create_server_cpu_ms = before.cpu_ms_per_op(&ServerSample::now(servers), create.ops);
    report.create = Some(create);

    let a = apis.to_vec();
    eprintln!("bench: updates");
    let before = ServerSample::now(servers);
    let update = closed_loop(args.clients, args.duration_secs, move |c, seq| {
            let api = a[c % n].clone();
            let name = format!("c{c}-{}", seq % created_per_client.max(1));
            async move {
                api.patch(&name, &PatchParams::default(), &Patch::Merge(json!({"data": {"v": seq.to_string()}}))).await?;
                Ok(())
            }
        })
        .await;
    report.update_server_cpu_ms = before.cpu_ms_per_op(&ServerSample::now(servers), update.ops);
    report.update = Some(update);

    let a = apis.to_vec();
    eprintln!("bench: gets");
    report.get = Some(
        closed_loop(args.clients, args.duration_secs, move |c, _| {
            let api = a[c % n].clone();
            let name = format!("c{c}-{}", rand::thread_rng().gen_range(0..created_per_client.max(1)));
            async move {
                api.get(&name).await?;
                Ok(())
            }
        })
        .await,
    );

    for &size in &args.list_sizes {
        let ns_api = |api: &Api<ConfigMap>, ns: &str| Api::<ConfigMap>::namespaced(api.clone().into_client(), ns);
        let ns = format!("bench-list-{size}");
        let nsapi: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(apis[0].clone().into_client());
        let _ = nsapi.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": ns}}))?).await;
        eprintln!("bench: loading {size} objects for the list phase");
        let loaders: Vec<Api<ConfigMap>> = apis.iter().map(|a| ns_api(a, &ns)).collect();
        futures::stream::iter(0..size)
            .map(|i| {
                let api = loaders[i % n].clone();
                async move { api.create(&PostParams::default(), &cm(&format!("o{i}"), i as u64)).await.map(|_| ()) }
            })
            .buffer_unordered(64)
            .try_collect::<Vec<_>>()
            .await?;
        let listers = loaders.clone();
        let list_clients = 4;
        let res = closed_loop(list_clients, args.duration_secs, move |c, _| {
            let api = listers[c % n].clone();
            async move {
                let l = api.list(&ListParams::default()).await?;
                // The namespace also holds the `kube-root-ca.crt` ConfigMap its controller
                // publishes; only the bench's own objects are counted.
                let ours = l.items.iter().filter(|o| o.metadata.name.as_deref().is_some_and(|n| n.starts_with('o'))).count();
                if ours != size {
                    bail!("listed {ours} of the {size} bench objects");
                }
                Ok(())
            }
        })
        .await;
        report.lists.push((size, res));
    }

    eprintln!("bench: watch fan-out ({} watchers)", args.watchers);
    let (expected, received, phase) = watch_fanout(args, apis).await?;
    report.watch = Some(phase);
    report.watch_expected_events = expected;
    report.watch_received_events = received;
    Ok(report)
}

/// W watchers over the replicas; one writer patches objects at a fixed rate, noting when
/// each write was acknowledged; each watcher's event latency = arrival − acknowledgement.
async fn watch_fanout(args: &ApiBenchArgs, apis: &[Api<ConfigMap>]) -> anyhow::Result<(u64, u64, PhaseResult)> {
    let target = "watched";
    let writer = apis[0].clone();
    let _ = writer.create(&PostParams::default(), &cm(target, 0)).await;
    let acked: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let lat: Arc<Mutex<Vec<u32>>> = Arc::default();
    let received = Arc::new(AtomicU64::new(0));
    let ready = Arc::new(AtomicU64::new(0));
    let stop = tokio_util_stop();
    let mut tasks = Vec::new();
    for w in 0..args.watchers {
        let api = apis[w % apis.len()].clone();
        let (acked, lat, received, ready, stop) = (acked.clone(), lat.clone(), received.clone(), ready.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let wp = WatchParams::default().fields(&format!("metadata.name={target}")).timeout(290);
            let rv = match api.get(target).await {
                Ok(o) => o.metadata.resource_version.unwrap_or_default(),
                Err(_) => return,
            };
            let Ok(stream) = api.watch(&wp, &rv).await else { return };
            ready.fetch_add(1, Ordering::SeqCst);
            let mut stream = std::pin::pin!(stream);
            loop {
                let ev = tokio::select! {
                    _ = stop.notified() => return,
                    e = stream.try_next() => e,
                };
                let Ok(Some(WatchEvent::Modified(o))) = ev else {
                    if matches!(ev, Ok(None) | Err(_)) {
                        return;
                    }
                    continue;
                };
                let now = Instant::now();
                let v = o.data.as_ref().and_then(|d| d.get("v")).cloned().unwrap_or_default();
                let at = acked.lock().expect("lock").get(&v).copied();
                if let Some(at) = at {
                    lat.lock().expect("lock").push(now.saturating_duration_since(at).as_micros() as u32);
                }
                received.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while (ready.load(Ordering::SeqCst) as usize) < args.watchers && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let established = ready.load(Ordering::SeqCst);
    eprintln!("bench: {established} watchers established; writing");
    let writes = args.watch_write_rate * args.watch_secs;
    let interval = Duration::from_secs_f64(1.0 / args.watch_write_rate.max(1) as f64);
    let mut tick = tokio::time::interval(interval);
    let start = Instant::now();
    for i in 1..=writes {
        tick.tick().await;
        // Record the acknowledgement time right after the write returns; an event can
        // arrive before that (latency 0).
        let key = format!("w{i}");
        writer.patch(target, &PatchParams::default(), &Patch::Merge(json!({"data": {"v": key}}))).await?;
        acked.lock().expect("lock").insert(key, Instant::now());
    }
    // Let the last events arrive.
    let expected = writes * established;
    let deadline = Instant::now() + Duration::from_secs(10);
    while received.load(Ordering::Relaxed) < expected && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.notify_waiters();
    for t in tasks {
        t.abort();
    }
    let lat = std::mem::take(&mut *lat.lock().expect("lock"));
    let missing = expected.saturating_sub(lat.len() as u64);
    let phase = PhaseResult::from_latencies(established as usize, lat, missing, start.elapsed().as_secs_f64());
    Ok((expected, received.load(Ordering::Relaxed), phase))
}

fn tokio_util_stop() -> Arc<tokio::sync::Notify> {
    Arc::new(tokio::sync::Notify::new())
}

fn print_report(r: &ApiReport) {
    println!("{:<22} {:>8} {:>11} {:>9} {:>9} {:>9} {:>7}", "phase", "clients", "ops/s", "p50 ms", "p99 ms", "max ms", "errors");
    let row = |name: &str, p: &PhaseResult| {
        println!("{:<22} {:>8} {:>11.0} {:>9.2} {:>9.2} {:>9.2} {:>7}", name, p.clients, p.ops_per_s, p.p50_ms, p.p99_ms, p.max_ms, p.errors)
    };
    for (name, p) in [("create", &r.create), ("update (merge patch)", &r.update), ("get", &r.get)] {
        if let Some(p) = p {
            row(name, p);
        }
    }
    for (size, p) in &r.lists {
        row(&format!("list {size} objects"), p);
    }
    if let Some(w) = &r.watch {
        println!(
            "watch fan-out: {} watchers, {} of {} events received; write-ack → event latency: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            w.clients, r.watch_received_events, r.watch_expected_events, w.p50_ms, w.p99_ms, w.max_ms
        );
    }
    for (what, ms) in [("create", r.create_server_cpu_ms), ("update", r.update_server_cpu_ms)] {
        if let Some(ms) = ms {
            println!("server CPU per {what}: {ms:.2} ms (all servers)");
        }
    }
    if let Some(p) = &r.pods {
        print_pod_phases(p, &row);
    }
}
