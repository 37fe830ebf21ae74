//! Cleanup: what one run must remove, the registry of live runs, removal of stale runs'
//! leftovers, and the optional signal handler.
//!
//! Every run writes an owner file `<registry>/kc<id>.owner` ("<pid> <start time>") before
//! it creates anything. A run whose owner process is gone (or whose file is missing) is
//! stale; [`cleanup_stale`] removes its server processes, namespaces and veths. Runs of
//! live processes, including parallel tests and other programs, are never touched.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::cmd::{self, CMD_TIMEOUT};
use crate::topology::run_id_of;
use crate::ChaosError;

/// What one run created and must remove. Shared between the harness, its `Drop` and the
/// signal handler.
#[derive(Debug, Default)]
pub(crate) struct CleanupState {
    pub run_id: String,
    /// Server process ids (index = server); `None` when not running.
    pub pids: Vec<Option<u32>>,
    /// Namespaces to delete (servers' first, the bridge's last).
    pub namespaces: Vec<String>,
    /// The root-namespace veth, if created.
    pub host_veth: Option<String>,
    pub owner_file: Option<PathBuf>,
    /// Everything was removed; further cleanups do nothing.
    pub done: bool,
}

impl CleanupState {
    /// Kills the servers (SIGKILL, waiting ≤ 5 s each), deletes the host veth and the
    /// namespaces (which takes their veths, nftables tables and qdiscs with them) and the
    /// owner file. Bounded in time; returns what could not be removed. Idempotent.
    pub fn cleanup_sync(&mut self) -> Vec<String> {
        if self.done {
            return Vec::new();
        }
        let mut problems = Vec::new();
        for pid in self.pids.iter_mut() {
            if let Some(p) = pid.take() {
                if !cmd::kill_and_wait(p, Duration::from_secs(5)) {
                    problems.push(format!("server pid {p} did not die"));
                }
            }
        }
        problems.extend(self.remove_network());
        if problems.is_empty() {
            if let Some(f) = self.owner_file.take() {
                let _ = std::fs::remove_file(f);
            }
            self.done = true;
        }
        problems
    }
}

impl CleanupState {
    /// Deletes the host veth and the namespaces (bounded); returns what failed. Forgets
    /// what it removed.
    pub fn remove_network(&mut self) -> Vec<String> {
        let mut problems = Vec::new();
        if let Some(veth) = self.host_veth.take() {
            if std::path::Path::new("/sys/class/net").join(&veth).exists() {
                if let Err(e) = cmd::run(&["ip", "link", "del", &veth], None, CMD_TIMEOUT) {
                    problems.push(e.to_string());
                    self.host_veth = Some(veth);
                }
            }
        }
        let mut kept = Vec::new();
        for ns in std::mem::take(&mut self.namespaces) {
            if std::path::Path::new("/run/netns").join(&ns).exists() {
                if let Err(e) = cmd::run(&["ip", "netns", "del", &ns], None, CMD_TIMEOUT) {
                    problems.push(e.to_string());
                    kept.push(ns);
                }
            }
        }
        self.namespaces = kept;
        problems
    }
}

/// A handle that removes one harness's processes and namespaces from anywhere (e.g. a
/// signal handler of the caller's own), synchronously.
#[derive(Clone, Debug)]
pub struct CleanupHandle(pub(crate) Arc<Mutex<CleanupState>>);

impl CleanupHandle {
    /// Kills the run's servers and deletes its namespaces and veths now (bounded, ≤ ~10 s
    /// per stuck item). The harness is unusable afterwards. Idempotent.
    pub fn cleanup_now(&self) -> Result<(), ChaosError> {
        let problems = lock(&self.0).cleanup_sync();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ChaosError::Cluster(format!("cleanup incomplete: {}", problems.join("; "))))
        }
    }

    /// The run id (`kc<id>-…` names).
    pub fn run_id(&self) -> String {
        lock(&self.0).run_id.clone()
    }
}

pub(crate) fn lock(m: &Mutex<CleanupState>) -> std::sync::MutexGuard<'_, CleanupState> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Every live harness of this process, for the signal handler.
static LIVE: Mutex<Vec<Weak<Mutex<CleanupState>>>> = Mutex::new(Vec::new());

