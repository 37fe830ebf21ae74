//! What `keelson status` found: plain data, gathered by `gather`, drawn by `render`.

use keelson_client::api::MemberStatus;

/// The cluster at one moment.
#[derive(Clone, Debug)]
pub struct ClusterStatus {
    /// The leader by the member list the command read (hex id), if there is one.
    pub leader: Option<u64>,
    /// Every Raft member, by name.
    pub servers: Vec<ServerStatus>,
    /// The control-plane components' Leases, or why they could not be read.
    pub leases: Result<Vec<LeaseStatus>, String>,
    /// The Nodes, or why they could not be listed.
    pub nodes: Result<Vec<NodeStatus>, String>,
}

/// One server: its replica as it reports itself, and its Kubernetes API.
#[derive(Clone, Debug)]
pub struct ServerStatus {
    pub id: u64,
    pub name: String,
    /// The store (Raft) address.
    pub addr: String,
    /// A voter, or a learner catching up.
    pub voter: bool,
    /// The replica's own status, or why it did not answer.
    pub raft: Result<MemberStatus, String>,
    pub api: ApiHealth,
}

/// A server's `/readyz`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApiHealth {
    /// `/readyz` answered ok.
    Ready { url: String },
    /// The server answered, but is not ready (e.g. cut off from the quorum).
    NotReady { url: String, reason: String },
    /// No answer: refused, reset or timed out.
    Down { url: String, reason: String },
    /// Not checked: the kubeconfig has no context for this server.
    Unknown { reason: String },
}

impl ApiHealth {
    pub fn is_ready(&self) -> bool {
        matches!(self, ApiHealth::Ready { .. })
    }

    /// `ready`, `not-ready`, `down` or `unknown`.
    pub fn state(&self) -> &'static str {
        match self {
            ApiHealth::Ready { .. } => "ready",
            ApiHealth::NotReady { .. } => "not-ready",
            ApiHealth::Down { .. } => "down",
            ApiHealth::Unknown { .. } => "unknown",
        }
    }

    pub fn url(&self) -> Option<&str> {
        match self {
            ApiHealth::Ready { url } | ApiHealth::NotReady { url, .. } | ApiHealth::Down { url, .. } => Some(url),
            ApiHealth::Unknown { .. } => None,
        }
    }

    pub fn reason(&self) -> Option<&str> {
        match self {
            ApiHealth::Ready { .. } => None,
            ApiHealth::NotReady { reason, .. } | ApiHealth::Down { reason, .. } | ApiHealth::Unknown { reason } => Some(reason),
        }
    }
}

/// A component's Lease in `kube-system`.
pub use keelson_apiserver::component_leases::ComponentLease as LeaseStatus;

/// A Node and what is bound to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeStatus {
    pub name: String,
    /// The Ready condition's status: `True`, `False` or `Unknown` (also when absent).
    pub ready: String,
    /// Pods bound to the node that have not finished (neither Succeeded nor Failed).
    pub pods: usize,
    pub unschedulable: bool,
    /// `key=value:Effect` (or `key:Effect`).
    pub taints: Vec<String>,
}

/// How far a replica is behind the leader, in log entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaLag {
    /// The leader's commit index minus this replica's applied index.
    pub applied_behind_commit: u64,
    /// The leader's last log index minus this replica's applied index.
    pub applied_behind_last: u64,
    /// The leader's last log index minus this replica's last log index (replication).
    pub log_behind_last: u64,
}

impl ReplicaLag {
    pub fn of(replica: &MemberStatus, leader: &MemberStatus) -> ReplicaLag {
        ReplicaLag {
            applied_behind_commit: leader.committed_index.saturating_sub(replica.applied_index),
            applied_behind_last: leader.last_log_index.saturating_sub(replica.applied_index),
            log_behind_last: leader.last_log_index.saturating_sub(replica.last_log_index),
        }
    }
}

impl ClusterStatus {
    /// The status of the replica that reports itself leader (of the highest term, should
    /// a deposed leader not know yet).
    pub fn leader_status(&self) -> Option<&MemberStatus> {
        self.servers.iter().filter_map(|s| s.raft.as_ref().ok()).filter(|s| s.role == "leader").max_by_key(|s| s.term)
    }

    /// The lag of `server` behind the leader; `None` when either did not answer.
    pub fn lag(&self, server: &ServerStatus) -> Option<ReplicaLag> {
        Some(ReplicaLag::of(server.raft.as_ref().ok()?, self.leader_status()?))
    }
}
