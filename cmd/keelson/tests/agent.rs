//! `keelson agent` on real containerd, end to end: a node in a network namespace of the
//! test's own (a veth to the host, where the API server listens), joined with a token;
//! pods given by `spec.nodeName` or by the scheduler run in real containers with init
//! containers, env from ConfigMaps and the downward API, volumes, probes, restart policies
//! and crash-loop back-off; deletions stop containers and remove sandboxes; an agent
//! killed and restarted adopts its running pods and removes those deleted meanwhile.
//!
//! Needs root and containerd, runc, the CNI plugins and busybox-static (the README's test
//! command installs them as root; CI runs as root). Skipped loudly otherwise.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod};
use keelson_agent::runtime::Runtime;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

mod node_support;
use node_support::{is_root, missing_tools, node_ready, poll, sh, start_server, NodeNet, Proc};

fn start_agent(net: &NodeNet, dir: &Path, server: &str, token: &str, log: &str) -> Proc {
    node_support::start_agent(net, dir, server, token, "n1", "10.42.7.0/24", log)
}

async fn pod_where(pods: &Api<Pod>, name: &str, what: &str, pred: impl Fn(&Pod) -> bool) -> Pod {
    poll(&format!("{name}: {what}"), Duration::from_secs(90), || async {
        let p = pods.get_opt(name).await.ok().flatten()?;
        pred(&p).then_some(p)
    })
    .await
}

fn container_status(p: &Pod) -> serde_json::Value {
    serde_json::to_value(&p.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0]).unwrap()
}

fn phase(p: &Pod) -> &str {
    p.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

fn ready(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn events_of(client: &kube::Client, pod: &str) -> Vec<(String, String)> {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let list = events.list(&ListParams::default().fields(&format!("involvedObject.name={pod}"))).await.unwrap();
    list.items.into_iter().map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default())).collect()
}

