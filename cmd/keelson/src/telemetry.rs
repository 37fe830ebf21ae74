//! Trace export, set by global flags: `--otlp-endpoint` (or `OTEL_EXPORTER_OTLP_ENDPOINT`)
//! turns it on; `--otlp-protocol grpc|http/protobuf` and `--trace-sample-ratio` shape it.
//! Spans are the process's `tracing` spans at info level and above from Keelson's crates,
//! exported in batches by the tokio runtime; the sampler is parent-based (a caller's
//! decision is followed) with the ratio for new traces.

use clap::{Args, ValueEnum};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};

/// How spans travel to the collector.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum OtlpProtocol {
    /// OTLP over gRPC (the collector's port 4317).
    #[default]
    Grpc,
    /// OTLP over HTTP with protobuf bodies, to `ENDPOINT/v1/traces` (port 4318).
    #[value(name = "http/protobuf")]
    HttpProtobuf,
}

impl OtlpProtocol {
    fn as_flag(self) -> &'static str {
        match self {
            OtlpProtocol::Grpc => "grpc",
            OtlpProtocol::HttpProtobuf => "http/protobuf",
        }
    }
}

/// The global tracing flags of every `keelson` subcommand.
#[derive(Args, Clone, Debug, Default)]
pub struct TraceArgs {
    /// Export spans over OTLP to this collector, e.g. `http://127.0.0.1:4317` (off when unset).
    #[arg(long, global = true, env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// OTLP transport: `grpc` or `http/protobuf`.
    #[arg(long, global = true, env = "OTEL_EXPORTER_OTLP_PROTOCOL", value_enum, default_value_t = OtlpProtocol::Grpc)]
    pub otlp_protocol: OtlpProtocol,
    /// Share of new traces to record, 0 to 1 (a request with a `traceparent` follows its
    /// caller's decision instead).
    #[arg(long, global = true, env = "KEELSON_TRACE_SAMPLE_RATIO", default_value_t = 1.0, value_parser = parse_ratio)]
    pub trace_sample_ratio: f64,
}

fn parse_ratio(s: &str) -> Result<f64, String> {
    let r: f64 = s.trim().parse().map_err(|_| format!("{s:?} is not a number"))?;
    if (0.0..=1.0).contains(&r) {
        Ok(r)
    } else {
        Err(format!("a sampling ratio is between 0 and 1, not {r}"))
    }
}

impl TraceArgs {
    /// The flags again, for child processes (`keelson up` passes them to its servers and nodes).
    pub fn to_argv(&self) -> Vec<String> {
        let Some(endpoint) = &self.otlp_endpoint else { return Vec::new() };
        vec![
            "--otlp-endpoint".into(),
            endpoint.clone(),
            "--otlp-protocol".into(),
            self.otlp_protocol.as_flag().into(),
            "--trace-sample-ratio".into(),
            self.trace_sample_ratio.to_string(),
        ]
    }
}

/// Who is exporting: the OTLP resource of every span.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// `service.name`: `keelson-server`, `keelson-agent`, …
    pub service: &'static str,
    /// `service.instance.id`: the server's or node's name.
    pub instance: String,
}

/// Trace export could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("OTLP endpoint {endpoint:?}: {message}")]
    Exporter { endpoint: String, message: String },
}

/// Where HTTP exports go: the endpoint's `/v1/traces`, unless the endpoint names a path.
pub fn http_traces_url(endpoint: &str) -> String {
    let trimmed = endpoint.trim_end_matches('/');
    let has_path = trimmed.split_once("://").map_or(trimmed, |(_, rest)| rest).contains('/');
    if has_path {
        trimmed.to_string()
    } else {
        format!("{trimmed}/v1/traces")
    }
}

/// The resource attributes spans carry.
pub fn resource_attributes(who: &Identity) -> Vec<KeyValue> {
    vec![
        KeyValue::new("service.name", who.service),
        KeyValue::new("service.instance.id", who.instance.clone()),
        KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
        KeyValue::new("host.name", host_name()),
    ]
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_default()
}

