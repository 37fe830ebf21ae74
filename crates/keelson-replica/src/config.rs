//! How a replica is started.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use keelson_client::PeerIdentity;
use keelson_mvcc::Revision;

/// How a replica comes into its cluster the first time it starts. A replica whose data
/// directory already holds state ignores this and resumes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Bootstrap {
    /// Create a new single-member cluster (`keelson server --cluster-init`).
    ClusterInit,
    /// Join the cluster that the replica at this `host:port` belongs to
    /// (`keelson server --join`): added as a learner, promoted to voter once caught up.
    Join(String),
    /// Only resume; fail if the data directory is empty.
    Resume,
}

/// Which old revisions the leader compacts away.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompactionPolicy {
    /// Keep every revision younger than this (default 5 minutes).
    pub retention: Duration,
    /// Also keep at least this many latest revisions, if set.
    pub keep_revisions: Option<i64>,
    /// How often the leader records revisions and considers compacting.
    pub interval: Duration,
}

impl Default for CompactionPolicy {
    fn default() -> Self {
        Self { retention: Duration::from_secs(300), keep_revisions: None, interval: Duration::from_secs(10) }
    }
}

/// Renders more metrics (Prometheus text) for the replica's `/metrics` page.
#[derive(Clone)]
pub struct ExtraMetrics(pub std::sync::Arc<dyn Fn() -> String + Send + Sync>);

impl std::fmt::Debug for ExtraMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ExtraMetrics")
    }
}

/// Everything a replica needs to start.
#[derive(Clone, Debug)]
pub struct ReplicaConfig {
    /// Human name, e.g. `keelson-1`; kept in the data directory on first start.
    pub name: String,
    pub data_dir: PathBuf,
    /// Where the gRPC services (Raft transport, store, cluster) listen. Port 0 picks one.
    pub listen_addr: SocketAddr,
    /// `host:port` other replicas and clients use; `None` = the bound listen address.
    pub advertise_addr: Option<String>,
    pub bootstrap: Bootstrap,
    pub compaction: CompactionPolicy,
    /// Prometheus `/metrics` endpoint, if wanted.
    pub metrics_addr: Option<SocketAddr>,
    /// More metrics served on the same page (the process's other components).
    pub extra_metrics: Option<ExtraMetrics>,
    /// Raft cluster name (replicas of different clusters refuse each other's messages).
    pub cluster_name: String,
    /// When to snapshot and purge the Raft log.
    pub log_retention: keelson_raft::LogRetention,
    /// How long a watch stream may stay full (client not reading) before the watcher is
    /// canceled with the revision to resume from.
    pub slow_watcher_timeout: Duration,
    /// Mutual TLS for all gRPC traffic, `None` = plaintext (the default). When set:
    /// the server accepts only clients presenting a certificate signed by the identity's
    /// CA (peers and store clients alike), serves the identity's certificate, and every
    /// call this replica makes to a peer (Raft RPCs and snapshots, forwarded writes,
    /// ReadIndex, membership, joining) uses TLS with that certificate as its client
    /// identity. The certificate therefore needs both ServerAuth and ClientAuth and a SAN
    /// for the host part of `advertise_addr` (or of the listen address when that is what
    /// peers dial); all replicas of a cluster must agree on TLS or not. The certificate
    /// can be replaced while the replica runs ([`PeerIdentity::replace`], what
    /// `keelson_pki::rotation` does): every later handshake, on either side, uses the new
    /// one.
    pub tls: Option<Arc<PeerIdentity>>,
    /// Scheduled backups of this replica's store, if wanted.
    pub backups: Option<crate::backup::BackupSchedule>,
    /// How often the leader compares every member's history digest (`None`: never).
    pub corruption_check: Option<Duration>,
    /// Bytes kept free on the data directory's file system: below that the replica
    /// appends nothing to its log (see [`keelson_raft::disk_guard`]). 0 = no reserve.
    pub disk_reserve: u64,
}

