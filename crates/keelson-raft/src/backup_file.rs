//! The backup file: a snapshot file ([`crate::snapshot_file`]) as a replica wrote it for a
//! backup, followed by a trailer that makes the whole file checkable on its own:
//!
//! ```text
//! snapshot file bytes (length N)
//! magic "KLBACKUP" | SHA-256 of the N bytes (32) | u64 N (little-endian)
//! ```
//!
//! [`BackupWriter`] takes the snapshot's bytes as they stream in and appends the trailer;
//! [`extract`] checks a backup against its trailer while copying the snapshot out, so a
//! truncated, padded or flipped file is refused before anything is restored from it.
//! Neither holds the file in memory.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

const MAGIC: &[u8; 8] = b"KLBACKUP";
const TRAILER: u64 = 8 + 32 + 8;

#[derive(Debug, thiserror::Error)]
pub enum BackupFileError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{0} is not a Keelson backup (no backup trailer; was it cut short?)")]
    NotABackup(PathBuf),
    #[error("{path} is damaged: its trailer says {expected} bytes of snapshot, the file holds {actual}")]
    Length { path: PathBuf, expected: u64, actual: u64 },
    #[error("{path} is damaged: its SHA-256 is {actual}, its trailer says {expected}")]
    Checksum { path: PathBuf, expected: String, actual: String },
    #[error("the backup stream's SHA-256 is {actual}, the server sent {expected}")]
    Transfer { expected: String, actual: String },
}

fn io_at(path: &Path) -> impl Fn(io::Error) -> BackupFileError + '_ {
    move |source| BackupFileError::Io { path: path.to_path_buf(), source }
}

pub fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes a backup file from the snapshot bytes as they arrive.
pub struct BackupWriter {
    path: PathBuf,
    out: BufWriter<File>,
    hash: Sha256,
    len: u64,
}

impl BackupWriter {
    pub fn create(path: &Path) -> Result<Self, BackupFileError> {
        let out = BufWriter::with_capacity(1 << 20, File::create(path).map_err(io_at(path))?);
        Ok(Self { path: path.to_path_buf(), out, hash: Sha256::new(), len: 0 })
    }

    pub fn write(&mut self, chunk: &[u8]) -> Result<(), BackupFileError> {
        self.hash.update(chunk);
        self.len += chunk.len() as u64;
        self.out.write_all(chunk).map_err(io_at(&self.path))
    }

    /// Appends the trailer and syncs the file. `expected` is the digest the sender
    /// computed over what it sent (if it sent one): a mismatch means the transfer
    /// changed the bytes, and the file is left incomplete (no trailer).
    pub fn finish(mut self, expected: Option<&[u8]>) -> Result<BackupSummary, BackupFileError> {
        let digest = self.hash.finalize();
        if let Some(expected) = expected.filter(|e| *e != digest.as_slice()) {
            return Err(BackupFileError::Transfer { expected: hex(expected), actual: hex(&digest) });
        }
        let io = io_at(&self.path);
        self.out.write_all(MAGIC).map_err(&io)?;
        self.out.write_all(&digest).map_err(&io)?;
        self.out.write_all(&self.len.to_le_bytes()).map_err(&io)?;
        let file = self.out.into_inner().map_err(|e| io(e.into_error()))?;
        file.sync_all().map_err(&io)?;
        Ok(BackupSummary { snapshot_bytes: self.len, sha256: hex(&digest) })
    }
}

/// What a written or checked backup holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackupSummary {
    /// Bytes of snapshot in the file (the trailer not counted).
    pub snapshot_bytes: u64,
    /// The snapshot bytes' SHA-256, in hex.
    pub sha256: String,
}

/// Checks `backup` against its trailer while copying its snapshot to `snapshot_out` (a
/// file [`crate::snapshot_file::SnapshotReader`] can open). `snapshot_out` is removed
/// again when the check fails.
pub fn extract(backup: &Path, snapshot_out: &Path) -> Result<BackupSummary, BackupFileError> {
    let result = extract_checked(backup, snapshot_out);
    if result.is_err() {
        let _ = std::fs::remove_file(snapshot_out);
    }
    result
}

