//! Operations on one member (start, stop, kill, pause, resume, restart, wipe) and the
//! readiness waits.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use keelson_client::api::MemberStatus;
use keelson_client::StoreClient;

use crate::cluster::Cluster;
use crate::manifest::MemberKind;
use crate::readiness::{self, STATUS_TIMEOUT};
use crate::RunnerError;

impl Cluster {
    fn check(&self, j: usize) -> Result<(), RunnerError> {
        if j < self.procs.len() {
            Ok(())
        } else {
            Err(RunnerError::Cluster(format!("no member {j} (the cluster has {})", self.procs.len())))
        }
    }

    /// The command line of member `j` (after the binary), with `bootstrap` flags for a
    /// server (`--cluster-init`, `--join A` or none to resume).
    fn args(&self, j: usize, bootstrap: &[String]) -> Vec<String> {
        let e = &self.manifest.members[j];
        match e.kind {
            MemberKind::Server => {
                let mut a = vec!["server".into(), "--name".into(), e.name.clone(), "--data-dir".into(), e.data_dir.display().to_string()];
                a.extend(["--listen".into(), e.raft_addr.clone(), "--api-listen".into(), e.api_addr.clone()]);
                a.extend(["--metrics-addr".into(), e.metrics_addr.clone(), "--pki-dir".into(), self.pki_dir().display().to_string()]);
                a.extend(bootstrap.iter().cloned());
                // The node IPAM controller hands out blocks of the run's own pod networks
                // (to nodes joined from elsewhere; the runner's nodes bring theirs),
                // unless the caller names its own.
                let own = self.spec.server_args.iter().any(|a| a.starts_with("--cluster-cidr"));
                if let Some(pods) = self.manifest.pod_net.filter(|_| !own) {
                    let v6 = self.manifest.pod_net6.map(|p| format!(",{p}/48")).unwrap_or_default();
                    a.extend(["--cluster-cidr".into(), format!("{pods}/16{v6}")]);
                }
                a.extend(self.spec.server_args.iter().cloned());
                a
            }
            MemberKind::Node => {
                let mut a = vec!["agent".into()];
                for api in self.api_endpoints() {
                    a.extend(["--server".into(), format!("https://{api}")]);
                }
                a.extend(["--data-dir".into(), e.data_dir.display().to_string(), "--name".into(), e.name.clone()]);
                let node_ip = if e.addr6.is_empty() { e.addr.clone() } else { format!("{},{}", e.addr, e.addr6) };
                a.extend(["--node-ip".into(), node_ip, "--pod-cidr".into(), e.pod_cidr.clone()]);
                // Test and local clusters share their host's disk with everything else on it:
                // like kind, they do not report disk pressure.
                a.extend(["--heartbeat".into(), "2s".into(), "--stop-pods-on-exit".into(), "--eviction-hard".into(), "nodefs.available<0%".into()]);
                a.extend(self.spec.node_args.iter().cloned());
                a
            }
        }
    }

    pub(crate) fn spawn(&mut self, j: usize, bootstrap: &[String]) -> Result<u32, RunnerError> {
        self.check(j)?;
        let e = self.manifest.members[j].clone();
        std::fs::create_dir_all(&e.data_dir).map_err(RunnerError::io(e.data_dir.display().to_string()))?;
        let args = self.args(j, bootstrap);
        let (env, death) = match e.kind {
            MemberKind::Server => (Vec::new(), libc::SIGKILL),
            // The token goes through the environment, not the command line.
            MemberKind::Node => (
                self.node_token.iter().map(|t| ("KEELSON_TOKEN".to_string(), t.clone())).collect(),
                libc::SIGTERM,
            ),
        };
        let binary = self.spec.binary.clone();
        let pid = self.procs[j].spawn(&binary, &args, &env, death)?;
        self.save()?;
        Ok(pid)
    }

    /// Starts member `j` from its data directory (a server whose data directory was
    /// wiped `--join`s a live peer). Returns its pid.
    pub fn start_member(&mut self, j: usize) -> Result<u32, RunnerError> {
        self.check(j)?;
        if !self.needs_join[j] {
            return self.spawn(j, &[]);
        }
        let peer = (0..self.server_count()).find(|&i| i != j && self.is_live(i)).map(|i| self.manifest.members[i].raft_addr.clone());
        let peer = peer.ok_or_else(|| RunnerError::NotReady(format!("{} must re-join but no other server runs", self.name(j))))?;
        self.spawn(j, &["--join".to_string(), peer])
    }

