//! A local mirror of one resource for node components that rebuild a whole view at each
//! change (the proxy's ruleset, the DNS zone): a kube-rs reflector whose every change
//! (and the end of each initial list) pings one shared [`Notify`].

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, watcher};
use tokio::sync::Notify;

/// Mirrors `api` into a store, notifying `changed` after each change; `what` names the
/// component in logs. The task runs until aborted.
pub fn notifying_reflector<K>(api: Api<K>, changed: Arc<Notify>, what: &'static str) -> (Store<K>, tokio::task::JoinHandle<()>)
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    let (store, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()));
    let task = tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone) => changed.notify_one(),
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(error = %e, component = what, "watch; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    });
    (store, task)
}
