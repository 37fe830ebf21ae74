//! Deployments end to end on real `keelson server` processes with hollow nodes, driven by
//! the real kubectl: apply, `rollout status`, a new image rolled out while the controller
//! manager's server is killed (the next holder finishes it, with no extra pods),
//! `rollout history`, `rollout undo`, scaling up and down, and Kubernetes' Events.

mod cluster_support;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use cluster_support::{client, eventually, server_of, start_short_elections};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use keelson_runner::Cluster;
use kube::api::{Api, ListParams};

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

fn kubectl(cluster: &Cluster, context: &str, args: &[&str], stdin: Option<&str>) -> Out {
    let mut cmd = Command::new("kubectl");
    cmd.arg("--kubeconfig").arg(cluster.kubeconfig_path()).arg("--context").arg(context).args(args);
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() }).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("kubectl runs");
    if let Some(input) = stdin {
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    }
    let o = child.wait_with_output().unwrap();
    Out { code: o.status.code().unwrap_or(-1), stdout: String::from_utf8_lossy(&o.stdout).into(), stderr: String::from_utf8_lossy(&o.stderr).into() }
}

fn ok(o: Out, what: &str) -> String {
    assert_eq!(o.code, 0, "{what}: {}{}", o.stdout, o.stderr);
    o.stdout
}

const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 3
  selector:
    matchLabels: {app: web}
  strategy:
    rollingUpdate: {maxSurge: 1, maxUnavailable: 0}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: c
        image: example.com/web:1
"#;

/// The app's pods that are not being deleted, with their images.
async fn live_pods(client: &kube::Client) -> Vec<(String, String)> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.list(&ListParams::default().labels("app=web"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| (p.metadata.name.unwrap_or_default(), p.spec.unwrap().containers[0].image.clone().unwrap_or_default()))
        .collect()
}

