//! What a replica does while its data directory is low on space (see
//! [`keelson_raft::disk_guard`]): it measures the free space a few times a second, stops
//! campaigning while low, and as leader hands leadership to a peer that has not refused
//! appends for space. Proposals check [`Replica::space_refusal`] before appending.

use std::time::{Duration, Instant};

use keelson_client::api::StoreError;
use keelson_raft::disk_guard::majority_low;
use keelson_raft::NodeId;
use openraft::async_runtime::WatchReceiver;
use tokio_util::sync::CancellationToken;

use crate::Replica;

/// How often the free space is measured (appends and proposals also measure it).
pub const SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// How often a write waiting for its commit looks whether a majority refuses for space.
const OUTCOME_POLL: Duration = Duration::from_millis(100);

/// How long a leader low on space waits for a transfer before asking another peer.
const TRANSFER_RETRY: Duration = Duration::from_secs(2);

impl Replica {
    /// Why this replica must not append a proposal now, if it must not: its own disk is
    /// low (leadership is being handed over), or a majority of voters is.
    pub(crate) fn space_refusal(&self) -> Option<StoreError> {
        let own = self.inner.disk.check().err();
        let low_peers = self.inner.peer_space.low_peers(Instant::now());
        if own.is_none() && low_peers.is_empty() {
            return None;
        }
        let voters = self.voter_ids();
        if majority_low(&voters, self.inner.id, own.is_some(), &low_peers) {
            return Some(StoreError::NoSpace(format!(
                "a majority of replicas is low on disk space (this one: {}; peers refusing appends: {low_peers:x?}); writes resume when space returns",
                own.map_or_else(|| "ok".to_string(), |e| e.to_string())
            )));
        }
        own.map(|e| StoreError::NoSpace(format!("{e}; leadership is moving to another replica")))
    }

    /// Resolves once a majority of voters refuses appends for space. A write appended
    /// just before the refusals began cannot commit until space returns; it is answered
    /// with this rather than held until then. Its entry stays in the leader's log and
    /// commits if space returns, so the answer says its outcome is unknown, not failed.
    /// The first look is after [`OUTCOME_POLL`], so a write that commits at once never
    /// pays for it.
    pub(crate) async fn out_of_space_outcome_unknown(&self) -> StoreError {
        loop {
            tokio::time::sleep(OUTCOME_POLL).await;
            let own = self.inner.disk.is_low();
            let low_peers = self.inner.peer_space.low_peers(Instant::now());
            if (own || !low_peers.is_empty()) && majority_low(&self.voter_ids(), self.inner.id, own, &low_peers) {
                return StoreError::Unavailable(format!(
                    "a majority of replicas refuses appends for insufficient disk space (peers refusing: {low_peers:x?}); this write's outcome is unknown: it commits if space returns"
                ));
            }
        }
    }

    fn voter_ids(&self) -> Vec<NodeId> {
        let m = self.inner.raft.metrics();
        let m = m.borrow_watched();
        m.membership_config.membership().voter_ids().collect()
    }
}

/// Measures the data directory's free space until `shutdown`, switching elections off
/// while it is low and moving leadership away from this replica.
pub(crate) async fn run(replica: Replica, shutdown: CancellationToken) {
    let mut last_transfer: Option<(Instant, NodeId)> = None;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(SAMPLE_EVERY) => {}
        }
        let low = replica.inner.disk.check().is_err();
        replica.raft().runtime_config().elect(!low);
        if !low || !replica.is_leader() {
            last_transfer = None;
            continue;
        }
        if last_transfer.is_some_and(|(at, _)| at.elapsed() < TRANSFER_RETRY) {
            continue;
        }
        let previous = last_transfer.map(|(_, to)| to);
        let Some(to) = transfer_target(&replica.voter_ids(), replica.id(), &replica.inner.peer_space.low_peers(Instant::now()), previous)
        else {
            continue;
        };
        tracing::warn!(to, "disk space low on the leader: handing leadership over");
        if let Err(e) = replica.raft().trigger().transfer_leader(to).await {
            tracing::warn!(error = %e, "leadership transfer");
        }
        last_transfer = Some((Instant::now(), to));
    }
}

/// The voter to hand leadership to: not this one, not one that refused for space, and
/// after a transfer that did not happen, the next one round. Pure.
pub fn transfer_target(voters: &[NodeId], me: NodeId, low_peers: &[NodeId], previous: Option<NodeId>) -> Option<NodeId> {
    let mut candidates: Vec<NodeId> = voters.iter().copied().filter(|v| *v != me && !low_peers.contains(v)).collect();
    candidates.sort_unstable();
    match previous {
        Some(p) => candidates.iter().copied().find(|c| *c > p).or_else(|| candidates.first().copied()),
        None => candidates.first().copied(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfers_to_a_peer_with_space_and_rotates_after_a_failed_try() {
        assert_eq!(transfer_target(&[1, 2, 3], 1, &[], None), Some(2));
        assert_eq!(transfer_target(&[1, 2, 3], 1, &[2], None), Some(3));
        assert_eq!(transfer_target(&[1, 2, 3], 1, &[], Some(2)), Some(3));
        assert_eq!(transfer_target(&[1, 2, 3], 1, &[], Some(3)), Some(2));
        assert_eq!(transfer_target(&[1, 2, 3], 1, &[2, 3], None), None);
        assert_eq!(transfer_target(&[1], 1, &[], None), None);
    }
}
