//! What the namespace controller decides, without I/O: whether a namespace needs its
//! content deleted, the conditions that report a sweep (Kubernetes' five deletion
//! conditions, worded as its namespace controller words them), and when the
//! `kubernetes` finalizer may go.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Namespace, NamespaceCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// The finalizer of `spec.finalizers` this controller owns.
pub const KUBERNETES_FINALIZER: &str = "kubernetes";

/// Whether `ns` is being deleted and still waits for this controller.
pub fn needs_cleanup(ns: &Namespace) -> bool {
    ns.metadata.deletion_timestamp.is_some() && spec_finalizers(ns).iter().any(|f| f == KUBERNETES_FINALIZER)
}

fn spec_finalizers(ns: &Namespace) -> &[String] {
    ns.spec.as_ref().and_then(|s| s.finalizers.as_deref()).unwrap_or(&[])
}

/// `spec.finalizers` once this controller's own is removed (what `finalize` writes).
pub fn finalizers_after_cleanup(ns: &Namespace) -> Vec<String> {
    spec_finalizers(ns).iter().filter(|f| *f != KUBERNETES_FINALIZER).cloned().collect()
}

/// What one sweep over a terminating namespace found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sweep {
    /// Discovery failed for some groups (their resources were not swept).
    pub discovery_failures: Vec<String>,
    /// Deletions or lists that failed, one message per resource.
    pub deletion_failures: Vec<String>,
    /// Objects still present after the delete, by `resource.group`.
    pub remaining: BTreeMap<String, usize>,
    /// Remaining objects by the metadata finalizer that holds them.
    pub finalizers: BTreeMap<String, usize>,
    /// The sweep ran over a discovery made for it, not the term's cached one.
    pub fresh: bool,
}

impl Sweep {
    /// Counts one object left over in `resource` (`resource.group`, group empty for the
    /// core group) with its finalizers.
    pub fn left(&mut self, resource: &str, finalizers: &[String]) {
        *self.remaining.entry(resource.to_string()).or_default() += 1;
        for f in finalizers {
            *self.finalizers.entry(f.clone()).or_default() += 1;
        }
    }

    /// Nothing is left and nothing failed: the namespace may be finalized.
    pub fn is_clean(&self) -> bool {
        self.discovery_failures.is_empty() && self.deletion_failures.is_empty() && self.remaining.is_empty()
    }
}

/// The namespace's conditions after `sweep`: each of the five keeps its
/// `lastTransitionTime` while its status stays; other conditions are kept as they are.
pub fn conditions(sweep: &Sweep, previous: &[NamespaceCondition], now: &Time) -> Vec<NamespaceCondition> {
    let failing = |items: &[String]| (!items.is_empty()).then(|| items.join(", "));
    let remaining = (!sweep.remaining.is_empty()).then(|| {
        let parts: Vec<String> = sweep.remaining.iter().map(|(r, n)| format!("{r} has {n} resource instances")).collect();
        format!("Some resources are remaining: {}", parts.join(", "))
    });
    let held = (!sweep.finalizers.is_empty()).then(|| {
        let parts: Vec<String> = sweep.finalizers.iter().map(|(f, n)| format!("{f} in {n} resource instances")).collect();
        format!("Some content in the namespace has finalizers remaining: {}", parts.join(", "))
    });
    let wanted = [
        ("NamespaceDeletionDiscoveryFailure", failing(&sweep.discovery_failures).map(|m| ("DiscoveryFailed", format!("Discovery failed for some groups: {m}"))), ("ResourcesDiscovered", "All resources successfully discovered")),
        ("NamespaceDeletionGroupVersionParsingFailure", None, ("ParsedGroupVersions", "All legacy kube types successfully parsed")),
        (
            "NamespaceDeletionContentFailure",
            failing(&sweep.deletion_failures).map(|m| ("ContentDeletionFailed", format!("Failed to delete all resource types, {} remaining: {m}", sweep.deletion_failures.len()))),
            ("ContentDeleted", "All content successfully deleted, may be waiting on finalization"),
        ),
        ("NamespaceContentRemaining", remaining.map(|m| ("SomeResourcesRemain", m)), ("ContentRemoved", "All content successfully removed")),
        ("NamespaceFinalizersRemaining", held.map(|m| ("SomeFinalizersRemain", m)), ("ContentHasNoFinalizers", "All content-preserving finalizers finished")),
    ];
    let mut out: Vec<NamespaceCondition> = previous.iter().filter(|c| !wanted.iter().any(|(t, _, _)| *t == c.type_)).cloned().collect();
    for (type_, failure, (ok_reason, ok_message)) in wanted {
        let (status, reason, message) = match failure {
            Some((reason, message)) => ("True", reason.to_string(), message),
            None => ("False", ok_reason.to_string(), ok_message.to_string()),
        };
        let before = previous.iter().find(|c| c.type_ == type_);
        let last_transition_time = match before {
            Some(c) if c.status == status => c.last_transition_time.clone().or_else(|| Some(now.clone())),
            _ => Some(now.clone()),
        };
        out.push(NamespaceCondition { type_: type_.into(), status: status.into(), reason: Some(reason), message: Some(message), last_transition_time });
    }
    out
}

