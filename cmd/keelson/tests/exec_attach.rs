//! `kubectl exec`, `kubectl cp` and `kubectl attach` end to end with stdin that ends: the
//! real kubectl, through the API server, to `keelson agent`, which reaches containerd's
//! streaming server over SPDY so that the end of the client's stdin (WebSocket v5
//! `[255, 0]` from kubectl 1.33, a SPDY FIN from kubectl 1.29) closes the process's stdin.
//! kubectl 1.27 (SPDY) and 1.30 (WebSocket) exec too, and a viewer without `pods/exec`
//! is refused with 403 over either protocol. Clients killed mid-session leave no
//! connection, task or command behind on the API server or the agent.
//!
//! Needs root, containerd and the rest of the node tests' tools; skipped loudly otherwise.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;

mod node_support;
use node_support::{node_ready, node_tests_possible, poll, start_server, NodeNet};

const KUBECTL_1_29: &str = "/usr/lib/google-cloud-sdk/bin/kubectl.1.29";

/// Runs `kubectl args` with `stdin` as its whole input (then EOF); fails the test if it
/// has not ended within `limit` (a lost end of stdin shows as a hang).
fn kubectl_with(kubectl: &str, kubeconfig: &Path, args: &[&str], stdin: &[u8], limit: Duration) -> Output {
    let mut child = Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl");
    let mut input = child.stdin.take().unwrap();
    let data = stdin.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = input.write_all(&data);
        // Dropping `input` is the EOF.
    });
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let out_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let err_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            let err = String::from_utf8_lossy(&err_reader.join().unwrap()).to_string();
            panic!("{kubectl} {args:?} did not end within {limit:?} (stdin's end lost?); stderr: {err}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    feeder.join().unwrap();
    Output { status, stdout: out_reader.join().unwrap(), stderr: err_reader.join().unwrap() }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
}

async fn running(pods: &Api<Pod>, name: &str) {
    poll(&format!("{name} Running"), Duration::from_secs(90), || async {
        let p = pods.get_opt(name).await.ok().flatten()?;
        let st = p.status?;
        (st.phase.as_deref() == Some("Running") && st.container_statuses?.iter().all(|c| c.ready)).then_some(())
    })
    .await;
}

