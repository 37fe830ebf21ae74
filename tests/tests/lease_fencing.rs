//! Fenced writes on Leases, against the real API over a 3-replica cluster:
//! - the API server refuses (409 `Fenced`) any write made under a fencing token once the
//!   Lease has changed hands, whatever the verb, and stores none of them;
//! - renewals by the same holder keep its token valid; a malformed claim is a 400;
//! - with the real election code: a holder whose connection is frozen past its lease while
//!   another acquires gets its held write refused when it resumes, and nothing it wrote
//!   after the successor's first write is stored.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use keelson_component::election::{ElectionConfig, ElectionTimings, Elector};
use keelson_component::fence;
use keelson_tests::api::ApiCluster;
use keelson_tests::pause_proxy::PausableProxy;
use keelson_tests::ClusterOptions;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use serde_json::json;

fn lease(holder: &str) -> Lease {
    serde_json::from_value(json!({"metadata": {"name": "fence-test"}, "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15}})).unwrap()
}

fn cm(name: &str, token: i64) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"token": token.to_string()}})).unwrap()
}

fn rv(o: &impl kube::Resource) -> i64 {
    o.meta().resource_version.as_deref().unwrap().parse().unwrap()
}

fn assert_fenced<T: std::fmt::Debug>(r: Result<T, kube::Error>, what: &str) {
    match r {
        Err(e) if fence::is_fenced(&e) => {}
        other => panic!("{what}: expected a 409 Fenced refusal, got {other:?}"),
    }
}

