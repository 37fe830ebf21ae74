//! Authorization: RBAC over a snapshot of the cluster's Roles, ClusterRoles and
//! bindings, kept current by a watch on the store.
//!
//! A denial is final only after the snapshot has caught up with the store: on a deny,
//! the authorizer re-reads the RBAC objects linearizably (one refresh shared by all
//! requests waiting at that moment) and decides again, so a grant that was
//! acknowledged before a request started is always honoured.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use keelson_client::api::{WatchCreate, WatchResponseKind};
use keelson_mvcc::{EventKind, KeyRange, Revision};
use keelson_rbac::{Attributes, Decision, RbacKind, RbacSnapshot, UserInfo};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use crate::error::ApiError;
use crate::storage::ObjectStore;

/// Store prefix of every RBAC object.
const RBAC_PREFIX: &[u8] = b"/registry/rbac.authorization.k8s.io/";

/// The group whose members may do anything.
pub const SUPERUSER_GROUP: &str = "system:masters";

struct Cached {
    snapshot: Arc<RbacSnapshot>,
    revision: Revision,
}

pub struct RbacAuthorizer {
    store: ObjectStore,
    cached: RwLock<Cached>,
    /// When the last deny-triggered reload started.
    refresh: Mutex<Option<tokio::time::Instant>>,
}

fn kind_of_key(key: &[u8]) -> Option<RbacKind> {
    let rest = key.strip_prefix(RBAC_PREFIX)?;
    let resource = std::str::from_utf8(rest).ok()?.split('/').next()?;
    RbacKind::from_resource(resource)
}

impl RbacAuthorizer {
    /// Starts the authorizer and the watch that keeps it current.
    pub fn start(store: ObjectStore, shutdown: CancellationToken) -> Arc<Self> {
        let a = Arc::new(Self { store, cached: RwLock::new(Cached { snapshot: Arc::new(RbacSnapshot::new()), revision: 0 }), refresh: Mutex::new(None) });
        let me = a.clone();
        tokio::spawn(async move {
            loop {
                if let Err(e) = me.follow(&shutdown).await {
                    tracing::debug!(error = %e, "RBAC watch ended; restarting");
                }
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                }
            }
        });
        a
    }

    /// Reads every RBAC object linearizably and replaces the snapshot.
    async fn reload(&self) -> Result<Revision, ApiError> {
        let mut objects: Vec<(RbacKind, serde_json::Value)> = Vec::new();
        let mut after: Option<Vec<u8>> = None;
        let mut revision = 0;
        loop {
            let page = self.store.list_page(RBAC_PREFIX, after.as_deref(), revision, 1000, revision > 0).await?;
            revision = page.revision;
            for item in page.items {
                let kind = item.obj.get("kind").and_then(|k| k.as_str()).and_then(RbacKind::from_kind);
                if let Some(k) = kind {
                    objects.push((k, item.obj));
                }
            }
            match page.next_after {
                Some(k) => after = Some(k),
                None => break,
            }
        }
        let mut snap = RbacSnapshot::new();
        for (k, o) in &objects {
            let _ = snap.upsert(*k, o);
        }
        let mut c = self.cached.write().expect("lock");
        if revision >= c.revision {
            *c = Cached { snapshot: Arc::new(snap), revision };
        }
        Ok(revision)
    }

    async fn follow(&self, shutdown: &CancellationToken) -> Result<(), ApiError> {
        let start = self.reload().await?;
        let create = WatchCreate { watch_id: 1, range: KeyRange::prefix(RBAC_PREFIX.to_vec()), start_revision: start + 1, prev_kv: false, progress_notify: true };
        let (_ctl, mut stream) = self.store.client().watch(create).await?;
        loop {
            let msg = tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                m = stream.next() => m,
            };
            let Some(msg) = msg else { return Ok(()) };
            let resp = msg?;
            match resp.kind {
                WatchResponseKind::Events(events) => {
                    let mut c = self.cached.write().expect("lock");
                    let mut snap = (*c.snapshot).clone();
                    for ev in &events {
                        let Some(kind) = kind_of_key(&ev.kv.key) else { continue };
                        match ev.kind {
                            EventKind::Put => {
                                if let Ok(s) = self.store.decode(&ev.kv) {
                                    let _ = snap.upsert(kind, &s.obj);
                                }
                            }
                            EventKind::Delete => {
                                let key = String::from_utf8_lossy(&ev.kv.key).to_string();
                                let parts: Vec<&str> = key.trim_start_matches(std::str::from_utf8(RBAC_PREFIX).expect("ascii")).split('/').collect();
                                match parts.as_slice() {
                                    [_, ns, name] => snap.remove(kind, Some(ns), name),
                                    [_, name] => snap.remove(kind, None, name),
                                    _ => false,
                                };
                            }
                        }
                    }
                    c.snapshot = Arc::new(snap);
                    c.revision = c.revision.max(events.last().map(|e| e.kv.mod_revision).unwrap_or(0));
                }
                WatchResponseKind::Progress => {
                    let mut c = self.cached.write().expect("lock");
                    c.revision = c.revision.max(resp.header.revision);
                }
                WatchResponseKind::Compacted { .. } | WatchResponseKind::Canceled { .. } => return Ok(()),
                WatchResponseKind::Created { .. } => {}
            }
        }
    }

    fn decide(&self, user: &UserInfo, attrs: &Attributes) -> (Decision, Revision) {
        let c = self.cached.read().expect("lock");
        (c.snapshot.authorize(user, attrs), c.revision)
    }

    /// The snapshot, for rules reviews.
    pub fn snapshot(&self) -> Arc<RbacSnapshot> {
        self.cached.read().expect("lock").snapshot.clone()
    }

    /// Decides a request; a denial is re-checked against a freshly read snapshot.
    pub async fn authorize(&self, user: &UserInfo, attrs: &Attributes) -> Result<Decision, ApiError> {
        if user.groups.iter().any(|g| g == SUPERUSER_GROUP) {
            return Ok(Decision::Allow { reason: format!("member of {SUPERUSER_GROUP}") });
        }
        let arrival = tokio::time::Instant::now();
        let (d, _) = self.decide(user, attrs);
        if matches!(d, Decision::Allow { .. }) {
            return Ok(d);
        }
        let mut last = self.refresh.lock().await;
        // A reload that started after this request arrived already covers it.
        if last.is_none_or(|t| t < arrival) {
            *last = Some(tokio::time::Instant::now());
            self.reload().await?;
        }
        Ok(self.decide(user, attrs).0)
    }
}
