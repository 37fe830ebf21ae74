//! Asking members how they are: a server's own status over the store API, and whether a
//! node's Node object says Ready (read from the store, so the runner needs no Kubernetes
//! client).

use std::time::Duration;

use keelson_client::api::MemberStatus;
use keelson_client::{PeerTls, StoreClient};

/// How long one status call may take.
pub(crate) const STATUS_TIMEOUT: Duration = Duration::from_secs(1);

/// The server at `addr`'s own status, or `None` if it does not answer within
/// [`STATUS_TIMEOUT`].
pub(crate) async fn status(addr: &str, tls: &PeerTls) -> Option<MemberStatus> {
    let client = StoreClient::with_tls(&[addr], tls).ok()?;
    tokio::time::timeout(STATUS_TIMEOUT, client.status()).await.ok()?.ok()
}

/// Statuses of `(index, addr)` servers, asked concurrently.
pub(crate) async fn statuses(targets: Vec<(usize, String)>, tls: PeerTls) -> Vec<(usize, Option<MemberStatus>)> {
    let mut set = tokio::task::JoinSet::new();
    for (i, addr) in targets {
        let tls = tls.clone();
        set.spawn(async move { (i, status(&addr, &tls).await) });
    }
    let mut out = Vec::new();
    while let Some(r) = set.join_next().await {
        if let Ok(x) = r {
            out.push(x);
        }
    }
    out.sort_by_key(|(i, _)| *i);
    out
}

/// The store key of Node `name`.
fn node_key(name: &str) -> String {
    format!("/registry/core/nodes/{name}")
}

/// Whether a stored Node object (JSON) has the condition `Ready` = `True`.
pub(crate) fn node_object_ready(json: &[u8]) -> bool {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(json) else { return false };
    v.pointer("/status/conditions")
        .and_then(|c| c.as_array())
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

/// Whether Node `name` exists and is Ready (one linearizable read).
pub(crate) async fn node_ready(client: &StoreClient, name: &str) -> bool {
    match tokio::time::timeout(STATUS_TIMEOUT * 2, client.get(node_key(name).as_bytes())).await {
        Ok(Ok(reply)) => reply.response.kvs.first().is_some_and(|kv| node_object_ready(&kv.value)),
        _ => {
            client.rotate();
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_with_a_true_ready_condition() {
        let node = |conds: &str| format!(r#"{{"kind":"Node","status":{{"conditions":{conds}}}}}"#);
        assert!(node_object_ready(node(r#"[{"type":"MemoryPressure","status":"False"},{"type":"Ready","status":"True"}]"#).as_bytes()));
        assert!(!node_object_ready(node(r#"[{"type":"Ready","status":"False"}]"#).as_bytes()));
        assert!(!node_object_ready(br#"{"kind":"Node"}"#));
        assert!(!node_object_ready(b"\x00protobuf"));
    }
}