async fn wait_for_store(c: &ApiCluster) -> kube::Client {
    let client = c.kube_client(0).await.unwrap();
    let ns: Api<Namespace> = Api::all(client.clone());
    for _ in 0..100 {
        if ns.get_opt("default").await.ok().flatten().is_some() {
            return client;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the default namespace never appeared");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_under_a_stale_fencing_token_are_refused_and_not_stored() {
    let c = ApiCluster::start(3, ClusterOptions::default()).await.unwrap();
    let admin = wait_for_store(&c).await;
    let leases: Api<Lease> = Api::namespaced(admin.clone(), "default");
    let (_, config) = c.kube_config_as(c.api_addr(1), "admin", &["system:masters"]).await.unwrap();

    // A becomes holder: its token is the resourceVersion of that write.
    let a = leases.create(&PostParams::default(), &lease("a_1")).await.unwrap();
    let token_a = rv(&a);
    let as_a = fence::fenced_client(&config, "default", "fence-test", token_a).unwrap();
    let cms_a: Api<ConfigMap> = Api::namespaced(as_a.clone(), "default");
    cms_a.create(&PostParams::default(), &cm("by-a", token_a)).await.expect("a fenced write while holding the lease");

    // A renews (holder unchanged): the token stays valid.
    let mut renewed = leases.get("fence-test").await.unwrap();
    renewed.spec.as_mut().unwrap().lease_duration_seconds = Some(16);
    leases.replace("fence-test", &PostParams::default(), &renewed).await.unwrap();
    cms_a.patch("by-a", &PatchParams::default(), &Patch::Merge(json!({"data": {"renewed": "yes"}}))).await.expect("still valid after a renewal");

    // B takes over.
    let mut taken = leases.get("fence-test").await.unwrap();
    taken.spec.as_mut().unwrap().holder_identity = Some("b_2".into());
    let b = leases.replace("fence-test", &PostParams::default(), &taken).await.unwrap();
    let token_b = rv(&b);
    assert!(token_b > token_a);

    // Every kind of write A still makes is refused.
    assert_fenced(cms_a.create(&PostParams::default(), &cm("late-create", token_a)).await, "create");
    assert_fenced(cms_a.patch("by-a", &PatchParams::default(), &Patch::Merge(json!({"data": {"late": "patch"}}))).await, "merge patch");
    let mut whole = cms_a.get("by-a").await.unwrap();
    whole.data.as_mut().unwrap().insert("late".into(), "update".into());
    assert_fenced(cms_a.replace("by-a", &PostParams::default(), &whole).await, "update");
    assert_fenced(cms_a.patch("by-a", &PatchParams::apply("a").force(), &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"late": "apply"}}))).await, "apply");
    assert_fenced(cms_a.delete("by-a", &DeleteParams::default()).await, "delete");
    // A write that would change nothing still tells A its fence is gone.
    let unchanged = cms_a.get("by-a").await.unwrap();
    assert_fenced(cms_a.replace("by-a", &PostParams::default(), &unchanged).await, "no-op update");
    // Subresources too: a pod's status.
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(admin.clone(), "default");
    let pod = serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}})).unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let pods_a: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(as_a.clone(), "default");
    assert_fenced(pods_a.patch_status("p", &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": "Running"}}))).await, "status patch");
    assert_fenced(pods_a.create_subresource::<_, serde_json::Value>("binding", "p", &PostParams::default(), &json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n1"}})).await, "binding");

    // Nothing of it is stored.
    let admin_cms: Api<ConfigMap> = Api::namespaced(admin.clone(), "default");
    let stored = admin_cms.get("by-a").await.unwrap();
    assert_eq!(stored.data.unwrap().keys().cloned().collect::<Vec<_>>(), vec!["renewed".to_string(), "token".to_string()]);
    assert!(admin_cms.get_opt("late-create").await.unwrap().is_none());
    assert_eq!(pods.get("p").await.unwrap().spec.unwrap().node_name, None);

    // B's token works, through any server, by header or by query parameter.
    let (_, config2) = c.kube_config_as(c.api_addr(2), "admin", &["system:masters"]).await.unwrap();
    let as_b = fence::fenced_client(&config2, "default", "fence-test", token_b).unwrap();
    Api::<ConfigMap>::namespaced(as_b, "default").create(&PostParams::default(), &cm("by-b", token_b)).await.expect("the new holder writes");
    let req = http::Request::post(format!("/api/v1/namespaces/default/configmaps?keelsonFence=default/fence-test:{token_b}"))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&cm("by-b-query", token_b)).unwrap())
        .unwrap();
    admin.request::<ConfigMap>(req).await.expect("claim by query parameter");
    let req = http::Request::post(format!("/api/v1/namespaces/default/configmaps?keelsonFence=default/fence-test:{token_a}"))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&cm("by-a-query", token_a)).unwrap())
        .unwrap();
    assert_fenced(admin.request::<ConfigMap>(req).await, "stale claim by query parameter");

    // A malformed claim is a 400, not a silent unfenced write.
    let req = http::Request::post("/api/v1/namespaces/default/configmaps")
        .header("content-type", "application/json")
        .header("keelson-fence", "no-token-here")
        .body(serde_json::to_vec(&cm("malformed", 1)).unwrap())
        .unwrap();
    match admin.request::<ConfigMap>(req).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 400),
        other => panic!("expected 400, got {other:?}"),
    }
    assert!(admin_cms.get_opt("malformed").await.unwrap().is_none());

    // Deleting the Lease fences its last holder too.
    leases.delete("fence-test", &DeleteParams::default()).await.unwrap();
    let (_, config0) = c.kube_config_as(c.api_addr(0), "admin", &["system:masters"]).await.unwrap();
    let as_b_again = fence::fenced_client(&config0, "default", "fence-test", token_b).unwrap();
    assert_fenced(Api::<ConfigMap>::namespaced(as_b_again, "default").create(&PostParams::default(), &cm("after-delete", token_b)).await, "after the lease was deleted");
    c.shutdown().await;
}

/// Outcome of one fenced write of a contender.
#[derive(Debug, Clone)]
struct Write {
    name: String,
    token: i64,
    outcome: Result<i64, String>,
}

type Log = Arc<Mutex<Vec<Write>>>;

