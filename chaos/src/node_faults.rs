//! Node faults: power loss, freezing and partitions of `keelson agent` nodes.

use std::net::Ipv4Addr;

use keelson_runner::Isolation;
use rand::seq::SliceRandom;

use crate::node_partition::{render_node_ruleset, NodeAddrs, NodeCut};
use crate::{netfaults, ChaosError, Fault, Harness, NodeTarget};

impl Harness {
    /// Why node fault `f` cannot be applied here, or `None` (also for faults that are not
    /// node faults).
    pub(crate) fn node_fault_unsupported(&self, f: &Fault) -> Option<String> {
        let nodes = self.cluster.node_count();
        let needs = match f {
            Fault::NodeSplitFromNodes(_) | Fault::NodeDrain(_) => 2,
            Fault::NodeKill(_)
            | Fault::NodeRestart(_)
            | Fault::NodePause(_)
            | Fault::NodeResume(_)
            | Fault::NodeIsolate(_)
            | Fault::NodeUncordon(_) => 1,
            _ => return None,
        };
        if self.cluster.isolation() != Isolation::Netns {
            return Some(format!("{f:?} needs nodes, which need network namespaces (root)"));
        }
        (nodes < needs).then(|| format!("{f:?} needs at least {needs} node(s); the cluster has {nodes}"))
    }

    /// The member index of node `k`.
    fn member_of(&self, k: usize) -> Result<usize, ChaosError> {
        let nodes = self.cluster.node_count();
        if k < nodes {
            Ok(self.cluster.server_count() + k)
        } else {
            Err(ChaosError::cluster(format!("no node-{} (the cluster has {nodes} nodes)", k + 1)))
        }
    }

    /// Resolves `t` to a node index; `Random` picks among nodes whose member `eligible`
    /// accepts.
    fn resolve_node(&mut self, t: NodeTarget, eligible: fn(&keelson_runner::Cluster, usize) -> bool) -> Result<usize, ChaosError> {
        match t {
            NodeTarget::Node(k) => self.member_of(k).map(|_| k),
            NodeTarget::Random => {
                let s = self.cluster.server_count();
                let candidates: Vec<usize> = (0..self.cluster.node_count())
                    .filter(|&k| eligible(&self.cluster, s + k) && !self.node_cuts.contains_key(&k) && !self.drained.contains(&k))
                    .collect();
                candidates.choose(&mut self.rng).copied().ok_or_else(|| ChaosError::not_ready("no eligible node for a random target"))
            }
        }
    }

    /// Applies a node fault; the description and the node index it hit.
    pub(crate) async fn apply_node_fault(&mut self, f: &Fault) -> Result<(String, Option<usize>), ChaosError> {
        match *f {
            Fault::NodeKill(t) => {
                let k = self.resolve_node(t, keelson_runner::Cluster::is_live)?;
                let j = self.member_of(k)?;
                let pid = self.cluster.pids()[j];
                let others = self.cluster.power_off(j).await?;
                let pid = pid.map(|p| format!("agent pid {p}")).unwrap_or_else(|| "agent not running".into());
                Ok((format!("power off node-{} ({pid}, {others} more processes killed)", k + 1), Some(k)))
            }
            Fault::NodeRestart(k) => {
                let j = self.member_of(k)?;
                if self.cluster.is_running(j) {
                    self.cluster.power_off(j).await?;
                }
                let pid = self.cluster.start_member(j)?;
                Ok((format!("restart node-{} (pid {pid})", k + 1), Some(k)))
            }
            Fault::NodePause(t) => {
                let k = self.resolve_node(t, keelson_runner::Cluster::is_live)?;
                let j = self.member_of(k)?;
                let frozen = self.cluster.freeze(j).await?;
                Ok((format!("freeze node-{} (the agent and {frozen} more processes)", k + 1), Some(k)))
            }
            Fault::NodeResume(k) => {
                let j = self.member_of(k)?;
                let was = self.cluster.is_paused(j);
                let pid = self.cluster.thaw(j)?.ok_or_else(|| ChaosError::cluster(format!("node-{} is not running", k + 1)))?;
                Ok((format!("resume node-{} (pid {pid}{})", k + 1, if was { "" } else { ", was not frozen" }), Some(k)))
            }
            Fault::NodeIsolate(t) | Fault::NodeSplitFromNodes(t) => {
                let from_servers = matches!(f, Fault::NodeIsolate(_));
                let k = self.resolve_node(t, |_, _| true)?;
                let cut = self.node_cuts.entry(k).or_default();
                if from_servers {
                    cut.servers = true;
                } else {
                    cut.nodes = true;
                }
                self.load_node_rules(k).await?;
                let what = if from_servers { "the servers" } else { "the other nodes" };
                Ok((format!("isolate node-{} from {what}", k + 1), Some(k)))
            }
            Fault::NodeDrain(t) => {
                let k = self.resolve_node(t, keelson_runner::Cluster::is_live)?;
                self.drained.insert(k);
                let out = self.kubectl(&["drain", &format!("node-{}", k + 1), "--ignore-daemonsets", "--delete-emptydir-data", "--force", "--timeout=60s"]).await?;
                let evicted = out.lines().filter(|l| l.contains("evicted")).count();
                Ok((format!("drain node-{} ({evicted} pods evicted)", k + 1), Some(k)))
            }
            Fault::NodeUncordon(k) => {
                self.member_of(k)?;
                self.kubectl(&["uncordon", &format!("node-{}", k + 1)]).await?;
                self.drained.remove(&k);
                Ok((format!("uncordon node-{}", k + 1), Some(k)))
            }
            _ => Err(ChaosError::cluster(format!("{f:?} is not a node fault"))),
        }
    }