fn extract_checked(backup: &Path, snapshot_out: &Path) -> Result<BackupSummary, BackupFileError> {
    let io = io_at(backup);
    let mut input = File::open(backup).map_err(&io)?;
    let total = input.metadata().map_err(&io)?.len();
    if total < TRAILER {
        return Err(BackupFileError::NotABackup(backup.to_path_buf()));
    }
    input.seek(SeekFrom::Start(total - TRAILER)).map_err(&io)?;
    let mut trailer = [0u8; TRAILER as usize];
    input.read_exact(&mut trailer).map_err(&io)?;
    if &trailer[..8] != MAGIC {
        return Err(BackupFileError::NotABackup(backup.to_path_buf()));
    }
    let expected_digest = &trailer[8..40];
    let expected_len = u64::from_le_bytes(trailer[40..].try_into().expect("8 bytes"));
    let actual_len = total - TRAILER;
    if expected_len != actual_len {
        return Err(BackupFileError::Length { path: backup.to_path_buf(), expected: expected_len, actual: actual_len });
    }
    input.seek(SeekFrom::Start(0)).map_err(&io)?;
    let mut input = BufReader::with_capacity(1 << 20, input).take(actual_len);
    let out_io = io_at(snapshot_out);
    let mut out = BufWriter::with_capacity(1 << 20, File::create(snapshot_out).map_err(&out_io)?);
    let mut hash = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = input.read(&mut buf).map_err(&io)?;
        if n == 0 {
            break;
        }
        hash.update(&buf[..n]);
        out.write_all(&buf[..n]).map_err(&out_io)?;
    }
    let digest = hash.finalize();
    if digest.as_slice() != expected_digest {
        return Err(BackupFileError::Checksum { path: backup.to_path_buf(), expected: hex(expected_digest), actual: hex(&digest) });
    }
    out.into_inner().map_err(|e| out_io(e.into_error()))?.sync_all().map_err(&out_io)?;
    Ok(BackupSummary { snapshot_bytes: actual_len, sha256: hex(&digest) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backup_of(dir: &Path, body: &[u8]) -> PathBuf {
        let path = dir.join("b.backup");
        let mut w = BackupWriter::create(&path).unwrap();
        for chunk in body.chunks(7) {
            w.write(chunk).unwrap();
        }
        let summary = w.finish(Some(Sha256::digest(body).as_slice())).unwrap();
        assert_eq!(summary.snapshot_bytes, body.len() as u64);
        path
    }

    #[test]
    fn a_backup_extracts_to_the_bytes_written() {
        let dir = tempfile::tempdir().unwrap();
        let body: Vec<u8> = (0..10_000u32).flat_map(|i| i.to_le_bytes()).collect();
        let path = backup_of(dir.path(), &body);
        let out = dir.path().join("s.snap");
        let summary = extract(&path, &out).unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), body);
        assert_eq!(summary.sha256, hex(&Sha256::digest(&body)));
    }

    #[test]
    fn a_flipped_truncated_or_foreign_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let body = b"snapshot bytes, any bytes".repeat(100);
        let path = backup_of(dir.path(), &body);
        let out = dir.path().join("s.snap");
        let good = std::fs::read(&path).unwrap();

        let mut flipped = good.clone();
        flipped[100] ^= 0x01;
        std::fs::write(&path, &flipped).unwrap();
        assert!(matches!(extract(&path, &out), Err(BackupFileError::Checksum { .. })), "a flipped byte");
        assert!(!out.exists(), "nothing is left behind from a refused backup");

        let mut longer = good[..good.len() - TRAILER as usize].to_vec();
        longer.extend_from_slice(b"extra");
        longer.extend_from_slice(&good[good.len() - TRAILER as usize..]);
        std::fs::write(&path, &longer).unwrap();
        assert!(matches!(extract(&path, &out), Err(BackupFileError::Length { .. })), "bytes added");

        std::fs::write(&path, &good[..good.len() - 10]).unwrap();
        assert!(matches!(extract(&path, &out), Err(BackupFileError::NotABackup(_))), "cut short");
        std::fs::write(&path, b"short").unwrap();
        assert!(matches!(extract(&path, &out), Err(BackupFileError::NotABackup(_))), "not a backup at all");
    }

    #[test]
    fn bytes_changed_in_transfer_leave_no_backup() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b.backup");
        let mut w = BackupWriter::create(&path).unwrap();
        w.write(b"what arrived").unwrap();
        let err = w.finish(Some(Sha256::digest(b"what was sent").as_slice())).unwrap_err();
        assert!(matches!(err, BackupFileError::Transfer { .. }), "{err}");
        let out = dir.path().join("s.snap");
        assert!(matches!(extract(&path, &out), Err(BackupFileError::NotABackup(_))), "no trailer was written");
    }
}
