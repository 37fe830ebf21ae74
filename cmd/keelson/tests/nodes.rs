//! `keelson up --servers 3 --agents 2 --dual-stack` as root: servers and two real nodes
//! (agents with their containerd), each in a network namespace of the cluster's own, with
//! an IPv4 and an IPv6 address and podCIDR. A Deployment of the built-in busybox image
//! with two replicas kept apart runs on both nodes; the host shell reaches a pod on both
//! its addresses (routes to the node's podCIDRs), one node reaches the other's pod on
//! both (the agents' routes, per family); a dual-stack NodePort Service over both pods
//! answers from both through its IPv4 and its IPv6 ClusterIP from node-1 and by its DNS
//! names from inside a pod, and on both nodes' NodePort on both families; the ingress' LoadBalancer Service gets both nodes' addresses; `kubectl exec`
//! and `logs` reach both pods through each of the three servers; Ctrl-C leaves no namespace, veth, route, mount or process.
//!
//! Needs root and containerd, runc, the CNI plugins, busybox-static, nftables and curl.
//! Skipped loudly otherwise, unless `KEELSON_REQUIRE_NODE_TESTS` is set: then it fails.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use keelson_runner::Manifest;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

fn missing() -> Vec<String> {
    // SAFETY: geteuid has no preconditions.
    let mut out: Vec<String> = if unsafe { libc::geteuid() } == 0 { vec![] } else { vec!["root".into()] };
    let tools = ["/usr/bin/containerd", "/usr/sbin/runc", "/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/bin/busybox", "/usr/bin/nsenter", "/usr/bin/curl", "/usr/sbin/nft"];
    out.extend(tools.iter().filter(|p| !Path::new(p).exists()).map(|p| p.to_string()));
    out
}

fn skip(test: &str) -> bool {
    let missing = missing();
    if missing.is_empty() {
        return false;
    }
    if std::env::var_os("KEELSON_REQUIRE_NODE_TESTS").is_some() {
        panic!("{test}: KEELSON_REQUIRE_NODE_TESTS is set but this machine lacks {missing:?}");
    }
    eprintln!("\n\n======== {test}: SKIPPED (needs {missing:?}) ========\n\n");
    true
}

fn curl(netns: Option<&str>, url: &str) -> String {
    curl_with(netns, &[url])
}