/// Whether two condition lists say the same (ignoring order), so an unchanged sweep
/// writes nothing.
pub fn same_conditions(a: &[NamespaceCondition], b: &[NamespaceCondition]) -> bool {
    let key = |c: &NamespaceCondition| (c.type_.clone(), c.status.clone(), c.reason.clone(), c.message.clone());
    let mut a: Vec<_> = a.iter().map(key).collect();
    let mut b: Vec<_> = b.iter().map(key).collect();
    a.sort();
    b.sort();
    a == b
}

/// `resource.group` as the conditions name it (`pods.` for the core group).
pub fn resource_label(resource: &str, group: &str) -> String {
    format!("{resource}.{group}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ns(v: serde_json::Value) -> Namespace {
        serde_json::from_value(v).expect("namespace")
    }

    fn at(s: &str) -> Time {
        Time(s.parse().expect("timestamp"))
    }

    fn by_type<'a>(cs: &'a [NamespaceCondition], t: &str) -> &'a NamespaceCondition {
        cs.iter().find(|c| c.type_ == t).unwrap_or_else(|| panic!("no condition {t} in {cs:?}"))
    }

    #[test]
    fn only_a_deleted_namespace_holding_the_kubernetes_finalizer_is_cleaned() {
        let live = ns(json!({"metadata": {"name": "a"}, "spec": {"finalizers": ["kubernetes"]}}));
        let deleting = ns(json!({"metadata": {"name": "a", "deletionTimestamp": "2026-01-01T00:00:00Z"}, "spec": {"finalizers": ["kubernetes", "example.com/x"]}}));
        let finalized = ns(json!({"metadata": {"name": "a", "deletionTimestamp": "2026-01-01T00:00:00Z"}, "spec": {"finalizers": ["example.com/x"]}}));
        assert!(!needs_cleanup(&live));
        assert!(needs_cleanup(&deleting));
        assert!(!needs_cleanup(&finalized));
        assert_eq!(finalizers_after_cleanup(&deleting), ["example.com/x"]);
    }

    #[test]
    fn a_clean_sweep_reports_all_five_conditions_false_with_kubernetes_wording() {
        let now = at("2026-01-01T00:00:10Z");
        let sweep = Sweep::default();
        assert!(sweep.is_clean());
        let cs = conditions(&sweep, &[], &now);
        assert_eq!(cs.len(), 5);
        assert!(cs.iter().all(|c| c.status == "False" && c.last_transition_time.as_ref() == Some(&now)), "{cs:?}");
        let removed = by_type(&cs, "NamespaceContentRemaining");
        assert_eq!((removed.reason.as_deref(), removed.message.as_deref()), (Some("ContentRemoved"), Some("All content successfully removed")));
        assert_eq!(by_type(&cs, "NamespaceDeletionContentFailure").message.as_deref(), Some("All content successfully deleted, may be waiting on finalization"));
    }

    #[test]
    fn remaining_objects_and_their_finalizers_are_counted_and_sorted() {
        let mut sweep = Sweep::default();
        sweep.left(&resource_label("pods", ""), &[]);
        sweep.left(&resource_label("pods", ""), &["example.com/hold".into()]);
        sweep.left(&resource_label("deployments", "apps"), &["example.com/hold".into(), "foregroundDeletion".into()]);
        assert!(!sweep.is_clean());
        let cs = conditions(&sweep, &[], &at("2026-01-01T00:00:10Z"));
        let left = by_type(&cs, "NamespaceContentRemaining");
        assert_eq!(left.status, "True");
        assert_eq!(left.reason.as_deref(), Some("SomeResourcesRemain"));
        assert_eq!(left.message.as_deref(), Some("Some resources are remaining: deployments.apps has 1 resource instances, pods. has 2 resource instances"));
        let held = by_type(&cs, "NamespaceFinalizersRemaining");
        assert_eq!(held.reason.as_deref(), Some("SomeFinalizersRemain"));
        assert_eq!(held.message.as_deref(), Some("Some content in the namespace has finalizers remaining: example.com/hold in 2 resource instances, foregroundDeletion in 1 resource instances"));
    }

    #[test]
    fn failures_block_finalization_and_are_reported() {
        let sweep = Sweep { deletion_failures: vec!["widgets.example.com: forbidden".into()], ..Default::default() };
        assert!(!sweep.is_clean());
        let cs = conditions(&sweep, &[], &at("2026-01-01T00:00:10Z"));
        let failed = by_type(&cs, "NamespaceDeletionContentFailure");
        assert_eq!((failed.status.as_str(), failed.reason.as_deref()), ("True", Some("ContentDeletionFailed")));
        assert_eq!(failed.message.as_deref(), Some("Failed to delete all resource types, 1 remaining: widgets.example.com: forbidden"));
        let sweep = Sweep { discovery_failures: vec!["metrics.k8s.io/v1beta1".into()], ..Default::default() };
        assert!(!sweep.is_clean());
        assert_eq!(by_type(&conditions(&sweep, &[], &at("2026-01-01T00:00:10Z")), "NamespaceDeletionDiscoveryFailure").reason.as_deref(), Some("DiscoveryFailed"));
    }

    #[test]
    fn transition_times_move_only_when_a_status_changes() {
        let first = at("2026-01-01T00:00:00Z");
        let later = at("2026-01-01T00:01:00Z");
        let mut sweep = Sweep::default();
        sweep.left("pods.", &[]);
        let before = conditions(&sweep, &[], &first);
        let again = conditions(&sweep, &before, &later);
        assert!(same_conditions(&before, &again));
        assert_eq!(by_type(&again, "NamespaceContentRemaining").last_transition_time.as_ref(), Some(&first));
        let cleared = conditions(&Sweep::default(), &again, &later);
        assert!(!same_conditions(&again, &cleared));
        assert_eq!(by_type(&cleared, "NamespaceContentRemaining").last_transition_time.as_ref(), Some(&later));
        assert_eq!(by_type(&cleared, "NamespaceDeletionContentFailure").last_transition_time.as_ref(), Some(&first));
    }

    #[test]
    fn conditions_of_other_types_are_kept() {
        let other = NamespaceCondition { type_: "example.com/Custom".into(), status: "True".into(), ..Default::default() };
        let cs = conditions(&Sweep::default(), std::slice::from_ref(&other), &at("2026-01-01T00:00:00Z"));
        assert_eq!(cs.len(), 6);
        assert!(cs.contains(&other));
    }
}
