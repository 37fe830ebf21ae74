//! WATCH: a stream of `{"type":…,"object":…}` lines from the store's watch.
//!
//! resourceVersion semantics: unset → the current state as synthetic ADDED events
//! (a consistent list: at least the store's revision at the start, usually from the
//! watch cache), then changes; `0` → the same from this replica's state; `N` →
//! every change after N. `sendInitialEvents=true` also starts with the state and, with
//! bookmarks allowed, ends it with a bookmark annotated `k8s.io/initial-events-end`.
//! A compacted N gets an ERROR event carrying a 410 Status.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use futures::StreamExt;
use keelson_client::api::{WatchCreate, WatchResponseKind};
use keelson_mvcc::{EventKind, KeyRange, Revision};
use rand::Rng;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::list::{self, Selectors};
use super::negotiate::{Representation, ResponseMedia};
use super::request::{query_bool, query_i64, ResourceRequest};
use super::ApiState;
use crate::catalog::ResourceDef;
use crate::error::ApiError;
use crate::storage::{list_prefix, object_key, set_resource_version, ObjectStore};
use crate::watch_cache::{sampled_trace, FeedEvent, Joined};

/// The content type of a protobuf watch: length-prefixed `WatchEvent`s.
const WATCH_PROTOBUF: &str = "application/vnd.kubernetes.protobuf;stream=watch";

/// Events buffered per watch before the producer waits for the client.
const WATCH_BUFFER: usize = 256;

struct WatchSpec {
    def: &'static ResourceDef,
    range: KeyRange,
    selectors: Selectors,
    bookmarks: bool,
    repr: Representation,
    include: keelson_apimachinery::table::IncludeObject,
    /// The client's user agent, named in delivery spans.
    watcher: String,
    /// Frames in protobuf (`application/vnd.kubernetes.protobuf;stream=watch`) rather
    /// than JSON lines.
    protobuf: bool,
}

