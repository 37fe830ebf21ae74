//! Whether a pod may stay on a Node with NoExecute taints, as a pure function of the pod,
//! the Node's taints and the time: a pod that does not tolerate every NoExecute taint goes
//! at once; one that tolerates them all goes when the first of its tolerations runs out,
//! `tolerationSeconds` after the taint's `timeAdded`; one tolerating them without a limit
//! stays. Pods already being deleted are left alone.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Pod, Taint, Toleration};

/// The decision for one pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Eviction {
    Keep,
    DeleteNow,
    DeleteAt(Timestamp),
}

/// `toleration` tolerates `taint` (Kubernetes' `ToleratesTaint`): effects match or the
/// toleration's is empty; an empty key with `Exists` matches every key; `Exists` ignores
/// the value, `Equal` (the default) needs it.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or("");
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or("");
    let exists = toleration.operator.as_deref() == Some("Exists");
    if key.is_empty() {
        return exists;
    }
    if key != taint.key {
        return false;
    }
    exists || toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
}

/// The decision for `pod` on a Node with `taints` at `now`. A NoExecute taint without
/// `timeAdded` counts from `now` (callers fill in when they first saw it).
pub fn decide(pod: &Pod, taints: &[Taint], now: Timestamp) -> Eviction {
    if pod.metadata.deletion_timestamp.is_some() {
        return Eviction::Keep;
    }
    let tolerations: &[Toleration] = pod.spec.as_ref().and_then(|s| s.tolerations.as_deref()).unwrap_or(&[]);
    let mut first: Option<Timestamp> = None;
    for taint in taints.iter().filter(|t| t.effect == "NoExecute") {
        let matching: Vec<&Toleration> = tolerations.iter().filter(|t| tolerates(t, taint)).collect();
        if matching.is_empty() {
            return Eviction::DeleteNow;
        }
        // The shortest limit of the tolerations that match; none at all is forever.
        let Some(seconds) = matching.iter().filter_map(|t| t.toleration_seconds).map(|s| s.max(0)).min() else { continue };
        let since = taint.time_added.as_ref().map(|t| t.0).unwrap_or(now);
        let at = since.checked_add(SignedDuration::from_secs(seconds)).unwrap_or(Timestamp::MAX);
        first = Some(first.map_or(at, |f| f.min(at)));
    }
    match first {
        None => Eviction::Keep,
        Some(at) if at <= now => Eviction::DeleteNow,
        Some(at) => Eviction::DeleteAt(at),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::{json, Value};

    use super::*;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn pod(tolerations: Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "default"}, "spec": {"nodeName": "n1", "containers": [], "tolerations": tolerations}})).unwrap()
    }

    fn taint(key: &str, value: Option<&str>, effect: &str, added: Option<i64>) -> Taint {
        Taint { key: key.into(), value: value.map(String::from), effect: effect.into(), time_added: added.map(|s| Time(t(s))) }
    }

    const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
    const NOT_READY: &str = "node.kubernetes.io/not-ready";

    #[test]
    fn decisions_by_toleration() {
        let unreachable = [taint(UNREACHABLE, None, "NoExecute", Some(100))];
        let both = [taint(UNREACHABLE, None, "NoExecute", Some(100)), taint(NOT_READY, None, "NoExecute", Some(110))];
        let default_300 = json!([{"key": NOT_READY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}, {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]);
        let cases: Vec<(&str, Value, &[Taint], i64, Eviction)> = vec![
            ("no tolerations", json!(null), &unreachable, 100, Eviction::DeleteNow),
            ("the defaults", default_300.clone(), &unreachable, 150, Eviction::DeleteAt(t(400))),
            ("the defaults, time up", default_300.clone(), &unreachable, 400, Eviction::DeleteNow),
            ("two taints: the earliest limit", default_300.clone(), &both, 150, Eviction::DeleteAt(t(400))),
            ("forever", json!([{"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute"}]), &unreachable, 1_000_000, Eviction::Keep),
            ("tolerates only one of two", json!([{"key": UNREACHABLE, "operator": "Exists"}]), &both, 100, Eviction::DeleteNow),
            ("a NoSchedule toleration does not count", json!([{"key": UNREACHABLE, "operator": "Exists", "effect": "NoSchedule"}]), &unreachable, 100, Eviction::DeleteNow),
            ("empty key Exists tolerates everything", json!([{"operator": "Exists"}]), &both, 100, Eviction::Keep),
            ("the shortest of several matching", json!([{"key": UNREACHABLE, "operator": "Exists", "tolerationSeconds": 60}, {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 2}]), &unreachable, 101, Eviction::DeleteAt(t(102))),
            ("negative seconds are zero", json!([{"key": UNREACHABLE, "operator": "Exists", "tolerationSeconds": -5}]), &unreachable, 100, Eviction::DeleteNow),
        ];
        for (what, tolerations, taints, now, want) in cases {
            assert_eq!(decide(&pod(tolerations), taints, t(now)), want, "{what}");
        }
    }

    #[test]
    fn values_and_effects_are_matched_as_kubernetes_does() {
        let dedicated = taint("dedicated", Some("gpu"), "NoExecute", Some(0));
        let tol = |v: Value| -> Toleration { serde_json::from_value(v).unwrap() };
        assert!(tolerates(&tol(json!({"key": "dedicated", "value": "gpu"})), &dedicated), "Equal is the default operator");
        assert!(!tolerates(&tol(json!({"key": "dedicated", "value": "cpu"})), &dedicated));
        assert!(tolerates(&tol(json!({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"})), &dedicated));
        assert!(!tolerates(&tol(json!({"key": "", "operator": "Equal"})), &dedicated), "an empty key needs Exists");
        assert!(!tolerates(&tol(json!({"key": "other", "operator": "Exists"})), &dedicated));
    }

    #[test]
    fn only_no_execute_taints_count_and_terminating_pods_stay() {
        let taints = [taint("dedicated", None, "NoSchedule", None), taint(UNREACHABLE, None, "PreferNoSchedule", None)];
        assert_eq!(decide(&pod(json!(null)), &taints, t(0)), Eviction::Keep);
        let mut p = pod(json!(null));
        p.metadata.deletion_timestamp = Some(Time(t(0)));
        assert_eq!(decide(&p, &[taint(UNREACHABLE, None, "NoExecute", Some(0))], t(5)), Eviction::Keep);
    }

    #[test]
    fn a_taint_without_a_time_counts_from_now() {
        let p = pod(json!([{"key": UNREACHABLE, "operator": "Exists", "tolerationSeconds": 30}]));
        assert_eq!(decide(&p, &[taint(UNREACHABLE, None, "NoExecute", None)], t(7)), Eviction::DeleteAt(t(37)));
    }
}
