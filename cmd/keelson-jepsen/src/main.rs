//! `keelson-jepsen`: checks recorded histories.
//!
//! Exit codes: 0 = valid (linearizable / watch streams correct), 1 = not,
//! 2 = unreadable input or bad usage.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use keelson_jepsen::{formats, linear, watch, Format, ModelKind};

#[derive(Parser)]
#[command(
    name = "keelson-jepsen",
    about = "Jepsen-style consistency checks for Keelson histories"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check a recorded history.
    Check(CheckArgs),
    /// Start a cluster, run a workload under faults, heal, settle and check.
    Run(RunArgs),
}

#[derive(clap::Args)]
struct RunArgs {
    /// Servers in the cluster (3 or 5).
    #[arg(long, default_value_t = 3)]
    servers: usize,
    /// Nodes: `keelson agent`s with their own containerd, each in a network namespace
    /// (needs root; the self-heal workload needs at least 2).
    #[arg(long, default_value_t = 0)]
    nodes: usize,
    /// What to run: register, watch and lease drive the Kubernetes API of every server;
    /// store-register and store-watch drive the internal store API.
    #[arg(long, value_enum, default_value = "register")]
    workload: WorkloadArg,
    /// Fault families, comma-separated: kill, pause, partition, membership, latency;
    /// node-kill, node-pause, node-partition, node-drain (need --nodes); lease-kill,
    /// lease-pause, lease-partition (self-heal: kill, freeze or cut off the server holding
    /// the controller manager's or the scheduler's Lease, in turn).
    #[arg(long, value_delimiter = ',', default_value = "kill,pause,partition")]
    nemesis: Vec<String>,
    /// How long the workload runs under faults, e.g. 60s or 10m.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    time_limit: std::time::Duration,
    /// Time between a fault and its heal.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    nemesis_interval: std::time::Duration,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Concurrent clients.
    #[arg(long, default_value_t = 10)]
    clients: usize,
    /// Artifacts directory (default: jepsen-runs/<unix time>).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The keelson binary (default: next to this one).
    #[arg(long)]
    keelson_bin: Option<PathBuf>,
    /// Force loopback processes even as root (no partitions).
    #[arg(long)]
    loopback: bool,
    /// lease workload: the election's lease duration (whole seconds).
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    lease_duration: std::time::Duration,
    /// lease workload: the election's renew deadline.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    renew_deadline: std::time::Duration,
    /// lease workload: the election's retry period.
    #[arg(long, default_value = "500ms", value_parser = parse_duration)]
    retry_period: std::time::Duration,
    /// lease workload: a failover must come within lease duration + retry period + this.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    failover_slack: std::time::Duration,
}

#[derive(Clone, Copy, ValueEnum)]
enum WorkloadArg {
    /// Registers as ConfigMaps through the Kubernetes API (GET, PUT/POST, cas as GET +
    /// PUT with a resourceVersion precondition).
    #[value(alias = "kube-register")]
    Register,
    /// Kubernetes API watches of ConfigMaps across API servers, cut off and resumed,
    /// checked against the store's own watch.
    #[value(alias = "kube-watch")]
    Watch,
    /// Compare-and-set registers on the internal store API.
    StoreRegister,
    /// Watchers following writers on the internal store API.
    StoreWatch,
    /// One contender per server elected through a Lease (the real elector), appending
    /// writes fenced on its term's token: terms never go back, acknowledged writes are
    /// stored, fenced ones are not; failover times after faults on the holder.
    Lease,
    /// A Deployment, a DaemonSet and a Job on real nodes (--nodes) while nodes lose power,
    /// freeze or are cut off: pods bound once, no surge, replicas replaced (recovery
    /// times), one daemon per node, completions exact, converged after healing, no
    /// acknowledged write lost.
    SelfHeal,
}

fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    keelson_apimachinery::duration::parse_flag(s).map_err(|e| e.to_string())
}

#[derive(clap::Args)]
struct CheckArgs {
    /// Model to check against.
    #[arg(long, value_enum)]
    model: ModelArg,
    /// Input format.
    #[arg(long, value_enum)]
    format: FormatArg,
    /// Write an HTML timeline of the failing sub-history here.
    #[arg(long, value_name = "OUT.html")]
    timeline: Option<PathBuf>,
    /// History file.
    file: PathBuf,
}

