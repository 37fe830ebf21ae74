//! The scheduling queue, as Kubernetes' (`pkg/scheduler/backend/queue`): pods wait in
//! *active* (highest priority first, then oldest), *backoff* (after a failed attempt: 1 s
//! doubling to 10 s) or *unschedulable* (no node fit; moved back by a cluster event that
//! could make one fit, or after 5 minutes at most). Pure: every call takes the time.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use tokio::time::Instant;

pub const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// Longest a pod stays unschedulable without a retry.
pub const MAX_UNSCHEDULABLE: Duration = Duration::from_secs(300);

/// `namespace/name`.
pub type PodKey = String;

#[derive(Clone, Debug)]
struct Entry {
    priority: i32,
    seq: u64,
    attempts: u32,
    /// When the last failed attempt ended.
    failed_at: Option<Instant>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    Active,
    Backoff(Instant),
    Unschedulable(Instant),
    /// Popped and being scheduled.
    InFlight,
}

#[derive(Default)]
pub struct SchedulingQueue {
    entries: HashMap<PodKey, (Entry, Place)>,
    /// (Reverse(priority), seq) → key: the first is the next to pop.
    active: BTreeMap<(Reverse<i32>, u64), PodKey>,
    backoff: BTreeSet<(Instant, u64, PodKey)>,
    next_seq: u64,
}

/// Queue lengths: active, backoff, unschedulable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lengths {
    pub active: usize,
    pub backoff: usize,
    pub unschedulable: usize,
}

impl SchedulingQueue {
    pub fn backoff_for(attempts: u32) -> Duration {
        let exp = attempts.saturating_sub(1).min(16);
        (INITIAL_BACKOFF * 2u32.pow(exp)).min(MAX_BACKOFF)
    }

    fn place(&mut self, key: &str, place: Place) {
        let Some((entry, old)) = self.entries.get_mut(key) else { return };
        match *old {
            Place::Active => {
                self.active.remove(&(Reverse(entry.priority), entry.seq));
            }
            Place::Backoff(at) => {
                self.backoff.remove(&(at, entry.seq, key.to_string()));
            }
            Place::Unschedulable(_) | Place::InFlight => {}
        }
        *old = place;
        match place {
            Place::Active => {
                self.active.insert((Reverse(entry.priority), entry.seq), key.to_string());
            }
            Place::Backoff(at) => {
                self.backoff.insert((at, entry.seq, key.to_string()));
            }
            Place::Unschedulable(_) | Place::InFlight => {}
        }
    }

    /// A pending pod was added or changed: new pods go to active; a changed pod that was
    /// unschedulable is tried again (after its backoff).
    pub fn add(&mut self, key: &str, priority: i32, now: Instant) {
        match self.entries.get_mut(key) {
            None => {
                self.next_seq += 1;
                self.entries.insert(key.to_string(), (Entry { priority, seq: self.next_seq, attempts: 0, failed_at: None }, Place::InFlight));
                self.place(key, Place::Active);
            }
            Some((entry, place)) => {
                if entry.priority != priority {
                    let p = *place;
                    self.place(key, Place::InFlight);
                    self.entries.get_mut(key).expect("present").0.priority = priority;
                    self.place(key, p);
                }
                if matches!(self.entries[key].1, Place::Unschedulable(_)) {
                    self.retry(key, now);
                }
            }
        }
    }

    /// Back to active, or to backoff while the last failure's backoff lasts.
    fn retry(&mut self, key: &str, now: Instant) {
        let (entry, _) = &self.entries[key];
        let ready = entry.failed_at.map(|f| f + Self::backoff_for(entry.attempts));
        match ready {
            Some(at) if at > now => self.place(key, Place::Backoff(at)),
            _ => self.place(key, Place::Active),
        }
    }

    /// The pod is bound or gone.
    pub fn remove(&mut self, key: &str) {
        self.place(key, Place::InFlight);
        self.entries.remove(key);
    }

    /// The next pod to schedule, moving pods whose backoff is over to active first.
    pub fn pop(&mut self, now: Instant) -> Option<PodKey> {
        self.flush(now);
        let (_, key) = self.active.pop_first()?;
        if let Some((_, place)) = self.entries.get_mut(&key) {
            *place = Place::InFlight;
        }
        Some(key)
    }

    /// Moves due backoff pods to active, and pods unschedulable for too long back.
    pub fn flush(&mut self, now: Instant) {
        while let Some((at, _, key)) = self.backoff.first().cloned() {
            if at > now {
                break;
            }
            self.place(&key, Place::Active);
        }
        let stale: Vec<PodKey> = self
            .entries
            .iter()
            .filter(|(_, (_, p))| matches!(p, Place::Unschedulable(since) if now.duration_since(*since) >= MAX_UNSCHEDULABLE))
            .map(|(k, _)| k.clone())
            .collect();
        for key in stale {
            self.retry(&key, now);
        }
    }

    /// The attempt failed for a passing reason (the bind failed, the API was away).
    pub fn backoff(&mut self, key: &str, now: Instant) {
        let Some((entry, _)) = self.entries.get_mut(key) else { return };
        entry.attempts += 1;
        entry.failed_at = Some(now);
        let at = now + Self::backoff_for(entry.attempts);
        self.place(key, Place::Backoff(at));
    }

