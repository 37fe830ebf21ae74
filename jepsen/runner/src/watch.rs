//! The watch workload: writers put and delete keys under one prefix while watchers,
//! spread over the replicas, follow the prefix. Every few seconds a watcher's stream is
//! cut and resumed on the next replica from the last revision it saw. The checker then
//! verifies order, uniqueness, gap-freedom, agreement, lossless resumption and that every
//! acknowledged write was delivered.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use keelson_client::api::{WatchCreate, WatchResponseKind};
use keelson_client::{PeerTls, StoreClient};
use keelson_jepsen::{ChangeKind, EventKind, Function, HistoryEvent, HistoryWriter, Value};
use keelson_mvcc::{prefix_end, EventKind as StoreEventKind, KeyRange, OpResponse, Revision};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio_util::sync::CancellationToken;

use crate::register::{classify_write_error, WriteOutcome, OP_TIMEOUT};

/// Store key prefix of the watched keys.
pub const WATCH_PREFIX: &str = "/jepsen/watch/";

/// A watch workload's parameters.
#[derive(Clone, Debug)]
pub struct WatchWorkload {
    pub writers: usize,
    pub watchers: usize,
    pub keys: usize,
    /// A watcher's stream is cut after a random time up to this.
    pub max_segment: Duration,
    /// How long watchers keep following after the writers stopped.
    pub drain: Duration,
}

impl Default for WatchWorkload {
    fn default() -> Self {
        Self { writers: 4, watchers: 6, keys: 8, max_segment: Duration::from_secs(4), drain: Duration::from_secs(3) }
    }
}

