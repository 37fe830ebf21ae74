//! API server metrics in the Prometheus text format (`GET /metrics`, the Prometheus
//! project's `prometheus-client`): requests by verb, resource and code, request latency
//! histograms by verb, open watches, and the watch cache (objects and approximate bytes
//! kept per resource, lists it served, lists it handed back to the store).

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 13] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Request {
    verb: String,
    resource: String,
    code: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Kind {
    request_kind: &'static str,
}

/// A priority level and the FlowSchema that sent a request to it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Flow {
    priority_level: &'static str,
    flow_schema: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Rejection {
    priority_level: &'static str,
    flow_schema: &'static str,
    reason: &'static str,
}

/// One request counted in `apiserver_current_inflight_requests` until dropped.
pub struct InflightGuard(Gauge);

impl Drop for InflightGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// A resource of the watch cache, named `<group|core>/<plural>` (its store key prefix).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CachedResource {
    resource: String,
}

/// The watch cache's metrics, shared by every feed of one API server.
#[derive(Clone, Default)]
pub struct WatchCacheMetrics {
    objects: Family<CachedResource, Gauge>,
    bytes: Family<CachedResource, Gauge>,
    lists: Family<CachedResource, Counter>,
    store_fallbacks: Family<CachedResource, Counter>,
}

/// The gauges of one feed.
#[derive(Clone)]
pub struct FeedGauges {
    pub objects: Gauge,
    pub bytes: Gauge,
}

impl WatchCacheMetrics {
    pub fn feed_gauges(&self, resource: &str) -> FeedGauges {
        let r = CachedResource { resource: resource.into() };
        FeedGauges { objects: self.objects.get_or_create(&r).clone(), bytes: self.bytes.get_or_create(&r).clone() }
    }

    /// A list answered from the cache.
    pub fn list_served(&self, resource: &str) {
        self.lists.get_or_create(&CachedResource { resource: resource.into() }).inc();
    }

