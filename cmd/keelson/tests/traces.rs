//! One trace from `kubectl apply` to the node agent starting the container, exported over
//! OTLP and caught by a real OTLP receiver in this test (the collector's protobuf types
//! behind a tonic gRPC server and an HTTP endpoint). Three servers export over gRPC, a
//! simulated node over HTTP. The trace the pod was created in must hold, with every span's
//! parent in the trace: the API request and its authorization, the store call and the
//! replica's run of it, the Raft proposal and its apply on all three replicas, the pod's
//! ADDED event delivered to a watcher, the scheduler's cycle and its binding request, and
//! the agent's start-up sync with its sandbox and container starts and its first readiness
//! probe. A write and a linearizable read through a follower keep their trace across the
//! forward to the leader. Runs on any machine (no root, no containers).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message;

mod cluster_support;
mod sim_support;
use sim_support::SimulatedAgent;

/// One received span, flattened.
#[derive(Clone, Debug)]
struct Received {
    service: String,
    instance: String,
    name: String,
    trace_id: String,
    span_id: String,
    parent: String,
    attributes: BTreeMap<String, String>,
}

#[derive(Clone, Default)]
struct Collector {
    spans: Arc<Mutex<Vec<Received>>>,
    /// How many export requests came over each transport.
    grpc_exports: Arc<Mutex<usize>>,
    http_exports: Arc<Mutex<usize>>,
}

fn text(v: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(AnyValue::StringValue(s)) => s.clone(),
        Some(AnyValue::IntValue(i)) => i.to_string(),
        Some(AnyValue::BoolValue(b)) => b.to_string(),
        Some(AnyValue::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

fn attrs(kvs: &[KeyValue]) -> BTreeMap<String, String> {
    kvs.iter().map(|kv| (kv.key.clone(), text(&kv.value))).collect()
}

impl Collector {
    fn take(&self, req: ExportTraceServiceRequest) {
        let mut out = self.spans.lock().unwrap();
        for rs in req.resource_spans {
            let resource = attrs(rs.resource.as_ref().map(|r| &r.attributes[..]).unwrap_or_default());
            for ss in rs.scope_spans {
                for s in ss.spans {
                    out.push(Received {
                        service: resource.get("service.name").cloned().unwrap_or_default(),
                        instance: resource.get("service.instance.id").cloned().unwrap_or_default(),
                        name: s.name.clone(),
                        trace_id: hex(&s.trace_id),
                        span_id: hex(&s.span_id),
                        parent: hex(&s.parent_span_id),
                        attributes: attrs(&s.attributes),
                    });
                }
            }
        }
    }

    fn trace(&self, trace_id: &str) -> Vec<Received> {
        self.spans.lock().unwrap().iter().filter(|s| s.trace_id == trace_id).cloned().collect()
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(&self, req: tonic::Request<ExportTraceServiceRequest>) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        *self.grpc_exports.lock().unwrap() += 1;
        self.take(req.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse { partial_success: None }))
    }
}

/// The receiver's two ports: OTLP/gRPC and OTLP/HTTP (protobuf).
async fn start_collector(collector: Collector) -> (SocketAddr, SocketAddr) {
    let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let grpc_addr = grpc.local_addr().unwrap();
    let svc = TraceServiceServer::new(collector.clone());
    tokio::spawn(async move {
        tonic::transport::Server::builder().add_service(svc).serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(grpc)).await.unwrap();
    });
    let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http_addr = http.local_addr().unwrap();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            let c = collector.clone();
            async move {
                let Ok(req) = ExportTraceServiceRequest::decode(body) else { return (axum::http::StatusCode::BAD_REQUEST, Vec::new()) };
                *c.http_exports.lock().unwrap() += 1;
                c.take(req);
                (axum::http::StatusCode::OK, ExportTraceServiceResponse { partial_success: None }.encode_to_vec())
            }
        }),
    );
    tokio::spawn(async move { axum::serve(http, app).await.unwrap() });
    (grpc_addr, http_addr)
}