#[derive(Clone, Copy, ValueEnum)]
enum ModelArg {
    CasRegister,
    Kv,
    Watch,
}

#[derive(Clone, Copy, ValueEnum)]
enum FormatArg {
    JepsenLog,
    JepsenEdn,
    Keelson,
}

impl From<FormatArg> for Format {
    fn from(f: FormatArg) -> Format {
        match f {
            FormatArg::JepsenLog => Format::JepsenLog,
            FormatArg::JepsenEdn => Format::JepsenEdn,
            FormatArg::Keelson => Format::Keelson,
        }
    }
}

/// Outcome of a command: valid, invalid, or unreadable input.
enum Verdict {
    Valid,
    Invalid,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut out = String::new();
    let result = match cli.command {
        Command::Check(args) => check(&args, &mut out),
        Command::Run(args) => run(&args, &mut out),
    };
    // A closed stdout (e.g. piped into `head`) must not turn into a panic.
    let _ = std::io::stdout().lock().write_all(out.as_bytes());
    match result {
        Ok(Verdict::Valid) => ExitCode::SUCCESS,
        Ok(Verdict::Invalid) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn check(args: &CheckArgs, out: &mut String) -> anyhow::Result<Verdict> {
    let format = Format::from(args.format);
    let started = Instant::now();
    let history = formats::load(format, &args.file)?;
    match args.model {
        ModelArg::Watch => {
            anyhow::ensure!(
                format == Format::Keelson,
                "--model watch needs --format keelson"
            );
            let report = watch::check_loaded(&history)?;
            out.push_str(&report.to_string());
            Ok(if report.is_valid() {
                Verdict::Valid
            } else {
                Verdict::Invalid
            })
        }
        ModelArg::CasRegister | ModelArg::Kv => {
            let kind = if matches!(args.model, ModelArg::Kv) {
                ModelKind::Kv
            } else {
                ModelKind::CasRegister
            };
            let ops = history.operations()?;
            let report =
                linear::check(kind, &ops).with_context(|| format!("{}", args.file.display()))?;
            let _ = writeln!(
                out,
                "{} in {:.3}s",
                report.summary(),
                started.elapsed().as_secs_f64()
            );
            let Some(failure) = report.failures.first() else {
                return Ok(Verdict::Valid);
            };
            out.push_str(&failure.render_text());
            if let Some(path) = &args.timeline {
                // The verdict stands even if the timeline cannot be written.
                match std::fs::write(path, failure.timeline_html()) {
                    Ok(()) => {
                        let _ = writeln!(out, "timeline written to {}", path.display());
                    }
                    Err(e) => eprintln!("warning: cannot write timeline {}: {e}", path.display()),
                }
            }
            Ok(Verdict::Invalid)
        }
    }
}

fn run(args: &RunArgs, out: &mut String) -> anyhow::Result<Verdict> {
    use keelson_chaos::{Isolation, NemesisFamily};
    let mut families = Vec::new();
    for n in &args.nemesis {
        families.push(match n.as_str() {
            "kill" => NemesisFamily::Kill,
            "pause" => NemesisFamily::Pause,
            "partition" => NemesisFamily::Partition,
            "membership" => NemesisFamily::Membership,
            "latency" => NemesisFamily::Latency,
            "node-kill" => NemesisFamily::NodeKill,
            "node-pause" => NemesisFamily::NodePause,
            "node-partition" => NemesisFamily::NodePartition,
            "lease-kill" => NemesisFamily::LeaseKill,
            "lease-partition" => NemesisFamily::LeasePartition,
            "lease-pause" => NemesisFamily::LeasePause,
            "node-drain" => NemesisFamily::NodeDrain,
            "none" => continue,
            other => anyhow::bail!(
                "unknown nemesis {other:?}: use kill, pause, partition, membership, latency, node-kill, node-pause, node-partition, node-drain, lease-kill, lease-pause, lease-partition or none"
            ),
        });
    }
    anyhow::ensure!(args.servers >= 1, "--servers must be at least 1");
    let node_families = [NemesisFamily::NodeKill, NemesisFamily::NodePause, NemesisFamily::NodePartition, NemesisFamily::NodeDrain];
    if families.iter().any(|f| node_families.contains(f)) {
        anyhow::ensure!(args.nodes >= 1, "node-kill, node-pause and node-partition need nodes: add --nodes N");
    }
    if matches!(args.workload, WorkloadArg::SelfHeal) {
        anyhow::ensure!(args.nodes >= 2, "the self-heal workload needs at least 2 nodes (--nodes 3), so pods have somewhere to go");
        anyhow::ensure!(!args.loopback, "the self-heal workload runs real nodes, which need network namespaces: drop --loopback");
    }
    let keelson_bin = match &args.keelson_bin {
        Some(p) => p.clone(),
        None => std::env::current_exe()?.with_file_name("keelson"),
    };
    anyhow::ensure!(keelson_bin.exists(), "keelson binary not found at {} (use --keelson-bin)", keelson_bin.display());
    let dir = args.dir.clone().unwrap_or_else(|| {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        PathBuf::from(format!("jepsen-runs/{t}"))
    });
    let opts = keelson_jepsen_runner::RunOptions {
        servers: args.servers,
        nodes: args.nodes,
        node_args: Vec::new(),
        converge: std::time::Duration::from_secs(180),
        workload: match args.workload {
            WorkloadArg::Register => keelson_jepsen_runner::Workload::KubeRegister,
            WorkloadArg::Watch => keelson_jepsen_runner::Workload::KubeWatch,
            WorkloadArg::StoreRegister => keelson_jepsen_runner::Workload::Register,
            WorkloadArg::StoreWatch => keelson_jepsen_runner::Workload::Watch,
            WorkloadArg::Lease => keelson_jepsen_runner::Workload::Lease,
            WorkloadArg::SelfHeal => keelson_jepsen_runner::Workload::SelfHeal,
        },
        nemesis: families,
        time_limit: args.time_limit,
        nemesis_interval: args.nemesis_interval,
        seed: args.seed,
        clients: args.clients,
        dir,
        keelson_bin,
        isolation: if args.loopback { Isolation::Loopback } else { Isolation::Auto },
        lease: keelson_jepsen_runner::LeaseWorkload {
            lease_duration: args.lease_duration,
            renew_deadline: args.renew_deadline,
            retry_period: args.retry_period,
            slack: args.failover_slack,
            ..Default::default()
        },
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let verdict = rt.block_on(keelson_jepsen_runner::run(opts))?;
    let _ = writeln!(
        out,
        "{}: {} operations (ok {}, fail {}, info {}), {} faults injected, availability during faults {}",
        if verdict.valid { "VALID" } else { "INVALID" },
        verdict.invoked,
        verdict.ok,
        verdict.fail,
        verdict.info,
        verdict.faults,
        verdict.availability_during_faults.map(|a| format!("{:.1}%", a * 100.0)).unwrap_or("n/a".into()),
    );
    if let Some(f) = &verdict.failover {
        let ms = |v: Option<u64>| v.map(|v| format!("{v} ms")).unwrap_or("n/a".into());
        let _ = writeln!(
            out,
            "failover: {} fault(s) hit the lease holder, {} failover(s): p50 {}, max {} (bound {} ms); {} survived, {} not recovered, {} inconclusive",
            f.holder_hits,
            f.failovers_ms.len(),
            ms(f.p50_ms()),
            ms(f.max_ms()),
            f.bound_ms,
            f.survived,
            f.unrecovered,
            f.inconclusive,
        );
    }
    if let Some(r) = &verdict.self_heal {
        let ms = |v: Option<u64>| v.map(|v| format!("{:.1} s", v as f64 / 1000.0)).unwrap_or("n/a".into());
        let affected = r.recoveries.iter().filter(|x| x.affected).count();
        let _ = writeln!(
            out,
            "self-heal: {affected} fault(s) took Ready replicas away; node fault to all replicas Ready again: p50 {}, p99 {}; at most {} Deployment pods Running at once",
            ms(r.recovery_percentile(50.0)),
            ms(r.recovery_percentile(99.0)),
            r.max_running,
        );
    }
    let _ = writeln!(out, "{}", verdict.summary);
    let _ = writeln!(out, "artifacts: {}", verdict.dir.display());
    Ok(if verdict.valid { Verdict::Valid } else { Verdict::Invalid })
}
