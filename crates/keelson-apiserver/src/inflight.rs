//! The max-in-flight filter, as kube-apiserver's `--max-requests-inflight` (400) and
//! `--max-mutating-requests-inflight` (200): read-only and mutating requests each take a
//! slot of their own pool for as long as they are served; a request finding its pool full
//! is refused at once with 429 and `Retry-After: 1`. Long-running requests (watches,
//! exec, attach, port-forward, proxy, logs) hold no slot, and `system:masters` is never
//! refused (it is the operator's way in when clients flood the server), as in Kubernetes.
//! A limit of 0 is no limit. The classification is pure.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::ApiError;

/// kube-apiserver's defaults.
pub const DEFAULT_MAX_REQUESTS_INFLIGHT: usize = 400;
pub const DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT: usize = 200;

/// The message of the refusal, as kube-apiserver words it.
pub const TOO_MANY: &str = "Too many requests, please try again later.";

const PRIVILEGED_GROUP: &str = "system:masters";

/// Which pool a request draws from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestKind {
    /// Served for as long as the client wants: never limited here.
    LongRunning,
    ReadOnly,
    Mutating,
}

impl RequestKind {
    /// The `request_kind` label of the metrics.
    pub fn label(self) -> &'static str {
        match self {
            RequestKind::LongRunning => "longRunning",
            RequestKind::ReadOnly => "readOnly",
            RequestKind::Mutating => "mutating",
        }
    }
}

/// The kind of a request from its authorization attributes.
pub fn kind_of(attrs: &keelson_rbac::Attributes) -> RequestKind {
    let (verb, subresource) = match attrs {
        keelson_rbac::Attributes::Resource(a) => (a.verb.as_str(), a.subresource.as_deref()),
        keelson_rbac::Attributes::NonResource(a) => (a.verb.as_str(), None),
    };
    if matches!(verb, "watch" | "proxy") || matches!(subresource, Some("exec" | "attach" | "portforward" | "proxy" | "log")) {
        return RequestKind::LongRunning;
    }
    match verb {
        "get" | "list" => RequestKind::ReadOnly,
        _ => RequestKind::Mutating,
    }
}

/// The two pools of one server.
#[derive(Clone)]
pub struct InflightLimits {
    read_only: Option<Arc<Semaphore>>,
    mutating: Option<Arc<Semaphore>>,
}

/// A slot held for the life of a request (none for unlimited or exempt requests).
pub struct Slot(#[allow(dead_code)] Option<OwnedSemaphorePermit>);

impl InflightLimits {
    pub fn new(max_read_only: usize, max_mutating: usize) -> Self {
        let pool = |n: usize| (n > 0).then(|| Arc::new(Semaphore::new(n)));
        Self { read_only: pool(max_read_only), mutating: pool(max_mutating) }
    }

    /// A slot for a request of `kind` by a member of `groups`, or the 429 to answer.
    pub fn admit(&self, kind: RequestKind, groups: &[String]) -> Result<Slot, ApiError> {
        let pool = match kind {
            RequestKind::LongRunning => return Ok(Slot(None)),
            RequestKind::ReadOnly => &self.read_only,
            RequestKind::Mutating => &self.mutating,
        };
        let Some(pool) = pool else { return Ok(Slot(None)) };
        match pool.clone().try_acquire_owned() {
            Ok(permit) => Ok(Slot(Some(permit))),
            Err(_) if groups.iter().any(|g| g == PRIVILEGED_GROUP) => Ok(Slot(None)),
            Err(_) => Err(ApiError::TooManyRequests(TOO_MANY.into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keelson_rbac::Attributes;

    fn resource(verb: &str, resource: &str, subresource: Option<&str>) -> Attributes {
        let mut a = keelson_rbac::ResourceAttributes::new(verb, "", resource);
        a.subresource = subresource.map(str::to_string);
        Attributes::Resource(a)
    }

    #[test]
    fn requests_are_read_only_mutating_or_long_running_as_kubernetes_sorts_them() {
        let cases = [
            (("get", "pods", None), RequestKind::ReadOnly),
            (("list", "pods", None), RequestKind::ReadOnly),
            (("watch", "pods", None), RequestKind::LongRunning),
            (("create", "pods", None), RequestKind::Mutating),
            (("patch", "pods", Some("status")), RequestKind::Mutating),
            (("delete", "pods", None), RequestKind::Mutating),
            (("deletecollection", "pods", None), RequestKind::Mutating),
            (("create", "pods", Some("exec")), RequestKind::LongRunning),
            (("get", "pods", Some("log")), RequestKind::LongRunning),
            (("create", "pods", Some("portforward")), RequestKind::LongRunning),
            (("get", "nodes", Some("proxy")), RequestKind::LongRunning),
            (("create", "pods", Some("eviction")), RequestKind::Mutating),
        ];
        for ((verb, res, sub), want) in cases {
            assert_eq!(kind_of(&resource(verb, res, sub)), want, "{verb} {res}/{sub:?}");
        }
    }

    #[test]
    fn a_full_pool_refuses_but_not_masters_and_not_the_other_pool() {
        let limits = InflightLimits::new(1, 1);
        let user = vec!["system:authenticated".to_string()];
        let held = limits.admit(RequestKind::Mutating, &user).expect("the one slot");
        let refused = limits.admit(RequestKind::Mutating, &user).err().expect("the pool is full");
        assert_eq!((refused.code(), refused.to_string().contains(TOO_MANY)), (429, true), "{refused}");
        assert!(limits.admit(RequestKind::Mutating, &["system:masters".to_string()]).is_ok(), "masters pass");
        assert!(limits.admit(RequestKind::ReadOnly, &user).is_ok(), "reads have their own pool");
        assert!(limits.admit(RequestKind::LongRunning, &user).is_ok());
        drop(held);
        assert!(limits.admit(RequestKind::Mutating, &user).is_ok(), "the slot is back once the request ends");
        let unlimited = InflightLimits::new(0, 0);
        let many: Vec<Slot> = (0..1000).map(|_| unlimited.admit(RequestKind::Mutating, &user).unwrap()).collect();
        assert_eq!(many.len(), 1000);
    }
}