/// Bytes no text handling would leave alone: every byte value, NULs and CRs included.
fn binary_payload() -> Vec<u8> {
    let mut x: u32 = 0x1234_5678;
    (0..300_000)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            if i < 256 { i as u8 } else { (x >> 24) as u8 }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_cp_and_attach_with_stdin_that_ends() {
    if !node_tests_possible("kubectl exec -i, cp and attach into real pods") {
        return;
    }
    assert!(Path::new(KUBECTL_1_29).exists(), "{KUBECTL_1_29} is part of the test image");
    let _ = rustls::crypto::ring::default_provider().install_default();
    let tmp = tempfile::tempdir().unwrap();
    let dir: PathBuf = tmp.path().to_path_buf();
    let net = NodeNet::create(0);
    let cluster = start_server(&net, &dir).await;
    let _agent = node_support::start_agent(&net, &dir, &cluster.url, &cluster.token, "n1", "10.42.9.0/24", "agent.log");
    node_ready(&cluster.client, "n1").await;
    let kc = cluster.kubeconfig.clone();
    let logs = || format!("server log:\n{}\nagent log (tail):\n{}", tail(&dir.join("server.log"), 30), tail(&dir.join("agent.log"), 60));

    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), "default");
    let spec = |name: &str, extra: serde_json::Value| -> Pod {
        let mut c = json!({"name": "c", "image": "keelson.local/busybox:stable"});
        c.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 1, "restartPolicy": "Never", "containers": [c]}})).unwrap()
    };
    pods.create(&PostParams::default(), &spec("box", json!({"command": ["sleep", "3600"]}))).await.unwrap();
    let reader = || json!({"command": ["sh", "-c", "while read l; do echo got:$l; done; echo bye"], "stdin": true, "stdinOnce": true});
    for name in ["reader", "reader-127", "reader-130"] {
        pods.create(&PostParams::default(), &spec(name, reader())).await.unwrap();
    }
    running(&pods, "box").await;
    for name in ["reader", "reader-127", "reader-130"] {
        running(&pods, name).await;
    }
    let limit = Duration::from_secs(60);

    // kubectl 1.33 (WebSocket v5): stdin's end reaches `cat`, which then exits 0.
    let o = kubectl_with("kubectl", &kc, &["exec", "-i", "box", "--", "cat"], b"hi\n", limit);
    assert_eq!((o.status.code(), text(&o.stdout).as_str()), (Some(0), "hi\n"), "echo hi | kubectl exec -i box -- cat; stderr: {}\n{}", text(&o.stderr), logs());
    let o = kubectl_with("kubectl", &kc, &["exec", "-i", "box", "--", "wc", "-c"], &vec![b'x'; 200_000], limit);
    assert_eq!(text(&o.stdout).trim(), "200000", "all of a large stdin arrives before its end; stderr: {}", text(&o.stderr));
    // `exec -it` under a terminal (script(1) gives kubectl a pty of 41×101): the command
    // gets a TTY of its own and kubectl's size through the resize channel; its exit code
    // passes through. Both protocols: WebSocket (1.33) and SPDY (1.29).
    for kubectl in ["kubectl", KUBECTL_1_29] {
        // The size follows the terminal's: resized to 50×120 while the command runs.
        let line = format!(
            "stty rows 41 cols 101; (sleep 5; stty rows 50 cols 120 </dev/tty) & {kubectl} --kubeconfig {} exec -it box -- sh -c 'tty; sleep 2; stty size; sleep 8; stty size; exit 3'",
            kc.display()
        );
        let o = Command::new("timeout").args(["60", "script", "-qec", &line, "/dev/null"]).stdin(Stdio::null()).output().expect("script(1)");
        let out = text(&o.stdout);
        assert!(out.contains("/dev/pts/") && out.contains("41 101\r\n50 120"), "{kubectl} exec -it: a TTY of the terminal's size, then its new one: {out:?} {}", text(&o.stderr));
        assert_eq!(o.status.code(), Some(3), "{kubectl} exec -it's exit code: {out:?}");
    }
    // The exit code passes through; stdout and stderr stay apart.
    let o = kubectl_with("kubectl", &kc, &["exec", "box", "--", "sh", "-c", "echo out; echo err >&2; exit 7"], b"", limit);
    assert_eq!(o.status.code(), Some(7), "exit 7; stderr: {}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "out\n");
    assert!(text(&o.stderr).starts_with("err\n"), "{}", text(&o.stderr));
    let server_log = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
    assert!(server_log.lines().any(|l| l.contains("pods/exec") && l.contains("websocket")), "kubectl 1.33 used its WebSocket\n{}", logs());

    // kubectl cp into the pod (exec of `tar -xmf -` with stdin) and back out.
    let payload = binary_payload();
    let local = dir.join("payload.bin");
    std::fs::write(&local, &payload).unwrap();
    let o = kubectl_with("kubectl", &kc, &["cp", local.to_str().unwrap(), "box:/tmp/payload.bin"], b"", limit);
    assert!(o.status.success(), "kubectl cp into the pod: {}\n{}", text(&o.stderr), logs());
    let o = kubectl_with("kubectl", &kc, &["exec", "box", "--", "wc", "-c", "/tmp/payload.bin"], b"", limit);
    assert!(text(&o.stdout).starts_with(&payload.len().to_string()), "the file in the pod: {}", text(&o.stdout));
    let back = dir.join("back.bin");
    let o = kubectl_with("kubectl", &kc, &["cp", "box:/tmp/payload.bin", back.to_str().unwrap()], b"", limit);
    assert!(o.status.success(), "kubectl cp out of the pod: {}", text(&o.stderr));
    assert!(std::fs::read(&back).unwrap() == payload, "the bytes that come back are the bytes that went in");

    // kubectl 1.29 speaks SPDY (v5 offered first) to the API server and on to the agent.
    let o = kubectl_with(KUBECTL_1_29, &kc, &["exec", "-i", "box", "--", "cat"], b"hi\n", limit);
    assert_eq!((o.status.code(), text(&o.stdout).as_str()), (Some(0), "hi\n"), "kubectl 1.29 exec -i cat; stderr: {}\n{}", text(&o.stderr), logs());
    let o = kubectl_with(KUBECTL_1_29, &kc, &["exec", "box", "--", "sh", "-c", "echo out; echo err >&2; exit 7"], b"", limit);
    assert_eq!((o.status.code(), text(&o.stdout).as_str()), (Some(7), "out\n"), "kubectl 1.29 exit 7; stderr: {}", text(&o.stderr));
    assert!(text(&o.stderr).starts_with("err\n"), "{}", text(&o.stderr));
    let back29 = dir.join("back29.bin");
    let o = kubectl_with(KUBECTL_1_29, &kc, &["cp", local.to_str().unwrap(), "box:/tmp/p29.bin"], b"", limit);
    assert!(o.status.success(), "kubectl 1.29 cp into the pod: {}", text(&o.stderr));
    let o = kubectl_with(KUBECTL_1_29, &kc, &["cp", "box:/tmp/p29.bin", back29.to_str().unwrap()], b"", limit);
    assert!(o.status.success() && std::fs::read(&back29).unwrap() == payload, "kubectl 1.29 cp round trip: {}", text(&o.stderr));
    let server_log = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
    assert!(server_log.lines().any(|l| l.contains("pods/exec") && l.contains("SPDY/3.1")), "kubectl 1.29 used SPDY\n{}", logs());

    // kubectl 1.27 (SPDY, v4 at most) and 1.30 (WebSocket v5 by default) too.
    for (version, protocol) in [("1.27", "SPDY/3.1"), ("1.30", "websocket")] {
        let kubectl = format!("/usr/lib/google-cloud-sdk/bin/kubectl.{version}");
        let o = kubectl_with(&kubectl, &kc, &["exec", "-i", "box", "--", "cat"], b"hi\n", limit);
        assert_eq!((o.status.code(), text(&o.stdout).as_str()), (Some(0), "hi\n"), "kubectl {version} exec -i cat; stderr: {}\n{}", text(&o.stderr), logs());
        let o = kubectl_with(&kubectl, &kc, &["exec", "box", "--", "sh", "-c", "exit 3"], b"", limit);
        assert_eq!(o.status.code(), Some(3), "kubectl {version} exit 3; stderr: {}", text(&o.stderr));
        let (inside, back) = (format!("box:/tmp/p{version}.bin"), dir.join(format!("back{version}.bin")));
        let o = kubectl_with(&kubectl, &kc, &["cp", local.to_str().unwrap(), &inside], b"", limit);
        assert!(o.status.success(), "kubectl {version} cp into the pod: {}", text(&o.stderr));
        let o = kubectl_with(&kubectl, &kc, &["cp", &inside, back.to_str().unwrap()], b"", limit);
        assert!(o.status.success() && std::fs::read(&back).unwrap() == payload, "kubectl {version} cp round trip: {}", text(&o.stderr));
        let server_log = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
        assert!(server_log.lines().any(|l| l.contains("pods/exec") && l.contains(protocol)), "kubectl {version} used {protocol}\n{}", logs());
    }

    // A caller without rights on pods/exec is refused by the API server, with either
    // protocol (kubectl 1.33 falls back from the refused WebSocket to SPDY, which is
    // refused too).
    let o = kubectl_with("kubectl", &kc, &["create", "rolebinding", "nobody-views", "--clusterrole=view", "--user=nobody"], b"", limit);
    assert!(o.status.success(), "{}", text(&o.stderr));
    for kubectl in ["kubectl", KUBECTL_1_29] {
        let o = kubectl_with(kubectl, &kc, &["--as=nobody", "exec", "box", "--", "true"], b"", limit);
        let err = text(&o.stderr);
        assert!(!o.status.success() && err.contains("forbidden") && err.contains("User \"nobody\" cannot create resource \"pods/exec\""), "{kubectl} exec as a viewer: {err}");
    }

    // kubectl attach to a container reading stdin: what is sent arrives, and its end
    // (stdinOnce) ends the container, which ends the attach.
    let o = kubectl_with("kubectl", &kc, &["attach", "-i", "reader"], b"one\ntwo\n", limit);
    assert_eq!(text(&o.stdout), "got:one\ngot:two\nbye\n", "kubectl attach -i reader; stderr: {}\n{}", text(&o.stderr), logs());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let server_log = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
    assert!(server_log.contains("pods/attach"), "attach went through pods/attach\n{}", logs());
    poll("reader Succeeded", Duration::from_secs(30), || async {
        let p = pods.get_opt("reader").await.ok().flatten()?;
        (p.status?.phase.as_deref() == Some("Succeeded")).then_some(())
    })
    .await;
    // kubectl 1.27 (SPDY) and 1.30 (WebSocket) attach too.
    for (version, pod) in [("1.27", "reader-127"), ("1.30", "reader-130")] {
        let kubectl = format!("/usr/lib/google-cloud-sdk/bin/kubectl.{version}");
        let o = kubectl_with(&kubectl, &kc, &["attach", "-i", pod], b"one\n", limit);
        assert_eq!((o.status.code(), text(&o.stdout).as_str()), (Some(0), "got:one\nbye\n"), "kubectl {version} attach -i {pod}; stderr: {}\n{}", text(&o.stderr), logs());
    }

    // Clients that vanish mid-stream (SIGKILL: no close, no FIN of their own) leave
    // nothing behind: not the API server's connection to the agent, not the agent's to
    // the runtime's streaming server, not the command they ran. Each session's task owns
    // those connections, so their count is the count of sessions still alive.
    let to_agent = || established(None, &format!("dst {} dport = :{}", net.node_ip, 10250));
    let stream_port = runtime_stream_port(&net.ns);
    let to_runtime = || established(Some(&net.ns), &format!("dst 127.0.0.1 dport = :{stream_port}"));
    assert_eq!((to_agent(), to_runtime()), (0, 0), "no session is open before the clients start");
    let marker = format!("disconnect-{}", std::process::id());
    let mut exec = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kc)
        .args(["exec", "-i", "box", "--", "sh", "-c", "cat >/dev/null; echo stdin ended", &marker])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl exec");
    let mut follow = Command::new("kubectl").arg("--kubeconfig").arg(&kc).args(["logs", "-f", "box"]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("kubectl logs -f");
    let open = poll("both sessions open", Duration::from_secs(30), || async {
        let (a, r, p) = (to_agent(), to_runtime(), in_pod(&marker));
        (a >= 2 && r >= 1 && p).then_some((a, r))
    })
    .await;
    eprintln!("open: {} API server → agent connection(s), {} agent → runtime", open.0, open.1);
    let _ = exec.kill();
    let _ = follow.kill();
    let _ = (exec.wait(), follow.wait());
    poll("the vanished clients' sessions gone", Duration::from_secs(60), || async {
        let (a, r, p) = (to_agent(), to_runtime(), in_pod(&marker));
        eprintln!("after the clients died: to the agent {a}, to the runtime {r}, command alive {p}");
        (a == 0 && r == 0 && !p).then_some(())
    })
    .await;

    // `keelson bench logs`, short: a 5 MB log read whole by kube-rs and kubectl, and five
    // followers of a ticker, every line in order.
    let out = Command::new(node_support::keelson())
        .args(["bench", "logs", "--kubeconfig"])
        .arg(&kc)
        .args(["--bytes", "5000000", "--reads", "1", "--followers", "5", "--follow-secs", "3", "--tick-ms", "50", "--timeout-secs", "90", "--json"])
        .output()
        .expect("keelson bench logs");
    assert!(out.status.success(), "keelson bench logs: {}\n{}", text(&out.stderr), logs());
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)));
    eprintln!("bench logs: {report}");
    assert!(report["kube_rs"]["bytes_per_read"].as_u64().unwrap() >= 5_000_000, "{report}");
    assert!(report["kubectl"]["bytes_per_read"].as_u64().unwrap() >= 5_000_000, "kubectl is on PATH here: {report}");
    assert!(report["follower_lines_min"].as_u64().unwrap() > 0 && report["agent_rss_peak_mb"].as_f64().unwrap() > 0.0, "{report}");
}

