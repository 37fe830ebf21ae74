//! The openraft state machine: applies log entries to the MVCC store, tells local
//! watchers what changed, and builds/installs streamed file snapshots.
//!
//! # Guarantees
//! - The last applied log id and membership are written in the same engine batch as the
//!   mutation they cover ([`MvccStore::apply`] takes them), so a restart never re-applies
//!   an entry that already changed the state, nor skips one.
//! - Watch notifications for an entry are published only after its effects are readable.
//! - A snapshot is taken from one consistent engine view and streamed to a file; the whole
//!   state is never materialised in memory, neither when building nor when installing.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::{Stream, TryStreamExt};
use keelson_mvcc::{Event, KvBackend, MvccStore, Revision};
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder};
use tokio::sync::{broadcast, watch};

use crate::snapshot_file::{SnapshotFile, SnapshotReader, SnapshotWriter};
use crate::types::{ApplyOutcome, KeelsonRaft, LogId, SnapshotMeta, StoredMembership};

type Snapshot = openraft::alias::SnapshotOf<KeelsonRaft, SnapshotFile>;

/// What one applied entry changed, as local watchers see it.
#[derive(Debug, Clone)]
pub enum AppliedChange {
    /// Events of one mutating transaction, all at `revision`.
    Events { revision: Revision, events: Vec<Event> },
    /// The state was replaced by a snapshot at `revision`; watchers must re-read history.
    Reset { revision: Revision },
}

/// How far this replica's state machine has applied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AppliedPosition {
    /// Raft log index of the last applied entry (0 = none).
    pub log_index: u64,
    /// Store revision after it.
    pub revision: Revision,
}

/// Shared handles for readers and watchers of the local state machine.
#[derive(Clone)]
pub struct StateHandle<B: KvBackend> {
    pub store: Arc<MvccStore<B>>,
    changes: broadcast::Sender<Arc<AppliedChange>>,
    applied: watch::Receiver<AppliedPosition>,
    snapshot_dir: PathBuf,
}

impl<B: KvBackend> StateHandle<B> {
    /// The directory the state machine keeps its snapshots in.
    pub fn snapshot_dir(&self) -> &Path {
        &self.snapshot_dir
    }

    /// Writes the state as it is applied now, from one consistent engine view, to a new
    /// snapshot file at `path` (for a backup: the replica's own snapshots are untouched).
    /// Blocking; returns the applied position the file holds.
    pub fn export_snapshot(&self, path: &Path) -> Result<SnapshotMeta, io::Error> {
        write_snapshot_file(&self.store, path)
    }

    /// The size of the current snapshot file in bytes (0 when there is none yet).
    pub fn snapshot_bytes(&self) -> io::Result<u64> {
        match newest_snapshot_path(&self.snapshot_dir)? {
            Some(path) => Ok(std::fs::metadata(path)?.len()),
            None => Ok(0),
        }
    }

    /// Subscribes to changes applied from now on. A subscriber that falls more than the
    /// channel capacity behind gets `Lagged` and must resume from the store's history.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<AppliedChange>> {
        self.changes.subscribe()
    }

    pub fn applied(&self) -> AppliedPosition {
        *self.applied.borrow()
    }

    /// Waits until the state machine has applied store revision `revision`.
    pub async fn wait_revision(&self, revision: Revision) -> Result<AppliedPosition, crate::RaftLayerError> {
        let mut rx = self.applied.clone();
        let pos = rx.wait_for(|p| p.revision >= revision).await.map_err(|_| crate::RaftLayerError::Shutdown)?;
        Ok(*pos)
    }

    /// Waits until the state machine has applied log index `index`.
    pub async fn wait_applied(&self, index: u64) -> Result<AppliedPosition, crate::RaftLayerError> {
        let mut rx = self.applied.clone();
        let pos = rx
            .wait_for(|p| p.log_index >= index)
            .await
            .map_err(|_| crate::RaftLayerError::Shutdown)?;
        Ok(*pos)
    }
}

/// Most log entries applied in one engine write.
const APPLY_CHUNK: usize = 1024;