/// The tracer provider exporting for `who`, or `None` when no endpoint is set. Must be
/// called inside the tokio runtime, which runs the exports.
pub fn provider(args: &TraceArgs, who: &Identity) -> Result<Option<SdkTracerProvider>, TelemetryError> {
    let Some(endpoint) = args.otlp_endpoint.clone().filter(|e| !e.trim().is_empty()) else { return Ok(None) };
    let fail = |e: opentelemetry_otlp::ExporterBuildError| TelemetryError::Exporter { endpoint: endpoint.clone(), message: e.to_string() };
    let exporter = match args.otlp_protocol {
        OtlpProtocol::Grpc => opentelemetry_otlp::SpanExporter::builder().with_tonic().with_endpoint(endpoint.clone()).build().map_err(fail)?,
        OtlpProtocol::HttpProtobuf => opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(http_traces_url(&endpoint))
            .build()
            .map_err(fail)?,
    };
    let processor = opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor::builder(exporter, opentelemetry_sdk::runtime::Tokio).build();
    let resource = opentelemetry_sdk::Resource::builder_empty().with_attributes(resource_attributes(who)).build();
    let sampler = Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(args.trace_sample_ratio)));
    Ok(Some(SdkTracerProvider::builder().with_span_processor(processor).with_sampler(sampler).with_resource(resource).build()))
}

/// The layer that turns spans into OpenTelemetry spans for `provider`: Keelson's crates'
/// spans at info level and above (debug spans, and dependencies' spans, are not exported).
pub fn layer<S>(provider: &SdkTracerProvider) -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    use tracing_subscriber::Layer as _;
    let exported = tracing_subscriber::filter::filter_fn(|meta| meta.target().starts_with("keelson") && *meta.level() <= tracing::Level::INFO);
    tracing_opentelemetry::layer().with_tracer(provider.tracer("keelson")).with_filter(exported)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_are_checked() {
        assert_eq!(parse_ratio("0.25"), Ok(0.25));
        assert_eq!(parse_ratio("1"), Ok(1.0));
        assert_eq!(parse_ratio("0"), Ok(0.0));
        assert!(parse_ratio("1.5").unwrap_err().contains("between 0 and 1"));
        assert!(parse_ratio("-0.1").is_err());
        assert!(parse_ratio("half").unwrap_err().contains("not a number"));
    }

    #[test]
    fn http_exports_go_to_the_traces_path() {
        assert_eq!(http_traces_url("http://127.0.0.1:4318"), "http://127.0.0.1:4318/v1/traces");
        assert_eq!(http_traces_url("http://127.0.0.1:4318/"), "http://127.0.0.1:4318/v1/traces");
        assert_eq!(http_traces_url("https://collector:4318/custom/traces"), "https://collector:4318/custom/traces");
    }

    #[test]
    fn flags_round_trip_for_child_processes() {
        assert!(TraceArgs::default().to_argv().is_empty(), "nothing when export is off");
        let args = TraceArgs { otlp_endpoint: Some("http://127.0.0.1:4318".into()), otlp_protocol: OtlpProtocol::HttpProtobuf, trace_sample_ratio: 0.5 };
        assert_eq!(args.to_argv(), ["--otlp-endpoint", "http://127.0.0.1:4318", "--otlp-protocol", "http/protobuf", "--trace-sample-ratio", "0.5"]);
    }

    #[test]
    fn spans_carry_who_exported_them() {
        let attrs = resource_attributes(&Identity { service: "keelson-agent", instance: "node-1".into() });
        let get = |k: &str| attrs.iter().find(|kv| kv.key.as_str() == k).map(|kv| kv.value.to_string());
        assert_eq!(get("service.name").as_deref(), Some("keelson-agent"));
        assert_eq!(get("service.instance.id").as_deref(), Some("node-1"));
        assert!(get("service.version").is_some() && get("host.name").is_some());
    }

    // The batch processor's shutdown waits for its task, which needs a worker thread.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn no_endpoint_no_provider() {
        let who = Identity { service: "keelson-server", instance: "keelson-1".into() };
        assert!(provider(&TraceArgs::default(), &who).unwrap().is_none());
        let on = TraceArgs { otlp_endpoint: Some("http://127.0.0.1:4317".into()), ..Default::default() };
        let p = provider(&on, &who).unwrap().expect("a provider");
        let _ = p.shutdown();
    }
}
