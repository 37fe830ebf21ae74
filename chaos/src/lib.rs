//! `keelson-chaos`: the nemesis over a cluster of real `keelson server` processes that
//! `keelson-runner` runs.
//!
//! [`Harness::start`] has the runner start `spec.servers` servers (and `spec.nodes` nodes:
//! `keelson agent` with its containerd, each in a namespace of its own) and returns once
//! every server is a voter, they agree on a leader and every node is Ready.
//! [`Harness::apply`] injects one [`Fault`] (kill, pause, partition, one-way loss, latency,
//! rolling restart, remove-and-re-add of servers; power loss, freeze and partitions of
//! nodes) or heals, logs it with timestamps to stderr and `DIR/nemesis.log`, and records a
//! [`NemesisEvent`]. [`run_nemesis`] runs a seeded fault/heal schedule until cancelled.
//!
//! What is the harness's own: the faults and heals, partitions as nftables tables
//! (`inet keelson_chaos`) inside the servers' namespaces that drop traffic to and from
//! cut-off peers only (never the host address, so clients always reach every server),
//! netem latency, the schedule and the event log. Processes, namespaces, readiness and
//! cleanup are the runner's ([`keelson_runner::Cluster`], reached through
//! [`Harness::cluster`]); on loopback, network faults return
//! [`ChaosError::Unsupported`].

use std::path::PathBuf;
use std::time::Duration;

mod error;
mod harness;
mod nemesis;
mod netfaults;
mod node_faults;
pub mod node_partition;
pub mod partition;

pub use error::ChaosError;
pub use harness::Harness;
pub use keelson_runner::{cleanup_on_signal, cleanup_stale, CleanupHandle, Isolation};
pub use nemesis::{plan_fault, run_nemesis, run_nemesis_retargeted, HealStep, Plan};

/// What cluster to run.
#[derive(Clone, Debug)]
pub struct HarnessSpec {
    /// Number of servers (1 or more; partitions need 2 or more, split/bridge 3 or more).
    pub servers: usize,
    /// Number of nodes (each a `keelson agent` with its containerd; needs network
    /// namespaces, so root).
    pub nodes: usize,
    /// Extra arguments for every `keelson agent`.
    pub node_args: Vec<String>,
    /// The `keelson` binary.
    pub binary: PathBuf,
    /// Directory for data directories, server logs and `nemesis.log` (created).
    pub dir: PathBuf,
    pub isolation: Isolation,
    /// Extra arguments for every `keelson server`, e.g. `--snapshot-every 300`.
    pub server_args: Vec<String>,
    /// Seeds the harness's choices (random targets, splits, bridge nodes).
    pub seed: u64,
}

/// Which server a fault hits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// Server i (0-based, in `endpoints()` order).
    Node(usize),
    /// The current leader (the answering server claiming leadership with the highest
    /// term); the fault fails with a not-ready [`ChaosError::Runner`] when there is none.
    Leader,
    /// A server chosen with the harness's seeded RNG among those the fault can hit.
    Random,
    /// The server a workload names as holding what it watches (a component's Lease). The
    /// harness cannot know it: a workload's nemesis retargets it to `Node(i)`
    /// ([`run_nemesis_retargeted`]); left unresolved the fault fails, not ready.
    Holder,
}

/// Which node a node fault hits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NodeTarget {
    /// Node k (0-based among the nodes, `node-{k+1}`).
    Node(usize),
    /// A node chosen with the harness's seeded RNG among those the fault can hit.
    Random,
}

/// One fault or heal.
///
/// Network faults accumulate (a second partition adds its cuts to the first) until
/// [`Fault::HealNetwork`] or [`Fault::HealAll`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Fault {
    /// SIGKILL; the node stays down until `Restart` or `HealAll`.
    Kill(Target),
    /// Starts the node again from its data directory (killing it first if it runs).
    Restart(usize),
    /// SIGSTOP.
    Pause(Target),
    /// SIGCONT.
    Resume(usize),
    /// The node is cut off from all other servers (clients still reach everyone).
    IsolateNode(Target),
    /// A random majority/minority split between servers.
    SplitHalves,
    /// Two halves that only one node (the bridge) connects.
    Bridge,
    /// Packets from `from` to `to` are dropped; the other way works.
    OneWayLoss { from: usize, to: usize },
    /// netem delay on every server's interface (Unsupported without tc/netem).
    Latency { millis: u32 },
    /// Removes all partitions, loss and latency.
    HealNetwork,
    /// HealNetwork + resume paused + restart killed.
    HealAll,
    /// Restarts every server one after the other, waiting for a healthy cluster in between.
    RollingRestart,
    /// Removes the member via the cluster API, wipes its data directory, starts it again
    /// with `--join` and waits until it is a voter again.
    RemoveAndReadd(Target),
    /// The node loses power: its agent, containerd and every container die, its mounts
    /// and runtime state go (`Cluster::power_off`); it stays down until `NodeRestart` or
    /// `HealAll`.
    NodeKill(NodeTarget),
    /// Boots node k again from its data directory (as a rebooted machine).
    NodeRestart(usize),
    /// Freezes the node whole: agent, containerd and containers (SIGSTOP).
    NodePause(NodeTarget),
    /// Thaws node k.
    NodeResume(usize),
    /// The node is cut off from every server: its pods keep running, the control plane
    /// stops hearing it. Healed by `HealNetwork`.
    NodeIsolate(NodeTarget),
    /// The node is cut off from the other nodes and their pods only. Healed by
    /// `HealNetwork`.
    NodeSplitFromNodes(NodeTarget),
    /// `kubectl drain` of the node (cordoned, its pods evicted through the eviction API,
    /// DaemonSet pods left); stays cordoned until `NodeUncordon` or `HealAll`.
    NodeDrain(NodeTarget),
    /// `kubectl uncordon` of node k.
    NodeUncordon(usize),
}

/// One fault or heal as it happened.
///
/// `what` starts with `heal`, `restart` or `resume` exactly for events that undo faults.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NemesisEvent {
    /// Since the harness started (monotonic clock).
    pub at: Duration,
    /// Wall-clock time, RFC 3339 UTC with milliseconds.
    pub wall: String,
    /// What was done, with the resolved targets (e.g. `kill n1 (pid 4242)`).
    pub what: String,
    /// False when the fault could not be (fully) applied; `what` then holds the error.
    pub ok: bool,
}

/// A kind of fault [`run_nemesis`] draws from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NemesisFamily {
    /// Kill(Random or Leader), healed by Restart.
    Kill,
    /// Pause(Random or Leader), healed by Resume.
    Pause,
    /// IsolateNode(Leader), SplitHalves, Bridge or OneWayLoss, healed by HealNetwork.
    Partition,
    /// RemoveAndReadd(Random); heals itself.
    Membership,
    /// Latency of 50..=200 ms, healed by HealNetwork.
    Latency,
    /// NodeKill(Random), healed by NodeRestart.
    NodeKill,
    /// NodePause(Random), healed by NodeResume.
    NodePause,
    /// NodeIsolate(Random) or (with 2 or more nodes) NodeSplitFromNodes(Random), healed by
    /// HealNetwork.
    NodePartition,
    /// Kill(Holder): the server holding a component's Lease, as the workload's retarget
    /// says; healed by Restart.
    LeaseKill,
    /// IsolateNode(Holder): that server cut off from the other servers; healed by
    /// HealNetwork.
    LeasePartition,
    /// Pause(Holder): that server frozen (SIGSTOP); healed by Resume.
    LeasePause,
    /// NodeDrain(Random), healed by NodeUncordon.
    NodeDrain,
}
