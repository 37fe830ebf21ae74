//! Backups and restores of the replicated store (as `etcdctl snapshot save` / `restore`).
//!
//! - [`serve`]: the `Cluster.Backup` stream. The replica first makes its state current
//!   with a linearizable read (so every write acknowledged before the call is in it),
//!   writes a snapshot file from one consistent view of its store into its snapshot
//!   directory (never held in memory), streams it in 1 MiB chunks with the SHA-256 of all
//!   of them at the end, and removes the file however the stream ends. Scheduled
//!   backups ([`run_schedule`]) export and read the same way (`export_current`).
//! - [`save`]: a client's side of that stream, written as a self-checking backup file;
//!   [`run_schedule`]: a server's own scheduled backups, with retention.
//! - [`restore`]: builds the data directory of a new cluster's first replica from a
//!   backup file ([`keelson_raft::backup_file`]): checked against its trailer, imported
//!   into a fresh store, with the Raft history cleared. Starting the server there with
//!   `--cluster-init` makes a new cluster (new identity and members) over the same data.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use keelson_client::{ClientError, StoreClient};
use keelson_mvcc::{MvccStore, Revision};
use keelson_proto::v1::SnapshotChunk;
use keelson_raft::backup_file::{self, BackupFileError};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::Status;

use crate::replica::Replica;

const CHUNK: usize = 1 << 20;

/// Left in a data directory by [`restore`] until the first start has sealed it
/// ([`seal_restored`]).
pub const RESTORED_MARKER: &str = "restored-from-backup";

#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error("{dir} already holds {found}; restore into a new, empty data directory")]
    NotEmpty { dir: PathBuf, found: String },
    #[error(transparent)]
    Backup(#[from] BackupFileError),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("opening the store in {path}: {message}")]
    Store { path: PathBuf, message: String },
    #[error("sealing the restored store ({step}): {message}")]
    Seal { step: &'static str, message: String },
}

fn sealing(step: &'static str, e: impl std::fmt::Display) -> RestoreError {
    RestoreError::Seal { step, message: e.to_string() }
}

#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    #[error("asking for a backup: {0}")]
    Client(#[from] ClientError),
    #[error(transparent)]
    File(#[from] BackupFileError),
    #[error("the backup stream ended before its checksum: the server stopped sending (nothing was saved)")]
    Incomplete,
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("the replica could not make its state current: {0}")]
    NotCurrent(String),
    #[error("the server is shutting down")]
    ShuttingDown,
    #[error("the backup task failed: {0}")]
    Task(String),
}

impl SaveError {
    fn task(e: tokio::task::JoinError) -> Self {
        SaveError::Task(e.to_string())
    }
}

/// Where and how often a server backs up its own replica, and how many backups it keeps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackupSchedule {
    pub dir: PathBuf,
    pub every: Duration,
    pub keep: usize,
}

/// What [`restore`] built.
#[derive(Clone, Debug)]
pub struct Restored {
    /// The store revision the new cluster starts from.
    pub revision: Revision,
    pub summary: backup_file::BackupSummary,
}

/// Streams a fresh backup of this replica's store into `tx`; a shutdown ends it with an
/// `unavailable` error the client sees (its backup file is then never completed).
pub(crate) async fn serve(replica: Replica, tx: mpsc::Sender<Result<SnapshotChunk, Status>>, shutdown: CancellationToken) {
    if let Err(e) = stream_backup(&replica, tx.clone(), shutdown).await {
        tracing::warn!(error = %e, "backup stream failed");
        let status = match e {
            SaveError::NotCurrent(_) | SaveError::ShuttingDown => Status::unavailable(e.to_string()),
            e => Status::internal(e.to_string()),
        };
        let _ = tx.send(Err(status)).await;
    }
}

async fn stream_backup(replica: &Replica, tx: mpsc::Sender<Result<SnapshotChunk, Status>>, shutdown: CancellationToken) -> Result<(), SaveError> {
    let exported = export_current(replica).await?;
    tracing::info!(path = %exported.0.display(), "streaming a backup");
    tokio::task::spawn_blocking(move || {
        let mut hash = Sha256::new();
        exported.each_chunk(|data| {
            if shutdown.is_cancelled() {
                return Err(SaveError::ShuttingDown);
            }
            hash.update(&data);
            // A failed send means the client left: stop reading.
            Ok(tx.blocking_send(Ok(SnapshotChunk { header: Vec::new(), data })).is_ok())
        })?;
        let _ = tx.blocking_send(Ok(SnapshotChunk { header: hash.finalize().to_vec(), data: Vec::new() }));
        Ok(())
    })
    .await
    .map_err(SaveError::task)?
}

