//! Running a control-plane component: contend for its Lease and, while holding it, run
//! its work with the term's fenced client. A component that fails to start (its identity
//! cannot be issued, its timings are invalid) says why in its log and does not run; it
//! never falls back to another identity.

use std::future::Future;

use tokio_util::sync::CancellationToken;

use crate::client::{ComponentSpec, ControlPlaneAccess};
use crate::election::Leadership;

/// Runs `spec` on this server until `shutdown`: elected through its Lease, `work` runs
/// for each term this server's copy holds it.
pub async fn run_elected<W, F>(access: ControlPlaneAccess, spec: ComponentSpec, shutdown: CancellationToken, work: W)
where
    W: FnMut(Leadership) -> F,
    F: Future<Output = ()> + Send + 'static,
{
    let elector = match access.elector(spec).await {
        Ok(e) => e,
        Err(e) => {
            tracing::error!(component = spec.name, error = %e, "cannot start the component");
            return;
        }
    };
    let span = tracing::info_span!("component", component = spec.name);
    tracing::Instrument::instrument(elector.run(shutdown, work), span).await;
}
