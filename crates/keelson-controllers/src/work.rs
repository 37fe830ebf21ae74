//! A controller's work queue: keys (`namespace/name`), each queued at most once at a
//! time, so a burst of events for one object costs one sync; a key that is queued again
//! while being synced is synced again afterwards (level-triggered).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;

#[derive(Clone)]
pub struct WorkQueue {
    tx: mpsc::UnboundedSender<String>,
    queued: Arc<Mutex<HashSet<String>>>,
}

pub struct WorkReceiver {
    rx: mpsc::UnboundedReceiver<String>,
    queued: Arc<Mutex<HashSet<String>>>,
}

pub fn work_queue() -> (WorkQueue, WorkReceiver) {
    let (tx, rx) = mpsc::unbounded_channel();
    let queued = Arc::new(Mutex::new(HashSet::new()));
    (WorkQueue { tx, queued: queued.clone() }, WorkReceiver { rx, queued })
}

impl WorkQueue {
    pub fn add(&self, key: &str) {
        if self.queued.lock().expect("queue lock").insert(key.to_string()) {
            let _ = self.tx.send(key.to_string());
        }
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
        let key = self.rx.recv().await?;
        self.queued.lock().expect("queue lock").remove(&key);
        Some(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_key_is_queued_once_until_taken() {
        let (q, mut r) = work_queue();
        q.add("a/x");
        q.add("a/x");
        q.add("a/y");
        assert_eq!(r.next().await.as_deref(), Some("a/x"));
        q.add("a/x"); // queued again while being synced
        assert_eq!(r.next().await.as_deref(), Some("a/y"));
        assert_eq!(r.next().await.as_deref(), Some("a/x"));
        drop(q);
        assert_eq!(r.next().await, None);
    }
}
