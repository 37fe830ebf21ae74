//! What a ReplicaSet needs done, as a pure function of the set, the pods it could own
//! and the time: adopt orphans its selector matches, release pods it no longer selects,
//! create or delete pods towards `spec.replicas` (at most 500 a sync; deletions ranked as
//! Kubernetes ranks them), and the status to write.

use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetStatus};
use k8s_openapi::api::core::v1::Pod;

use crate::pods::{claim, is_active, is_available, is_ready};
use crate::selector::Selector;

/// Most pods created or deleted by one sync.
pub const BURST_REPLICAS: usize = 500;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Actions {
    /// Orphans to adopt (by name).
    pub adopt: Vec<String>,
    /// Owned pods the selector no longer matches, to release (by name).
    pub release: Vec<String>,
    /// Pods to create from the template.
    pub create: usize,
    /// Pods to delete, most expendable first.
    pub delete: Vec<String>,
    pub status: ReplicaSetStatus,
}

/// Kubernetes' order of which pods go first on scale-down: unassigned before assigned,
/// Pending before Unknown before Running, not ready before ready, recently ready before
/// long ready, more restarts first, newer before older.
pub fn deletion_rank(pod: &Pod) -> (u8, u8, u8, i64, i64, i64) {
    let status = pod.status.as_ref();
    let assigned = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty());
    let phase = match status.and_then(|s| s.phase.as_deref()) {
        Some("Pending") | None => 0,
        Some("Unknown") => 1,
        _ => 2,
    };
    let ready_since = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready" && c.status == "True"))
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0.as_second());
    let restarts: i64 = status.and_then(|s| s.container_statuses.as_ref()).map(|cs| cs.iter().map(|c| i64::from(c.restart_count)).sum()).unwrap_or(0);
    let created = pod.metadata.creation_timestamp.as_ref().map(|t| t.0.as_second()).unwrap_or(0);
    // Smaller tuples go first: negate where "more" or "newer" should go first.
    (u8::from(assigned), phase, u8::from(is_ready(pod)), -ready_since.unwrap_or(i64::MAX), -restarts, -created)
}

/// The sync of `rs` over `pods` (every pod in its namespace).
pub fn reconcile(rs: &ReplicaSet, pods: &[&Pod], now: jiff::Timestamp) -> Actions {
    let mut actions = Actions::default();
    let uid = rs.metadata.uid.clone().unwrap_or_default();
    let spec = rs.spec.as_ref();
    let selector = spec.map(|s| Selector::new(&s.selector));
    let deleting = rs.metadata.deletion_timestamp.is_some();
    let selector = selector.unwrap_or_else(|| Selector::new(&Default::default()));
    let claimed = claim(&uid, &selector, pods, deleting);
    let owned = claimed.owned;
    (actions.adopt, actions.release) = (claimed.adopt, claimed.release);
    let active: Vec<&Pod> = owned.iter().copied().filter(|p| is_active(p)).collect();
    let want = spec.and_then(|s| s.replicas).unwrap_or(1).max(0) as usize;
    if !deleting {
        if active.len() < want {
            actions.create = (want - active.len()).min(BURST_REPLICAS);
        } else if active.len() > want {
            let mut ranked = active.clone();
            ranked.sort_by_key(|p| deletion_rank(p));
            actions.delete = ranked.iter().take((active.len() - want).min(BURST_REPLICAS)).map(|p| p.metadata.name.clone().unwrap_or_default()).collect();
        }
    }
    let template_labels = spec.and_then(|s| s.template.as_ref()).and_then(|t| t.metadata.as_ref()).and_then(|m| m.labels.clone()).unwrap_or_default();
    let min_ready = spec.and_then(|s| s.min_ready_seconds).unwrap_or(0);
    actions.status = ReplicaSetStatus {
        replicas: active.len() as i32,
        fully_labeled_replicas: Some(active.iter().filter(|p| template_labels.iter().all(|(k, v)| p.metadata.labels.as_ref().and_then(|l| l.get(k)) == Some(v))).count() as i32),
        ready_replicas: Some(active.iter().filter(|p| is_ready(p)).count() as i32),
        available_replicas: Some(active.iter().filter(|p| is_available(p, min_ready, now)).count() as i32),
        observed_generation: rs.metadata.generation,
        conditions: rs.status.as_ref().and_then(|s| s.conditions.clone()),
        ..Default::default()
    };
    actions
}

