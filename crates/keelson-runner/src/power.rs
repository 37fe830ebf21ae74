//! Whole-machine operations on a node member: power loss and freezing.
//!
//! A node is more than its `keelson agent` process: its containerd, the shims and every
//! container of its pods run beside it, outside the agent's process tree. Killing the agent
//! alone leaves the pods running, which is an agent crash, not a lost machine. These
//! operations act on everything the node runs (the processes whose command line or root
//! lies in its data directory, as cleanup finds them).

use std::time::{Duration, Instant};

use crate::cleanup;
use crate::cluster::Cluster;
use crate::manifest::MemberKind;
use crate::{cmd, RunnerError};

/// How long a frozen process may take to show as stopped.
const FREEZE_TIMEOUT: Duration = Duration::from_secs(2);

impl Cluster {
    fn check_node(&self, j: usize) -> Result<(), RunnerError> {
        match self.manifest.members.get(j) {
            Some(e) if e.kind == MemberKind::Node => Ok(()),
            Some(e) => Err(RunnerError::Cluster(format!("{} is a server, not a node", e.name))),
            None => Err(RunnerError::Cluster(format!("no member {j} (the cluster has {})", self.procs.len()))),
        }
    }

    /// Node member `j` loses power: its agent, containerd, shims and containers are
    /// SIGKILLed, its mounts (container root filesystems, pod network namespaces, memory
    /// volumes) go, and so does containerd's state directory (what `/run` holds on a real
    /// machine). Its data directory otherwise stays, as a disk does; [`Cluster::start_member`]
    /// boots it again. Returns how many processes were killed besides the agent.
    pub async fn power_off(&mut self, j: usize) -> Result<usize, RunnerError> {
        self.check_node(j)?;
        self.procs[j].kill().await;
        let dir = self.manifest.members[j].data_dir.clone();
        let (killed, problems) =
            tokio::task::spawn_blocking(move || {
                let killed = cleanup::processes_in(&dir).len();
                let mut problems = cleanup::remove_node_leftovers(&dir);
                let survivors = cleanup::processes_in(&dir);
                if !survivors.is_empty() {
                    problems.push(format!("processes {survivors:?} survived"));
                }
                let state = dir.join("containerd").join("state");
                if state.exists() {
                    if let Err(e) = std::fs::remove_dir_all(&state) {
                        problems.push(format!("removing {}: {e}", state.display()));
                    }
                }
                (killed, problems)
            })
            .await
            .map_err(|e| RunnerError::Cluster(format!("power-off task failed: {e}")))?;
        self.save()?;
        if problems.is_empty() {
            Ok(killed)
        } else {
            Err(RunnerError::Cluster(format!("{} did not lose power cleanly: {}", self.name(j), problems.join("; "))))
        }
    }

    /// Freezes node member `j` as a paused virtual machine: the agent and every process of
    /// the node (containerd, shims, containers) get SIGSTOP. Returns how many processes were
    /// stopped besides the agent. [`Cluster::thaw`] undoes it.
    pub async fn freeze(&mut self, j: usize) -> Result<usize, RunnerError> {
        self.check_node(j)?;
        let agent = self.procs[j].pause().await?;
        let others: Vec<u32> =
            cleanup::processes_in(&self.manifest.members[j].data_dir).into_iter().filter(|&p| p != agent).collect();
        for &pid in &others {
            cmd::signal(pid, libc::SIGSTOP);
        }
        let deadline = Instant::now() + FREEZE_TIMEOUT;
        while others.iter().any(|&p| cmd::alive(p) && !matches!(cmd::state(p), Some('T' | 'Z' | 'X'))) {
            if Instant::now() >= deadline {
                return Err(RunnerError::NotReady(format!("{}'s processes did not all stop within {FREEZE_TIMEOUT:?}", self.name(j))));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(others.len())
    }

    /// SIGCONT to every process of node member `j`, its agent last (harmless when not
    /// frozen). Returns the agent's pid, if it runs.
    pub fn thaw(&mut self, j: usize) -> Result<Option<u32>, RunnerError> {
        self.check_node(j)?;
        let agent = self.procs[j].pid();
        for pid in cleanup::processes_in(&self.manifest.members[j].data_dir) {
            if Some(pid) != agent {
                cmd::signal(pid, libc::SIGCONT);
            }
        }
        Ok(self.procs[j].resume())
    }
}