const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: traced
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: keelson.local/busybox:stable
    command: ["sleep", "3600"]
    readinessProbe:
      exec:
        command: ["true"]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_covers_kubectl_apply_from_the_api_request_to_the_agent_starting_the_pod() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let collector = Collector::default();
    let (grpc, http) = start_collector(collector.clone()).await;
    let tmp = tempfile::tempdir().unwrap();
    let dir: PathBuf = tmp.path().to_path_buf();
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_keelson"));
    let mut spec = keelson_runner::ClusterSpec::loopback(3, binary.clone(), dir.join("cluster"));
    spec.server_args = vec!["--otlp-endpoint".into(), format!("http://{grpc}"), "--otlp-protocol".into(), "grpc".into()];
    let cluster = keelson_runner::Cluster::start(spec, |m| eprintln!("cluster: {m}")).await.unwrap();
    cluster.wait_api(Duration::from_secs(90)).await.unwrap();
    let kubeconfig = cluster.kubeconfig_path();
    let more = ["--otlp-endpoint".to_string(), format!("http://{http}"), "--otlp-protocol".into(), "http/protobuf".into()];
    let agent = SimulatedAgent::start(&binary, &cluster, &dir, "sim-1", "10.78.0.0/24", &more);
    let agent_log = || agent.log();

    let kc = kube::config::Kubeconfig::read_from(&kubeconfig).unwrap();
    let client = kube::Client::try_from(kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap()).unwrap();
    agent.wait_ready(&client, Duration::from_secs(90)).await;
    // The leader writes traced entries once every member has said it reads them.
    let deadline = Instant::now() + Duration::from_secs(30);
    'gate: loop {
        for m in cluster.manifest().servers() {
            let page = cluster_support::metrics_page(&m.metrics_addr).await;
            let leads = page.lines().any(|l| l == "keelson_raft_is_leader 1");
            if leads && page.lines().any(|l| l == "keelson_raft_cluster_log_format 2") {
                break 'gate;
            }
        }
        assert!(Instant::now() < deadline, "no leader found every member reading traced entries within 30 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // kubectl apply, retried while the new cluster's default ServiceAccount appears.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut child = Command::new("kubectl").arg("--kubeconfig").arg(&kubeconfig).args(["apply", "-f", "-"]).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("kubectl runs");
        child.stdin.take().unwrap().write_all(POD.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        if out.status.success() {
            break;
        }
        assert!(Instant::now() < deadline, "kubectl apply: {}", String::from_utf8_lossy(&out.stderr));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let deadline = Instant::now() + Duration::from_secs(60);
    let pod = loop {
        let p = pods.get_opt("traced").await.ok().flatten();
        if p.as_ref().and_then(|p| p.status.as_ref()?.phase.as_deref()) == Some("Running") {
            break p.unwrap();
        }
        assert!(Instant::now() < deadline, "pod not Running within 60 s: {:?}\nagent log:\n{}", p.and_then(|p| p.status), agent_log());
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let traceparent = pod.metadata.annotations.as_ref().and_then(|a| a.get("trace.keelson.io/traceparent")).cloned().expect("the pod carries its creation trace");
    let trace_id = traceparent.split('-').nth(1).unwrap().to_string();

    // What the trace must hold: (service, span name, attributes it must have).
    let wanted: Vec<(&str, &str, Vec<(&str, &str)>)> = vec![
        ("keelson-server", "request", vec![("verb", "create"), ("resource", "pods"), ("namespace", "default"), ("code", "201")]),
        ("keelson-server", "authorize", vec![]),
        ("keelson-server", "create", vec![("resource", "pods")]),
        ("keelson-server", "store-call", vec![("kind", "txn")]),
        ("keelson-server", "replica-call", vec![("kind", "txn")]),
        ("keelson-server", "raft-propose", vec![]),
        ("keelson-server", "watch-deliver", vec![("resource", "pods"), ("event", "ADDED")]),
        ("keelson-server", "schedule", vec![("node", "sim-1")]),
        ("keelson-server", "request", vec![("verb", "create"), ("resource", "pods/binding"), ("code", "201")]),
        ("keelson-agent", "pod-sync", vec![("pod", "default/traced")]),
        ("keelson-agent", "RunPodSandbox", vec![("runtime", "simulated")]),
        ("keelson-agent", "StartContainer", vec![("runtime", "simulated")]),
        ("keelson-agent", "probe", vec![("container", "app"), ("probe", "readiness"), ("handler", "exec"), ("result", "success")]),
        ("keelson-agent", "ExecSync", vec![("runtime", "simulated")]),
    ];
    let has = |spans: &[Received], (service, name, want): &(&str, &str, Vec<(&str, &str)>)| {
        spans.iter().any(|s| s.service == *service && s.name == *name && want.iter().all(|(k, v)| s.attributes.get(*k).map(String::as_str) == Some(*v)))
    };
    let appliers = |spans: &[Received]| spans.iter().filter(|s| s.name == "apply").map(|s| s.instance.clone()).collect::<BTreeSet<_>>();
    let deadline = Instant::now() + Duration::from_secs(60);
    let spans = loop {
        let spans = collector.trace(&trace_id);
        let missing: Vec<_> = wanted.iter().filter(|w| !has(&spans, w)).map(|(s, n, a)| format!("{s}/{n} {a:?}")).collect();
        if missing.is_empty() && appliers(&spans).len() == 3 {
            break spans;
        }
        if Instant::now() >= deadline {
            let names: Vec<String> = spans.iter().map(|s| format!("{}:{}/{} {:?}", s.instance, s.service, s.name, s.attributes)).collect();
            panic!("trace {trace_id} lacks {missing:?} (apply seen on {:?}); it has:\n{}\nagent log:\n{}", appliers(&spans), names.join("\n"), agent_log());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };

    // One tree: a single root (the kubectl request, which sent no traceparent), and
    // every other span's parent is a span of the trace.
    let ids: BTreeSet<&str> = spans.iter().map(|s| s.span_id.as_str()).collect();
    let roots: Vec<&Received> = spans.iter().filter(|s| s.parent.is_empty()).collect();
    assert_eq!(roots.len(), 1, "one root: {roots:?}");
    assert_eq!((roots[0].name.as_str(), roots[0].attributes.get("resource").map(String::as_str)), ("request", Some("pods")));
    for s in &spans {
        assert!(s.parent.is_empty() || ids.contains(s.parent.as_str()), "{}/{} has a parent outside the trace: {s:?}", s.service, s.name);
    }
    // The annotation names the create span; the scheduler's cycle hangs from it.
    let annotated = traceparent.split('-').nth(2).unwrap();
    let create = spans.iter().find(|s| s.span_id == annotated).expect("the annotated span was exported");
    assert_eq!((create.name.as_str(), create.attributes.get("resource").map(String::as_str)), ("create", Some("pods")), "the annotation is the pod create's span");
    let schedule = spans.iter().find(|s| s.name == "schedule").unwrap();
    assert_eq!(schedule.parent, create.span_id);
    // The cycle's extension points and plugins are timed on its span.
    for point in ["pre_filter_us", "filter_us"] {
        let took = schedule.attributes.get(point).unwrap_or_else(|| panic!("schedule span lacks {point}: {:?}", schedule.attributes));
        took.parse::<u64>().unwrap_or_else(|e| panic!("{point}={took:?}: {e}"));
    }
    let plugins = schedule.attributes.get("plugins_us").unwrap_or_else(|| panic!("schedule span lacks plugins_us: {:?}", schedule.attributes));
    assert!(
        plugins.split(',').any(|p| p.starts_with("PreFilter/") && p.split_once('=').is_some_and(|(_, us)| us.parse::<u64>().is_ok())),
        "plugins_us names PreFilter plugins with their times: {plugins}"
    );
    let sync = spans.iter().find(|s| s.name == "pod-sync" && s.service == "keelson-agent").unwrap();
    assert_eq!(sync.parent, create.span_id);
    assert_eq!(sync.instance, "sim-1");
    assert!(*collector.grpc_exports.lock().unwrap() > 0 && *collector.http_exports.lock().unwrap() > 0, "both transports carried spans");

    // A write reaching a follower is forwarded to the leader with its trace: the leader
    // writes the entry traced, so every replica's apply joins the follower's request.
    let mut follower = None;
    for m in cluster.manifest().servers() {
        let page = cluster_support::metrics_page(&m.metrics_addr).await;
        if page.lines().any(|l| l.starts_with("keelson_raft_is_leader") && l.ends_with(" 0")) {
            follower = Some(m.name.clone());
            break;
        }
    }
    let follower = follower.expect("a follower among the servers");
    let follower_pods: Api<Pod> = Api::namespaced(cluster_support::client(&cluster, &follower).await, "default");
    let forwarded: Pod = serde_json::from_value(serde_json::json!({"metadata": {"name": "forwarded"}, "spec": {"containers": [{"name": "app", "image": "keelson.local/busybox:stable"}]}})).unwrap();
    let created = follower_pods.create(&Default::default(), &forwarded).await.unwrap();
    let traceparent = created.metadata.annotations.as_ref().and_then(|a| a.get("trace.keelson.io/traceparent")).cloned().expect("the forwarded pod carries its creation trace");
    let trace_id = traceparent.split('-').nth(1).unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let spans = collector.trace(&trace_id);
        let proposed_on_follower = spans.iter().any(|s| s.name == "raft-propose" && s.instance == follower);
        if proposed_on_follower && appliers(&spans).len() == 3 {
            break;
        }
        if Instant::now() >= deadline {
            let names: Vec<String> = spans.iter().map(|s| format!("{}:{}/{}", s.instance, s.service, s.name)).collect();
            panic!("the write through follower {follower} (trace {trace_id}) has apply spans on {:?}, want all 3; it has:\n{}", appliers(&spans), names.join("\n"));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // A linearizable read on a follower waits for a read index, and the leader confirms
    // it inside the read's trace: read-index (follower) → leader-read-index (leader).
    follower_pods.get("forwarded").await.unwrap();
    let read_through = |s: &Received| {
        s.name == "request" && s.instance == follower && s.attributes.get("verb").map(String::as_str) == Some("get") && s.attributes.get("name").map(String::as_str) == Some("forwarded")
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let reads: BTreeSet<String> = collector.spans.lock().unwrap().iter().filter(|s| read_through(s)).map(|s| s.trace_id.clone()).collect();
        let confirmed = reads.iter().any(|t| {
            let spans = collector.trace(t);
            let wait = spans.iter().find(|s| s.name == "read-index" && s.instance == follower);
            let confirm = spans.iter().find(|s| s.name == "leader-read-index" && s.instance != follower);
            matches!((wait, confirm), (Some(w), Some(c)) if c.parent == w.span_id && w.attributes.get("round").is_some_and(|r| r.parse::<u64>().is_ok()) && c.attributes.get("index").is_some_and(|i| i.parse::<u64>().is_ok()))
        });
        if confirmed {
            break;
        }
        if Instant::now() >= deadline {
            let seen: Vec<String> = reads.iter().flat_map(|t| collector.trace(t)).map(|s| format!("{}:{}/{} {:?}", s.instance, s.service, s.name, s.attributes)).collect();
            panic!("the read through follower {follower} has no read-index span answered by the leader's leader-read-index; its traces ({}) hold:\n{}", reads.len(), seen.join("\n"));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    drop(cluster);
}
