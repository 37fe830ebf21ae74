//! `keelson`: wires the crates into subcommands. No logic of its own lives here.

mod cli_admin;
mod cli_agent;
mod cli_backup;
mod cli_cluster;
mod cli_hollow;
mod cli_server;
mod components;
mod logging;
mod status;
mod telemetry;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "keelson", version, about = "Keelson: a Kubernetes-compatible control plane with its own Raft store")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
    #[command(flatten)]
    log: logging::LogArgs,
    #[command(flatten)]
    traces: telemetry::TraceArgs,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run one server replica.
    Server(cli_server::ServerArgs),
    /// Run a whole local cluster of server processes in the foreground.
    Up(cli_cluster::UpArgs),
    /// The cluster at a glance: Raft members and their lag, each server's API health, the
    /// components' lease holders, the nodes.
    Status(status::StatusArgs),
    /// List, add or remove cluster members.
    #[command(subcommand)]
    Member(cli_cluster::MemberCmd),
    /// Read and write keys of the replicated store directly (debugging).
    #[command(subcommand)]
    Kv(cli_cluster::KvCmd),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCmd),
    /// Save a consistent backup of the store from a running cluster.
    Backup(cli_backup::BackupArgs),
    /// Build a new cluster's first server from a backup (new identity, same data).
    Restore(cli_backup::RestoreArgs),
    /// Join tokens.
    #[command(subcommand)]
    Token(cli_admin::TokenCmd),
    /// Certificates.
    #[command(subcommand)]
    Certs(CertsCmd),
    /// Run hollow nodes: Nodes whose pods are reported Running without containers.
    HollowNodes(cli_hollow::HollowArgs),
    /// Run a node: join the cluster, start its containerd and run the pods bound to it.
    Agent(cli_agent::AgentArgs),
    /// Build and import container images without a registry.
    #[command(subcommand)]
    Image(cli_agent::ImageCmd),
}

#[derive(Subcommand)]
enum CertsCmd {
    /// Show the expiry of the cluster's and this server's certificates.
    Check(cli_admin::CertsCheckArgs),
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Drive the replicated store (and, with --compare-etcd, etcd) with concurrent clients.
    Store(keelson_bench::StoreBenchArgs),
    /// Leader kills under a write load: how long writes stall (and, with --compare-etcd, etcd's).
    Failover(keelson_bench::FailoverBenchArgs),
    /// The Kubernetes API: creates, updates, gets, lists and watch fan-out.
    Api(keelson_bench::ApiBenchArgs),
    /// The scheduler: hollow nodes and a burst of pods, pods/s and create→bind latency.
    Scheduler(keelson_bench::SchedulerBenchArgs),
    /// The controllers: a Deployment scaled 0 → N on hollow nodes, time to all available.
    Controllers(keelson_bench::ControllersBenchArgs),
    /// Pod startup on real nodes: create→Running percentiles, the agents' memory and CPU.
    Pods(keelson_bench::PodsBenchArgs),
    /// The service proxy as root: a whole 1,000-Service table, then one-Service changes as diffs.
    Proxy(keelson_bench::ProxyBenchArgs),
    /// HTTP through the built-in ingress, side by side with the backend direct and through nginx.
    Ingress(keelson_bench::IngressBenchArgs),
    /// Watchers that stop reading: the servers' memory while writes go on.
    StalledWatchers(keelson_bench::StalledWatchersBenchArgs),
    /// Logs on a real node: a large log's read throughput, and the agent's memory under many followers.
    Logs(keelson_bench::LogsBenchArgs),
}

impl Cmd {
    /// Who the process's spans say exported them.
    fn trace_identity(&self) -> telemetry::Identity {
        let host = || std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_default();
        match self {
            Cmd::Server(a) => telemetry::Identity { service: "keelson-server", instance: a.name().to_string() },
            Cmd::Agent(a) => telemetry::Identity { service: "keelson-agent", instance: a.name().map(str::to_string).unwrap_or_else(host) },
            Cmd::HollowNodes(_) => telemetry::Identity { service: "keelson-hollow-nodes", instance: host() },
            _ => telemetry::Identity { service: "keelson", instance: host() },
        }
    }