/// Slow start: create in batches of 1, 2, 4, … until `n` are made or a batch fails.
pub fn slow_start_batches(n: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let (mut left, mut size) = (n, 1usize);
    while left > 0 {
        let b = size.min(left);
        out.push(b);
        left -= b;
        size *= 2;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn rs(replicas: i32) -> ReplicaSet {
        serde_json::from_value(json!({
            "metadata": {"name": "web-abc", "namespace": "d", "uid": "rs-uid", "generation": 2},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web", "tier": "f"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}},
        }))
        .unwrap()
    }

    fn pod(name: &str, extra: Value) -> Pod {
        let mut p = json!({"metadata": {"name": name, "namespace": "d", "labels": {"app": "web", "tier": "f"}, "creationTimestamp": "2026-01-01T00:00:00Z",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc", "uid": "rs-uid", "controller": true}]}});
        if let Value::Object(e) = extra {
            for (k, v) in e {
                p[k.as_str()] = merge(p[k.as_str()].take(), v);
            }
        }
        serde_json::from_value(p).unwrap()
    }

    fn merge(a: Value, b: Value) -> Value {
        match (a, b) {
            (Value::Object(mut a), Value::Object(b)) => {
                for (k, v) in b {
                    let old = a.remove(&k).unwrap_or(Value::Null);
                    a.insert(k, merge(old, v));
                }
                Value::Object(a)
            }
            (_, b) => b,
        }
    }

    fn now() -> jiff::Timestamp {
        "2026-01-01T00:10:00Z".parse().unwrap()
    }

    fn running_ready(since: &str) -> Value {
        json!({"spec": {"nodeName": "n1"}, "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": since}]}})
    }

    #[test]
    fn creates_up_to_replicas_in_bursts_of_500() {
        let a = reconcile(&rs(3), &[], now());
        assert_eq!(a.create, 3);
        assert_eq!(reconcile(&rs(2000), &[], now()).create, BURST_REPLICAS);
        assert_eq!(slow_start_batches(10), vec![1, 2, 4, 3]);
        assert_eq!(slow_start_batches(0), Vec::<usize>::new());
    }

    #[test]
    fn deletes_the_most_expendable_first() {
        let pending = pod("pending", json!({}));
        let unready = pod("unready", json!({"spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}));
        let old_ready = pod("old-ready", running_ready("2026-01-01T00:01:00Z"));
        let new_ready = pod("new-ready", running_ready("2026-01-01T00:09:00Z"));
        let pods = [&old_ready, &new_ready, &unready, &pending];
        let a = reconcile(&rs(1), &pods, now());
        assert_eq!(a.delete, vec!["pending", "unready", "new-ready"]);
        assert_eq!(a.create, 0);
    }

    #[test]
    fn finished_and_terminating_pods_do_not_count() {
        let done = pod("done", json!({"status": {"phase": "Succeeded"}}));
        let going = pod("going", json!({"metadata": {"deletionTimestamp": "2026-01-01T00:09:59Z"}}));
        let a = reconcile(&rs(2), &[&done, &going], now());
        assert_eq!(a.create, 2);
        assert_eq!(a.status.replicas, 0);
    }

    #[test]
    fn adopts_matching_orphans_and_releases_what_it_no_longer_selects() {
        let mut orphan = pod("orphan", json!({}));
        orphan.metadata.owner_references = None;
        let mut relabeled = pod("relabeled", json!({}));
        relabeled.metadata.labels = Some([("app".to_string(), "other".to_string())].into());
        let mut foreign = pod("foreign", json!({}));
        foreign.metadata.owner_references.as_mut().unwrap()[0].uid = "someone-else".into();
        let a = reconcile(&rs(1), &[&orphan, &relabeled, &foreign], now());
        assert_eq!(a.adopt, vec!["orphan"]);
        assert_eq!(a.release, vec!["relabeled"]);
        assert_eq!((a.create, a.delete.len()), (0, 0), "the adopted orphan is the one replica");
    }

    #[test]
    fn status_counts_ready_available_and_fully_labeled() {
        let mut set = rs(3);
        set.spec.as_mut().unwrap().min_ready_seconds = Some(120);
        let long = pod("long", running_ready("2026-01-01T00:01:00Z"));
        let fresh = pod("fresh", running_ready("2026-01-01T00:09:30Z"));
        let mut partial = pod("partial", json!({}));
        partial.metadata.labels = Some([("app".to_string(), "web".to_string())].into());
        let s = reconcile(&set, &[&long, &fresh, &partial], now()).status;
        assert_eq!(s.replicas, 3);
        assert_eq!(s.ready_replicas, Some(2));
        assert_eq!(s.available_replicas, Some(1), "ready for less than minReadySeconds is not available");
        assert_eq!(s.fully_labeled_replicas, Some(2));
        assert_eq!(s.observed_generation, Some(2));
    }

    #[test]
    fn a_set_being_deleted_creates_nothing() {
        let mut set = rs(3);
        set.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
        assert_eq!(reconcile(&set, &[], now()).create, 0);
    }
}
