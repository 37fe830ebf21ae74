//! `keelson-jepsen`: checks recorded histories.
//!
//! Exit codes: 0 = valid (linearizable / watch streams correct), 1 = not,
//! 2 = unreadable input or bad usage.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use keelson_jepsen::{formats, linear, watch, Format, ModelKind};

#[derive(Parser)]
#[command(name = "keelson-jepsen", about = "Jepsen-style consistency checks for Keelson histories")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check a recorded history.
    Check(CheckArgs),
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

/// Failing keys explained in full; the rest are only listed.
const MAX_DETAILED: usize = 3;

/// Outcome of a command: valid, invalid, or unreadable input.
enum Verdict {
    Valid,
    Invalid,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check(args) => check(&args),
    };
    match result {
        Ok(Verdict::Valid) => ExitCode::SUCCESS,
        Ok(Verdict::Invalid) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn check(args: &CheckArgs) -> anyhow::Result<Verdict> {
    let format = Format::from(args.format);
    let started = Instant::now();
    let history = formats::load(format, &args.file)?;
    match args.model {
        ModelArg::Watch => {
            anyhow::ensure!(format == Format::Keelson, "--model watch needs --format keelson");
            let report = watch::check_loaded(&history)?;
            print!("{report}");
            Ok(if report.is_valid() { Verdict::Valid } else { Verdict::Invalid })
        }
        ModelArg::CasRegister | ModelArg::Kv => {
            let kind = if matches!(args.model, ModelArg::Kv) { ModelKind::Kv } else { ModelKind::CasRegister };
            let ops = history.operations()?;
            let report = linear::check(kind, &ops).with_context(|| format!("{}", args.file.display()))?;
            println!("{} in {:.3}s", report.summary(), started.elapsed().as_secs_f64());
            let Some(first) = report.failures.first() else { return Ok(Verdict::Valid) };
            for failure in report.failures.iter().take(MAX_DETAILED) {
                print!("{}", failure.render_text());
            }
            if report.failures.len() > MAX_DETAILED {
                let rest: Vec<String> =
                    report.failures[MAX_DETAILED..].iter().map(|f| format!("{:?}", f.key.as_deref().unwrap_or(""))).collect();
                println!("also not linearizable: keys {}", rest.join(", "));
            }
            if let Some(out) = &args.timeline {
                // The verdict stands even if the timeline cannot be written.
                match std::fs::write(out, first.timeline_html()) {
                    Ok(()) => println!("timeline of the first failing key written to {}", out.display()),
                    Err(e) => eprintln!("warning: cannot write timeline {}: {e}", out.display()),
                }
            }
            Ok(Verdict::Invalid)
        }
    }
}
