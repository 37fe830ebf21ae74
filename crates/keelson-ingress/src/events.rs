//! Warning Events on Ingresses for their [`Problem`]s. Every node finds the same
//! problems, so an Event is named by what it says (`<ingress>.<hash of uid, reason and
//! message>`): the first node to record it creates it, the others' creates are refused
//! as existing, and a problem is one Event however many nodes serve. A problem that goes
//! away and comes back finds its Event there and is not recorded again.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Event, ObjectReference};
use keelson_component::events::{event, EventType};
use kube::api::{Api, PostParams};

use crate::routes::Problem;

/// The component Events are attributed to.
pub const COMPONENT: &str = "keelson-ingress";

/// 64-bit FNV-1a: a hash every node computes alike.
fn fnv1a(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain([0u8]) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// The Event for `p` about the Ingress with `uid`, named by its content.
pub fn problem_event(p: &Problem, uid: &str, instance: &str, now: jiff::Timestamp) -> Event {
    let regarding = ObjectReference {
        api_version: Some("networking.k8s.io/v1".into()),
        kind: Some("Ingress".into()),
        namespace: Some(p.namespace.clone()),
        name: Some(p.ingress.clone()),
        uid: Some(uid.into()),
        ..Default::default()
    };
    let mut e = event(&regarding, EventType::Warning, p.reason, &p.message, COMPONENT, instance, now);
    e.metadata.name = Some(format!("{}.{:016x}", p.ingress, fnv1a(&[uid, p.reason, &p.message])));
    e
}

/// Records each problem once.
pub struct Reporter {
    client: kube::Client,
    instance: String,
    /// Problems recorded (or found recorded) and still present.
    reported: BTreeSet<(String, Problem)>,
}

impl Reporter {
    pub fn new(client: kube::Client, instance: &str) -> Self {
        Self { client, instance: instance.into(), reported: BTreeSet::new() }
    }

    /// Records the problems not recorded yet; `uids` are those of our Ingresses by
    /// namespace/name (problems of others are dropped).
    pub async fn report(&mut self, problems: &[Problem], uids: &BTreeMap<(String, String), String>) {
        let mut now_present = BTreeSet::new();
        for p in problems {
            let Some(uid) = uids.get(&(p.namespace.clone(), p.ingress.clone())) else { continue };
            let entry = (uid.clone(), p.clone());
            if !self.reported.contains(&entry) {
                let ev = problem_event(p, uid, &self.instance, jiff::Timestamp::now());
                let api: Api<Event> = Api::namespaced(self.client.clone(), &p.namespace);
                match api.create(&PostParams::default(), &ev).await {
                    Ok(_) => tracing::info!(ingress = %format!("{}/{}", p.namespace, p.ingress), reason = p.reason, detail = %p.message, "ingress problem"),
                    Err(kube::Error::Api(s)) if s.code == 409 => {}
                    Err(e) => {
                        tracing::debug!(error = %e, "could not record an ingress Event; will try again");
                        continue;
                    }
                }
            }
            now_present.insert(entry);
        }
        self.reported = now_present;
    }
}
