//! `keelson bench proxy`: the cost of keelson-proxy's syncs with the real `nft`, as root,
//! in a network namespace the bench creates and deletes. First the whole table of N
//! Services × M endpoints is written (the proxy's first sync and its hourly resync), a few
//! times; then, over and over, one Service's endpoints change (one endpoint replaced by a
//! new address) and only the diff is applied, as every other sync does. Reported for
//! both: render (the whole model from shared objects, as the proxy renders from its
//! stores, reusing the rules of unchanged Services), diff and `nft -f` apply, p50 and
//! p99, and the script's size.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use keelson_proxy::render::{render_cached, replace_script, Model, NodeInfo, RenderCache};
use serde_json::json;

use crate::percentile::percentile_ms;

#[derive(Args, Clone, Debug)]
pub struct ProxyBenchArgs {
    /// NodePort Services in the table.
    #[arg(long, default_value_t = 1000)]
    pub services: usize,
    /// Ready endpoints per Service.
    #[arg(long, default_value_t = 10)]
    pub endpoints: usize,
    /// Full syncs (the whole table replaced) to time.
    #[arg(long, default_value_t = 5)]
    pub full_runs: usize,
    /// One-Service endpoint changes to time.
    #[arg(long, default_value_t = 50)]
    pub runs: usize,
    /// Print one JSON object on stdout instead of the summary.
    #[arg(long)]
    pub json: bool,
}

/// p50 and p99 of one measured step, in milliseconds.
#[derive(Debug, serde::Serialize)]
pub struct Percentiles {
    pub p50_ms: f64,
    pub p99_ms: f64,
}

impl Percentiles {
    fn of(mut d: Vec<Duration>) -> Self {
        d.sort();
        Percentiles { p50_ms: percentile_ms(&d, 0.50), p99_ms: percentile_ms(&d, 0.99) }
    }
}

/// One kind of sync, measured.
#[derive(Debug, serde::Serialize)]
pub struct SyncFigures {
    pub runs: usize,
    pub script_bytes: usize,
    pub render: Percentiles,
    pub diff: Percentiles,
    pub apply: Percentiles,
    /// render + diff + apply.
    pub total: Percentiles,
}

/// What `--json` prints.
#[derive(Debug, serde::Serialize)]
pub struct ProxyReport {
    pub services: usize,
    pub endpoints: usize,
    pub full: SyncFigures,
    pub one_service_change: SyncFigures,
}

/// The bench's namespace, deleted on drop.
struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn service(i: usize) -> anyhow::Result<Service> {
    Ok(serde_json::from_value(json!({"metadata": {"name": format!("s{i}"), "namespace": "bench"},
        "spec": {"type": "NodePort", "clusterIP": format!("10.43.{}.{}", i / 250, i % 250 + 1),
            "ports": [{"name": "http", "port": 80, "targetPort": 8080, "nodePort": 30000 + i, "protocol": "TCP"}]}}))?)
}

