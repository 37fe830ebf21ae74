//! The status page every server serves at `/ui` on its API port, behind the API's own
//! authentication and RBAC (the non-resource URLs `/ui` and `/ui/*`, verb `get`): the
//! members with their terms, roles, lag and API health, the component Leases, the Nodes
//! with their pods, and a timeline of leader changes and faults as this server saw them.
//!
//! A sampler task ([`sample::Sampler`]) observes the cluster once a second while the page
//! was asked for within the last minute, else every five seconds, and keeps the timeline
//! ([`observation::changes`] between successive samples). `/ui/status` answers the latest
//! sample, the timeline and the pods per node (counted at the request, from the watch
//! cache); `/ui` is a page that draws that document and asks for it again every second.

mod observation;
mod sample;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

pub(crate) use sample::Sampler;

/// Time between samples while somebody looks at the page.
const WATCHED_EVERY: Duration = Duration::from_secs(1);
/// Time between samples otherwise (leader changes and longer faults still show).
const IDLE_EVERY: Duration = Duration::from_secs(5);
/// How long after the last request the page counts as looked at.
const WATCHED_FOR: Duration = Duration::from_secs(60);

/// The page itself (HTML, CSS and script in one file, no other requests but `status`).
const PAGE: &str = include_str!("page.html");

/// What the sampler found, shared with the handlers.
pub(crate) struct StatusPage {
    server: String,
    state: Mutex<PageState>,
}

#[derive(Default)]
struct PageState {
    latest: Option<observation::Observation>,
    timeline: observation::Timeline,
    asked: Option<Instant>,
}

impl StatusPage {
    /// Starts sampling until `shutdown`.
    pub(crate) fn start(server: String, sampler: Sampler, shutdown: CancellationToken) -> Arc<Self> {
        let page = Arc::new(Self { server, state: Mutex::new(PageState::default()) });
        tokio::spawn(page.clone().run(sampler, shutdown));
        page
    }

    async fn run(self: Arc<Self>, mut sampler: Sampler, shutdown: CancellationToken) {
        loop {
            let sampled = tokio::select! {
                _ = shutdown.cancelled() => return,
                o = sampler.observe() => o,
            };
            let every = {
                let mut st = self.state.lock().expect("status page lock");
                for e in observation::changes(st.latest.as_ref(), &sampled) {
                    st.timeline.push(e);
                }
                st.latest = Some(sampled);
                if st.asked.is_some_and(|t| t.elapsed() < WATCHED_FOR) { WATCHED_EVERY } else { IDLE_EVERY }
            };
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
        }
    }

    /// The document `/ui/status` answers.
    pub(crate) async fn status(&self, cache: &Arc<crate::watch_cache::WatchCache>) -> Value {
        let pods = sample::cached(cache, "", "v1", "pods").await.map(|pods| unfinished_pods_per_node(pods.iter().map(|p| &p.obj)));
        let mut st = self.state.lock().expect("status page lock");
        st.asked = Some(Instant::now());
        document(&self.server, st.latest.as_ref(), st.timeline.entries(), pods.as_ref())
    }
}

/// The `/ui/status` document: the latest sample with each node's pod count, and the
/// timeline newest first.
fn document<'a>(
    server: &str,
    latest: Option<&observation::Observation>,
    timeline: impl DoubleEndedIterator<Item = &'a observation::TimelineEntry>,
    pods: Option<&BTreeMap<String, usize>>,
) -> Value {
    let timeline: Vec<_> = timeline.rev().collect();
    let Some(o) = latest else {
        return json!({"server": server, "sampled": false, "timeline": timeline});
    };
    let nodes = o.nodes.as_ref().map(|nodes| {
        nodes
            .iter()
            .map(|(name, ready)| json!({"name": name, "ready": ready, "pods": pods.map(|p| json!(p.get(name).copied().unwrap_or(0))).unwrap_or(Value::Null)}))
            .collect::<Vec<_>>()
    });
    json!({
        "server": server,
        "sampled": true,
        "time": o.time,
        "leader": o.leader,
        "term": o.term,
        "members": o.members,
        "leases": o.leases,
        "nodes": nodes,
        "timeline": timeline,
    })
}

/// How many pods that have not finished are bound to each node.
fn unfinished_pods_per_node<'a>(pods: impl Iterator<Item = &'a Value>) -> BTreeMap<String, usize> {
    let mut bound: BTreeMap<String, usize> = BTreeMap::new();
    for pod in pods {
        let finished = matches!(pod.pointer("/status/phase").and_then(Value::as_str), Some("Succeeded" | "Failed"));
        if let (false, Some(node)) = (finished, pod.pointer("/spec/nodeName").and_then(Value::as_str).filter(|n| !n.is_empty())) {
            *bound.entry(node.to_string()).or_default() += 1;
        }
    }
    bound
}

/// `GET /ui` (and `/ui/`): the page.
pub(crate) fn page() -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        http::StatusCode::OK,
        [(http::header::CONTENT_TYPE, "text/html; charset=utf-8"), (http::header::CACHE_CONTROL, "no-store")],
        PAGE,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::observation::{Observation, Timeline, TimelineEntry};
    use super::*;

    #[test]
    fn pods_count_on_their_node_until_they_finish() {
        let pods = [
            json!({"spec": {"nodeName": "a"}, "status": {"phase": "Running"}}),
            json!({"spec": {"nodeName": "a"}, "status": {"phase": "Pending"}}),
            json!({"spec": {"nodeName": "a"}, "status": {"phase": "Succeeded"}}),
            json!({"spec": {"nodeName": "b"}, "status": {"phase": "Failed"}}),
            json!({"spec": {}, "status": {"phase": "Pending"}}),
        ];
        assert_eq!(unfinished_pods_per_node(pods.iter()), BTreeMap::from([("a".to_string(), 2)]));
    }

    #[test]
    fn the_document_puts_pods_on_nodes_and_the_newest_entry_first() {
        let o = Observation {
            time: "t1".into(),
            leader: Some("keelson-0".into()),
            term: 2,
            nodes: Some(BTreeMap::from([("n1".to_string(), "True".to_string()), ("n2".to_string(), "False".to_string())])),
            ..Default::default()
        };
        let mut t = Timeline::default();
        for (time, message) in [("t0", "first"), ("t1", "second")] {
            t.push(TimelineEntry { time: time.into(), kind: "leader", subject: "keelson-0".into(), fault: false, message: message.into() });
        }
        let pods = BTreeMap::from([("n1".to_string(), 3)]);
        let d = document("keelson-1", Some(&o), t.entries(), Some(&pods));
        assert_eq!(d["server"], "keelson-1");
        assert_eq!(d["leader"], "keelson-0");
        assert_eq!(d["nodes"], json!([{"name": "n1", "ready": "True", "pods": 3}, {"name": "n2", "ready": "False", "pods": 0}]));
        assert_eq!(d["timeline"][0]["message"], "second");
        // Pods that could not be read are unknown, not zero.
        assert_eq!(document("keelson-1", Some(&o), t.entries(), None)["nodes"][0]["pods"], Value::Null);
        let empty = document("keelson-1", None, Timeline::default().entries(), None);
        assert_eq!((empty["sampled"].as_bool(), empty["timeline"].as_array().map(Vec::len)), (Some(false), Some(0)));
    }

    #[test]
    fn the_page_asks_for_its_document_and_draws_every_part() {
        for needle in ["fetch(", "status", "id=\"members\"", "id=\"leases\"", "id=\"nodes\"", "id=\"timeline\""] {
            assert!(PAGE.contains(needle), "the page lacks {needle}");
        }
    }
}
