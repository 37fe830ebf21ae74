//! Cleanup: what one run must remove, the registry of live runs, removal of stale runs'
//! leftovers, and the optional signal handler.
//!
//! Every run writes an owner file `<registry>/kc<id>.owner` before it creates anything:
//! a first line "<pid> <start time>" naming the owner process, then one line per member
//! process ("pid <pid> <start time>") and per node data directory ("dir <path>"),
//! rewritten whenever a member starts or stops. A run whose owner process is gone is
//! stale; [`cleanup_stale`] kills its recorded processes, the processes of its nodes
//! (containerd, shims, containers: anything whose command line or root lies in a node's
//! directory, or that runs in one of its namespaces), unmounts what its nodes mounted and
//! deletes its namespaces and veths. Runs of live processes, including parallel tests and
//! other programs, are never touched.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::cmd::{self, CMD_TIMEOUT};
use crate::topology::run_id_of;
use crate::RunnerError;

/// What one run created and must remove. Shared between the cluster, its `Drop` and the
/// signal handler.
#[derive(Debug, Default)]
pub(crate) struct CleanupState {
    pub run_id: String,
    /// Member process ids (index = member); `None` when not running.
    pub pids: Vec<Option<u32>>,
    /// Data directories of node members: their containerd, shims and containers live
    /// there, and their mounts.
    pub node_dirs: Vec<PathBuf>,
    /// Namespaces to delete (servers' first, the bridge's last).
    pub namespaces: Vec<String>,
    /// The root-namespace veth, if created.
    pub host_veth: Option<String>,
    pub owner_file: Option<PathBuf>,
    /// Everything was removed; further cleanups do nothing.
    pub done: bool,
}

