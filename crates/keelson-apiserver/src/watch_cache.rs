//! The watch cache: one store watch per resource per API server, decoded once and fanned
//! out to every API watcher of that resource, and the resource's current objects, which
//! lists are served from.
//!
//! A feed starts with a linearizable range of the resource at revision R (its objects),
//! then watches from R + 1. Every event updates the objects and the revision the feed has
//! *reached* (everything up to it is applied), and so does a progress notification. A
//! list reads the objects and the reached revision under one lock, so a page is exactly
//! the store's state at that revision; see `http::list` for when a list may be served
//! from here.
//!
//! A feed keeps the last [`BACKLOG`] events in memory. A watcher joins with the revision
//! it needs next: under the feed's lock it takes the buffered events from that revision
//! on and subscribes to the live ones, so it sees every event exactly once, in order. A
//! revision older than the backlog is served by a watch of its own on the store (see
//! `http::watch`). A watcher that falls more than [`LIVE_QUEUE`] events behind is ended;
//! its client resumes from the last resourceVersion it saw, on any server.

mod cached_objects;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::StreamExt;
use keelson_client::api::{ReadConsistency, WatchCreate, WatchRequest, WatchResponseKind};
use keelson_mvcc::{EventKind, KeyRange, RangeRequest, Revision};
use serde_json::Value;
use tokio::sync::{broadcast, oneshot, watch, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use self::cached_objects::{CachedObjects, CachedPage};
use crate::error::ApiError;
use crate::metrics::{FeedGauges, WatchCacheMetrics};
use crate::storage::{set_resource_version, ObjectStore, Stored};

/// Events kept per feed for watchers that start a little in the past.
pub const BACKLOG: usize = 4096;
/// Live events a watcher may fall behind before it is ended.
pub const LIVE_QUEUE: usize = 4096;
/// How often a list waiting for the feed to reach a revision asks the store for a
/// progress notification (a resource without writes only advances by those).
pub const PROGRESS_REQUEST_INTERVAL: Duration = Duration::from_millis(100);

/// One change of one object, decoded once for all watchers.
#[derive(Debug)]
pub struct Change {
    pub key: Vec<u8>,
    pub revision: Revision,
    /// The object after the change; `None` for a deletion. Shared with the feed's objects.
    pub object: Option<Arc<Stored>>,
    /// The object before the change (with its resourceVersion set to the deletion's
    /// revision for a deletion).
    pub previous: Option<Value>,
    /// The watch line for watchers without selectors, serialized once.
    pub plain_line: OnceLock<bytes::Bytes>,
    /// The same as a protobuf watch frame, encoded once.
    pub plain_frame: OnceLock<bytes::Bytes>,
    /// The sampled trace the object carries, read once for all watchers.
    trace: OnceLock<Option<keelson_tracecontext::TraceParent>>,
}

impl Change {
    pub fn new(key: Vec<u8>, revision: Revision, object: Option<Arc<Stored>>, previous: Option<Value>) -> Self {
        Change { key, revision, object, previous, plain_line: OnceLock::new(), plain_frame: OnceLock::new(), trace: OnceLock::new() }
    }

    /// The sampled trace of the object this change sends ([`keelson_tracecontext::POD_ANNOTATION`]:
    /// the object after the change, or before it for a deletion), if it carries one.
    pub fn trace(&self) -> Option<keelson_tracecontext::TraceParent> {
        *self.trace.get_or_init(|| {
            let obj = self.object.as_deref().map(|s| &s.obj).or(self.previous.as_ref())?;
            sampled_trace(obj)
        })
    }
}

/// The sampled trace `obj` carries in [`keelson_tracecontext::POD_ANNOTATION`], if any.
pub fn sampled_trace(obj: &Value) -> Option<keelson_tracecontext::TraceParent> {
    let parent: keelson_tracecontext::TraceParent = obj.pointer("/metadata/annotations")?.get(keelson_tracecontext::POD_ANNOTATION)?.as_str()?.parse().ok()?;
    parent.sampled.then_some(parent)
}

#[derive(Debug)]
pub enum FeedEvent {
    Change(Change),
    /// Nothing changed in the resource up to this revision.
    Progress(Revision),
}

impl FeedEvent {
    pub fn revision(&self) -> Revision {
        match self {
            FeedEvent::Change(c) => c.revision,
            FeedEvent::Progress(r) => *r,
        }
    }
}

struct FeedState {
    backlog: VecDeque<Arc<FeedEvent>>,
    /// Every change with a revision at or after this is in the backlog.
    complete_from: Revision,
    /// The resource's objects at revision `reached`.
    objects: CachedObjects,
    /// Every change up to this revision is applied to `objects`.
    reached: Revision,
    /// False once the feed stopped following the store: its objects are then stale.
    following: bool,
}

/// The events and the current objects of one resource.
pub struct Feed {
    /// The metrics label: the key prefix without `/registry/` (`core/pods`).
    resource: String,
    state: Mutex<FeedState>,
    tx: broadcast::Sender<Arc<FeedEvent>>,
    /// `reached`, for lists waiting on it.
    reached: watch::Sender<Revision>,
    /// Set by a waiting list; the feed then asks the store for a progress notification.
    progress_wanted: Notify,
    gauges: FeedGauges,
}

/// A page of a list served by a feed.
pub struct FeedPage {
    pub page: CachedPage,
    /// The revision the page is exactly the state of.
    pub revision: Revision,
}

/// What a list waiting for a feed to reach a revision does next.
#[derive(Debug, PartialEq, Eq)]
pub enum WaitStep {
    /// The feed has reached the revision: serve from it.
    Serve,
    /// Not yet: ask for a progress notification and wait for the feed to move.
    Wait,
    /// Not within the bound: serve the list from the store instead.
    GiveUp,
}

/// The revision-wait decision of a list that needs revision `needed` from a feed that has
/// reached `reached`, having waited `waited` of at most `bound`.
pub fn wait_step(reached: Revision, needed: Revision, waited: Duration, bound: Duration) -> WaitStep {
    if reached >= needed {
        WaitStep::Serve
    } else if waited >= bound {
        WaitStep::GiveUp
    } else {
        WaitStep::Wait
    }
}

/// What a joining watcher gets: the buffered events it needs, then the live ones.
pub struct Joined {
    pub backlog: Vec<Arc<FeedEvent>>,
    pub live: broadcast::Receiver<Arc<FeedEvent>>,
}

impl Feed {
    /// Joins from revision `from`; `None` when the backlog does not reach back that far.
    pub fn join(&self, from: Revision) -> Option<Joined> {
        let st = self.state.lock().expect("feed lock");
        if from < st.complete_from {
            return None;
        }
        let backlog = st.backlog.iter().filter(|e| matches!(***e, FeedEvent::Change(ref c) if c.revision >= from)).cloned().collect();
        Some(Joined { backlog, live: self.tx.subscribe() })
    }

    /// The metrics label of the feed's resource.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// Waits until the feed has reached revision `needed`, asking the store for progress
    /// notifications meanwhile, for at most `bound`. False if it did not (or the feed
    /// stopped).
    pub async fn wait_reached(&self, needed: Revision, bound: Duration) -> bool {
        let started = Instant::now();
        let mut reached = self.reached.subscribe();
        loop {
            let now = *reached.borrow_and_update();
            match wait_step(now, needed, started.elapsed(), bound) {
                WaitStep::Serve => return self.state.lock().expect("feed lock").following,
                WaitStep::GiveUp => return false,
                WaitStep::Wait => {
                    self.progress_wanted.notify_one();
                    let next_ask = Instant::now() + PROGRESS_REQUEST_INTERVAL;
                    let deadline = (started + bound).min(next_ask);
                    if let Ok(Err(_)) = tokio::time::timeout_at(deadline, reached.changed()).await {
                        return false;
                    }
                }
            }
        }
    }

    /// A page of the list under `prefix` (see [`CachedObjects::page`]) at the revision the
    /// feed has reached; `None` when the feed no longer follows the store.
    pub fn page(&self, prefix: &[u8], after: Option<&[u8]>, limit: usize, matches: impl Fn(&Value) -> bool) -> Option<FeedPage> {
        let st = self.state.lock().expect("feed lock");
        if !st.following {
            return None;
        }
        Some(FeedPage { page: st.objects.page(prefix, after, limit, matches), revision: st.reached })
    }

    /// Applies the changes of one store watch response, which has seen everything of the
    /// resource up to `reached`, and publishes them to the watchers.
    fn apply(&self, changes: Vec<(Change, usize)>, reached: Revision) {
        let mut st = self.state.lock().expect("feed lock");
        for (change, approx_bytes) in changes {
            st.objects.apply(&change.key, change.object.clone(), approx_bytes);
            let ev = Arc::new(FeedEvent::Change(change));
            st.backlog.push_back(ev.clone());
            while st.backlog.len() > BACKLOG {
                if let Some(old) = st.backlog.pop_front() {
                    st.complete_from = st.complete_from.max(old.revision() + 1);
                }
            }
            // Sent under the lock: a joiner sees each event either in its backlog or live.
            let _ = self.tx.send(ev);
        }
        self.advance(&mut st, reached);
        self.gauges.objects.set(st.objects.len() as i64);
        self.gauges.bytes.set(st.objects.approx_bytes() as i64);
    }

    /// Nothing changed in the resource up to `revision`.
    fn progress(&self, revision: Revision) {
        let mut st = self.state.lock().expect("feed lock");
        self.advance(&mut st, revision);
        let _ = self.tx.send(Arc::new(FeedEvent::Progress(revision)));
    }

    /// A lagging replica may report progress below what the feed has reached: the
    /// reached revision never goes back.
    fn advance(&self, st: &mut FeedState, revision: Revision) {
        if revision > st.reached {
            st.reached = revision;
            self.reached.send_replace(revision);
        }
    }

    fn load(&self, objects: CachedObjects, revision: Revision) {
        let mut st = self.state.lock().expect("feed lock");
        self.gauges.objects.set(objects.len() as i64);
        self.gauges.bytes.set(objects.approx_bytes() as i64);
        st.objects = objects;
        st.reached = revision;
        st.following = true;
        self.reached.send_replace(revision);
    }

    fn stop_following(&self) {
        let mut st = self.state.lock().expect("feed lock");
        st.following = false;
        st.objects = CachedObjects::default();
        self.gauges.objects.set(0);
        self.gauges.bytes.set(0);
    }
}

/// The feeds of one API server.
pub struct WatchCache {
    store: ObjectStore,
    feeds: tokio::sync::Mutex<HashMap<Vec<u8>, Arc<Feed>>>,
    metrics: WatchCacheMetrics,
    shutdown: CancellationToken,
}

impl WatchCache {
    pub fn new(store: ObjectStore, metrics: WatchCacheMetrics, shutdown: CancellationToken) -> Arc<Self> {
        Arc::new(Self { store, feeds: Default::default(), metrics, shutdown })
    }

    pub fn metrics(&self) -> &WatchCacheMetrics {
        &self.metrics
    }

    /// The feed of the resource whose keys start with `prefix`, started on first use.
    pub async fn feed(self: &Arc<Self>, prefix: &[u8]) -> Result<Arc<Feed>, ApiError> {
        let mut feeds = self.feeds.lock().await;
        if let Some(f) = feeds.get(prefix) {
            return Ok(f.clone());
        }
        let (tx, _) = broadcast::channel(LIVE_QUEUE);
        let resource = String::from_utf8_lossy(prefix);
        let resource = resource.trim_start_matches("/registry/").trim_end_matches('/').to_string();
        let state = FeedState { backlog: VecDeque::new(), complete_from: Revision::MAX, objects: CachedObjects::default(), reached: 0, following: false };
        let feed = Arc::new(Feed {
            gauges: self.metrics.feed_gauges(&resource),
            resource,
            state: Mutex::new(state),
            tx,
            reached: watch::Sender::new(0),
            progress_wanted: Notify::new(),
        });
        let (ready_tx, ready_rx) = oneshot::channel();
        let me = self.clone();
        let (f2, p2) = (feed.clone(), prefix.to_vec());
        tokio::spawn(async move {
            let why = me.run(&f2, &p2, ready_tx).await;
            f2.stop_following();
            tracing::debug!(prefix = %String::from_utf8_lossy(&p2), ?why, "watch cache feed ended");
            let mut feeds = me.feeds.lock().await;
            if feeds.get(&p2).is_some_and(|f| Arc::ptr_eq(f, &f2)) {
                feeds.remove(&p2);
            }
            // Dropping the feed's sender ends every watcher on it.
        });
        match ready_rx.await {
            Ok(Ok(())) => {
                feeds.insert(prefix.to_vec(), feed.clone());
                Ok(feed)
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(ApiError::Unavailable("the watch cache could not start".into())),
        }
    }

    /// The resource's objects and the revision they are read at, linearizably.
    async fn read_objects(&self, prefix: &[u8]) -> Result<(CachedObjects, Revision), ApiError> {
        let request = RangeRequest { range: KeyRange::prefix(prefix.to_vec()), ..Default::default() };
        let reply = self.store.client().range(request, ReadConsistency::Linearizable).await?;
        let mut objects = CachedObjects::default();
        for kv in &reply.response.kvs {
            let stored = self.store.decode(kv)?;
            objects.apply(&kv.key, Some(Arc::new(stored)), kv.key.len() + kv.value.len());
        }
        Ok((objects, reply.header.revision))
    }

    /// Reads the resource, then follows the store from the next revision; returns why it
    /// stopped.
    async fn run(&self, feed: &Feed, prefix: &[u8], ready: oneshot::Sender<Result<(), ApiError>>) -> Result<(), ApiError> {
        let mut ready = Some(ready);
        let mut from: Revision = match self.read_objects(prefix).await {
            Ok((objects, revision)) => {
                feed.load(objects, revision);
                revision + 1
            }
            Err(e) => {
                if let Some(r) = ready.take() {
                    let _ = r.send(Err(e.clone()));
                }
                return Err(e);
            }
        };
        loop {
            let create = WatchCreate { watch_id: 1, range: KeyRange::prefix(prefix.to_vec()), start_revision: from, prev_kv: true, progress_notify: true };
            let (ctl, mut stream) = match self.store.client().watch(create).await {
                Ok(s) => s,
                Err(e) => {
                    let e = ApiError::from(e);
                    if let Some(r) = ready.take() {
                        let _ = r.send(Err(e.clone()));
                    }
                    return Err(e);
                }
            };
            loop {
                let msg = tokio::select! {
                    _ = self.shutdown.cancelled() => return Ok(()),
                    _ = feed.progress_wanted.notified() => {
                        // A closed request channel shows as the stream's end.
                        let _ = ctl.send(WatchRequest::Progress).await;
                        continue;
                    }
                    m = stream.next() => m,
                };
                let resp = match msg {
                    None => return Err(ApiError::Unavailable("store watch ended".into())),
                    Some(Err(e)) => {
                        let e = ApiError::from(e);
                        if let Some(r) = ready.take() {
                            let _ = r.send(Err(e.clone()));
                        }
                        return Err(e);
                    }
                    Some(Ok(r)) => r,
                };
                match resp.kind {
                    WatchResponseKind::Created { start_revision } => {
                        if let Some(r) = ready.take() {
                            feed.state.lock().expect("feed lock").complete_from = start_revision;
                            let _ = r.send(Ok(()));
                        }
                    }
                    WatchResponseKind::Events(events) => {
                        let mut changes = Vec::with_capacity(events.len());
                        for ev in events {
                            from = ev.kv.mod_revision + 1;
                            let (object, approx_bytes) = match ev.kind {
                                // An object that does not decode stops the feed: lists and
                                // watches then go to the store, which reports it.
                                EventKind::Put => (Some(Arc::new(self.store.decode(&ev.kv)?)), ev.kv.key.len() + ev.kv.value.len()),
                                EventKind::Delete => (None, 0),
                            };
                            let previous = ev.prev_kv.as_ref().and_then(|kv| self.store.decode(kv).ok()).map(|mut s| {
                                if ev.kind == EventKind::Delete {
                                    set_resource_version(&mut s.obj, ev.kv.mod_revision);
                                }
                                s.obj
                            });
                            changes.push((Change::new(ev.kv.key, ev.kv.mod_revision, object, previous), approx_bytes));
                        }
                        // A response holds whole revisions; its header is the last it covers.
                        from = from.max(resp.header.revision + 1);
                        feed.apply(changes, resp.header.revision);
                    }
                    WatchResponseKind::Progress => {
                        from = from.max(resp.header.revision + 1);
                        feed.progress(resp.header.revision);
                    }
                    // The store ended the watch (slow consumer): resume where it stopped.
                    WatchResponseKind::Canceled { resume_revision, .. } => {
                        from = resume_revision;
                        break;
                    }
                    WatchResponseKind::Compacted { compacted } => {
                        return Err(ApiError::Gone(format!("watch cache fell behind compaction ({compacted})")));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUND: Duration = Duration::from_secs(3);

    #[test]
    fn a_list_is_served_once_the_feed_reached_its_revision() {
        assert_eq!(wait_step(10, 10, Duration::ZERO, BOUND), WaitStep::Serve);
        assert_eq!(wait_step(12, 10, Duration::ZERO, BOUND), WaitStep::Serve);
        assert_eq!(wait_step(12, 10, BOUND * 2, BOUND), WaitStep::Serve, "reached is reached, however late");
    }

    #[test]
    fn a_feed_behind_is_waited_for_within_the_bound_only() {
        assert_eq!(wait_step(9, 10, Duration::ZERO, BOUND), WaitStep::Wait);
        assert_eq!(wait_step(9, 10, BOUND - Duration::from_millis(1), BOUND), WaitStep::Wait);
        assert_eq!(wait_step(9, 10, BOUND, BOUND), WaitStep::GiveUp);
    }

    #[test]
    fn a_change_reads_the_trace_of_what_it_sends() {
        let traced = |flags: &str| serde_json::json!({"metadata": {"annotations": {keelson_tracecontext::POD_ANNOTATION: format!("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-{flags}")}}});
        let created = Change::new(b"/k".to_vec(), 5, Some(Arc::new(Stored::new(traced("01"), 5))), None);
        assert_eq!(created.trace().map(|t| t.span_id.to_string()), Some("00f067aa0ba902b7".to_string()));
        // A deletion sends the object as it was.
        let deleted = Change::new(b"/k".to_vec(), 6, None, Some(traced("01")));
        assert!(deleted.trace().is_some());
        // Not sampled, or not traced at all: no delivery span.
        assert!(Change::new(b"/k".to_vec(), 7, Some(Arc::new(Stored::new(traced("00"), 7))), None).trace().is_none());
        assert!(Change::new(b"/k".to_vec(), 8, Some(Arc::new(Stored::new(serde_json::json!({"metadata": {}}), 8))), None).trace().is_none());
    }

    #[test]
    fn revision_zero_never_waits() {
        assert_eq!(wait_step(0, 0, Duration::ZERO, BOUND), WaitStep::Serve);
    }
}
