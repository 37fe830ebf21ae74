//! Fencing writes on a Lease: a write that names a Lease and a fencing token is stored
//! only if the Lease has not changed hands since that token was handed out.
//!
//! Every Lease has a fence record beside it (`/keelson/lease-fences/<ns>/<name>`), written
//! in the same transaction as the Lease whenever its `spec.holderIdentity` changes (and
//! deleted with the Lease). The record's mod_revision is the fencing token: it changes
//! exactly when the lease changes hands, not at every renewal. Because the record is
//! written in the Lease's own transaction, the token a holder gets is the
//! `resourceVersion` of the write that made it the holder.
//!
//! A client claims a fence with the header `Keelson-Fence: <namespace>/<name>:<token>` (or
//! the query parameter `keelsonFence=` with the same value). The registry adds the claim
//! as a compare on the record's mod_revision to the transaction of the write itself, so a
//! deposed holder's write can never be stored, however late it arrives; a refused write
//! is a 409 `Status` with reason `Fenced`.

use serde_json::Value;

use crate::catalog::ResourceDef;
use crate::error::ApiError;
use crate::storage::SideWrite;

/// The request header carrying a fence claim.
pub const HEADER: &str = "keelson-fence";
/// The query parameter carrying a fence claim (for clients that cannot set headers).
pub const QUERY: &str = "keelsonFence";

/// A claim: writes of this request are valid only while the Lease `namespace/name` has
/// not changed hands since the write that returned `token` as its resourceVersion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseFence {
    pub namespace: String,
    pub name: String,
    pub token: i64,
}

impl LeaseFence {
    /// Parses `<namespace>/<name>:<token>`.
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let bad = || ApiError::BadRequest(format!("invalid fence {s:?}: expected <namespace>/<lease name>:<token>, the token being the resourceVersion of the write that made the caller the lease's holder"));
        let (lease, token) = s.trim().rsplit_once(':').ok_or_else(bad)?;
        let (namespace, name) = lease.split_once('/').ok_or_else(bad)?;
        let token: i64 = token.parse().map_err(|_| bad())?;
        if namespace.is_empty() || name.is_empty() || name.contains('/') || token <= 0 {
            return Err(bad());
        }
        Ok(Self { namespace: namespace.into(), name: name.into(), token })
    }

    /// The claim of a request, from its header or query parameter (the header wins).
    pub fn from_request(headers: &http::HeaderMap, query: &std::collections::HashMap<String, String>) -> Result<Option<Self>, ApiError> {
        if let Some(v) = headers.get(HEADER) {
            let v = v.to_str().map_err(|_| ApiError::BadRequest("the Keelson-Fence header is not text".into()))?;
            return Self::parse(v).map(Some);
        }
        query.get(QUERY).filter(|v| !v.is_empty()).map(|v| Self::parse(v)).transpose()
    }

    pub fn key(&self) -> Vec<u8> {
        fence_key(&self.namespace, &self.name)
    }

    /// The refusal of a write made under this claim, the record now being at `current`.
    pub fn refused(&self, current: i64) -> ApiError {
        ApiError::Fenced {
            lease: format!("{}/{}", self.namespace, self.name),
            message: if current == 0 {
                format!("fenced: lease {}/{} has no holder record any more (it was deleted); fencing token {} is no longer valid", self.namespace, self.name, self.token)
            } else {
                format!(
                    "fenced: lease {}/{} changed hands after fencing token {} was issued (current token {current}); the write was not made",
                    self.namespace, self.name, self.token
                )
            },
        }
    }
}

/// Where the fence record of Lease `namespace/name` is kept.
pub fn fence_key(namespace: &str, name: &str) -> Vec<u8> {
    format!("/keelson/lease-fences/{namespace}/{name}").into_bytes()
}

fn is_lease(def: &ResourceDef) -> bool {
    def.group == "coordination.k8s.io" && def.kind == "Lease"
}

fn holder(obj: &Value) -> &str {
    obj.pointer("/spec/holderIdentity").and_then(Value::as_str).unwrap_or("")
}