/// Capacity of the change broadcast: how many applied transactions a watcher may lag
/// before it is cut off (it then catches up from history or gets a recoverable error).
pub const CHANGE_CHANNEL_CAPACITY: usize = 16 * 1024;

/// The Raft state machine over an MVCC store.
pub struct KeelsonStateMachine<B: KvBackend> {
    store: Arc<MvccStore<B>>,
    snapshot_dir: PathBuf,
    last_applied: Option<LogId>,
    last_membership: StoredMembership,
    changes: broadcast::Sender<Arc<AppliedChange>>,
    applied: watch::Sender<AppliedPosition>,
}

impl<B: KvBackend> KeelsonStateMachine<B> {
    /// Opens the state machine over `store`; snapshots live in `snapshot_dir`.
    pub fn open(store: MvccStore<B>, snapshot_dir: &Path) -> Result<(Self, StateHandle<B>), io::Error> {
        std::fs::create_dir_all(snapshot_dir)?;
        let store = Arc::new(store);
        let (last_applied, last_membership) = decode_applied(store.applied().map_err(io::Error::other)?)?;
        let (changes, _) = broadcast::channel(CHANGE_CHANNEL_CAPACITY);
        let position = AppliedPosition {
            log_index: last_applied.as_ref().map(|l| l.index).unwrap_or(0),
            revision: store.current_revision(),
        };
        let (applied, applied_rx) = watch::channel(position);
        let handle = StateHandle { store: store.clone(), changes: changes.clone(), applied: applied_rx, snapshot_dir: snapshot_dir.to_path_buf() };
        let sm = Self {
            store,
            snapshot_dir: snapshot_dir.to_path_buf(),
            last_applied,
            last_membership,
            changes,
            applied,
        };
        Ok((sm, handle))
    }

    fn applied_bytes(&self) -> Result<Vec<u8>, io::Error> {
        postcard::to_stdvec(&(&self.last_applied, &self.last_membership)).map_err(io::Error::other)
    }

    fn publish_position(&self) {
        let log_index = self.last_applied.as_ref().map(|l| l.index).unwrap_or(0);
        let revision = self.store.current_revision();
        self.applied.send_replace(AppliedPosition { log_index, revision });
    }
}

fn decode_applied(bytes: Option<Vec<u8>>) -> Result<(Option<LogId>, StoredMembership), io::Error> {
    match bytes {
        None => Ok((None, StoredMembership::default())),
        Some(b) => postcard::from_bytes(&b).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)),
    }
}

