//! Snapshot writes that fail because the file system is full wait for space instead of
//! failing.
//!
//! The [`crate::disk_guard`] keeps a replica from writing while less than the reserve is
//! free, but a disk can still fill to its last byte between two checks (another program
//! writes it full, or the reserve is 0). The first write that needs new space is then
//! usually a snapshot: RocksDB preallocates its log file, so appends still fit. An error
//! a snapshot build hands to openraft is fatal to its core, and the replica would stay
//! down until restarted; so a snapshot that fails for space (ENOSPC, EDQUOT, or RocksDB's
//! NoSpace) is built again, with a growing pause, until it succeeds. The replica keeps
//! its log and serves meanwhile; it only does not shorten its log.
//!
//! Writes to RocksDB's own log are not retried: after one fails, RocksDB refuses every
//! later write of that log file (builds with assertions, as the Debian library linked
//! here, abort the process), and only reopening the database
//! clears that. Such a failure stops the Raft core, and the server exits so that it is
//! restarted (see `RunningReplica::raft_stopped`; `keelson up` restarts it with a
//! doubling pause until it stays up, as systemd's `Restart=on-failure` would).

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How many writes have failed for space and been retried, in this process.
static RETRIED: AtomicU64 = AtomicU64::new(0);
/// How many writes are waiting for space right now.
static WAITING: AtomicU64 = AtomicU64::new(0);

/// The first pause after a failure; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// Writes retried for space so far in this process (the
/// `keelson_storage_space_retries` metric).
pub fn retries() -> u64 {
    RETRIED.load(Ordering::Relaxed)
}

/// Writes waiting for space now in this process (the
/// `keelson_storage_writes_waiting_for_space` metric).
pub fn waiting() -> u64 {
    WAITING.load(Ordering::Relaxed)
}

/// The error says the file system had no room (or the user's quota was spent).
pub fn is_out_of_space(e: &io::Error) -> bool {
    const ENOSPC: i32 = 28;
    const EDQUOT: i32 = 122;
    if matches!(e.raw_os_error(), Some(ENOSPC | EDQUOT)) {
        return true;
    }
    // RocksDB's errors come as text ("IO error: No space left on device: ...").
    let text = e.to_string();
    text.contains("No space left on device") || text.contains("Disk quota exceeded") || text.contains("NoSpace")
}

/// One write's attempts: the pause before the next, and whether it counts as waiting.
struct Attempts<'a> {
    what: &'a str,
    pause: Duration,
    waiting: bool,
}

impl<'a> Attempts<'a> {
    fn new(what: &'a str) -> Self {
        Attempts { what, pause: FIRST_PAUSE, waiting: false }
    }

    /// After an attempt: `Some(pause)` to try again after it, `None` to return `result`.
    fn after<T>(&mut self, result: &io::Result<T>) -> Option<Duration> {
        match result {
            Err(e) if is_out_of_space(e) => {
                RETRIED.fetch_add(1, Ordering::Relaxed);
                if !self.waiting {
                    tracing::error!(what = self.what, error = %e, "storage write failed for lack of space: this replica waits, retrying, until space returns");
                    WAITING.fetch_add(1, Ordering::Relaxed);
                    self.waiting = true;
                }
                let pause = self.pause;
                self.pause = (self.pause * 2).min(MAX_PAUSE);
                Some(pause)
            }
            Ok(_) if self.waiting => {
                tracing::info!(what = self.what, "storage write succeeded after space returned");
                None
            }
            _ => None,
        }
    }
}

impl Drop for Attempts<'_> {
    fn drop(&mut self) {
        if self.waiting {
            WAITING.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Runs `write` until it succeeds, fails for another reason than space, or `give_up`
/// says so (its caller is shutting down), pausing between attempts (a blocking caller: a
/// thread of its own); `what` names it in the log.
pub fn retry_blocking<T>(what: &str, give_up: impl Fn() -> bool, mut write: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    let mut attempts = Attempts::new(what);
    loop {
        let result = write();
        match attempts.after(&result) {
            Some(pause) if !give_up() => std::thread::sleep(pause),
            _ => return result,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn space_errors_are_told_from_others_by_os_code_and_by_rocksdb_text() {
        assert!(is_out_of_space(&io::Error::from_raw_os_error(28)));
        assert!(is_out_of_space(&io::Error::from_raw_os_error(122)));
        assert!(is_out_of_space(&io::Error::other("IO error: No space left on device: While appending to file: 000012.log")));
        assert!(!is_out_of_space(&io::Error::from_raw_os_error(5)));
        assert!(!is_out_of_space(&io::Error::other("Corruption: block checksum mismatch")));
    }

    #[test]
    fn a_write_failing_for_space_is_retried_until_it_succeeds_and_other_errors_return_at_once() {
        let mut calls = 0;
        let r = retry_blocking("test write", || false, || {
            calls += 1;
            if calls < 3 {
                Err(io::Error::from_raw_os_error(28))
            } else {
                Ok(calls)
            }
        });
        assert_eq!(r.unwrap(), 3);
        assert!(retries() >= 2);

        let mut calls = 0;
        let r: io::Result<()> = retry_blocking("test write", || false, || {
            calls += 1;
            Err(io::Error::from_raw_os_error(5))
        });
        assert_eq!(r.unwrap_err().raw_os_error(), Some(5));
        assert_eq!(calls, 1);

        // A caller shutting down stops waiting and gets the failure.
        let calls = std::cell::Cell::new(0);
        let r: io::Result<()> = retry_blocking("test write", || calls.get() == 2, || {
            calls.set(calls.get() + 1);
            Err(io::Error::from_raw_os_error(28))
        });
        assert!(is_out_of_space(&r.unwrap_err()));
        assert_eq!(calls.get(), 2);
    }
}
