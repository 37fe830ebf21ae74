//! The Leases the scheduler and the controller manager hold in `kube-system`, read for
//! the status views (`keelson status` and the web UI): who holds each, how often it
//! changed hands, when it was last renewed.

use serde::Serialize;
use serde_json::Value;

/// Where the component Leases live.
pub const NAMESPACE: &str = "kube-system";

/// The component Leases, in the order the views show them.
pub const NAMES: [&str; 2] = ["kube-scheduler", "kube-controller-manager"];

/// One component Lease as the views show it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ComponentLease {
    pub name: String,
    /// `None` when the Lease does not exist or is released.
    pub holder: Option<String>,
    pub transitions: i64,
    pub renew_time: Option<String>,
}

impl ComponentLease {
    /// Lease `name` read from its stored object (`None`: there is no such Lease).
    pub fn read(name: &str, lease: Option<&Value>) -> Self {
        let field = |p: &str| lease.and_then(|l| l.pointer(p));
        ComponentLease {
            name: name.to_string(),
            holder: field("/spec/holderIdentity").and_then(Value::as_str).filter(|h| !h.is_empty()).map(String::from),
            transitions: field("/spec/leaseTransitions").and_then(Value::as_i64).unwrap_or(0),
            renew_time: field("/spec/renewTime").and_then(Value::as_str).map(String::from),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_lease_reads_holder_transitions_and_renewal_and_a_released_one_no_holder() {
        let held = json!({"spec": {"holderIdentity": "keelson-2_ab", "leaseTransitions": 3, "renewTime": "t"}});
        assert_eq!(
            ComponentLease::read("kube-scheduler", Some(&held)),
            ComponentLease { name: "kube-scheduler".into(), holder: Some("keelson-2_ab".into()), transitions: 3, renew_time: Some("t".into()) }
        );
        let released = json!({"spec": {"holderIdentity": "", "leaseTransitions": 4}});
        assert_eq!(ComponentLease::read("x", Some(&released)), ComponentLease { name: "x".into(), transitions: 4, ..Default::default() });
        assert_eq!(ComponentLease::read("x", None), ComponentLease { name: "x".into(), ..Default::default() });
    }
}
