//! The log format gate: a leader writes an entry in a format only once every member has
//! said it decodes that format, so a rolling upgrade never hands an older replica an
//! entry it cannot read.
//!
//! While it leads, a replica asks every member for its status once a second; each
//! status names the newest format its binary decodes ([`MemberStatus::log_format`]). A
//! member that does not answer, or whose status ends before that field (a binary from
//! before it), counts as format 1. The cluster's format is the lowest of them, and
//! [`LogFormatGate::cluster`] is what the leader writes up to (traced entries only at
//! [`keelson_raft::TRACED_LOG_FORMAT`] or above). A replica that stops leading starts
//! again from 1.
//!
//! What it does not cover: a member restarted on an older binary within one check of
//! the last one that found it new. The rolling-upgrade rule in ARCHITECTURE.md still
//! holds for that second.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use keelson_client::api::{MemberStatus, StoreError};
use keelson_proto::v1::cluster_client::ClusterClient;
use keelson_raft::LOG_FORMAT;
use tokio_util::sync::CancellationToken;

use crate::replica::{wire_decode, Replica};

/// How often the leader checks the members.
const CHECK_EVERY: Duration = Duration::from_secs(1);
/// How long one member's status may take.
const STATUS_TIMEOUT: Duration = Duration::from_millis(800);

/// The newest format every member decodes, as last checked.
#[derive(Debug)]
pub(crate) struct LogFormatGate {
    cluster: AtomicU32,
}

impl Default for LogFormatGate {
    fn default() -> Self {
        Self { cluster: AtomicU32::new(1) }
    }
}

impl LogFormatGate {
    pub fn cluster(&self) -> u32 {
        self.cluster.load(Ordering::Relaxed)
    }

    fn set(&self, format: u32) {
        let before = self.cluster.swap(format, Ordering::Relaxed);
        if before != format {
            tracing::info!(from = before, to = format, "the members' common log format changed");
        }
    }
}

/// The cluster's format from what each member reported (`None`: no answer, or a status
/// too old to say): the lowest, each unknown one counting as 1.
pub fn cluster_format(reported: impl IntoIterator<Item = Option<u32>>) -> u32 {
    reported.into_iter().map(|r| r.unwrap_or(1).max(1)).min().unwrap_or(1)
}

/// Checks the members while this replica leads, until `shutdown`.
pub(crate) async fn run(replica: Replica, shutdown: CancellationToken) {
    loop {
        let format = if replica.is_leader() { check(&replica).await } else { 1 };
        replica.inner.log_format.set(format);
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(CHECK_EVERY) => {}
        }
    }
}

async fn check(replica: &Replica) -> u32 {
    let members = replica.members().members;
    let reported = futures::future::join_all(members.iter().map(|m| async move {
        if m.id == replica.id() {
            return Some(LOG_FORMAT);
        }
        match tokio::time::timeout(STATUS_TIMEOUT, peer_status(replica, &m.addr)).await {
            Ok(Ok(s)) => Some(s.log_format),
            Ok(Err(e)) => {
                tracing::debug!(member = %m.name, error = %e, "no log format from this member: counting it as format 1");
                None
            }
            Err(_) => None,
        }
    }))
    .await;
    cluster_format(reported)
}

async fn peer_status(replica: &Replica, addr: &str) -> Result<MemberStatus, StoreError> {
    let ch = replica.inner.peers.get(addr)?;
    let resp = ClusterClient::new(ch)
        .status(tonic::Request::new(keelson_proto::v1::Envelope::default()))
        .await
        .map_err(|s| StoreError::Unavailable(format!("{addr}: {}", s.message())))?;
    wire_decode::<Result<MemberStatus, StoreError>>(resp.get_ref())?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_reads_the_lowest_format_and_unknown_as_the_first() {
        assert_eq!(cluster_format([Some(2), Some(2), Some(2)]), 2);
        assert_eq!(cluster_format([Some(2), Some(1), Some(2)]), 1);
        assert_eq!(cluster_format([Some(2), None, Some(2)]), 1, "a silent or older member holds the format back");
        assert_eq!(cluster_format([Some(3), Some(2)]), 2);
        assert_eq!(cluster_format([Some(0)]), 1, "no format is below the first");
        assert_eq!(cluster_format([]), 1);
    }

    #[test]
    fn a_status_from_before_the_field_does_not_decode_as_one() {
        // The reply of a replica built before `log_format`: the same fields up to
        // `members`, then nothing.
        #[derive(serde::Serialize)]
        struct OldStatus {
            id: u64,
            name: String,
            addr: String,
            role: String,
            term: u64,
            leader: Option<u64>,
            last_log_index: u64,
            committed_index: u64,
            applied_index: u64,
            snapshot_index: u64,
            purged_index: u64,
            revision: i64,
            compacted_revision: i64,
            members: Vec<keelson_client::api::MemberInfo>,
        }
        let old = OldStatus {
            id: 1,
            name: "keelson-1".into(),
            addr: "127.0.0.1:1".into(),
            role: "follower".into(),
            term: 3,
            leader: Some(2),
            last_log_index: 9,
            committed_index: 9,
            applied_index: 9,
            snapshot_index: 0,
            purged_index: 0,
            revision: 5,
            compacted_revision: 0,
            members: vec![],
        };
        let env = crate::replica::wire_encode(&Ok::<_, StoreError>(old)).unwrap();
        assert!(wire_decode::<Result<MemberStatus, StoreError>>(&env).is_err(), "an old status must not read as a new one");
    }

    #[test]
    fn a_status_with_the_field_decodes_it() {
        let st = MemberStatus {
            id: 1,
            name: "keelson-1".into(),
            addr: "a".into(),
            role: "leader".into(),
            term: 1,
            leader: Some(1),
            last_log_index: 0,
            committed_index: 0,
            applied_index: 0,
            snapshot_index: 0,
            purged_index: 0,
            revision: 0,
            compacted_revision: 0,
            members: vec![],
            log_format: LOG_FORMAT,
            cluster_log_format: 1,
        };
        let env = crate::replica::wire_encode(&Ok::<_, StoreError>(st.clone())).unwrap();
        assert_eq!(wire_decode::<Result<MemberStatus, StoreError>>(&env).unwrap().unwrap(), st);
    }
}
