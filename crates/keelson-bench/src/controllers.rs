//! `keelson bench controllers`: a Deployment scaled from 0 to N replicas on hollow nodes
//! (simulated: they report pods Running without containers), against a 3-server cluster
//! started by the bench or any cluster a kubeconfig names. Reported: the time until the
//! ReplicaSet has made every pod, and until the Deployment counts them all available,
//! and pods/s over the whole — bounded by the scheduler and the store when the
//! controllers keep up.

use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Args;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

#[derive(Args, Clone, Debug)]
pub struct ControllersBenchArgs {
    /// Hollow nodes to register.
    #[arg(long, default_value_t = 100)]
    pub nodes: usize,
    /// Replicas the Deployment is scaled to.
    #[arg(long, default_value_t = 3000)]
    pub replicas: i32,
    /// Longest the bench waits, in seconds.
    #[arg(long, default_value_t = 900)]
    pub timeout_secs: u64,
    #[command(flatten)]
    pub target: crate::api::BenchTarget,
}

/// What `--json` prints.
#[derive(Debug, serde::Serialize)]
pub struct ControllersReport {
    pub nodes: usize,
    pub replicas: i32,
    pub available: i32,
    /// Scale → the ReplicaSet reports every pod made.
    pub all_created_seconds: f64,
    /// Scale → the Deployment reports every replica available.
    pub all_available_seconds: f64,
    pub pods_per_s: f64,
}

const NS: &str = "default";

pub async fn run_controllers_bench(args: ControllersBenchArgs) -> anyhow::Result<()> {
    let args_ref = &args;
    let r = crate::api::run_on_cluster(&args.target, |clients| async move { bench(args_ref, &clients[0]).await }, print_summary).await?;
    if r.available < r.replicas {
        bail!("only {} of {} replicas became available within {} s", r.available, r.replicas, args.timeout_secs);
    }
    Ok(())
}

fn print_summary(r: &ControllersReport) {
    println!(
        "Deployment 0 → {} replicas on {} hollow nodes: all pods made in {:.1} s, all available in {:.1} s ({:.0} pods/s); {} available",
        r.replicas, r.nodes, r.all_created_seconds, r.all_available_seconds, r.pods_per_s, r.available
    );
}

async fn bench(args: &ControllersBenchArgs, client: &kube::Client) -> anyhow::Result<ControllersReport> {
    let shutdown = tokio_util::sync::CancellationToken::new();
    let _stop = shutdown.clone().drop_guard();
    let mut cfg = keelson_agent::hollow::HollowConfig::new("ctrl-node", args.nodes);
    cfg.labels = |_| [("keelson.io/bench".to_string(), "controllers".to_string())].into();
    let _hollow = crate::scheduler::start_hollow_nodes(client, cfg, "keelson.io/bench=controllers", &shutdown).await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let name = format!("bench-{:x}", std::process::id());
    let d: Deployment = serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"replicas": 0, "selector": {"matchLabels": {"bench": name}},
        "template": {"metadata": {"labels": {"bench": name}}, "spec": {"nodeSelector": {"keelson.io/bench": "controllers"}, "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "keelson.local/busybox:stable", "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}}}]}}}}))?;
    deployments.create(&PostParams::default(), &d).await?;
    let start = Instant::now();
    deployments.patch(&name, &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": args.replicas}}))).await?;
    eprintln!("bench: scaled {name} to {}", args.replicas);
    let deadline = start + Duration::from_secs(args.timeout_secs);
    let (mut created_at, mut available) = (None, 0);
    while Instant::now() < deadline {
        let d = deployments.get(&name).await?;
        let s = d.status.unwrap_or_default();
        if created_at.is_none() && s.replicas.unwrap_or(0) >= args.replicas {
            created_at = Some(start.elapsed());
        }
        available = s.available_replicas.unwrap_or(0);
        if available >= args.replicas {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let all = start.elapsed();
    let _ = deployments.delete(&name, &DeleteParams::foreground()).await;
    Ok(ControllersReport {
        nodes: args.nodes,
        replicas: args.replicas,
        available,
        all_created_seconds: created_at.unwrap_or(all).as_secs_f64(),
        all_available_seconds: all.as_secs_f64(),
        pods_per_s: available as f64 / all.as_secs_f64().max(1e-9),
    })
}