/// Established TCP connections matching the `ss` filter, in the host's network namespace
/// or node namespace `ns`.
fn established(ns: Option<&str>, filter: &str) -> usize {
    let mut c = match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, "ss"]);
            c
        }
        None => Command::new("ss"),
    };
    let out = c.args(["-Htn", "state", "established"]).args(filter.split_whitespace()).output().expect("ss");
    assert!(out.status.success(), "ss {filter}: {}", text(&out.stderr));
    text(&out.stdout).lines().filter(|l| !l.trim().is_empty()).count()
}

/// The port of containerd's streaming server in node namespace `ns` (it listens on
/// 127.0.0.1, a port of its choosing).
fn runtime_stream_port(ns: &str) -> u16 {
    let out = Command::new("ip").args(["netns", "exec", ns, "ss", "-Htlnp"]).output().expect("ss");
    let listing = text(&out.stdout);
    listing
        .lines()
        .filter(|l| l.contains("\"containerd\""))
        .find_map(|l| l.split_whitespace().find_map(|a| a.strip_prefix("127.0.0.1:")).and_then(|p| p.parse().ok()))
        .unwrap_or_else(|| panic!("containerd's streaming server in {ns}:\n{listing}"))
}

/// Whether the exec'd `sh -c cat…` with `marker` runs (a pod's processes are the host's
/// too; kubectl's own command line starts otherwise).
fn in_pod(marker: &str) -> bool {
    Command::new("pgrep").args(["-f", &format!("^sh -c cat.*{marker}")]).output().map(|o| o.status.success()).unwrap_or(false)
}

fn tail(p: &Path, n: usize) -> String {
    let s = std::fs::read_to_string(p).unwrap_or_default();
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