impl<B: KvBackend> RaftStateMachine<KeelsonRaft> for KeelsonStateMachine<B> {
    type SnapshotData = SnapshotFile;
    type SnapshotBuilder = KeelsonSnapshotBuilder<B>;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), io::Error> {
        Ok((self.last_applied, self.last_membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<KeelsonRaft>, io::Error>> + Unpin + OptionalSend,
    {
        // Take the whole run openraft hands over, apply it with as few engine writes as
        // possible, then answer and notify in log order.
        let mut run = Vec::new();
        while let Some(item) = entries.try_next().await? {
            run.push(item);
        }
        for chunk in run.chunks_mut(APPLY_CHUNK) {
            let chunk_len = chunk.len();
            let mut applied_bytes = Vec::with_capacity(chunk.len());
            for (entry, _) in chunk.iter() {
                self.last_applied = Some(entry.log_id);
                if let EntryPayload::Membership(m) = &entry.payload {
                    self.last_membership = StoredMembership::new(Some(entry.log_id), m.clone());
                }
                applied_bytes.push(self.applied_bytes()?);
            }
            let batch: Vec<(Option<&keelson_mvcc::Command>, &[u8])> = chunk
                .iter()
                .zip(&applied_bytes)
                .map(|((entry, _), bytes)| {
                    let cmd = match &entry.payload {
                        EntryPayload::Normal(cmd) => Some(cmd.command()),
                        _ => None,
                    };
                    (cmd, bytes.as_slice())
                })
                .collect();
            // Traced entries get an `apply` span each, in the proposer's trace, covering
            // the engine write of their chunk and the replies.
            let apply_spans: Vec<tracing::Span> = chunk
                .iter()
                .filter_map(|(entry, _)| match &entry.payload {
                    EntryPayload::Normal(cmd) => cmd.trace().map(|parent| {
                        let span = tracing::info_span!("apply", index = entry.log_id.index, entries = chunk_len, trace_id = tracing::field::Empty);
                        keelson_tracecontext::continue_trace(&span, Some(parent));
                        span
                    }),
                    _ => None,
                })
                .collect();
            let results = self.store.apply_batch(&batch).map_err(io::Error::other)?;
            drop(batch);
            self.publish_position();
            for ((_, responder), result) in chunk.iter_mut().zip(results) {
                let response = match result {
                    None => None,
                    Some(applied) => {
                        if !applied.events.is_empty() {
                            // No receiver is fine: nobody watches.
                            let _ = self.changes.send(Arc::new(AppliedChange::Events {
                                revision: applied.revision,
                                events: applied.events,
                            }));
                        }
                        Some((applied.revision, applied.response))
                    }
                };
                if let Some(responder) = responder.take() {
                    let revision = response.as_ref().map(|r| r.0).unwrap_or_else(|| self.store.current_revision());
                    responder.send(ApplyOutcome { revision, response: response.map(|r| r.1) });
                }
            }
            drop(apply_spans); // The traced entries are applied and answered.
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        KeelsonSnapshotBuilder { store: self.store.clone(), dir: self.snapshot_dir.clone(), machine: self.applied.subscribe() }
    }

    async fn install_snapshot(&mut self, meta: &SnapshotMeta, snapshot: SnapshotFile) -> Result<(), io::Error> {
        let store = self.store.clone();
        let dir = self.snapshot_dir.clone();
        let meta = meta.clone();
        let applied = postcard::to_stdvec(&(&meta.last_log_id, &meta.last_membership)).map_err(io::Error::other)?;
        let installed_meta = meta.clone();
        tokio::task::spawn_blocking(move || -> Result<(), io::Error> {
            let (file_meta, mut reader) = SnapshotReader::open(&snapshot.path)?;
            if file_meta.last_log_id != meta.last_log_id {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "snapshot file does not match the snapshot meta it was sent with",
                ));
            }
            store.import(&mut reader).map_err(io::Error::other)?;
            store.set_applied(&applied).map_err(io::Error::other)?;
            store.backend().sync().map_err(io::Error::other)?;
            keep_as_current(&dir, &snapshot.path, &meta).map(|_| ())
        })
        .await
        .map_err(io::Error::other)??;
        self.last_applied = installed_meta.last_log_id;
        self.last_membership = installed_meta.last_membership;
        let _ = self.changes.send(Arc::new(AppliedChange::Reset { revision: self.store.current_revision() }));
        self.publish_position();
        tracing::info!(last_log_id = ?self.last_applied, revision = self.store.current_revision(), "installed snapshot");
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, io::Error> {
        let dir = self.snapshot_dir.clone();
        tokio::task::spawn_blocking(move || current_snapshot(&dir)).await.map_err(io::Error::other)?
    }
}

/// Builds snapshots from a consistent view of the store while the state machine goes on.
pub struct KeelsonSnapshotBuilder<B: KvBackend> {
    store: Arc<MvccStore<B>>,
    dir: PathBuf,
    /// Closed once the state machine is gone (Raft shut down): a build waiting for space
    /// gives up then.
    machine: watch::Receiver<AppliedPosition>,
}

impl<B: KvBackend> RaftSnapshotBuilder<KeelsonRaft> for KeelsonSnapshotBuilder<B> {
    type SnapshotData = SnapshotFile;

    async fn build_snapshot(&mut self) -> Result<Snapshot, io::Error> {
        let store = self.store.clone();
        let dir = self.dir.clone();
        let machine = self.machine.clone();
        // A snapshot that cannot be written for space is built again once there is room
        // (an error would stop the Raft core), unless Raft shuts down meanwhile.
        let gone = move || machine.has_changed().is_err();
        tokio::task::spawn_blocking(move || crate::out_of_space::retry_blocking("snapshot", gone, || build_snapshot_blocking(&store, &dir)))
            .await
            .map_err(io::Error::other)?
    }
}

/// Writes the state, from one consistent engine view, to a new snapshot file at `path`.
fn write_snapshot_file<B: KvBackend>(store: &MvccStore<B>, path: &Path) -> Result<SnapshotMeta, io::Error> {
    let mut writer = SnapshotWriter::create(path)?;
    let applied = store.export(&mut |k: &[u8], v: &[u8]| writer.record(k, v)).map_err(io::Error::other)?;
    let (last_log_id, last_membership) = decode_applied(applied)?;
    let meta = SnapshotMeta { last_log_id, last_membership };
    writer.finish(&meta)?;
    Ok(meta)
}

/// Fills the empty store of a new cluster's first replica from a snapshot file (a
/// backup's): the data and revisions of the snapshot, but no Raft history — the applied
/// position and membership are cleared, so the new cluster's log starts from nothing
/// over this state. Blocking; returns the store's revision.
pub fn restore_snapshot<B: KvBackend>(store: &MvccStore<B>, snapshot: &Path) -> Result<Revision, io::Error> {
    let (_, mut reader) = SnapshotReader::open(snapshot)?;
    store.import(&mut reader).map_err(io::Error::other)?;
    let fresh = postcard::to_stdvec(&(None::<LogId>, StoredMembership::default())).map_err(io::Error::other)?;
    store.set_applied(&fresh).map_err(io::Error::other)?;
    store.backend().sync().map_err(io::Error::other)?;
    Ok(store.current_revision())
}

fn build_snapshot_blocking<B: KvBackend>(store: &MvccStore<B>, dir: &Path) -> Result<Snapshot, io::Error> {
    let tmp = dir.join(format!("building-{}.tmp", std::process::id()));
    let meta = write_snapshot_file(store, &tmp).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })?;
    // The snapshot lets Raft purge the log it covers, so the state it covers must be
    // durable: sync after the view was read, so everything in it is flushed.
    store.backend().sync().map_err(io::Error::other)?;
    let path = keep_as_current(dir, &tmp, &meta)?;
    tracing::info!(last_log_id = ?meta.last_log_id, path = %path.display(), "built snapshot");
    Ok(Snapshot { meta, snapshot: SnapshotFile { path } })
}

