//! The max-in-flight filter with API Priority and Fairness' isolation, as kube-apiserver's
//! `--max-requests-inflight` (400) and `--max-mutating-requests-inflight` (200): read-only
//! and mutating requests each take a seat of their own pool for as long as they are served.
//! Within a pool, seats are shared by priority levels and, within a level, fairly by flows
//! ([`priority`] says which level and flow a request is, [`seats`] keeps the count): a
//! client flooding the server takes seats from its own level only, and from its own share
//! of it, so the nodes, the scheduler and the controllers keep theirs. A request finding no
//! seat is refused at once with 429 and `Retry-After: 1`. Long-running requests (watches,
//! exec, attach, port-forward, proxy, logs) hold no seat, and `system:masters` and health
//! probes are exempt (the operator's way in when clients flood the server), as in
//! Kubernetes. A limit of 0 is no limit. The classification is pure.

pub mod priority;
pub mod seats;

use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::error::ApiError;
use priority::{Classification, PriorityLevel};
use seats::{Refusal, SeatLedger};

/// kube-apiserver's defaults.
pub const DEFAULT_MAX_REQUESTS_INFLIGHT: usize = 400;
pub const DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT: usize = 200;

/// The message of the refusal, as kube-apiserver words it.
pub const TOO_MANY: &str = "Too many requests, please try again later.";

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

type Pool = Arc<Mutex<SeatLedger>>;

/// The two pools of one server.
#[derive(Clone)]
pub struct InflightLimits {
    read_only: Option<Pool>,
    mutating: Option<Pool>,
}

/// A seat held for the life of a request (none for unlimited, long-running or exempt
/// requests); given back when dropped.
pub struct Slot(Option<(Pool, PriorityLevel, String)>);

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some((pool, level, flow)) = self.0.take() {
            pool.lock().unwrap_or_else(|p| p.into_inner()).give_back(level, &flow);
        }
    }
}

/// A request refused a seat.
#[derive(Debug)]
pub struct Refused {
    pub reason: Refusal,
}

impl Refused {
    /// The 429 to answer.
    pub fn error(&self) -> ApiError {
        ApiError::TooManyRequests(TOO_MANY.into())
    }
}

impl InflightLimits {
    pub fn new(max_read_only: usize, max_mutating: usize) -> Self {
        let pool = |n: usize| (n > 0).then(|| Arc::new(Mutex::new(SeatLedger::new(n))));
        Self { read_only: pool(max_read_only), mutating: pool(max_mutating) }
    }

    /// A seat for a request of `kind` classified as `class`, or why not.
    pub fn admit(&self, kind: RequestKind, class: &Classification) -> Result<Slot, Refused> {
        let pool = match kind {
            RequestKind::LongRunning => return Ok(Slot(None)),
            RequestKind::ReadOnly => &self.read_only,
            RequestKind::Mutating => &self.mutating,
        };
        let Some(pool) = pool else { return Ok(Slot(None)) };
        if class.level == PriorityLevel::Exempt {
            return Ok(Slot(None));
        }
        let taken = pool.lock().unwrap_or_else(|p| p.into_inner()).take(class.level, &class.flow, Instant::now());
        match taken {
            Ok(()) => Ok(Slot(Some((pool.clone(), class.level, class.flow.clone())))),
            Err(reason) => Err(Refused { reason }),
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
        let alice = keelson_rbac::UserInfo { name: "alice".into(), groups: vec!["system:authenticated".into()], ..Default::default() };
        let admin = keelson_rbac::UserInfo { name: "admin".into(), groups: vec!["system:masters".into()], ..Default::default() };
        let create = resource("create", "configmaps", None);
        let (user, master) = (priority::classify(&create, Some(&alice)), priority::classify(&create, Some(&admin)));
        let held = limits.admit(RequestKind::Mutating, &user).ok().expect("the one slot");
        let refused = limits.admit(RequestKind::Mutating, &user).err().expect("the pool is full");
        assert_eq!(refused.reason, Refusal::ConcurrencyLimit);
        let e = refused.error();
        assert_eq!((e.code(), e.to_string().contains(TOO_MANY)), (429, true), "{e}");
        assert!(limits.admit(RequestKind::Mutating, &master).is_ok(), "masters pass");
        assert!(limits.admit(RequestKind::ReadOnly, &user).is_ok(), "reads have their own pool");
        assert!(limits.admit(RequestKind::LongRunning, &user).is_ok());
        drop(held);
        assert!(limits.admit(RequestKind::Mutating, &user).is_ok(), "the slot is back once the request ends");
        let unlimited = InflightLimits::new(0, 0);
        let many: Vec<Slot> = (0..1000).map(|_| unlimited.admit(RequestKind::Mutating, &user).ok().unwrap()).collect();
        assert_eq!(many.len(), 1000);
    }

    #[test]
    fn a_flooding_user_leaves_the_nodes_and_the_scheduler_their_seats() {
        let limits = InflightLimits::new(0, 50);
        let flooder = keelson_rbac::UserInfo { name: "flooder".into(), groups: vec!["system:authenticated".into()], ..Default::default() };
        let node = keelson_rbac::UserInfo { name: "system:node:n1".into(), groups: vec!["system:nodes".into()], ..Default::default() };
        let scheduler = keelson_rbac::UserInfo { name: "system:kube-scheduler".into(), ..Default::default() };
        let create = resource("create", "configmaps", None);
        let flood = priority::classify(&create, Some(&flooder));
        let mut held = Vec::new();
        while let Ok(slot) = limits.admit(RequestKind::Mutating, &flood) {
            held.push(slot);
        }
        assert!(held.len() < 50, "the flooder took {} of 50", held.len());
        let bind = priority::classify(&resource("create", "pods", Some("binding")), Some(&scheduler));
        let heartbeat = priority::classify(&resource("patch", "nodes", Some("status")), Some(&node));
        assert!(limits.admit(RequestKind::Mutating, &bind).is_ok(), "the scheduler binds");
        assert!(limits.admit(RequestKind::Mutating, &heartbeat).is_ok(), "the node reports");
        drop(held);
        assert!(limits.admit(RequestKind::Mutating, &flood).is_ok());
    }
}
