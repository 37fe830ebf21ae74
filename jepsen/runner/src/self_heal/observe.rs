//! The recorder: a watch of the workload's pods on every server, each event kept with the
//! time it arrived and the server that delivered it.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use keelson_jepsen::self_heal::{PodSeen, SeenKind};
use kube::runtime::watcher;
use kube::Api;
use tokio_util::sync::CancellationToken;

use super::objects::{NAMESPACE, WORKLOAD_LABEL};

/// Every pod state seen, shared by the watchers.
#[derive(Clone, Default)]
pub struct Recorded(Arc<Mutex<Vec<PodSeen>>>);

impl Recorded {
    fn push(&self, p: PodSeen) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(p);
    }

    /// What was recorded so far.
    pub fn take(&self) -> Vec<PodSeen> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// The recorded form of `pod` as `kind`, seen now by `server`.
pub fn seen(pod: &Pod, kind: SeenKind, server: usize, at_ms: u64) -> PodSeen {
    let meta = &pod.metadata;
    let status = pod.status.as_ref();
    PodSeen {
        at_ms,
        server,
        kind,
        uid: meta.uid.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
        workload: meta.labels.as_ref().and_then(|l| l.get(WORKLOAD_LABEL)).cloned().unwrap_or_default(),
        node: pod.spec.as_ref().and_then(|s| s.node_name.clone()).filter(|n| !n.is_empty()),
        phase: status.and_then(|s| s.phase.clone()).unwrap_or_default(),
        ready: status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True")),
        terminating: meta.deletion_timestamp.is_some(),
        revision: meta.resource_version.as_deref().and_then(|r| r.parse().ok()).unwrap_or(0),
    }
}

fn marker(kind: SeenKind, server: usize, at_ms: u64) -> PodSeen {
    PodSeen {
        at_ms,
        server,
        kind,
        uid: String::new(),
        name: String::new(),
        workload: String::new(),
        node: None,
        phase: String::new(),
        ready: false,
        terminating: false,
        revision: 0,
    }
}

/// Watches the workload's pods through `client` (server `server`) until `stop`; a watch
/// that breaks is listed again (recorded as a relist).
pub async fn watch_pods(client: kube::Client, server: usize, epoch: Instant, out: Recorded, stop: CancellationToken) {
    let api: Api<Pod> = Api::namespaced(client, NAMESPACE);
    let cfg = watcher::Config::default().labels(WORKLOAD_LABEL);
    let mut stream = watcher(api, cfg).boxed();
    let now = || epoch.elapsed().as_millis() as u64;
    loop {
        let ev = tokio::select! {
            _ = stop.cancelled() => return,
            ev = stream.next() => ev,
        };
        match ev {
            None => return,
            Some(Ok(watcher::Event::Init)) => out.push(marker(SeenKind::RelistStart, server, now())),
            Some(Ok(watcher::Event::InitApply(p))) => out.push(seen(&p, SeenKind::RelistItem, server, now())),
            Some(Ok(watcher::Event::InitDone)) => out.push(marker(SeenKind::RelistDone, server, now())),
            Some(Ok(watcher::Event::Apply(p))) => out.push(seen(&p, SeenKind::Apply, server, now())),
            Some(Ok(watcher::Event::Delete(p))) => out.push(seen(&p, SeenKind::Delete, server, now())),
            Some(Err(e)) => {
                tracing::debug!(server, error = %e, "self-heal watch broke; it lists again");
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(std::time::Duration::from_millis(500)) => {}
                }
            }
        }
    }
}
