//! The leader's compaction loop: samples `(time, revision)` and proposes a `Compact`
//! command when history falls out of the retention policy. Followers only keep sampling,
//! so a new leader already knows the recent history of revisions.

use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::{compaction_target, CompactionPolicy, RevisionSample};
use crate::replica::Replica;

pub(crate) async fn run(replica: Replica, policy: CompactionPolicy, shutdown: CancellationToken) {
    let started = Instant::now();
    let mut samples: Vec<RevisionSample> = Vec::new();
    let mut ticker = tokio::time::interval(policy.interval);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let now = started.elapsed();
        let store = &replica.state().store;
        let current = store.current_revision();
        samples.push(RevisionSample { at: now, revision: current });
        // Keep only samples that can still matter: the newest one older than the window
        // and everything younger.
        let horizon = now.saturating_sub(policy.retention);
        if let Some(cut) = samples.iter().rposition(|s| s.at <= horizon) {
            samples.drain(..cut);
        }
        if replica.status().role != "leader" {
            continue;
        }
        let Some(target) = compaction_target(&policy, &samples, now, current, store.compacted_revision()) else {
            continue;
        };
        let span = tracing::info_span!("compact", target);
        let _e = span.enter();
        match replica.compact(target, false).await {
            Ok(_) => {
                replica.stats().compactions.inc();
                tracing::info!(target, "compacted history");
            }
            Err(e) => tracing::warn!(error = %e, "compaction failed"),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
