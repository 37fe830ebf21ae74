//! The control-plane components of real `keelson server` processes: every server runs a
//! scheduler and a controller manager, one holder each shows in `kube-system`'s Leases
//! (authenticated as their own identities), killing the holding server moves both to a
//! survivor, and a server stopped with SIGTERM releases its Leases for a successor.

mod cluster_support;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Event;
use cluster_support::{client, metrics_page, server_of, start_short_elections};
use kube::api::{Api, ListParams};

const LEASES: [&str; 2] = ["kube-scheduler", "kube-controller-manager"];

/// The holder of each component Lease, as server index (from the `<server>_<uuid>` identity).
async fn holders(client: &kube::Client) -> Option<Vec<(String, i32)>> {
    let api: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let mut out = Vec::new();
    for name in LEASES {
        let l = api.get_opt(name).await.ok()??;
        let spec = l.spec?;
        out.push((spec.holder_identity.unwrap_or_default(), spec.lease_transitions.unwrap_or(0)));
    }
    Some(out)
}

/// Waits until both Leases are held by servers for which `ok` holds.
async fn wait_holders(client: &kube::Client, what: &str, ok: impl Fn(usize) -> bool) -> Vec<(String, i32)> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(h) = holders(client).await {
            if h.iter().all(|(holder, _)| server_of(holder).is_some_and(&ok)) {
                return h;
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: leases are {:?}", holders(client).await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn components_are_elected_and_move_when_their_server_dies_or_stops() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cluster = start_short_elections(&tmp.path().join("c")).await;
    let first = wait_holders(&client(&cluster, "keelson-1").await, "first election", |_| true).await;
    eprintln!("holders: {first:?}");

    // Announced as Kubernetes does.
    let c1 = client(&cluster, "keelson-1").await;
    // (Events are written by the recorder's sink, a moment after the term began.)
    let events: Api<Event> = Api::namespaced(c1.clone(), "kube-system");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let became: Vec<String> = events.list(&ListParams::default()).await.unwrap().items.into_iter().filter(|e| e.reason.as_deref() == Some("LeaderElection")).filter_map(|e| e.message).collect();
        let missing: Vec<&String> = first.iter().map(|(h, _)| h).filter(|h| !became.contains(&format!("{h} became leader"))).collect();
        if missing.is_empty() {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no LeaderElection event for {missing:?}: {became:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The components use their own identities, which RBAC allows to hold their Leases
    // (the audit log of the holding server names them).
    let victim = server_of(&first[0].0).unwrap();
    let audits: Vec<String> = cluster.manifest().servers().filter_map(|s| std::fs::read_to_string(s.data_dir.join("audit.log")).ok()).collect();
    for user in ["system:kube-scheduler", "system:kube-controller-manager"] {
        assert!(audits.iter().any(|a| a.contains(&format!("\"{user}\"")) && a.contains("leases")), "no audited lease write by {user}");
    }
    // Metrics: exactly one server leads each component.
    let mut leading = 0;
    for s in cluster.manifest().servers() {
        let page = metrics_page(&s.metrics_addr).await;
        leading += page.lines().filter(|l| l.starts_with("leader_election_master_status{") && l.ends_with(" 1")).count();
    }
    assert_eq!(leading, 2, "one leader per component across the servers");

    // kill -9 the scheduler's server: both components it held move to survivors.
    eprintln!("kill -9 server {victim}");
    cluster.kill(victim).await.unwrap();
    let survivor = (victim + 1) % 3;
    let c = client(&cluster, &format!("keelson-{}", survivor + 1)).await;
    let after_kill = wait_holders(&c, "after the kill", |s| s != victim).await;
    eprintln!("after kill: {after_kill:?}");
    assert!(after_kill[0].1 > first[0].1, "leaseTransitions counts the takeover");

    // SIGTERM the new scheduler holder: it releases, another server takes over.
    let stopping = server_of(&after_kill[0].0).unwrap();
    let last = (0..3).find(|&s| s != victim && s != stopping).unwrap();
    cluster.restart(victim).await.unwrap();
    cluster.signal(stopping, 15).unwrap();
    let c = client(&cluster, &format!("keelson-{}", last + 1)).await;
    let after_stop = wait_holders(&c, "after SIGTERM", |s| s != stopping).await;
    eprintln!("after SIGTERM: {after_stop:?}");
    let log = std::fs::read_to_string(&cluster.manifest().members[stopping].log).unwrap_or_default();
    assert!(log.contains("released the lease"), "the stopped server did not release its leases");
    cluster.stop(Duration::from_secs(10)).await.unwrap();
}