/// A snapshot of the store exported for one backup into the replica's snapshot
/// directory; the file is removed when this is dropped, however the backup ended.
struct ExportedSnapshot(PathBuf);

impl Drop for ExportedSnapshot {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl ExportedSnapshot {
    /// Hands the file to `sink` in pieces of [`CHUNK`] bytes until it ends or `sink`
    /// answers `false`. Blocking.
    fn each_chunk(&self, mut sink: impl FnMut(Vec<u8>) -> Result<bool, SaveError>) -> Result<(), SaveError> {
        let io = |source| SaveError::Io { path: self.0.clone(), source };
        let mut input = std::fs::File::open(&self.0).map_err(io)?;
        loop {
            let mut chunk = Vec::with_capacity(CHUNK);
            std::io::Read::read_to_end(&mut std::io::Read::take(&mut input, CHUNK as u64), &mut chunk).map_err(io)?;
            if chunk.is_empty() || !sink(chunk)? {
                return Ok(());
            }
        }
    }
}

/// Makes the replica current with a linearizable read (every write acknowledged before
/// the call is in the backup), then exports a snapshot of one consistent view of its
/// store (written to disk, never held in memory).
async fn export_current(replica: &Replica) -> Result<ExportedSnapshot, SaveError> {
    replica.linearize().await.map_err(|e| SaveError::NotCurrent(e.to_string()))?;
    let state = replica.inner.state.clone();
    let exported = ExportedSnapshot(state.snapshot_dir().join(format!("backup-{:016x}.tmp", rand::random::<u64>())));
    let path = exported.0.clone();
    tokio::task::spawn_blocking(move || state.export_snapshot(&path))
        .await
        .map_err(SaveError::task)?
        .map_err(|source| SaveError::Io { path: exported.0.clone(), source })?;
    Ok(exported)
}

/// Asks the current replica of `client` for a backup and writes it to `out` (through
/// `out` + `.partial`, renamed once complete and checked, so `out` is never a partial
/// backup).
pub async fn save(client: &StoreClient, out: &Path) -> Result<backup_file::BackupSummary, SaveError> {
    let partial = partial_path(out);
    let result = save_to(client, &partial).await;
    match result {
        Ok(summary) => {
            std::fs::rename(&partial, out).map_err(|source| SaveError::Io { path: out.to_path_buf(), source })?;
            Ok(summary)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            Err(e)
        }
    }
}

fn partial_path(out: &Path) -> PathBuf {
    let mut name = out.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    out.with_file_name(name)
}

async fn save_to(client: &StoreClient, partial: &Path) -> Result<backup_file::BackupSummary, SaveError> {
    let mut stream = Box::pin(client.backup().await?);
    let mut writer = backup_file::BackupWriter::create(partial)?;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        if !chunk.header.is_empty() {
            return Ok(writer.finish(Some(chunk.header.as_slice()))?);
        }
        writer.write(&chunk.data)?;
    }
    Err(SaveError::Incomplete)
}

/// Backs up this server's own replica into `out` (made current first, as [`serve`]),
/// through `out` + `.partial` as [`save`].
pub(crate) async fn save_local(replica: &Replica, out: &Path) -> Result<backup_file::BackupSummary, SaveError> {
    let exported = export_current(replica).await?;
    let (out, partial) = (out.to_path_buf(), partial_path(out));
    tokio::task::spawn_blocking(move || {
        let result = (|| {
            let mut writer = backup_file::BackupWriter::create(&partial)?;
            exported.each_chunk(|data| {
                writer.write(&data)?;
                Ok(true)
            })?;
            let summary = writer.finish(None)?;
            std::fs::rename(&partial, &out).map_err(|source| SaveError::Io { path: out.clone(), source })?;
            Ok(summary)
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&partial);
        }
        result
    })
    .await
    .map_err(SaveError::task)?
}