pub(crate) fn register(state: &Arc<Mutex<CleanupState>>) {
    let mut live = LIVE.lock().unwrap_or_else(|p| p.into_inner());
    live.retain(|w| w.strong_count() > 0);
    live.push(Arc::downgrade(state));
}

/// Cleans up every live harness of this process; returns how many it cleaned.
fn cleanup_all_live() -> usize {
    let live: Vec<_> = LIVE.lock().unwrap_or_else(|p| p.into_inner()).iter().filter_map(Weak::upgrade).collect();
    for s in &live {
        for p in lock(s).cleanup_sync() {
            eprintln!("[keelson-chaos] CLEANUP PROBLEM: {p}");
        }
    }
    live.len()
}

/// Spawns a task (call inside a Tokio runtime) that waits for SIGINT or SIGTERM, then
/// synchronously cleans up every live [`crate::Harness`] of this process (servers,
/// namespaces, veths) and exits the process with status 130 (SIGINT) or 143 (SIGTERM).
/// Cancelling `stop` ends the task without cleaning up. Call it once per process.
///
/// Tokio keeps a signal it once listened to caught for the rest of the process, so after
/// `stop` is cancelled SIGINT/SIGTERM no longer terminate the process by default: cancel
/// it only on the way out. Without this handler a killed process still takes its servers
/// with it (they get SIGKILL via `PR_SET_PDEATHSIG`); its namespaces are removed by the
/// next [`cleanup_stale`].
pub fn cleanup_on_signal(stop: CancellationToken) -> tokio::task::JoinHandle<()> {
    use tokio::signal::unix::{signal, SignalKind};
    // The handlers are installed here, before returning, so a signal that arrives right
    // after this call is already ours (installing them inside the task raced with it).
    let handlers = (signal(SignalKind::interrupt()), signal(SignalKind::terminate()));
    tokio::spawn(async move {
        let (mut int, mut term) = match handlers {
            (Ok(i), Ok(t)) => (i, t),
            (Err(e), _) | (_, Err(e)) => {
                eprintln!("[keelson-chaos] WARNING: cannot install the SIGINT/SIGTERM cleanup handler: {e}");
                return;
            }
        };
        let code = tokio::select! {
            _ = stop.cancelled() => return,
            _ = int.recv() => 130,
            _ = term.recv() => 143,
        };
        eprintln!("[keelson-chaos] signal received: killing servers and deleting namespaces of every live harness");
        let n = tokio::task::spawn_blocking(cleanup_all_live).await.unwrap_or(0);
        eprintln!("[keelson-chaos] cleaned up {n} harness(es); exiting with status {code}");
        std::process::exit(code);
    })
}

/// Where owner files live: `/run/keelson-chaos` (root; vanishes on reboot like the
/// namespaces) or `$TMPDIR/keelson-chaos-<uid>`.
pub(crate) fn registry_dir() -> PathBuf {
    if cmd::is_root() {
        PathBuf::from("/run/keelson-chaos")
    } else {
        // SAFETY: getuid has no preconditions.
        std::env::temp_dir().join(format!("keelson-chaos-{}", unsafe { libc::getuid() }))
    }
}

/// Writes this process's owner file for `run`; returns its path.
pub(crate) fn write_owner(run: &str) -> Result<PathBuf, ChaosError> {
    let dir = registry_dir();
    std::fs::create_dir_all(&dir).map_err(ChaosError::io(dir.display().to_string()))?;
    let me = std::process::id();
    let path = dir.join(format!("kc{run}.owner"));
    let text = format!("{me} {}\n", cmd::start_time(me).unwrap_or(0));
    std::fs::write(&path, text).map_err(ChaosError::io(path.display().to_string()))?;
    Ok(path)
}

