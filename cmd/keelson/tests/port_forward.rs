//! `kubectl port-forward` end to end: the real kubectl, through the API server, to
//! `keelson agent` on real containerd, into a busybox `httpd` pod's network namespace.
//! kubectl 1.33 tunnels SPDY in a WebSocket (`SPDY/3.1+portforward.k8s.io`), which the API
//! server carries to the agent's SPDY endpoint; with `KUBECTL_PORT_FORWARD_WEBSOCKETS=false`
//! it speaks SPDY to the API server, which proxies the upgrade byte for byte. kube-rs's
//! `Api::portforward` (a WebSocket with `?ports=`) reaches the agent's WebSocket form.
//!
//! Needs root, containerd and the rest of the node tests' tools; skipped loudly otherwise.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;

mod node_support;
use node_support::{node_ready, node_tests_possible, poll, start_server, NodeNet, Proc};

/// `kubectl port-forward` running, and the local port it listens on.
struct Forward {
    _proc: Proc,
    port: u16,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

fn port_forward(kubectl: &str, kubeconfig: &Path, env: &[(&str, &str)], remote: u16) -> Forward {
    let mut child = Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["port-forward", "pod/web", &format!(":{remote}"), "--address", "127.0.0.1"])
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl");
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let err = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let sink = err.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let mut s = sink.lock().unwrap();
            s.push_str(&line);
            s.push('\n');
        }
    });
    // "Forwarding from 127.0.0.1:40123 -> 8080"
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(rest) = line.strip_prefix("Forwarding from 127.0.0.1:") {
                let _ = tx.send(rest.split(' ').next().unwrap_or("").parse::<u16>().ok());
            }
        }
    });
    let port = rx.recv_timeout(Duration::from_secs(30)).ok().flatten();
    let port = port.unwrap_or_else(|| panic!("kubectl port-forward did not start: {}", err.lock().unwrap()));
    Forward { _proc: Proc(child), port, stderr: err }
}

/// An HTTP/1.0 GET of `/` through the forwarded port: the whole answer.
fn http_get(port: u16) -> String {
    http_get_then(port, false)
}

/// The same, half-closing the connection once the request is sent.
fn http_get_then(port: u16, half_close: bool) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(b"GET / HTTP/1.0\r\nHost: web\r\n\r\n").unwrap();
    if half_close {
        s.shutdown(std::net::Shutdown::Write).unwrap();
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// An HTTP/1.0 GET of `path`: the body's bytes (after the header).
fn http_get_body(port: u16, path: &str) -> Vec<u8> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: web\r\n\r\n").as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    match out.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(i) => out.split_off(i + 4),
        None => Vec::new(),
    }
}

/// `GET path` over one kube-rs forwarded connection, answered until the pod closes it.
async fn kube_rs_get(mut conn: tokio::io::DuplexStream, path: &str) -> Vec<u8> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    conn.write_all(format!("GET {path} HTTP/1.0\r\nHost: web\r\nConnection: close\r\n\r\n").as_bytes()).await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), conn.read_to_end(&mut got)).await.expect("the answer within 60 s").expect("reading the answer");
    got
}

