//! W3C trace context across Keelson's process boundaries.
//!
//! Spans are `tracing` spans; when a process exports traces (`--otlp-endpoint`), the
//! `tracing-opentelemetry` layer gives each one an OpenTelemetry context. This crate moves
//! that context between processes as a W3C `traceparent`
//! (`00-<trace id>-<parent span id>-<flags>`):
//!
//! - on the Kubernetes API, as kube-apiserver accepts it: [`from_headers`] on the server,
//!   [`InjectLayer`] on every component's kube-rs client;
//! - on the store's batch stream and in Raft log entries (by the crates that own those
//!   messages, with [`TraceParent`]'s text form);
//! - in one object annotation, [`POD_ANNOTATION`]: the context of the request that created
//!   a pod, written by the API server so the scheduler and the node agent, which act on
//!   the pod later and from other processes, continue the same trace.
//!
//! Without the exporting layer every function here is a cheap no-op: spans have no
//! context, nothing is written and nothing is continued.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::task::{Context as TaskContext, Poll};

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The W3C header (and gRPC metadata key) that carries a trace context.
pub const HEADER: &str = "traceparent";

/// The annotation the API server puts on a pod created inside a sampled trace: that
/// request's `traceparent`. The scheduler's cycle for the pod and the node agent's first
/// syncs of it continue this trace. Only pods carry it, and only when tracing is on.
pub const POD_ANNOTATION: &str = "trace.keelson.io/traceparent";

/// A span's identity within its trace, as the W3C `traceparent` header writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    pub sampled: bool,
}

/// A `traceparent` value that breaks the W3C rules (receivers ignore such a header).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceParentError {
    #[error("traceparent {0:?} is not version-traceid-parentid-flags in lowercase hex")]
    Shape(String),
    #[error("traceparent {0:?} has version ff, which is never valid")]
    ForbiddenVersion(String),
    #[error("traceparent {0:?} has an all-zero trace or parent id")]
    ZeroId(String),
}

fn lower_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl FromStr for TraceParent {
    type Err = TraceParentError;

    /// Parses as the W3C recommendation says a receiver must: version 00 has exactly four
    /// fields; a later version may append fields after the first four, which are read as
    /// version 00's.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let shape = || TraceParentError::Shape(s.to_string());
        let parts: Vec<&str> = s.trim().split('-').collect();
        if parts.len() < 4 || !lower_hex(parts[0], 2) {
            return Err(shape());
        }
        match parts[0] {
            "ff" => return Err(TraceParentError::ForbiddenVersion(s.to_string())),
            "00" if parts.len() != 4 => return Err(shape()),
            _ => {}
        }
        if !lower_hex(parts[1], 32) || !lower_hex(parts[2], 16) || !lower_hex(parts[3], 2) {
            return Err(shape());
        }
        let trace_id = TraceId::from_hex(parts[1]).map_err(|_| shape())?;
        let span_id = SpanId::from_hex(parts[2]).map_err(|_| shape())?;
        if trace_id == TraceId::INVALID || span_id == SpanId::INVALID {
            return Err(TraceParentError::ZeroId(s.to_string()));
        }
        let flags = u8::from_str_radix(parts[3], 16).map_err(|_| shape())?;
        Ok(TraceParent { trace_id, span_id, sampled: flags & 1 == 1 })
    }
}

impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "00-{}-{}-{:02x}", self.trace_id, self.span_id, u8::from(self.sampled))
    }
}

impl TraceParent {
    /// `span`'s own context, if it has a valid one (only when traces are exported).
    pub fn of(span: &tracing::Span) -> Option<Self> {
        if span.is_disabled() {
            return None;
        }
        let cx = span.context();
        let sc = cx.span().span_context().clone();
        sc.is_valid().then(|| TraceParent { trace_id: sc.trace_id(), span_id: sc.span_id(), sampled: sc.is_sampled() })
    }

    /// The current span's context.
    pub fn current() -> Option<Self> {
        Self::of(&tracing::Span::current())
    }

    /// The current span's context if it is being recorded: what is worth carrying on to
    /// store calls, log entries and annotations.
    pub fn current_sampled() -> Option<Self> {
        Self::current().filter(|p| p.sampled)
    }

    /// The context as a remote parent of spans in this process.
    pub fn context(&self) -> opentelemetry::Context {
        let flags = if self.sampled { TraceFlags::SAMPLED } else { TraceFlags::default() };
        let sc = SpanContext::new(self.trace_id, self.span_id, flags, true, TraceState::default());
        opentelemetry::Context::new().with_remote_span_context(sc)
    }
}

/// Makes `span` a child of the remote `parent`, or the root of a trace of its own when
/// there is none (instead of a child of whatever long-lived span it was created in). Call
/// it before the span is first entered. Records the trace id in the span's `trace_id`
/// field, when it declares one, so log lines carry it.
pub fn continue_trace(span: &tracing::Span, parent: Option<TraceParent>) {
    if span.is_disabled() {
        return;
    }
    let cx = parent.map(|p| p.context()).unwrap_or_default();
    if span.set_parent(cx).is_err() {
        return; // No exporting layer, or the span was already started.
    }
    if let Some(own) = TraceParent::of(span) {
        span.record("trace_id", tracing::field::display(own.trace_id));
    }
}

/// The `traceparent` of an incoming request, if it has a valid one.
pub fn from_headers(headers: &http::HeaderMap) -> Option<TraceParent> {
    headers.get(HEADER)?.to_str().ok()?.parse().ok()
}

/// The creation trace a pod carries in [`POD_ANNOTATION`], if any.
pub fn from_annotations(annotations: Option<&BTreeMap<String, String>>) -> Option<TraceParent> {
    annotations?.get(POD_ANNOTATION)?.parse().ok()
}

/// A tower layer that adds the current span's `traceparent` to each request, unless the
/// request already has one. Put on kube-rs clients, it makes the API server's request
/// spans children of the component's span that sent them.
#[derive(Clone, Copy, Debug, Default)]
pub struct InjectLayer;

impl<S> tower::Layer<S> for InjectLayer {
    type Service = Inject<S>;
    fn layer(&self, inner: S) -> Inject<S> {
        Inject { inner }
    }
}

/// The service [`InjectLayer`] makes.
#[derive(Clone, Debug)]
pub struct Inject<S> {
    inner: S,
}

impl<S, B> tower::Service<http::Request<B>> for Inject<S>
where
    S: tower::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        if !req.headers().contains_key(HEADER) {
            if let Some(parent) = TraceParent::current() {
                if let Ok(v) = http::HeaderValue::from_str(&parent.to_string()) {
                    req.headers_mut().insert(HEADER, v);
                }
            }
        }
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests;