impl CleanupState {
    /// Kills the members (SIGKILL, waiting ≤ 5 s each) and what their nodes started,
    /// unmounts the nodes' mounts, deletes the host veth and the namespaces (which takes
    /// their veths, routes, nftables tables and qdiscs with them) and the owner file.
    /// Bounded in time; returns what could not be removed. Idempotent.
    pub fn cleanup_sync(&mut self) -> Vec<String> {
        if self.done {
            return Vec::new();
        }
        let mut problems = Vec::new();
        for pid in self.pids.iter_mut() {
            if let Some(p) = pid.take() {
                if !cmd::kill_and_wait(p, Duration::from_secs(5)) {
                    problems.push(format!("member pid {p} did not die"));
                }
            }
        }
        for dir in &self.node_dirs {
            problems.extend(remove_node_leftovers(dir));
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
                kill_namespace_processes(&ns);
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

/// A handle that removes one run's processes and namespaces from anywhere (e.g. a
/// signal handler of the caller's own), synchronously.
#[derive(Clone, Debug)]
pub struct CleanupHandle(pub(crate) Arc<Mutex<CleanupState>>);

impl CleanupHandle {
    /// Kills the run's members and deletes its namespaces and veths now (bounded, ≤ ~10 s
    /// per stuck item). The cluster is unusable afterwards. Idempotent.
    pub fn cleanup_now(&self) -> Result<(), RunnerError> {
        let problems = lock(&self.0).cleanup_sync();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(RunnerError::Cluster(format!("cleanup incomplete: {}", problems.join("; "))))
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

/// Every live run of this process, for the signal handler.
static LIVE: Mutex<Vec<Weak<Mutex<CleanupState>>>> = Mutex::new(Vec::new());

pub(crate) fn register(state: &Arc<Mutex<CleanupState>>) {
    let mut live = LIVE.lock().unwrap_or_else(|p| p.into_inner());
    live.retain(|w| w.strong_count() > 0);
    live.push(Arc::downgrade(state));
}

/// Cleans up every live run of this process; returns how many it cleaned.
fn cleanup_all_live() -> usize {
    let live: Vec<_> = LIVE.lock().unwrap_or_else(|p| p.into_inner()).iter().filter_map(Weak::upgrade).collect();
    for s in &live {
        for p in lock(s).cleanup_sync() {
            eprintln!("[keelson-runner] CLEANUP PROBLEM: {p}");
        }
    }
    live.len()
}

/// Spawns a task (call inside a Tokio runtime) that waits for SIGINT or SIGTERM, then
/// synchronously cleans up every live [`crate::Cluster`] of this process (members,
/// namespaces, veths) and exits the process with status 130 (SIGINT) or 143 (SIGTERM).
/// Cancelling `stop` ends the task without cleaning up. Call it once per process.
///
/// Tokio keeps a signal it once listened to caught for the rest of the process, so after
/// `stop` is cancelled SIGINT/SIGTERM no longer terminate the process by default: cancel
/// it only on the way out. Without this handler a killed process still takes its members
/// with it (they get a signal via `PR_SET_PDEATHSIG`); the rest is removed by the next
/// [`cleanup_stale`].
pub fn cleanup_on_signal(stop: CancellationToken) -> tokio::task::JoinHandle<()> {
    use tokio::signal::unix::{signal, SignalKind};
    // The handlers are installed here, before returning, so a signal that arrives right
    // after this call is already ours (installing them inside the task raced with it).
    let handlers = (signal(SignalKind::interrupt()), signal(SignalKind::terminate()));
    tokio::spawn(async move {
        let (mut int, mut term) = match handlers {
            (Ok(i), Ok(t)) => (i, t),
            (Err(e), _) | (_, Err(e)) => {
                eprintln!("[keelson-runner] WARNING: cannot install the SIGINT/SIGTERM cleanup handler: {e}");
                return;
            }
        };
        let code = tokio::select! {
            _ = stop.cancelled() => return,
            _ = int.recv() => 130,
            _ = term.recv() => 143,
        };
        eprintln!("[keelson-runner] signal received: killing members and deleting namespaces of every live cluster");
        let n = tokio::task::spawn_blocking(cleanup_all_live).await.unwrap_or(0);
        eprintln!("[keelson-runner] cleaned up {n} cluster(s); exiting with status {code}");
        std::process::exit(code);
    })
}

/// Where owner files live: `/run/keelson-chaos` (root; vanishes on reboot like the
/// namespaces) or `$TMPDIR/keelson-chaos-<uid>`. The names are those of the chaos
/// harness that had this code before the runner: programs built from older trees on the
/// same machine read the same owner files (their first line has the same form), so
/// neither takes the other's live runs for stale.
pub(crate) fn registry_dir() -> PathBuf {
    if cmd::is_root() {
        PathBuf::from(ROOT_REGISTRY)
    } else {
        // SAFETY: getuid has no preconditions.
        std::env::temp_dir().join(format!("keelson-chaos-{}", unsafe { libc::getuid() }))
    }
}

const ROOT_REGISTRY: &str = "/run/keelson-chaos";

impl CleanupState {
    /// Writes (or rewrites) this process's owner file for the run: the owner, the running
    /// members' pids and the node directories.
    pub fn write_owner(&mut self) -> Result<(), RunnerError> {
        let dir = registry_dir();
        std::fs::create_dir_all(&dir).map_err(RunnerError::io(dir.display().to_string()))?;
        let me = std::process::id();
        let path = dir.join(format!("kc{}.owner", self.run_id));
        let mut text = format!("{me} {}\n", cmd::start_time(me).unwrap_or(0));
        for p in self.pids.iter().flatten() {
            text.push_str(&format!("pid {p} {}\n", cmd::start_time(*p).unwrap_or(0)));
        }
        for d in &self.node_dirs {
            text.push_str(&format!("dir {}\n", d.display()));
        }
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text).map_err(RunnerError::io(tmp.display().to_string()))?;
        std::fs::rename(&tmp, &path).map_err(RunnerError::io(path.display().to_string()))?;
        self.owner_file = Some(path);
        Ok(())
    }
}

/// What a stale owner file recorded.
#[derive(Debug, Default, PartialEq, Eq)]
struct Recorded {
    /// `(pid, start time)` of member processes.
    pids: Vec<(u32, u64)>,
    node_dirs: Vec<PathBuf>,
}

/// Parses the member lines of an owner file (the first line is the owner).
fn parse_recorded(text: &str) -> Recorded {
    let mut r = Recorded::default();
    for line in text.lines().skip(1) {
        if let Some(rest) = line.strip_prefix("pid ") {
            let mut w = rest.split_whitespace().map(|x| x.parse::<u64>().ok());
            if let (Some(Some(pid)), Some(Some(start))) = (w.next(), w.next()) {
                r.pids.push((pid as u32, start));
            }
        } else if let Some(dir) = line.strip_prefix("dir ") {
            r.node_dirs.push(PathBuf::from(dir));
        }
    }
    r
}

/// Kills every process in network namespace `ns` (`ip netns pids`).
fn kill_namespace_processes(ns: &str) {
    if let Ok(out) = cmd::run(&["ip", "netns", "pids", ns], None, CMD_TIMEOUT) {
        for pid in out.split_whitespace().filter_map(|p| p.parse::<u32>().ok()) {
            if pid != std::process::id() {
                cmd::kill_and_wait(pid, Duration::from_secs(5));
            }
        }
    }
}

/// How many kill-and-list rounds [`remove_node_leftovers`] makes before it gives up on a
/// node's processes that keep forking.
const KILL_ROUNDS: usize = 8;

/// Kills what a node left behind in `dir` (processes whose command line names it or whose
/// root lies in it: containerd, shims, containers) and unmounts its mounts, deepest
/// first. Returns what failed.
pub(crate) fn remove_node_leftovers(dir: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let needle = dir.display().to_string();
    if needle.len() < 2 {
        return problems;
    }
    // A process may fork between the listing and its kill (busybox httpd forks per
    // connection, a shim starts runc): kill in rounds until a listing finds nothing.
    for _ in 0..KILL_ROUNDS {
        let pids = processes_in(dir);
        if pids.is_empty() {
            break;
        }
        for pid in pids {
            if !cmd::kill_and_wait(pid, Duration::from_secs(5)) {
                problems.push(format!("pid {pid} of node {needle} did not die"));
            }
        }
        if !problems.is_empty() {
            break;
        }
    }
    let mut mounts: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(|m| m.replace("\\040", " ")))
        .filter(|m| Path::new(m).starts_with(dir))
        .collect();
    mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
    mounts.dedup();
    for m in mounts {
        let Ok(c) = std::ffi::CString::new(m.clone()) else { continue };
        // SAFETY: umount2 with a NUL-terminated path; MNT_DETACH never blocks.
        if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } != 0 {
            problems.push(format!("unmounting {m}: {}", std::io::Error::last_os_error()));
        }
    }
    problems
}

/// Processes (not this one) whose command line mentions `dir` or whose root is inside it,
/// and all their descendants: a node's containers run in mount namespaces of their own
/// (their root reads as `/`) as children of shims whose command line names the node's
/// containerd socket.
pub(crate) fn processes_in(dir: &Path) -> Vec<u32> {
    let needle = dir.display().to_string();
    let me = std::process::id();
    let mut out = Vec::new();
    let mut parents: Vec<(u32, u32)> = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else { return out };
    for e in entries.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        if pid == me || !cmd::alive(pid) {
            continue;
        }
        if let Some(ppid) = std::fs::read_to_string(e.path().join("stat")).ok().as_deref().and_then(parent_of) {
            parents.push((pid, ppid));
        }
        let cmdline = std::fs::read(e.path().join("cmdline")).map(|raw| String::from_utf8_lossy(&raw).replace('\0', " ")).unwrap_or_default();
        let rooted = std::fs::read_link(e.path().join("root")).is_ok_and(|r| r.starts_with(dir));
        if cmdline.contains(&needle) || rooted {
            out.push(pid);
        }
    }
    with_descendants(out, &parents).into_iter().filter(|&p| p != me).collect()
}

/// The parent pid from a `/proc/<pid>/stat` line (the command name may hold spaces and
/// parentheses: the fields after the last `)` are `state ppid …`).
fn parent_of(stat: &str) -> Option<u32> {
    stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}

/// `roots` and every process below them in `parents` (`(pid, ppid)` pairs), roots first.
fn with_descendants(roots: Vec<u32>, parents: &[(u32, u32)]) -> Vec<u32> {
    let mut all = roots;
    let mut seen: BTreeSet<u32> = all.iter().copied().collect();
    let mut i = 0;
    while i < all.len() {
        let p = all[i];
        for &(child, _) in parents.iter().filter(|(_, pp)| *pp == p) {
            if seen.insert(child) {
                all.push(child);
            }
        }
        i += 1;
    }
    all
}

/// Run ids whose owner file names a live process (same pid and start time), and the
/// owner files of the others with what they recorded.
fn live_runs() -> (BTreeSet<String>, Vec<(PathBuf, Recorded)>) {
    let mut live = BTreeSet::new();
    let mut stale_files = Vec::new();
    // Root's registry and every user's, so no run of any user counts as stale.
    let mut dirs = vec![PathBuf::from(ROOT_REGISTRY)];
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
            stale_files.push((e.path(), parse_recorded(&text)));
        }
    }
    (live, stale_files)
}