    /// Member `j`'s name.
    pub fn name(&self, j: usize) -> &str {
        self.manifest.members.get(j).map(|e| e.name.as_str()).unwrap_or("?")
    }

    /// The process was started and has not exited.
    pub fn is_running(&self, j: usize) -> bool {
        self.procs.get(j).is_some_and(|p| p.running())
    }

    /// Running and not paused: expected to answer.
    pub fn is_live(&self, j: usize) -> bool {
        self.procs.get(j).is_some_and(|p| p.live())
    }

    pub fn is_paused(&self, j: usize) -> bool {
        self.procs.get(j).is_some_and(|p| p.paused && p.running())
    }

    /// Process id of every member (`None` when not running).
    pub fn pids(&self) -> Vec<Option<u32>> {
        self.procs.iter().map(|p| p.pid().filter(|p| crate::cmd::alive(*p))).collect()
    }

    /// SIGKILL and reap member `j`. Returns the pid it had, if it ran.
    pub async fn kill(&mut self, j: usize) -> Result<Option<u32>, RunnerError> {
        self.check(j)?;
        let pid = self.procs[j].kill().await;
        self.save()?;
        Ok(pid)
    }

    /// SIGTERM member `j` (SIGKILL after `grace`) and reap it.
    pub async fn stop_member(&mut self, j: usize, grace: Duration) -> Result<Option<u32>, RunnerError> {
        self.check(j)?;
        let pid = self.procs[j].stop(grace).await;
        self.save()?;
        Ok(pid)
    }

    /// SIGSTOP member `j`; returns once it is stopped.
    pub async fn pause(&mut self, j: usize) -> Result<u32, RunnerError> {
        self.check(j)?;
        self.procs[j].pause().await
    }

    /// SIGCONT member `j` (harmless when not paused); the pid, if it runs.
    pub fn resume(&mut self, j: usize) -> Option<u32> {
        self.procs.get_mut(j)?.resume()
    }

    /// Sends `signal` to member `j`.
    pub fn signal(&self, j: usize, signal: i32) -> Result<(), RunnerError> {
        let pid = self.procs.get(j).and_then(|p| p.pid()).ok_or_else(|| RunnerError::Cluster(format!("member {j} is not running")))?;
        crate::cmd::signal(pid, signal);
        Ok(())
    }

    /// (Re)starts member `j`: SIGKILL first if it runs, then start it again.
    pub async fn restart(&mut self, j: usize) -> Result<u32, RunnerError> {
        self.kill(j).await?;
        self.start_member(j)
    }

