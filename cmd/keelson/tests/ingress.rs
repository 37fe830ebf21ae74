//! Ingress end to end on a real node: `keelson agent` in a network namespace of the
//! test's own serves the built-in ingress on the node's ports 80 and 443. Two
//! Deployments of busybox httpd (`api`, `web`) behind two Services, one Ingress routing
//! `api.shop.test` and `web.shop.test` (curl `--resolve` from the host side of the veth)
//! over HTTP and HTTPS with a Secret made by `kubectl create secret tls` (curl trusts
//! only that certificate, so a handshake that succeeds was served it); `api` scaled to
//! zero answers 503 and serves again once scaled back; the certificate is rotated by
//! updating the Secret; the ingress' own LoadBalancer Service (kube-system/keelson-ingress)
//! gets the node's address and the node as its endpoint, its ClusterIP reaches the
//! ingress from inside the node, and the Ingress gets the Service's address as its status.
//! Everything is removed at the end (processes, containers, namespace, veth).

mod node_support;

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, Patch, PatchParams, PostParams};
use node_support::{node_tests_possible, ok, one_node, poll, sh};
use serde_json::json;

const IMG: &str = "keelson.local/busybox:stable";

fn deployment(name: &str) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [{"name": "httpd", "image": IMG,
                "command": ["sh", "-c", format!("mkdir -p /www/v1 && echo {name} > /www/index.html && echo {name}-v1 > /www/v1/index.html && exec httpd -f -p 8080 -h /www")],
                "ports": [{"name": "http", "containerPort": 8080}],
                "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}}]}}}
    }))
    .unwrap()
}

/// A self-signed certificate for both shop hosts, as `<dir>/<stem>.crt` and `.key`.
fn make_cert(dir: &Path, stem: &str) -> (String, String) {
    let (crt, key) = (dir.join(format!("{stem}.crt")).display().to_string(), dir.join(format!("{stem}.key")).display().to_string());
    ok(&["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=shop.test",
        "-addext", "subjectAltName=DNS:api.shop.test,DNS:web.shop.test", "-keyout", &key, "-out", &crt]);
    (crt, key)
}

