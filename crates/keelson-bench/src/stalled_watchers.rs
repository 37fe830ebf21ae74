//! `keelson bench stalled-watchers`: the servers' memory while many watchers stop
//! reading. N watches of ConfigMaps are opened (spread over the servers) and never read
//! again, while a writer changes ConfigMaps at a steady rate; every second the resident
//! memory of each local `keelson server` process of the cluster (by its `--api-listen`)
//! is sampled. A server that buffered
//! without bound for a watcher that does not read would grow with the writes; a bounded
//! one levels off (each watcher's queue is bounded, and a watcher that stays full is cut
//! off). Reports the servers' RSS before, at peak, at the end of the writes and after the
//! watchers were dropped, and the peak growth per stalled watcher.

use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Args;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ListParams, Patch, PatchParams, WatchParams};
use kube::Api;
use serde_json::json;

use crate::agent_process::server_processes;
use crate::api::{api_addresses, clients_from, run_on_cluster_at, BenchTarget};

#[derive(Args, Clone, Debug)]
pub struct StalledWatchersBenchArgs {
    /// Watches opened and then never read.
    #[arg(long, default_value_t = 1000)]
    pub watchers: usize,
    /// ConfigMap writes per second while the watchers are stalled.
    #[arg(long, default_value_t = 100)]
    pub write_rate: u64,
    /// Bytes of data in each written ConfigMap.
    #[arg(long, default_value_t = 4096)]
    pub value_bytes: usize,
    /// How long the writes go on.
    #[arg(long, default_value_t = 60)]
    pub secs: u64,
    #[command(flatten)]
    pub target: BenchTarget,
}

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct StalledWatchersReport {
    pub watchers: usize,
    pub writes: u64,
    pub written_mb: f64,
    /// Local server processes sampled (0 when the cluster runs elsewhere).
    pub servers_sampled: usize,
    /// The largest server's RSS, MiB: before the watchers, the highest seen while they
    /// were stalled, at the end of the writes, and 5 s after the watchers were dropped.
    pub rss_before_mb: f64,
    pub rss_peak_mb: f64,
    pub rss_end_mb: f64,
    pub rss_after_drop_mb: f64,
    /// The largest server's RSS once a second while the writes went on (MiB), so a level
    /// can be told from a climb.
    pub rss_each_second_mb: Vec<f64>,
    /// (peak − before) / stalled watchers per server, KiB.
    pub peak_growth_per_watcher_kb: f64,
}

/// How many of the servers at `apis` run here, and the largest one's RSS in MiB.
fn largest_rss_mb(apis: &[String]) -> (usize, f64) {
    let servers: Vec<_> = server_processes().into_iter().filter(|s| s.api_listen.as_ref().is_some_and(|a| apis.contains(a))).collect();
    (servers.len(), servers.iter().map(|s| s.rss_bytes).max().unwrap_or(0) as f64 / (1024.0 * 1024.0))
}

pub async fn run_stalled_watchers_bench(args: StalledWatchersBenchArgs) -> anyhow::Result<()> {
    let args_ref = &args;
    let run = |clients: Vec<kube::Client>, kubeconfig: std::path::PathBuf| async move {
        let writers: Vec<Api<ConfigMap>> = clients.iter().map(|c| Api::namespaced(c.clone(), "default")).collect();
        // The stalled watches get clients (and so connections) of their own: on a shared
        // HTTP/2 connection they would use up its flow-control window and stall the
        // writer's own responses, which measures the client, not the servers.
        let watchers: Vec<Api<ConfigMap>> = clients_from(&kubeconfig).await?.into_iter().map(|c| Api::namespaced(c, "default")).collect();
        bench(args_ref, &writers, &watchers, &api_addresses(&kubeconfig)?).await
    };
    run_on_cluster_at(&args.target, run, print_report).await?;
    Ok(())
}