pub(crate) async fn serve(
    state: Arc<ApiState>,
    rr: ResourceRequest,
    q: HashMap<String, String>,
    selectors: Selectors,
    repr: Representation,
    media: ResponseMedia,
    watcher: String,
) -> Result<Response, ApiError> {
    let def = rr.def;
    let protobuf = match media {
        ResponseMedia::Json => false,
        ResponseMedia::Protobuf { json_acceptable } => {
            let encodable = repr == Representation::Object && keelson_kube_protobuf::is_encodable(&def.api_version(), def.kind);
            if !encodable && !json_acceptable {
                return Err(ApiError::NotAcceptable(format!("watch events of {} have no protobuf encoding here; only application/json is available", def.kind)));
            }
            encodable
        }
    };
    let rv = q.get("resourceVersion").cloned().unwrap_or_default();
    let send_initial = match q.get("sendInitialEvents").map(String::as_str) {
        Some("true") => Some(true),
        Some("false") => Some(false),
        None | Some("") => None,
        Some(v) => return Err(ApiError::BadRequest(format!("invalid sendInitialEvents {v:?}"))),
    };
    let bookmarks = query_bool(&q, "allowWatchBookmarks")?;
    if send_initial == Some(true) && !bookmarks {
        return Err(ApiError::Invalid {
            kind: "ListOptions".into(),
            group: "meta.k8s.io".into(),
            name: String::new(),
            causes: vec![crate::error::Cause::invalid("allowWatchBookmarks", "sendInitialEvents requires setting allowWatchBookmarks=true")],
        });
    }
    let timeout = match query_i64(&q, "timeoutSeconds")? {
        Some(t) if t > 0 => Duration::from_secs(t as u64),
        // Like Kubernetes: between 30 and 60 minutes, so clients spread their re-watches.
        _ => Duration::from_secs(rand::thread_rng().gen_range(1800..3600)),
    };
    let range = match selectors.pinned_name().filter(|_| rr.namespace.is_some() || !def.namespaced) {
        Some(name) => KeyRange::single(object_key(def, rr.namespace.as_deref(), name)),
        None => KeyRange::prefix(list_prefix(def, rr.namespace.as_deref())),
    };
    let initial = send_initial.unwrap_or(rv.is_empty() || rv == "0");
    let start_rv: Option<Revision> = if initial || rv.is_empty() || rv == "0" {
        None
    } else {
        Some(rv.parse().map_err(|_| ApiError::BadRequest(format!("invalid resource version {rv:?}")))?)
    };
    let include = list::include_object(&q)?;
    let spec = WatchSpec { def, range, selectors, bookmarks, repr, include, watcher, protobuf };
    // The resource's feed exists before the initial list is read, so the list's revision
    // is inside the feed's backlog.
    let feed = match state.watch_cache.feed(def.key_prefix().as_bytes()).await {
        Ok(f) => Some(f),
        Err(e) => {
            tracing::debug!(error = %e, "watch cache unavailable; watching the store directly");
            None
        }
    };

    // The initial state, if asked for, is read before the response starts so errors
    // are still proper HTTP statuses.
    let mut first = Vec::new();
    let from = match start_rv {
        Some(n) => n + 1,
        None => {
            let mut lq = HashMap::new();
            if rv == "0" {
                lq.insert("resourceVersion".to_string(), "0".to_string());
            }
            let listed = list::list(&state.registry, Some(&state.watch_cache), &rr, &lq, &spec.selectors).await?;
            if initial {
                for s in &listed.items {
                    first.push(spec.event("ADDED", s.obj.clone()));
                }
            }
            if send_initial == Some(true) {
                let mut b = spec.bookmark(listed.revision);
                b["object"]["metadata"]["annotations"] = json!({"k8s.io/initial-events-end": "true"});
                first.push(b);
            }
            listed.revision + 1
        }
    };

    let (tx, rx) = mpsc::channel::<Result<bytes::Bytes, std::convert::Infallible>>(WATCH_BUFFER);
    let shutdown = state.shutdown.clone();
    tokio::spawn(async move {
        state.metrics.watch_opened();
        let _open = WatchGauge(&state);
        for e in first {
            if tx.send(Ok(spec.frame(&e))).await.is_err() {
                return;
            }
        }
        let joined = feed.and_then(|f| f.join(from));
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = tokio::time::sleep(timeout) => {}
            _ = async {
                match joined {
                    Some(j) => follow_feed(&spec, j, from, &tx).await,
                    None => follow(&state, &spec, from, &tx).await,
                }
            } => {}
        }
    });
    let body = Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    Ok(Response::builder()
        .status(200)
        .header(http::header::CONTENT_TYPE, if protobuf { WATCH_PROTOBUF } else { "application/json" })
        .header(http::header::CACHE_CONTROL, "no-cache, private")
        .body(body)
        .expect("valid response"))
}

/// Decrements the open-watch gauge when the watch task ends, however it ends.
struct WatchGauge<'a>(&'a ApiState);

impl Drop for WatchGauge<'_> {
    fn drop(&mut self) {
        self.0.metrics.watch_closed();
    }
}

fn line(v: &Value) -> bytes::Bytes {
    let mut b = serde_json::to_vec(v).expect("JSON values serialize");
    b.push(b'\n');
    b.into()
}

impl WatchSpec {
    /// One event as the client reads it: a JSON line, or a length-prefixed protobuf
    /// `WatchEvent`. An object the encoder cannot carry ends up as an ERROR event (a
    /// Status the client can read) rather than a frame it cannot decode.
    fn frame(&self, event: &Value) -> bytes::Bytes {
        if !self.protobuf {
            return line(event);
        }
        let ty = event["type"].as_str().unwrap_or("ERROR");
        match keelson_kube_protobuf::encode_watch_event(ty, &event["object"]) {
            Ok(frame) => frame.into(),
            Err(e) => {
                tracing::warn!(error = %e, kind = self.def.kind, "a watch event could not be encoded as protobuf");
                let status = ApiError::Internal(format!("the {} could not be encoded as protobuf: {e}", self.def.kind)).status();
                keelson_kube_protobuf::encode_watch_event("ERROR", &status).expect("a Status always encodes").into()
            }
        }
    }

    fn event(&self, ty: &str, obj: Value) -> Value {
        let object = match self.repr {
            Representation::Object => obj,
            Representation::Metadata => super::negotiate::partial_metadata(&obj),
            Representation::Table => {
                let rv = obj.pointer("/metadata/resourceVersion").and_then(Value::as_str).unwrap_or("").to_string();
                list::table_object(self.def, std::slice::from_ref(&obj), self.include, &rv, None)
            }
        };
        json!({"type": ty, "object": object})
    }