    /// A list the cache could have answered but did not (not started, or not caught up
    /// in time): it went to the store.
    pub fn list_fell_back(&self, resource: &str) {
        self.store_fallbacks.get_or_create(&CachedResource { resource: resource.into() }).inc();
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Verb {
    verb: String,
}

pub struct ApiMetrics {
    registry: Registry,
    requests: Family<Request, Counter>,
    latency: Family<Verb, Histogram>,
    watches: Gauge,
    inflight: Family<Kind, Gauge>,
    dropped: Family<Kind, Counter>,
    executing: Family<Flow, Gauge>,
    rejected: Family<Rejection, Counter>,
    watch_cache: WatchCacheMetrics,
}

impl Default for ApiMetrics {
    fn default() -> Self {
        let requests = Family::<Request, Counter>::default();
        let latency = Family::<Verb, Histogram>::new_with_constructor(|| Histogram::new(BUCKETS));
        let watches = Gauge::default();
        let mut registry = Registry::default();
        // Help texts without their final full stop: the encoder adds one.
        registry.register("apiserver_request", "Requests by verb, resource and HTTP code", requests.clone());
        registry.register("apiserver_request_duration_seconds", "Request latency by verb (watches excluded)", latency.clone());
        registry.register("apiserver_watches", "Open watch streams", watches.clone());
        let inflight = Family::<Kind, Gauge>::default();
        let dropped = Family::<Kind, Counter>::default();
        registry.register("apiserver_current_inflight_requests", "Requests being served, by kind (readOnly, mutating; long-running ones not counted)", inflight.clone());
        registry.register("apiserver_dropped_requests", "Requests refused with 429 by the max-in-flight filter, by kind", dropped.clone());
        let executing = Family::<Flow, Gauge>::default();
        let rejected = Family::<Rejection, Counter>::default();
        registry.register("apiserver_flowcontrol_current_executing_requests", "Requests holding a seat, by priority level and FlowSchema (exempt ones included)", executing.clone());
        registry.register(
            "apiserver_flowcontrol_rejected_requests",
            "Requests refused with 429 for want of a seat, by priority level, FlowSchema and reason (concurrency-limit: the pool is full for the level; fair-share: the flow holds its share of the level)",
            rejected.clone(),
        );
        let watch_cache = WatchCacheMetrics::default();
        registry.register("apiserver_watch_cache_resource_objects", "Objects kept by the watch cache, by resource", watch_cache.objects.clone());
        registry.register(
            "apiserver_watch_cache_resource_bytes",
            "Approximate memory of the watch cache's objects, by resource: their keys and stored (serialized) values; the decoded objects take a few times this",
            watch_cache.bytes.clone(),
        );
        registry.register("apiserver_cache_list", "Lists served from the watch cache, by resource", watch_cache.lists.clone());
        registry.register("apiserver_cache_list_store_fallback", "Lists the watch cache handed to the store (cache not ready or not caught up in time), by resource", watch_cache.store_fallbacks.clone());
        Self { registry, requests, latency, watches, inflight, dropped, executing, rejected, watch_cache }
    }
}

impl ApiMetrics {
    /// Records one finished request (watches are not timed: they last until closed).
    pub fn observe(&self, verb: &str, resource: &str, code: u16, elapsed: Duration) {
        self.requests.get_or_create(&Request { verb: verb.into(), resource: resource.into(), code }).inc();
        if verb != "watch" {
            self.latency.get_or_create(&Verb { verb: verb.into() }).observe(elapsed.as_secs_f64());
        }
    }

    /// A request of `kind` (`readOnly`, `mutating`) being served, until the guard drops.
    pub fn in_flight(&self, kind: &'static str) -> InflightGuard {
        let g = self.inflight.get_or_create(&Kind { request_kind: kind }).clone();
        g.inc();
        InflightGuard(g)
    }

    /// A request of `kind` refused as too many.
    pub fn dropped(&self, kind: &'static str) {
        self.dropped.get_or_create(&Kind { request_kind: kind }).inc();
    }

    /// A request of `class` holding a seat (or exempt), until the guard drops.
    pub fn executing(&self, class: &crate::inflight::priority::Classification) -> InflightGuard {
        let g = self.executing.get_or_create(&Flow { priority_level: class.level.name(), flow_schema: class.flow_schema }).clone();
        g.inc();
        InflightGuard(g)
    }

    /// A request of `class` refused a seat.
    pub fn rejected(&self, class: &crate::inflight::priority::Classification, reason: crate::inflight::seats::Refusal) {
        self.rejected.get_or_create(&Rejection { priority_level: class.level.name(), flow_schema: class.flow_schema, reason: reason.label() }).inc();
    }

    /// The handles the watch cache updates.
    pub fn watch_cache(&self) -> WatchCacheMetrics {
        self.watch_cache.clone()
    }

    pub fn watch_opened(&self) {
        self.watches.inc();
    }

    pub fn watch_closed(&self) {
        self.watches.dec();
    }

    /// The text exposition (Prometheus' text format, without the OpenMetrics `# EOF`).
    pub fn render(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode_registry(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// prometheus-client writes a bucket's `le` first (`{le="0.1",verb="get"}`) and
    /// bounds as floats (`le="1.0"`); label order and number spelling carry no meaning
    /// in the exposition format.
    #[test]
    fn counts_and_buckets() {
        let m = ApiMetrics::default();
        m.observe("get", "pods", 200, Duration::from_millis(3));
        m.observe("get", "pods", 200, Duration::from_millis(70));
        m.observe("create", "pods", 409, Duration::from_millis(20));
        m.watch_opened();
        let t = m.render();
        assert!(t.contains("apiserver_request_total{verb=\"get\",resource=\"pods\",code=\"200\"} 2"), "{t}");
        assert!(t.contains("apiserver_request_duration_seconds_bucket{le=\"0.005\",verb=\"get\"} 1"), "{t}");
        assert!(t.contains("apiserver_request_duration_seconds_bucket{le=\"0.1\",verb=\"get\"} 2"), "{t}");
        assert!(t.contains("apiserver_request_duration_seconds_count{verb=\"create\"} 1"), "{t}");
        assert!(t.contains("apiserver_request_duration_seconds_bucket{le=\"+Inf\",verb=\"get\"} 2"), "{t}");
        assert!(t.contains("apiserver_watches 1"), "{t}");
        m.observe("watch", "pods", 200, Duration::from_secs(90));
        m.watch_closed();
        let t = m.render();
        assert!(t.contains("apiserver_request_total{verb=\"watch\",resource=\"pods\",code=\"200\"} 1"), "{t}");
        assert!(!t.contains("verb=\"watch\"}"), "watches are not timed: {t}");
        assert!(t.contains("apiserver_watches 0"), "{t}");
    }

    #[test]
    fn watch_cache_gauges_and_counters_by_resource() {
        let m = ApiMetrics::default();
        let c = m.watch_cache();
        let g = c.feed_gauges("core/configmaps");
        g.objects.set(3);
        g.bytes.set(1200);
        c.list_served("core/configmaps");
        c.list_served("core/configmaps");
        c.list_fell_back("apps/deployments");
        let t = m.render();
        assert!(t.contains("apiserver_watch_cache_resource_objects{resource=\"core/configmaps\"} 3"), "{t}");
        assert!(t.contains("apiserver_watch_cache_resource_bytes{resource=\"core/configmaps\"} 1200"), "{t}");
        assert!(t.contains("apiserver_cache_list_total{resource=\"core/configmaps\"} 2"), "{t}");
        assert!(t.contains("apiserver_cache_list_store_fallback_total{resource=\"apps/deployments\"} 1"), "{t}");
    }
}