    /// No node fits: wait for a cluster event.
    pub fn unschedulable(&mut self, key: &str, now: Instant) {
        let Some((entry, _)) = self.entries.get_mut(key) else { return };
        entry.attempts += 1;
        entry.failed_at = Some(now);
        self.place(key, Place::Unschedulable(now));
    }

    /// A cluster event that could make unschedulable pods fit (a node added or changed,
    /// a pod deleted or finished): they are tried again, after their backoff.
    pub fn cluster_changed(&mut self, now: Instant) {
        let keys: Vec<PodKey> = self.entries.iter().filter(|(_, (_, p))| matches!(p, Place::Unschedulable(_))).map(|(k, _)| k.clone()).collect();
        for key in keys {
            self.retry(&key, now);
        }
    }

    /// When the next backoff ends, if any pod is in backoff.
    pub fn next_ready(&self) -> Option<Instant> {
        self.backoff.first().map(|(at, _, _)| *at)
    }

    pub fn contains(&self, key: &str) -> bool {
        self.entries.contains_key(key)
    }

    pub fn lengths(&self) -> Lengths {
        let unschedulable = self.entries.values().filter(|(_, p)| matches!(p, Place::Unschedulable(_))).count();
        Lengths { active: self.active.len(), backoff: self.backoff.len(), unschedulable }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_one_to_ten_seconds() {
        let b: Vec<u64> = (1..=6).map(|a| SchedulingQueue::backoff_for(a).as_secs()).collect();
        assert_eq!(b, vec![1, 2, 4, 8, 10, 10]);
    }

    #[test]
    fn higher_priority_first_then_oldest() {
        let now = Instant::now();
        let mut q = SchedulingQueue::default();
        q.add("ns/a", 0, now);
        q.add("ns/b", 100, now);
        q.add("ns/c", 0, now);
        assert_eq!(q.pop(now).as_deref(), Some("ns/b"));
        assert_eq!(q.pop(now).as_deref(), Some("ns/a"));
        assert_eq!(q.pop(now).as_deref(), Some("ns/c"));
        assert_eq!(q.pop(now), None);
    }

    #[test]
    fn failed_attempts_wait_out_their_backoff() {
        let t0 = Instant::now();
        let mut q = SchedulingQueue::default();
        q.add("ns/a", 0, t0);
        assert_eq!(q.pop(t0).as_deref(), Some("ns/a"));
        q.backoff("ns/a", t0);
        assert_eq!(q.lengths(), Lengths { active: 0, backoff: 1, unschedulable: 0 });
        assert_eq!(q.next_ready(), Some(t0 + Duration::from_secs(1)));
        assert_eq!(q.pop(t0 + Duration::from_millis(999)), None);
        assert_eq!(q.pop(t0 + Duration::from_secs(1)).as_deref(), Some("ns/a"));
        q.backoff("ns/a", t0 + Duration::from_secs(1));
        assert_eq!(q.next_ready(), Some(t0 + Duration::from_secs(3)), "second failure: 2 s");
    }

    #[test]
    fn unschedulable_pods_return_on_cluster_events_or_after_five_minutes() {
        let t0 = Instant::now();
        let mut q = SchedulingQueue::default();
        q.add("ns/a", 0, t0);
        q.add("ns/b", 0, t0);
        for k in ["ns/a", "ns/b"] {
            assert_eq!(q.pop(t0).as_deref(), Some(k));
            q.unschedulable(k, t0);
        }
        assert_eq!(q.lengths().unschedulable, 2);
        assert_eq!(q.pop(t0 + Duration::from_secs(60)), None, "nothing changed: they wait");
        // A node was added 5 s later: past their 1 s backoff, both are active again.
        q.cluster_changed(t0 + Duration::from_secs(5));
        assert_eq!(q.lengths(), Lengths { active: 2, backoff: 0, unschedulable: 0 });
        // Unschedulable again; a cluster event within the backoff sends them to backoff.
        let t1 = t0 + Duration::from_secs(6);
        for _ in 0..2 {
            let k = q.pop(t1).unwrap();
            q.unschedulable(&k, t1);
        }
        q.cluster_changed(t1 + Duration::from_millis(500));
        assert_eq!(q.lengths().backoff, 2);
        // Without events, five minutes bring them back.
        let t2 = t1 + Duration::from_secs(10);
        for _ in 0..2 {
            let k = q.pop(t2).unwrap();
            q.unschedulable(&k, t2);
        }
        assert_eq!(q.pop(t2 + Duration::from_secs(299)), None);
        assert!(q.pop(t2 + MAX_UNSCHEDULABLE).is_some());
    }

    #[test]
    fn removed_and_updated_pods() {
        let t0 = Instant::now();
        let mut q = SchedulingQueue::default();
        q.add("ns/a", 0, t0);
        q.remove("ns/a");
        assert_eq!(q.pop(t0), None);
        assert!(!q.contains("ns/a"));
        q.add("ns/b", 0, t0);
        q.pop(t0);
        q.unschedulable("ns/b", t0);
        // The pod itself changed (e.g. a toleration added): retried after its backoff.
        q.add("ns/b", 0, t0 + Duration::from_secs(2));
        assert_eq!(q.pop(t0 + Duration::from_secs(2)).as_deref(), Some("ns/b"));
    }
}