impl WatchWorkload {
    /// Runs writers until `stop`, watchers until `drain` after it. `tls`: the identity the
    /// store port requires (mutual TLS), `None` for plaintext. Returns the number of
    /// writes invoked.
    pub async fn run(
        &self,
        endpoints: &[String],
        tls: Option<&PeerTls>,
        history: Arc<HistoryWriter>,
        seed: u64,
        stop: CancellationToken,
    ) -> u64 {
        let base = match StoreClient::with_transport(endpoints, tls) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("jepsen: watch: store client: {e}");
                return 0;
            }
        };
        let watch_stop = CancellationToken::new();
        let mut watchers = Vec::new();
        for w in 0..self.watchers {
            let me = self.clone();
            let client = base.starting_at(w);
            let history = history.clone();
            let stop = watch_stop.clone();
            watchers.push(tokio::spawn(async move { me.watcher(w as u64, client, history, seed ^ (w as u64 + 77), stop).await }));
        }
        let mut writers = Vec::new();
        for c in 0..self.writers {
            let me = self.clone();
            let client = base.starting_at(c);
            let history = history.clone();
            let stop = stop.clone();
            writers.push(tokio::spawn(async move { me.writer(c as u64, client, history, seed ^ (c as u64 * 31), stop).await }));
        }
        let mut total = 0;
        for t in writers {
            total += t.await.unwrap_or(0);
        }
        tokio::time::sleep(self.drain).await;
        watch_stop.cancel();
        for t in watchers {
            let _ = t.await;
        }
        let _ = history.flush();
        total
    }

    async fn writer(&self, first: u64, client: StoreClient, history: Arc<HistoryWriter>, seed: u64, stop: CancellationToken) -> u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut process = first;
        let mut n = 0u64;
        while !stop.is_cancelled() {
            let key = format!("{WATCH_PREFIX}{}", rng.gen_range(0..self.keys));
            let delete = rng.gen_bool(0.2);
            let (f, value) = if delete { (Function::Delete, Value::Nil) } else { (Function::Put, Value::str(format!("p{process}-{n}"))) };
            n += 1;
            if history.invoke(process, f, Some(&key), value.clone()).is_err() {
                break;
            }
            let call = async {
                match &value {
                    Value::Str(v) => client.put(key.as_bytes(), v.as_bytes()).await,
                    _ => client.delete(KeyRange::single(key.clone())).await,
                }
            };
            let (kind, revision, error) = match tokio::time::timeout(OP_TIMEOUT, call).await {
                Ok(Ok(r)) => {
                    // A delete of an absent key changes nothing and creates no revision
                    // (the reply carries the current one): record it without a revision.
                    let changed = match r.response.responses.first() {
                        Some(OpResponse::DeleteRange(d)) => d.deleted > 0,
                        _ => true,
                    };
                    (EventKind::Ok, changed.then_some(r.header.revision as u64), None)
                }
                Ok(Err(e)) => match classify_write_error(&e) {
                    WriteOutcome::Fail(m) => (EventKind::Fail, None, Some(m)),
                    WriteOutcome::Info(m) => (EventKind::Info, None, Some(m)),
                },
                Err(_) => (EventKind::Info, None, Some("timed out".to_string())),
            };
            let mut ev = HistoryEvent::new(process, kind, f, value).with_key(key);
            ev.revision = revision;
            ev.error = error;
            if history.record_now(ev).is_err() {
                break;
            }
            match kind {
                EventKind::Info => {
                    process += self.writers as u64;
                    client.rotate();
                }
                EventKind::Fail => client.rotate(),
                _ => {}
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        n
    }

    fn observation(&self, watcher: u64, f: Function) -> HistoryEvent {
        // Watch observations use their own process ids, apart from the writers'.
        HistoryEvent::new(1_000_000 + watcher, EventKind::Ok, f, Value::Nil).with_watcher(watcher)
    }

    async fn watcher(&self, id: u64, client: StoreClient, history: Arc<HistoryWriter>, seed: u64, stop: CancellationToken) {
        let mut rng = StdRng::seed_from_u64(seed);
        let range = KeyRange::prefix(WATCH_PREFIX);
        let range_end = String::from_utf8_lossy(&prefix_end(WATCH_PREFIX.as_bytes())).into_owned();
        // The last revision this watcher has fully seen; None until the first stream opened.
        let mut seen: Option<Revision> = None;
        while !stop.is_cancelled() {
            let create = WatchCreate {
                watch_id: 1,
                range: range.clone(),
                start_revision: seen.map(|r| r + 1).unwrap_or(0),
                prev_kv: false,
                progress_notify: true,
            };
            let opened = client.watch(create).await;
            let Ok((_tx, mut stream)) = opened else {
                client.rotate();
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let segment = tokio::time::sleep(Duration::from_millis(rng.gen_range(500..=self.max_segment.as_millis().max(501) as u64)));
            tokio::pin!(segment);
            loop {
                let msg = tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = &mut segment => break,
                    m = stream.next() => m,
                };
                let Some(Ok(resp)) = msg else { break };
                let rec = match resp.kind {
                    WatchResponseKind::Created { start_revision } => {
                        let mut ev = if seen.is_none() {
                            let mut ev = self.observation(id, Function::Watch).with_key(WATCH_PREFIX);
                            ev.range_end = Some(range_end.clone());
                            ev
                        } else {
                            self.observation(id, Function::WatchResume)
                        };
                        ev.revision = Some((start_revision - 1) as u64);
                        seen = Some(start_revision - 1);
                        vec![ev]
                    }
                    WatchResponseKind::Events(events) => {
                        let mut out = Vec::new();
                        for e in events {
                            let mut ev = self.observation(id, Function::WatchEvent).with_key(String::from_utf8_lossy(&e.kv.key));
                            ev.revision = Some(e.kv.mod_revision as u64);
                            match e.kind {
                                StoreEventKind::Put => {
                                    ev.event = Some(ChangeKind::Put);
                                    ev.value = Value::str(String::from_utf8_lossy(&e.kv.value));
                                }
                                StoreEventKind::Delete => ev.event = Some(ChangeKind::Delete),
                            }
                            out.push(ev);
                        }
                        seen = Some(resp.header.revision.max(seen.unwrap_or(0)));
                        out
                    }
                    WatchResponseKind::Progress => {
                        let mut ev = self.observation(id, Function::WatchProgress);
                        ev.revision = Some(resp.header.revision as u64);
                        seen = Some(resp.header.revision.max(seen.unwrap_or(0)));
                        vec![ev]
                    }
                    // Compacted past us or canceled: resume (a compaction ends the watcher).
                    WatchResponseKind::Compacted { .. } => return,
                    WatchResponseKind::Canceled { .. } => break,
                };
                for ev in rec {
                    if history.record_now(ev).is_err() {
                        return;
                    }
                }
            }
            // Cut: resume on the next replica from the last revision seen.
            client.rotate();
        }
    }
}