async fn wait_live(client: &kube::Client, what: &str, want: impl Fn(&[(String, String)]) -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let pods = live_pods(client).await;
        if want(&pods) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: pods are {pods:?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The server index of the controller manager's lease holder, once there is one.
async fn cm_server(admin: &kube::Client) -> usize {
    let leases = Api::<Lease>::namespaced(admin.clone(), "kube-system");
    eventually("a kube-controller-manager holder", Duration::from_secs(60), || async {
        let lease = leases.get_opt("kube-controller-manager").await.map_err(|e| e.to_string())?;
        let holder = lease.and_then(|l| l.spec?.holder_identity).ok_or("no holder yet")?;
        server_of(&holder).ok_or_else(|| format!("holder {holder} names no server"))
    })
    .await
}

/// Three hollow nodes served through server `server` (0-based), until the token is cancelled.
async fn hollow_nodes(cluster: &Cluster, server: usize) -> (tokio_util::sync::CancellationToken, tokio::task::JoinHandle<Result<(), keelson_agent::hollow::HollowError>>) {
    let client = client(cluster, &format!("keelson-{}", server + 1)).await;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(keelson_agent::hollow::run(client, keelson_agent::hollow::HollowConfig::new("hollow", 3), shutdown.clone()));
    (shutdown, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployments_roll_out_undo_and_scale_across_a_controller_manager_failover() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cluster = start_short_elections(&tmp.path().join("c")).await;
    let admin = client(&cluster, "keelson-1").await;
    // The hollow nodes talk to a server other than the controller manager's, which the test
    // kills: nodes whose only server died would leave the new pods unready for good.
    let mut hollow_server = (cm_server(&admin).await + 1) % 3;
    let (mut shutdown, mut hollow) = hollow_nodes(&cluster, hollow_server).await;

    ok(kubectl(&cluster, "keelson-1", &["apply", "-f", "-"], Some(DEPLOYMENT)), "apply");
    let out = ok(kubectl(&cluster, "keelson-2", &["rollout", "status", "deployment/web", "--timeout=90s"], None), "rollout status");
    assert!(out.contains("deployment \"web\" successfully rolled out"), "{out}");
    wait_live(&admin, "3 replicas of web:1", |p| p.len() == 3 && p.iter().all(|(_, i)| i == "example.com/web:1")).await;
    let listed = ok(kubectl(&cluster, "keelson-1", &["get", "deployment", "web"], None), "get deployment");
    assert!(listed.lines().nth(1).is_some_and(|l| l.split_whitespace().nth(1) == Some("3/3")), "{listed}");

    // A new image, and the controller manager's server dies right after.
    let victim = cm_server(&admin).await;
    if victim == hollow_server {
        // The lease moved since the start: the nodes move off the server about to die.
        shutdown.cancel();
        let _ = hollow.await;
        hollow_server = (victim + 1) % 3;
        (shutdown, hollow) = hollow_nodes(&cluster, hollow_server).await;
    }
    let other = hollow_server;
    let ctx = format!("keelson-{}", other + 1);
    ok(kubectl(&cluster, &ctx, &["set", "image", "deployment/web", "c=example.com/web:2"], None), "set image");
    cluster.kill(victim).await.unwrap();
    let survivor = client(&cluster, &ctx).await;
    let out = ok(kubectl(&cluster, &ctx, &["rollout", "status", "deployment/web", "--timeout=90s"], None), "rollout status after failover");
    assert!(out.contains("successfully rolled out"), "{out}");
    wait_live(&survivor, "3 replicas of web:2, nothing more", |p| p.len() == 3 && p.iter().all(|(_, i)| i == "example.com/web:2")).await;
    let sets: Api<ReplicaSet> = Api::namespaced(survivor.clone(), "default");
    // A list, not a map: two sets of one revision (a create refused as existing taken for a
    // hash collision) must show.
    let mut revisions: Vec<(String, i32)> = sets
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|rs| (rs.metadata.annotations.unwrap_or_default().get("deployment.kubernetes.io/revision").cloned().unwrap_or_default(), rs.spec.unwrap().replicas.unwrap_or(0)))
        .collect();
    revisions.sort();
    assert_eq!(revisions, vec![("1".to_string(), 0), ("2".to_string(), 3)], "one set per revision");
    let history = ok(kubectl(&cluster, &ctx, &["rollout", "history", "deployment/web"], None), "rollout history");
    assert!(history.lines().any(|l| l.trim_start().starts_with('1')) && history.lines().any(|l| l.trim_start().starts_with('2')), "{history}");

    // Undo: back to web:1, as revision 3.
    let undone = ok(kubectl(&cluster, &ctx, &["rollout", "undo", "deployment/web"], None), "rollout undo");
    assert!(undone.contains("rolled back"), "{undone}");
    ok(kubectl(&cluster, &ctx, &["rollout", "status", "deployment/web", "--timeout=90s"], None), "rollout status after undo");
    wait_live(&survivor, "back on web:1", |p| p.len() == 3 && p.iter().all(|(_, i)| i == "example.com/web:1")).await;
    let annotations = ok(kubectl(&cluster, &ctx, &["get", "deployment", "web", "-o", "jsonpath={.metadata.annotations.deployment\\.kubernetes\\.io/revision}"], None), "revision");
    assert_eq!(annotations.trim(), "3");

    // Scale up and down.
    ok(kubectl(&cluster, &ctx, &["scale", "deployment/web", "--replicas=5"], None), "scale up");
    wait_live(&survivor, "5 replicas", |p| p.len() == 5).await;
    ok(kubectl(&cluster, &ctx, &["scale", "deployment/web", "--replicas=1"], None), "scale down");
    wait_live(&survivor, "1 replica", |p| p.len() == 1).await;
    let described = ok(kubectl(&cluster, &ctx, &["describe", "deployment", "web"], None), "describe");
    assert!(described.contains("ScalingReplicaSet") && described.contains("Scaled up replica set web-"), "{described}");
    let rs_events = ok(kubectl(&cluster, &ctx, &["get", "events", "--field-selector", "reason=SuccessfulCreate", "-o", "name"], None), "events");
    assert!(!rs_events.trim().is_empty(), "no SuccessfulCreate events");

    shutdown.cancel();
    let _ = hollow.await;
    cluster.stop(Duration::from_secs(10)).await.unwrap();
}
