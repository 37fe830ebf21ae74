//! Watch streams: any replica serves them from its own applied state.
//!
//! A watch first replays the store's history from its start revision, then follows the
//! changes its replica applies. Because it subscribes to live changes before reading
//! history, and skips live changes below the next revision it owes, events come in
//! revision order, each exactly once, with no gaps. All replicas apply the same log, so a
//! client resuming on another replica from `last revision + 1` loses and repeats nothing.
//!
//! Memory stays bounded: live changes come through a fixed-size broadcast (a watcher that
//! falls behind re-reads history instead), and each stream has a fixed-size outbound
//! queue; a client that does not drain it for the slow-watcher timeout (default
//! [`SLOW_WATCHER_TIMEOUT`]) has its stream ended with a `RESOURCE_EXHAUSTED` status that
//! names the revision to resume from.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use keelson_client::api::*;
use keelson_mvcc::{Event, MvccError, Revision};
use keelson_proto::v1::Envelope;
use keelson_raft::AppliedChange;
use tokio::sync::{broadcast, mpsc, watch};
use tokio_util::sync::CancellationToken;
use tonic::{Status, Streaming};

use crate::replica::Replica;

/// Outbound queue per stream, in responses.
pub const STREAM_QUEUE: usize = 256;
/// Default for how long a watcher may leave its queue full before it is canceled.
pub const SLOW_WATCHER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a canceled slow stream waits for room to deliver its final error; the
/// stream holds nothing but that error meanwhile.
const SLOW_WATCHER_ERROR_GRACE: Duration = Duration::from_secs(300);
/// Interval of progress notifications for watches that asked for them.
pub const PROGRESS_INTERVAL: Duration = Duration::from_secs(5);
/// Events read from history per page while catching up.
const HISTORY_PAGE: usize = 1000;

type Outbound = mpsc::Sender<Result<Envelope, Status>>;

/// Serves one gRPC watch stream until the client closes it or the replica shuts down.
pub(crate) async fn serve_stream(
    replica: Replica,
    mut requests: Streaming<Envelope>,
    out: Outbound,
    slow_timeout: Duration,
    shutdown: CancellationToken,
) {
    let stream_token = shutdown.child_token();
    let (progress_tx, progress_rx) = watch::channel(0u64);
    let mut watches: HashMap<u64, CancellationToken> = HashMap::new();
    loop {
        let msg = tokio::select! {
            _ = stream_token.cancelled() => break,
            m = requests.next() => m,
        };
        let req: WatchRequest = match msg {
            None | Some(Err(_)) => break,
            Some(Ok(env)) => match postcard::from_bytes(&env.payload) {
                Ok(r) => r,
                Err(e) => {
                    let _ = out.send(Err(Status::invalid_argument(format!("malformed watch request: {e}")))).await;
                    break;
                }
            },
        };
        match req {
            WatchRequest::Create(create) => {
                if watches.contains_key(&create.watch_id) {
                    let _ = out.send(Err(Status::already_exists(format!("watch id {} in use", create.watch_id)))).await;
                    break;
                }
                let token = stream_token.child_token();
                watches.insert(create.watch_id, token.clone());
                replica.stats().watches_started.inc();
                let w = Watcher {
                    replica: replica.clone(),
                    create,
                    out: out.clone(),
                    progress: progress_rx.clone(),
                    cancel: token,
                    stream_cancel: stream_token.clone(),
                    slow_timeout,
                };
                tokio::spawn(w.run());
            }
            WatchRequest::Progress => {
                progress_tx.send_modify(|n| *n += 1);
            }
            WatchRequest::Cancel { watch_id } => {
                if let Some(t) = watches.remove(&watch_id) {
                    t.cancel();
                }
            }
        }
    }
    stream_token.cancel();
}

struct Watcher {
    replica: Replica,
    create: WatchCreate,
    out: Outbound,
    progress: watch::Receiver<u64>,
    cancel: CancellationToken,
    /// Cancels the whole stream (all its watches): used when the client stops reading.
    stream_cancel: CancellationToken,
    slow_timeout: Duration,
}

/// Why a watcher stopped early.
enum Stop {
    /// The client went away or canceled; nothing more to say.
    Quiet,
    /// Tell the client why and where to resume.
    Canceled(String),
    Compacted(Revision),
    /// The client left the stream's queue full for too long.
    Slow,
}

impl Watcher {
    #[tracing::instrument(name = "watch", skip_all, fields(id = self.create.watch_id, start = self.create.start_revision))]
    async fn run(mut self) {
        // Subscribe before anything is read, so no applied change can slip between
        // the history read and the live stream.
        let mut live = self.replica.state().subscribe();
        let mut next = self.create.start_revision;
        let stop = match self.start(&mut next).await {
            Ok(()) => self.follow(&mut live, &mut next).await,
            Err(s) => s,
        };
        let kind = match stop {
            Stop::Quiet => return,
            Stop::Canceled(reason) => WatchResponseKind::Canceled { reason, resume_revision: next },
            Stop::Compacted(compacted) => WatchResponseKind::Compacted { compacted },
            Stop::Slow => {
                // The queue is full, so a Canceled message would not fit. End the whole
                // stream: once the client drains what is queued it gets this error and
                // resumes (on any replica) from the last revision it saw.
                self.stream_cancel.cancel();
                let status = Status::resource_exhausted(format!(
                    "watch {} canceled: client too slow; resume from revision {next}",
                    self.create.watch_id
                ));
                let _ = self.out.send_timeout(Err(status), SLOW_WATCHER_ERROR_GRACE).await;
                return;
            }
        };
        // Best effort: the stream may be gone or its queue full.
        let resp = WatchResponse { watch_id: self.create.watch_id, header: self.replica.header(next - 1), kind };
        if let Ok(payload) = postcard::to_stdvec(&resp) {
            let _ = self.out.send_timeout(Ok(Envelope { payload }), Duration::from_secs(1)).await;
        }
    }

