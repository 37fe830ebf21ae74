//! The leader's periodic cross-replica corruption check (as etcd's): every interval the
//! leader takes its current revision, asks every member for the digest of its history at
//! that revision ([`keelson_mvcc::KvHash`], `Cluster.HashKv`) and compares. Replicas that
//! applied the same log hold the same history, so a member whose digest differs from the
//! one most members agree on holds damaged data: the leader raises an alarm
//! (`keelson_corrupt_members`, an error log naming it, [`Replica::corrupt_members`]). A
//! member that is behind, down, or compacted differently is not comparable this round and
//! is judged again at the next.

use std::collections::HashMap;
use std::time::Duration;

use keelson_client::api::{HashKvCall, StoreError};
use keelson_mvcc::KvHash;
use keelson_proto::v1::cluster_client::ClusterClient;
use tokio_util::sync::CancellationToken;

use crate::replica::{wire_encode, Replica};

/// How often the leader checks by default (`--corruption-check-interval`).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(300);

/// How long a member may take to answer (it may first have to apply up to the revision).
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// The members whose digest differs from the one most comparable members hold (ties
/// go to the leader's own). Only digests of the leader's revision and compacted revision
/// compare.
pub fn divergent(leader: (u64, KvHash), others: &[(u64, KvHash)]) -> Vec<u64> {
    let comparable: Vec<(u64, KvHash)> =
        std::iter::once(leader).chain(others.iter().copied()).filter(|(_, h)| h.revision == leader.1.revision && h.compacted == leader.1.compacted).collect();
    let mut votes: HashMap<u64, usize> = HashMap::new();
    for (_, h) in &comparable {
        *votes.entry(h.hash).or_default() += 1;
    }
    let best = votes.values().copied().max().unwrap_or(0);
    let agreed = if votes.get(&leader.1.hash) == Some(&best) {
        leader.1.hash
    } else {
        votes.iter().filter(|(_, n)| **n == best).map(|(h, _)| *h).min().unwrap_or(leader.1.hash)
    };
    let mut out: Vec<u64> = comparable.iter().filter(|(_, h)| h.hash != agreed).map(|(id, _)| *id).collect();
    out.sort_unstable();
    out
}

/// Checks every `every` while this replica leads, until shutdown.
pub(crate) async fn run(replica: Replica, every: Duration, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        if replica.leader().map(|(id, _)| id) != Some(replica.id()) {
            continue;
        }
        let span = tracing::debug_span!("corruption-check");
        let _ = tracing::Instrument::instrument(check_once(&replica), span).await;
    }
}

async fn check_once(replica: &Replica) {
    let revision = replica.inner.state.store.current_revision();
    let own = match replica.hash_kv(revision).await {
        Ok(h) => h,
        Err(e) => {
            tracing::debug!(error = %e, "corruption check skipped: the leader could not hash its own history");
            return;
        }
    };
    let members = replica.members().members;
    let asks = members.iter().filter(|m| m.id != replica.id()).map(|m| async move { (m.id, ask(replica, &m.addr, revision).await) });
    let mut others = Vec::new();
    for (id, answer) in futures::future::join_all(asks).await {
        match answer {
            Ok(h) => others.push((id, h)),
            Err(e) => tracing::debug!(member = format!("{id:x}"), error = %e, "member not comparable this round"),
        }
    }
    let corrupt = divergent((replica.id(), own), &others);
    for id in &corrupt {
        let name = members.iter().find(|m| m.id == *id).map(|m| m.name.clone()).unwrap_or_default();
        tracing::error!(member = format!("{id:x}"), %name, revision, "CORRUPTION: this member's history differs from what the other members hold at the same revision; rebuild it from its peers (see README)");
    }
    replica.set_corrupt_members(corrupt);
    replica.stats().corruption_checks.inc();
}

async fn ask(replica: &Replica, addr: &str, revision: i64) -> Result<KvHash, StoreError> {
    let ch = replica.inner.peers.get(addr)?;
    let env = wire_encode(&HashKvCall { revision }).map_err(|e| StoreError::Unavailable(e.to_string()))?;
    let mut client = ClusterClient::new(ch);
    match tokio::time::timeout(ANSWER_WITHIN, client.hash_kv(env)).await {
        Ok(Ok(resp)) => postcard::from_bytes::<Result<KvHash, StoreError>>(&resp.get_ref().payload).map_err(|e| StoreError::Unavailable(e.to_string()))?,
        Ok(Err(s)) => Err(StoreError::Unavailable(format!("{addr}: {}", s.message()))),
        Err(_) => Err(StoreError::Unavailable(format!("{addr} did not answer in time"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(hash: u64) -> KvHash {
        KvHash { revision: 50, compacted: 10, hash, entries: 40 }
    }

    #[test]
    fn the_member_that_differs_from_the_majority_is_flagged() {
        assert!(divergent((1, h(7)), &[(2, h(7)), (3, h(7))]).is_empty());
        assert_eq!(divergent((1, h(7)), &[(2, h(7)), (3, h(9))]), [3]);
        // The leader itself can be the odd one out.
        assert_eq!(divergent((1, h(5)), &[(2, h(7)), (3, h(7))]), [1]);
        // Five members, two damaged differently.
        assert_eq!(divergent((1, h(7)), &[(2, h(8)), (3, h(7)), (4, h(9)), (5, h(7))]), [2, 4]);
        // Two that disagree: the leader's own counts.
        assert_eq!(divergent((1, h(7)), &[(2, h(8))]), [2]);
    }

    #[test]
    fn digests_of_another_revision_or_compaction_are_not_compared() {
        let other_rev = KvHash { revision: 49, ..h(9) };
        let other_compaction = KvHash { compacted: 20, ..h(9) };
        assert!(divergent((1, h(7)), &[(2, other_rev), (3, other_compaction)]).is_empty());
    }
}
