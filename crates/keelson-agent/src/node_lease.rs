//! A node's Lease in `kube-node-lease`, renewed as the kubelet's lease controller renews
//! it: read (or created) once, then every renewal is an update of the Lease last written,
//! with a new `renewTime`. Its resourceVersion guards the update, so a Lease that someone
//! else changed in between is a conflict: it is read again and the renewal retried. An
//! update is the API server's cheapest write of a Lease (no field ownership to merge, no
//! read of the stored object by the client), which matters at 1,000 nodes renewing every
//! 10 s.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, OwnerReference};
use kube::api::{Api, PostParams};

/// The namespace of node Leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// How long a node's Lease holds after a renewal: the kubelet's 40 s, four heartbeats.
pub const NODE_LEASE_DURATION_SECS: i32 = 40;

/// How many updates one renewal tries (each after a conflict or a vanished Lease) before
/// it gives up until the next heartbeat; the kubelet's `maxUpdateRetries` is 5.
const RENEW_ATTEMPTS: usize = 5;

/// One node's Lease, with the last version this node wrote of it.
pub struct NodeLease {
    api: Api<Lease>,
    name: String,
    duration_secs: i32,
    latest: Option<Lease>,
}

impl NodeLease {
    /// The Lease of node `name`, held for `duration_secs` after each renewal.
    pub fn new(client: kube::Client, name: &str, duration_secs: i32) -> Self {
        NodeLease { api: Api::namespaced(client, NODE_LEASE_NAMESPACE), name: name.to_string(), duration_secs, latest: None }
    }

    /// The node's (and the Lease's) name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Renews the Lease now; `owner` is the Node's uid when known (the Lease is then
    /// owned by the Node, so it goes with it).
    pub async fn renew(&mut self, owner: Option<&str>) -> Result<(), kube::Error> {
        let mut last_err = None;
        for _ in 0..RENEW_ATTEMPTS {
            let base = match self.latest.take() {
                Some(l) => l,
                None => match self.read_or_create(owner).await? {
                    Ensured::Created(l) => {
                        self.latest = Some(l);
                        return Ok(());
                    }
                    Ensured::Read(l) => l,
                },
            };
            let next = renewed(base, &self.name, self.duration_secs, owner, now());
            match self.api.replace(&self.name, &PostParams::default(), &next).await {
                Ok(l) => {
                    self.latest = Some(l);
                    return Ok(());
                }
                // Changed or deleted by someone else: read it again and retry.
                Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => last_err = Some(kube::Error::Api(s)),
                // Any other failure: the version last written is still the one to update
                // (if the write did land, the next update conflicts and reads it again).
                Err(e) => {
                    self.latest = Some(next);
                    return Err(e);
                }
            }
        }
        Err(last_err.expect("an attempt failed"))
    }

    async fn read_or_create(&self, owner: Option<&str>) -> Result<Ensured, kube::Error> {
        if let Some(l) = self.api.get_opt(&self.name).await? {
            return Ok(Ensured::Read(l));
        }
        let fresh = renewed(Lease::default(), &self.name, self.duration_secs, owner, now());
        match self.api.create(&PostParams::default(), &fresh).await {
            Ok(l) => Ok(Ensured::Created(l)),
            Err(kube::Error::Api(s)) if s.code == 409 => self.api.get(&self.name).await.map(Ensured::Read),
            Err(e) => Err(e),
        }
    }
}

enum Ensured {
    Created(Lease),
    Read(Lease),
}

fn now() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}

/// `base` held by node `name` for `duration_secs`, renewed at `now`, owned by the Node
/// `owner` (its uid) when that is known and the Lease has no owner yet. Everything else
/// of `base` — its resourceVersion above all — stays.
pub fn renewed(mut base: Lease, name: &str, duration_secs: i32, owner: Option<&str>, now: MicroTime) -> Lease {
    base.metadata.name = Some(name.to_string());
    base.metadata.namespace = Some(NODE_LEASE_NAMESPACE.to_string());
    let spec = base.spec.get_or_insert_with(Default::default);
    spec.holder_identity = Some(name.to_string());
    spec.lease_duration_seconds = Some(duration_secs);
    spec.renew_time = Some(now);
    if let Some(uid) = owner {
        let owners = base.metadata.owner_references.get_or_insert_with(Vec::new);
        if owners.is_empty() {
            owners.push(OwnerReference { api_version: "v1".into(), kind: "Node".into(), name: name.to_string(), uid: uid.to_string(), ..Default::default() });
        }
    }
    base
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> MicroTime {
        MicroTime(s.parse().unwrap())
    }

    #[test]
    fn a_fresh_lease_names_the_node_as_holder_and_owner() {
        let l = renewed(Lease::default(), "n1", 40, Some("uid-1"), at("2026-01-01T00:00:00.5Z"));
        assert_eq!(l.metadata.name.as_deref(), Some("n1"));
        assert_eq!(l.metadata.namespace.as_deref(), Some("kube-node-lease"));
        let spec = l.spec.as_ref().unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("n1"));
        assert_eq!(spec.lease_duration_seconds, Some(40));
        assert_eq!(spec.renew_time, Some(at("2026-01-01T00:00:00.5Z")));
        let owners = l.metadata.owner_references.as_ref().unwrap();
        assert_eq!((owners[0].kind.as_str(), owners[0].name.as_str(), owners[0].uid.as_str()), ("Node", "n1", "uid-1"));
        assert_eq!(renewed(Lease::default(), "n1", 40, None, at("2026-01-01T00:00:00Z")).metadata.owner_references, None, "no uid, no owner");
    }

    #[test]
    fn a_renewal_keeps_the_version_it_updates_and_an_existing_owner() {
        let mut base = renewed(Lease::default(), "n1", 40, Some("old-uid"), at("2026-01-01T00:00:00Z"));
        base.metadata.resource_version = Some("42".into());
        base.metadata.labels = Some([("a".to_string(), "b".to_string())].into());
        base.spec.as_mut().unwrap().holder_identity = Some("someone-else".into());
        let l = renewed(base, "n1", 40, Some("new-uid"), at("2026-01-01T00:00:10Z"));
        assert_eq!(l.metadata.resource_version.as_deref(), Some("42"), "the update is guarded by the version read");
        assert_eq!(l.metadata.labels.as_ref().unwrap()["a"], "b");
        assert_eq!(l.spec.as_ref().unwrap().holder_identity.as_deref(), Some("n1"));
        assert_eq!(l.spec.as_ref().unwrap().renew_time, Some(at("2026-01-01T00:00:10Z")));
        let owners = l.metadata.owner_references.unwrap();
        assert_eq!(owners.len(), 1);
        assert_eq!(owners[0].uid, "old-uid", "an owner already set stays");
    }
}
