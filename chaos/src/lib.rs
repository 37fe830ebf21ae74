//! `keelson-chaos`: a fault-injection harness around a cluster of real `keelson server`
//! processes.
//!
//! [`Harness::start`] runs `spec.servers` servers and returns once every one is a voter
//! and they agree on a leader. [`Harness::apply`] injects one [`Fault`] (kill, pause,
//! partition, one-way loss, latency, rolling restart, remove-and-re-add) or heals, logs
//! it with timestamps to stderr and `DIR/nemesis.log`, and records a [`NemesisEvent`].
//! [`run_nemesis`] runs a seeded fault/heal schedule until cancelled.
//!
//! # Isolation
//!
//! * [`Isolation::Netns`] (root): every server runs in its own network namespace
//!   `kc<id>-n<i>` with one veth into a bridge that lives in the harness's namespace
//!   `kc<id>-br`; the harness's own process reaches the bridge through the veth
//!   `kc<id>h` in the root namespace. Addresses come from a documentation /24 that no
//!   route or address on the machine overlaps (192.0.2.0/24 preferred, then
//!   198.51.100.0/24, 203.0.113.0/24, then 198.18.x.0/24 from the RFC 2544 range):
//!   host side `.1`, server i at `.(10+i)`. Partitions are nftables tables
//!   (`inet keelson_chaos`) inside the server namespaces that drop traffic to and from
//!   cut-off peers only, never the host address, so clients always reach every server.
//! * [`Isolation::Loopback`]: servers on 127.0.0.(10+i); process faults and membership
//!   changes only: network faults return [`ChaosError::Unsupported`].
//!
//! # Cleanup
//!
//! [`Harness::shutdown`] (async) or `Drop` (synchronous, best effort) kill every server
//! and delete every namespace, veth, nftables table and qdisc the run created. Servers
//! also get `SIGKILL` if the harness process dies (`PR_SET_PDEATHSIG`). Leftovers of a
//! run whose owner process is gone are removed by [`cleanup_stale`], which
//! [`Harness::start`] calls first. A program that wants Ctrl-C/SIGTERM to clean up calls
//! [`cleanup_on_signal`] once.

use std::path::PathBuf;
use std::time::Duration;

mod cleanup;
mod cmd;
mod error;
mod harness;
mod nemesis;
mod netns;
mod node;
pub mod topology;

pub use cleanup::{cleanup_on_signal, cleanup_stale, CleanupHandle};
pub use error::ChaosError;
pub use harness::Harness;
pub use nemesis::{plan_fault, run_nemesis, run_nemesis_retargeted, HealStep, Plan};

/// How servers are separated from each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Isolation {
    /// [`Isolation::Netns`] when running as root with working `ip netns` and `nft`,
    /// else [`Isolation::Loopback`]; the choice is announced on stderr.
    Auto,
    /// One network namespace per server on a private bridge (needs root).
    Netns,
    /// Distinct loopback addresses; no network faults.
    Loopback,
}

/// What cluster to run.
#[derive(Clone, Debug)]
pub struct HarnessSpec {
    /// Number of servers (1 or more; partitions need 2 or more, split/bridge 3 or more).
    pub servers: usize,
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
    /// term); the fault fails with [`ChaosError::NotReady`] when there is none.
    Leader,
    /// A server chosen with the harness's seeded RNG among those the fault can hit.
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
}
