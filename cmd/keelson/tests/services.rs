//! Services end to end on a real node: `keelson agent` in a network namespace of the
//! test's own (real containerd, CNI bridge), its proxy's nftables table and its cluster
//! DNS. A Deployment of 3 busybox httpd pods, each serving its own name, behind a
//! NodePort Service; a client pod resolves the Service by its full and short names and
//! reaches all three backends; a backend made unready by its readiness probe stops
//! getting traffic; the NodePort answers from the host side of the node's veth; a
//! LoadBalancer Service gets the node's address; a headless Service's pod with hostname
//! and subdomain resolves as `<pod>.<svc>`. The node is dual-stack: every pod gets an IPv6
//! address too, and a RequireDualStack Service is reached from a pod on its IPv6 ClusterIP
//! (through the proxy's ip6 table) and resolved to it by AAAA.
//! Everything is removed at the end (processes, containers, namespace, veth; the table
//! goes with the agent and its namespace).

mod kubelet_scrape;
mod node_support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams, LogParams, Patch, PatchParams, PostParams};
use node_support::{node_ready, node_tests_possible, poll, start_agent, start_server, NodeNet};
use serde_json::json;

const IMG: &str = "keelson.local/busybox:stable";

fn ready(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The backend names in the client's log lines after line `from`, per URL prefix.
fn answers(log: &str, prefix: &str, from: usize) -> BTreeSet<String> {
    log.lines().skip(from).filter_map(|l| l.strip_prefix(prefix)).map(|r| r.trim().to_string()).filter(|r| r.starts_with("web-")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_reach_pods_by_name_cluster_ip_and_node_port() {
    if !node_tests_possible("Services through the node's proxy and DNS in a network namespace") {
        return;
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let net = NodeNet::create(0);
    let cluster = start_server(&net, &dir).await;
    let client = cluster.client.clone();
    let _agent = start_agent(&net, &dir, &cluster.url, &cluster.token, "n1", "10.42.9.0/24,fd42:0:0:9::/64", "agent.log");
    node_ready(&client, "n1").await;
    let pp = PostParams::default();

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    deployments.create(&pp, &serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"terminationGracePeriodSeconds": 6, "containers": [{"name": "httpd", "image": IMG,
                "command": ["sh", "-c", "mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 80 -h /www"],
                "ports": [{"name": "http", "containerPort": 80}],
                // Serving on while the endpoint leaves the rules, as Kubernetes users do.
                "lifecycle": {"preStop": {"exec": {"command": ["sleep", "3"]}}},
                // Unready once labelled state=unready (the downward API file follows labels).
                "readinessProbe": {"exec": {"command": ["sh", "-c", "! grep -q unready /info/labels"]}, "periodSeconds": 1},
                "volumeMounts": [{"name": "info", "mountPath": "/info"}]}],
                "volumes": [{"name": "info", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}]}}}
    })).unwrap()).await.unwrap();
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let svc = services.create(&pp, &serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"type": "NodePort", "selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}
    })).unwrap()).await.unwrap();
    let node_port = svc.spec.as_ref().unwrap().ports.as_ref().unwrap()[0].node_port.unwrap();
    services.create(&pp, &serde_json::from_value(json!({
        "metadata": {"name": "web-lb"},
        "spec": {"type": "LoadBalancer", "selector": {"app": "web"}, "ports": [{"name": "http", "port": 8081, "targetPort": 80}]}
    })).unwrap()).await.unwrap();

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let backends: Vec<Pod> = poll("3 ready web pods", Duration::from_secs(120), || async {
        let list = pods.list(&ListParams::default().labels("app=web")).await.ok()?;
        (list.items.len() == 3 && list.items.iter().all(ready)).then_some(list.items)
    })
    .await;
    let names: BTreeSet<String> = backends.iter().filter_map(|p| p.metadata.name.clone()).collect();

    // The controllers: a slice with the three ready endpoints and the Endpoints mirror.
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    let started = Instant::now();
    poll("the slice of web with 3 ready endpoints", Duration::from_secs(30), || async {
        let list = slices.list(&ListParams::default().labels("kubernetes.io/service-name=web")).await.ok()?;
        let ready = list.items.iter().flat_map(|s| s.endpoints.iter()).filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true)).count();
        (ready == 3).then_some(())
    })
    .await;
    eprintln!("slice complete {:?} after the pods were ready", started.elapsed());
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    let ep = poll("Endpoints web", Duration::from_secs(30), || async { endpoints.get_opt("web").await.ok().flatten() }).await;
    assert_eq!(ep.subsets.unwrap()[0].ports.as_ref().unwrap()[0].port, 80);

    // A client pod asks by the full name and the short one, over and over.
    pods.create(&pp, &serde_json::from_value(json!({
        "metadata": {"name": "client"},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [{"name": "c", "image": IMG, "command": ["sh", "-c",
            "cat /etc/resolv.conf; while true; do for u in web.default.svc.cluster.local web; do echo \"$u $(wget -q -O - http://$u/ 2>&1)\"; done; sleep 0.2; done"]}]}
    })).unwrap()).await.unwrap();
    let log_of = || async { pods.logs("client", &LogParams::default()).await.unwrap_or_default() };
    let full = "web.default.svc.cluster.local ";
    poll("the client reaching all three backends by both names", Duration::from_secs(90), || async {
        let log = log_of().await;
        (answers(&log, full, 0) == names && answers(&log, "web ", 0) == names).then_some(())
    })
    .await;
    let log = log_of().await;
    assert!(log.contains("nameserver 10.43.0.10") && log.contains("search default.svc.cluster.local svc.cluster.local cluster.local"), "{log}");

    // The NodePort from the host side of the node's veth, the LoadBalancer's address.
    let url = format!("http://{}:{node_port}/", net.node_ip);
    let seen: BTreeSet<String> = poll("the NodePort reaching all three backends", Duration::from_secs(30), || async {
        let mut seen = BTreeSet::new();
        for _ in 0..40 {
            let o = node_support::sh(&["curl", "-s", "-m", "2", &url]);
            seen.insert(String::from_utf8_lossy(&o.stdout).trim().to_string());
        }
        (seen == names).then_some(seen)
    })
    .await;
    assert_eq!(seen, names);
    let lb = poll("web-lb's ingress", Duration::from_secs(30), || async {
        let s = services.get("web-lb").await.ok()?;
        s.status?.load_balancer?.ingress?.first()?.ip.clone()
    })
    .await;
    assert_eq!(lb, net.node_ip);
    let o = node_support::sh(&["curl", "-s", "-m", "2", &format!("http://{lb}:8081/")]);
    assert!(names.contains(String::from_utf8_lossy(&o.stdout).trim()), "the LoadBalancer port answers: {o:?}");

    // Dual stack: each pod has an IPv6 address second; a RequireDualStack Service gets an
    // IPv6 slice of the three, answers on its IPv6 ClusterIP and resolves to it by AAAA.
    for p in &backends {
        let ips: Vec<String> = p.status.as_ref().and_then(|s| s.pod_ips.clone()).unwrap_or_default().into_iter().map(|i| i.ip).collect();
        assert!(ips.len() == 2 && ips[0].starts_with("10.42.9.") && ips[1].starts_with("fd42:0:0:9:"), "{:?}: {ips:?}", p.metadata.name);
    }
    let web6 = services.create(&pp, &serde_json::from_value(json!({
        "metadata": {"name": "web6"},
        "spec": {"ipFamilyPolicy": "RequireDualStack", "selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}
    })).unwrap()).await.unwrap();
    let v6 = web6.spec.as_ref().and_then(|s| s.cluster_ips.clone()).unwrap_or_default().get(1).cloned().expect("an IPv6 ClusterIP");
    poll("web6's IPv6 slice with 3 ready endpoints", Duration::from_secs(30), || async {
        let list = slices.list(&ListParams::default().labels("kubernetes.io/service-name=web6")).await.ok()?;
        let ready = list.items.iter().filter(|s| s.address_type == "IPv6").flat_map(|s| s.endpoints.iter()).filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true)).count();
        (ready == 3).then_some(())
    })
    .await;
    pods.create(&pp, &serde_json::from_value(json!({
        "metadata": {"name": "client6"},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [{"name": "c", "image": IMG, "command": ["sh", "-c",
            format!("while true; do echo \"aaaa $(nslookup -type=AAAA web6.default.svc.cluster.local 2>&1 | tr '\\n' ' ')\"; echo \"v6 $(wget -q -O - http://[{v6}]/ 2>&1)\"; sleep 0.2; done")]}]}
    })).unwrap()).await.unwrap();
    poll("a pod reaching all three backends on the IPv6 ClusterIP, resolved by AAAA", Duration::from_secs(90), || async {
        let log = pods.logs("client6", &LogParams::default()).await.unwrap_or_default();
        let resolved = log.lines().any(|l| l.starts_with("aaaa ") && l.contains(&v6));
        (resolved && answers(&log, "v6 ", 0) == names).then_some(())
    })
    .await;
    let _ = pods.delete("client6", &Default::default()).await;

    // One backend turns unready: it leaves the slice and the rules, and gets no more traffic.
    let victim = names.iter().next().unwrap().clone();
    pods.patch(&victim, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"state": "unready"}}}))).await.unwrap();
    poll("the victim unready", Duration::from_secs(30), || async { pods.get(&victim).await.ok().filter(|p| !ready(p)) }).await;
    let unready_at = Instant::now();
    poll("the victim's endpoint not ready", Duration::from_secs(30), || async {
        let list = slices.list(&ListParams::default().labels("kubernetes.io/service-name=web")).await.ok()?;
        list.items.iter().flat_map(|s| s.endpoints.iter()).any(|e| e.target_ref.as_ref().and_then(|t| t.name.as_deref()) == Some(&victim) && e.conditions.as_ref().and_then(|c| c.ready) == Some(false)).then_some(())
    })
    .await;
    eprintln!("endpoint marked not ready {:?} after the pod", unready_at.elapsed());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let from = log_of().await.lines().count();
    let rest: BTreeSet<String> = names.iter().filter(|n| **n != victim).cloned().collect();
    poll("answers from the two ready backends only", Duration::from_secs(30), || async {
        let log = log_of().await;
        let got = answers(&log, full, from);
        (got == rest).then_some(())
    })
    .await;
    let log = log_of().await;
    assert!(!answers(&log, full, from).contains(&victim) && !answers(&log, "web ", from).contains(&victim));
    let mut seen = BTreeSet::new();
    for _ in 0..30 {
        let o = node_support::sh(&["curl", "-s", "-m", "2", &url]);
        seen.insert(String::from_utf8_lossy(&o.stdout).trim().to_string());
    }
    assert_eq!(seen, rest, "the NodePort avoids the unready backend too");

    // A ready backend deleted (and replaced by its ReplicaSet) while the client asks
    // again and again: terminating, it leaves the rules during its preStop, and no
    // request goes unanswered.
    let doomed = rest.iter().next().unwrap().clone();
    let from = log_of().await.lines().count();
    pods.delete(&doomed, &Default::default()).await.unwrap();
    poll("the deleted backend gone", Duration::from_secs(60), || async { pods.get_opt(&doomed).await.ok()?.is_none().then_some(()) }).await;
    poll("a replacement ready", Duration::from_secs(60), || async {
        let list = pods.list(&ListParams::default().labels("app=web")).await.ok()?;
        (list.items.iter().filter(|p| ready(p)).count() == 2).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let log = log_of().await;
    let during: Vec<&str> = log.lines().skip(from).filter(|l| l.starts_with(full) || l.starts_with("web ")).collect();
    assert!(during.len() >= 10, "the client kept asking: {during:?}");
    let unanswered: Vec<&&str> = during.iter().filter(|l| !l.split_once(' ').is_some_and(|(_, r)| r.trim().starts_with("web-"))).collect();
    assert!(unanswered.is_empty(), "requests unanswered while a backend was deleted: {unanswered:?}");

    // A headless Service's pod with hostname and subdomain resolves by its own name.
    services.create(&pp, &serde_json::from_value(json!({
        "metadata": {"name": "db"}, "spec": {"clusterIP": "None", "selector": {"app": "db"}, "ports": [{"name": "http", "port": 80}]}
    })).unwrap()).await.unwrap();
    pods.create(&pp, &serde_json::from_value(json!({
        "metadata": {"name": "db-0", "labels": {"app": "db"}},
        "spec": {"hostname": "db-0", "subdomain": "db", "terminationGracePeriodSeconds": 1, "containers": [{"name": "httpd", "image": IMG,
            "command": ["sh", "-c", "mkdir -p /www && echo db-zero > /www/index.html && exec httpd -f -p 80 -h /www"]}]}
    })).unwrap()).await.unwrap();
    pods.create(&pp, &serde_json::from_value(json!({
        "metadata": {"name": "db-client"},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [{"name": "c", "image": IMG, "command": ["sh", "-c",
            "while true; do echo \"db $(wget -q -O - http://db-0.db/ 2>&1)\"; sleep 0.5; done"]}]}
    })).unwrap()).await.unwrap();
    poll("db-0.db resolving to the headless Service's pod", Duration::from_secs(60), || async {
        pods.logs("db-client", &LogParams::default()).await.ok().filter(|l| l.contains("db db-zero")).map(|_| ())
    })
    .await;

    // The proxy's syncs as the agent logged them (render and whole-table apply).
    let agent_log = std::fs::read_to_string(dir.join("agent.log")).unwrap_or_default();
    let syncs: Vec<&str> = agent_log.lines().filter(|l| l.contains("service rules synced")).collect();
    assert!(!syncs.is_empty(), "the proxy synced");
    for l in syncs.iter().rev().take(3) {
        eprintln!("proxy: {}", l.split("service rules synced").last().unwrap_or(""));
    }
    // The same syncs on the agent's /metrics, as kube-proxy reports them: the first one
    // writes the whole table, Service changes after it only their difference.
    let node = node_ready(&client, "n1").await;
    let page = kubelet_scrape::agent_metrics(&cluster.kubeconfig, &node).await;
    let value = |series: &str| kubelet_scrape::series_value(&page, series);
    assert!(value("kubeproxy_sync_proxy_rules_duration_seconds_count") >= 2.0, "{page}");
    assert!(value("kubeproxy_sync_full_proxy_rules_duration_seconds_count") >= 1.0 && value("kubeproxy_sync_partial_proxy_rules_duration_seconds_count") >= 1.0, "{page}");
    assert!(value("kubeproxy_sync_proxy_rules_last_timestamp_seconds") > 1.6e9, "{page}");
    // At least the three web pods and the client, which keep running, were started here.
    assert!(value("kubelet_started_pods_total") >= 4.0, "{page}");

    // Cleanup: the namespace's objects, then the processes and the node namespace on drop.
    let _ = deployments.delete("web", &Default::default()).await;
    for p in ["client", "db-0", "db-client"] {
        let _ = pods.delete(p, &Default::default()).await;
    }
    for s in ["web", "web-lb", "web6", "db"] {
        let _ = services.delete(s, &Default::default()).await;
    }
}
