//! `keelson hollow-nodes`: Nodes without containers, for trying the scheduler and the
//! controllers (and for benchmarks) without real machines.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

#[derive(Args)]
pub struct HollowArgs {
    /// Admin kubeconfig (e.g. `keelson up`'s DIR/kubeconfig).
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: PathBuf,
    /// How many nodes.
    #[arg(long, default_value_t = 3)]
    count: usize,
    /// Nodes are named PREFIX-0, PREFIX-1, …
    #[arg(long, default_value = "hollow")]
    prefix: String,
    /// The index of the first node (PREFIX-FIRST, …): separate runs can serve, and stop,
    /// separate nodes.
    #[arg(long, default_value_t = 0)]
    first: usize,
    /// CPUs of each node.
    #[arg(long, default_value = "4")]
    cpu: String,
    /// Memory of each node.
    #[arg(long, default_value = "16Gi")]
    memory: String,
}

/// A client of the kubeconfig's current context.
pub async fn kube_client(kubeconfig: &std::path::Path) -> anyhow::Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).with_context(|| format!("reading {}", kubeconfig.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

pub async fn run(args: HollowArgs) -> anyhow::Result<()> {
    let client = kube_client(&args.kubeconfig).await?;
    let mut cfg = keelson_agent::hollow::HollowConfig::new(&args.prefix, args.count);
    cfg.first = args.first;
    cfg.capacity.cpu = args.cpu;
    cfg.capacity.memory = args.memory;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        stop.cancel();
    });
    eprintln!("running {} hollow nodes ({}-{} …); Ctrl-C stops them (the Nodes stay registered)", args.count, args.prefix, args.first);
    keelson_agent::hollow::run(client, cfg, shutdown).await?;
    Ok(())
}