async fn bench(args: &StalledWatchersBenchArgs, apis: &[Api<ConfigMap>], watchers: &[Api<ConfigMap>], servers: &[String]) -> anyhow::Result<StalledWatchersReport> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while apis[0].list(&ListParams::default().limit(1)).await.is_err() {
        if Instant::now() > deadline {
            bail!("the API does not answer");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut report = StalledWatchersReport { watchers: args.watchers, ..Default::default() };
    tokio::time::sleep(Duration::from_secs(2)).await;
    (report.servers_sampled, report.rss_before_mb) = largest_rss_mb(servers);

    eprintln!("bench: opening {} watches that are never read", args.watchers);
    // No selector: the watch cache serializes each event once for all of them, so the
    // servers' cost is the stalled watchers' and not one serialization per watcher.
    let params = WatchParams::default();
    let mut stalled = Vec::with_capacity(args.watchers);
    for i in 0..args.watchers {
        // The stream is kept and never polled: its connection stops reading once its
        // buffers are full, and the server is left holding what it could not send.
        stalled.push(Box::pin(watchers[i % watchers.len()].watch(&params, "0").await?));
    }

    eprintln!("bench: {} writes/s of {} B for {} s", args.write_rate, args.value_bytes, args.secs);
    let pad = "x".repeat(args.value_bytes);
    let pp = PatchParams::apply("keelson-bench").force();
    let every = Duration::from_secs_f64(1.0 / args.write_rate.max(1) as f64);
    let (start, mut next_sample) = (Instant::now(), Instant::now());
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while start.elapsed() < Duration::from_secs(args.secs) {
        tick.tick().await;
        let name = format!("stalled-{}", report.writes % 100);
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"bench": "stalled"}}, "data": {"n": report.writes.to_string(), "pad": pad}});
        if let Err(e) = apis[report.writes as usize % apis.len()].patch(&name, &pp, &Patch::Apply(cm)).await {
            eprintln!("bench: write failed: {e}");
        }
        report.writes += 1;
        if Instant::now() >= next_sample {
            let now = largest_rss_mb(servers).1;
            report.rss_each_second_mb.push(now);
            report.rss_peak_mb = report.rss_peak_mb.max(now);
            next_sample += Duration::from_secs(1);
        }
    }
    report.written_mb = (report.writes as f64 * args.value_bytes as f64) / (1024.0 * 1024.0);
    report.rss_end_mb = largest_rss_mb(servers).1;
    report.rss_peak_mb = report.rss_peak_mb.max(report.rss_end_mb);
    drop(stalled);
    tokio::time::sleep(Duration::from_secs(5)).await;
    report.rss_after_drop_mb = largest_rss_mb(servers).1;
    let per_server = args.watchers.div_ceil(apis.len()).max(1) as f64;
    report.peak_growth_per_watcher_kb = (report.rss_peak_mb - report.rss_before_mb).max(0.0) * 1024.0 / per_server;
    Ok(report)
}

fn print_report(r: &StalledWatchersReport) {
    println!("stalled watchers: {} (writes {}, {:.1} MiB written)", r.watchers, r.writes, r.written_mb);
    if r.servers_sampled == 0 {
        println!("  no local keelson server processes to sample (the cluster runs elsewhere)");
        return;
    }
    println!(
        "  largest server RSS: before {:.1} MiB, peak {:.1} MiB, end of writes {:.1} MiB, after the watchers left {:.1} MiB",
        r.rss_before_mb, r.rss_peak_mb, r.rss_end_mb, r.rss_after_drop_mb
    );
    println!("  peak growth per stalled watcher (per server): {:.1} KiB", r.peak_growth_per_watcher_kb);
    let quarters: Vec<String> = (1..=4).filter_map(|q| r.rss_each_second_mb.get((r.rss_each_second_mb.len() * q / 4).saturating_sub(1))).map(|mb| format!("{mb:.1}")).collect();
    println!("  RSS at each quarter of the writes: {} MiB", quarters.join(", "));
}
