//! `keelson bench logs`: `pods/log` on real nodes. Against a cluster whose nodes run
//! `keelson agent` on containerd (`keelson up --agents 1` as root, or any cluster a
//! kubeconfig names, with its agents on this machine), two pods on one node:
//!
//! - a writer that prints `--bytes` of log lines and then a last line saying so: its whole
//!   log is read `--reads` times through the API (kube-rs, and the `kubectl` on PATH if
//!   there is one), each read checked for its size and last line; reported in MB/s, with
//!   the agent's peak resident memory while it serves them.
//! - a ticker that prints numbered lines every `--tick-ms`: `--followers` concurrent
//!   `logs -f` streams follow it for `--follow-secs`, each checked for lines in order
//!   without gaps or repeats; the node's agent's resident memory is sampled before,
//!   throughout and after (from `/proc`, for the `keelson agent` process serving the node).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use futures::{AsyncBufReadExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, LogParams, PostParams};
use serde_json::json;

use crate::agent_process::agent_of;
use crate::percentile::percentile;

#[derive(Args, Clone, Debug)]
pub struct LogsBenchArgs {
    /// Admin kubeconfig of a cluster with real nodes (`keelson up --agents 1`'s DIR/kubeconfig).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: PathBuf,
    /// Bytes of log the writer prints.
    #[arg(long, default_value_t = 100_000_000)]
    pub bytes: u64,
    /// Whole-log reads per client (kube-rs, kubectl).
    #[arg(long, default_value_t = 3)]
    pub reads: usize,
    /// Concurrent `logs -f` followers of the ticker.
    #[arg(long, default_value_t = 50)]
    pub followers: usize,
    /// How long the followers stream, in seconds.
    #[arg(long, default_value_t = 30)]
    pub follow_secs: u64,
    /// Milliseconds between the ticker's lines.
    #[arg(long, default_value_t = 20)]
    pub tick_ms: u64,
    /// Longest the bench waits for a pod or a log, in seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout_secs: u64,
    /// Print one JSON object on stdout instead of the summary.
    #[arg(long)]
    pub json: bool,
}

/// Whole-log reads by one client.
#[derive(Debug, serde::Serialize)]
pub struct ReadFigures {
    pub reads: usize,
    pub bytes_per_read: u64,
    pub median_mb_per_sec: f64,
    pub best_mb_per_sec: f64,
}

/// What `--json` prints.
#[derive(Debug, serde::Serialize)]
pub struct LogsReport {
    pub node: String,
    pub log_bytes: u64,
    pub kube_rs: ReadFigures,
    /// `None` when no `kubectl` is on PATH.
    pub kubectl: Option<ReadFigures>,
    pub followers: usize,
    pub follow_secs: u64,
    /// Lines each follower received: fewest and most.
    pub follower_lines_min: u64,
    pub follower_lines_max: u64,
    /// The agent's largest resident set while the whole log was read.
    pub agent_rss_reading_peak_mb: f64,
    pub agent_rss_before_mb: f64,
    pub agent_rss_peak_mb: f64,
    pub agent_rss_after_mb: f64,
    /// The agent's CPU time while the followers streamed.
    pub agent_cpu_seconds: f64,
}

const NS: &str = "default";
const LABEL: &str = "keelson-bench-logs";
const DONE: &str = "keelson-bench-logs: all written";

/// Where a follower's line sequence went wrong: the ticker's lines are `tick N`, N + 1
/// after N. `None` when `lines` are in order, without gaps or repeats.
pub fn sequence_fault(lines: &[u64]) -> Option<String> {
    lines.windows(2).find(|w| w[1] != w[0] + 1).map(|w| format!("line {} followed line {}", w[1], w[0]))
}

