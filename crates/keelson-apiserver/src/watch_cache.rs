//! The watch cache: one store watch per resource per API server, decoded once and fanned
//! out to every API watcher of that resource.
//!
//! A feed keeps the last [`BACKLOG`] events in memory. A watcher joins with the revision
//! it needs next: under the feed's lock it takes the buffered events from that revision
//! on and subscribes to the live ones, so it sees every event exactly once, in order. A
//! revision older than the backlog is served by a watch of its own on the store (see
//! `http::watch`). A watcher that falls more than [`LIVE_QUEUE`] events behind is ended;
//! its client resumes from the last resourceVersion it saw, on any server.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};

use futures::StreamExt;
use keelson_client::api::{WatchCreate, WatchResponseKind};
use keelson_mvcc::{EventKind, KeyRange, Revision};
use serde_json::Value;
use tokio::sync::{broadcast, oneshot};
use tokio_util::sync::CancellationToken;

use crate::error::ApiError;
use crate::storage::{set_resource_version, ObjectStore};

/// Events kept per feed for watchers that start a little in the past.
pub const BACKLOG: usize = 4096;
/// Live events a watcher may fall behind before it is ended.
pub const LIVE_QUEUE: usize = 4096;

/// One change of one object, decoded once for all watchers.
#[derive(Debug)]
pub struct Change {
    pub key: Vec<u8>,
    pub revision: Revision,
    /// The object after the change; `None` for a deletion.
    pub object: Option<Value>,
    /// The object before the change (with its resourceVersion set to the deletion's
    /// revision for a deletion).
    pub previous: Option<Value>,
    /// The watch line for watchers without selectors, serialized once.
    pub plain_line: OnceLock<bytes::Bytes>,
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
}

/// The events of one resource.
pub struct Feed {
    state: Mutex<FeedState>,
    tx: broadcast::Sender<Arc<FeedEvent>>,
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

    fn publish(&self, ev: FeedEvent) {
        let ev = Arc::new(ev);
        let mut st = self.state.lock().expect("feed lock");
        if matches!(*ev, FeedEvent::Change(_)) {
            st.backlog.push_back(ev.clone());
            while st.backlog.len() > BACKLOG {
                if let Some(old) = st.backlog.pop_front() {
                    st.complete_from = st.complete_from.max(old.revision() + 1);
                }
            }
        }
        // Sent under the lock: a joiner sees each event either in its backlog or live.
        let _ = self.tx.send(ev);
    }
}

/// The feeds of one API server.
pub struct WatchCache {
    store: ObjectStore,
    feeds: tokio::sync::Mutex<HashMap<Vec<u8>, Arc<Feed>>>,
    shutdown: CancellationToken,
}

impl WatchCache {
    pub fn new(store: ObjectStore, shutdown: CancellationToken) -> Arc<Self> {
        Arc::new(Self { store, feeds: Default::default(), shutdown })
    }

    /// The feed of the resource whose keys start with `prefix`, started on first use.
    pub async fn feed(self: &Arc<Self>, prefix: &[u8]) -> Result<Arc<Feed>, ApiError> {
        let mut feeds = self.feeds.lock().await;
        if let Some(f) = feeds.get(prefix) {
            return Ok(f.clone());
        }
        let (tx, _) = broadcast::channel(LIVE_QUEUE);
        let feed = Arc::new(Feed { state: Mutex::new(FeedState { backlog: VecDeque::new(), complete_from: Revision::MAX }), tx });
        let (ready_tx, ready_rx) = oneshot::channel();
        let me = self.clone();
        let (f2, p2) = (feed.clone(), prefix.to_vec());
        tokio::spawn(async move {
            let why = me.run(&f2, &p2, ready_tx).await;
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

    /// Follows the store; returns why it stopped.
    async fn run(&self, feed: &Feed, prefix: &[u8], ready: oneshot::Sender<Result<(), ApiError>>) -> Result<(), ApiError> {
        let mut ready = Some(ready);
        let mut from: Revision = 0;
        loop {
            let create = WatchCreate { watch_id: 1, range: KeyRange::prefix(prefix.to_vec()), start_revision: from, prev_kv: true, progress_notify: true };
            let (_ctl, mut stream) = match self.store.client().watch(create).await {
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
                        for ev in events {
                            from = ev.kv.mod_revision + 1;
                            let object = match ev.kind {
                                EventKind::Put => self.store.decode(&ev.kv).ok().map(|s| s.obj),
                                EventKind::Delete => None,
                            };
                            let previous = ev.prev_kv.as_ref().and_then(|kv| self.store.decode(kv).ok()).map(|mut s| {
                                if ev.kind == EventKind::Delete {
                                    set_resource_version(&mut s.obj, ev.kv.mod_revision);
                                }
                                s.obj
                            });
                            feed.publish(FeedEvent::Change(Change { key: ev.kv.key, revision: ev.kv.mod_revision, object, previous, plain_line: OnceLock::new() }));
                        }
                    }
                    WatchResponseKind::Progress => {
                        from = from.max(resp.header.revision + 1);
                        feed.publish(FeedEvent::Progress(resp.header.revision));
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
