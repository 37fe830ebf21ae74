//! The pod garbage collector: every 20 s (Kubernetes' `gcCheckPeriod`) the pods that
//! [`reconcile::collect`] picks are force-deleted (grace period 0, conditional on their
//! uid). An orphaned pod that has not finished is first marked Failed with the
//! `DisruptionTarget` condition (reason `DeletionByPodGC`), as Kubernetes' PodGC does.

pub mod reconcile;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::json;

use crate::informers::SyncError;
use crate::node_informers::NodeInformers;
use reconcile::{collect, missing_nodes, Collect, Reason, TERMINATED_POD_THRESHOLD};

const CHECK_EVERY: Duration = Duration::from_secs(20);

/// Collects until the term ends.
pub(crate) async fn run(informers: Arc<NodeInformers>) {
    let mut missing_since: HashMap<String, Timestamp> = HashMap::new();
    let mut first = true;
    loop {
        // The first pass at once: a new term must not wait a period to see what is missing.
        let wait = if std::mem::take(&mut first) { Duration::ZERO } else { CHECK_EVERY };
        tokio::select! {
            _ = informers.term.ended.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        let (pods, nodes) = (informers.pods.state(), informers.nodes.state());
        let pods: Vec<&Pod> = pods.iter().map(|p| p.as_ref()).collect();
        let nodes: Vec<&Node> = nodes.iter().map(|n| n.as_ref()).collect();
        let now = Timestamp::now();
        missing_since = missing_nodes(&pods, &nodes, &missing_since, now);
        for c in collect(&pods, &nodes, &missing_since, now, TERMINATED_POD_THRESHOLD) {
            let span = tracing::info_span!("reconcile", controller = "podgc", pod = %format!("{}/{}", c.namespace, c.name), reason = ?c.reason, trace_id = tracing::field::Empty);
            keelson_tracecontext::continue_trace(&span, None);
            match tracing::Instrument::instrument(force_delete(&informers.term.client, &c), span).await {
                Ok(()) => {}
                Err(SyncError::Fenced) => {
                    informers.term.step_down();
                    return;
                }
                Err(e) => tracing::info!(error = %e, pod = %c.name, "collecting a pod; the next pass retries"),
            }
        }
    }
}

fn gone(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404 || s.code == 409)
}

async fn force_delete(client: &kube::Client, c: &Collect) -> Result<(), SyncError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), &c.namespace);
    if c.reason == Reason::OrphanedFromNode {
        let now = Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
        let patch = json!({"status": {"phase": "Failed", "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC",
            "message": "PodGC: node no longer exists", "lastTransitionTime": now}]}});
        match api.patch_status(&c.name, &PatchParams::default(), &Patch::Strategic(patch)).await {
            Ok(_) => {}
            Err(e) if gone(&e) => return Ok(()),
            Err(e) => return Err(SyncError::from_kube(e)),
        }
    }
    let params = DeleteParams { grace_period_seconds: Some(0), preconditions: Some(Preconditions { uid: Some(c.uid.clone()), resource_version: None }), ..DeleteParams::background() };
    match api.delete(&c.name, &params).await {
        Ok(_) => {
            tracing::info!(pod = %format!("{}/{}", c.namespace, c.name), reason = ?c.reason, "pod collected");
            Ok(())
        }
        Err(e) if gone(&e) => Ok(()),
        Err(e) => Err(SyncError::from_kube(e)),
    }
}
