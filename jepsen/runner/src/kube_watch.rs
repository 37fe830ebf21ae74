//! The watch workload through the Kubernetes API: writers create, replace and delete the
//! ConfigMaps `jepsen-w-<k>` in namespace `default` through some API servers while
//! watchers follow every ConfigMap of the namespace through others (kube-rs `Api::watch`
//! from an exact resourceVersion, bookmarks on). Every few seconds a watcher's stream is
//! cut and resumed on the next API server from the last resourceVersion it saw; a
//! watcher whose API server dies or errs does the same.
//!
//! resourceVersion is the store revision, so API watch events map 1:1 onto the watch
//! checker's (revision, key) changes, with key = `default/<name>`. The authoritative
//! sequence is recorded too: after the writers stop, a store-level watch
//! (`keelson_client::StoreClient`) from the revision before the first watcher started
//! up to the store's current revision becomes the observations of watcher
//! [`REFERENCE_WATCHER`]. The checker then proves, for every API watcher and every
//! segment of its stream, that it delivered exactly the store's changes inside its
//! window, in order, once, with the same content; across resumes nothing is lost or
//! repeated; and every acknowledged write was delivered. Finally every watcher must
//! have caught up with the store's last change (a stalled watch is an anomaly too).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use keelson_client::api::{ReadConsistency, WatchCreate, WatchRequest, WatchResponseKind};
use keelson_client::StoreClient;
use keelson_jepsen::{ChangeKind, EventKind, Function, HistoryEvent, HistoryWriter, Value};
use keelson_mvcc::{EventKind as StoreEventKind, KeyRange, RangeRequest, Revision};
use kube::api::{DeleteParams, ListParams, WatchEvent, WatchParams};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio_util::sync::CancellationToken;

use crate::kube_api::{self, KubeTarget, Servers, NAMESPACE};
use crate::register::{WriteOutcome, OP_TIMEOUT};

/// Watcher id of the store's own (authoritative) watch.
pub const REFERENCE_WATCHER: u64 = 999_999;

/// Store key prefix of the namespace's ConfigMaps (what an API watch of them follows).
const STORE_PREFIX: &str = "/registry/core/configmaps/default/";

/// How long watchers get to catch up with the store's last change after the writers
/// stopped.
const CATCH_UP: Duration = Duration::from_secs(20);

/// The workload's ConfigMaps are named with this; other ConfigMaps of the namespace
/// (the published `kube-root-ca.crt`, say) are none of the check's business.
const WRITE_PREFIX: &str = "jepsen-w-";

/// History key of a ConfigMap.
fn history_key(name: &str) -> String {
    format!("{NAMESPACE}/{name}")
}

/// A Kubernetes-API watch workload's parameters.
#[derive(Clone, Debug)]
pub struct KubeWatchWorkload {
    pub writers: usize,
    pub watchers: usize,
    pub keys: usize,
    /// A watcher's stream is cut after a random time up to this.
    pub max_segment: Duration,
}

impl Default for KubeWatchWorkload {
    fn default() -> Self {
        Self { writers: 4, watchers: 6, keys: 8, max_segment: Duration::from_secs(4) }
    }
}

/// What the workload itself found besides the history.
#[derive(Debug, Default)]
pub struct KubeWatchResult {
    /// Writes invoked.
    pub invoked: u64,
    /// Anomalies the watch checker cannot see (a watcher that never caught up), and
    /// failures to establish the reference.
    pub violations: Vec<String>,
    /// Remarks (e.g. watchers ended by compaction).
    pub notes: Vec<String>,
}

/// How a watcher ended.
struct WatcherEnd {
    id: u64,
    /// Highest revision it had seen (events, bookmarks, its start).
    reached: Option<u64>,
    /// Ended by a 410 Gone (its resourceVersion was compacted).
    expired: bool,
}

fn observation(watcher: u64, f: Function) -> HistoryEvent {
    // Observations use their own process ids, apart from the writers'.
    HistoryEvent::new(1_000_000 + watcher, EventKind::Ok, f, Value::Nil).with_watcher(watcher)
}

