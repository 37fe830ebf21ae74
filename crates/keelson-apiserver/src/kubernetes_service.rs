//! The `default/kubernetes` Service, through which pods reach the API (ClusterIP
//! 10.43.0.1, port 443, `kubernetes.default.svc`), with Endpoints and an EndpointSlice
//! listing every API server whose identity Lease was renewed within [`ENDPOINT_TTL`],
//! as Kubernetes' API servers keep it (its lease endpoint reconciler). Every server
//! runs the reconcile after renewing its own Lease; all compute the same endpoints from
//! the same Leases, and unchanged objects are not rewritten.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{json, Value};

use crate::catalog;
use crate::error::ApiError;
use crate::identity_lease::ADDRESS_ANNOTATION;
use crate::meta::UpdateScope;
use crate::registry::Registry;
use crate::storage::list_prefix;

/// The first address of the service CIDR, reserved for this Service.
pub const KUBERNETES_SERVICE_IP: &str = "10.43.0.1";
/// A server whose identity Lease is older than this is left out of the endpoints
/// (three missed renewals).
pub const ENDPOINT_TTL: Duration = Duration::from_secs(30);
const NAME: &str = "kubernetes";
const NAMESPACE: &str = "default";

/// The API addresses of the servers whose identity Leases (`leases`: every Lease of
/// `kube-system`) were renewed within [`ENDPOINT_TTL`] of `now`, sorted.
pub fn live_api_addresses(leases: &[Value], now: jiff::Timestamp) -> Vec<SocketAddr> {
    let mut out: Vec<SocketAddr> = leases
        .iter()
        .filter(|l| l.pointer("/metadata/labels/apiserver.kubernetes.io~1identity").and_then(Value::as_str) == Some("kube-apiserver"))
        .filter(|l| {
            let renewed = l.pointer("/spec/renewTime").and_then(Value::as_str).and_then(|t| t.parse::<jiff::Timestamp>().ok());
            renewed.is_some_and(|r| now.duration_since(r).unsigned_abs() <= ENDPOINT_TTL)
        })
        .filter_map(|l| l.pointer("/metadata/annotations").and_then(|a| a.get(ADDRESS_ANNOTATION)).and_then(Value::as_str)?.parse().ok())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The Service itself.
pub fn service() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": {"component": "apiserver", "provider": "kubernetes"}},
        "spec": {"type": "ClusterIP", "clusterIP": KUBERNETES_SERVICE_IP, "sessionAffinity": "None",
                 "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}]},
    })
}

/// The addresses grouped by port (servers on one machine listen on different ports).
fn by_port(addrs: &[SocketAddr]) -> BTreeMap<u16, Vec<String>> {
    let mut m: BTreeMap<u16, Vec<String>> = BTreeMap::new();
    for a in addrs {
        m.entry(a.port()).or_default().push(a.ip().to_string());
    }
    m
}

/// The Endpoints: one subset per port. Labelled so that no mirroring copies it.
pub fn endpoints(addrs: &[SocketAddr]) -> Value {
    let subsets: Vec<Value> = by_port(addrs)
        .into_iter()
        .map(|(port, ips)| json!({"addresses": ips.iter().map(|ip| json!({"ip": ip})).collect::<Vec<_>>(), "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}))
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
        "subsets": subsets,
    })
}

/// The EndpointSlices: `kubernetes` for the first port, `kubernetes-<port>` for others.
pub fn endpoint_slices(addrs: &[SocketAddr]) -> Vec<Value> {
    by_port(addrs)
        .into_iter()
        .enumerate()
        .map(|(i, (port, ips))| {
            let name = if i == 0 { NAME.to_string() } else { format!("{NAME}-{port}") };
            json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"kubernetes.io/service-name": NAME}},
                "addressType": "IPv4",
                "endpoints": ips.iter().map(|ip| json!({"addresses": [ip], "conditions": {"ready": true}})).collect::<Vec<_>>(),
                "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
            })
        })
        .collect()
}

/// Writes `desired` unless it is stored as it is (metadata other than labels kept).
async fn put(registry: &Registry, def: &catalog::ResourceDef, desired: Value) -> Result<(), ApiError> {
    let name = desired.pointer("/metadata/name").and_then(Value::as_str).unwrap_or(NAME).to_string();
    registry
        .update_with(def, Some(NAMESPACE), &name, UpdateScope::Main, false, |cur| {
            let mut next = desired.clone();
            if let Some(cur) = cur {
                let mut meta = cur["metadata"].clone();
                meta["labels"] = desired["metadata"]["labels"].clone();
                next["metadata"] = meta;
            }
            Ok(Some(next))
        })
        .await
        .map(|_| ())
}

