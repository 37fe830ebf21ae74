//! Learning every server's API address: each API server keeps an identity Lease in
//! `kube-system` (label `apiserver.kubernetes.io/identity=kube-apiserver`, as
//! Kubernetes' API servers do) annotated with the address it serves at; the balancer adds
//! every address it finds there.

use std::net::SocketAddr;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams};
use tokio_util::sync::CancellationToken;

use crate::balancer::ApiBalancer;

/// The label every API server's identity Lease carries.
pub const IDENTITY_LABEL: &str = "apiserver.kubernetes.io/identity=kube-apiserver";
/// The annotation naming the address a server's API is served at (`host:port`).
pub const ADDRESS_ANNOTATION: &str = "keelson.io/api-address";

/// The API addresses named by identity Leases.
pub fn addresses(leases: &[Lease]) -> Vec<SocketAddr> {
    let mut out: Vec<SocketAddr> = leases
        .iter()
        .filter_map(|l| l.metadata.annotations.as_ref()?.get(ADDRESS_ANNOTATION)?.parse().ok())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Adds the servers named by identity Leases to `balancer`, now and every `every`.
pub async fn follow_servers(client: kube::Client, balancer: ApiBalancer, every: Duration, shutdown: CancellationToken) {
    let api: Api<Lease> = Api::namespaced(client, "kube-system");
    loop {
        match api.list(&ListParams::default().labels(IDENTITY_LABEL)).await {
            Ok(list) => balancer.add_servers(addresses(&list.items)),
            Err(e) => tracing::debug!(error = %e, "listing API server identity leases"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn lease(addr: Option<&str>) -> Lease {
        let annotations = addr.map(|a| [(ADDRESS_ANNOTATION.to_string(), a.to_string())].into_iter().collect());
        Lease { metadata: ObjectMeta { annotations, ..Default::default() }, spec: None }
    }

    #[test]
    fn reads_addresses_and_skips_leases_without_a_usable_one() {
        let leases = [lease(Some("127.0.0.1:6443")), lease(None), lease(Some("not an address")), lease(Some("10.0.0.2:6443")), lease(Some("127.0.0.1:6443"))];
        assert_eq!(addresses(&leases), vec!["10.0.0.2:6443".parse().unwrap(), "127.0.0.1:6443".parse().unwrap()]);
    }
}
