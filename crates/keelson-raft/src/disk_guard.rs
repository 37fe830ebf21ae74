//! Keeping a replica off a full disk.
//!
//! A Raft log store that fails an append is fatal to openraft's core, and RocksDB that
//! hits ENOSPC stops taking writes; both would take the replica down for good. So a
//! replica keeps a reserve of free space on its data directory's file system and, while
//! less than that is free, writes nothing new to its log:
//!
//! - it refuses replicated appends that carry entries and snapshot installs
//!   (RESOURCE_EXHAUSTED, with [`DISK_LOW_MARK`] in the message); the leader keeps
//!   retrying, and the replica catches up from the log once space returns. Heartbeats and
//!   votes are still taken: saving a vote is a few bytes, which the reserve is for, and
//!   it lets a deposed leader learn of its successor and a low majority still elect;
//! - it does not campaign, and as leader it hands leadership to a peer and takes no
//!   proposals (`keelson-replica` does both, from [`DiskGuard::check`]);
//! - the leader remembers which peers refused for space ([`PeerSpaceReports`]), so when a
//!   majority of voters is low a write fails at once with a clear error instead of waiting
//!   for a commit that cannot come.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::NodeId;

/// The reserve a replica keeps free by default: 64 MiB (room for RocksDB's own flushes
/// and compactions of what is already written, and for the vote and applies).
pub const DEFAULT_RESERVE_BYTES: u64 = 64 << 20;

/// Marks a refusal for space in a transport status message, so the leader can tell it
/// from other failures.
pub const DISK_LOW_MARK: &str = "data directory low on space";

/// How long a peer's refusal for space counts after the last one.
pub const PEER_REPORT_TTL: Duration = Duration::from_secs(3);

/// Why a replica writes nothing new right now.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DiskGuardError {
    /// Less than the reserve is free on the data directory's file system.
    #[error("{DISK_LOW_MARK}: {dir} has {free} bytes free, below the reserve of {reserve}; this replica appends nothing until space returns")]
    Low { dir: String, free: u64, reserve: u64 },
    /// The file system could not be asked (counted as low: writing blind is worse).
    #[error("{DISK_LOW_MARK}: cannot read the free space of {dir}: {reason}")]
    Unknown { dir: String, reason: String },
}

/// Watches the free space of one data directory. Cheap to clone; clones share state.
#[derive(Clone, Debug)]
pub struct DiskGuard {
    inner: Arc<GuardInner>,
}

#[derive(Debug)]
struct GuardInner {
    dir: PathBuf,
    reserve: u64,
    free: AtomicU64,
    low: AtomicBool,
    refused: AtomicU64,
}

impl DiskGuard {
    /// Guards `dir` with `reserve` bytes kept free (0: never refuses, still measures).
    pub fn new(dir: impl Into<PathBuf>, reserve: u64) -> Self {
        Self {
            inner: Arc::new(GuardInner {
                dir: dir.into(),
                reserve,
                free: AtomicU64::new(u64::MAX),
                low: AtomicBool::new(false),
                refused: AtomicU64::new(0),
            }),
        }
    }

    /// Measures the free space now: `Err` while below the reserve. Also updates what
    /// [`Self::free_bytes`] and [`Self::is_low`] report, logging each change of state.
    pub fn check(&self) -> Result<(), DiskGuardError> {
        let g = &self.inner;
        let verdict = match available_bytes(&g.dir) {
            Ok(free) => {
                g.free.store(free, Ordering::Relaxed);
                space_verdict(&g.dir, free, g.reserve)
            }
            Err(e) => Err(DiskGuardError::Unknown { dir: g.dir.display().to_string(), reason: e.to_string() }),
        };
        let low = verdict.is_err();
        if g.low.swap(low, Ordering::Relaxed) != low {
            match &verdict {
                Err(e) => tracing::error!(error = %e, "replica stops appending: disk space low"),
                Ok(()) => tracing::info!(dir = %g.dir.display(), free = g.free.load(Ordering::Relaxed), "disk space returned; replica appends again"),
            }
        }
        verdict
    }