    async fn start(&mut self, next: &mut Revision) -> Result<(), Stop> {
        if *next <= 0 {
            // "From now": linearizable, so the watch misses nothing acknowledged before it.
            let current = self.replica.current_revision().await.map_err(|e| Stop::Canceled(e.to_string()))?;
            *next = current + 1;
        }
        self.send(*next - 1, WatchResponseKind::Created { start_revision: *next }).await
    }

    async fn follow(&mut self, live: &mut broadcast::Receiver<Arc<AppliedChange>>, next: &mut Revision) -> Stop {
        let mut ticker = tokio::time::interval(PROGRESS_INTERVAL);
        ticker.tick().await;
        'catch_up: loop {
            if let Err(s) = self.catch_up(next).await {
                return s;
            }
            loop {
                tokio::select! {
                    _ = self.cancel.cancelled() => return Stop::Canceled("watch canceled".into()),
                    change = live.recv() => match change {
                        Ok(change) => match &*change {
                            AppliedChange::Events { revision, events } => {
                                if *revision < *next {
                                    continue; // already delivered from history
                                }
                                if *revision > *next {
                                    // Every revision carries events, so one was missed: refill from history.
                                    continue 'catch_up;
                                }
                                let prev_kv = self.create.prev_kv;
                                let matched: Vec<Event> = events
                                    .iter()
                                    .filter(|e| self.create.range.contains(&e.kv.key))
                                    .map(|e| Event { prev_kv: if prev_kv { e.prev_kv.clone() } else { None }, ..e.clone() })
                                    .collect();
                                *next = revision + 1;
                                if !matched.is_empty() {
                                    if let Err(s) = self.send(*revision, WatchResponseKind::Events(matched)).await {
                                        return s;
                                    }
                                }
                            }
                            AppliedChange::Reset { .. } => continue 'catch_up,
                        },
                        Err(broadcast::error::RecvError::Lagged(n)) => {
                            tracing::debug!(skipped = n, "watcher lagged; catching up from history");
                            continue 'catch_up;
                        }
                        Err(broadcast::error::RecvError::Closed) => {
                            return Stop::Canceled("replica is shutting down".into());
                        }
                    },
                    _ = ticker.tick(), if self.create.progress_notify => {
                        if let Err(s) = self.send_progress(*next).await { return s; }
                    }
                    r = self.progress.changed() => {
                        if r.is_err() { return Stop::Quiet; }
                        if let Err(s) = self.send_progress(*next).await { return s; }
                    }
                }
            }
        }
    }

    /// Replays history from `next` up to the store's current revision.
    async fn catch_up(&mut self, next: &mut Revision) -> Result<(), Stop> {
        loop {
            let store = self.replica.state().store.clone();
            let (from, range, prev_kv) = (*next, self.create.range.clone(), self.create.prev_kv);
            let page = tokio::task::spawn_blocking(move || store.events_since(from, &range, prev_kv, HISTORY_PAGE))
                .await
                .map_err(|e| Stop::Canceled(e.to_string()))?;
            let page = match page {
                Ok(p) => p,
                Err(MvccError::Compacted { compacted, .. }) => return Err(Stop::Compacted(compacted)),
                Err(e) => return Err(Stop::Canceled(e.to_string())),
            };
            let caught_up = page.next_revision > page.current_revision;
            if !page.events.is_empty() {
                self.send(page.next_revision - 1, WatchResponseKind::Events(page.events)).await?;
            }
            *next = page.next_revision.max(*next);
            if caught_up {
                return Ok(());
            }
        }
    }

    async fn send_progress(&self, next: Revision) -> Result<(), Stop> {
        self.send(next - 1, WatchResponseKind::Progress).await
    }

    async fn send(&self, revision: Revision, kind: WatchResponseKind) -> Result<(), Stop> {
        let n_events = match &kind {
            WatchResponseKind::Events(e) => e.len() as u64,
            _ => 0,
        };
        let resp = WatchResponse { watch_id: self.create.watch_id, header: self.replica.header(revision), kind };
        let env = Envelope { payload: postcard::to_stdvec(&resp).map_err(|e| Stop::Canceled(e.to_string()))? };
        match self.out.send_timeout(Ok(env), self.slow_timeout).await {
            Ok(()) => {
                self.replica.stats().watch_events_sent.inc_by(n_events);
                Ok(())
            }
            Err(mpsc::error::SendTimeoutError::Closed(_)) => Err(Stop::Quiet),
            Err(mpsc::error::SendTimeoutError::Timeout(_)) => {
                self.replica.stats().watches_canceled_slow.inc();
                tracing::warn!(watch_id = self.create.watch_id, "watcher too slow; canceling it");
                Err(Stop::Slow)
            }
        }
    }
}
