//! ControllerRevisions, as DaemonSets and StatefulSets keep them: one per template,
//! named `<owner>-<hash>`, holding `{"spec": {"template": …, "$patch": "replace"}}`, with a
//! revision number that grows each time a template becomes current again (so `kubectl
//! rollout history` and undo read them). Old ones beyond `revisionHistoryLimit` go,
//! except those a live pod still runs. Pure: the executors do the writes.

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::json;

use crate::pods::controller_of;

/// The label of a revision with its template's hash (Kubernetes' `ControllerRevisionHashLabel`).
pub const HASH_LABEL: &str = "controller.kubernetes.io/hash";

#[derive(Clone, Debug, Default, PartialEq)]
pub struct HistoryPlan {
    /// The current template's revision, to create.
    pub create: Option<ControllerRevision>,
    /// An existing revision that becomes current again: (name, new revision number).
    pub renumber: Option<(String, i64)>,
    /// Revisions beyond the history limit.
    pub delete: Vec<String>,
}

/// The template a revision holds, if it holds one.
pub fn template_of(rev: &ControllerRevision) -> Option<PodTemplateSpec> {
    let data = rev.data.as_ref()?.0.pointer("/spec/template")?.clone();
    let mut data = data;
    data.as_object_mut()?.remove("$patch");
    serde_json::from_value(data).ok()
}

/// What `owner`'s history needs for its current template (`name` = `<owner>-<hash>`),
/// given the revisions of its namespace and the revisions live pods run (by hash or by
/// name, as their `controller-revision-hash` label says).
pub fn history(owner: &ObjectMeta, owner_ref: OwnerReference, name: &str, hash: &str, template: &PodTemplateSpec, revisions: &[&ControllerRevision], in_use: &BTreeSet<String>, limit: i32) -> HistoryPlan {
    let uid = owner.uid.clone().unwrap_or_default();
    let mut owned: Vec<&ControllerRevision> = revisions.iter().copied().filter(|r| controller_of(&r.metadata).is_some_and(|o| o.uid == uid)).collect();
    owned.sort_by_key(|r| r.revision);
    let max = owned.last().map_or(0, |r| r.revision);
    let mut plan = HistoryPlan::default();
    match owned.iter().find(|r| r.metadata.name.as_deref() == Some(name)) {
        Some(r) if r.revision < max => plan.renumber = Some((name.to_string(), max + 1)),
        Some(_) => {}
        None => {
            let mut t = serde_json::to_value(template).unwrap_or_default();
            if let Some(o) = t.as_object_mut() {
                o.insert("$patch".into(), json!("replace"));
            }
            let mut labels = template.metadata.as_ref().and_then(|m| m.labels.clone()).unwrap_or_default();
            labels.insert(HASH_LABEL.into(), hash.into());
            plan.create = Some(ControllerRevision {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    namespace: owner.namespace.clone(),
                    labels: Some(labels),
                    owner_references: Some(vec![owner_ref]),
                    ..Default::default()
                },
                data: Some(RawExtension(json!({"spec": {"template": t}}))),
                revision: max + 1,
            });
        }
    }
    let old: Vec<&&ControllerRevision> = owned
        .iter()
        .filter(|r| r.metadata.name.as_deref() != Some(name))
        .filter(|r| !(r.metadata.labels.as_ref().and_then(|l| l.get(HASH_LABEL)).is_some_and(|h| in_use.contains(h)) || in_use.contains(r.metadata.name.as_deref().unwrap_or(""))))
        .collect();
    let excess = old.len().saturating_sub(limit.max(0) as usize);
    plan.delete = old.iter().take(excess).filter_map(|r| r.metadata.name.clone()).collect();
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pods::controller_ref;

    fn owner() -> ObjectMeta {
        serde_json::from_value(json!({"name": "agent", "namespace": "d", "uid": "o-uid"})).unwrap()
    }

    fn template(image: &str) -> PodTemplateSpec {
        serde_json::from_value(json!({"metadata": {"labels": {"app": "agent"}}, "spec": {"containers": [{"name": "c", "image": image}]}})).unwrap()
    }

    fn rev(hash: &str, n: i64) -> ControllerRevision {
        let o = owner();
        let plan = history(&o, controller_ref("apps/v1", "DaemonSet", &o), &format!("agent-{hash}"), hash, &template(hash), &[], &BTreeSet::new(), 10);
        let mut r = plan.create.unwrap();
        r.revision = n;
        r
    }

    #[test]
    fn a_new_template_gets_the_next_revision_and_holds_the_template() {
        let (a, b) = (rev("a", 1), rev("b", 2));
        let o = owner();
        let plan = history(&o, controller_ref("apps/v1", "DaemonSet", &o), "agent-c", "c", &template("c"), &[&a, &b], &BTreeSet::new(), 10);
        let created = plan.create.unwrap();
        assert_eq!(created.revision, 3);
        assert_eq!(created.metadata.labels.as_ref().unwrap()[HASH_LABEL], "c");
        assert_eq!(created.data.as_ref().unwrap().0.pointer("/spec/template/$patch"), Some(&json!("replace")));
        assert_eq!(template_of(&created), Some(template("c")));
        assert_eq!(created.metadata.owner_references.unwrap()[0].uid, "o-uid");
    }

    #[test]
    fn going_back_renumbers_and_old_revisions_beyond_the_limit_go_unless_in_use() {
        let (a, b, c) = (rev("a", 1), rev("b", 2), rev("c", 3));
        let o = owner();
        let back = history(&o, controller_ref("apps/v1", "DaemonSet", &o), "agent-a", "a", &template("a"), &[&a, &b, &c], &BTreeSet::new(), 10);
        assert_eq!((back.create, back.renumber), (None, Some(("agent-a".to_string(), 4))));
        let current = history(&o, controller_ref("apps/v1", "DaemonSet", &o), "agent-c", "c", &template("c"), &[&a, &b, &c], &BTreeSet::new(), 10);
        assert_eq!(current, HistoryPlan::default());
        let trimmed = history(&o, controller_ref("apps/v1", "DaemonSet", &o), "agent-c", "c", &template("c"), &[&a, &b, &c], &BTreeSet::from(["a".to_string()]), 0);
        assert_eq!(trimmed.delete, vec!["agent-b"], "a live pod still runs a");
    }
}