/// Service `i`'s slice; `generation` shifts its first endpoint to a new address.
fn slice(i: usize, endpoints: usize, generation: usize) -> anyhow::Result<EndpointSlice> {
    let eps: Vec<_> = (0..endpoints)
        .map(|j| {
            let n = i * endpoints + j + if j == 0 { generation * 7919 } else { 0 };
            json!({"addresses": [format!("10.{}.{}.{}", 44 + n / 65536 % 16, n / 256 % 256, n % 256)], "nodeName": "bench", "conditions": {"ready": true, "serving": true, "terminating": false}})
        })
        .collect();
    Ok(serde_json::from_value(json!({"metadata": {"name": format!("s{i}-0"), "namespace": "bench", "labels": {"kubernetes.io/service-name": format!("s{i}")}},
        "addressType": "IPv4", "endpoints": eps, "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}))?)
}

pub async fn run_proxy_bench(args: ProxyBenchArgs) -> anyhow::Result<()> {
    if args.services == 0 || args.endpoints == 0 || args.full_runs == 0 || args.runs == 0 {
        bail!("--services, --endpoints, --full-runs and --runs must be at least 1");
    }
    let ns = Netns(format!("keelson-bench-proxy-{}", std::process::id()));
    let status = std::process::Command::new("ip").args(["netns", "add", &ns.0]).status().context("running ip (root and iproute2 are needed)")?;
    if !status.success() {
        bail!("ip netns add {} failed (the bench needs root)", ns.0);
    }
    let node = NodeInfo { name: "bench".into(), addresses: vec!["192.168.77.2".parse()?], pod_cidrs: vec!["10.42.0.0/16".into()], dns: None };
    let services: Vec<Arc<Service>> = (0..args.services).map(|i| service(i).map(Arc::new)).collect::<anyhow::Result<_>>()?;
    let mut slices: Vec<Arc<EndpointSlice>> = (0..args.services).map(|i| slice(i, args.endpoints, 0).map(Arc::new)).collect::<anyhow::Result<_>>()?;

    let (mut render_t, mut apply_t, mut total_t, mut bytes) = (Vec::new(), Vec::new(), Vec::new(), 0);
    let mut applied = Model::default();
    for run in 0..args.full_runs {
        // A full sync renders everything: a fresh cache.
        let started = Instant::now();
        let model = render_cached(&mut RenderCache::default(), &services, &slices, &node);
        let script = replace_script(&model.table());
        let rendered = started.elapsed();
        let t = Instant::now();
        keelson_proxy::nft::apply_in_netns(&ns.0, &script).await?;
        apply_t.push(t.elapsed());
        render_t.push(rendered);
        total_t.push(started.elapsed());
        bytes = script.len();
        applied = model;
        eprintln!("bench: full sync {}/{}: render {rendered:.1?}, apply {:.1?}", run + 1, args.full_runs, apply_t[run]);
    }
    let full = SyncFigures { runs: args.full_runs, script_bytes: bytes, render: Percentiles::of(render_t), diff: Percentiles::of(vec![Duration::ZERO]), apply: Percentiles::of(apply_t), total: Percentiles::of(total_t) };

    let (mut render_t, mut diff_t, mut apply_t, mut total_t, mut bytes) = (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut cache = RenderCache::default();
    render_cached(&mut cache, &services, &slices, &node);
    for run in 0..args.runs {
        let i = run * 37 % args.services;
        slices[i] = Arc::new(slice(i, args.endpoints, run + 1)?);
        let started = Instant::now();
        let model = render_cached(&mut cache, &services, &slices, &node);
        let rendered = started.elapsed();
        let script = keelson_proxy::diff::diff(&applied, &model);
        let diffed = started.elapsed() - rendered;
        let t = Instant::now();
        keelson_proxy::nft::apply_in_netns(&ns.0, &script).await?;
        apply_t.push(t.elapsed());
        render_t.push(rendered);
        diff_t.push(diffed);
        total_t.push(started.elapsed());
        bytes.push(script.len());
        applied = model;
    }
    // The kernel took every diff; it must hold the chain of the last changed endpoint.
    let last = args.runs - 1;
    let probe = slice(last * 37 % args.services, args.endpoints, last + 1)?;
    let ip = probe.endpoints[0].addresses[0].clone();
    let listed = std::process::Command::new("ip").args(["netns", "exec", &ns.0, "nft", "list", "table", "ip", keelson_proxy::render::TABLE]).output()?;
    if !String::from_utf8_lossy(&listed.stdout).contains(&format!("dnat to {ip}:8080")) {
        bail!("after the incremental syncs the kernel's table lacks the last new endpoint {ip}");
    }
    bytes.sort_unstable();
    let change = SyncFigures { runs: args.runs, script_bytes: bytes[bytes.len() / 2], render: Percentiles::of(render_t), diff: Percentiles::of(diff_t), apply: Percentiles::of(apply_t), total: Percentiles::of(total_t) };
    let report = ProxyReport { services: args.services, endpoints: args.endpoints, full, one_service_change: change };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("keelson-proxy syncs, {} Services × {} endpoints, real nft in a namespace of the bench's:", report.services, report.endpoints);
        for (what, f) in [("full table", &report.full), ("one Service changed", &report.one_service_change)] {
            println!(
                "  {what:<20} {:>3} runs, {:>8} bytes: render p50 {:.1} / p99 {:.1} ms, diff p50 {:.2} / p99 {:.2} ms, nft apply p50 {:.1} / p99 {:.1} ms, total p50 {:.1} / p99 {:.1} ms",
                f.runs, f.script_bytes, f.render.p50_ms, f.render.p99_ms, f.diff.p50_ms, f.diff.p99_ms, f.apply.p50_ms, f.apply.p99_ms, f.total.p50_ms, f.total.p99_ms
            );
        }
    }
    Ok(())
}
