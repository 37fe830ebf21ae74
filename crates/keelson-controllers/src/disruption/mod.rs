//! The disruption controller: every PodDisruptionBudget's status (expected, desired and
//! current healthy pods, disruptions allowed, evictions in flight), which the eviction
//! subresource reads and decrements. Pods are matched by the budget's selector (an
//! empty selector matches every pod of the namespace, as policy/v1 says); the scale of
//! a percentage or maxUnavailable is the pods' controllers' (a Deployment's for the pods
//! of its ReplicaSets).

pub mod reconcile;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::api::{Api, PostParams};
use kube::runtime::reflector::ObjectRef;

use crate::informers::{Ctx, SyncError};
use crate::pods::controller_of;

/// How soon a budget with evictions in flight is looked at again (they time out).
const RECHECK_DISRUPTED: Duration = Duration::from_secs(15);

/// Whether `pod` is one the budget's selector covers.
fn covered(pdb: &PodDisruptionBudget, pod: &Pod) -> bool {
    let Some(sel) = pdb.spec.as_ref().and_then(|s| s.selector.as_ref()) else { return false };
    if sel.match_labels.as_ref().is_none_or(|m| m.is_empty()) && sel.match_expressions.as_ref().is_none_or(|e| e.is_empty()) {
        return true;
    }
    crate::selector::Selector::new(sel).matches(pod.metadata.labels.as_ref().unwrap_or(&Default::default()))
}

pub(crate) async fn sync(ctx: Arc<Ctx>, key: String) -> Result<Option<Duration>, SyncError> {
    let (ns, name) = key.split_once('/').expect("namespace/name");
    let Some(pdb) = ctx.pdbs.get(&ObjectRef::new(name).within(ns)) else { return Ok(None) };
    let all = ctx.pods.state();
    let pods: Vec<&Pod> = all.iter().map(|p| p.as_ref()).filter(|p| p.metadata.namespace.as_deref() == Some(ns) && covered(&pdb, p)).collect();
    // The StatefulSets' scale is read live (they are not mirrored here); ReplicaSets and
    // Deployments come from the term's stores.
    let mut live_scale: HashMap<String, i32> = HashMap::new();
    for p in &pods {
        if let Some(owner) = controller_of(&p.metadata).filter(|o| o.kind == "StatefulSet") {
            if !live_scale.contains_key(&owner.uid) {
                let sets: Api<StatefulSet> = Api::namespaced(ctx.term.client.clone(), ns);
                if let Some(s) = sets.get_opt(&owner.name).await.map_err(SyncError::from_kube)? {
                    live_scale.insert(owner.uid.clone(), s.spec.and_then(|s| s.replicas).unwrap_or(1));
                }
            }
        }
    }
    let scale_of = |ns: &str, owner: &OwnerReference| -> Option<i32> {
        match owner.kind.as_str() {
            "ReplicaSet" => {
                let rs = ctx.replicasets.get(&ObjectRef::new(&owner.name).within(ns))?;
                if let Some(d) = controller_of(&rs.metadata).filter(|o| o.kind == "Deployment") {
                    let dep = ctx.deployments.get(&ObjectRef::new(&d.name).within(ns))?;
                    return Some(dep.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1));
                }
                Some(rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1))
            }
            "StatefulSet" => live_scale.get(&owner.uid).copied(),
            _ => None,
        }
    };
    let status = reconcile::status(&pdb, &pods, &scale_of, &Time(jiff::Timestamp::now()));
    let recheck = status.disrupted_pods.as_ref().is_some_and(|d| !d.is_empty()).then_some(RECHECK_DISRUPTED);
    if pdb.status.as_ref() == Some(&status) {
        return Ok(recheck);
    }
    let mut updated = (*pdb).clone();
    updated.status = Some(status);
    let api: Api<PodDisruptionBudget> = Api::namespaced(ctx.term.client.clone(), ns);
    match api.replace_status(name, &PostParams::default(), &updated).await {
        Ok(_) => Ok(recheck),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        // An eviction or an edit got in first: its watch event brings the budget back.
        Err(kube::Error::Api(s)) if s.code == 409 => {
            tracing::debug!(budget = %key, detail = %s.message, "budget changed under the sync");
            Ok(None)
        }
        Err(e) => Err(SyncError::from_kube(e)),
    }
}
