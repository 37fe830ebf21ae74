//! Takes one [`Observation`]: the member list and every replica's status over the store
//! port, every server's `/readyz` at the address its identity Lease names, and the
//! component Leases and Nodes from this server's watch cache. Every server is asked at
//! once with its own timeout, so a stopped server costs one timeout and reads as down.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use keelson_client::api::{MemberInfo, MemberStatus};
use keelson_client::{PeerIdentity, StoreClient};
use rustls::{ClientConfig, RootCertStore};
use serde_json::Value;

use super::observation::{ApiView, LeaseView, MemberView, Observation};
use crate::catalog;
use crate::component_leases;
use crate::identity_lease::ADDRESS_ANNOTATION;
use crate::storage::Stored;
use crate::watch_cache::WatchCache;

/// How long the member list or one replica's status may take.
const STORE_TIMEOUT: Duration = Duration::from_millis(1500);
/// How long one server's `/readyz` may take (its own store check takes up to 1.5 s).
const READYZ_TIMEOUT: Duration = Duration::from_secs(2);
/// The component Leases shown, as the components name them in `kube-system`.

/// What a sample reads from, and the store clients it keeps between samples.
pub(crate) struct Sampler {
    /// This server's own replica.
    pub store: StoreClient,
    /// The identity for other replicas' store ports (`None`: plaintext).
    pub store_tls: Option<Arc<PeerIdentity>>,
    pub watch_cache: Arc<WatchCache>,
    /// Verifies servers' certificates against the cluster CA, with no client identity
    /// (`/readyz` needs none).
    pub readyz_tls: ClientConfig,
    replicas: HashMap<String, StoreClient>,
    last_members: Vec<MemberInfo>,
}

impl Sampler {
    pub fn new(store: StoreClient, store_tls: Option<Arc<PeerIdentity>>, watch_cache: Arc<WatchCache>, ca_pem: &str) -> Result<Self, String> {
        let mut roots = RootCertStore::empty();
        for c in rustls_pemfile::certs(&mut ca_pem.as_bytes()) {
            roots.add(c.map_err(|e| format!("cluster CA: {e}"))?).map_err(|e| format!("cluster CA: {e}"))?;
        }
        let readyz_tls = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Self { store, store_tls, watch_cache, readyz_tls, replicas: HashMap::new(), last_members: Vec::new() })
    }

    /// The cluster now.
    pub async fn observe(&mut self) -> Observation {
        let time = crate::registry::now_micro_rfc3339();
        // The member list this replica knows; when it does not answer, the last one.
        if let Ok(Ok(list)) = tokio::time::timeout(STORE_TIMEOUT, self.store.member_list()).await {
            self.last_members = list.members;
        }
        let mut members = self.last_members.clone();
        members.sort_by(|a, b| a.name.cmp(&b.name));
        let leases = cached(&self.watch_cache, "coordination.k8s.io", "v1", "leases").await;
        let api_addresses: BTreeMap<String, String> = leases.iter().flatten().filter_map(|l| identity_address(&l.obj)).collect();
        let statuses = futures::future::join_all(members.iter().map(|m| {
            let client = self.replica(&m.addr);
            async move {
                match client {
                    Err(e) => Err(e),
                    Ok(c) => match tokio::time::timeout(STORE_TIMEOUT, c.status()).await {
                        Ok(Ok(s)) => Ok(s),
                        Ok(Err(e)) => Err(e.to_string()),
                        Err(_) => Err(format!("no answer within {STORE_TIMEOUT:?}")),
                    },
                }
            }
        }));
        let apis = futures::future::join_all(members.iter().map(|m| readyz(&self.readyz_tls, api_addresses.get(&m.name).cloned())));
        let (statuses, apis) = futures::join!(statuses, apis);
        let leader_status = statuses.iter().filter_map(|s| s.as_ref().ok()).filter(|s| s.role == "leader").max_by_key(|s| s.term).cloned();
        let term = statuses.iter().filter_map(|s| s.as_ref().ok()).map(|s| s.term).max().unwrap_or(0);
        let views = members.iter().zip(statuses).zip(apis).map(|((m, status), api)| member_view(m, status, leader_status.as_ref(), api)).collect();
        let nodes = cached(&self.watch_cache, "", "v1", "nodes").await.map(|nodes| nodes.iter().map(|n| (name_of(&n.obj), node_ready(&n.obj))).collect());
        Observation {
            time,
            leader: leader_status.map(|s| s.name),
            term,
            members: views,
            leases: leases.map(|ls| component_leases(&ls)).unwrap_or_default(),
            nodes,
        }
    }

    /// A client of the replica at `addr`, made once.
    fn replica(&mut self, addr: &str) -> Result<StoreClient, String> {
        if let Some(c) = self.replicas.get(addr) {
            return Ok(c.clone());
        }
        let c = match &self.store_tls {
            Some(id) => StoreClient::with_identity(&[addr], id.clone()),
            None => StoreClient::new(&[addr]),
        }
        .map_err(|e| e.to_string())?;
        self.replicas.insert(addr.to_string(), c.clone());
        Ok(c)
    }
}