    /// Runs `kubectl` with the cluster's admin kubeconfig against each live server in
    /// turn (≤ 90 s each) until one run succeeds; its output, or the last failure.
    async fn kubectl(&self, args: &[&str]) -> Result<String, ChaosError> {
        let kubeconfig = self.cluster.kubeconfig_path().display().to_string();
        let servers: Vec<String> = (0..self.cluster.server_count()).filter(|&i| self.cluster.is_live(i)).map(|i| self.cluster.name(i).to_string()).collect();
        let mut last = ChaosError::not_ready("no live server to run kubectl against");
        for context in servers {
            let mut argv: Vec<String> = ["kubectl", "--kubeconfig", &kubeconfig, "--context", &context].map(String::from).to_vec();
            argv.extend(args.iter().map(|a| a.to_string()));
            match keelson_runner::cmd::run_async(argv, None, std::time::Duration::from_secs(90)).await {
                Ok(out) => return Ok(out),
                Err(e) => last = e.into(),
            }
        }
        Err(last)
    }

    /// Loads node `k`'s ruleset for its current cut (none: the table is deleted).
    async fn load_node_rules(&self, k: usize) -> Result<(), ChaosError> {
        let m = self.cluster.manifest();
        let addr = |s: &str, name: &str| s.parse::<Ipv4Addr>().map_err(|_| ChaosError::cluster(format!("{name} has no IPv4 address")));
        let servers = m.servers().map(|s| addr(&s.addr, &s.name)).collect::<Result<Vec<_>, _>>()?;
        let nodes = m
            .nodes()
            .map(|n| Ok(NodeAddrs { addr: addr(&n.addr, &n.name)?, pod_cidr: n.pod_cidr.clone() }))
            .collect::<Result<Vec<_>, ChaosError>>()?;
        let node = m.nodes().nth(k).ok_or_else(|| ChaosError::cluster(format!("no node-{}", k + 1)))?;
        let ns = node.netns.as_ref().ok_or_else(|| ChaosError::Unsupported("no network namespaces in Loopback mode".into()))?;
        let cut = self.node_cuts.get(&k).copied().unwrap_or(NodeCut::default());
        netfaults::load_ruleset(ns, &render_node_ruleset(k, cut, &servers, &nodes)).await
    }

    /// Removes every node cut.
    pub(crate) async fn clear_node_cuts(&mut self) -> Result<(), ChaosError> {
        let cut: Vec<usize> = std::mem::take(&mut self.node_cuts).into_keys().collect();
        for k in cut {
            self.load_node_rules(k).await?;
        }
        Ok(())
    }

    /// Thaws frozen nodes and boots powered-off ones; describes what it did (`""` when
    /// nothing).
    pub(crate) async fn heal_nodes(&mut self) -> Result<String, ChaosError> {
        let s = self.cluster.server_count();
        let (mut thawed, mut booted) = (Vec::new(), Vec::new());
        for k in 0..self.cluster.node_count() {
            let j = s + k;
            if self.cluster.is_paused(j) {
                self.cluster.thaw(j)?;
                thawed.push(format!("node-{}", k + 1));
            } else if !self.cluster.is_running(j) {
                self.cluster.power_off(j).await?;
                self.cluster.start_member(j)?;
                booted.push(format!("node-{}", k + 1));
            }
        }
        let mut uncordoned = Vec::new();
        for k in std::mem::take(&mut self.drained) {
            self.kubectl(&["uncordon", &format!("node-{}", k + 1)]).await?;
            uncordoned.push(format!("node-{}", k + 1));
        }
        if thawed.is_empty() && booted.is_empty() && uncordoned.is_empty() {
            return Ok(String::new());
        }
        Ok(format!("; nodes resumed [{}], restarted [{}], uncordoned [{}]", thawed.join(", "), booted.join(", "), uncordoned.join(", ")))
    }
}
