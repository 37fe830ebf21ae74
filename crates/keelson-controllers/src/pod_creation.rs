//! Creating a controller's pods as Kubernetes' controllers do: in slow-start batches
//! (1, 2, 4, … so a failing template costs one request, not hundreds), each created pod
//! recorded in the controller's expectations before the watch shows it, a
//! `SuccessfulCreate` Event per pod and a `FailedCreate` Event for the batch that failed.
//! ReplicaSets, Jobs and DaemonSets share it.

use tokio::time::Instant;

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use keelson_component::events::{EventRecorder, EventType};
use kube::api::{Api, PostParams};

use crate::expectations::Expectations;
use crate::informers::SyncError;
use crate::replicaset::reconcile::slow_start_batches;

/// Who is creating: the controller's expectations key, Event recorder and object.
pub struct Creator<'a> {
    pub expectations: &'a Expectations,
    pub key: &'a str,
    pub events: &'a EventRecorder,
    pub reference: &'a ObjectReference,
}

/// Creates `pods` in slow-start batches until one fails; a fenced create ends the term.
pub async fn create_in_batches(api: &Api<Pod>, who: &Creator<'_>, pods: &[Pod]) -> Result<(), SyncError> {
    let pp = PostParams::default();
    let mut rest = pods;
    for batch in slow_start_batches(pods.len()) {
        let (now, later) = rest.split_at(batch);
        rest = later;
        let results = futures::future::join_all(now.iter().map(|p| api.create(&pp, p))).await;
        let mut failure = None;
        let mut names = Vec::new();
        for r in results {
            match r {
                Ok(p) => names.push(p.metadata.name.unwrap_or_default()),
                Err(e) => failure = Some(e),
            }
        }
        who.expectations.created(who.key, names.iter().cloned(), Instant::now());
        for name in &names {
            who.events.publish(who.reference, EventType::Normal, "SuccessfulCreate", &format!("Created pod: {name}")).await;
        }
        if let Some(e) = failure {
            if keelson_component::fence::is_fenced(&e) {
                return Err(SyncError::Fenced);
            }
            who.events.publish(who.reference, EventType::Warning, "FailedCreate", &format!("Error creating: {e}")).await;
            return Err(SyncError::Api(e));
        }
    }
    Ok(())
}