/// `sha256sum`'s digest of `bytes`.
fn sha256(bytes: &[u8]) -> String {
    let mut child = std::process::Command::new("sha256sum").stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).spawn().expect("sha256sum");
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_port_forward_reaches_a_pod() {
    if !node_tests_possible("kubectl port-forward into a real pod") {
        return;
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let tmp = tempfile::tempdir().unwrap();
    let dir: PathBuf = tmp.path().to_path_buf();
    let net = NodeNet::create(0);
    let cluster = start_server(&net, &dir).await;
    let _agent = node_support::start_agent(&net, &dir, &cluster.url, &cluster.token, "n1", "10.42.9.0/24", "agent.log");
    node_ready(&cluster.client, "n1").await;

    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), "default");
    let web: Pod = serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "httpd", "image": "keelson.local/busybox:stable", "command": ["sh", "-c", "dd if=/dev/urandom of=/www/big bs=1048576 count=32 2>/dev/null; sha256sum /www/big; httpd -p 8082 -h /www; exec httpd -f -p 8080 -h /www"],
            "readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1}}]}}))
    .unwrap();
    pods.create(&PostParams::default(), &web).await.unwrap();
    poll("web Ready", Duration::from_secs(90), || async {
        let p = pods.get_opt("web").await.ok().flatten()?;
        p.status?.conditions?.iter().any(|c| c.type_ == "Ready" && c.status == "True").then_some(())
    })
    .await;
    let server_log = || std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();

    // kubectl 1.33's default: SPDY tunnelled in a WebSocket.
    let fwd = port_forward("kubectl", &cluster.kubeconfig, &[], 8080);
    for attempt in 0..3 {
        let answer = http_get(fwd.port);
        assert!(answer.starts_with("HTTP/1.") && answer.ends_with("hello from keelson\n"), "GET #{attempt} through the tunnel: {answer:?}\nkubectl: {}", fwd.stderr.lock().unwrap());
    }
    // A large download, byte for byte (32 MiB of random data, its digest in the pod's log).
    let logged = pods.logs("web", &Default::default()).await.unwrap();
    let want = logged.split_whitespace().next().unwrap_or_default().to_string();
    let started = std::time::Instant::now();
    let big = http_get_body(fwd.port, "/big");
    eprintln!("32 MiB through the WebSocket tunnel in {:?}", started.elapsed());
    assert_eq!(big.len(), 32 << 20, "the download's size through the WebSocket tunnel");
    assert_eq!(sha256(&big), want, "the download's digest through the WebSocket tunnel");
    assert!(server_log().contains("port-forward tunnelled in a WebSocket"), "the WebSocket tunnel was used, not the SPDY fallback");
    assert!(!server_log().contains("port-forward over SPDY"));
    drop(fwd);

    // Old kubectl's way: SPDY from kubectl, proxied as is.
    let fwd = port_forward("kubectl", &cluster.kubeconfig, &[("KUBECTL_PORT_FORWARD_WEBSOCKETS", "false")], 8080);
    let answer = http_get(fwd.port);
    assert!(answer.ends_with("hello from keelson\n"), "GET over SPDY: {answer:?}\nkubectl: {}", fwd.stderr.lock().unwrap());
    let big = http_get_body(fwd.port, "/big");
    assert_eq!((big.len(), sha256(&big)), (32 << 20, want.clone()), "the large download over SPDY");
    // The client's half-close reaches the pod, and the answer still comes back.
    let answer = http_get_then(fwd.port, true);
    assert!(answer.ends_with("hello from keelson\n"), "GET after a half-close: {answer:?}\nkubectl: {}", fwd.stderr.lock().unwrap());
    assert!(server_log().contains("port-forward over SPDY"));
    drop(fwd);
    // kubectl 1.27, 1.29 and 1.30 themselves (SPDY only: the WebSocket tunnel came in 1.31).
    for version in ["1.27", "1.29", "1.30"] {
        let old = format!("/usr/lib/google-cloud-sdk/bin/kubectl.{version}");
        assert!(Path::new(&old).exists(), "{old} is part of the test image");
        let fwd = port_forward(&old, &cluster.kubeconfig, &[], 8080);
        let answer = http_get(fwd.port);
        assert!(answer.ends_with("hello from keelson\n"), "GET with kubectl {version}: {answer:?}\nkubectl: {}", fwd.stderr.lock().unwrap());
        let big = http_get_body(fwd.port, "/big");
        assert_eq!((big.len(), sha256(&big)), (32 << 20, want.clone()), "the large download with kubectl {version}");
    }

    // kube-rs's `Api::portforward`: a WebSocket naming its ports in `?ports=`
    // (v4.channel.k8s.io), proxied to the agent with them. Two ports in one socket: an
    // HTTP request on each connection, and the large download byte for byte.
    let mut pf = pods.portforward("web", &[8080, 8082]).await.expect("kube-rs port-forward");
    // A port's end shows when the socket closes (v4 has no per-channel close): both
    // requests go out before either answer is read.
    let (first, second) = (pf.take_stream(8080).expect("8080"), pf.take_stream(8082).expect("8082"));
    let (small, big) = tokio::join!(kube_rs_get(first, "/"), kube_rs_get(second, "/big"));
    assert!(small.starts_with(b"HTTP/1.") && small.ends_with(b"hello from keelson\n"), "GET / through kube-rs: {:?}", String::from_utf8_lossy(&small));
    let body = &big[big.windows(4).position(|w| w == b"\r\n\r\n").expect("a header") + 4..];
    assert_eq!((body.len(), sha256(body)), (32 << 20, want.clone()), "the large download through kube-rs");
    // The agent closes the socket once both connections ended, as the kubelet does (kube-rs
    // then reports its own late Close as sent after closing).
    let ended = tokio::time::timeout(Duration::from_secs(30), pf.join()).await.expect("the socket closes once both connections ended");
    eprintln!("kube-rs port-forward ended: {ended:?}");
    assert!(server_log().contains("port-forward over a WebSocket"), "kube-rs's form was proxied as such");
    // A refused connection: the agent's error on the port's error channel.
    let mut pf = pods.portforward("web", &[8081]).await.expect("kube-rs port-forward");
    let error = pf.take_error(8081).expect("an error channel");
    let said = tokio::time::timeout(Duration::from_secs(30), error).await.expect("the error within 30 s").unwrap_or_default();
    assert!(said.contains("error forwarding port 8081 to pod default/web") && said.to_lowercase().contains("connection refused"), "{said}");
    pf.abort();
    // A port out of range is refused before any upgrade.
    let bad = http::Request::get("/api/v1/namespaces/default/pods/web/portforward?ports=0").body(vec![]).unwrap();
    let e = cluster.client.connect(bad).await.err().expect("ports=0 refused");
    assert!(e.to_string().contains("400"), "{e}");

    // Nothing listens on 8081: the agent's error text reaches kubectl.
    let fwd = port_forward("kubectl", &cluster.kubeconfig, &[], 8081);
    let answer = http_get(fwd.port);
    assert_eq!(answer, "", "a refused connection is closed");
    let said = poll("kubectl's error", Duration::from_secs(20), || async {
        let s = fwd.stderr.lock().unwrap().clone();
        s.contains("error forwarding port 8081 to pod default/web").then_some(s)
    })
    .await;
    assert!(said.to_lowercase().contains("connection refused"), "{said}");
}