fn member_view(m: &MemberInfo, status: Result<MemberStatus, String>, leader: Option<&MemberStatus>, api: ApiView) -> MemberView {
    let base = MemberView { id: format!("{:x}", m.id), name: m.name.clone(), addr: m.addr.clone(), voter: m.voter, api, ..Default::default() };
    match status {
        Ok(s) => MemberView {
            reachable: true,
            role: Some(s.role.clone()),
            term: Some(s.term),
            applied_index: Some(s.applied_index),
            last_log_index: Some(s.last_log_index),
            lag: leader.map(|l| l.committed_index.saturating_sub(s.applied_index)),
            ..base
        },
        Err(e) => MemberView { reachable: false, error: Some(e), ..base },
    }
}

/// `GET /readyz` on the server at `address` (`None`: no identity Lease names one).
async fn readyz(tls: &ClientConfig, address: Option<String>) -> ApiView {
    let Some(address) = address else {
        return ApiView { state: "unknown".into(), address: None, reason: Some("no identity Lease names this server's API address".into()) };
    };
    let url = format!("https://{address}");
    let view = |state: &str, reason: Option<String>| ApiView { state: state.into(), address: Some(address.clone()), reason };
    match tokio::time::timeout(READYZ_TIMEOUT, crate::join_client::request(&url, tls.clone(), "GET", "/readyz", None, Vec::new())).await {
        Ok(Ok((200, _))) => view("ready", None),
        Ok(Ok((code, body))) => view("not-ready", Some(format!("{code} {}", String::from_utf8_lossy(&body).lines().next().unwrap_or_default()))),
        Ok(Err(e)) => view("down", Some(e.to_string())),
        Err(_) => view("down", Some(format!("no answer within {READYZ_TIMEOUT:?}"))),
    }
}

/// Every object of a resource in this server's watch cache; `None` when the cache does
/// not follow it.
pub(crate) async fn cached(cache: &Arc<WatchCache>, group: &str, version: &str, plural: &str) -> Option<Vec<Arc<Stored>>> {
    let def = catalog::lookup(group, version, plural)?;
    let prefix = def.key_prefix();
    let feed = cache.feed(prefix.as_bytes()).await.ok()?;
    feed.page(prefix.as_bytes(), None, 0, |_| true).map(|p| p.page.items)
}

pub(crate) fn name_of(obj: &Value) -> String {
    obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string()
}

