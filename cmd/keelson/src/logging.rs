//! The process's log output, set by two global flags: `--log-format text|json` and
//! `--log-level` (a `RUST_LOG`-style filter such as `info,keelson_raft=debug`, whose
//! environment form is `KEELSON_LOG`). Logs go to stderr, one line per event.

use clap::{Args, ValueEnum};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

/// What a long-running command logs when neither `--log-level` nor `KEELSON_LOG` is given.
pub const DEFAULT_FILTER: &str = "info,openraft=warn,h2=warn,tower=warn";

/// How each event is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (coloured on a terminal).
    #[default]
    Text,
    /// One JSON object per line: timestamp, level, target, message and the event's fields,
    /// the current span (`span`) and every enclosing span with its fields (`spans`).
    Json,
}

impl LogFormat {
    fn as_flag(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

/// The global logging flags of every `keelson` subcommand.
#[derive(Args, Clone, Debug, Default)]
pub struct LogArgs {
    /// Log line format: `text` or `json` (one object per line).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Which events to log, per module, in `RUST_LOG` syntax: `warn`,
    /// `info,keelson_raft=debug` (default for server, agent, up and hollow-nodes: info, with
    /// openraft, h2 and tower at warn; one-shot commands log nothing unless asked).
    #[arg(long, global = true, env = "KEELSON_LOG", value_parser = parse_filter)]
    pub log_level: Option<String>,
}

/// Checks a `RUST_LOG`-style filter (the value is kept as text: an `EnvFilter` is built
/// once, when logging starts).
pub fn parse_filter(s: &str) -> Result<String, String> {
    EnvFilter::builder().parse(s).map(|_| s.to_string()).map_err(|e| format!("invalid log filter {s:?}: {e}"))
}

impl LogArgs {
    /// The flags again, for child processes (`keelson up` passes them to its servers).
    pub fn to_argv(&self) -> Vec<String> {
        let mut argv = vec!["--log-format".to_string(), self.log_format.as_flag().to_string()];
        if let Some(level) = &self.log_level {
            argv.extend(["--log-level".to_string(), level.clone()]);
        }
        argv
    }
}

/// The log layer: events `filter` lets through, written to `writer` in `format`.
pub fn log_layer<W>(format: LogFormat, filter: &str, ansi: bool, writer: W) -> Box<dyn Layer<Registry> + Send + Sync>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    // `filter` was checked by `parse_filter`; a default is a constant known to parse.
    let filter = EnvFilter::builder().parse_lossy(filter);
    let layer = tracing_subscriber::fmt::layer().with_writer(writer);
    match format {
        LogFormat::Text => layer.with_ansi(ansi).with_filter(filter).boxed(),
        LogFormat::Json => layer.json().flatten_event(true).with_current_span(true).with_span_list(true).with_filter(filter).boxed(),
    }
}

/// A subscriber writing to `writer` in `format`, keeping the events `filter` lets through.
#[cfg(test)]
pub fn subscriber<W>(format: LogFormat, filter: &str, ansi: bool, writer: W) -> impl tracing::Subscriber + Send + Sync
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::registry().with(log_layer(format, filter, ansi, writer))
}

/// Installs the process-wide subscriber: logs to stderr, filtered by the flags or
/// `default`, and the spans' export when `traces` is given. With `default` `None`
/// (one-shot commands) nothing is logged unless a level was asked for.
pub fn init(args: &LogArgs, default: Option<&str>, traces: Option<&opentelemetry_sdk::trace::SdkTracerProvider>) -> anyhow::Result<()> {
    let filter = args.log_level.as_deref().or(default);
    if filter.is_none() && traces.is_none() {
        return Ok(());
    }
    use std::io::IsTerminal;
    let ansi = std::io::stderr().is_terminal();
    let logs = filter.map(|f| log_layer(args.log_format, f, ansi, std::io::stderr));
    let exported = traces.map(crate::telemetry::layer);
    // `try_init` also routes the `log` crate's records (some dependencies') into tracing.
    use tracing_subscriber::util::SubscriberInitExt;
    tracing_subscriber::registry().with(logs).with(exported).try_init()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Collects what a subscriber writes.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    fn log_some_events(format: LogFormat, filter: &str) -> String {
        let out = Captured::default();
        let writer = out.clone();
        let sub = subscriber(format, filter, false, move || writer.clone());
        tracing::subscriber::with_default(sub, || {
            let span = tracing::info_span!("request", verb = "get", resource = "pods");
            let _entered = span.enter();
            tracing::info!(count = 3, "listed");
            tracing::warn!(target: "keelson_raft::log", "slow append");
            tracing::debug!(target: "keelson_raft::log", "appended");
        });
        out.text()
    }

    #[test]
    fn filters_parse_in_rust_log_syntax() {
        for ok in ["info", "warn", "info,keelson_raft=debug", "keelson_apiserver::http=trace,warn"] {
            assert_eq!(parse_filter(ok).as_deref(), Ok(ok));
        }
        assert!(parse_filter("info,keelson_raft=loud").is_err());
        assert!(parse_filter(DEFAULT_FILTER).is_ok());
    }

    #[test]
    fn json_lines_carry_level_target_message_fields_and_spans() {
        let out = log_some_events(LogFormat::Json, "info,keelson_raft=debug");
        let lines: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}"))).collect();
        assert_eq!(lines.len(), 3, "{out}");
        let first = &lines[0];
        assert_eq!(first["level"], "INFO");
        assert_eq!(first["message"], "listed");
        assert_eq!(first["count"], 3);
        assert!(first["target"].as_str().unwrap().starts_with("keelson"), "{first}");
        assert!(first["timestamp"].is_string());
        assert_eq!(first["span"]["name"], "request");
        assert_eq!(first["span"]["verb"], "get");
        assert_eq!(first["spans"][0]["resource"], "pods");
        assert_eq!(lines[1]["level"], "WARN");
        assert_eq!(lines[1]["target"], "keelson_raft::log");
        assert_eq!(lines[2]["level"], "DEBUG");
    }

    #[test]
    fn levels_apply_per_module() {
        let out = log_some_events(LogFormat::Json, "warn");
        let levels: Vec<String> = out.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["level"].as_str().unwrap().to_string()).collect();
        assert_eq!(levels, ["WARN"]);
        let out = log_some_events(LogFormat::Text, "info");
        assert!(out.contains("listed") && out.contains("slow append") && !out.contains("appended"), "{out}");
        assert!(serde_json::from_str::<serde_json::Value>(out.lines().next().unwrap()).is_err(), "text is not JSON");
    }

    #[test]
    fn flags_round_trip_for_child_processes() {
        let args = LogArgs { log_format: LogFormat::Json, log_level: Some("warn".into()) };
        assert_eq!(args.to_argv(), ["--log-format", "json", "--log-level", "warn"]);
        assert_eq!(LogArgs::default().to_argv(), ["--log-format", "text"]);
    }
}
