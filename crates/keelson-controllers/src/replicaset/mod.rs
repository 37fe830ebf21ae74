//! The ReplicaSet controller: keeps `spec.replicas` pods of the template running.

pub mod reconcile;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use keelson_component::events::EventType;
use kube::Resource;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use serde_json::json;
use tokio::time::Instant;

use crate::informers::{Ctx, SyncError};
use crate::pod_creation::{adopt, create_in_batches, may_adopt, release, Creator};
use crate::pods::controller_ref;
use crate::work::WorkReceiver;

pub(crate) async fn run(ctx: Arc<Ctx>, rx: WorkReceiver) {
    let queue = ctx.rs_queue.clone();
    crate::informers::work(&ctx, rx, &queue, "replicaset", sync).await;
}


/// A new pod of `rs`'s template, named by the server (`<set>-<suffix>`).
pub fn pod_from_template(rs: &ReplicaSet) -> Pod {
    let template = rs.spec.as_ref().and_then(|s| s.template.clone()).unwrap_or_default();
    let tm = template.metadata.unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", rs.metadata.name.as_deref().unwrap_or("pod"))),
            namespace: rs.metadata.namespace.clone(),
            labels: tm.labels,
            annotations: tm.annotations,
            owner_references: Some(vec![controller_ref("apps/v1", "ReplicaSet", &rs.metadata)]),
            ..Default::default()
        },
        spec: template.spec,
        status: None,
    }
}

async fn sync(ctx: Arc<Ctx>, key: String) -> Result<Option<Duration>, SyncError> {
    let (ns, name) = key.split_once('/').expect("namespace/name");
    let Some(rs) = ctx.replicasets.get(&ObjectRef::new(name).within(ns)) else {
        ctx.expectations.forget(&key);
        return Ok(None);
    };
    let in_store = |n: &str| ctx.pods.get(&ObjectRef::new(n).within(ns));
    let now = Instant::now();
    if !ctx.expectations.satisfied(&key, now, |n| in_store(n).is_some(), |n| in_store(n).is_none_or(|p| p.metadata.deletion_timestamp.is_some())) {
        // The watch will bring what we did, and with it this key again.
        return Ok(Some(Duration::from_secs(5)));
    }
    let all = ctx.pods.state();
    let pods: Vec<&Pod> = all.iter().filter(|p| p.metadata.namespace.as_deref() == Some(ns)).map(|p| p.as_ref()).collect();
    let actions = reconcile::reconcile(&rs, &pods, jiff::Timestamp::now());
    let api: Api<Pod> = Api::namespaced(ctx.term.client.clone(), ns);
    let owner = controller_ref("apps/v1", "ReplicaSet", &rs.metadata);
    if !actions.adopt.is_empty() && may_adopt(&Api::<ReplicaSet>::namespaced(ctx.term.client.clone(), ns), &owner).await? {
        for pod in &actions.adopt {
            if let Some(current) = in_store(pod) {
                adopt(&api, &current, &owner, None).await?;
            }
        }
    }
    for pod in &actions.release {
        if let Some(current) = in_store(pod) {
            release(&api, &current, &owner.uid, None).await?;
        }
    }
    if actions.create > 0 {
        let who = Creator { expectations: &ctx.expectations, key: &key, events: &ctx.rs_events, reference: &rs.object_ref(&()) };
        let template = pod_from_template(&rs);
        create_in_batches(&api, &who, &vec![template; actions.create]).await?;
    }
    if !actions.delete.is_empty() {
        ctx.expectations.deleted(&key, actions.delete.iter().cloned(), Instant::now());
        let dp = DeleteParams::default();
        let deletes = actions.delete.iter().map(|n| api.delete(n, &dp));
        for (name, r) in actions.delete.iter().zip(futures::future::join_all(deletes).await) {
            match r {
                Ok(_) => ctx.rs_events.publish(&rs.object_ref(&()), EventType::Normal, "SuccessfulDelete", &format!("Deleted pod: {name}")).await,
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(SyncError::from_kube(e)),
            }
        }
    }
    let status_changed = {
        let old = rs.status.clone().unwrap_or_default();
        let new = &actions.status;
        (old.replicas, old.ready_replicas, old.available_replicas, old.fully_labeled_replicas, old.observed_generation)
            != (new.replicas, new.ready_replicas, new.available_replicas, new.fully_labeled_replicas, new.observed_generation)
    };
    if status_changed {
        let sets: Api<ReplicaSet> = Api::namespaced(ctx.term.client.clone(), ns);
        sets.patch_status(name, &PatchParams::default(), &Patch::Merge(json!({"status": actions.status}))).await.map_err(SyncError::from_kube)?;
    }
    // Ready pods become available after minReadySeconds: look again then.
    let min_ready = rs.spec.as_ref().and_then(|s| s.min_ready_seconds).unwrap_or(0);
    let waiting = actions.status.ready_replicas.unwrap_or(0) > actions.status.available_replicas.unwrap_or(0);
    Ok((min_ready > 0 && waiting).then(|| Duration::from_secs(min_ready as u64)))
}