    fn bookmark(&self, rev: Revision) -> Value {
        json!({"type": "BOOKMARK", "object": {"kind": self.def.kind, "apiVersion": self.def.api_version(), "metadata": {"resourceVersion": rev.to_string()}}})
    }
}

/// A `watch-deliver` span for sending the change of `obj` to this watcher, when the
/// object carries a sampled trace (`parent`, from [`keelson_tracecontext::POD_ANNOTATION`]:
/// a pod created in one), as a child of that trace; it lasts until the watcher's buffer
/// took the event. Other events get no span: one per event and watcher would cost the
/// watch path more than the events do.
fn delivery_span(spec: &WatchSpec, ty: &str, obj: &Value, parent: Option<keelson_tracecontext::TraceParent>) -> Option<tracing::Span> {
    let parent = parent?;
    let revision = obj.pointer("/metadata/resourceVersion").and_then(Value::as_str).unwrap_or_default();
    let span = tracing::info_span!("watch-deliver", resource = spec.def.plural, event = ty, revision, watcher = %spec.watcher, trace_id = tracing::field::Empty);
    keelson_tracecontext::continue_trace(&span, Some(parent));
    Some(span)
}

/// Sends one line to the watcher, inside its delivery span if it has one; false when the
/// watcher is gone.
async fn deliver(tx: &mpsc::Sender<Result<bytes::Bytes, std::convert::Infallible>>, line: bytes::Bytes, span: Option<tracing::Span>) -> bool {
    use tracing::Instrument;
    match span {
        Some(span) => tx.send(Ok(line)).instrument(span).await.is_ok(),
        None => tx.send(Ok(line)).await.is_ok(),
    }
}

fn error_event(e: &ApiError) -> Value {
    json!({"type": "ERROR", "object": e.status()})
}

/// Follows the store from revision `from`, re-opening the store watch where it left off
/// if the store cancels it (slow consumer), until the client goes away.
async fn follow(state: &ApiState, spec: &WatchSpec, mut from: Revision, tx: &mpsc::Sender<Result<bytes::Bytes, std::convert::Infallible>>) {
    let client = state.registry.store.client().clone();
    // A lagging replica reports progress below what the client has already seen.
    let seen = from - 1;
    loop {
        let create = WatchCreate { watch_id: 1, range: spec.range.clone(), start_revision: from, prev_kv: true, progress_notify: spec.bookmarks };
        let (_ctl, mut stream) = match client.watch(create).await {
            Ok(s) => s,
            Err(e) => {
                let _ = tx.send(Ok(spec.frame(&error_event(&ApiError::from(e))))).await;
                return;
            }
        };
        while let Some(msg) = stream.next().await {
            let resp = match msg {
                Ok(r) => r,
                Err(e) => {
                    let _ = tx.send(Ok(spec.frame(&error_event(&ApiError::from(e))))).await;
                    return;
                }
            };
            let out: Vec<Value> = match resp.kind {
                WatchResponseKind::Created { .. } => continue,
                WatchResponseKind::Events(events) => {
                    let mut out = Vec::new();
                    for ev in events {
                        from = ev.kv.mod_revision + 1;
                        match translate(&state.registry.store, spec, ev) {
                            Ok(Some(e)) => out.push(e),
                            Ok(None) => {}
                            Err(e) => out.push(error_event(&e)),
                        }
                    }
                    out
                }
                WatchResponseKind::Progress => {
                    from = from.max(resp.header.revision + 1);
                    if spec.bookmarks && resp.header.revision >= seen {
                        vec![spec.bookmark(resp.header.revision)]
                    } else {
                        continue;
                    }
                }
                WatchResponseKind::Compacted { compacted } => {
                    let e = ApiError::Gone(format!("too old resource version: {} ({compacted})", from - 1));
                    let mut st = error_event(&e);
                    st["object"]["reason"] = json!("Expired");
                    let _ = tx.send(Ok(spec.frame(&st))).await;
                    return;
                }
                WatchResponseKind::Canceled { resume_revision, .. } => {
                    from = resume_revision;
                    break; // re-open from where the store stopped
                }
            };
            for e in out {
                let span = e["type"].as_str().and_then(|ty| delivery_span(spec, ty, &e["object"], sampled_trace(&e["object"])));
                if !deliver(tx, spec.frame(&e), span).await {
                    return;
                }
            }
        }
        if tx.is_closed() {
            return;
        }
    }
}

