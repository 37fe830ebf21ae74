//! Events as Kubernetes components write them: core/v1 Events (what `kubectl get events`
//! and `kubectl describe` show), with the component as source and reporting controller
//! and its holder identity as reporting instance.

mod correlate;

use std::sync::{Arc, OnceLock};

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};
use tokio::sync::mpsc;
use tracing::Instrument;

pub use correlate::{Correlator, Key, Write};

/// `Normal` or `Warning`, as Kubernetes spells them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// Records Events for one component instance. [`publish`](Self::publish) queues the
/// Event and returns: a background sink (started with the first Event, ended when the
/// last clone of the recorder is dropped, after writing what is queued) writes them in
/// order, folds repeats into one Event's count, and tries refusals that may pass again,
/// so a reconcile never waits on an Event. A full queue drops the Event with a warning, as
/// Kubernetes' broadcaster does.
#[derive(Clone)]
pub struct EventRecorder {
    inner: Arc<Recorder>,
}

struct Recorder {
    client: kube::Client,
    component: String,
    instance: String,
    sink: OnceLock<mpsc::Sender<Event>>,
}

/// Events queued per recorder before new ones are dropped (Kubernetes' broadcaster: 1,000).
const QUEUED: usize = 1000;

/// The Event recording `reason`/`message` about `regarding`, at `now`.
pub fn event(regarding: &ObjectReference, type_: EventType, reason: &str, message: &str, component: &str, instance: &str, now: jiff::Timestamp) -> Event {
    let name = format!("{}.{:x}", regarding.name.as_deref().unwrap_or("event"), now.as_nanosecond());
    Event {
        metadata: ObjectMeta { name: Some(name), namespace: Some(regarding.namespace.clone().unwrap_or_else(|| "default".into())), ..Default::default() },
        involved_object: regarding.clone(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        type_: Some(format!("{type_:?}")),
        source: Some(EventSource { component: Some(component.into()), host: None }),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        count: Some(1),
        event_time: Some(MicroTime(now)),
        action: Some(reason.into()),
        reporting_component: Some(component.into()),
        reporting_instance: Some(instance.into()),
        ..Default::default()
    }
}

impl EventRecorder {
    pub fn new(client: kube::Client, component: &str, instance: &str) -> Self {
        Self { inner: Arc::new(Recorder { client, component: component.into(), instance: instance.into(), sink: OnceLock::new() }) }
    }

    /// A Normal Event on Lease `namespace/name` (`LeaderElection`: "X became leader").
    pub async fn lease_event(&self, namespace: &str, name: &str, reason: &str, message: &str) {
        let regarding = ObjectReference {
            api_version: Some("coordination.k8s.io/v1".into()),
            kind: Some("Lease".into()),
            namespace: Some(namespace.into()),
            name: Some(name.into()),
            ..Default::default()
        };
        self.publish(&regarding, EventType::Normal, reason, message).await;
    }

    /// An Event on any object, queued for the sink. Failing to record is logged, never fatal.
    pub async fn publish(&self, regarding: &ObjectReference, type_: EventType, reason: &str, message: &str) {
        let ev = self.event(regarding, type_, reason, message);
        let sink = self.inner.sink.get_or_init(|| {
            let (tx, rx) = mpsc::channel(QUEUED);
            // The sink outlives whatever span first published: it is a root of its own,
            // so it does not keep that span (a request, a scheduling cycle) open forever.
            tokio::spawn(sink(self.inner.client.clone(), rx).instrument(tracing::info_span!(parent: None, "event_sink", component = %self.inner.component)));
            tx
        });
        if let Err(mpsc::error::TrySendError::Full(ev)) = sink.try_send(ev) {
            tracing::warn!(reason = ev.reason.as_deref().unwrap_or_default(), "Event queue full: Event dropped");
        }
    }

    /// The Event now, recorded inline (no queue, no folding of repeats), saying whether it
    /// was stored: for a caller that acts on the answer.
    pub async fn try_publish(&self, regarding: &ObjectReference, type_: EventType, reason: &str, message: &str) -> bool {
        let ev = self.event(regarding, type_, reason, message);
        create(&self.inner.client, &ev).await.is_ok()
    }

    fn event(&self, regarding: &ObjectReference, type_: EventType, reason: &str, message: &str) -> Event {
        event(regarding, type_, reason, message, &self.inner.component, &self.inner.instance, jiff::Timestamp::now())
    }
}

/// Writes queued Events until every sender is gone.
async fn sink(client: kube::Client, mut queue: mpsc::Receiver<Event>) {
    let mut correlator = Correlator::default();
    while let Some(ev) = queue.recv().await {
        let key = Key::of(&ev);
        match correlator.plan(ev.clone()) {
            Write::Create(ev) => {
                if create(&client, &ev).await.is_ok() {
                    correlator.stored(key, ev.metadata.namespace.as_deref().unwrap_or_default(), ev.metadata.name.as_deref().unwrap_or_default(), 1);
                }
            }
            Write::Bump { namespace, name, count, last_timestamp } => {
                let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
                let patch = Patch::Merge(serde_json::json!({"count": count, "lastTimestamp": last_timestamp}));
                let params = PatchParams::default();
                let bumped = with_retries(ev.reason.as_deref().unwrap_or_default(), || api.patch(&name, &params, &patch)).await;
                match bumped {
                    Ok(_) => correlator.stored(key, &namespace, &name, count),
                    Err(Some(kube::Error::Api(s))) if s.code == 404 => {
                        // The stored one expired or was deleted: this repeat starts anew.
                        correlator.forget(&key);
                        if create(&client, &ev).await.is_ok() {
                            correlator.stored(key, ev.metadata.namespace.as_deref().unwrap_or_default(), ev.metadata.name.as_deref().unwrap_or_default(), 1);
                        }
                    }
                    Err(_) => {}
                }
            }
        }
    }
}

/// Creates `ev`, trying again refusals that may pass.
async fn create(client: &kube::Client, ev: &Event) -> Result<(), Option<kube::Error>> {
    let api: Api<Event> = Api::namespaced(client.clone(), ev.metadata.namespace.as_deref().unwrap_or("default"));
    let mut attempt = 0;
    with_retries(ev.reason.as_deref().unwrap_or_default(), || {
        attempt += 1;
        let first = attempt == 1;
        let api = api.clone();
        async move {
            match api.create(&PostParams::default(), ev).await {
                // An earlier attempt was stored after all.
                Err(kube::Error::Api(s)) if !first && s.code == 409 && s.reason == "AlreadyExists" => Ok(()),
                r => r.map(|_| ()),
            }
        }
    })
    .await
    .map(|_| ())
}

/// Runs `write` until it succeeds, fails for good, or [`PUBLISH_ATTEMPTS`] are spent. A
/// refusal that may pass on its own (429, a 5xx, a connection lost on the way to a server
/// that is going away) is tried again, as Kubernetes' recorder does; the error is logged
/// and returned (`None` when it was one that may pass, all attempts spent).
async fn with_retries<T, F, Fut>(reason: &str, mut write: F) -> Result<T, Option<kube::Error>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let mut pause = RETRY_FIRST_PAUSE;
    for attempt in 1..=PUBLISH_ATTEMPTS {
        match write().await {
            Ok(v) => return Ok(v),
            Err(e) if attempt < PUBLISH_ATTEMPTS && may_pass(&e) => {
                tracing::debug!(reason, attempt, error = %e, "recording an Event again");
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
            Err(e) => {
                tracing::warn!(reason, error = %e, "could not record an Event");
                return Err((!may_pass(&e)).then_some(e));
            }
        }
    }
    Err(None)
}

/// Attempts at recording one Event, and the pause after the first failed one (doubling).
const PUBLISH_ATTEMPTS: u32 = 5;
const RETRY_FIRST_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);

