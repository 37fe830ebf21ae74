//! The scheduler's cache: the [`Snapshot`] kept current from watch events (and this
//! scheduler's own assumptions) instead of rebuilt for every pod, so a cycle costs what
//! its plugins cost, not a pass over every pod of the cluster.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};

use crate::snapshot::{has_required_anti_affinity, nominated_node_name, occupies_node, NodeInfo, Snapshot};

#[derive(Default)]
pub struct SchedulerCache {
    snapshot: Snapshot,
    /// Node name → index in the snapshot.
    index: HashMap<String, usize>,
    /// Pod uid → the node it is placed on.
    placed: HashMap<String, String>,
    /// Pods placed on nodes not known yet, by node name.
    waiting: HashMap<String, Vec<Arc<Pod>>>,
    /// Uids of pods whose nomination this scheduler withdrew (their preemption failed)
    /// and whose watched state has not yet shown it cleared: views still naming the old
    /// node are older than the withdrawal and do not nominate again.
    withdrawn: std::collections::HashSet<String>,
}

fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

impl SchedulerCache {
    pub fn snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    fn refresh_images(&mut self) {
        let mut spread = std::collections::BTreeMap::new();
        for n in &self.snapshot.nodes {
            for image in n.node.status.as_ref().and_then(|s| s.images.as_ref()).into_iter().flatten() {
                for name in image.names.iter().flatten() {
                    *spread.entry(crate::plugins::node::normalized_image(name)).or_default() += 1;
                }
            }
        }
        self.snapshot.image_spread = spread;
    }

    /// A node was added or changed.
    pub fn set_node(&mut self, node: Arc<Node>) {
        let name = node.metadata.name.clone().unwrap_or_default();
        let images_changed = match self.index.get(&name) {
            Some(&i) => {
                let old = &self.snapshot.nodes[i].node;
                let changed = old.status.as_ref().map(|s| &s.images) != node.status.as_ref().map(|s| &s.images);
                let mut info = NodeInfo::new(node);
                for p in std::mem::take(&mut self.snapshot.nodes[i].pods) {
                    info.add_pod(p);
                }
                self.snapshot.nodes[i] = info;
                changed
            }
            None => {
                let mut info = NodeInfo::new(node);
                for p in self.waiting.remove(&name).unwrap_or_default() {
                    info.add_pod(p);
                }
                self.index.insert(name, self.snapshot.nodes.len());
                self.snapshot.nodes.push(info);
                true
            }
        };
        if images_changed {
            self.refresh_images();
        }
    }

    /// A node was deleted (its pods wait for it to come back).
    pub fn remove_node(&mut self, name: &str) {
        let Some(i) = self.index.remove(name) else { return };
        let info = self.snapshot.nodes.swap_remove(i);
        if let Some(moved) = self.snapshot.nodes.get(i) {
            self.index.insert(moved.name.clone(), i);
        }
        self.waiting.insert(name.to_string(), info.pods);
        self.rebuild_repelling();
        self.refresh_images();
    }

    fn rebuild_repelling(&mut self) {
        self.snapshot.repelling = self
            .snapshot
            .nodes
            .iter()
            .enumerate()
            .flat_map(|(i, n)| n.pods.iter().filter(|p| has_required_anti_affinity(p)).map(move |p| (i, p.clone())))
            .collect();
    }

    /// The nomination of the pod with `uid` is over (bound, gone, finished).
    fn forget_nomination(&mut self, uid: &str) {
        for pods in self.snapshot.nominated.values_mut() {
            pods.retain(|p| p.metadata.uid.as_deref() != Some(uid));
        }
        self.snapshot.nominated.retain(|_, pods| !pods.is_empty());
    }

    /// `pod` (pending, its `status.nominatedNodeName` set) is nominated to that node: its
    /// room there is held against pods of lower priority.
    pub fn nominate(&mut self, pod: Arc<Pod>) {
        self.withdrawn.remove(&uid(&pod));
        self.hold_nomination(pod);
    }

    fn hold_nomination(&mut self, pod: Arc<Pod>) {
        let Some(node) = nominated_node_name(&pod).map(str::to_string) else { return };
        self.forget_nomination(&uid(&pod));
        self.snapshot.nominated.entry(node).or_default().push(pod);
    }