/// Removes leftovers of earlier runs whose owner process is gone: their member
/// processes (SIGKILL) and what their nodes started and mounted, network namespaces
/// `kc<id>-*` (with the processes in them) and root-namespace veths `kc<id>h`. Returns
/// how many of those it removed; fails (after trying everything) with the first removal
/// that failed. Bounded in time. [`crate::Cluster::start`] calls it.
pub fn cleanup_stale() -> Result<usize, RunnerError> {
    let (live, stale_files) = live_runs();
    let mut removed = 0;
    let mut first_err = None;
    for (file, rec) in &stale_files {
        for &(pid, start) in &rec.pids {
            if pid != std::process::id() && cmd::alive(pid) && cmd::start_time(pid) == Some(start) {
                eprintln!("[keelson-runner] stale run {}: killing member pid {pid}", file.display());
                if cmd::kill_and_wait(pid, Duration::from_secs(5)) {
                    removed += 1;
                } else {
                    first_err.get_or_insert(RunnerError::Cluster(format!("stale member pid {pid} did not die")));
                }
            }
        }
        for dir in &rec.node_dirs {
            if let Some(p) = remove_node_leftovers(dir).into_iter().next() {
                first_err.get_or_insert(RunnerError::Cluster(p));
            }
        }
    }
    if let Ok(entries) = std::fs::read_dir("/sys/class/net") {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if run_id_of(&name).is_some_and(|id| !live.contains(id)) && name.ends_with('h') {
                eprintln!("[keelson-runner] stale veth {name}: deleting");
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
                eprintln!("[keelson-runner] stale namespace {name}: deleting");
                kill_namespace_processes(&name);
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
        for (f, _) in stale_files {
            let _ = std::fs::remove_file(f);
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(removed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descendants_of_a_nodes_processes_are_its_processes_too() {
        assert_eq!(parent_of("42 (containerd-shim) S 7 42 7 0"), Some(7));
        assert_eq!(parent_of("43 (a (b) c) R 42 1"), Some(42));
        assert_eq!(parent_of("garbage"), None);
        // 10 is a shim; 11 its container's init, 12 a process of it; 20 unrelated.
        let parents = [(10, 1), (11, 10), (12, 11), (20, 1), (21, 20)];
        assert_eq!(with_descendants(vec![10], &parents), vec![10, 11, 12]);
        assert_eq!(with_descendants(vec![], &parents), Vec::<u32>::new());
    }

    #[test]
    fn owner_files_record_members_and_node_dirs() {
        let text = "42 7\npid 100 5\npid bad\ndir /tmp/x/node-1\npid 101 6\n";
        let r = parse_recorded(text);
        assert_eq!(r.pids, vec![(100, 5), (101, 6)]);
        assert_eq!(r.node_dirs, vec![PathBuf::from("/tmp/x/node-1")]);
        assert_eq!(parse_recorded("42 7\n"), Recorded::default());
    }

    /// A node process that forks all the time (as busybox httpd does per connection)
    /// leaves no child behind: what forks between a listing and its kill goes next round.
    #[test]
    fn a_node_process_that_keeps_forking_leaves_nothing_behind() {
        let dir = std::env::temp_dir().join(format!("keelson-forking-node-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // Each child is a subshell (its command line names the directory, as a container's
        // root lies in it), sleeping a little.
        let script = "while :; do (sleep 3; :) & sleep 0.002; done";
        let mut node = std::process::Command::new("sh").args(["-c", script, &dir.display().to_string()]).spawn().expect("sh");
        std::thread::sleep(Duration::from_millis(300));
        assert!(processes_in(&dir).len() > 10, "the node forked");
        let problems = remove_node_leftovers(&dir);
        let survivors = processes_in(&dir);
        let _ = node.wait();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(problems.is_empty(), "{problems:?}");
        assert!(survivors.is_empty(), "processes {survivors:?} survived");
    }

    /// A member of a run whose owner is gone is killed by `cleanup_stale`.
    #[test]
    fn cleanup_stale_kills_recorded_members_of_dead_owners() {
        let mut child = std::process::Command::new("sleep").arg("60").spawn().expect("sleep");
        let pid = child.id();
        std::thread::sleep(Duration::from_millis(50));
        let dir = registry_dir();
        std::fs::create_dir_all(&dir).unwrap();
        // Owner pid 0 with a start time no process has: stale.
        let path = dir.join("kcdead01.owner");
        std::fs::write(&path, format!("0 1\npid {pid} {}\n", cmd::start_time(pid).unwrap())).unwrap();
        let _ = cleanup_stale();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while child.try_wait().unwrap().is_none() {
            assert!(std::time::Instant::now() < deadline, "the orphan survived");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!path.exists(), "the stale owner file is removed");
    }
}