async fn wait_running(pods: &Api<Pod>, name: &str, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let p = pods.get(name).await?;
        if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("pod {name} not Running within {timeout:?}: {:?}", p.status);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// One whole-log read through kube-rs: (bytes, seconds, last line).
async fn read_kube_rs(pods: &Api<Pod>, name: &str) -> anyhow::Result<(u64, f64, String)> {
    let started = Instant::now();
    let mut stream = Box::pin(pods.log_stream(name, &LogParams::default()).await?);
    let mut tally = Tally::default();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = futures::AsyncReadExt::read(&mut stream, &mut buf).await?;
        if n == 0 {
            break;
        }
        tally.add(&buf[..n]);
    }
    Ok((tally.bytes, started.elapsed().as_secs_f64(), last_line(&tally.tail)))
}

/// One whole-log read by `kubectl logs`: (bytes, seconds, last line).
fn read_kubectl(kubeconfig: &std::path::Path, name: &str) -> anyhow::Result<(u64, f64, String)> {
    use std::io::Read;
    let started = Instant::now();
    let mut child = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["logs", "-n", NS, name])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("starting kubectl")?;
    let mut out = child.stdout.take().expect("piped");
    let mut tally = Tally::default();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = out.read(&mut buf)?;
        if n == 0 {
            break;
        }
        tally.add(&buf[..n]);
    }
    let status = child.wait_with_output()?;
    if !status.status.success() {
        bail!("kubectl logs {name}: {}", String::from_utf8_lossy(&status.stderr));
    }
    Ok((tally.bytes, started.elapsed().as_secs_f64(), last_line(&tally.tail)))
}

/// What a read has seen: its size and its last bytes.
#[derive(Default)]
struct Tally {
    bytes: u64,
    tail: Vec<u8>,
}

impl Tally {
    fn add(&mut self, chunk: &[u8]) {
        self.bytes += chunk.len() as u64;
        self.tail.extend_from_slice(chunk);
        if self.tail.len() > 4096 {
            self.tail.drain(..self.tail.len() - 256);
        }
    }
}

fn last_line(tail: &[u8]) -> String {
    String::from_utf8_lossy(tail).trim_end().rsplit('\n').next().unwrap_or("").to_string()
}

/// Checks each read and sums them up.
fn figures(reads: Vec<(u64, f64, String)>, least: u64, who: &str) -> anyhow::Result<ReadFigures> {
    for (bytes, _, last) in &reads {
        if *bytes < least || last != DONE {
            bail!("{who} read {bytes} bytes ending {last:?}; the log holds at least {least} bytes and ends {DONE:?}");
        }
    }
    let mut rates: Vec<f64> = reads.iter().map(|(b, s, _)| *b as f64 / 1e6 / s.max(1e-9)).collect();
    rates.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    Ok(ReadFigures { reads: reads.len(), bytes_per_read: reads.first().map(|r| r.0).unwrap_or(0), median_mb_per_sec: percentile(&rates, 0.5), best_mb_per_sec: rates.last().copied().unwrap_or(0.0) })
}

/// One `logs -f` follower until `until`: the tick numbers it saw.
async fn follow(pods: Api<Pod>, name: String, until: Instant) -> anyhow::Result<Vec<u64>> {
    let params = LogParams { follow: true, tail_lines: Some(1), ..LogParams::default() };
    let mut lines = Box::pin(pods.log_stream(&name, &params).await?.lines());
    let mut seen = Vec::new();
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match tokio::time::timeout(left, lines.try_next()).await {
            Err(_) => break,
            Ok(Ok(Some(line))) => {
                if let Some(n) = line.strip_prefix("tick ").and_then(|n| n.trim().parse().ok()) {
                    seen.push(n);
                }
            }
            Ok(Ok(None)) => bail!("the follow of {name} ended early"),
            Ok(Err(e)) => return Err(e.into()),
        }
    }
    Ok(seen)
}