impl ReplicaConfig {
    pub fn new(name: impl Into<String>, data_dir: impl Into<PathBuf>, listen_addr: SocketAddr, bootstrap: Bootstrap) -> Self {
        Self {
            name: name.into(),
            data_dir: data_dir.into(),
            listen_addr,
            advertise_addr: None,
            bootstrap,
            compaction: CompactionPolicy::default(),
            metrics_addr: None,
            extra_metrics: None,
            cluster_name: "keelson".into(),
            log_retention: keelson_raft::LogRetention::default(),
            slow_watcher_timeout: crate::watch::SLOW_WATCHER_TIMEOUT,
            tls: None,
            backups: None,
            corruption_check: Some(crate::corruption::DEFAULT_INTERVAL),
            disk_reserve: keelson_raft::disk_guard::DEFAULT_RESERVE_BYTES,
        }
    }

    /// The same configuration with mutual TLS (see [`ReplicaConfig::tls`]).
    pub fn with_tls(mut self, identity: Arc<PeerIdentity>) -> Self {
        self.tls = Some(identity);
        self
    }
}

/// A `(when, revision)` observation the compactor keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RevisionSample {
    pub at: Duration,
    pub revision: Revision,
}

/// The revision to compact to, if any: the newest revision that is both older than the
/// retention window (by the samples) and, with `keep_revisions`, at least that many
/// revisions behind `current`; `None` if that is not past `compacted`.
///
/// Pure: `now` and the samples come from the caller.
pub fn compaction_target(
    policy: &CompactionPolicy,
    samples: &[RevisionSample],
    now: Duration,
    current: Revision,
    compacted: Revision,
) -> Option<Revision> {
    let by_age = if policy.retention.is_zero() {
        current
    } else {
        // The revision current at a moment at least `retention` ago: everything up to it is old.
        samples
            .iter()
            .filter(|s| now.saturating_sub(s.at) >= policy.retention)
            .map(|s| s.revision)
            .max()?
    };
    let by_count = match policy.keep_revisions {
        Some(keep) => current - keep,
        None => current,
    };
    let target = by_age.min(by_count).min(current);
    (target > compacted).then_some(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: u64, revision: Revision) -> RevisionSample {
        RevisionSample { at: Duration::from_secs(secs), revision }
    }

    #[test]
    fn keeps_the_retention_window() {
        let p = CompactionPolicy::default();
        let samples = [s(0, 10), s(100, 50), s(200, 90), s(400, 300)];
        // At t=350 only the t=0 sample is 5 minutes old.
        assert_eq!(compaction_target(&p, &samples, Duration::from_secs(350), 320, 0), Some(10));
        // At t=510 the t=200 sample is old enough.
        assert_eq!(compaction_target(&p, &samples, Duration::from_secs(510), 320, 0), Some(90));
        // Nothing old enough yet.
        assert_eq!(compaction_target(&p, &samples, Duration::from_secs(299), 320, 0), None);
    }

    #[test]
    fn never_recompacts_or_goes_backwards() {
        let p = CompactionPolicy::default();
        let samples = [s(0, 10)];
        assert_eq!(compaction_target(&p, &samples, Duration::from_secs(1000), 20, 10), None);
        assert_eq!(compaction_target(&p, &samples, Duration::from_secs(1000), 20, 15), None);
    }

    #[test]
    fn count_limit_combines_with_age() {
        let p = CompactionPolicy { retention: Duration::ZERO, keep_revisions: Some(100), ..Default::default() };
        assert_eq!(compaction_target(&p, &[], Duration::from_secs(1), 1000, 0), Some(900));
        assert_eq!(compaction_target(&p, &[], Duration::from_secs(1), 50, 0), None);
        let both = CompactionPolicy { keep_revisions: Some(100), ..Default::default() };
        let samples = [s(0, 950)];
        // Age allows 950 but the count keeps 100 revisions: 900.
        assert_eq!(compaction_target(&both, &samples, Duration::from_secs(400), 1000, 0), Some(900));
    }
}
