use super::*;
use opentelemetry::trace::TracerProvider as _;
use tracing_subscriber::layer::SubscriberExt;

const SAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[test]
fn parses_and_writes_the_w3c_form() {
    let p: TraceParent = SAMPLE.parse().unwrap();
    assert_eq!(p.trace_id, TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap());
    assert_eq!(p.span_id, SpanId::from_hex("00f067aa0ba902b7").unwrap());
    assert!(p.sampled);
    assert_eq!(p.to_string(), SAMPLE);
    let unsampled: TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00".parse().unwrap();
    assert!(!unsampled.sampled);
    assert!(unsampled.to_string().ends_with("-00"));
    // Flags other than sampled are read but not kept.
    assert!("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03".parse::<TraceParent>().unwrap().sampled);
}

#[test]
fn later_versions_are_read_by_their_first_four_fields() {
    let p: TraceParent = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-adds".parse().unwrap();
    assert_eq!(p.to_string(), SAMPLE);
}

#[test]
fn malformed_values_are_refused() {
    let shape = [
        "",
        "00",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
        "0-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
    ];
    for s in shape {
        assert!(matches!(s.parse::<TraceParent>(), Err(TraceParentError::Shape(_))), "{s:?}");
    }
    assert!(matches!(
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".parse::<TraceParent>(),
        Err(TraceParentError::ForbiddenVersion(_))
    ));
    for zero in ["00-00000000000000000000000000000000-00f067aa0ba902b7-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"] {
        assert!(matches!(zero.parse::<TraceParent>(), Err(TraceParentError::ZeroId(_))), "{zero}");
    }
}

#[test]
fn headers_and_annotations_yield_only_valid_contexts() {
    let mut h = http::HeaderMap::new();
    assert_eq!(from_headers(&h), None);
    h.insert(HEADER, http::HeaderValue::from_static("garbage"));
    assert_eq!(from_headers(&h), None);
    h.insert(HEADER, http::HeaderValue::from_static(SAMPLE));
    assert_eq!(from_headers(&h).map(|p| p.to_string()).as_deref(), Some(SAMPLE));
    let mut a = BTreeMap::new();
    assert_eq!(from_annotations(Some(&a)), None);
    assert_eq!(from_annotations(None), None);
    a.insert(POD_ANNOTATION.to_string(), SAMPLE.to_string());
    assert_eq!(from_annotations(Some(&a)).map(|p| p.to_string()).as_deref(), Some(SAMPLE));
}

fn with_exporting_layer<R>(f: impl FnOnce() -> R) -> R {
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("test"));
    let subscriber = tracing_subscriber::registry().with(layer);
    tracing::subscriber::with_default(subscriber, f)
}

#[test]
fn a_span_continues_a_remote_parent_or_starts_its_own_trace() {
    with_exporting_layer(|| {
        let remote: TraceParent = SAMPLE.parse().unwrap();
        let outer = tracing::info_span!("long-lived");
        let _in_outer = outer.enter();
        let outer_cx = TraceParent::current().expect("the outer span has a context");

        let child = tracing::info_span!("request", trace_id = tracing::field::Empty);
        continue_trace(&child, Some(remote));
        let own = TraceParent::of(&child).unwrap();
        assert_eq!(own.trace_id, remote.trace_id, "continues the remote trace");
        assert_ne!(own.span_id, remote.span_id, "with a span of its own");
        assert!(own.sampled, "a sampled parent is followed");
        let inside = child.in_scope(TraceParent::current_sampled).unwrap();
        assert_eq!(inside, own);

        let root = tracing::info_span!("reconcile");
        continue_trace(&root, None);
        let root_cx = TraceParent::of(&root).unwrap();
        assert_ne!(root_cx.trace_id, outer_cx.trace_id, "not part of the long-lived span's trace");
        assert_ne!(root_cx.trace_id, remote.trace_id);

        let nested = tracing::info_span!("nested");
        assert_eq!(TraceParent::of(&nested).unwrap().trace_id, outer_cx.trace_id, "without continue_trace the tracing parent rules");
    });
}

#[test]
fn without_the_layer_nothing_has_a_context() {
    let span = tracing::info_span!("request");
    continue_trace(&span, Some(SAMPLE.parse().unwrap()));
    assert_eq!(TraceParent::of(&span), None);
    assert_eq!(span.in_scope(TraceParent::current_sampled), None);
}

#[test]
fn the_layer_injects_the_current_span_and_keeps_a_callers_header() {
    use tower::{Layer, Service};
    struct Capture(Option<http::HeaderMap>);
    impl Service<http::Request<()>> for Capture {
        type Response = ();
        type Error = std::convert::Infallible;
        type Future = std::future::Ready<Result<(), Self::Error>>;
        fn poll_ready(&mut self, _: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, req: http::Request<()>) -> Self::Future {
            self.0 = Some(req.headers().clone());
            std::future::ready(Ok(()))
        }
    }
    with_exporting_layer(|| {
        let mut svc = InjectLayer.layer(Capture(None));
        let _ = svc.call(http::Request::new(()));
        assert!(!svc.inner.0.take().unwrap().contains_key(HEADER), "no span, no header");

        let span = tracing::info_span!("bind");
        continue_trace(&span, Some(SAMPLE.parse().unwrap()));
        let own = TraceParent::of(&span).unwrap();
        span.in_scope(|| {
            let _ = svc.call(http::Request::new(()));
        });
        let sent = svc.inner.0.take().unwrap();
        assert_eq!(from_headers(&sent), Some(own));

        let mut req = http::Request::new(());
        req.headers_mut().insert(HEADER, http::HeaderValue::from_static(SAMPLE));
        span.in_scope(|| {
            let _ = svc.call(req);
        });
        assert_eq!(svc.inner.0.take().unwrap().get(HEADER).unwrap(), SAMPLE);
    });
}
