//! The controller manager component. Every server runs one copy; the copy on the holder
//! of `kube-system/kube-controller-manager` runs the controllers, each writing only
//! through the term's fenced client, so a deposed copy can never change the cluster.
//!
//! Controllers live in one folder each; a controller is a pure reconcile over what its
//! reflectors hold and a thin loop that performs the actions.

use keelson_component::{ControlPlaneAccess, Leadership, KUBE_CONTROLLER_MANAGER};
use tokio_util::sync::CancellationToken;

/// Runs the controller manager component until `shutdown`.
pub async fn run(access: ControlPlaneAccess, shutdown: CancellationToken) {
    keelson_component::run_elected(access, KUBE_CONTROLLER_MANAGER, shutdown, lead).await;
}

/// One term as the active controller manager: runs until the term ends.
async fn lead(term: Leadership) {
    tracing::info!(token = term.token, "controller manager active");
    term.ended.cancelled().await;
    tracing::info!(token = term.token, "controller manager inactive");
}