/// The backups of `server` in a directory listing `names` that retention removes: all
/// but the newest `keep` named `SERVER-<unix seconds>.backup`. Other files are never
/// touched.
pub fn expired(names: &[String], server: &str, keep: usize) -> Vec<String> {
    let prefix = format!("{server}-");
    let mut ours: Vec<(u64, &String)> = names
        .iter()
        .filter_map(|n| Some((n.strip_prefix(&prefix)?.strip_suffix(".backup")?.parse::<u64>().ok()?, n)))
        .collect();
    ours.sort();
    let remove = ours.len().saturating_sub(keep);
    ours.into_iter().take(remove).map(|(_, n)| n.clone()).collect()
}

/// Takes a backup of this replica every `schedule.every` into `schedule.dir`, keeping the
/// newest `schedule.keep`, until shutdown. A failed backup is logged and counted; the
/// next one is tried on time.
pub(crate) async fn run_schedule(replica: Replica, schedule: BackupSchedule, shutdown: CancellationToken) {
    if let Err(e) = std::fs::create_dir_all(&schedule.dir) {
        tracing::error!(dir = %schedule.dir.display(), error = %e, "scheduled backups are off: cannot create their directory");
        return;
    }
    let server = replica.inner.name.clone();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(schedule.every) => {}
        }
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or_default();
        let out = schedule.dir.join(format!("{server}-{now}.backup"));
        let started = std::time::Instant::now();
        match save_local(&replica, &out).await {
            Ok(summary) => {
                replica.stats().backups_saved.inc();
                tracing::info!(path = %out.display(), bytes = summary.snapshot_bytes, sha256 = %summary.sha256, took = ?started.elapsed(), "scheduled backup saved");
            }
            Err(e) => {
                replica.stats().backups_failed.inc();
                tracing::warn!(path = %out.display(), error = %e, "scheduled backup failed");
                continue;
            }
        }
        let names: Vec<String> = std::fs::read_dir(&schedule.dir)
            .map(|d| d.flatten().filter_map(|e| e.file_name().into_string().ok()).collect())
            .unwrap_or_default();
        for name in expired(&names, &server, schedule.keep) {
            if let Err(e) = std::fs::remove_file(schedule.dir.join(&name)) {
                tracing::warn!(backup = %name, error = %e, "could not remove an expired backup");
            }
        }
    }
}

/// On the first start of a restored data directory: the restored state is not in the new
/// cluster's Raft log, so a server that joins must get it as a snapshot, never by
/// replaying the log. Before the replica serves anyone, it snapshots the state and purges
/// the log up to it; then every joiner is sent the snapshot. The marker goes only once
/// that is done, so an interrupted start seals on the next one.
pub(crate) async fn seal_restored(raft: &keelson_raft::KeelsonRaftNode<keelson_rocks::RocksBackend>, data_dir: &Path) -> Result<(), RestoreError> {
    let marker = data_dir.join(RESTORED_MARKER);
    if !marker.exists() {
        return Ok(());
    }
    let wait = raft.wait(Some(Duration::from_secs(60)));
    let m = wait
        .metrics(|m| m.current_leader == Some(m.id) && m.last_applied.is_some(), "the restored replica leads and applied its membership")
        .await
        .map_err(|e| sealing("electing itself", e))?;
    let applied = m.last_applied.map(|l| l.index()).unwrap_or_default();
    raft.trigger().snapshot().await.map_err(|e| sealing("snapshot", e))?;
    wait.metrics(|m| m.snapshot.is_some_and(|s| s.index() >= applied), "a snapshot of the restored state").await.map_err(|e| sealing("snapshot", e))?;
    raft.trigger().purge_log(applied).await.map_err(|e| sealing("purge", e))?;
    wait.metrics(|m| m.purged.is_some_and(|p| p.index() >= applied), "the log before it purged").await.map_err(|e| sealing("purge", e))?;
    std::fs::remove_file(&marker).map_err(|e| sealing("marker", e))?;
    tracing::info!(snapshot_index = applied, "restored store sealed: joining servers get it as a snapshot");
    Ok(())
}

