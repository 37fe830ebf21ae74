//! The reflectors and work queues of the volume controller (binder and local-path
//! provisioner): a claim goes to itself and to the volume it names, a volume to itself
//! and to the claim its `claimRef` names, a StorageClass to every unbound claim of it (and
//! every unbound claim naming no class, for the retroactive default), a
//! Node to every unbound claim that selected it. Each term also makes sure the default
//! StorageClass `local-path` exists. One term runs them until it ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use keelson_component::events::EventRecorder;
use keelson_component::Leadership;
use kube::api::{Api, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};

use crate::informers::key_of;
use crate::volume::binder::{self, SELECTED_NODE};
use crate::volume::provisioner;
use crate::work::{named_queue, WorkQueue};

/// What the volume controller of one term shares.
pub struct VolumeCtx {
    pub term: Leadership,
    pub claims: Store<PersistentVolumeClaim>,
    pub volumes: Store<PersistentVolume>,
    pub classes: Store<StorageClass>,
    pub nodes: Store<Node>,
    pub claim_queue: WorkQueue,
    pub volume_queue: WorkQueue,
    pub events: EventRecorder,
    /// The last Pending Event of each claim, so a claim waiting for the same reason is
    /// told once, not at every sync.
    last_event: Mutex<HashMap<String, (String, String)>>,
}

impl VolumeCtx {
    /// Whether this (reason, message) is new for the claim (remembering it).
    pub fn new_event(&self, key: &str, reason: &str, message: &str) -> bool {
        let mut m = self.last_event.lock().expect("events lock");
        let v = (reason.to_string(), message.to_string());
        if m.get(key) == Some(&v) {
            return false;
        }
        m.insert(key.to_string(), v);
        true
    }

    pub fn forget_event(&self, key: &str) {
        self.last_event.lock().expect("events lock").remove(key);
    }
}

impl crate::informers::TermContext for VolumeCtx {
    fn term(&self) -> &Leadership {
        &self.term
    }
}

fn unbound(c: &PersistentVolumeClaim) -> bool {
    c.spec.as_ref().and_then(|s| s.volume_name.as_deref()).is_none_or(str::is_empty)
}

/// Runs the volume controller until the term ends.
pub async fn run(term: Leadership, reflectors: Arc<crate::shared_reflectors::SharedReflectors>) {
    let client = term.client.clone();
    let (claim_queue, claim_rx) = named_queue(&term, "claims");
    let (volume_queue, volume_rx) = named_queue(&term, "volumes");
    let claims = {
        let (cq, vq) = (claim_queue.clone(), volume_queue.clone());
        reflectors.watch(move |c: &PersistentVolumeClaim| {
            cq.add(&key_of(c));
            if let Some(v) = c.spec.as_ref().and_then(|s| s.volume_name.as_deref()).filter(|v| !v.is_empty()) {
                vq.add(v);
            }
        })
    };
    let volumes = {
        let (cq, vq) = (claim_queue.clone(), volume_queue.clone());
        reflectors.watch(move |v: &PersistentVolume| {
            vq.add(v.metadata.name.as_deref().unwrap_or(""));
            if let Some(r) = v.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) {
                cq.add(&format!("{}/{}", r.namespace.as_deref().unwrap_or("default"), r.name.as_deref().unwrap_or("")));
            }
        })
    };
    let classes = {
        let (cq, cs) = (claim_queue.clone(), claims.clone());
        reflectors.watch(move |sc: &StorageClass| {
            let names_none = |c: &PersistentVolumeClaim| c.spec.as_ref().is_some_and(|s| s.storage_class_name.is_none());
            for c in cs.state().iter().filter(|c| unbound(c) && (names_none(c) || binder::claim_class(c) == sc.metadata.name.as_deref().unwrap_or(""))) {
                cq.add(&key_of(c.as_ref()));
            }
        })
    };
    let nodes = {
        let (cq, cs) = (claim_queue.clone(), claims.clone());
        reflectors.watch(move |n: &Node| {
            let name = n.metadata.name.as_deref();
            for c in cs.state().iter().filter(|c| unbound(c) && binder::annotation(&c.metadata, SELECTED_NODE) == name) {
                cq.add(&key_of(c.as_ref()));
            }
        })
    };
    let ctx = Arc::new(VolumeCtx {
        events: EventRecorder::new(client.clone(), "persistentvolume-controller", &term.identity),
        term: term.clone(),
        claims,
        volumes,
        classes,
        nodes,
        claim_queue,
        volume_queue,
        last_event: Mutex::default(),
    });
    // Every mirror this group asked for (and any other group's so far) has listed.
    let ready = reflectors.listed();
    tokio::select! {
        _ = term.ended.cancelled() => {}
        _ = async {
            ready.await;
            tracing::info!("volume controller active");
            tokio::join!(
                crate::informers::work(&ctx, claim_rx, &ctx.claim_queue, "persistentvolume-binder", crate::volume::sync_claim),
                crate::informers::work(&ctx, volume_rx, &ctx.volume_queue, "persistentvolume", crate::volume::sync_volume),
                ensure_default_class(&ctx),
            );
        } => {}
    }
}

/// Creates the `local-path` StorageClass once per term when it is missing.
async fn ensure_default_class(ctx: &VolumeCtx) {
    loop {
        if ctx.classes.get(&ObjectRef::new(provisioner::LOCAL_PATH_CLASS)).is_some() {
            return;
        }
        let api: Api<StorageClass> = Api::all(ctx.term.client.clone());
        match api.create(&PostParams::default(), &provisioner::default_class()).await {
            Ok(_) => {
                tracing::info!("created the default StorageClass local-path");
                return;
            }
            Err(kube::Error::Api(s)) if s.code == 409 => return,
            Err(e) => {
                if keelson_component::fence::is_fenced(&e) {
                    ctx.term.step_down();
                    return;
                }
                tracing::info!(error = %e, "creating the local-path StorageClass; retrying");
            }
        }
        tokio::select! {
            _ = ctx.term.ended.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
        }
    }
}