    /// As [`Self::check`], counting a refusal when low.
    pub fn admit(&self) -> Result<(), DiskGuardError> {
        let r = self.check();
        if r.is_err() {
            self.inner.refused.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    /// Whether the last measurement was below the reserve.
    pub fn is_low(&self) -> bool {
        self.inner.low.load(Ordering::Relaxed)
    }

    /// Free bytes at the last measurement (`u64::MAX` before the first).
    pub fn free_bytes(&self) -> u64 {
        self.inner.free.load(Ordering::Relaxed)
    }

    pub fn reserve_bytes(&self) -> u64 {
        self.inner.reserve
    }

    /// Writes refused for space so far.
    pub fn refused(&self) -> u64 {
        self.inner.refused.load(Ordering::Relaxed)
    }
}

/// The verdict for `free` bytes against `reserve`. Pure.
pub fn space_verdict(dir: &Path, free: u64, reserve: u64) -> Result<(), DiskGuardError> {
    if free < reserve {
        Err(DiskGuardError::Low { dir: dir.display().to_string(), free, reserve })
    } else {
        Ok(())
    }
}

/// Bytes an unprivileged writer may still use on the file system holding `dir`.
fn available_bytes(dir: &Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: statvfs only writes the struct we pass; `c` is a valid NUL-terminated path.
    let s = unsafe {
        let mut s: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(c.as_ptr(), &mut s) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        s
    };
    Ok((s.f_bavail as u64).saturating_mul(s.f_frsize as u64))
}

/// Which peers refused this node's appends for space, and when last. Shared between the
/// network (which records) and the replica (which asks before proposing).
#[derive(Clone, Debug, Default)]
pub struct PeerSpaceReports {
    inner: Arc<Mutex<HashMap<NodeId, Instant>>>,
}

impl PeerSpaceReports {
    pub fn refused(&self, peer: NodeId) {
        self.inner.lock().expect("peer reports").insert(peer, Instant::now());
    }

    pub fn accepted(&self, peer: NodeId) {
        self.inner.lock().expect("peer reports").remove(&peer);
    }

    /// The peers that refused for space within [`PEER_REPORT_TTL`] of `now`.
    pub fn low_peers(&self, now: Instant) -> Vec<NodeId> {
        let mut m = self.inner.lock().expect("peer reports");
        m.retain(|_, at| now.saturating_duration_since(*at) < PEER_REPORT_TTL);
        let mut v: Vec<NodeId> = m.keys().copied().collect();
        v.sort_unstable();
        v
    }
}

/// Whether a majority of `voters` is low on space, given this node's own state and the
/// peers that reported so. Pure.
pub fn majority_low(voters: &[NodeId], me: NodeId, me_low: bool, low_peers: &[NodeId]) -> bool {
    let low = voters.iter().filter(|v| if **v == me { me_low } else { low_peers.contains(v) }).count();
    !voters.is_empty() && low > voters.len() / 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn below_the_reserve_is_low_and_says_how_much() {
        let e = space_verdict(Path::new("/data"), 10, 64).unwrap_err();
        let msg = e.to_string();
        assert!(msg.starts_with(DISK_LOW_MARK), "{msg}");
        assert!(msg.contains("/data has 10 bytes free, below the reserve of 64"), "{msg}");
        assert!(space_verdict(Path::new("/data"), 64, 64).is_ok());
        assert!(space_verdict(Path::new("/data"), 0, 0).is_ok(), "no reserve never refuses");
    }

    #[test]
    fn a_real_directory_has_free_space_and_a_huge_reserve_is_low() {
        let dir = tempfile::tempdir().unwrap();
        let ok = DiskGuard::new(dir.path(), 0);
        assert!(ok.check().is_ok());
        assert!(ok.free_bytes() > 0 && ok.free_bytes() < u64::MAX);
        let full = DiskGuard::new(dir.path(), u64::MAX);
        assert!(full.admit().is_err());
        assert!(full.is_low());
        assert_eq!(full.refused(), 1);
        let gone = DiskGuard::new(dir.path().join("missing"), 0);
        assert!(matches!(gone.check(), Err(DiskGuardError::Unknown { .. })));
    }

    #[test]
    fn a_majority_counts_this_node_and_reporting_peers() {
        let voters = [1, 2, 3];
        assert!(!majority_low(&voters, 1, false, &[2]));
        assert!(!majority_low(&voters, 1, true, &[]));
        assert!(majority_low(&voters, 1, true, &[3]));
        assert!(majority_low(&voters, 1, false, &[2, 3]));
        // A report from a node that is not a voter does not count.
        assert!(!majority_low(&voters, 1, true, &[9]));
        assert!(!majority_low(&[], 1, true, &[]));
    }

    #[test]
    fn peer_reports_expire_and_clear() {
        let r = PeerSpaceReports::default();
        r.refused(2);
        r.refused(3);
        let now = Instant::now();
        assert_eq!(r.low_peers(now), vec![2, 3]);
        r.accepted(2);
        assert_eq!(r.low_peers(now), vec![3]);
        assert!(r.low_peers(now + PEER_REPORT_TTL).is_empty());
    }
}
