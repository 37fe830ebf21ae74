//! A controller's work queue: keys (`namespace/name`), each queued at most once at a
//! time, so a burst of events for one object costs one sync; a key that is queued again
//! while being synced is synced again afterwards (level-triggered). Each queue reports
//! client-go's `workqueue_*` metrics under its name.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keelson_component::metrics::QueueMetrics;
use tokio::sync::mpsc;

#[derive(Clone)]
pub struct WorkQueue {
    tx: mpsc::UnboundedSender<(String, Instant)>,
    queued: Arc<Mutex<HashSet<String>>>,
    metrics: QueueMetrics,
}

pub struct WorkReceiver {
    rx: mpsc::UnboundedReceiver<(String, Instant)>,
    queued: Arc<Mutex<HashSet<String>>>,
    metrics: QueueMetrics,
}

/// A queue whose metrics are `metrics` (from `ElectionMetrics::queue(name)`).
pub fn work_queue(metrics: QueueMetrics) -> (WorkQueue, WorkReceiver) {
    let (tx, rx) = mpsc::unbounded_channel();
    let queued = Arc::new(Mutex::new(HashSet::new()));
    (WorkQueue { tx, queued: queued.clone(), metrics: metrics.clone() }, WorkReceiver { rx, queued, metrics })
}

/// The queue called `name` of this term, reporting to the process's metrics.
pub fn named_queue(term: &keelson_component::Leadership, name: &str) -> (WorkQueue, WorkReceiver) {
    work_queue(term.metrics.queue(name))
}

impl WorkQueue {
    pub fn add(&self, key: &str) {
        if self.queued.lock().expect("queue lock").insert(key.to_string()) && self.tx.send((key.to_string(), Instant::now())).is_ok() {
            self.metrics.added();
        }
    }

    /// Queues `key` again a second later: its sync failed.
    pub fn retry(&self, key: &str) {
        self.metrics.retried();
        self.add_after(key, Duration::from_secs(1));
    }

    /// Queues `key` after `delay` (a retry, or a time-based condition to re-check).
    pub fn add_after(&self, key: &str, delay: Duration) {
        let q = self.clone();
        let key = key.to_string();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            q.add(&key);
        });
    }
}

impl WorkReceiver {
    /// The next key to sync; `None` when every sender is gone.
    pub async fn next(&mut self) -> Option<String> {
        let (key, queued_at) = self.rx.recv().await?;
        self.queued.lock().expect("queue lock").remove(&key);
        self.metrics.taken(queued_at.elapsed());
        Some(key)
    }

    /// A key taken from this queue was synced in `took`.
    pub fn worked(&self, took: Duration) {
        self.metrics.worked(took);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_key_is_queued_once_until_taken() {
        let metrics = keelson_component::ElectionMetrics::default();
        let (q, mut r) = work_queue(metrics.queue("test"));
        q.add("a/x");
        q.add("a/x");
        q.add("a/y");
        assert_eq!(r.next().await.as_deref(), Some("a/x"));
        q.add("a/x"); // queued again while being synced
        assert_eq!(r.next().await.as_deref(), Some("a/y"));
        assert_eq!(r.next().await.as_deref(), Some("a/x"));
        // Three adds reached the queue (the second "a/x" was already waiting), all taken.
        let text = metrics.render();
        assert!(text.contains("workqueue_adds_total{name=\"test\"} 3"), "{text}");
        assert!(text.contains("workqueue_depth{name=\"test\"} 0"), "{text}");
        assert!(text.contains("workqueue_queue_duration_seconds_count{name=\"test\"} 3"), "{text}");
        drop(q);
        assert_eq!(r.next().await, None);
    }
}