/// `curl -s -m 3 ARGS` on the host or in namespace `netns`: its stdout.
fn curl_with(netns: Option<&str>, args: &[&str]) -> String {
    let mut c = match netns {
        Some(ns) => {
            let mut c = Command::new("nsenter");
            c.arg(format!("--net=/run/netns/{ns}")).arg("curl");
            c
        }
        None => Command::new("curl"),
    };
    let out = c.args(["-s", "-g", "-m", "3"]).args(args).output().expect("curl runs");
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// Retries `curl` for up to `timeout` until it answers with `want`.
fn curl_until(netns: Option<&str>, url: &str, want: &str, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let got = curl(netns, url);
        if got.contains(want) || Instant::now() >= deadline {
            return got;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn lines_of(args: &[&str]) -> String {
    let out = Command::new(args[0]).args(&args[1..]).output().expect("runs");
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keelson_up_runs_pods_on_two_real_nodes_reachable_from_the_host() {
    if skip("keelson_up_runs_pods_on_two_real_nodes_reachable_from_the_host") {
        return;
    }
    let t0 = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let mut up = Command::new(env!("CARGO_BIN_EXE_keelson"))
        .args(["up", "--servers", "3", "--agents", "2", "--dual-stack", "--data-dir"])
        .arg(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = up.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            eprintln!("up| {line}");
            if line.starts_with("Cluster ready") {
                let _ = tx.send(());
            }
        }
    });
    if rx.recv_timeout(Duration::from_secs(300)).is_err() {
        let _ = up.kill();
        panic!("keelson up did not say ready within 300 s");
    }
    eprintln!("ready after {:.1?}", t0.elapsed());
    let manifest = Manifest::load(&dir).unwrap().expect("cluster.json");
    let run = format!("kc{}", manifest.run_id);
    assert_eq!(manifest.topology, "netns");
    assert_eq!(manifest.servers().count(), 3);
    let nodes: Vec<_> = manifest.nodes().cloned().collect();
    assert_eq!(nodes.len(), 2);
    assert!(manifest.members.iter().all(|m| m.running && m.pid.is_some() && m.netns.is_some()), "{manifest:?}");

    let result = std::panic::AssertUnwindSafe(exercise(&dir, &nodes));
    let outcome = futures::FutureExt::catch_unwind(result).await;

    // Ctrl-C: everything goes, whatever happened above.
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(up.id() as i32, libc::SIGINT) };
    let deadline = Instant::now() + Duration::from_secs(90);
    let status = loop {
        if let Some(st) = up.try_wait().unwrap() {
            break st;
        }
        if Instant::now() >= deadline {
            let _ = up.kill();
            panic!("keelson up did not exit within 90 s of SIGINT");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    if let Err(p) = outcome {
        std::panic::resume_unwind(p);
    }
    assert!(status.success(), "keelson up exited with {status}");
    let netns = lines_of(&["ip", "netns", "list"]);
    assert!(!netns.contains(&run), "namespaces left: {netns}");
    let links = lines_of(&["ip", "-o", "link"]);
    assert!(!links.contains(&run), "veths left: {links}");
    let routes = lines_of(&["ip", "route"]);
    assert!(!routes.contains(&format!("{}", manifest.pod_net.unwrap())), "routes left: {routes}");
    let routes6 = lines_of(&["ip", "-6", "route"]);
    let net6 = manifest.pod_net6.expect("a dual-stack cluster's IPv6 pod network").to_string();
    assert!(!routes6.contains(net6.trim_end_matches(':')), "IPv6 routes left: {routes6}");
    let needle = tmp.path().display().to_string();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(&needle), "mounts left under {needle}");
    let procs = lines_of(&["pgrep", "-a", "-f", &needle]);
    assert!(procs.trim().is_empty(), "processes left: {procs}");
    eprintln!("done in {:.1?}", t0.elapsed());
}

/// The Deployment runs on both nodes; the host and the other node reach its pods.
async fn exercise(dir: &Path, nodes: &[keelson_runner::MemberEntry]) {
    let kc = kube::config::Kubeconfig::read_from(dir.join("kubeconfig")).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let labels = json!({"app": "web"});
    let deploy: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"replicas": 2, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": {
                "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"}]}},
                "containers": [{"name": "httpd", "image": "keelson.local/busybox:stable",
                    // The image's page, and /name: which pod answered.
                    "command": ["sh", "-c", "mkdir -p /srv && cp -r /www/. /srv/ && hostname > /srv/name && exec httpd -f -p 80 -h /srv"]}]}}}
    }))
    .unwrap();
    Api::<Deployment>::namespaced(client.clone(), "default").create(&PostParams::default(), &deploy).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let deadline = Instant::now() + Duration::from_secs(120);
    let running = loop {
        let list = pods.list(&ListParams::default().labels("app=web")).await.unwrap();
        let running: Vec<(String, String, String)> = list
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .filter_map(|p| {
                let ips = p.status.as_ref()?.pod_ips.as_ref()?;
                Some((p.spec.as_ref()?.node_name.clone()?, ips.first()?.ip.clone(), ips.get(1)?.ip.clone()))
            })
            .collect();
        if running.len() == 2 {
            break running;
        }
        assert!(Instant::now() < deadline, "two web pods not Running within 120 s: {:?}", list.items.iter().map(|p| (&p.spec.as_ref().unwrap().node_name, &p.status)).collect::<Vec<_>>());
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let mut on: Vec<&str> = running.iter().map(|(n, _, _)| n.as_str()).collect();
    on.sort();
    assert_eq!(on, ["node-1", "node-2"], "one pod on each node: {running:?}");
    // The servers' node IPAM hands out the run's own pod networks (both families).
    let ps = lines_of(&["pgrep", "-a", "-f", "keelson server --name keelson-1 "]);
    let want = format!("--cluster-cidr {}/16,{}/48", manifest_pod_nets(dir).0, manifest_pod_nets(dir).1);
    assert!(ps.contains(&want), "keelson-1 runs with {want}: {ps}");
    // Each node is dual-stack: an InternalIP and a podCIDR of each family.
    let node_api: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    for n in nodes {
        let node = node_api.get(&n.name).await.unwrap();
        let internal: Vec<String> = node.status.unwrap().addresses.unwrap().into_iter().filter(|a| a.type_ == "InternalIP").map(|a| a.address).collect();
        assert_eq!(internal, [n.addr.clone(), n.addr6.clone()], "{}'s InternalIPs", n.name);
        assert_eq!(node.spec.unwrap().pod_cidrs.unwrap().join(","), n.pod_cidr, "{}'s podCIDRs", n.name);
    }
    for (node, ip, ip6) in &running {
        let cidr = &nodes.iter().find(|n| &n.name == node).unwrap().pod_cidr;
        let (cidr4, cidr6) = cidr.split_once(',').expect("a podCIDR of each family");
        let prefix = cidr4.rsplit_once('.').unwrap().0;
        assert!(ip.starts_with(prefix), "pod {ip} on {node} is in its podCIDR {cidr4}");
        let prefix6 = cidr6.trim_end_matches("::/64");
        assert!(ip6.starts_with(prefix6), "pod {ip6} on {node} is in its IPv6 podCIDR {cidr6}");
        for url in [format!("http://{ip}/"), format!("http://[{ip6}]/")] {
            let got = curl_until(None, &url, "hello from keelson", Duration::from_secs(20));
            assert!(got.contains("hello from keelson"), "the host reaches {url} on {node}: {got:?}");
        }
    }
    // Node 1's namespace reaches the pod on node 2 on both addresses (the agents route
    // each other's pods, per family through the node's address of that family).
    let (_, ip2, ip2_6) = running.iter().find(|(n, _, _)| n == "node-2").unwrap();
    let ns1 = nodes.iter().find(|n| n.name == "node-1").unwrap().netns.clone().unwrap();
    for url in [format!("http://{ip2}/"), format!("http://[{ip2_6}]/")] {
        let got = curl_until(Some(&ns1), &url, "hello from keelson", Duration::from_secs(30));
        assert!(got.contains("hello from keelson"), "node-1 reaches {url} on node-2: {got:?}");
    }

    services_across_nodes(&client, dir, nodes).await;

    // `kubectl exec` and `kubectl logs` into each pod through every server: a node's agent
    // keeps one server's connection at a time, so most of these go through a server the
    // node does not talk to, which dials the agent on the node's address itself.
    let listed = pods.list(&ListParams::default().labels("app=web")).await.unwrap();
    let kubeconfig = dir.join("kubeconfig");
    for pod in &listed.items {
        let (name, node) = (pod.metadata.name.clone().unwrap(), pod.spec.as_ref().unwrap().node_name.clone().unwrap());
        for server in 1..=3 {
            let context = format!("keelson-{server}");
            let out = Command::new("kubectl")
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .args(["--context", &context, "exec", &name, "--", "sh", "-c", &format!("echo via-{server} from $(hostname) >&2; echo via-{server} from $(hostname); exit {server}")])
                .output()
                .expect("kubectl");
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert_eq!(
                (out.status.code(), stdout.trim()),
                (Some(server), format!("via-{server} from {name}").as_str()),
                "kubectl --context {context} exec into {name} on {node}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let logs = Command::new("kubectl").arg("--kubeconfig").arg(&kubeconfig).args(["--context", &context, "logs", &name, "--tail=5"]).output().expect("kubectl");
            assert!(logs.status.success(), "kubectl --context {context} logs {name} on {node}: {}", String::from_utf8_lossy(&logs.stderr));
        }
    }
}

/// The cluster's IPv4 and IPv6 pod networks, from its `cluster.json`.
fn manifest_pod_nets(dir: &Path) -> (String, String) {
    let m = Manifest::load(dir).unwrap().expect("cluster.json");
    (m.pod_net.unwrap().to_string(), m.pod_net6.unwrap().to_string())
}

/// The pod names that answer in `tries` requests made by `fetch`.
fn answering(tries: usize, fetch: impl Fn() -> String) -> BTreeSet<String> {
    (0..tries).map(|_| fetch().trim().to_string()).filter(|n| n.starts_with("web-")).collect()
}

/// Service discovery across the two nodes: a ClusterIP Service over the two pods (one on
/// each node) answers from both, from node-1's namespace and, by its DNS name, from
/// inside a pod; its NodePort answers on both nodes' addresses from the host; the
/// built-in ingress' LoadBalancer Service gets both nodes' addresses.
async fn services_across_nodes(client: &kube::Client, dir: &Path, nodes: &[keelson_runner::MemberEntry]) {
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let svc: Service = serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": {"type": "NodePort", "ipFamilyPolicy": "RequireDualStack",
        "selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": 80}]}})).unwrap();
    let svc = services.create(&PostParams::default(), &svc).await.unwrap();
    let cluster_ip = svc.spec.as_ref().unwrap().cluster_ip.clone().unwrap();
    let cluster_ips = svc.spec.as_ref().unwrap().cluster_ips.clone().unwrap();
    assert_eq!((cluster_ips.len(), cluster_ips[0] == cluster_ip, cluster_ips[1].contains(':')), (2, true, true), "{cluster_ips:?}");
    let node_port = svc.spec.as_ref().unwrap().ports.as_ref().unwrap()[0].node_port.unwrap();
    let ns1 = nodes.iter().find(|n| n.name == "node-1").unwrap().netns.clone().unwrap();
    let url = format!("http://{cluster_ip}/name");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = BTreeSet::new();
    while seen.len() < 2 && Instant::now() < deadline {
        seen.extend(answering(10, || curl(Some(&ns1), &url)));
    }
    let listed = Api::<Pod>::namespaced(client.clone(), "default").list(&ListParams::default().labels("app=web")).await.unwrap().items;
    let mut names: Vec<String> = listed.iter().filter_map(|p| p.metadata.name.clone()).collect();
    names.sort();
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), names, "node-1 reaches both pods (one on each node) through the ClusterIP {cluster_ip}");
    // And through its IPv6 ClusterIP: node-2's pod over IPv6 across the nodes.
    let url6 = format!("http://[{}]/name", cluster_ips[1]);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = BTreeSet::new();
    while seen.len() < 2 && Instant::now() < deadline {
        seen.extend(answering(10, || curl(Some(&ns1), &url6)));
    }
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), names, "node-1 reaches both pods through the IPv6 ClusterIP {}", cluster_ips[1]);

    // From inside the pod on node-1, by the Service's short and full DNS names.
    let kubeconfig = dir.join("kubeconfig");
    let from = listed.iter().find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some("node-1")).and_then(|p| p.metadata.name.clone()).expect("the pod on node-1");
    for host in ["web", "web.default.svc.cluster.local"] {
        let fetch = || {
            // (busybox's wget crashes with -T: `timeout` bounds it instead.)
            let o = Command::new("kubectl").arg("--kubeconfig").arg(&kubeconfig).args(["exec", &from, "--", "timeout", "5", "wget", "-q", "-O", "-", &format!("http://{host}/name")]).output().expect("kubectl");
            String::from_utf8_lossy(&o.stdout).to_string()
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut seen = BTreeSet::new();
        while seen.len() < 2 && Instant::now() < deadline {
            seen.extend(answering(6, fetch));
        }
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), names, "pod {from} reaches both pods as http://{host}/");
    }

    // The NodePort on each node's addresses, IPv4 and IPv6, from the host.
    for n in nodes {
        for url in [format!("http://{}:{node_port}/name", n.addr), format!("http://[{}]:{node_port}/name", n.addr6)] {
            let got = curl_until(None, &url, "web-", Duration::from_secs(30));
            assert!(got.starts_with("web-"), "NodePort {url} on {}: {got:?}", n.name);
        }
    }

    // The ingress' own LoadBalancer Service: both nodes serve it.
    let system: Api<Service> = Api::namespaced(client.clone(), "kube-system");
    let mut want: Vec<String> = nodes.iter().map(|n| n.addr.clone()).collect();
    want.sort();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let lb = system.get("keelson-ingress").await.ok().and_then(|s| s.status?.load_balancer?.ingress).unwrap_or_default();
        let mut got: Vec<String> = lb.into_iter().filter_map(|i| i.ip).collect();
        got.sort();
        if got == want {
            break;
        }
        assert!(Instant::now() < deadline, "the keelson-ingress Service's addresses: {got:?}, want {want:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // An Ingress for the Service: served on node-2's port 80 from the host and from
    // node-1 (whose own traffic to that address goes to every node's ingress).
    let ingress: k8s_openapi::api::networking::v1::Ingress = serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": {"rules": [{"host": "web.test",
        "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}})).unwrap();
    Api::<k8s_openapi::api::networking::v1::Ingress>::namespaced(client.clone(), "default").create(&PostParams::default(), &ingress).await.unwrap();
    let node2 = &nodes.iter().find(|n| n.name == "node-2").unwrap().addr;
    for from in [None, Some(ns1.as_str())] {
        let url = format!("http://{node2}/name");
        let fetch = || curl_with(from, &["-H", "Host: web.test", &url]);
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut seen = BTreeSet::new();
        while seen.is_empty() && Instant::now() < deadline {
            seen.extend(answering(3, fetch));
        }
        assert!(!seen.is_empty(), "the Ingress on {node2}:80 from {}", from.unwrap_or("the host"));
    }
}