    /// The pending pod with `uid` is nominated nowhere any more (its preemption failed, so
    /// the room it held goes back to others), even before the watch shows its
    /// `status.nominatedNodeName` cleared.
    pub fn withdraw_nomination(&mut self, uid: &str) {
        self.forget_nomination(uid);
        self.withdrawn.insert(uid.to_string());
    }

    /// Whether the pod with `uid` holds a nomination here.
    pub fn is_nominated(&self, uid: &str) -> bool {
        self.snapshot.nominated.values().flatten().any(|p| p.metadata.uid.as_deref() == Some(uid))
    }

    /// A pod's latest state (from the watch, or as this scheduler assumes it): placed on
    /// its node if it occupies one, removed otherwise. A pending pod's nomination follows
    /// its `status.nominatedNodeName` (one this scheduler made is kept until the watch
    /// shows another); a placed, deleting or finished pod has none.
    pub fn set_pod(&mut self, pod: Arc<Pod>) {
        let pending = !occupies_node(&pod) && pod.metadata.deletion_timestamp.is_none() && !matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"));
        let id = uid(&pod);
        if pending && nominated_node_name(&pod).is_some() {
            if !self.withdrawn.contains(&id) {
                self.hold_nomination(pod.clone());
            }
        } else if pending {
            // The withdrawal has landed (or a view without a nomination came).
            self.withdrawn.remove(&id);
        } else {
            self.withdrawn.remove(&id);
            self.forget_nomination(&id);
        }
        self.remove_pod(&uid(&pod));
        if !occupies_node(&pod) {
            return;
        }
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
        self.placed.insert(uid(&pod), node.clone());
        match self.index.get(&node) {
            Some(&i) => {
                if has_required_anti_affinity(&pod) {
                    self.snapshot.repelling.push((i, pod.clone()));
                }
                self.snapshot.nodes[i].add_pod(pod);
            }
            None => self.waiting.entry(node).or_default().push(pod),
        }
    }

    /// The pod with `uid` is deleted.
    pub fn pod_gone(&mut self, uid: &str) {
        self.withdrawn.remove(uid);
        self.forget_nomination(uid);
        self.remove_pod(uid);
    }

    /// The pod with `uid` is no longer placed (gone, or no longer assumed).
    pub fn remove_pod(&mut self, uid: &str) {
        let Some(node) = self.placed.remove(uid) else { return };
        match self.index.get(&node) {
            Some(&i) => {
                self.snapshot.nodes[i].remove_pod(uid);
                self.snapshot.repelling.retain(|(_, p)| p.metadata.uid.as_deref() != Some(uid));
            }
            None => {
                if let Some(w) = self.waiting.get_mut(&node) {
                    w.retain(|p| p.metadata.uid.as_deref() != Some(uid));
                }
            }
        }
    }

    /// Drops every placed pod whose uid `keep` refuses (after a re-list).
    pub fn retain_pods(&mut self, keep: impl Fn(&str) -> bool) {
        let gone: Vec<String> = self.placed.keys().filter(|u| !keep(u)).cloned().collect();
        for u in gone {
            self.remove_pod(&u);
        }
    }

    /// Drops every node whose name `keep` refuses (after a re-list).
    pub fn retain_nodes(&mut self, keep: impl Fn(&str) -> bool) {
        let gone: Vec<String> = self.index.keys().filter(|n| !keep(n)).cloned().collect();
        for n in gone {
            self.remove_node(&n);
        }
    }

    pub fn set_pdbs(&mut self, pdbs: Vec<Arc<k8s_openapi::api::policy::v1::PodDisruptionBudget>>) {
        self.snapshot.pdbs = pdbs;
    }

    pub fn set_volumes(&mut self, volumes: crate::plugins::volume::VolumeState) {
        self.snapshot.volumes = volumes;
    }

    pub fn set_namespaces(&mut self, namespaces: std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>) {
        self.snapshot.namespaces = namespaces;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str) -> Arc<Node> {
        Arc::new(serde_json::from_value(json!({"metadata": {"name": name}, "status": {"allocatable": {"cpu": "2", "memory": "1Gi", "pods": "10"}}})).unwrap())
    }