    /// Commands that run until stopped log at `info` by default; one-shot commands only
    /// when `--log-level` (or `KEELSON_LOG`) asks.
    fn default_log_filter(&self) -> Option<&'static str> {
        match self {
            Cmd::Server(_) | Cmd::Up(_) | Cmd::Agent(_) | Cmd::HollowNodes(_) => Some(logging::DEFAULT_FILTER),
            _ => None,
        }
    }
}

fn main() -> anyhow::Result<()> {
    // One TLS crypto provider for the API server and kube-rs clients.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    // Spans are exported from the runtime's tasks; the provider is made inside it.
    let traces = {
        let _in_runtime = rt.enter();
        telemetry::provider(&cli.traces, &cli.command.trace_identity())?
    };
    logging::init(&cli.log, cli.command.default_log_filter(), traces.as_ref())?;
    let outcome = run(cli, &rt);
    if let Some(provider) = traces {
        // Whatever is still batched leaves before the process does.
        if let Err(e) = provider.shutdown() {
            eprintln!("keelson: exporting the last spans: {e}");
        }
    }
    outcome
}

fn run(cli: Cli, rt: &tokio::runtime::Runtime) -> anyhow::Result<()> {
    match cli.command {
        Cmd::Server(args) => rt.block_on(cli_server::run(args)),
        Cmd::Up(args) => rt.block_on(cli_cluster::up(args, &cli.log, &cli.traces)),
        Cmd::Status(args) => rt.block_on(status::run(args)),
        Cmd::Member(cmd) => rt.block_on(cli_cluster::member(cmd)),
        Cmd::Kv(cmd) => rt.block_on(cli_cluster::kv(cmd)),
        Cmd::Bench(BenchCmd::Store(args)) => rt.block_on(keelson_bench::run_store_bench(args)),
        Cmd::Bench(BenchCmd::Failover(args)) => rt.block_on(keelson_bench::run_failover_bench(args)),
        Cmd::Bench(BenchCmd::Api(args)) => rt.block_on(keelson_bench::run_api_bench(args)),
        Cmd::Bench(BenchCmd::Scheduler(args)) => rt.block_on(keelson_bench::run_scheduler_bench(args)),
        Cmd::Bench(BenchCmd::Controllers(args)) => rt.block_on(keelson_bench::run_controllers_bench(args)),
        Cmd::Bench(BenchCmd::Pods(args)) => rt.block_on(keelson_bench::run_pods_bench(args)),
        Cmd::Bench(BenchCmd::Proxy(args)) => rt.block_on(keelson_bench::run_proxy_bench(args)),
        Cmd::Bench(BenchCmd::Ingress(args)) => rt.block_on(keelson_bench::run_ingress_bench(args)),
        Cmd::Bench(BenchCmd::Logs(args)) => rt.block_on(keelson_bench::run_logs_bench(args)),
        Cmd::Bench(BenchCmd::StalledWatchers(args)) => rt.block_on(keelson_bench::run_stalled_watchers_bench(args)),
        Cmd::Backup(args) => rt.block_on(cli_backup::backup(args)),
        Cmd::Restore(args) => cli_backup::restore(args),
        Cmd::Token(cmd) => rt.block_on(cli_admin::token(cmd)),
        Cmd::Certs(CertsCmd::Check(args)) => cli_admin::certs_check(args),
        Cmd::HollowNodes(args) => rt.block_on(cli_hollow::run(args)),
        Cmd::Agent(args) => rt.block_on(cli_agent::agent(args)),
        Cmd::Image(cmd) => rt.block_on(cli_agent::image(cmd)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_flags_are_global() {
        let cli = Cli::try_parse_from(["keelson", "status", "--json", "--log-format", "json", "--log-level", "info,keelson_raft=debug"]).unwrap();
        assert_eq!(cli.log.log_format, logging::LogFormat::Json);
        assert_eq!(cli.log.log_level.as_deref(), Some("info,keelson_raft=debug"));
        assert!(cli.command.default_log_filter().is_none(), "status is one-shot");
        let cli = Cli::try_parse_from(["keelson", "--log-format", "text", "hollow-nodes", "--kubeconfig", "k"]).unwrap();
        assert_eq!(cli.log.log_format, logging::LogFormat::Text);
        assert!(cli.command.default_log_filter().is_some());
        assert!(Cli::try_parse_from(["keelson", "server", "--log-format", "xml"]).is_err());
        assert!(Cli::try_parse_from(["keelson", "server", "--log-level", "info,keelson_raft=loud"]).is_err());
    }
}
