//! Local mirrors of resources: a kube-rs reflector whose changes are handed to a route
//! (the controllers queue the objects' keys), and the node components' variant that
//! rebuilds a whole view at each change (the proxy's ruleset, the DNS zone) by pinging
//! one shared [`Notify`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, watcher};
use kube::runtime::WatchStreamExt;
use tokio::sync::Notify;

/// One change a reflector saw, after its store took it.
pub enum Change<'a, K> {
    /// The start of an initial (re)list: until [`Change::InitDone`] the store still holds
    /// the previous list.
    Init,
    /// An object added or modified while watching.
    Apply(&'a K),
    /// An object of an initial (re)list.
    InitApply(&'a K),
    Delete(&'a K),
    /// The end of an initial (re)list.
    InitDone,
}

impl<'a, K> Change<'a, K> {
    /// The object changed, if the change is about one.
    pub fn object(&self) -> Option<&'a K> {
        match self {
            Change::Apply(o) | Change::InitApply(o) | Change::Delete(o) => Some(o),
            Change::Init | Change::InitDone => None,
        }
    }
}

/// Drops from an object, before it is mirrored, what no component reads:
/// `metadata.managedFields`, server-side apply's ownership records, which are often the
/// larger part of a small object (a pod's status patches, a node's heartbeats). A write
/// made from a mirrored copy keeps the stored records, as an update without
/// managedFields does.
pub fn strip_for_mirror<K: kube::Resource>(o: &mut K) {
    o.meta_mut().managed_fields = None;
}

/// Mirrors what `config` selects of `api` into a store, handing every change to `route`;
/// a watch error goes to `on_error`, then the watch resumes half a second later. The
/// task runs until aborted.
pub fn routed_reflector<K, R, E, Fut>(api: Api<K>, config: watcher::Config, route: R, on_error: E) -> (Store<K>, tokio::task::JoinHandle<()>)
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    R: Fn(Change<'_, K>) + Send + 'static,
    E: Fn(watcher::Error) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let (store, writer) = reflector::store();
    (store, routed_reflector_into(writer, api, config, route, on_error))
}

/// [`routed_reflector`] into the store of `writer`, made by the caller (who can then hand
/// the store to its route).
pub fn routed_reflector_into<K, R, E, Fut>(writer: reflector::store::Writer<K>, api: Api<K>, config: watcher::Config, route: R, on_error: E) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    R: Fn(Change<'_, K>) + Send + 'static,
    E: Fn(watcher::Error) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let stream = reflector::reflector(writer, watcher(api, config).modify(strip_for_mirror));
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(watcher::Event::Apply(o)) => route(Change::Apply(&o)),
                Ok(watcher::Event::InitApply(o)) => route(Change::InitApply(&o)),
                Ok(watcher::Event::Delete(o)) => route(Change::Delete(&o)),
                Ok(watcher::Event::InitDone) => route(Change::InitDone),
                Ok(watcher::Event::Init) => route(Change::Init),
                Err(e) => {
                    on_error(e).await;
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    })
}

/// Mirrors `api` into a store, notifying `changed` after each change (once for a whole
/// initial list); `what` names the component in logs. The task runs until aborted.
pub fn notifying_reflector<K>(api: Api<K>, changed: Arc<Notify>, what: &'static str) -> (Store<K>, tokio::task::JoinHandle<()>)
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    let route = move |c: Change<'_, K>| {
        if !matches!(c, Change::Init | Change::InitApply(_)) {
            changed.notify_one();
        }
    };
    routed_reflector(api, watcher::Config::default(), route, move |e| async move { tracing::debug!(error = %e, component = what, "watch; retrying") })
}