    fn pod(uid: &str, node: Option<&str>, cpu: &str) -> Arc<Pod> {
        Arc::new(serde_json::from_value(json!({"metadata": {"name": uid, "namespace": "d", "uid": uid}, "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}})).unwrap())
    }

    /// The cache after any order of events equals the snapshot built from the end state.
    #[test]
    fn follows_events_to_the_same_picture_as_a_fresh_build() {
        let mut c = SchedulerCache::default();
        c.set_pod(pod("early", Some("b"), "100m")); // before its node is known
        c.set_node(node("a"));
        c.set_node(node("b"));
        c.set_pod(pod("p1", Some("a"), "500m"));
        c.set_pod(pod("p2", None, "300m"));
        c.set_pod(pod("p2", Some("a"), "300m")); // bound
        c.set_pod(pod("p1", Some("a"), "700m")); // changed
        c.set_pod(pod("gone", Some("b"), "1"));
        c.remove_pod("gone");
        c.set_node(node("a")); // node status update keeps its pods
        let expected = Snapshot::build([node("a"), node("b")], [pod("early", Some("b"), "100m"), pod("p1", Some("a"), "700m"), pod("p2", Some("a"), "300m")]);
        let cpu = |s: &Snapshot, n: &str| s.node(n).unwrap().requested.get("cpu");
        for n in ["a", "b"] {
            assert_eq!(cpu(c.snapshot(), n), cpu(&expected, n), "node {n}");
            assert_eq!(c.snapshot().node(n).unwrap().pods.len(), expected.node(n).unwrap().pods.len());
        }
        c.remove_node("a");
        assert!(c.snapshot().node("a").is_none());
        assert_eq!(cpu(c.snapshot(), "b"), 100);
        c.set_node(node("a"));
        assert_eq!(cpu(c.snapshot(), "a"), 1000, "its pods come back with it");
    }

    fn nominated(c: &SchedulerCache, node: &str) -> Vec<String> {
        c.snapshot().nominated.get(node).into_iter().flatten().map(|p| uid(p)).collect()
    }

    #[test]
    fn nominations_last_while_the_pod_is_pending() {
        let mut c = SchedulerCache::default();
        c.set_node(node("a"));
        let mut p = (*pod("p", None, "1")).clone();
        p.status = Some(k8s_openapi::api::core::v1::PodStatus { nominated_node_name: Some("a".into()), ..Default::default() });
        c.nominate(Arc::new(p.clone()));
        assert_eq!(nominated(&c, "a"), ["p"]);
        c.set_pod(pod("p", None, "1")); // an older view without the nomination keeps it
        assert_eq!(nominated(&c, "a"), ["p"]);
        p.spec.as_mut().unwrap().node_name = Some("a".into());
        c.set_pod(Arc::new(p.clone())); // bound: the nomination is over
        assert!(nominated(&c, "a").is_empty());
        p.spec.as_mut().unwrap().node_name = None;
        c.set_pod(Arc::new(p)); // the watch shows it nominated again
        assert_eq!(nominated(&c, "a"), ["p"]);
        c.pod_gone("p");
        assert!(c.snapshot().nominated.is_empty());
    }

    #[test]
    fn a_withdrawn_nomination_stays_withdrawn_until_the_watch_shows_it_cleared() {
        let mut c = SchedulerCache::default();
        c.set_node(node("a"));
        let mut p = (*pod("p", None, "1")).clone();
        p.status = Some(k8s_openapi::api::core::v1::PodStatus { nominated_node_name: Some("a".into()), ..Default::default() });
        let nominated_view = Arc::new(p);
        c.set_pod(nominated_view.clone());
        assert!(c.is_nominated("p"));
        c.withdraw_nomination("p");
        assert!(!c.is_nominated("p"));
        c.set_pod(nominated_view.clone()); // a view from before the withdrawal landed
        assert!(nominated(&c, "a").is_empty());
        c.set_pod(pod("p", None, "1")); // the cleared nomination, watched
        c.set_pod(nominated_view.clone()); // nominated again later (by the API's state)
        assert_eq!(nominated(&c, "a"), ["p"]);
        c.withdraw_nomination("p");
        c.nominate(nominated_view); // this scheduler nominates it again itself
        assert_eq!(nominated(&c, "a"), ["p"]);
    }
}
