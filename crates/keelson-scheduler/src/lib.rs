//! The scheduler component. Every server runs one copy; the copy on the holder of
//! `kube-system/kube-scheduler` is active, and every write it makes is fenced on that
//! Lease, so a deposed copy can never bind a pod.
//!
//! What it does while leading is the scheduling framework (queue, plugins, binding),
//! which is built on this frame; the frame itself — identity `system:kube-scheduler`,
//! election, fenced client, shutdown — is what [`run`] sets up.

use keelson_component::{ControlPlaneAccess, Leadership, KUBE_SCHEDULER};
use tokio_util::sync::CancellationToken;

/// Runs the scheduler component until `shutdown`.
pub async fn run(access: ControlPlaneAccess, shutdown: CancellationToken) {
    keelson_component::run_elected(access, KUBE_SCHEDULER, shutdown, lead).await;
}

/// One term as the active scheduler: runs until the term ends.
async fn lead(term: Leadership) {
    tracing::info!(token = term.token, "scheduler active");
    term.ended.cancelled().await;
    tracing::info!(token = term.token, "scheduler inactive");
}