/// A contender's work while it leads: fenced creates, one after another, each awaited to
/// its end even after the term ended (as a process that does not notice it was paused).
async fn append_while_leading(who: &'static str, term: keelson_component::Leadership, log: Log) {
    append(who, term, log, None).await
}

/// Like [`append_while_leading`]; then, once `late` is notified, one more write with the
/// term's client, as a process that did not notice it lost the lease.
async fn append(who: &'static str, term: keelson_component::Leadership, log: Log, late: Option<Arc<tokio::sync::Notify>>) {
    let cms: Api<ConfigMap> = Api::namespaced(term.client.clone(), "default");
    let mut seq = 0;
    let write = |seq: u32| {
        let (cms, log, name) = (cms.clone(), log.clone(), format!("{who}-{}-{seq}", term.token));
        async move {
            let r = cms.create(&PostParams::default(), &cm(&name, term.token)).await;
            let fenced = matches!(&r, Err(e) if fence::is_fenced(e));
            log.lock().unwrap().push(Write { name, token: term.token, outcome: r.map(|o| rv(&o)).map_err(|e| e.to_string()) });
            fenced
        }
    };
    while !term.ended.is_cancelled() {
        if write(seq).await {
            term.step_down();
            return;
        }
        seq += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if let Some(late) = late {
        late.notified().await;
        write(seq).await;
    }
}

fn election(identity: &str) -> ElectionConfig {
    ElectionConfig {
        namespace: "default".into(),
        name: "contended".into(),
        identity: identity.into(),
        component: "fence-test".into(),
        timings: ElectionTimings { lease_duration: Duration::from_secs(2), renew_deadline: Duration::from_millis(1500), retry_period: Duration::from_millis(300) },
        release_on_cancel: true,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_holder_resumed_after_a_takeover_writes_nothing() {
    let c = ApiCluster::start(3, ClusterOptions::default()).await.unwrap();
    let admin = wait_for_store(&c).await;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let log: Log = Arc::default();

    // A reaches server 0 through a proxy that can be frozen; B talks to server 1.
    let proxy = PausableProxy::start(c.api_addr(0)).await.unwrap();
    let (client_a, config_a) = c.kube_config_as(proxy.addr, "admin", &["system:masters"]).await.unwrap();
    let elector_a = Elector::new(client_a, config_a, election("a"), Default::default()).unwrap();
    let mut status_a = elector_a.status();
    let log_a = log.clone();
    let late = Arc::new(tokio::sync::Notify::new());
    let late_a = late.clone();
    tokio::spawn(elector_a.run(shutdown.clone(), move |t| append("a", t, log_a.clone(), Some(late_a.clone()))));
    status_a.wait_for(|s| s.leading).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;

    let (client_b, config_b) = c.kube_config_as(c.api_addr(1), "admin", &["system:masters"]).await.unwrap();
    let elector_b = Elector::new(client_b, config_b, election("b"), Default::default()).unwrap();
    let mut status_b = elector_b.status();
    let log_b = log.clone();
    tokio::spawn(elector_b.run(shutdown.clone(), move |t| append_while_leading("b", t, log_b.clone())));

    // Freeze A mid-stride: its next write is held. B must take over meanwhile.
    proxy.pause();
    tokio::time::timeout(Duration::from_secs(30), status_b.wait_for(|s| s.leading)).await.expect("B acquires the lease while A is frozen").unwrap();
    let b_wrote = || log.lock().unwrap().iter().any(|w| w.name.starts_with("b-") && w.outcome.is_ok());
    while !b_wrote() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    proxy.resume();
    // Whatever A had in flight arrives now; and A, unaware, writes once more.
    late.notify_one();
    // A's held write arrives late and must be refused.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let a_refused = || log.lock().unwrap().iter().any(|w| w.name.starts_with("a-") && w.outcome.as_ref().is_err_and(|e| e.contains("fenced")));
    while !a_refused() {
        assert!(tokio::time::Instant::now() < deadline, "A's late write was not refused as fenced: {:?}", log.lock().unwrap());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    shutdown.cancel();

    // What is stored: in revision order the tokens never go back, and nothing A wrote
    // comes after B's first write; every write acknowledged before the list is there,
    // no refused one is. (B may still be finishing a write while the list is read: what
    // it acknowledges after the list is not judged.)
    let acknowledged_before_list: Vec<Write> = log.lock().unwrap().clone();
    let cms: Api<ConfigMap> = Api::namespaced(admin, "default");
    let mut stored: Vec<(i64, i64, String)> = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|cm| cm.name_any().starts_with("a-") || cm.name_any().starts_with("b-"))
        .map(|cm| (cm.metadata.creation_timestamp.as_ref().map(|_| rv(&cm)).unwrap(), cm.data.as_ref().unwrap()["token"].parse().unwrap(), cm.name_any()))
        .collect();
    stored.sort();
    let tokens: Vec<i64> = stored.iter().map(|s| s.1).collect();
    assert!(tokens.windows(2).all(|w| w[0] <= w[1]), "tokens went back in revision order: {stored:?}");
    let first_b = stored.iter().position(|s| s.2.starts_with("b-")).expect("B's writes are stored");
    assert!(stored[first_b..].iter().all(|s| s.2.starts_with("b-")), "A wrote after B's first write: {stored:?}");
    let log = acknowledged_before_list;
    for w in log.iter() {
        let present = stored.iter().any(|s| s.2 == w.name);
        match &w.outcome {
            Ok(_) => assert!(present, "acknowledged write {} is missing", w.name),
            Err(e) if e.contains("fenced") => assert!(!present, "refused write {} was stored", w.name),
            Err(_) => {}
        }
    }
    let token_a = log.iter().find(|w| w.name.starts_with("a-")).unwrap().token;
    let token_b = log.iter().find(|w| w.name.starts_with("b-")).unwrap().token;
    assert!(token_b > token_a);
    c.shutdown().await;
}

/// A component whose role does not allow what it needs says so, in an Event on its
/// Lease, and keeps its own identity: here the controllers run as `system:kube-scheduler`,
/// which may hold a Lease and write Events but not watch Deployments.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_denied_component_records_it_on_its_lease() {
    let c = ApiCluster::start(3, ClusterOptions::default()).await.unwrap();
    let admin = wait_for_store(&c).await;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let access = c.control_plane_access(0, shutdown.clone()).await.unwrap();
    let spec = keelson_component::ComponentSpec { name: "denied-test", user: "system:kube-scheduler", release_on_cancel: true };
    tokio::spawn(keelson_controllers::run_as(access, spec, shutdown.clone()));
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(admin.clone(), "kube-system");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let found = loop {
        let all = events.list(&ListParams::default()).await.unwrap().items;
        // One Event per distinct denial; the Deployments watch is among them.
        let denied_deployments = |e: &k8s_openapi::api::core::v1::Event| e.message.as_deref().is_some_and(|m| m.contains("deployments"));
        if let Some(e) = all.into_iter().find(|e| e.reason.as_deref() == Some("Forbidden") && e.involved_object.name.as_deref() == Some("denied-test") && denied_deployments(e)) {
            break e;
        }
        assert!(tokio::time::Instant::now() < deadline, "no Forbidden event about deployments on the denied-test lease");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(found.type_.as_deref(), Some("Warning"));
    let message = found.message.unwrap_or_default();
    assert!(message.contains("system:kube-scheduler") && message.contains("deployments"), "{message}");
    // It held its lease as itself all along.
    let lease = Api::<Lease>::namespaced(admin, "kube-system").get("denied-test").await.unwrap();
    assert!(lease.spec.unwrap().holder_identity.unwrap().starts_with("server-0_"));
    shutdown.cancel();
    c.shutdown().await;
}