/// Makes the Service, its Endpoints and EndpointSlices match the live servers.
pub(crate) async fn reconcile(registry: &Registry) -> Result<(), ApiError> {
    let leases = catalog::lookup("coordination.k8s.io", "v1", "leases").expect("leases are served");
    let page = registry.store.list_page(&list_prefix(leases, Some("kube-system")), None, 0, 0, true).await?;
    let leases: Vec<Value> = page.items.into_iter().map(|s| s.obj).collect();
    let addrs = live_api_addresses(&leases, jiff::Timestamp::now());
    if addrs.is_empty() {
        return Ok(());
    }
    let services = catalog::lookup("", "v1", "services").expect("services are served");
    match registry.create(services, Some(NAMESPACE), service(), false).await {
        Ok(_) | Err(ApiError::AlreadyExists { .. }) => {}
        Err(e) => return Err(e),
    }
    put(registry, catalog::lookup("", "v1", "endpoints").expect("endpoints are served"), endpoints(&addrs)).await?;
    let slices_def = catalog::lookup("discovery.k8s.io", "v1", "endpointslices").expect("endpointslices are served");
    let desired = endpoint_slices(&addrs);
    let keep: Vec<String> = desired.iter().filter_map(|s| s.pointer("/metadata/name").and_then(Value::as_str).map(str::to_string)).collect();
    for slice in desired {
        put(registry, slices_def, slice).await?;
    }
    let stored = registry.store.list_page(&list_prefix(slices_def, Some(NAMESPACE)), None, 0, 0, true).await?;
    for s in stored.items {
        let name = s.obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
        let ours = s.obj.pointer("/metadata/labels/kubernetes.io~1service-name").and_then(Value::as_str) == Some(NAME) && s.obj.pointer("/metadata/labels/endpointslice.kubernetes.io~1managed-by").is_none();
        if ours && !keep.iter().any(|k| k == name) {
            match registry.delete(slices_def, Some(NAMESPACE), name, &Default::default()).await {
                Ok(_) | Err(ApiError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(name: &str, addr: &str, renewed: &str) -> Value {
        json!({"metadata": {"name": format!("apiserver-{name}"), "labels": {"apiserver.kubernetes.io/identity": "kube-apiserver"}, "annotations": {ADDRESS_ANNOTATION: addr}},
               "spec": {"renewTime": renewed}})
    }

    fn now() -> jiff::Timestamp {
        "2026-01-01T00:01:00Z".parse().unwrap()
    }

    #[test]
    fn only_servers_renewed_recently_are_endpoints() {
        let leases = [
            lease("s2", "10.0.0.12:6443", "2026-01-01T00:00:55.000000Z"),
            lease("s1", "10.0.0.11:6443", "2026-01-01T00:00:45.123456Z"),
            lease("s3", "10.0.0.13:6443", "2026-01-01T00:00:10Z"),
            json!({"metadata": {"name": "kube-scheduler", "annotations": {ADDRESS_ANNOTATION: "10.0.0.99:6443"}}, "spec": {"renewTime": "2026-01-01T00:00:59Z"}}),
        ];
        let addrs = live_api_addresses(&leases, now());
        assert_eq!(addrs, ["10.0.0.11:6443".parse::<SocketAddr>().unwrap(), "10.0.0.12:6443".parse().unwrap()]);
    }

    #[test]
    fn servers_on_one_port_share_a_subset_and_a_slice() {
        let addrs: Vec<SocketAddr> = ["10.0.0.11:6443", "10.0.0.12:6443"].iter().map(|a| a.parse().unwrap()).collect();
        let e = endpoints(&addrs);
        assert_eq!(e["subsets"], json!([{"addresses": [{"ip": "10.0.0.11"}, {"ip": "10.0.0.12"}], "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}]));
        let slices = endpoint_slices(&addrs);
        assert_eq!(slices.len(), 1);
        assert_eq!(slices[0]["metadata"]["name"], "kubernetes");
        assert_eq!(slices[0]["metadata"]["labels"]["kubernetes.io/service-name"], "kubernetes");
        assert_eq!(slices[0]["endpoints"].as_array().unwrap().len(), 2);
        assert_eq!(service()["spec"]["clusterIP"], KUBERNETES_SERVICE_IP);
    }

    #[test]
    fn servers_on_different_ports_get_one_subset_and_slice_per_port() {
        let addrs: Vec<SocketAddr> = ["127.0.0.1:7001", "127.0.0.1:7002"].iter().map(|a| a.parse().unwrap()).collect();
        assert_eq!(endpoints(&addrs)["subsets"].as_array().unwrap().len(), 2);
        let names: Vec<String> = endpoint_slices(&addrs).iter().map(|s| s["metadata"]["name"].as_str().unwrap().to_string()).collect();
        assert_eq!(names, ["kubernetes", "kubernetes-7002"]);
    }
}