/// The fence record writes that go with a change of an object from `old` to `new`
/// (`None` = absent): for a Lease, the record is (re)written when the holder changes and
/// deleted with the Lease; other resources have none.
pub fn side_writes(def: &ResourceDef, old: Option<&Value>, new: Option<&Value>) -> Vec<SideWrite> {
    if !is_lease(def) {
        return Vec::new();
    }
    let obj = new.or(old).expect("a change has a before or an after");
    let ns = obj.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("default");
    let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
    let key = fence_key(ns, name);
    match (old, new) {
        (_, None) => vec![(key, None)],
        (None, Some(n)) => vec![(key, Some(holder(n).as_bytes().to_vec()))],
        (Some(o), Some(n)) if holder(o) != holder(n) => vec![(key, Some(holder(n).as_bytes().to_vec()))],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn leases() -> &'static ResourceDef {
        crate::catalog::lookup("coordination.k8s.io", "v1", "leases").unwrap()
    }

    fn lease(holder: &str, renew: &str) -> Value {
        json!({"metadata": {"name": "kube-scheduler", "namespace": "kube-system"}, "spec": {"holderIdentity": holder, "renewTime": renew}})
    }

    #[test]
    fn parses_claims_and_refuses_malformed_ones() {
        assert_eq!(
            LeaseFence::parse("kube-system/kube-scheduler:42").unwrap(),
            LeaseFence { namespace: "kube-system".into(), name: "kube-scheduler".into(), token: 42 }
        );
        for bad in ["", "kube-scheduler:42", "kube-system/kube-scheduler", "kube-system/x:0", "kube-system/x:-3", "a/b/c:4", "/x:4", "ns/:4", "ns/x:abc"] {
            let e = LeaseFence::parse(bad).unwrap_err();
            assert_eq!(e.code(), 400, "{bad:?}");
        }
    }

    #[test]
    fn header_wins_over_query() {
        let mut h = http::HeaderMap::new();
        let mut q = std::collections::HashMap::new();
        assert_eq!(LeaseFence::from_request(&h, &q).unwrap(), None);
        q.insert(QUERY.to_string(), "a/b:7".to_string());
        assert_eq!(LeaseFence::from_request(&h, &q).unwrap().unwrap().token, 7);
        h.insert(HEADER, "a/b:9".parse().unwrap());
        assert_eq!(LeaseFence::from_request(&h, &q).unwrap().unwrap().token, 9);
    }

    #[test]
    fn record_changes_exactly_when_the_holder_changes() {
        let def = leases();
        let key = fence_key("kube-system", "kube-scheduler");
        // Created: the record names the first holder.
        assert_eq!(side_writes(def, None, Some(&lease("a_1", "t1"))), vec![(key.clone(), Some(b"a_1".to_vec()))]);
        // Renewed by the same holder: no record write, so the token stays valid.
        assert!(side_writes(def, Some(&lease("a_1", "t1")), Some(&lease("a_1", "t2"))).is_empty());
        // Taken over, or released (empty holder): the record moves.
        assert_eq!(side_writes(def, Some(&lease("a_1", "t2")), Some(&lease("b_2", "t3"))), vec![(key.clone(), Some(b"b_2".to_vec()))]);
        assert_eq!(side_writes(def, Some(&lease("b_2", "t3")), Some(&lease("", "t3"))), vec![(key.clone(), Some(Vec::new()))]);
        // Deleted: the record goes with it.
        assert_eq!(side_writes(def, Some(&lease("b_2", "t3")), None), vec![(key, None)]);
        // Other resources have no fence records.
        let cms = crate::catalog::lookup("", "v1", "configmaps").unwrap();
        assert!(side_writes(cms, None, Some(&json!({"metadata": {"name": "x", "namespace": "d"}}))).is_empty());
    }

    #[test]
    fn refusal_is_a_409_fenced_status() {
        let f = LeaseFence::parse("kube-system/kube-scheduler:5").unwrap();
        let s = f.refused(9).status();
        assert_eq!(s["code"], 409);
        assert_eq!(s["reason"], "Fenced");
        assert!(s["message"].as_str().unwrap().contains("changed hands after fencing token 5"));
        assert_eq!(f.refused(0).code(), 409);
    }
}