pub async fn run_logs_bench(args: LogsBenchArgs) -> anyhow::Result<()> {
    let kc = kube::config::Kubeconfig::read_from(&args.kubeconfig).with_context(|| format!("reading {}", args.kubeconfig.display()))?;
    let client = kube::Client::try_from(kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?)?;
    let nodes: Api<Node> = Api::all(client.clone());
    let node = nodes
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|n| n.status.as_ref().and_then(|s| s.node_info.as_ref()).is_some_and(|i| i.container_runtime_version.starts_with("containerd://")))
        .filter_map(|n| n.metadata.name)
        .find(|n| agent_of(n).is_some())
        .context("the cluster has no real node whose agent runs on this machine: start one with `keelson up --agents 1` (as root) and pass its kubeconfig")?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let run = format!("{:x}", std::process::id());
    let (writer, ticker) = (format!("bench-logs-writer-{run}"), format!("bench-logs-ticker-{run}"));
    let pod = |name: &str, script: String| -> Pod {
        serde_json::from_value(json!({"metadata": {"name": name, "labels": {LABEL: run}},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0, "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "keelson.local/busybox:stable", "command": ["sh", "-c", script]}]}}))
        .expect("a valid pod")
    };
    let line = "keelson bench log line 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ";
    pods.create(&PostParams::default(), &pod(&writer, format!("yes '{line}' | head -c {}; echo; echo '{DONE}'; exec sleep 3600", args.bytes))).await?;
    pods.create(&PostParams::default(), &pod(&ticker, format!("i=0; while true; do echo \"tick $i\"; i=$((i+1)); usleep {}; done", args.tick_ms * 1000))).await?;
    let outcome = measure(&args, &pods, &node, &writer, &ticker).await;
    let dp = DeleteParams::default();
    let _ = pods.delete(&writer, &dp).await;
    let _ = pods.delete(&ticker, &dp).await;
    let report = outcome?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("node {}: a {:.1} MB log", report.node, report.log_bytes as f64 / 1e6);
        let show = |who: &str, f: &ReadFigures| println!("  {who}: {} whole reads of {} bytes, median {:.1} MB/s, best {:.1} MB/s", f.reads, f.bytes_per_read, f.median_mb_per_sec, f.best_mb_per_sec);
        show("kube-rs", &report.kube_rs);
        match &report.kubectl {
            Some(f) => show("kubectl logs", f),
            None => println!("  kubectl logs: NOT MEASURED (no kubectl on PATH)"),
        }
        println!("  agent RSS peak while serving the whole reads: {:.1} MiB", report.agent_rss_reading_peak_mb);
        println!("{} followers for {} s: {}–{} lines each, in order", report.followers, report.follow_secs, report.follower_lines_min, report.follower_lines_max);
        println!(
            "agent RSS: {:.1} MiB before, {:.1} MiB peak while following, {:.1} MiB after; {:.2} CPU-seconds while following",
            report.agent_rss_before_mb, report.agent_rss_peak_mb, report.agent_rss_after_mb, report.agent_cpu_seconds
        );
    }
    Ok(())
}

async fn measure(args: &LogsBenchArgs, pods: &Api<Pod>, node: &str, writer: &str, ticker: &str) -> anyhow::Result<LogsReport> {
    let timeout = Duration::from_secs(args.timeout_secs);
    wait_running(pods, writer, timeout).await?;
    wait_running(pods, ticker, timeout).await?;
    let deadline = Instant::now() + timeout;
    loop {
        let tail = pods.logs(writer, &LogParams { tail_lines: Some(1), ..LogParams::default() }).await?;
        if tail.trim_end() == DONE {
            break;
        }
        if Instant::now() > deadline {
            bail!("the writer did not finish its {} bytes within {timeout:?}", args.bytes);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The agent's memory while it serves the whole log, sampled beside the reads.
    let reading_peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let sampler = {
        let (peak, node) = (reading_peak.clone(), node.to_string());
        tokio::spawn(async move {
            loop {
                if let Some(a) = agent_of(&node) {
                    peak.fetch_max(a.rss_bytes, std::sync::atomic::Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let mut kube_rs = Vec::new();
    for _ in 0..args.reads {
        kube_rs.push(read_kube_rs(pods, writer).await?);
    }
    let kube_rs = figures(kube_rs, args.bytes, "kube-rs")?;
    let kubectl_present = std::process::Command::new("kubectl").arg("version").arg("--client").output().is_ok_and(|o| o.status.success());
    let kubectl = if kubectl_present {
        let mut reads = Vec::new();
        for _ in 0..args.reads {
            let (kc, w) = (args.kubeconfig.clone(), writer.to_string());
            reads.push(tokio::task::spawn_blocking(move || read_kubectl(&kc, &w)).await??);
        }
        Some(figures(reads, args.bytes, "kubectl logs")?)
    } else {
        None
    };
    sampler.abort();

    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = agent_of(node).context("the agent went away")?;
    let until = Instant::now() + Duration::from_secs(args.follow_secs);
    let followers: Vec<_> = (0..args.followers).map(|_| tokio::spawn(follow(pods.clone(), ticker.to_string(), until))).collect();
    let mut peak = before.rss_bytes;
    while Instant::now() < until {
        if let Some(a) = agent_of(node) {
            peak = peak.max(a.rss_bytes);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let mut counts = Vec::new();
    for (i, f) in followers.into_iter().enumerate() {
        let seen = f.await?.with_context(|| format!("follower {i}"))?;
        if let Some(fault) = sequence_fault(&seen) {
            bail!("follower {i}: {fault}");
        }
        if seen.is_empty() {
            bail!("follower {i} received no line in {} s", args.follow_secs);
        }
        counts.push(seen.len() as u64);
    }
    let during = agent_of(node).context("the agent went away")?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = agent_of(node).context("the agent went away")?;
    let mb = |b: u64| b as f64 / (1024.0 * 1024.0);
    Ok(LogsReport {
        node: node.to_string(),
        log_bytes: kube_rs.bytes_per_read,
        kube_rs,
        kubectl,
        followers: args.followers,
        follow_secs: args.follow_secs,
        follower_lines_min: counts.iter().copied().min().unwrap_or(0),
        follower_lines_max: counts.iter().copied().max().unwrap_or(0),
        agent_rss_reading_peak_mb: mb(reading_peak.load(std::sync::atomic::Ordering::Relaxed)),
        agent_rss_before_mb: mb(before.rss_bytes),
        agent_rss_peak_mb: mb(peak),
        agent_rss_after_mb: mb(after.rss_bytes),
        agent_cpu_seconds: during.cpu_seconds - before.cpu_seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_follower_sees_every_tick_once_in_order() {
        assert_eq!(sequence_fault(&[]), None);
        assert_eq!(sequence_fault(&[7, 8, 9]), None);
        assert_eq!(sequence_fault(&[7, 9]), Some("line 9 followed line 7".into()));
        assert_eq!(sequence_fault(&[7, 8, 8]), Some("line 8 followed line 8".into()));
        assert_eq!(sequence_fault(&[7, 6]), Some("line 6 followed line 7".into()));
    }

    #[test]
    fn reads_are_checked_then_summed_up() {
        let ok = vec![(110, 1.0, DONE.to_string()), (110, 0.5, DONE.to_string()), (110, 2.0, DONE.to_string())];
        let f = figures(ok, 100, "x").unwrap();
        assert_eq!((f.reads, f.bytes_per_read), (3, 110));
        assert!((f.best_mb_per_sec - 110.0 / 1e6 / 0.5).abs() < 1e-12 && (f.median_mb_per_sec - 110.0 / 1e6).abs() < 1e-12, "{f:?}");
        assert!(figures(vec![(90, 1.0, DONE.to_string())], 100, "x").is_err(), "a short read");
        assert!(figures(vec![(110, 1.0, "tick 3".into())], 100, "x").is_err(), "a read that ends elsewhere");
        assert_eq!(last_line(b"a\nb\nlast\n"), "last");
    }
}
