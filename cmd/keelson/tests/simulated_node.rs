//! `keelson agent --runtime simulated`: the real agent — its pod workers, status, probes
//! and Events — on the simulated runtime, with no containerd and no root. One server on
//! loopback and one simulated node: its Lease is renewed by updates that keep what others
//! changed, a pod with an init container and an exec readiness
//! probe becomes Running and Ready with an address of the node's podCIDR, the kubelet's
//! Events tell it, pods annotated with an exit code end Succeeded or Failed, and a deleted
//! pod is stopped and gone. Runs on any machine.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

mod kubelet_scrape;
mod sim_support;
use sim_support::SimulatedAgent;

async fn until<T, F, Fut>(what: &str, within: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn pod(name: &str, annotations: serde_json::Value, spec: serde_json::Value) -> Pod {
    let mut s = json!({"nodeName": "sim-1", "terminationGracePeriodSeconds": 1});
    s.as_object_mut().unwrap().extend(spec.as_object().unwrap().clone());
    serde_json::from_value(json!({"metadata": {"name": name, "annotations": annotations}, "spec": s})).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_simulated_node_runs_the_agents_pod_lifecycle_without_containers() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let tmp = tempfile::tempdir().unwrap();
    let dir: PathBuf = tmp.path().to_path_buf();
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_keelson"));
    let cluster = keelson_runner::Cluster::start(keelson_runner::ClusterSpec::loopback(1, binary.clone(), dir.join("cluster")), |m| eprintln!("cluster: {m}")).await.unwrap();
    cluster.wait_api(Duration::from_secs(60)).await.unwrap();
    let kubeconfig = cluster.kubeconfig_path();
    let agent = SimulatedAgent::start(&binary, &cluster, &dir, "sim-1", "10.77.0.0/24", &[]);
    let agent_log = || agent.log();

    let kc = kube::config::Kubeconfig::read_from(&kubeconfig).unwrap();
    let client = kube::Client::try_from(kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap()).unwrap();
    let node = agent.wait_ready(&client, Duration::from_secs(90)).await;
    let info = node.status.as_ref().unwrap().node_info.as_ref().unwrap();
    assert_eq!(info.container_runtime_version, "simulated://keelson", "the node says it is simulated");
    let cidr = node.spec.as_ref().unwrap().pod_cidr.clone().expect("a podCIDR");
    let prefix = cidr.rsplit_once('.').unwrap().0.to_string();
    assert!(agent_log().contains("SIMULATED node sim-1"), "{}", agent_log());

    // The node's Lease: held and owned by the node, renewed by updates (as the kubelet
    // renews, not by apply); a change someone else makes to it is read and kept, not
    // overwritten, and the renewals go on.
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let uid = node.metadata.uid.clone().unwrap();
    let lease = until("the node's Lease, owned by its Node", Duration::from_secs(30), || async {
        let l = leases.get_opt("sim-1").await.ok().flatten()?;
        l.metadata.owner_references.as_ref()?.iter().any(|o| o.kind == "Node" && o.uid == uid).then_some(l)
    })
    .await;
    let spec = lease.spec.clone().unwrap();
    assert_eq!((spec.holder_identity.as_deref(), spec.lease_duration_seconds), (Some("sim-1"), Some(40)));
    let operations: Vec<_> = lease.metadata.managed_fields.iter().flatten().filter_map(|m| m.operation.clone()).collect();
    assert!(!operations.is_empty() && operations.iter().all(|o| o == "Update"), "renewed by updates: {operations:?}");
    let touched = until("the Lease changed by someone else", Duration::from_secs(30), || async {
        let mut l = leases.get("sim-1").await.ok()?;
        l.metadata.labels.get_or_insert_with(Default::default).insert("touched".into(), "yes".into());
        leases.replace("sim-1", &PostParams::default(), &l).await.ok()
    })
    .await;
    let touched_at = touched.spec.unwrap().renew_time.unwrap();
    until("a renewal after the change, keeping it", Duration::from_secs(30), || async {
        let l = leases.get("sim-1").await.ok()?;
        let kept = l.metadata.labels.as_ref().is_some_and(|m| m.get("touched").map(String::as_str) == Some("yes"));
        assert!(kept, "a renewal overwrote someone else's change: {:?}", l.metadata);
        (l.spec?.renew_time?.0 > touched_at.0).then_some(())
    })
    .await;

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let web = pod(
        "web",
        json!({}),
        json!({"initContainers": [{"name": "setup", "image": "keelson.local/busybox:stable", "command": ["true"]}],
            "containers": [{"name": "app", "image": "keelson.local/busybox:stable", "command": ["sleep", "3600"],
                "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1}}]}),
    );
    // The default ServiceAccount may not exist for the first moments of a new cluster.
    until("web created", Duration::from_secs(30), || async { pods.create(&PostParams::default(), &web).await.ok() }).await;
    let running = until("web Running and Ready", Duration::from_secs(60), || async {
        let p = pods.get_opt("web").await.ok().flatten()?;
        let st = p.status.clone()?;
        (st.phase.as_deref() == Some("Running") && st.conditions.as_ref()?.iter().any(|c| c.type_ == "Ready" && c.status == "True")).then_some(p)
    })
    .await;

    // The agent's /metrics on the kubelet API (nodes/metrics, the admin's certificate):
    // web's start was timed, from the worker first seeing it to its Running status.
    let page = kubelet_scrape::agent_metrics(&kubeconfig, &node).await;
    let value = |series: &str| kubelet_scrape::series_value(&page, series);
    assert!(value("kubelet_pod_start_duration_seconds_count") >= 1.0 && value("kubelet_started_pods_total") >= 1.0, "{page}");
    assert!(value("kubelet_pod_worker_duration_seconds_count{operation=\"sync\"}") >= 1.0, "{page}");
    let st = running.status.unwrap();
    let ip = st.pod_ip.clone().unwrap();
    assert!(ip.starts_with(&format!("{prefix}.")), "the pod address {ip} is of the node's podCIDR {cidr}");
    let init = &st.init_container_statuses.as_ref().unwrap()[0];
    let done = init.state.as_ref().unwrap().terminated.as_ref().expect("the init container ran to completion");
    assert_eq!((done.exit_code, done.reason.as_deref()), (0, Some("Completed")));
    let app = &st.container_statuses.as_ref().unwrap()[0];
    assert!(app.ready && app.state.as_ref().unwrap().running.is_some() && app.image_id.starts_with("sha256:"), "{app:?}");
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let reasons = until("the kubelet's Events of web", Duration::from_secs(30), || async {
        let list = events.list(&ListParams::default().fields("involvedObject.name=web")).await.ok()?;
        let r: Vec<String> = list.items.iter().filter(|e| e.source.as_ref().and_then(|s| s.component.as_deref()) == Some("kubelet")).filter_map(|e| e.reason.clone()).collect();
        (r.iter().filter(|r| *r == "Started").count() >= 2).then_some(r)
    })
    .await;
    assert!(reasons.contains(&"Pulled".to_string()) && reasons.contains(&"Created".to_string()), "{reasons:?}");
    assert_eq!(pods.logs("web", &Default::default()).await.unwrap(), "", "a simulated container writes no log");

    // The exit-code annotation ends a container as a process would.
    for (name, code, phase) in [("ok", "0", "Succeeded"), ("bad", "2", "Failed")] {
        let p = pod(name, json!({"keelson.io/hollow-exit-code": code}), json!({"restartPolicy": "Never", "containers": [{"name": "c", "image": "keelson.local/busybox:stable"}]}));
        pods.create(&PostParams::default(), &p).await.unwrap();
        let ended = until(&format!("{name} {phase}"), Duration::from_secs(60), || async {
            let p = pods.get_opt(name).await.ok().flatten()?;
            (p.status.as_ref()?.phase.as_deref() == Some(phase)).then_some(p)
        })
        .await;
        let term = ended.status.unwrap().container_statuses.unwrap()[0].state.clone().unwrap().terminated.unwrap();
        assert_eq!(term.exit_code.to_string(), code, "{name}: {term:?}");
    }

    // A deleted pod is stopped and its deletion confirmed by the agent.
    pods.delete("web", &DeleteParams::default()).await.unwrap();
    until("web gone", Duration::from_secs(60), || async { pods.get_opt("web").await.ok().flatten().is_none().then_some(()) }).await;
    drop(cluster);
}
