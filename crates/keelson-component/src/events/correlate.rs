//! Repeats of one Event folded into one object, as Kubernetes' event correlator does: the
//! same source, object, type, reason and message raise the stored Event's `count` and
//! `lastTimestamp` instead of writing a new Event, so `kubectl describe` says
//! "(x5 over 2m)" rather than listing five lines. Pure: the recorder's sink executes what
//! [`Correlator::plan`] decides and tells it what was stored.

use std::collections::{HashMap, VecDeque};

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// How many distinct Events one recorder remembers (Kubernetes' LRU holds 4,096).
pub const REMEMBERED: usize = 4096;

/// What makes two Events repeats of each other.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    object: [Option<String>; 5],
    type_: Option<String>,
    reason: Option<String>,
    message: Option<String>,
    component: Option<String>,
}

impl Key {
    pub fn of(ev: &Event) -> Self {
        let o = &ev.involved_object;
        Self {
            object: [o.api_version.clone(), o.kind.clone(), o.namespace.clone(), o.name.clone(), o.uid.clone()],
            type_: ev.type_.clone(),
            reason: ev.reason.clone(),
            message: ev.message.clone(),
            component: ev.source.as_ref().and_then(|s| s.component.clone()),
        }
    }
}

/// The write one Event needs.
#[derive(Clone, Debug, PartialEq)]
pub enum Write {
    /// A new Event object.
    Create(Box<Event>),
    /// A repeat: the stored Event `namespace/name` gets `count` and `last_timestamp`.
    Bump { namespace: String, name: String, count: i32, last_timestamp: Option<Time> },
}

#[derive(Clone, Debug)]
struct Stored {
    namespace: String,
    name: String,
    count: i32,
}

/// The Events a recorder stored, by [`Key`], oldest forgotten first.
#[derive(Debug)]
pub struct Correlator {
    stored: HashMap<Key, Stored>,
    order: VecDeque<Key>,
    capacity: usize,
}

impl Default for Correlator {
    fn default() -> Self {
        Self::with_capacity(REMEMBERED)
    }
}

impl Correlator {
    pub fn with_capacity(capacity: usize) -> Self {
        Self { stored: HashMap::new(), order: VecDeque::new(), capacity: capacity.max(1) }
    }

    /// The write for `ev`: a bump of the Event stored for its repeats, else a create.
    pub fn plan(&self, ev: Event) -> Write {
        match self.stored.get(&Key::of(&ev)) {
            Some(s) => Write::Bump { namespace: s.namespace.clone(), name: s.name.clone(), count: s.count + 1, last_timestamp: ev.last_timestamp },
            None => Write::Create(Box::new(ev)),
        }
    }

    /// `ev`'s repeats are now Event `namespace/name`, seen `count` times.
    pub fn stored(&mut self, key: Key, namespace: &str, name: &str, count: i32) {
        if !self.stored.contains_key(&key) {
            if self.stored.len() >= self.capacity {
                if let Some(oldest) = self.order.pop_front() {
                    self.stored.remove(&oldest);
                }
            }
            self.order.push_back(key.clone());
        }
        self.stored.insert(key, Stored { namespace: namespace.into(), name: name.into(), count });
    }

    /// The Event stored for `key` is gone (expired, deleted): the next repeat creates one.
    pub fn forget(&mut self, key: &Key) {
        if self.stored.remove(key).is_some() {
            self.order.retain(|k| k != key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{event, EventType};
    use k8s_openapi::api::core::v1::ObjectReference;

    fn pod(name: &str) -> ObjectReference {
        ObjectReference { kind: Some("Pod".into()), namespace: Some("default".into()), name: Some(name.into()), uid: Some(format!("uid-{name}")), ..Default::default() }
    }

    fn at(s: i64, regarding: &ObjectReference, reason: &str, message: &str) -> Event {
        event(regarding, EventType::Warning, reason, message, "kube-scheduler", "s_1", jiff::Timestamp::from_second(1_800_000_000 + s).unwrap())
    }

    #[test]
    fn repeats_bump_the_stored_event_and_others_create_their_own() {
        let mut c = Correlator::default();
        let first = at(0, &pod("a"), "FailedScheduling", "0/3 nodes are available");
        let Write::Create(created) = c.plan(first.clone()) else { panic!("the first is created") };
        let name = created.metadata.name.clone().unwrap();
        c.stored(Key::of(&first), "default", &name, 1);
        let again = at(30, &pod("a"), "FailedScheduling", "0/3 nodes are available");
        assert_eq!(
            c.plan(again.clone()),
            Write::Bump { namespace: "default".into(), name: name.clone(), count: 2, last_timestamp: again.last_timestamp.clone() }
        );
        c.stored(Key::of(&again), "default", &name, 2);
        assert!(matches!(c.plan(at(60, &pod("a"), "FailedScheduling", "0/3 nodes are available")), Write::Bump { count: 3, .. }));
        // Another message, another object, another reason: each its own Event.
        assert!(matches!(c.plan(at(60, &pod("a"), "FailedScheduling", "0/4 nodes are available")), Write::Create(_)));
        assert!(matches!(c.plan(at(60, &pod("b"), "FailedScheduling", "0/3 nodes are available")), Write::Create(_)));
        assert!(matches!(c.plan(at(60, &pod("a"), "Scheduled", "0/3 nodes are available")), Write::Create(_)));
    }

    #[test]
    fn a_forgotten_or_evicted_event_is_created_again() {
        let mut c = Correlator::with_capacity(2);
        let evs: Vec<Event> = ["a", "b", "c"].iter().map(|n| at(0, &pod(n), "Killing", "Stopping container c")).collect();
        for (i, ev) in evs.iter().enumerate() {
            c.stored(Key::of(ev), "default", &format!("e{i}"), 1);
        }
        assert!(matches!(c.plan(evs[0].clone()), Write::Create(_)), "the oldest was evicted");
        assert!(matches!(c.plan(evs[2].clone()), Write::Bump { .. }));
        c.forget(&Key::of(&evs[2]));
        assert!(matches!(c.plan(evs[2].clone()), Write::Create(_)));
        assert!(matches!(c.plan(evs[1].clone()), Write::Bump { .. }));
    }
}