fn start_record(watcher: u64, revision: u64) -> HistoryEvent {
    let range = keelson_jepsen::watch::KeyRange::prefix(&format!("{NAMESPACE}/{WRITE_PREFIX}"));
    let mut ev = observation(watcher, Function::Watch).with_key(range.start);
    ev.range_end = range.end;
    ev.revision = Some(revision);
    ev
}

/// The store's current revision, linearizably (retrying over the replicas).
async fn store_revision(client: &StoreClient, deadline: Instant) -> Result<Revision, String> {
    loop {
        let req = RangeRequest { range: KeyRange::prefix(STORE_PREFIX), count_only: true, ..Default::default() };
        match tokio::time::timeout(OP_TIMEOUT, client.range(req, ReadConsistency::Linearizable)).await {
            Ok(Ok(r)) => return Ok(r.header.revision),
            Ok(Err(e)) if Instant::now() >= deadline => return Err(e.to_string()),
            Err(_) if Instant::now() >= deadline => return Err("timed out".into()),
            _ => {
                client.rotate();
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

impl KubeWatchWorkload {
    /// Runs writers until `stop`, then records the store's authoritative sequence and
    /// lets the watchers catch up with it.
    pub async fn run(&self, target: &KubeTarget, history: Arc<HistoryWriter>, seed: u64, stop: CancellationToken) -> KubeWatchResult {
        let mut result = KubeWatchResult::default();
        let configs = match kube_api::api_configs(target).await {
            Ok(c) => c,
            Err(e) => {
                result.violations.push(format!("kube-watch could not start: {e}"));
                return result;
            }
        };
        if let Err(e) = kube_api::wait_for_namespace(&configs, Duration::from_secs(60)).await {
            result.violations.push(format!("kube-watch could not start: {e}"));
            return result;
        }
        let store = match StoreClient::with_transport(&target.store_endpoints, target.store_tls.as_ref()) {
            Ok(s) => s,
            Err(e) => {
                result.violations.push(format!("kube-watch: store client: {e}"));
                return result;
            }
        };
        // Every watcher starts at or after this revision.
        let first = match store_revision(&store, Instant::now() + Duration::from_secs(30)).await {
            Ok(r) => r,
            Err(e) => {
                result.violations.push(format!("kube-watch: reading the store revision: {e}"));
                return result;
            }
        };

        let (target_tx, target_rx) = tokio::sync::watch::channel::<Option<u64>>(None);
        let watch_stop = CancellationToken::new();
        // One set of API clients per watcher and per writer.
        let mut client_sets = match (0..self.watchers + self.writers).map(|_| kube_api::clients(&configs)).collect::<Result<Vec<_>, _>>() {
            Ok(sets) => sets.into_iter(),
            Err(e) => {
                result.violations.push(e);
                return result;
            }
        };
        let mut watchers = Vec::new();
        for w in 0..self.watchers {
            let me = self.clone();
            let clients = client_sets.next().expect("one client set per watcher");
            // Watchers start on the servers after the writers' first ones.
            let servers = Servers::new(clients, w + self.writers);
            let (history, stop, target) = (history.clone(), watch_stop.clone(), target_rx.clone());
            watchers.push(tokio::spawn(async move {
                me.watcher(w as u64, servers, history, seed ^ (w as u64 + 77), target, stop).await
            }));
        }
        let mut writers = Vec::new();
        for c in 0..self.writers {
            let me = self.clone();
            let clients = client_sets.next().expect("one client set per writer");
            let servers = Servers::new(clients, c);
            let (history, stop) = (history.clone(), stop.clone());
            writers.push(tokio::spawn(async move { me.writer(c as u64, servers, history, seed ^ (c as u64 * 31), stop).await }));
        }
        for t in writers {
            result.invoked += t.await.unwrap_or(0);
        }

        // The authoritative sequence: the store's own watch over the same prefix.
        let last_change = match reference(&store, first, &history).await {
            Ok(last) => last,
            Err(e) => {
                result.violations.push(format!("no reference sequence from the store: {e}"));
                None
            }
        };
        let goal = last_change.unwrap_or(first as u64);
        let _ = target_tx.send(Some(goal));
        let deadline = tokio::time::sleep(CATCH_UP);
        tokio::pin!(deadline);
        let pending = futures::future::join_all(watchers);
        tokio::pin!(pending);
        let ends = tokio::select! {
            done = &mut pending => done,
            _ = &mut deadline => {
                // Stragglers stop now; they are reported below.
                watch_stop.cancel();
                pending.await
            }
        };
        for end in ends.into_iter().flatten() {
            if end.expired {
                result.notes.push(format!("watcher {} ended: its resourceVersion was compacted (410 Gone)", end.id));
            } else if last_change.is_some() && end.reached.is_none_or(|r| r < goal) {
                result.violations.push(format!(
                    "watcher {} stalled: it reached revision {} within {CATCH_UP:?} after the writers stopped, the store's last change is at {goal}",
                    end.id,
                    end.reached.map(|r| r.to_string()).unwrap_or_else(|| "nothing".into()),
                ));
            }
        }
        let _ = history.flush();
        result
    }

    async fn writer(&self, first: u64, mut servers: Servers, history: Arc<HistoryWriter>, seed: u64, stop: CancellationToken) -> u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut process = first;
        let mut n = 0u64;
        while !stop.is_cancelled() {
            let name = format!("{WRITE_PREFIX}{}", rng.gen_range(0..self.keys));
            let key = history_key(&name);
            let delete = rng.gen_bool(0.2);
            let (f, value) = if delete { (Function::Delete, Value::Nil) } else { (Function::Put, Value::str(format!("p{process}-{n}"))) };
            n += 1;
            if history.invoke(process, f, Some(&key), value.clone()).is_err() {
                break;
            }
            let api = servers.configmaps();
            let call = async {
                match &value {
                    Value::Str(v) => {
                        let cm = kube_api::configmap(&name, v, None);
                        for _ in 0..5 {
                            match api.replace(&name, &Default::default(), &cm).await {
                                Ok(o) => return Ok(kube_api::revision_of(&o.metadata)),
                                Err(kube::Error::Api(s)) if s.code == 404 => {}
                                Err(e) => return Err(e),
                            }
                            match api.create(&Default::default(), &cm).await {
                                Ok(o) => return Ok(kube_api::revision_of(&o.metadata)),
                                Err(kube::Error::Api(s)) if s.code == 409 => {}
                                Err(e) => return Err(e),
                            }
                        }
                        Err(kube::Error::Api(Box::new(kube::core::Status {
                            code: 409,
                            message: "gave up: the object kept appearing and disappearing".into(),
                            ..Default::default()
                        })))
                    }
                    // The reply carries the object as it was before the delete, not the
                    // delete's revision: recorded without one.
                    _ => api.delete(&name, &DeleteParams::default()).await.map(|_| None),
                }
            };
            let (kind, revision, error) = match tokio::time::timeout(OP_TIMEOUT, call).await {
                Ok(Ok(rev)) => (EventKind::Ok, rev, None),
                Ok(Err(e)) => match kube_api::classify(&e) {
                    WriteOutcome::Fail(m) => (EventKind::Fail, None, Some(m)),
                    WriteOutcome::Info(m) => (EventKind::Info, None, Some(m)),
                },
                Err(_) => (EventKind::Info, None, Some("timed out".to_string())),
            };
            let rotate = match (&kind, &error) {
                (EventKind::Ok, _) => false,
                // Deleting an absent object is no reason to move.
                (EventKind::Fail, Some(m)) => !(m.starts_with("404") || m.starts_with("409")),
                _ => true,
            };
            let mut ev = HistoryEvent::new(process, kind, f, value).with_key(key);
            ev.revision = revision;
            ev.error = error;
            if history.record_now(ev).is_err() {
                break;
            }
            if kind == EventKind::Info {
                process += self.writers as u64;
            }
            if rotate {
                servers.rotate();
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        n
    }

    async fn watcher(
        &self,
        id: u64,
        mut servers: Servers,
        history: Arc<HistoryWriter>,
        seed: u64,
        mut target: tokio::sync::watch::Receiver<Option<u64>>,
        stop: CancellationToken,
    ) -> WatcherEnd {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut end = WatcherEnd { id, reached: None, expired: false };
        // The last revision this watcher has fully seen; None until its start list.
        let mut seen: Option<u64> = None;
        let mut opened_before = false;
        let caught_up = |seen: Option<u64>, target: &tokio::sync::watch::Receiver<Option<u64>>| {
            matches!((seen, *target.borrow()), (Some(s), Some(t)) if s >= t)
        };
        while !stop.is_cancelled() && !caught_up(seen, &target) {
            let api = servers.configmaps();
            let Some(from) = seen else {
                // Start: the current state's resourceVersion (a linearizable list), then
                // every change after it.
                if let Ok(Ok(list)) = tokio::time::timeout(OP_TIMEOUT, api.list(&ListParams::default())).await {
                    if let Some(rv) = list.metadata.resource_version.as_deref().and_then(|r| r.parse::<u64>().ok()) {
                        if history.record_now(start_record(id, rv)).is_err() {
                            return end;
                        }
                        seen = Some(rv);
                        end.reached = seen;
                        continue;
                    }
                }
                servers.rotate();
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let mut params = WatchParams::default().timeout(60);
            params.bookmarks = true;
            let opened = tokio::time::timeout(OP_TIMEOUT, api.watch(&params, &from.to_string())).await;
            let Ok(Ok(stream)) = opened else {
                servers.rotate();
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            if opened_before {
                let mut ev = observation(id, Function::WatchResume);
                ev.revision = Some(from);
                if history.record_now(ev).is_err() {
                    return end;
                }
            }
            opened_before = true;
            let mut stream = std::pin::pin!(stream);
            let segment = tokio::time::sleep(Duration::from_millis(rng.gen_range(500..=self.max_segment.as_millis().max(501) as u64)));
            tokio::pin!(segment);
            loop {
                if caught_up(seen, &target) {
                    return end;
                }
                let item = tokio::select! {
                    _ = stop.cancelled() => return end,
                    _ = &mut segment => break,
                    _ = target.changed() => continue,
                    m = stream.next() => m,
                };
                let ours = |cm: &ConfigMap| cm.metadata.name.as_deref().is_some_and(|n| n.starts_with(WRITE_PREFIX));
                let ev = match item {
                    Some(Ok(WatchEvent::Added(cm) | WatchEvent::Modified(cm) | WatchEvent::Deleted(cm))) if !ours(&cm) => {
                        // Not recorded, but the watch has come this far.
                        if let Some(rev) = kube_api::revision_of(&cm.metadata) {
                            seen = Some(seen.map_or(rev, |s| s.max(rev)));
                            end.reached = seen;
                        }
                        continue;
                    }
                    Some(Ok(WatchEvent::Added(cm) | WatchEvent::Modified(cm))) => change(id, &cm, ChangeKind::Put),
                    Some(Ok(WatchEvent::Deleted(cm))) => change(id, &cm, ChangeKind::Delete),
                    Some(Ok(WatchEvent::Bookmark(b))) => {
                        let mut ev = observation(id, Function::WatchProgress);
                        ev.revision = b.metadata.resource_version.parse().ok();
                        ev
                    }
                    Some(Ok(WatchEvent::Error(status))) if status.code == 410 => {
                        end.expired = true;
                        return end;
                    }
                    // An error event, a broken or finished stream: resume elsewhere.
                    Some(Ok(WatchEvent::Error(_))) | Some(Err(_)) | None => break,
                };
                let Some(rev) = ev.revision else {
                    // Unusable resourceVersion: recorded as is would break the check.
                    tracing::warn!(watcher = id, "watch event without a resourceVersion");
                    break;
                };
                if history.record_now(ev).is_err() {
                    return end;
                }
                seen = Some(seen.map_or(rev, |s| s.max(rev)));
                end.reached = seen;
            }
            // Cut: resume on the next server from the last revision seen.
            servers.rotate();
        }
        end
    }
}

/// A watch event as a checker observation.
fn change(watcher: u64, cm: &ConfigMap, kind: ChangeKind) -> HistoryEvent {
    let name = cm.metadata.name.clone().unwrap_or_default();
    let mut ev = observation(watcher, Function::WatchEvent).with_key(history_key(&name));
    ev.revision = kube_api::revision_of(&cm.metadata);
    ev.event = Some(kind);
    if kind == ChangeKind::Put {
        ev.value = kube_api::value_of(cm).map(Value::str).unwrap_or(Value::Nil);
    }
    ev
}

/// Records the store's changes to the namespace's ConfigMaps after `first` up to the
/// store's current revision as the observations of [`REFERENCE_WATCHER`]; returns the
/// revision of the last change (None when nothing changed).
async fn reference(store: &StoreClient, first: Revision, history: &HistoryWriter) -> Result<Option<u64>, String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let head = store_revision(store, deadline).await?;
    // Tries the replicas in turn; each attempt collects the whole sequence.
    loop {
        match collect(store, first, head).await {
            Ok((events, reached)) => {
                history.record_now(start_record(REFERENCE_WATCHER, first as u64)).map_err(|e| e.to_string())?;
                let mut last = None;
                for ev in events {
                    last = ev.revision.max(last);
                    history.record_now(ev).map_err(|e| e.to_string())?;
                }
                let mut done = observation(REFERENCE_WATCHER, Function::WatchProgress);
                done.revision = Some(reached as u64);
                history.record_now(done).map_err(|e| e.to_string())?;
                return Ok(last);
            }
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(e) => {
                tracing::debug!(error = %e, "reference watch; retrying on another replica");
                store.rotate();
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// The store's changes under [`STORE_PREFIX`] after `first`, at least up to `head`, from
/// one replica; and the revision up to which they are complete.
async fn collect(store: &StoreClient, first: Revision, head: Revision) -> Result<(Vec<HistoryEvent>, Revision), String> {
    let create = WatchCreate { watch_id: 1, range: KeyRange::prefix(STORE_PREFIX), start_revision: first + 1, prev_kv: false, progress_notify: false };
    let (tx, stream) = store.watch(create).await.map_err(|e| e.to_string())?;
    let mut stream = std::pin::pin!(stream);
    let mut out = Vec::new();
    let mut reached = first;
    let give_up = tokio::time::sleep(Duration::from_secs(10));
    tokio::pin!(give_up);
    // Progress notifications tell how far the stream is; ask for them until it is there.
    let mut ask = tokio::time::interval(Duration::from_millis(300));
    while reached < head {
        let msg = tokio::select! {
            _ = &mut give_up => return Err(format!("reached only revision {reached} of {head}")),
            _ = ask.tick() => {
                let _ = tx.send(WatchRequest::Progress).await;
                continue;
            }
            m = stream.next() => m,
        };
        let resp = match msg {
            Some(Ok(r)) => r,
            Some(Err(e)) => return Err(e.to_string()),
            None => return Err("stream ended".into()),
        };
        match resp.kind {
            WatchResponseKind::Created { .. } => {}
            WatchResponseKind::Events(events) => {
                for e in events {
                    let key = String::from_utf8_lossy(&e.kv.key);
                    let name = key.strip_prefix(STORE_PREFIX).unwrap_or(&key).to_string();
                    reached = reached.max(e.kv.mod_revision);
                    if !name.starts_with(WRITE_PREFIX) {
                        continue;
                    }
                    let mut ev = observation(REFERENCE_WATCHER, Function::WatchEvent).with_key(history_key(&name));
                    ev.revision = Some(e.kv.mod_revision as u64);
                    match e.kind {
                        StoreEventKind::Put => {
                            ev.event = Some(ChangeKind::Put);
                            let obj: serde_json::Value = serde_json::from_slice(&e.kv.value)
                                .map_err(|err| format!("stored object {key} is not JSON: {err}"))?;
                            ev.value = obj.pointer("/data/value").and_then(|v| v.as_str()).map(Value::str).unwrap_or(Value::Nil);
                        }
                        StoreEventKind::Delete => ev.event = Some(ChangeKind::Delete),
                    }
                    reached = reached.max(e.kv.mod_revision);
                    out.push(ev);
                }
                reached = reached.max(resp.header.revision);
            }
            WatchResponseKind::Progress => reached = reached.max(resp.header.revision),
            WatchResponseKind::Compacted { compacted } => return Err(format!("compacted up to {compacted}")),
            WatchResponseKind::Canceled { .. } => return Err("canceled".into()),
        }
    }
    Ok((out, reached))
}