fn manifest(v: serde_json::Value) -> Pod {
    serde_json::from_value(v).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_runs_pods_in_real_containers() {
    if !is_root() || !missing_tools().is_empty() {
        assert!(std::env::var_os("KEELSON_REQUIRE_NODE_TESTS").is_none(), "node tests required but root={} missing={:?}", is_root(), missing_tools());
        eprintln!("SKIPPED (needs root and {:?}): the agent runs real containers in a network namespace; CI runs this as root", missing_tools());
        return;
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let tmp = tempfile::tempdir().unwrap();
    let dir: PathBuf = tmp.path().to_path_buf();
    let net = NodeNet::create(0);
    let cluster = start_server(&net, &dir).await;
    let (_server, client, token, server, kubeconfig) = (cluster.proc, cluster.client, cluster.token, cluster.url, cluster.kubeconfig);
    let mut agent = start_agent(&net, &dir, &server, &token, "agent-1.log");

    // The Node registers, Ready, with the machine's facts and the built-in images.
    let node = node_ready(&client, "n1").await;
    let st = node.status.unwrap();
    let info = st.node_info.unwrap();
    assert!(info.container_runtime_version.starts_with("containerd://"), "{}", info.container_runtime_version);
    assert!(!info.kernel_version.is_empty() && !info.boot_id.is_empty());
    assert_eq!(st.addresses.unwrap()[0].address, net.node_ip);
    let images: Vec<String> = st.images.unwrap_or_default().into_iter().flat_map(|i| i.names.unwrap_or_default()).collect();
    assert!(images.iter().any(|n| n.contains("keelson.local/busybox:stable")), "{images:?}");
    assert!(st.capacity.unwrap()["memory"].0.ends_with("Ki"));

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let pp = PostParams::default();
    cms.create(&pp, &serde_json::from_value(json!({"metadata": {"name": "cfg"}, "data": {"greeting": "hello", "mode": "fast"}})).unwrap()).await.unwrap();
    const IMG: &str = "keelson.local/busybox:stable";
    const HOST_PORT: u16 = 18080;
    let bound = |name: &str, spec: serde_json::Value| {
        let mut spec = spec;
        spec["nodeName"] = json!("n1");
        manifest(json!({"metadata": {"name": name}, "spec": spec}))
    };
    // A web server with an HTTP readiness probe, placed by the scheduler.
    pods.create(&pp, &manifest(json!({"metadata": {"name": "web"}, "spec": {"terminationGracePeriodSeconds": 2, "containers": [{"name": "httpd", "image": IMG,
        "command": ["httpd", "-f", "-p", "8080", "-h", "/www"], "ports": [{"name": "http", "containerPort": 8080, "hostPort": HOST_PORT}],
        "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1}}]}}))).await.unwrap();
    let mut mix = bound("mix", json!({"terminationGracePeriodSeconds": 1,
        "initContainers": [{"name": "setup", "image": IMG, "command": ["sh", "-c", "echo init-done > /work/ready"], "volumeMounts": [{"name": "work", "mountPath": "/work"}]}],
        "containers": [{"name": "app", "image": IMG,
            "command": ["sh", "-c", "cat /work/ready; echo $GREETING $(POD_NAME) $CFG_mode; echo conf=$$(cat /conf/greeting 2>&1); echo labels=$$(cat /info/labels); sleep 3600"],
            "env": [{"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "greeting", "optional": true}}}, {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
            "envFrom": [{"configMapRef": {"name": "cfg"}, "prefix": "CFG_"}],
            "volumeMounts": [{"name": "work", "mountPath": "/work"}, {"name": "conf", "mountPath": "/conf"}, {"name": "info", "mountPath": "/info"}],
            "readinessProbe": {"exec": {"command": ["cat", "/work/ready"]}, "periodSeconds": 1},
            "livenessProbe": {"exec": {"command": ["test", "-f", "/conf/greeting"]}, "periodSeconds": 1, "failureThreshold": 2}}],
        "volumes": [{"name": "work", "emptyDir": {}}, {"name": "conf", "configMap": {"name": "cfg"}},
            {"name": "info", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}]}));
    mix.metadata.labels = Some([("tier".to_string(), "demo".to_string())].into());
    pods.create(&pp, &mix).await.unwrap();
    pods.create(&pp, &bound("crash", json!({"containers": [{"name": "c", "image": IMG, "command": ["sh", "-c", "exit 3"]}]}))).await.unwrap();
    pods.create(&pp, &bound("done", json!({"restartPolicy": "Never", "containers": [{"name": "c", "image": IMG, "command": ["sh", "-c", "echo ok"]}]}))).await.unwrap();
    pods.create(&pp, &bound("oom", json!({"restartPolicy": "Never", "containers": [{"name": "hog", "image": IMG, "command": ["sh", "-c", "x=a; while true; do x=$x$x; done"], "resources": {"limits": {"memory": "32Mi"}}}]}))).await.unwrap();
    pods.create(&pp, &bound("bye", json!({"restartPolicy": "Never", "containers": [{"name": "c", "image": IMG, "command": ["sh", "-c", "echo -n see you > /dev/termination-log; exit 4"]}]}))).await.unwrap();
    pods.create(&pp, &bound("mem", json!({"terminationGracePeriodSeconds": 1, "containers": [{"name": "c", "image": IMG, "command": ["sh", "-c", "mount | grep /cache; sleep 3600"], "volumeMounts": [{"name": "cache", "mountPath": "/cache"}]}],
        "volumes": [{"name": "cache", "emptyDir": {"medium": "Memory", "sizeLimit": "8Mi"}}]}))).await.unwrap();
    pods.create(&pp, &bound("never", json!({"containers": [{"name": "c", "image": "keelson.local/absent:1", "imagePullPolicy": "Never"}]}))).await.unwrap();
    // In-cluster access: the ServiceAccount admission's projected volume (bound token,
    // published root CA, namespace) and the `kubernetes` Service, reached by its DNS name
    // through the proxy. (Pod IPs are routable from the host, where the server runs.)
    node_support::ok(&["ip", "route", "replace", "10.42.7.0/24", "via", &net.node_ip]);
    pods.create(&pp, &bound("incluster", json!({"restartPolicy": "Never", "containers": [{"name": "c", "image": IMG, "command": ["sh", "-c",
        "d=/var/run/secrets/kubernetes.io/serviceaccount; echo ns=$$(cat $d/namespace); head -n 1 $d/ca.crt; echo token=$$(cat $d/token); \
         for i in $$(seq 1 30); do nc -w 2 kubernetes.default.svc 443 </dev/null && echo api=reachable && exit 0; sleep 1; done; exit 1"]}]}))).await.unwrap();

    // Running and Ready, reachable at its pod IP from the node.
    let web = pod_where(&pods, "web", "Running and Ready", |p| phase(p) == "Running" && ready(p)).await;
    let web_ip = web.status.as_ref().unwrap().pod_ip.clone().unwrap();
    assert!(web_ip.starts_with("10.42.7."), "pod IP {web_ip} from the node's podCIDR");
    assert_eq!(web.spec.as_ref().unwrap().node_name.as_deref(), Some("n1"), "the scheduler placed it");
    assert_eq!(net.curl(&format!("http://{web_ip}:8080/")), "hello from keelson\n");
    // Its hostPort, from the host's end of the node's link (CNI portmap in the node).
    let host_curl = |url: String| String::from_utf8_lossy(&sh(&["curl", "-s", "-m", "3", &url]).stdout).to_string();
    assert_eq!(host_curl(format!("http://{}:{HOST_PORT}/", net.node_ip)), "hello from keelson\n", "hostPort {HOST_PORT} on the node's address");
    let web_container = container_status(&web)["containerID"].as_str().unwrap().to_string();

    // imagePullSecrets reach the registry (a stand-in on the node's loopback: a 401
    // challenge without the credentials, "manifest unknown" with them); a pod without
    // the secret is refused as unauthorized, one naming a missing secret is warned about.
    let registry = node_support::registry::FakeRegistry::start_in(&net.ns, "alice:s3cret");
    let private = format!("127.0.0.1:{}/private/app:1", registry.port);
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), "default");
    let docker_config = json!({"auths": {format!("127.0.0.1:{}", registry.port): {"username": "alice", "password": "s3cret"}}}).to_string();
    secrets.create(&pp, &serde_json::from_value(json!({"metadata": {"name": "regcred"}, "type": "kubernetes.io/dockerconfigjson", "stringData": {".dockerconfigjson": docker_config}})).unwrap()).await.unwrap();
    // A pod naming none gets its ServiceAccount's pull secrets at admission.
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(client.clone(), "default");
    accounts.create(&pp, &serde_json::from_value(json!({"metadata": {"name": "puller"}, "imagePullSecrets": [{"name": "regcred"}]})).unwrap()).await.unwrap();
    let via_account = pods.create(&pp, &bound("via-account", json!({"serviceAccountName": "puller", "containers": [{"name": "c", "image": IMG, "imagePullPolicy": "Never"}]}))).await.unwrap();
    let names: Vec<String> = via_account.spec.unwrap().image_pull_secrets.unwrap_or_default().into_iter().map(|r| r.name).collect();
    assert_eq!(names, ["regcred"], "the ServiceAccount's imagePullSecrets");
    pods.delete("via-account", &DeleteParams { grace_period_seconds: Some(0), ..Default::default() }).await.unwrap();
    pods.create(&pp, &bound("private", json!({"containers": [{"name": "c", "image": private}], "imagePullSecrets": [{"name": "regcred"}, {"name": "absent"}]}))).await.unwrap();
    let private_events = poll("private's pull failure", Duration::from_secs(60), || async {
        let ev = events_of(&client, "private").await;
        ev.iter().any(|(r, _)| r == "Failed").then_some(ev)
    })
    .await;
    let pulled_with_secret = registry.seen.lock().unwrap().clone();
    use base64::Engine;
    assert!(pulled_with_secret.contains(&format!("Basic {}", base64::engine::general_purpose::STANDARD.encode("alice:s3cret"))), "the registry saw {pulled_with_secret:?}; events {private_events:?}");
    assert!(private_events.iter().any(|(r, m)| r == "FailedToRetrieveImagePullSecret" && m.contains("(absent)")), "{private_events:?}");
    assert!(private_events.iter().any(|(r, m)| r == "Failed" && m.contains("not found")), "with the credentials the registry says not found: {private_events:?}");
    registry.seen.lock().unwrap().clear();
    pods.create(&pp, &bound("anonymous", json!({"containers": [{"name": "c", "image": private}]}))).await.unwrap();
    let anonymous_events = poll("anonymous's pull failure", Duration::from_secs(60), || async {
        let ev = events_of(&client, "anonymous").await;
        ev.iter().any(|(r, _)| r == "Failed").then_some(ev)
    })
    .await;
    assert!(!anonymous_events.iter().any(|(_, m)| m.contains("not found")), "pulled without credentials, yet past the challenge: {anonymous_events:?}");
    let seen = registry.seen.lock().unwrap().clone();
    assert!(!seen.is_empty() && seen.iter().all(|a| a.is_empty()), "the anonymous pull's requests: {seen:?}");
    for p in ["private", "anonymous"] {
        pods.delete(p, &DeleteParams { grace_period_seconds: Some(0), ..Default::default() }).await.unwrap();
    }

    // Init container, env, ConfigMap, emptyDir and downward API volumes, exec probes.
    let mix = pod_where(&pods, "mix", "Running and Ready", |p| phase(p) == "Running" && ready(p)).await;
    assert_eq!(mix.status.as_ref().unwrap().init_container_statuses.as_ref().unwrap()[0].state.as_ref().unwrap().terminated.as_ref().unwrap().reason.as_deref(), Some("Completed"));
    let uid = mix.metadata.uid.clone().unwrap();
    let log_path = dir.join(format!("n1/logs/pods/default_mix_{uid}/app/0.log"));
    let out = poll("mix's output", Duration::from_secs(30), || async { std::fs::read_to_string(&log_path).ok().filter(|l| l.contains("labels=")) }).await;
    for line in ["stdout F init-done", "stdout F hello mix fast", "stdout F conf=hello", "stdout F labels=tier=\"demo\""] {
        assert!(out.lines().any(|l| l.ends_with(line)), "mix's log lacks {line:?}:\n{out}");
    }

    // Crash loop: restarted, then backing off, the last exit recorded.
    let crash = pod_where(&pods, "crash", "CrashLoopBackOff after a restart", |p| {
        let c = container_status(p);
        c["restartCount"].as_i64() >= Some(1) && c["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    })
    .await;
    assert_eq!(container_status(&crash)["lastState"]["terminated"]["exitCode"], 3);
    assert_eq!(container_status(&crash)["lastState"]["terminated"]["reason"], "Error");
    // restartPolicy Never: Succeeded, Completed; a missing image under Never: ErrImageNeverPull.
    let done = pod_where(&pods, "done", "Succeeded", |p| phase(p) == "Succeeded").await;
    assert_eq!(container_status(&done)["state"]["terminated"]["reason"], "Completed");
    pod_where(&pods, "never", "ErrImageNeverPull", |p| container_status(p)["state"]["waiting"]["reason"] == "ErrImageNeverPull").await;
    // A container over its memory limit is OOMKilled; a termination message is reported;
    // a memory-backed emptyDir is a tmpfs of its sizeLimit.
    let oom = pod_where(&pods, "oom", "Failed", |p| phase(p) == "Failed").await;
    assert_eq!(container_status(&oom)["state"]["terminated"]["reason"], "OOMKilled");
    assert_eq!(container_status(&oom)["state"]["terminated"]["exitCode"], 137);
    let bye = pod_where(&pods, "bye", "Failed", |p| phase(p) == "Failed").await;
    assert_eq!(container_status(&bye)["state"]["terminated"]["message"], "see you");
    assert_eq!(container_status(&bye)["state"]["terminated"]["exitCode"], 4);
    let incluster = pod_where(&pods, "incluster", "finished", |p| matches!(phase(p), "Succeeded" | "Failed")).await;
    let said = pods.logs("incluster", &kube::api::LogParams::default()).await.unwrap();
    let spec = incluster.spec.as_ref().unwrap();
    assert_eq!(spec.service_account_name.as_deref(), Some("default"));
    assert!(spec.volumes.iter().flatten().any(|v| v.name.starts_with("kube-api-access-")), "the ServiceAccount admission added its volume");
    for line in ["ns=default\n", "-----BEGIN CERTIFICATE-----\n", "api=reachable\n"] {
        assert!(said.contains(line), "incluster's output lacks {line:?} (phase {}):\n{said}", phase(&incluster));
    }
    assert_eq!(phase(&incluster), "Succeeded");
    // The mounted token is the pod's ServiceAccount's, accepted by the API.
    let token = said.lines().find_map(|l| l.strip_prefix("token=")).expect("the token line").to_string();
    let mut as_pod = kube::Config::from_custom_kubeconfig(kube::config::Kubeconfig::read_from(&kubeconfig).unwrap(), &Default::default()).await.unwrap();
    as_pod.auth_info = kube::config::AuthInfo { token: Some(token.into()), ..Default::default() };
    let reviews: Api<k8s_openapi::api::authentication::v1::SelfSubjectReview> = Api::all(kube::Client::try_from(as_pod).unwrap());
    let who = reviews.create(&pp, &Default::default()).await.expect("the API accepts the pod's token");
    let who = serde_json::to_value(who).unwrap();
    assert_eq!(who["status"]["userInfo"]["username"], "system:serviceaccount:default:default", "{who}");
    pod_where(&pods, "mem", "Running", |p| phase(p) == "Running").await;
    let mem_uid = pods.get("mem").await.unwrap().metadata.uid.unwrap();
    let mem_log = dir.join(format!("n1/logs/pods/default_mem_{mem_uid}/c/0.log"));
    let mounted = poll("mem's mount line", Duration::from_secs(30), || async { std::fs::read_to_string(&mem_log).ok().filter(|l| l.contains("/cache")) }).await;
    assert!(mounted.contains("tmpfs on /cache type tmpfs") && mounted.contains("size=8192k"), "{mounted}");

    // Logs through the API server from the node's agent: current, previous, tail, follow.
    let lp = |c: &str| kube::api::LogParams { container: Some(c.into()), ..Default::default() };
    let logs = pods.logs("mix", &lp("app")).await.unwrap();
    assert!(logs.starts_with("init-done\nhello mix fast\nconf=hello\n"), "{logs:?}");
    assert_eq!(pods.logs("mix", &lp("setup")).await.unwrap(), "", "the init container printed nothing to stdout");
    let tail = pods.logs("mix", &kube::api::LogParams { container: Some("app".into()), tail_lines: Some(1), ..Default::default() }).await.unwrap();
    assert!(tail.starts_with("labels="), "{tail:?}");
    let stamped = pods.logs("done", &kube::api::LogParams { timestamps: true, ..Default::default() }).await.unwrap();
    assert!(stamped.ends_with("Z ok\n") && stamped.starts_with("20"), "{stamped:?}");
    let previous = pods.logs("crash", &kube::api::LogParams { previous: true, ..Default::default() }).await;
    assert_eq!(previous.unwrap(), "", "crash's previous instance exists (and printed nothing)");
    match pods.logs("mix", &kube::api::LogParams { previous: true, container: Some("app".into()), ..Default::default() }).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.message, "previous terminated container \"app\" in pod \"mix\" not found"),
        other => panic!("no previous instance of mix/app yet: {other:?}"),
    }
    let only = pods.logs("mix", &kube::api::LogParams::default()).await.unwrap();
    assert!(only.starts_with("init-done"), "the pod's only app container is the default: {only:?}");
    pods.create(&pp, &bound("ticker", json!({"restartPolicy": "Never", "containers": [{"name": "c", "image": IMG, "command": ["sh", "-c", "for i in 1 2 3; do echo tick $i; sleep 1; done"]}]}))).await.unwrap();
    pod_where(&pods, "ticker", "running", |p| phase(p) == "Running").await;
    let followed = {
        use futures::AsyncBufReadExt;
        let stream = pods.log_stream("ticker", &kube::api::LogParams { follow: true, ..Default::default() }).await.unwrap();
        let mut lines = stream.lines();
        let mut got = Vec::new();
        while let Some(l) = futures::StreamExt::next(&mut lines).await {
            got.push(l.unwrap());
        }
        got
    };
    assert_eq!(followed, ["tick 1", "tick 2", "tick 3"], "logs -f streams every line and ends when the container does");

    let reasons: Vec<String> = events_of(&client, "web").await.into_iter().map(|(r, _)| r).collect();
    for r in ["Scheduled", "Pulled", "Created", "Started"] {
        assert!(reasons.iter().any(|x| x == r), "web's events {reasons:?} lack {r}");
    }
    assert!(events_of(&client, "crash").await.iter().any(|(r, m)| r == "BackOff" && m.starts_with("Back-off restarting failed container c in pod crash_default(")));

    // A ConfigMap update reaches the mounted files; the key's removal fails the liveness
    // probe, and the container is restarted.
    cms.patch("cfg", &PatchParams::default(), &Patch::Merge(json!({"data": {"greeting": null}}))).await.unwrap();
    let mix = pod_where(&pods, "mix", "restarted after failing its liveness probe", |p| container_status(p)["restartCount"].as_i64() >= Some(1)).await;
    let ev = events_of(&client, "mix").await;
    assert!(ev.iter().any(|(r, m)| r == "Unhealthy" && m.starts_with("Liveness probe failed")), "{ev:?}");
    assert!(ev.iter().any(|(r, m)| r == "Killing" && m == "Container app failed liveness probe, will be restarted"), "{ev:?}");
    let _ = mix;

    // kubectl shows it as users know it.
    let kubectl = |args: &[&str]| {
        let o = Command::new("kubectl").arg("--kubeconfig").arg(&kubeconfig).args(args).output().expect("kubectl (the kubectl tests need it too)");
        assert!(o.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).to_string()
    };
    let text = kubectl(&["get", "pods", "-o", "wide"]);
    assert!(text.lines().any(|l| l.starts_with("web ") && l.contains("Running") && l.contains(&web_ip) && l.contains("n1")), "{text}");
    assert!(text.lines().any(|l| l.starts_with("done ") && l.contains("Completed")), "{text}");
    // crash runs for a moment after each back-off: the table shows CrashLoopBackOff
    // during the back-off, so look again until it does.
    let crash_looping = |t: &str| t.lines().any(|l| l.starts_with("crash ") && l.contains("CrashLoopBackOff"));
    let mut text = text;
    for _ in 0..60 {
        if crash_looping(&text) {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
        text = kubectl(&["get", "pods", "-o", "wide"]);
    }
    assert!(crash_looping(&text), "{text}");
    assert_eq!(kubectl(&["logs", "ticker"]), "tick 1\ntick 2\ntick 3\n");
    let last = kubectl(&["logs", "mix", "-c", "app", "--tail=1"]);
    assert!(last.starts_with("labels="), "{last:?}");
    // exec over WebSocket through the API server to the agent and containerd.
    let o = Command::new("kubectl").arg("--kubeconfig").arg(&kubeconfig).args(["exec", "mix", "-c", "app", "--", "sh", "-c", "echo out; echo err >&2; cat /work/ready; exit 7"]).output().unwrap();
    assert_eq!(o.status.code(), Some(7), "exec's exit code: {}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "out\ninit-done\n");
    assert!(String::from_utf8_lossy(&o.stderr).contains("err"), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(kubectl(&["exec", "web", "--", "cat", "/www/index.html"]), "hello from keelson\n");
    let described = kubectl(&["describe", "pod", "crash"]);
    assert!(described.contains("CrashLoopBackOff") && described.contains("Back-off restarting failed container c"), "{described}");
    // kubectl 1.27, 1.30 and 1.33 each follow a running container's log as it is written
    // and stop when the container does; each reads --tail and --previous too.
    pods.create(&pp, &bound("ticker2", json!({"restartPolicy": "Never", "containers": [{"name": "c", "image": IMG, "command": ["sh", "-c", "for i in 1 2 3 4 5; do echo tick $i; sleep 1; done"]}]}))).await.unwrap();
    pod_where(&pods, "ticker2", "running", |p| phase(p) == "Running").await;
    let versions = ["1.27", "1.30", "1.33"];
    let bin = |v: &str| format!("/usr/lib/google-cloud-sdk/bin/kubectl.{v}");
    let followers: Vec<_> = versions
        .iter()
        .map(|v| Command::new(bin(v)).arg("--kubeconfig").arg(&kubeconfig).args(["logs", "-f", "ticker2"]).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().expect("a versioned kubectl"))
        .collect();
    for (v, child) in versions.iter().zip(followers) {
        let o = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap()).await.unwrap();
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        let ticks: Vec<u32> = out.lines().filter_map(|l| l.strip_prefix("tick ")?.parse().ok()).collect();
        assert!(o.status.success() && ticks.last() == Some(&5) && ticks.windows(2).all(|w| w[1] == w[0] + 1), "kubectl {v} logs -f ticker2: {out:?} {}", String::from_utf8_lossy(&o.stderr));
        let tail = Command::new(bin(v)).arg("--kubeconfig").arg(&kubeconfig).args(["logs", "ticker2", "--tail=2"]).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&tail.stdout), "tick 4\ntick 5\n", "kubectl {v} logs --tail=2: {}", String::from_utf8_lossy(&tail.stderr));
        let previous = Command::new(bin(v)).arg("--kubeconfig").arg(&kubeconfig).args(["logs", "crash", "--previous"]).output().unwrap();
        assert!(previous.status.success(), "kubectl {v} logs --previous crash: {}", String::from_utf8_lossy(&previous.stderr));
    }

    // The agent is killed; a pod is deleted while it is down; the restarted agent adopts
    // the running web pod (same container, no restart) and removes the deleted one.
    let done_uid = done.metadata.uid.clone().unwrap();
    agent.0.kill().unwrap();
    agent.0.wait().unwrap();
    pods.delete("done", &DeleteParams { grace_period_seconds: Some(0), ..Default::default() }).await.unwrap();
    let mut agent = start_agent(&net, &dir, &server, "", "agent-2.log");
    let runtime: Arc<dyn Runtime> = Arc::new(keelson_agent::runtime::cri::CriRuntime::connect(&dir.join("n1/containerd/containerd.sock")).unwrap());
    poll("the deleted pod's sandbox removed", Duration::from_secs(60), || async {
        let sbs = runtime.list_sandboxes().await.ok()?;
        (!sbs.is_empty() && !sbs.iter().any(|s| s.uid == done_uid)).then_some(())
    })
    .await;
    let web = pod_where(&pods, "web", "Ready after the agent restart", ready).await;
    assert_eq!(container_status(&web)["containerID"].as_str(), Some(web_container.as_str()), "the same container kept running");
    assert_eq!(container_status(&web)["restartCount"], 0);
    assert_eq!(net.curl(&format!("http://{web_ip}:8080/")), "hello from keelson\n");

    // Deleting a pod stops its container within the grace period and removes its sandbox
    // before the deletion is confirmed.
    let web_uid = web.metadata.uid.clone().unwrap();
    pods.delete("web", &DeleteParams::default()).await.unwrap();
    poll("web gone", Duration::from_secs(60), || async { pods.get_opt("web").await.ok()?.is_none().then_some(()) }).await;
    let sbs = runtime.list_sandboxes().await.unwrap();
    assert!(!sbs.iter().any(|s| s.uid == web_uid), "web's sandbox is removed once its deletion is confirmed");
    assert!(!dir.join(format!("n1/pods/{web_uid}")).exists(), "and its volumes");
    let rules = sh(&["nsenter", &net.netns_path(), "iptables-save", "-t", "nat"]);
    let rules = String::from_utf8_lossy(&rules.stdout);
    assert!(!rules.contains(&format!("--dport {HOST_PORT}")), "web's hostPort rules are left in the node:\n{rules}");
    assert_eq!(host_curl(format!("http://{}:{HOST_PORT}/", net.node_ip)), "", "the hostPort still answers");
    assert!(events_of(&client, "web").await.iter().any(|(r, m)| r == "Killing" && m == "Stopping container httpd"));

    // Stopping the agent (as a power-off, --stop-pods-on-exit) leaves no container behind.
    agent.terminate(Duration::from_secs(60));
    let leftover = sh(&["pgrep", "-f", &dir.join("n1/containerd").display().to_string()]);
    assert!(leftover.stdout.is_empty(), "containerd or shims left running: {}", String::from_utf8_lossy(&leftover.stdout));
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let ours: Vec<&str> = mounts.lines().filter(|l| l.contains(&dir.display().to_string())).collect();
    assert!(ours.is_empty(), "mounts left behind: {ours:?}");
}