    /// Kills member `j` and deletes its data directory; its next start joins afresh.
    pub async fn wipe(&mut self, j: usize) -> Result<(), RunnerError> {
        self.kill(j).await?;
        let dir = self.manifest.members[j].data_dir.clone();
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(RunnerError::io(format!("wiping {}", dir.display())))?;
        }
        self.needs_join[j] = true;
        self.ids[j] = None;
        Ok(())
    }

    /// The Raft member id of server `j`, as last seen.
    pub fn member_id(&self, j: usize) -> Option<u64> {
        self.ids.get(j).copied().flatten()
    }

    /// Records that server `j` is a voter again as member `id` (after [`Cluster::wipe`]).
    pub fn set_member_id(&mut self, j: usize, id: u64) {
        if j < self.ids.len() {
            self.ids[j] = Some(id);
            self.needs_join[j] = false;
        }
    }

    /// `(index, store address)` of every server expected to answer.
    pub(crate) fn live_servers(&self) -> Vec<(usize, String)> {
        (0..self.server_count()).filter(|&i| self.is_live(i)).map(|i| (i, self.manifest.members[i].raft_addr.clone())).collect()
    }

    /// Server `j`'s own status, if it answers within a second.
    pub async fn status(&self, j: usize) -> Option<MemberStatus> {
        readiness::status(&self.manifest.members.get(j)?.raft_addr, &self.tls).await
    }

    /// The server that leads: among running, unpaused servers claiming leadership, the one
    /// with the highest term. `None` when none claims it.
    pub async fn leader(&self) -> Option<usize> {
        readiness::statuses(self.live_servers(), self.tls.clone())
            .await
            .into_iter()
            .filter_map(|(i, s)| s.filter(|s| s.role == "leader").map(|s| (s.term, i)))
            .max()
            .map(|(_, i)| i)
    }

    /// Waits until some server reports a leader and `n` voters.
    pub(crate) async fn wait_voters(&self, n: usize, deadline: Instant) -> Result<(), RunnerError> {
        let client = self.client();
        loop {
            for _ in 0..self.server_count() {
                if let Ok(Ok(list)) = tokio::time::timeout(STATUS_TIMEOUT, client.member_list()).await {
                    if list.leader.is_some() && list.members.iter().filter(|m| m.voter).count() >= n {
                        return Ok(());
                    }
                }
                client.rotate();
            }
            if Instant::now() >= deadline {
                return Err(RunnerError::NotReady(format!(
                    "the cluster did not reach {n} voters with a leader in time; the logs end with:{}",
                    self.log_tails(8)
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The last `lines` lines of every member's log, one block per member.
    pub fn log_tails(&self, lines: usize) -> String {
        let mut out = String::new();
        for e in &self.manifest.members {
            let text = std::fs::read_to_string(&e.log).unwrap_or_else(|err| format!("(unreadable: {err})"));
            let all: Vec<&str> = text.lines().collect();
            out.push_str(&format!("\n--- {} ({}) ---", e.name, e.log.display()));
            for l in &all[all.len().saturating_sub(lines)..] {
                out.push_str("\n  ");
                out.push_str(l);
            }
        }
        out
    }

    /// Waits (≤ `timeout`) until every running, unpaused server answers and all name the
    /// same leader, which is one of them and says it leads.
    pub async fn wait_healthy(&self, timeout: Duration) -> Result<(), RunnerError> {
        let deadline = Instant::now() + timeout;
        loop {
            let sts = readiness::statuses(self.live_servers(), self.tls.clone()).await;
            let why = if sts.is_empty() {
                "no server is running".to_string()
            } else if let Some((i, _)) = sts.iter().find(|(_, s)| s.is_none()) {
                format!("{} does not answer", self.name(*i))
            } else {
                let leaders: BTreeSet<Option<u64>> = sts.iter().map(|(_, s)| s.as_ref().and_then(|s| s.leader)).collect();
                let agreed = leaders.iter().next().copied().flatten().filter(|_| leaders.len() == 1);
                match agreed {
                    Some(l) if sts.iter().any(|(_, s)| s.as_ref().is_some_and(|s| s.id == l && s.role == "leader")) => {
                        return Ok(())
                    }
                    _ => format!("no agreed live leader (leaders seen: {leaders:x?})"),
                }
            };
            if Instant::now() >= deadline {
                return Err(RunnerError::NotReady(format!("cluster not healthy within {timeout:?}: {why}")));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until every running server accepts connections on its API address.
    pub async fn wait_api(&self, timeout: Duration) -> Result<(), RunnerError> {
        let deadline = Instant::now() + timeout;
        for (i, _) in self.live_servers() {
            let addr = self.manifest.members[i].api_addr.clone();
            while tokio::net::TcpStream::connect(&addr).await.is_err() {
                if Instant::now() >= deadline {
                    return Err(RunnerError::NotReady(format!("{} does not serve the API at {addr} within {timeout:?}", self.name(i))));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(())
    }

    /// Waits until the Node of every running node member is Ready.
    pub async fn wait_nodes_ready(&self, timeout: Duration) -> Result<(), RunnerError> {
        let deadline = Instant::now() + timeout;
        let client: StoreClient = self.client();
        for j in self.server_count()..self.procs.len() {
            let name = self.name(j).to_string();
            while !readiness::node_ready(&client, &name).await {
                if !self.is_running(j) {
                    return Err(RunnerError::NotReady(format!("{name} exited; its log ends with:{}", self.log_tails(12))));
                }
                if Instant::now() >= deadline {
                    return Err(RunnerError::NotReady(format!("node {name} not Ready within {timeout:?}; the logs end with:{}", self.log_tails(12))));
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
        Ok(())
    }
}
