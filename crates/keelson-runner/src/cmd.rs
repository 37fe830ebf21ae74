//! Subprocesses with a deadline, small process helpers and wall-clock formatting (public:
//! the chaos harness runs its `nft` and `tc` calls through them).

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::RunnerError;

/// Default deadline for one `ip`/`nft`/`tc` call.
pub const CMD_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs `argv` (with `stdin` fed to it, if any) and returns its stdout. Fails with
/// [`RunnerError::Command`] on a non-zero exit or when `timeout` passes (the child is then
/// killed).
pub fn run(argv: &[&str], stdin: Option<&str>, timeout: Duration) -> Result<String, RunnerError> {
    let shown = argv.join(" ");
    let mut child = Command::new(argv[0])
        .args(&argv[1..])
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(RunnerError::io(format!("running `{shown}`")))?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        let text = text.to_string();
        // A writer thread, so a child that does not read cannot block us past the deadline.
        std::thread::spawn(move || {
            let _ = pipe.write_all(text.as_bytes());
        });
    }
    let mut out_pipe = child.stdout.take();
    let mut err_pipe = child.stderr.take();
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(p) = out_pipe.as_mut() {
            let _ = p.read_to_string(&mut s);
        }
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(p) = err_pipe.as_mut() {
            let _ = p.read_to_string(&mut s);
        }
        s
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    match status {
        Some(st) if st.success() => Ok(stdout),
        Some(st) => Err(RunnerError::Command { cmd: shown, status: st.to_string(), stderr: stderr.trim().to_string() }),
        None => Err(RunnerError::Command {
            cmd: shown,
            status: format!("timed out after {timeout:?}"),
            stderr: stderr.trim().to_string(),
        }),
    }
}

/// [`run`] on the blocking thread pool.
pub async fn run_async(
    argv: Vec<String>,
    stdin: Option<String>,
    timeout: Duration,
) -> Result<String, RunnerError> {
    tokio::task::spawn_blocking(move || {
        let refs: Vec<&str> = argv.iter().map(String::as_str).collect();
        run(&refs, stdin.as_deref(), timeout)
    })
    .await
    .map_err(|e| RunnerError::Io { context: "subprocess task".into(), source: std::io::Error::other(e.to_string()) })?
}

/// True when the effective user is root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Sends `sig` to `pid`; true when the signal was delivered.
pub fn signal(pid: u32, sig: i32) -> bool {
    // SAFETY: kill(2) with a pid we recorded; a stale pid at worst gets ESRCH.
    unsafe { libc::kill(pid as i32, sig) == 0 }
}

/// The process state letter of `pid` (`R`, `S`, `T` stopped, `Z` zombie, ...).
pub fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// True while `pid` exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    state(pid).is_some_and(|s| s != 'Z')
}

/// The process's start time in clock ticks since boot (`/proc/<pid>/stat` field 22), to
/// tell a process from a later one that reuses its pid.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    // rest starts with field 3 (state); field 22 is index 19 of it.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Sends SIGKILL to `pid` and waits (≤ `timeout`) until it is gone or a zombie.
pub fn kill_and_wait(pid: u32, timeout: Duration) -> bool {
    signal(pid, libc::SIGKILL);
    let deadline = Instant::now() + timeout;
    while alive(pid) {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// Now as RFC 3339 UTC with milliseconds, e.g. `2025-01-31T12:34:56.789Z`.
pub fn rfc3339_now() -> String {
    let d = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    rfc3339(d)
}

/// `since_epoch` as RFC 3339 UTC with milliseconds.
pub fn rfc3339(since_epoch: Duration) -> String {
    let millis = i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX);
    match jiff::Timestamp::from_millisecond(millis) {
        Ok(t) => t.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        Err(_) => "9999-12-31T23:59:59.999Z".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_formats_known_instants() {
        assert_eq!(rfc3339(Duration::ZERO), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(Duration::from_millis(951_782_400_123)), "2000-02-29T00:00:00.123Z");
        assert_eq!(rfc3339(Duration::from_secs(1_735_689_599)), "2024-12-31T23:59:59.000Z");
        assert_eq!(rfc3339(Duration::from_secs(4_107_542_400)), "2100-03-01T00:00:00.000Z");
    }

    #[test]
    fn run_reports_status_stderr_and_timeout() {
        assert_eq!(run(&["sh", "-c", "cat"], Some("hi"), CMD_TIMEOUT).unwrap(), "hi");
        match run(&["sh", "-c", "echo oops >&2; exit 3"], None, CMD_TIMEOUT) {
            Err(RunnerError::Command { status, stderr, .. }) => {
                assert!(status.contains('3'), "{status}");
                assert_eq!(stderr, "oops");
            }
            other => panic!("unexpected {other:?}"),
        }
        let t = Instant::now();
        match run(&["sleep", "5"], None, Duration::from_millis(200)) {
            Err(RunnerError::Command { status, .. }) => assert!(status.contains("timed out"), "{status}"),
            other => panic!("unexpected {other:?}"),
        }
        assert!(t.elapsed() < Duration::from_secs(3));
    }

    #[test]
    fn own_process_is_alive_with_a_start_time() {
        let me = std::process::id();
        assert!(alive(me));
        assert!(start_time(me).is_some());
    }
}