/// Run ids whose owner file names a live process (same pid and start time).
fn live_runs() -> (BTreeSet<String>, Vec<PathBuf>) {
    let mut live = BTreeSet::new();
    let mut stale_files = Vec::new();
    // Root's registry and every user's, so no run of any user counts as stale.
    let mut dirs = vec![PathBuf::from("/run/keelson-chaos")];
    if let Ok(tmp) = std::fs::read_dir(std::env::temp_dir()) {
        dirs.extend(
            tmp.flatten().filter(|e| e.file_name().to_string_lossy().starts_with("keelson-chaos-")).map(|e| e.path()),
        );
    }
    for e in dirs.iter().filter_map(|d| std::fs::read_dir(d).ok()).flat_map(|rd| rd.flatten()) {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(id) = name.strip_suffix(".owner").and_then(|n| n.strip_prefix("kc")) else { continue };
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        let mut words = text.split_whitespace().map(|w| w.parse::<u64>().ok());
        let owner_alive = match (words.next().flatten(), words.next().flatten()) {
            (Some(pid), Some(start)) => cmd::alive(pid as u32) && cmd::start_time(pid as u32) == Some(start),
            _ => false,
        };
        if owner_alive {
            live.insert(id.to_string());
        } else {
            stale_files.push(e.path());
        }
    }
    (live, stale_files)
}

/// `(pid, run id)` of every `keelson server` process whose `--data-dir` is a harness
/// server directory (`…/kc<id>-n<i>`).
fn server_processes() -> Vec<(u32, String)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else { return out };
    for e in entries.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        // Without root only our own user's processes can be killed.
        if !cmd::is_root() {
            use std::os::unix::fs::MetadataExt;
            // SAFETY: getuid has no preconditions.
            if e.metadata().map(|m| m.uid()).ok() != Some(unsafe { libc::getuid() }) {
                continue;
            }
        }
        let Ok(raw) = std::fs::read(e.path().join("cmdline")) else { continue };
        let args: Vec<String> = raw.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).to_string()).collect();
        if !args.iter().any(|a| a == "server") {
            continue;
        }
        let Some(dir) = args.iter().position(|a| a == "--data-dir").and_then(|p| args.get(p + 1)) else { continue };
        let last = std::path::Path::new(dir).file_name().map(|f| f.to_string_lossy().to_string()).unwrap_or_default();
        if let Some(id) = run_id_of(&last).filter(|_| last.contains("-n")) {
            out.push((pid, id.to_string()));
        }
    }
    out
}

/// Removes leftovers of earlier runs whose owner process is gone: their server
/// processes (SIGKILL), network namespaces `kc<id>-*` and root-namespace veths
/// `kc<id>h`. Returns how many of those it removed; fails (after trying everything) with
/// the first removal that failed. Bounded in time. [`crate::Harness::start`] calls it.
pub fn cleanup_stale() -> Result<usize, ChaosError> {
    let (live, stale_files) = live_runs();
    let mut removed = 0;
    let mut first_err = None;
    for (pid, id) in server_processes() {
        if !live.contains(&id) && pid != std::process::id() {
            eprintln!("[keelson-chaos] stale run kc{id}: killing server pid {pid}");
            if cmd::kill_and_wait(pid, Duration::from_secs(5)) {
                removed += 1;
            } else {
                first_err.get_or_insert(ChaosError::Cluster(format!("stale server pid {pid} did not die")));
            }
        }
    }
    if let Ok(entries) = std::fs::read_dir("/sys/class/net") {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if run_id_of(&name).is_some_and(|id| !live.contains(id)) && name.ends_with('h') {
                eprintln!("[keelson-chaos] stale veth {name}: deleting");
                match cmd::run(&["ip", "link", "del", &name], None, CMD_TIMEOUT) {
                    Ok(_) => removed += 1,
                    Err(e) => {
                        first_err.get_or_insert(e);
                    }
                }
            }
        }
    }
    if let Ok(entries) = std::fs::read_dir("/run/netns") {
        let mut names: Vec<String> = entries.flatten().map(|e| e.file_name().to_string_lossy().to_string()).collect();
        // Servers' namespaces before bridges'.
        names.sort_by_key(|n| n.ends_with("-br"));
        for name in names {
            if run_id_of(&name).is_some_and(|id| !live.contains(id)) {
                eprintln!("[keelson-chaos] stale namespace {name}: deleting");
                match cmd::run(&["ip", "netns", "del", &name], None, CMD_TIMEOUT) {
                    Ok(_) => removed += 1,
                    Err(e) => {
                        first_err.get_or_insert(e);
                    }
                }
            }
        }
    }
    if first_err.is_none() {
        for f in stale_files {
            let _ = std::fs::remove_file(f);
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(removed),
    }
}