/// `curl` from the host through the node's ingress: (HTTP status, body); `cacert` makes
/// it HTTPS trusting only that certificate.
fn curl(node_ip: &str, host: &str, path: &str, cacert: Option<&str>) -> (String, String) {
    let (scheme, port) = if cacert.is_some() { ("https", 443) } else { ("http", 80) };
    let resolve = format!("{host}:{port}:{node_ip}");
    let url = format!("{scheme}://{host}{path}");
    let mut args = vec!["curl", "-s", "-m", "3", "--resolve", &resolve, "-w", "\n%{http_code}", &url];
    if let Some(ca) = cacert {
        args.extend(["--cacert", ca]);
    }
    let o = sh(&args);
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let (body, code) = out.rsplit_once('\n').unwrap_or(("", &out));
    (code.trim().to_string(), body.trim().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingress_routes_two_hosts_over_http_and_https_to_real_pods() {
    if !node_tests_possible("the ingress of a node in a network namespace") {
        return;
    }
    if sh(&["which", "kubectl"]).status.code() != Some(0) || sh(&["which", "openssl"]).status.code() != Some(0) {
        eprintln!("skipping the ingress test: it needs kubectl and openssl");
        return;
    }
    let mut node = one_node("n1", "10.42.11.0/24").await;
    let client = node.cluster.client.clone();
    let (net, dir) = (&node.net, &node.dir);
    let pp = PostParams::default();
    let kubeconfig = node.cluster.kubeconfig.display().to_string();

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    for name in ["api", "web"] {
        deployments.create(&pp, &deployment(name)).await.unwrap();
        let svc = json!({"metadata": {"name": name}, "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}});
        Api::<Service>::namespaced(client.clone(), "default").create(&pp, &serde_json::from_value(svc).unwrap()).await.unwrap();
    }
    let (crt1, key1) = make_cert(dir, "one");
    ok(&["kubectl", "--kubeconfig", &kubeconfig, "create", "secret", "tls", "shop-tls", "--cert", &crt1, "--key", &key1]);
    let backend = |svc: &str| json!({"service": {"name": svc, "port": {"name": "http"}}});
    let ingresses: Api<Ingress> = Api::namespaced(client.clone(), "default");
    ingresses.create(&pp, &serde_json::from_value(json!({"metadata": {"name": "shop"}, "spec": {
        "tls": [{"hosts": ["api.shop.test", "web.shop.test"], "secretName": "shop-tls"}],
        "rules": [
            {"host": "api.shop.test", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend("api")}]}},
            {"host": "web.shop.test", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend("web")}]}}]}})).unwrap()).await.unwrap();

    let ip = net.node_ip.clone();
    let answer = |host: &'static str, path: &'static str, ca: Option<String>, want: (&'static str, &'static str)| {
        let ip = ip.clone();
        async move {
            let got = curl(&ip, host, path, ca.as_deref());
            (got == (want.0.to_string(), want.1.to_string())).then_some(())
        }
    };
    let long = Duration::from_secs(120);
    poll("api.shop.test over HTTP", long, || answer("api.shop.test", "/", None, ("200", "api"))).await;
    poll("web.shop.test over HTTP", long, || answer("web.shop.test", "/v1/", None, ("200", "web-v1"))).await;
    poll("api.shop.test over HTTPS with the Secret's certificate", Duration::from_secs(30), || answer("api.shop.test", "/v1/", Some(crt1.clone()), ("200", "api-v1"))).await;
    poll("web.shop.test over HTTPS with the Secret's certificate", Duration::from_secs(30), || answer("web.shop.test", "/", Some(crt1.clone()), ("200", "web"))).await;
    assert_eq!(curl(&ip, "other.test", "/", None), ("404".to_string(), "default backend - 404".to_string()));

    // The Ingress' status: the node's address.
    let status = poll("the Ingress' status", Duration::from_secs(30), || async {
        ingresses.get("shop").await.ok()?.status?.load_balancer?.ingress?.first()?.ip.clone()
    })
    .await;
    assert_eq!(status, net.node_ip);

    // The ingress' own Service: a LoadBalancer at the node's address with the node as
    // its endpoint; its ClusterIP reaches the ingress from inside the node.
    let system: Api<Service> = Api::namespaced(client.clone(), "kube-system");
    let lb = poll("the keelson-ingress Service's address", Duration::from_secs(30), || async {
        let s = system.get("keelson-ingress").await.ok()?;
        s.status?.load_balancer?.ingress?.first()?.ip.clone()
    })
    .await;
    assert_eq!(lb, net.node_ip);
    let svc = system.get("keelson-ingress").await.unwrap();
    assert!(svc.spec.as_ref().unwrap().ports.iter().flatten().all(|p| p.node_port.is_none()), "allocateLoadBalancerNodePorts: false");
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "kube-system");
    let slice = slices.get("keelson-ingress-80-443").await.expect("the ingress Service's slice");
    assert_eq!(slice.endpoints.iter().map(|e| (e.addresses[0].clone(), e.node_name.clone())).collect::<Vec<_>>(), [(net.node_ip.clone(), Some("n1".to_string()))]);
    // Its health check node port (LoadBalancer with the Local policy): the node's proxy
    // answers 200 with one local endpoint.
    let check = svc.spec.as_ref().unwrap().health_check_node_port.expect("a health check node port");
    let url = format!("http://{}:{check}/healthz", net.node_ip);
    poll("the health check node port answering 200 with one local endpoint", Duration::from_secs(30), || async {
        let out = String::from_utf8_lossy(&sh(&["curl", "-s", "-m", "3", "-w", "\n%{http_code}", &url]).stdout).to_string();
        (out.ends_with("\n200") && out.contains(r#""localEndpoints":1"#)).then_some(())
    })
    .await;
    let cluster_ip = svc.spec.unwrap().cluster_ip.unwrap();
    poll("api.shop.test through the ingress Service's ClusterIP", Duration::from_secs(30), || {
        let url = format!("http://{cluster_ip}/");
        async move {
            let o = sh(&["nsenter", &net.netns_path(), "curl", "-s", "-m", "3", "-H", "Host: api.shop.test", &url]);
            (String::from_utf8_lossy(&o.stdout).trim() == "api").then_some(())
        }
    })
    .await;

    // Scaled to zero: 503; back to one: served again.
    let scale = |n: i32| {
        let d = deployments.clone();
        async move { d.patch("api", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": n}}))).await.unwrap() }
    };
    scale(0).await;
    poll("503 from api with no pods", Duration::from_secs(60), || {
        let ip = ip.clone();
        async move { (curl(&ip, "api.shop.test", "/", None).0 == "503").then_some(()) }
    })
    .await;
    assert_eq!(curl(&ip, "web.shop.test", "/", None), ("200".to_string(), "web".to_string()), "web is untouched");
    scale(1).await;
    poll("api serving again", long, || answer("api.shop.test", "/", None, ("200", "api"))).await;

    // Rotation: the updated Secret's certificate is served to new connections.
    let (crt2, key2) = make_cert(dir, "two");
    let o = sh(&["sh", "-c", &format!("kubectl --kubeconfig {kubeconfig} create secret tls shop-tls --cert {crt2} --key {key2} --dry-run=client -o yaml | kubectl --kubeconfig {kubeconfig} apply -f -")]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    poll("the rotated certificate", Duration::from_secs(30), || answer("api.shop.test", "/", Some(crt2.clone()), ("200", "api"))).await;
    assert_eq!(curl(&ip, "web.shop.test", "/", Some(&crt1)).0, "000", "the old certificate is no longer served");

    // Cleanup: the objects, then the processes and the node namespace on drop.
    let _ = ingresses.delete("shop", &Default::default()).await;
    for name in ["api", "web"] {
        let _ = deployments.delete(name, &Default::default()).await;
    }
    // A stopped agent's ingress serves no more: the Node stops announcing its ports and
    // the ingress Service loses the node.
    node.agent.terminate(Duration::from_secs(40));
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let n1 = nodes.get("n1").await.unwrap();
    assert!(!n1.metadata.annotations.unwrap_or_default().contains_key("keelson.io/ingress-http-port"), "the stopped ingress' port is no longer announced");
    poll("the ingress Service's slice gone with the ingress", Duration::from_secs(30), || {
        let slices = slices.clone();
        async move { slices.get_opt("keelson-ingress-80-443").await.ok()?.is_none().then_some(()) }
    })
    .await;
}
