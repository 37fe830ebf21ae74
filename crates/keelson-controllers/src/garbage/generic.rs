//! The garbage collector for every other kind the API serves: discovery finds each
//! resource that can be listed, watched and deleted (custom resources included), a
//! metadata-only reflector mirrors each, and a sweep every few seconds judges the owners
//! of kinds the controller manager's own sweeps do not ([`OWNER_KINDS`] and
//! [`WORKLOAD_OWNER_KINDS`]): a ConfigMap owned by a custom resource, a node Lease owned
//! by its Node, anything owned by a Pod. Decisions are [`collect_owned_by`]'s; nothing
//! is deleted before a live read confirms its owners are gone. Discovery is redone every
//! few minutes, so resources added later are covered.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use keelson_component::Leadership;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::discovery::{verbs, Discovery, Scope};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, watcher};
use kube::runtime::WatchStreamExt;

use super::reconcile::{OWNER_KINDS, WORKLOAD_OWNER_KINDS};
use super::Kinds;

const SWEEP_EVERY: Duration = Duration::from_secs(5);
const REDISCOVER_EVERY: Duration = Duration::from_secs(300);

struct Mirror {
    kind: String,
    store: Store<PartialObjectMeta<DynamicObject>>,
    /// Set once the first list is in the store.
    listed: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

/// A metadata reflector of `resource`, retrying its watch until aborted.
fn mirror(client: &kube::Client, resource: &ApiResource) -> Mirror {
    let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(client.clone(), resource);
    let writer = reflector::store::Writer::new(resource.clone());
    let store = writer.as_reader();
    let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()).modify(keelson_component::mirror::strip_for_mirror));
    let kind = resource.kind.clone();
    let listed = Arc::new(AtomicBool::new(false));
    let flag = listed.clone();
    let task = tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(watcher::Event::InitDone) => flag.store(true, Ordering::Relaxed),
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(error = %e, kind = %kind, "garbage collector watch; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    });
    Mirror { kind: resource.kind.clone(), store, listed, task }
}

/// The resources to mirror and how to reach each kind.
async fn discover(client: &kube::Client) -> Option<(Vec<ApiResource>, Kinds)> {
    let discovery = match Discovery::new(client.clone()).run().await {
        Ok(d) => d,
        Err(e) => {
            tracing::info!(error = %e, "garbage collector discovery; retrying later");
            return None;
        }
    };
    let mut resources = Vec::new();
    let mut kinds = Kinds::default();
    for group in discovery.groups() {
        for (resource, caps) in group.recommended_resources() {
            if ![verbs::LIST, verbs::WATCH, verbs::DELETE, verbs::PATCH].iter().all(|v| caps.supports_operation(v)) || kinds.knows(&resource.kind) {
                continue;
            }
            kinds.add(&resource.kind, resource.clone(), caps.scope == Scope::Namespaced);
            resources.push(resource);
        }
    }
    Some((resources, kinds))
}

/// Sweeps until the term ends.
pub(crate) async fn run(term: Leadership) {
    let client = term.client.clone();
    let mut mirrors: Vec<Mirror> = Vec::new();
    let mut kinds = Kinds::default();
    let mut discovered_at: Option<tokio::time::Instant> = None;
    loop {
        if discovered_at.is_none_or(|t| t.elapsed() >= REDISCOVER_EVERY) {
            if let Some((resources, found)) = discover(&client).await {
                let new: Vec<&ApiResource> = resources.iter().filter(|r| !mirrors.iter().any(|m| m.kind == r.kind)).collect();
                for r in new {
                    mirrors.push(mirror(&client, r));
                }
                kinds = found;
                discovered_at = Some(tokio::time::Instant::now());
            }
        }
        tokio::select! {
            _ = term.ended.cancelled() => break,
            _ = tokio::time::sleep(SWEEP_EVERY) => {}
        }
        // Judge only once every mirror has listed: an owner missing from an unlisted
        // mirror must not look gone (the live read would catch it, but needlessly).
        if mirrors.iter().any(|m| !m.listed.load(Ordering::Relaxed)) {
            continue;
        }
        let states: Vec<(String, Vec<Arc<PartialObjectMeta<DynamicObject>>>)> = mirrors.iter().map(|m| (m.kind.clone(), m.store.state())).collect();
        let objects: Vec<(&str, &ObjectMeta)> = states.iter().flat_map(|(k, objs)| objs.iter().map(move |o| (k.as_str(), &o.metadata))).collect();
        let owner_kinds: Vec<&str> = mirrors.iter().map(|m| m.kind.as_str()).filter(|k| !OWNER_KINDS.contains(k) && !WORKLOAD_OWNER_KINDS.contains(k)).collect();
        if !super::sweep(&term, &kinds, &objects, &owner_kinds).await {
            break;
        }
    }
    for m in mirrors {
        m.task.abort();
    }
}
