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
use tokio::sync::Notify;

/// One change a reflector saw, after its store took it.
pub enum Change<'a, K> {
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
            Change::InitDone => None,
        }
    }
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
    let stream = reflector::reflector(writer, watcher(api, config));
    let task = tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(watcher::Event::Apply(o)) => route(Change::Apply(&o)),
                Ok(watcher::Event::InitApply(o)) => route(Change::InitApply(&o)),
                Ok(watcher::Event::Delete(o)) => route(Change::Delete(&o)),
                Ok(watcher::Event::InitDone) => route(Change::InitDone),
                Ok(watcher::Event::Init) => {}
                Err(e) => {
                    on_error(e).await;
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    });
    (store, task)
}

/// Mirrors `api` into a store, notifying `changed` after each change (once for a whole
/// initial list); `what` names the component in logs. The task runs until aborted.
pub fn notifying_reflector<K>(api: Api<K>, changed: Arc<Notify>, what: &'static str) -> (Store<K>, tokio::task::JoinHandle<()>)
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    let route = move |c: Change<'_, K>| {
        if !matches!(c, Change::InitApply(_)) {
            changed.notify_one();
        }
    };
    routed_reflector(api, watcher::Config::default(), route, move |e| async move { tracing::debug!(error = %e, component = what, "watch; retrying") })
}