/// What `data_dir` holds, sorted (nothing when it does not exist). A file system's own
/// `lost+found` does not count: a fresh volume's root is empty otherwise.
fn leftovers(data_dir: &Path) -> std::io::Result<Vec<String>> {
    let entries = match std::fs::read_dir(data_dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == "lost+found" {
            continue;
        }
        found.push(if entry.file_type()?.is_dir() { format!("{name}/") } else { name });
    }
    found.sort();
    Ok(found)
}

/// Builds `data_dir` (new or empty) for a new cluster's first replica from `backup`.
/// Blocking.
pub fn restore(backup: &Path, data_dir: &Path) -> Result<Restored, RestoreError> {
    let io = |source| RestoreError::Io { path: data_dir.to_path_buf(), source };
    let found = leftovers(data_dir).map_err(io)?;
    if !found.is_empty() {
        return Err(RestoreError::NotEmpty { dir: data_dir.to_path_buf(), found: found.join(", ") });
    }
    std::fs::create_dir_all(data_dir).map_err(io)?;
    let snapshot = data_dir.join("restore.snap.tmp");
    let summary = backup_file::extract(backup, &snapshot)?;
    let db_path = data_dir.join("db");
    let result = (|| {
        let db = keelson_rocks::open_db(&db_path).map_err(|e| RestoreError::Store { path: db_path.clone(), message: e.to_string() })?;
        let store = MvccStore::open(keelson_rocks::RocksBackend::new(db, "state"))
            .map_err(|e| RestoreError::Store { path: db_path.clone(), message: e.to_string() })?;
        keelson_raft::state_machine::restore_snapshot(&store, &snapshot).map_err(|source| RestoreError::Io { path: snapshot.clone(), source })
    })();
    let _ = std::fs::remove_file(&snapshot);
    let result = result.and_then(|revision| {
        std::fs::write(data_dir.join(RESTORED_MARKER), format!("{}\n", summary.sha256)).map_err(|source| RestoreError::Io { path: data_dir.join(RESTORED_MARKER), source })?;
        Ok(revision)
    });
    match result {
        Ok(revision) => Ok(Restored { revision, summary }),
        Err(e) => {
            // Leave no half-restored store for a server to start on.
            let _ = std::fs::remove_dir_all(&db_path);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_keeps_the_newest_of_this_server_only() {
        let names: Vec<String> = ["k-1-100.backup", "k-1-300.backup", "k-1-200.backup", "k-1-400.backup", "k-2-50.backup", "k-1-x.backup", "k-1-500.backup.partial", "notes.txt"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(expired(&names, "k-1", 2), ["k-1-100.backup", "k-1-200.backup"]);
        assert!(expired(&names, "k-1", 10).is_empty());
        assert_eq!(expired(&names, "k-2", 0), ["k-2-50.backup"]);
        // Numbers, not text, decide which is newer.
        let names = vec!["s-99.backup".to_string(), "s-100.backup".to_string()];
        assert_eq!(expired(&names, "s", 1), ["s-99.backup"]);
    }

    #[test]
    fn a_restore_refuses_a_data_directory_holding_anything_and_names_what() {
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().join("data");
        std::fs::create_dir_all(data.join("snapshots")).unwrap();
        std::fs::create_dir_all(data.join("lost+found")).unwrap();
        std::fs::write(data.join("notes"), b"x").unwrap();
        let missing = dir.path().join("no.backup");
        let e = restore(&missing, &data).err().expect("refused");
        assert!(matches!(&e, RestoreError::NotEmpty { found, .. } if found == "notes, snapshots/"), "{e}");
        assert!(e.to_string().contains("already holds notes, snapshots/"), "{e}");
        assert!(!data.join("db").exists(), "nothing written");

        // Empty (but for lost+found) or absent: the restore goes on to read the backup.
        std::fs::remove_dir_all(data.join("snapshots")).unwrap();
        std::fs::remove_file(data.join("notes")).unwrap();
        for target in [data.clone(), dir.path().join("new")] {
            let e = restore(&missing, &target).err().expect("no backup file");
            assert!(!matches!(e, RestoreError::NotEmpty { .. }), "{e}");
        }
    }

    #[test]
    fn a_partial_backup_is_beside_its_target() {
        assert_eq!(partial_path(Path::new("/b/x.backup")), Path::new("/b/x.backup.partial"));
    }
}
