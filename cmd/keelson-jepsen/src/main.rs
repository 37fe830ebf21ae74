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
