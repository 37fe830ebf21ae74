//! `keelson-runner`: the one code that starts, supervises and cleans up `keelson`
//! processes. `keelson up`, the benches, the multi-process tests and the chaos harness all
//! run their clusters through it.
//!
//! [`Cluster::start`] runs `spec.servers` servers (the first with `--cluster-init`, the
//! others one by one with `--join`) and returns once every one is a voter, they agree on a
//! leader and serve the Kubernetes API; then `spec.nodes` nodes (`keelson agent` joined
//! with a node token, each starting its own containerd) and waits until their Nodes are
//! Ready. Any member can then be stopped, killed, paused, resumed or restarted; a node
//! can also lose power ([`Cluster::power_off`]: its containers die with it) or be frozen
//! whole ([`Cluster::freeze`], [`Cluster::thaw`]).
//! A member that exits by itself is started again by [`Cluster::supervise`] after a
//! doubling pause ([`RestartPolicy`]), as systemd would restart it; `keelson up` does so.
//! `DIR/cluster.json` ([`Manifest`]) describes every member and is rewritten whenever one
//! starts or stops; `DIR/kubeconfig` has one context per server. Starting on a directory
//! that holds a cluster resumes it.
//!
//! # Topologies
//!
//! * [`Isolation::Netns`] (root): every member runs in its own network namespace
//!   `kc<id>-n<j>` with one veth into a bridge that lives in the run's namespace
//!   `kc<id>-br`; the host reaches the bridge through the veth `kc<id>h`, which has the
//!   address `.1` of a /24 no route on the machine overlaps (see [`topology`]), and routes
//!   each node's podCIDR via that node, so node and pod addresses answer from the shell
//!   that started the cluster. Servers listen on `.(10+j):2380` (store), `:6443` (API)
//!   and `:2381` (metrics).
//! * [`Isolation::Loopback`]: servers on 127.0.0.1 ports; no nodes (a real node needs its
//!   own namespace).
//!
//! # Cleanup
//!
//! [`Cluster::stop`] (async) or `Drop` (synchronous, best effort) stop every member and
//! delete every namespace, veth and route the run created; nodes' containerd, shims and
//! containers go with them. Members also get a signal if the runner's process dies
//! (`PR_SET_PDEATHSIG`: SIGKILL for servers, SIGTERM for agents so they stop their pods).
//! Leftovers of a run whose owner process is gone are removed by [`cleanup_stale`], which
//! [`Cluster::start`] calls first. A program that wants Ctrl-C/SIGTERM to clean up calls
//! [`cleanup_on_signal`] once.
//!
//! Architecture invariant: the runner knows the `keelson` command line, the store API and
//! the stored Node object's Ready condition, and nothing else of Kubernetes; nothing in
//! `keelson server` or `keelson agent` depends on it.

use std::path::PathBuf;

mod cleanup;
mod cluster;
pub mod cmd;
mod error;
mod manifest;
mod members;
mod netns;
mod ports;
mod power;
mod process;
mod readiness;
mod supervise;
pub mod topology;

pub use cleanup::{cleanup_on_signal, cleanup_stale, CleanupHandle};
pub use cluster::Cluster;
pub use error::RunnerError;
pub use manifest::{Manifest, MemberEntry, MemberKind};
pub use ports::free_loopback_port;
pub use supervise::{RestartPolicy, SuperviseEvent, Supervisor};

/// How members are separated from each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Isolation {
    /// [`Isolation::Netns`] when running as root with working `ip netns`, `nsenter` and
    /// `nft`, else [`Isolation::Loopback`]; the choice is announced on stderr.
    Auto,
    /// One network namespace per member on a bridge of the run's own (needs root).
    Netns,
    /// Loopback ports; no nodes, no network faults.
    Loopback,
}

/// What cluster to run.
#[derive(Clone, Debug)]
pub struct ClusterSpec {
    /// Number of servers (1 to 200).
    pub servers: usize,
    /// Number of nodes (`keelson agent`s; needs [`Isolation::Netns`]).
    pub nodes: usize,
    /// The `keelson` binary.
    pub binary: PathBuf,
    /// Directory for data directories, logs, `cluster.json`, `kubeconfig` and `pki/`.
    pub dir: PathBuf,
    pub isolation: Isolation,
    /// Extra arguments for every `keelson server`, e.g. `--snapshot-every 300`.
    pub server_args: Vec<String>,
    /// Extra arguments for every `keelson agent`.
    pub node_args: Vec<String>,
    /// Loopback only: server i (1-based) listens on `base_port + i` (store),
    /// `base_port + 100 + i` (metrics) and `base_port + 200 + i` (API); 0 picks free ports.
    pub base_port: u16,
    /// Give members and pods IPv6 addresses too (namespace topology): every node has an
    /// IPv4 and an IPv6 InternalIP and podCIDR.
    pub dual_stack: bool,
}

impl ClusterSpec {
    /// `servers` servers on loopback with free ports, no nodes, no extra arguments.
    pub fn loopback(servers: usize, binary: impl Into<PathBuf>, dir: impl Into<PathBuf>) -> Self {
        ClusterSpec {
            servers,
            nodes: 0,
            binary: binary.into(),
            dir: dir.into(),
            isolation: Isolation::Loopback,
            server_args: Vec::new(),
            node_args: Vec::new(),
            base_port: 0,
            dual_stack: false,
        }
    }
}