/// A server's name and API address from its identity Lease (other Leases: `None`).
fn identity_address(lease: &Value) -> Option<(String, String)> {
    let labels = lease.pointer("/metadata/labels")?;
    if labels.get("apiserver.kubernetes.io/identity").and_then(Value::as_str) != Some("kube-apiserver") {
        return None;
    }
    let name = labels.get("kubernetes.io/hostname")?.as_str()?;
    let addr = lease.pointer("/metadata/annotations")?.get(ADDRESS_ANNOTATION)?.as_str()?;
    Some((name.to_string(), addr.to_string()))
}

fn component_leases(leases: &[Arc<Stored>]) -> Vec<LeaseView> {
    let in_namespace = |l: &Value, name: &str| name_of(l) == name && l.pointer("/metadata/namespace").and_then(Value::as_str) == Some(component_leases::NAMESPACE);
    component_leases::NAMES.iter().map(|name| LeaseView::read(name, leases.iter().map(|l| &l.obj).find(|l| in_namespace(l, name)))).collect()
}

/// The Ready condition's status (`Unknown` when absent).
pub(crate) fn node_ready(node: &Value) -> String {
    node.pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .and_then(|c| c["status"].as_str())
        .unwrap_or("Unknown")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stored(obj: Value) -> Arc<Stored> {
        Arc::new(Stored::new(obj, 1))
    }

    #[test]
    fn identity_leases_name_the_api_addresses() {
        let id = crate::identity_lease::identity_lease(
            &crate::identity_lease::ServerIdentity { name: "keelson-1".into(), address: "127.0.0.1:6444".parse().unwrap() },
            "h",
            None,
            "2026-01-01T00:00:00.000000Z",
        );
        assert_eq!(identity_address(&id), Some(("keelson-1".into(), "127.0.0.1:6444".into())));
        assert_eq!(identity_address(&json!({"metadata": {"name": "kube-scheduler", "labels": {}}})), None);
    }

    #[test]
    fn component_leases_read_holder_and_transitions() {
        let leases = [
            stored(json!({"metadata": {"name": "kube-scheduler", "namespace": "kube-system"}, "spec": {"holderIdentity": "keelson-2_ab", "leaseTransitions": 3, "renewTime": "t"}})),
            stored(json!({"metadata": {"name": "kube-controller-manager", "namespace": "elsewhere"}, "spec": {"holderIdentity": "x"}})),
        ];
        let got = component_leases(&leases);
        assert_eq!(got[0], LeaseView { name: "kube-scheduler".into(), holder: Some("keelson-2_ab".into()), transitions: 3, renew_time: Some("t".into()) });
        assert_eq!(got[1], LeaseView { name: "kube-controller-manager".into(), ..Default::default() });
    }

    #[test]
    fn lag_is_behind_the_leaders_commit() {
        let status = |name: &str, role: &str, applied, committed| MemberStatus {
            id: 1,
            name: name.into(),
            addr: String::new(),
            role: role.into(),
            term: 2,
            leader: Some(1),
            last_log_index: committed,
            committed_index: committed,
            applied_index: applied,
            snapshot_index: 0,
            purged_index: 0,
            revision: 0,
            compacted_revision: 0,
            members: vec![],
            log_format: 2,
            cluster_log_format: 2,
        };
        let leader = status("a", "leader", 10, 12);
        let info = MemberInfo { id: 2, name: "b".into(), addr: "x".into(), voter: true };
        let v = member_view(&info, Ok(status("b", "follower", 7, 9)), Some(&leader), ApiView::default());
        assert_eq!((v.reachable, v.lag, v.role.as_deref(), v.id.as_str()), (true, Some(5), Some("follower"), "2"));
        let down = member_view(&info, Err("refused".into()), Some(&leader), ApiView::default());
        assert_eq!((down.reachable, down.lag, down.error.as_deref()), (false, None, Some("refused")));
    }

    #[test]
    fn ready_reads_the_ready_condition() {
        assert_eq!(node_ready(&json!({"status": {"conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}]}})), "True");
        assert_eq!(node_ready(&json!({})), "Unknown");
    }
}
