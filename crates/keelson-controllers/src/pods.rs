//! Facts about pods that several controllers share: active, ready, available, owned,
//! and which pods a controller claims by its selector ([`claim`]).

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::selector::Selector;

/// Not finished and not being deleted: counts toward replicas.
pub fn is_active(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none() && !matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

fn ready_condition(pod: &Pod) -> Option<&k8s_openapi::api::core::v1::PodCondition> {
    pod.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "Ready")
}

pub fn is_ready(pod: &Pod) -> bool {
    ready_condition(pod).is_some_and(|c| c.status == "True")
}

/// Ready for at least `min_ready_seconds` at `now`.
pub fn is_available(pod: &Pod, min_ready_seconds: i32, now: jiff::Timestamp) -> bool {
    let Some(c) = ready_condition(pod).filter(|c| c.status == "True") else { return false };
    if min_ready_seconds <= 0 {
        return true;
    }
    c.last_transition_time.as_ref().is_some_and(|t| now.as_second() - t.0.as_second() >= i64::from(min_ready_seconds))
}

/// The owner reference naming the controller of `meta`, if any.
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references.as_ref()?.iter().find(|o| o.controller == Some(true))
}

/// An owner reference making the object described by (`api_version`, `kind`, `meta`) the
/// controller of another.
pub fn controller_ref(api_version: &str, kind: &str, meta: &ObjectMeta) -> OwnerReference {
    OwnerReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// What a controller claims of the pods of its namespace ([`claim`]).
#[derive(Debug, Default)]
pub struct Claimed<'a> {
    /// Pods it controls and selects, adopted ones included.
    pub owned: Vec<&'a Pod>,
    /// Orphans its selector matches, to adopt (by name).
    pub adopt: Vec<String>,
    /// Pods it controls that its selector no longer matches, to release (by name).
    pub release: Vec<String>,
}

/// The pods the controller of uid `owner_uid` claims, as Kubernetes' ControllerRefManager
/// does: those it controls and selects are its own; those it controls but no longer
/// selects are released; orphans it selects (not being deleted) are adopted. A
/// controller being deleted (`owner_deleting`) neither adopts nor releases.
pub fn claim<'a>(owner_uid: &str, selector: &Selector, pods: &[&'a Pod], owner_deleting: bool) -> Claimed<'a> {
    let mut out = Claimed::default();
    let empty = std::collections::BTreeMap::new();
    for &pod in pods {
        let matches = selector.matches(pod.metadata.labels.as_ref().unwrap_or(&empty));
        let name = || pod.metadata.name.clone().unwrap_or_default();
        match controller_of(&pod.metadata) {
            Some(owner) if owner.uid == owner_uid => {
                if matches || owner_deleting {
                    out.owned.push(pod);
                } else {
                    out.release.push(name());
                }
            }
            None if matches && !owner_deleting && pod.metadata.deletion_timestamp.is_none() => {
                out.adopt.push(name());
                out.owned.push(pod);
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, app: &str, owner: Option<(&str, bool)>, deleting: bool) -> Pod {
        let mut p = json!({"metadata": {"name": name, "labels": {"app": app}}});
        if let Some((uid, controller)) = owner {
            p["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "X", "name": "x", "uid": uid, "controller": controller}]);
        }
        if deleting {
            p["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        serde_json::from_value(p).unwrap()
    }

    #[test]
    fn claims_by_selector_and_controller_ref() {
        let selector = Selector::new(&serde_json::from_value(json!({"matchLabels": {"app": "web"}})).unwrap());
        // (pod, owner being deleted, owned, adopted, released)
        let cases = [
            (pod("mine", "web", Some(("me", true)), false), false, true, false, false),
            (pod("relabeled", "db", Some(("me", true)), false), false, false, false, true),
            (pod("relabeled-while-deleting", "db", Some(("me", true)), false), true, true, false, false),
            (pod("orphan", "web", None, false), false, true, true, false),
            (pod("orphan-not-controlled", "web", Some(("me", false)), false), false, true, true, false),
            (pod("orphan-going", "web", None, true), false, false, false, false),
            (pod("orphan-owner-going", "web", None, false), true, false, false, false),
            (pod("orphan-other-labels", "db", None, false), false, false, false, false),
            (pod("someone-elses", "web", Some(("other", true)), false), false, false, false, false),
        ];
        for (p, deleting, owned, adopted, released) in &cases {
            let c = claim("me", &selector, &[p], *deleting);
            let name = p.metadata.name.clone().unwrap();
            assert_eq!((!c.owned.is_empty(), c.adopt == [name.clone()], c.release == [name.clone()]), (*owned, *adopted, *released), "{name}");
        }
        let nothing = Selector::new(&Default::default());
        assert!(claim("me", &nothing, &[&cases[3].0], false).adopt.is_empty(), "an empty selector adopts nothing");
    }
}
