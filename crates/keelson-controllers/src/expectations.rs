//! Expectations, as Kubernetes' ReplicaSet controller keeps them: after creating or
//! deleting pods, a controller does not sync that object again until its watch shows
//! what it did (or 5 minutes pass), so a slow watch never makes it create twice.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// How long expectations are trusted before a sync goes ahead anyway.
pub const EXPECTATIONS_TTL: Duration = Duration::from_secs(300);

#[derive(Default)]
struct Expected {
    creates: HashSet<String>,
    deletes: HashSet<String>,
    since: Option<Instant>,
}

#[derive(Default)]
pub struct Expectations {
    inner: Mutex<HashMap<String, Expected>>,
}

impl Expectations {
    /// `key` created pods named `names`.
    pub fn created(&self, key: &str, names: impl IntoIterator<Item = String>, now: Instant) {
        let mut inner = self.inner.lock().expect("expectations lock");
        let e = inner.entry(key.to_string()).or_default();
        e.creates.extend(names);
        e.since.get_or_insert(now);
    }

    /// `key` deleted pods named `names`.
    pub fn deleted(&self, key: &str, names: impl IntoIterator<Item = String>, now: Instant) {
        let mut inner = self.inner.lock().expect("expectations lock");
        let e = inner.entry(key.to_string()).or_default();
        e.deletes.extend(names);
        e.since.get_or_insert(now);
    }

    /// Whether `key` may sync: every pod it created is `seen`, every pod it deleted is
    /// `gone` (absent or terminating), or the expectations are too old to trust.
    pub fn satisfied(&self, key: &str, now: Instant, seen: impl Fn(&str) -> bool, gone: impl Fn(&str) -> bool) -> bool {
        let mut inner = self.inner.lock().expect("expectations lock");
        let Some(e) = inner.get_mut(key) else { return true };
        e.creates.retain(|n| !seen(n));
        e.deletes.retain(|n| !gone(n));
        let expired = e.since.is_some_and(|s| now.duration_since(s) >= EXPECTATIONS_TTL);
        if (e.creates.is_empty() && e.deletes.is_empty()) || expired {
            inner.remove(key);
            return true;
        }
        false
    }

    /// The object is gone: forget what it expected.
    pub fn forget(&self, key: &str) {
        self.inner.lock().expect("expectations lock").remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_for_the_watch_to_show_creates_and_deletes() {
        let e = Expectations::default();
        let t0 = Instant::now();
        assert!(e.satisfied("d/web", t0, |_| false, |_| false), "nothing expected");
        e.created("d/web", ["web-a".to_string(), "web-b".to_string()], t0);
        e.deleted("d/web", ["web-old".to_string()], t0);
        assert!(!e.satisfied("d/web", t0, |n| n == "web-a", |_| false));
        assert!(!e.satisfied("d/web", t0, |n| n == "web-b", |_| false), "the delete is not seen yet");
        assert!(e.satisfied("d/web", t0, |_| false, |n| n == "web-old"), "a is remembered as seen");
    }

    #[test]
    fn expire_after_five_minutes() {
        let e = Expectations::default();
        let t0 = Instant::now();
        e.created("d/web", ["web-a".to_string()], t0);
        assert!(!e.satisfied("d/web", t0 + Duration::from_secs(299), |_| false, |_| false));
        assert!(e.satisfied("d/web", t0 + EXPECTATIONS_TTL, |_| false, |_| false));
    }
}
