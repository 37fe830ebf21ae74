//! This API server's identity Lease, as Kubernetes' API servers keep one
//! (`kube-system/apiserver-<name>`, label `apiserver.kubernetes.io/identity=kube-apiserver`,
//! renewed every 10 s, valid for an hour), annotated with the address its API is served at.
//! Clients' balancers learn every server's address from these Leases, and after each
//! renewal the `kubernetes` Service's endpoints are brought up to date from them.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::catalog;
use crate::meta::UpdateScope;
use crate::registry::{now_micro_rfc3339, Registry};

/// The annotation naming the address of a server's API (`host:port`).
pub const ADDRESS_ANNOTATION: &str = "keelson.io/api-address";
const RENEW_EVERY: Duration = Duration::from_secs(10);
const LEASE_SECONDS: i64 = 3600;

/// Who this API server is and where clients reach it.
#[derive(Clone, Debug)]
pub struct ServerIdentity {
    pub name: String,
    pub address: SocketAddr,
}

/// The identity Lease of `id` held by `holder`, renewed now (`current`: as stored).
pub fn identity_lease(id: &ServerIdentity, holder: &str, current: Option<&Value>, now: &str) -> Value {
    let mut lease = current.cloned().unwrap_or_else(|| json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": format!("apiserver-{}", id.name), "namespace": "kube-system"}}));
    let m = &mut lease["metadata"];
    m["labels"]["apiserver.kubernetes.io/identity"] = json!("kube-apiserver");
    m["labels"]["kubernetes.io/hostname"] = json!(id.name);
    m["annotations"][ADDRESS_ANNOTATION] = json!(id.address.to_string());
    if let Some(m) = m.as_object_mut() {
        m.remove("resourceVersion");
    }
    let acquired = current.and_then(|c| c.pointer("/spec/acquireTime").cloned()).unwrap_or(json!(now));
    lease["spec"] = json!({"holderIdentity": holder, "leaseDurationSeconds": LEASE_SECONDS, "acquireTime": acquired, "renewTime": now});
    lease
}

/// Keeps the identity Lease of `id` renewed until `shutdown`.
pub(crate) async fn keep(registry: Registry, id: ServerIdentity, shutdown: CancellationToken) {
    let def = catalog::lookup("coordination.k8s.io", "v1", "leases").expect("leases are served");
    let holder = format!("apiserver-{}_{:016x}", id.name, rand::random::<u64>());
    let name = format!("apiserver-{}", id.name);
    loop {
        let r = registry
            .update_with(def, Some("kube-system"), &name, UpdateScope::Main, false, |cur| Ok(Some(identity_lease(&id, &holder, cur, &now_micro_rfc3339()))))
            .await;
        match r {
            Ok(_) => {
                if let Err(e) = crate::kubernetes_service::reconcile(&registry).await {
                    tracing::debug!(error = %e, "reconciling the kubernetes Service's endpoints");
                }
            }
            Err(e) => tracing::debug!(error = %e, "renewing this API server's identity lease"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(RENEW_EVERY) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_names_the_server_and_its_address_and_keeps_its_acquire_time() {
        let id = ServerIdentity { name: "keelson-2".into(), address: "127.0.0.1:6444".parse().unwrap() };
        let first = identity_lease(&id, "h", None, "2026-01-01T00:00:00.000000Z");
        assert_eq!(first["metadata"]["name"], "apiserver-keelson-2");
        assert_eq!(first["metadata"]["labels"]["apiserver.kubernetes.io/identity"], "kube-apiserver");
        assert_eq!(first["metadata"]["annotations"][ADDRESS_ANNOTATION], "127.0.0.1:6444");
        let renewed = identity_lease(&id, "h", Some(&first), "2026-01-01T00:00:10.000000Z");
        assert_eq!(renewed["spec"]["acquireTime"], "2026-01-01T00:00:00.000000Z");
        assert_eq!(renewed["spec"]["renewTime"], "2026-01-01T00:00:10.000000Z");
    }
}
