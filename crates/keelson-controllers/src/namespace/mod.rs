//! The namespace controller: a namespace being deleted has everything in it deleted
//! through the API (so pods terminate gracefully on their nodes and finalizers are
//! honoured), its conditions say what is left, and once nothing is, the `kubernetes`
//! finalizer is removed through `namespaces/{name}/finalize`, which lets the namespace go.
//!
//! Every namespaced resource the API serves (found by discovery, custom resources
//! included) that can be listed and deleted is swept, with background propagation. The
//! term keeps one discovery for the sweeps of every namespace for up to
//! [`DISCOVERY_REUSE`]; the sweep that would let a namespace go always runs on a fresh
//! one, so a resource added meanwhile is never left behind.

pub mod reconcile;

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::{verbs, ApiCapabilities, Discovery, Scope};
use kube::runtime::reflector::ObjectRef;
use serde_json::json;

use crate::informers::SyncError;
use crate::namespaces::NamespaceCtx;
use reconcile::{conditions, needs_cleanup, resource_label, same_conditions, Sweep};

/// How soon a namespace whose content is still going is swept again.
const RECHECK: Duration = Duration::from_secs(2);

/// How long a term's discovery serves the sweeps that do not finalize.
pub const DISCOVERY_REUSE: Duration = Duration::from_secs(30);

/// One namespaced, listable and deletable resource, and whether it takes a collection
/// delete.
#[derive(Clone, Debug)]
struct Swept {
    resource: ApiResource,
    delete_collection: bool,
}

/// The term's last discovery of swept resources, and when it was made.
#[derive(Default)]
pub struct SweptResources(tokio::sync::Mutex<Option<(Instant, Arc<Vec<Swept>>)>>);

impl SweptResources {
    /// The swept resources: the cached list when `reuse` allows and it is recent, else a
    /// new discovery (which then replaces the cache). `Ok((list, fresh))`.
    async fn get(&self, client: &kube::Client, reuse: bool) -> Result<(Arc<Vec<Swept>>, bool), kube::Error> {
        let mut cached = self.0.lock().await;
        if let Some((at, list)) = cached.as_ref() {
            if reuse && at.elapsed() < DISCOVERY_REUSE {
                return Ok((list.clone(), false));
            }
        }
        let discovery = Discovery::new(client.clone()).run().await?;
        let list = Arc::new(swept_resources(&discovery));
        *cached = Some((Instant::now(), list.clone()));
        Ok((list, true))
    }
}

fn swept_resources(discovery: &Discovery) -> Vec<Swept> {
    let mut out = Vec::new();
    for group in discovery.groups() {
        for (resource, caps) in group.recommended_resources() {
            if let Some(s) = swept(resource, &caps) {
                out.push(s);
            }
        }
    }
    out
}

fn swept(resource: ApiResource, caps: &ApiCapabilities) -> Option<Swept> {
    if caps.scope != Scope::Namespaced || !caps.supports_operation(verbs::LIST) || !caps.supports_operation(verbs::DELETE) {
        return None;
    }
    Some(Swept { resource, delete_collection: caps.supports_operation(verbs::DELETE_COLLECTION) })
}

/// Syncs the namespace named `name`.
pub(crate) async fn sync(ctx: Arc<NamespaceCtx>, name: String) -> Result<Option<Duration>, SyncError> {
    let Some(ns) = ctx.namespaces.get(&ObjectRef::new(&name)) else { return Ok(None) };
    if !needs_cleanup(&ns) {
        return Ok(None);
    }
    let client = &ctx.term.client;
    let mut swept = sweep(ctx.as_ref(), &name, true).await?;
    if swept.is_clean() && !swept.fresh {
        // Only a sweep over a fresh discovery may let the namespace go.
        swept = sweep(ctx.as_ref(), &name, false).await?;
    }
    let sweep = swept;
    let api: Api<Namespace> = Api::all(client.clone());
    let previous = ns.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    let next = conditions(&sweep, &previous, &Time(jiff::Timestamp::now()));
    if !same_conditions(&previous, &next) {
        let patch = json!({"status": {"conditions": next}});
        match api.patch_status(&name, &PatchParams::default(), &Patch::Merge(patch)).await {
            Ok(_) => {}
            Err(e) if gone(&e) => return Ok(None),
            Err(e) => return Err(SyncError::from_kube(e)),
        }
    }
    if !sweep.is_clean() {
        tracing::debug!(namespace = %name, ?sweep, "namespace content remains");
        return Ok(Some(RECHECK));
    }
    let mut finalized = (*ns).clone();
    finalized.spec.get_or_insert_with(Default::default).finalizers = Some(reconcile::finalizers_after_cleanup(&ns));
    match api.replace_subresource("finalize", &name, &PostParams::default(), &finalized).await {
        Ok(_) => {
            tracing::info!(namespace = %name, "namespace content deleted; finalized");
            Ok(None)
        }
        Err(e) if gone(&e) => Ok(None),
        // The namespace changed under the sweep: sweep again.
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(Some(Duration::ZERO)),
        Err(e) => Err(SyncError::from_kube(e)),
    }
}

fn gone(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// Deletes what is in namespace `ns` and counts what is left, over the term's discovery
/// when `reuse` allows. Failures other than a fenced write are recorded in the sweep, not
/// returned.
async fn sweep(ctx: &NamespaceCtx, ns: &str, reuse: bool) -> Result<Sweep, SyncError> {
    let client = &ctx.term.client;
    let mut sweep = Sweep::default();
    let resources = match ctx.swept.get(client, reuse).await {
        Ok((list, fresh)) => {
            sweep.fresh = fresh;
            list
        }
        Err(e) => {
            sweep.discovery_failures.push(e.to_string());
            return Ok(sweep);
        }
    };
    for s in resources.iter() {
        let label = resource_label(&s.resource.plural, &s.resource.group);
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &s.resource);
        let params = DeleteParams::background();
        let deleted = if s.delete_collection { api.delete_collection(&params, &ListParams::default()).await.map(|_| ()) } else { delete_each(&api, &params).await };
        if let Err(e) = deleted {
            if keelson_component::fence::is_fenced(&e) {
                return Err(SyncError::Fenced);
            }
            if !gone(&e) {
                sweep.deletion_failures.push(format!("{label}: {e}"));
                continue;
            }
        }
        match api.list(&ListParams::default()).await {
            Ok(left) => {
                for o in left.items {
                    sweep.left(&label, o.metadata.finalizers.as_deref().unwrap_or(&[]));
                }
            }
            Err(e) if gone(&e) => {}
            Err(e) => sweep.deletion_failures.push(format!("{label}: {e}")),
        }
    }
    Ok(sweep)
}

/// Deletes the objects of a resource that has no collection delete, one by one.
async fn delete_each(api: &Api<DynamicObject>, params: &DeleteParams) -> Result<(), kube::Error> {
    for o in api.list(&ListParams::default()).await?.items {
        let Some(name) = o.metadata.name else { continue };
        match api.delete(&name, params).await {
            Ok(_) => {}
            Err(e) if gone(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
