//! A component that is denied something says so: a warning in its log and a Warning
//! Event `Forbidden` on its Lease, once per distinct denial and term. It never retries
//! under another identity.

use std::collections::HashSet;
use std::sync::Mutex;

use crate::events::{EventRecorder, EventType};

/// The message of a 403, if `e` is one.
pub fn forbidden(e: &kube::Error) -> Option<String> {
    match e {
        kube::Error::Api(s) if s.code == 403 => Some(s.message.clone()),
        _ => None,
    }
}

/// The message of a 403 behind a watch failure, if it is one.
pub fn forbidden_in_watch(e: &kube::runtime::watcher::Error) -> Option<String> {
    use kube::runtime::watcher::Error as W;
    match e {
        W::InitialListFailed(e) | W::WatchStartFailed(e) | W::WatchFailed(e) => forbidden(e),
        W::WatchError(s) if s.code == 403 => Some(s.message.clone()),
        _ => None,
    }
}

/// Reports denials of one component's term.
pub struct DenialReporter {
    recorder: EventRecorder,
    component: String,
    lease: (String, String),
    seen: Mutex<HashSet<String>>,
}

impl DenialReporter {
    pub fn new(recorder: EventRecorder, component: &str, namespace: &str, lease: &str) -> Self {
        Self { recorder, component: component.into(), lease: (namespace.into(), lease.into()), seen: Mutex::default() }
    }

    /// Logs and records `message` the first time it is seen; later ones are only logged
    /// at debug level.
    pub async fn report(&self, message: &str) {
        let first = self.seen.lock().expect("denials lock").insert(message.to_string());
        if !first {
            tracing::debug!(component = %self.component, denial = %message, "denied again");
            return;
        }
        tracing::error!(component = %self.component, denial = %message, "the API server denied a request of this component; its RBAC role does not allow it");
        let note = format!("{} was denied a request: {message}", self.component);
        let lease = k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some("coordination.k8s.io/v1".into()),
            kind: Some("Lease".into()),
            namespace: Some(self.lease.0.clone()),
            name: Some(self.lease.1.clone()),
            ..Default::default()
        };
        if !self.recorder.try_publish(&lease, EventType::Warning, "Forbidden", &note).await {
            // Not recorded (at start the API may not yet let this component write
            // Events either): the next time it is denied this, it is reported again.
            self.seen.lock().expect("denials lock").remove(message);
        }
    }

    /// Reports `e` if it is a denial; returns whether it was.
    pub async fn check(&self, e: &kube::Error) -> bool {
        match forbidden(e) {
            Some(m) => {
                self.report(&m).await;
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, message: &str) -> kube::Error {
        let s: kube::core::Status = serde_json::from_value(serde_json::json!({"status": "Failure", "code": code, "reason": "Forbidden", "message": message})).unwrap();
        kube::Error::Api(Box::new(s))
    }

    #[test]
    fn recognises_denials_directly_and_behind_watches() {
        assert_eq!(forbidden(&status(403, "pods is forbidden")).as_deref(), Some("pods is forbidden"));
        assert_eq!(forbidden(&status(409, "conflict")), None);
        let w = kube::runtime::watcher::Error::InitialListFailed(status(403, "nodes is forbidden"));
        assert_eq!(forbidden_in_watch(&w).as_deref(), Some("nodes is forbidden"));
        assert_eq!(forbidden_in_watch(&kube::runtime::watcher::Error::NoResourceVersion), None);
    }
}