/// Whether a refused Event write may pass if tried again.
fn may_pass(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_worded_and_attributed_as_kubernetes_components_do() {
        let regarding = ObjectReference { kind: Some("Lease".into()), namespace: Some("kube-system".into()), name: Some("kube-scheduler".into()), ..Default::default() };
        let now = jiff::Timestamp::from_second(1_800_000_000).unwrap();
        let e = event(&regarding, EventType::Normal, "LeaderElection", "a_1 became leader", "kube-scheduler", "a_1", now);
        assert_eq!(e.metadata.namespace.as_deref(), Some("kube-system"));
        assert!(e.metadata.name.as_deref().unwrap().starts_with("kube-scheduler."));
        assert_eq!(e.type_.as_deref(), Some("Normal"));
        assert_eq!(e.source.unwrap().component.as_deref(), Some("kube-scheduler"));
        assert_eq!(e.count, Some(1));
        assert_eq!(e.involved_object.name.as_deref(), Some("kube-scheduler"));
    }

    #[test]
    fn only_refusals_that_may_pass_are_tried_again() {
        let status = |code: u16, reason: &str| kube::Error::Api(Box::new(serde_json::from_value(serde_json::json!({"status": "Failure", "code": code, "reason": reason, "message": "x"})).unwrap()));
        assert!(may_pass(&status(429, "TooManyRequests")));
        assert!(may_pass(&status(503, "ServiceUnavailable")));
        assert!(!may_pass(&status(409, "Fenced")));
        assert!(!may_pass(&status(403, "Forbidden")));
        assert!(!may_pass(&status(422, "Invalid")));
    }
}