/// One store event as a watch event, honouring selectors.
fn translate(store: &ObjectStore, spec: &WatchSpec, ev: keelson_mvcc::Event) -> Result<Option<Value>, ApiError> {
    let prev = ev.prev_kv.as_ref().map(|kv| store.decode(kv)).transpose()?.map(|mut p| {
        if ev.kind == EventKind::Delete {
            set_resource_version(&mut p.obj, ev.kv.mod_revision);
        }
        p.obj
    });
    let cur = match ev.kind {
        EventKind::Put => Some(store.decode(&ev.kv)?.obj),
        EventKind::Delete => None,
    };
    Ok(classify(spec, prev.as_ref(), cur.as_ref()).map(|(ty, obj)| spec.event(ty, obj.clone())))
}

/// The watch event type of a change for this watcher, and the object to send: an
/// object that stops matching the selectors is DELETED for it, one that starts matching
/// is ADDED.
fn classify<'a>(spec: &WatchSpec, prev: Option<&'a Value>, cur: Option<&'a Value>) -> Option<(&'static str, &'a Value)> {
    let prev_match = prev.is_some_and(|p| spec.selectors.matches(p));
    match cur {
        Some(cur) => match (prev_match, spec.selectors.matches(cur)) {
            (true, true) => Some(("MODIFIED", cur)),
            (false, true) => Some(("ADDED", cur)),
            (true, false) => Some(("DELETED", cur)),
            (false, false) => None,
        },
        None => prev.filter(|_| prev_match).map(|p| ("DELETED", p)),
    }
}

/// Serves a watcher from the watch cache: its backlog, then live events, until the
/// client leaves, the watcher falls too far behind, or the feed ends.
///
/// `from` is the first revision the client has not seen. This server's replica may be
/// behind it (the client resumed here from a more current server): changes and
/// bookmarks before `from` are skipped until the replica catches up, so the client never
/// sees a change twice or a bookmark older than what it has.
async fn follow_feed(spec: &WatchSpec, joined: Joined, from: Revision, tx: &mpsc::Sender<Result<bytes::Bytes, std::convert::Infallible>>) {
    let Joined { backlog, mut live } = joined;
    let plain = spec.selectors.labels.is_empty() && spec.selectors.fields.is_empty() && spec.repr == Representation::Object;
    let line_of = |ev: &FeedEvent| -> Option<(bytes::Bytes, Option<tracing::Span>)> {
        match ev {
            FeedEvent::Change(c) if c.revision < from => None,
            FeedEvent::Progress(rev) if *rev < from - 1 => None,
            FeedEvent::Change(c) if spec.range.contains(&c.key) => {
                let (ty, obj) = classify(spec, c.previous.as_ref(), c.object.as_deref().map(|s| &s.obj))?;
                let span = delivery_span(spec, ty, obj, c.trace());
                if plain {
                    let cached = if spec.protobuf { &c.plain_frame } else { &c.plain_line };
                    return Some((cached.get_or_init(|| spec.frame(&json!({"type": ty, "object": obj}))).clone(), span));
                }
                Some((spec.frame(&spec.event(ty, obj.clone())), span))
            }
            FeedEvent::Progress(rev) if spec.bookmarks => Some((spec.frame(&spec.bookmark(*rev)), None)),
            _ => None,
        }
    };
    for ev in backlog {
        if let Some((l, span)) = line_of(&ev) {
            if !deliver(tx, l, span).await {
                return;
            }
        }
    }
    loop {
        match live.recv().await {
            Ok(ev) => {
                if let Some((l, span)) = line_of(&ev) {
                    if !deliver(tx, l, span).await {
                        return;
                    }
                }
            }
            // Too slow, or the feed ended: the client re-watches from its last version.
            Err(_) => return,
        }
    }
}
