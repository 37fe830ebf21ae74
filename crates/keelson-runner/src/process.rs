//! One member's process: spawn (inside its namespace when there is one), kill, stop,
//! pause, resume.

use std::fs::OpenOptions;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::cmd;
use crate::RunnerError;

/// One supervised process: a `keelson server` or a `keelson agent`, in its own network
/// namespace when the topology has them.
#[derive(Debug)]
pub(crate) struct Process {
    /// The member's name (for messages).
    pub name: String,
    /// Network namespace to run in.
    pub ns: Option<String>,
    /// Its stdout and stderr (appended).
    pub log: PathBuf,
    pub child: Option<Child>,
    pub paused: bool,
}

impl Process {
    /// The process was started and has not exited.
    pub fn running(&self) -> bool {
        self.pid().is_some_and(cmd::alive)
    }

    /// Running and not paused: expected to answer.
    pub fn live(&self) -> bool {
        self.running() && !self.paused
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Starts `binary args…` (inside the namespace, through `nsenter`, which execs in
    /// place: the pid is the program's); output goes to the log (appended). The process
    /// gets `death_signal` when the runner's process dies.
    pub fn spawn(&mut self, binary: &Path, args: &[String], env: &[(String, String)], death_signal: i32) -> Result<u32, RunnerError> {
        if let Some(mut old) = self.child.take() {
            // Reap an exited predecessor.
            let _ = old.kill();
            let _ = old.wait();
        }
        if let Some(dir) = self.log.parent() {
            std::fs::create_dir_all(dir).map_err(RunnerError::io(dir.display().to_string()))?;
        }
        let open = || {
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.log)
                .map_err(RunnerError::io(self.log.display().to_string()))
        };
        let (out, err) = (open()?, open()?);
        let mut c = match &self.ns {
            Some(ns) => {
                // `nsenter` (not `ip netns exec`, which remounts /sys and hides the cgroup
                // mounts containerd needs) execs the binary in place.
                let mut c = Command::new("nsenter");
                c.arg(format!("--net=/run/netns/{ns}")).arg(binary);
                c
            }
            None => Command::new(binary),
        };
        c.args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            // Its own process group: a terminal's Ctrl-C reaches the runner, which decides.
            .process_group(0);
        // SAFETY: prctl is async-signal-safe; it only asks the kernel to signal the child
        // when its parent dies, so no member outlives the runner's process.
        unsafe {
            c.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, death_signal);
                Ok(())
            });
        }
        let child = spawn_from_spawner_thread(c).map_err(RunnerError::io(format!(
            "starting {} ({})",
            self.name,
            binary.display()
        )))?;
        let pid = child.id();
        self.child = Some(child);
        self.paused = false;
        Ok(pid)
    }

    /// SIGKILL and reap (≤ 10 s). Returns the pid it had, if it ran.
    pub async fn kill(&mut self) -> Option<u32> {
        let mut child = self.child.take()?;
        let pid = child.id();
        let _ = child.kill();
        reap(&mut child, Duration::from_secs(10)).await;
        self.paused = false;
        Some(pid)
    }

    /// SIGTERM (after SIGCONT if paused), SIGKILL if still there after `grace`; reaps.
    pub async fn stop(&mut self, grace: Duration) -> Option<u32> {
        let mut child = self.child.take()?;
        let pid = child.id();
        if self.paused {
            cmd::signal(pid, libc::SIGCONT);
        }
        cmd::signal(pid, libc::SIGTERM);
        if !reap(&mut child, grace).await {
            let _ = child.kill();
            reap(&mut child, Duration::from_secs(10)).await;
        }
        self.paused = false;
        Some(pid)
    }

    /// SIGKILL and reap synchronously (≤ 5 s), for `Drop`.
    pub fn kill_sync(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let deadline = Instant::now() + Duration::from_secs(5);
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }

    /// SIGSTOP; returns once the process is stopped (≤ 2 s; the signal is asynchronous).
    pub async fn pause(&mut self) -> Result<u32, RunnerError> {
        let pid = self
            .pid()
            .filter(|p| cmd::alive(*p))
            .ok_or_else(|| RunnerError::Cluster(format!("{} is not running", self.name)))?;
        cmd::signal(pid, libc::SIGSTOP);
        self.paused = true;
        let deadline = Instant::now() + Duration::from_secs(2);
        while cmd::state(pid) != Some('T') {
            if Instant::now() >= deadline {
                return Err(RunnerError::NotReady(format!(
                    "{} (pid {pid}) did not stop within 2 s of SIGSTOP",
                    self.name
                )));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(pid)
    }

    /// SIGCONT (harmless when not paused).
    pub fn resume(&mut self) -> Option<u32> {
        let pid = self.pid()?;
        cmd::signal(pid, libc::SIGCONT);
        self.paused = false;
        Some(pid)
    }
}

type SpawnRequest = (Command, std::sync::mpsc::Sender<std::io::Result<Child>>);

/// Spawns `c` from one thread that lives as long as the process. `PR_SET_PDEATHSIG`
/// fires when the *thread* that forked the child exits, and async runtimes retire threads
/// (Tokio's blocking pool, `block_in_place`); forking from a retiring thread would kill
/// live servers.
fn spawn_from_spawner_thread(c: Command) -> std::io::Result<Child> {
    use std::sync::mpsc::{channel, Sender};
    use std::sync::{Mutex, OnceLock};
    static SPAWNER: OnceLock<Mutex<Sender<SpawnRequest>>> = OnceLock::new();
    let tx = SPAWNER.get_or_init(|| {
        let (tx, rx) = channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("keelson-runner-spawner".into())
            .spawn(move || {
                for (mut c, reply) in rx {
                    let _ = reply.send(c.spawn());
                }
            })
            .expect("spawning the keelson-chaos spawner thread");
        Mutex::new(tx)
    });
    let (reply_tx, reply_rx) = channel();
    let sent = tx.lock().unwrap_or_else(|p| p.into_inner()).send((c, reply_tx));
    sent.map_err(|_| std::io::Error::other("the spawner thread is gone"))?;
    reply_rx.recv().map_err(|_| std::io::Error::other("the spawner thread is gone"))?
}

/// Waits (≤ `timeout`) for `child` to exit; true when it did.
async fn reap(child: &mut Child, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(_)) | Err(_) => return true,
            Ok(None) if Instant::now() >= deadline => return false,
            Ok(None) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}
