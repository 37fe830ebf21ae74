//! API server metrics in the Prometheus text format (`GET /metrics`): requests by verb,
//! resource and code, request latency histograms by verb, open watches.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: &[f64] = &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

#[derive(Default)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

#[derive(Default)]
pub struct ApiMetrics {
    requests: Mutex<BTreeMap<(String, String, u16), u64>>,
    latency: Mutex<BTreeMap<String, Histogram>>,
    watches: AtomicI64,
}

impl ApiMetrics {
    /// Records one finished request (watches are not timed: they last until closed).
    pub fn observe(&self, verb: &str, resource: &str, code: u16, elapsed: Duration) {
        *self.requests.lock().expect("lock").entry((verb.into(), resource.into(), code)).or_default() += 1;
        if verb == "watch" {
            return;
        }
        let secs = elapsed.as_secs_f64();
        let mut l = self.latency.lock().expect("lock");
        let h = l.entry(verb.into()).or_default();
        if h.counts.is_empty() {
            h.counts = vec![0; BUCKETS.len()];
        }
        for (i, b) in BUCKETS.iter().enumerate() {
            if secs <= *b {
                h.counts[i] += 1;
            }
        }
        h.sum += secs;
        h.count += 1;
    }

    pub fn watch_opened(&self) {
        self.watches.fetch_add(1, Ordering::Relaxed);
    }

    pub fn watch_closed(&self) {
        self.watches.fetch_sub(1, Ordering::Relaxed);
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        out += "# HELP apiserver_request_total Requests by verb, resource and HTTP code.\n# TYPE apiserver_request_total counter\n";
        for ((verb, resource, code), n) in self.requests.lock().expect("lock").iter() {
            out += &format!("apiserver_request_total{{verb=\"{verb}\",resource=\"{resource}\",code=\"{code}\"}} {n}\n");
        }
        out += "# HELP apiserver_request_duration_seconds Request latency by verb (watches excluded).\n# TYPE apiserver_request_duration_seconds histogram\n";
        for (verb, h) in self.latency.lock().expect("lock").iter() {
            for (i, b) in BUCKETS.iter().enumerate() {
                out += &format!("apiserver_request_duration_seconds_bucket{{verb=\"{verb}\",le=\"{b}\"}} {}\n", h.counts[i]);
            }
            out += &format!("apiserver_request_duration_seconds_bucket{{verb=\"{verb}\",le=\"+Inf\"}} {}\n", h.count);
            out += &format!("apiserver_request_duration_seconds_sum{{verb=\"{verb}\"}} {}\n", h.sum);
            out += &format!("apiserver_request_duration_seconds_count{{verb=\"{verb}\"}} {}\n", h.count);
        }
        out += "# HELP apiserver_watches Open watch streams.\n# TYPE apiserver_watches gauge\n";
        out += &format!("apiserver_watches {}\n", self.watches.load(Ordering::Relaxed));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_buckets() {
        let m = ApiMetrics::default();
        m.observe("get", "pods", 200, Duration::from_millis(3));
        m.observe("get", "pods", 200, Duration::from_millis(70));
        m.observe("create", "pods", 409, Duration::from_millis(20));
        m.watch_opened();
        let t = m.render();
        assert!(t.contains("apiserver_request_total{verb=\"get\",resource=\"pods\",code=\"200\"} 2"), "{t}");
        assert!(t.contains("apiserver_request_duration_seconds_bucket{verb=\"get\",le=\"0.005\"} 1"), "{t}");
        assert!(t.contains("apiserver_request_duration_seconds_bucket{verb=\"get\",le=\"0.1\"} 2"), "{t}");
        assert!(t.contains("apiserver_request_duration_seconds_count{verb=\"create\"} 1"), "{t}");
        assert!(t.contains("apiserver_watches 1"), "{t}");
    }
}
