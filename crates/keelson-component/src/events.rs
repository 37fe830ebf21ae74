//! Events as Kubernetes components write them: core/v1 Events (what `kubectl get events`
//! and `kubectl describe` show), with the component as source and reporting controller
//! and its holder identity as reporting instance.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::api::{Api, PostParams};

/// `Normal` or `Warning`, as Kubernetes spells them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// Records Events for one component instance.
#[derive(Clone)]
pub struct EventRecorder {
    client: kube::Client,
    component: String,
    instance: String,
}

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
        Self { client, component: component.into(), instance: instance.into() }
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

    /// An Event on any object. Failing to record is logged, never fatal.
    pub async fn publish(&self, regarding: &ObjectReference, type_: EventType, reason: &str, message: &str) {
        self.try_publish(regarding, type_, reason, message).await;
    }

    /// [`publish`](Self::publish), saying whether the Event was recorded. A refusal that
    /// may pass on its own (429, a 5xx, a connection lost on the way to a server that is
    /// going away) is tried again a few times, as Kubernetes' recorder does; any other
    /// refusal is final.
    pub async fn try_publish(&self, regarding: &ObjectReference, type_: EventType, reason: &str, message: &str) -> bool {
        let ev = event(regarding, type_, reason, message, &self.component, &self.instance, jiff::Timestamp::now());
        let api: Api<Event> = Api::namespaced(self.client.clone(), ev.metadata.namespace.as_deref().unwrap_or("default"));
        let mut pause = RETRY_FIRST_PAUSE;
        for attempt in 1..=PUBLISH_ATTEMPTS {
            match api.create(&PostParams::default(), &ev).await {
                Ok(_) => return true,
                // An earlier attempt was recorded after all.
                Err(kube::Error::Api(s)) if attempt > 1 && s.code == 409 && s.reason == "AlreadyExists" => return true,
                Err(e) if attempt < PUBLISH_ATTEMPTS && may_pass(&e) => {
                    tracing::debug!(reason, attempt, error = %e, "recording an Event again");
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
                Err(e) => {
                    tracing::warn!(reason, error = %e, "could not record an Event");
                    return false;
                }
            }
        }
        false
    }
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