fn snapshot_name(meta: &SnapshotMeta) -> String {
    match &meta.last_log_id {
        Some(l) => format!("snapshot-{:020}-{:020}.snap", l.leader_id.term, l.index),
        None => "snapshot-empty.snap".to_string(),
    }
}

/// Moves `file` into `dir` as the current snapshot and removes older ones.
fn keep_as_current(dir: &Path, file: &Path, meta: &SnapshotMeta) -> io::Result<PathBuf> {
    let target = dir.join(snapshot_name(meta));
    if file != target {
        std::fs::rename(file, &target)?;
    }
    std::fs::File::open(dir)?.sync_all()?;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let is_snap = path.extension().is_some_and(|e| e == "snap");
        if is_snap && path != target {
            let _ = std::fs::remove_file(path);
        }
    }
    Ok(target)
}

/// The newest snapshot in `dir`. A newer snapshot may replace (and delete) the one just
/// listed while it is being opened: then look again.
fn current_snapshot(dir: &Path) -> Result<Option<Snapshot>, io::Error> {
    let mut attempts = 0;
    loop {
        match newest_snapshot(dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound && attempts < 10 => attempts += 1,
            other => return other,
        }
    }
}

/// The newest `*.snap` file in `dir` (names sort by term, then index).
fn newest_snapshot_path(dir: &Path) -> Result<Option<PathBuf>, io::Error> {
    let mut newest: Option<PathBuf> = None;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "snap") && newest.as_ref().is_none_or(|n| path > *n) {
            newest = Some(path);
        }
    }
    Ok(newest)
}

fn newest_snapshot(dir: &Path) -> Result<Option<Snapshot>, io::Error> {
    let Some(path) = newest_snapshot_path(dir)? else { return Ok(None) };
    let (meta, _) = SnapshotReader::open(&path)?;
    Ok(Some(Snapshot { meta, snapshot: SnapshotFile { path } }))
}
