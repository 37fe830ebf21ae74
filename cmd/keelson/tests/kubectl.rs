//! End-to-end tests that drive the real kubectl against a real 3-replica cluster of the
//! `keelson` binary. Every test starts its own cluster (tempdir, free ports) and gives
//! kubectl a HOME and discovery cache of its own.
//!
//! The assertions are on what Kubernetes does: output of kubectl as users know it,
//! error messages, and objects as `kubectl get -o json` shows them. There is no node
//! agent nor controller: pods stay Pending and deployments create no pods, so nothing
//! here depends on controllers.

mod kubectl_support;

use std::time::{Duration, Instant};

use kubectl_support::*;
use serde_json::Value;

const SECOND: Duration = Duration::from_secs(1);

fn lines(s: &str) -> Vec<&str> {
    s.lines().map(str::trim_end).filter(|l| !l.is_empty()).collect()
}

fn sorted(v: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

fn assert_contains(haystack: &str, needle: &str, context: &str) {
    assert!(haystack.contains(needle), "{context}: expected to find {needle:?} in:\n{haystack}");
}

fn managed_fields(k: &Kubectl, args: &[&str]) -> Vec<Value> {
    let mut a = args.to_vec();
    a.push("--show-managed-fields");
    let obj = k.json(&a);
    obj.pointer("/metadata/managedFields").and_then(Value::as_array).cloned().unwrap_or_default()
}

// ---------------------------------------------------------------------------------------
// 1. apply
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_client_side_and_server_side() {
    let _machine = shared_machine();
    let tc = TestCluster::start().await;
    let k = tc.kubectl();

    // Client-side apply creates all four objects.
    let out = k.ok(&["apply", "-f", &fixture("app.yaml")]);
    assert_eq!(
        sorted(&lines(&out)),
        sorted(&["deployment.apps/web created", "service/web created", "configmap/web-config created", "pod/seed created"]),
        "first apply"
    );
    let d1 = k.json(&["get", "deployment", "web"]);
    assert_eq!(str_at(&d1, "/spec/template/spec/containers/0/image"), "nginx:1.25");
    assert!(
        d1.pointer("/metadata/annotations/kubectl.kubernetes.io~1last-applied-configuration").is_some(),
        "client-side apply records last-applied-configuration:\n{d1:#}"
    );
    // Defaults filled by the server.
    let defaults = |d: &Value| {
        (
            d.pointer("/spec/strategy/type").cloned(),
            d.pointer("/spec/revisionHistoryLimit").cloned(),
            d.pointer("/spec/progressDeadlineSeconds").cloned(),
            d.pointer("/spec/template/spec/containers/0/imagePullPolicy").cloned(),
            d.pointer("/spec/template/spec/containers/0/ports/0/protocol").cloned(),
            d.pointer("/spec/template/spec/restartPolicy").cloned(),
            d.pointer("/spec/template/spec/dnsPolicy").cloned(),
        )
    };
    let expected_defaults = (
        Some(Value::from("RollingUpdate")),
        Some(Value::from(10)),
        Some(Value::from(600)),
        Some(Value::from("IfNotPresent")),
        Some(Value::from("TCP")),
        Some(Value::from("Always")),
        Some(Value::from("ClusterFirst")),
    );
    assert_eq!(defaults(&d1), expected_defaults, "deployment defaults after create:\n{d1:#}");
    let svc1 = k.json(&["get", "service", "web"]);
    let cluster_ip = str_at(&svc1, "/spec/clusterIP").to_string();
    assert!(cluster_ip.parse::<std::net::Ipv4Addr>().is_ok(), "a ClusterIP is allocated: {svc1:#}");
    assert_eq!(str_at(&svc1, "/spec/type"), "ClusterIP");
    assert_eq!(str_at(&svc1, "/spec/ports/0/protocol"), "TCP");

    // Re-apply with a changed image: only the deployment is configured.
    let out = k.ok(&["apply", "-f", &fixture("app-v2.yaml")]);
    assert_eq!(
        sorted(&lines(&out)),
        sorted(&["deployment.apps/web configured", "service/web unchanged", "configmap/web-config unchanged", "pod/seed unchanged"]),
        "second apply"
    );
    let d2 = k.json(&["get", "deployment", "web"]);
    assert_eq!(str_at(&d2, "/spec/template/spec/containers/0/image"), "nginx:1.26", "the image changed");
    assert_eq!(defaults(&d2), expected_defaults, "defaults preserved by the apply patch:\n{d2:#}");
    assert_eq!(d2["metadata"]["uid"], d1["metadata"]["uid"], "same object");
    assert_eq!(d2.pointer("/spec/replicas"), Some(&Value::from(2)));
    assert_eq!(d2.pointer("/spec/template/spec/containers/0/ports/0/containerPort"), Some(&Value::from(80)));
    let g1 = d1.pointer("/metadata/generation").and_then(Value::as_i64).expect("generation");
    let g2 = d2.pointer("/metadata/generation").and_then(Value::as_i64).expect("generation");
    assert!(g2 > g1, "a spec change bumps metadata.generation ({g1} → {g2})");
    let svc2 = k.json(&["get", "service", "web"]);
    assert_eq!(str_at(&svc2, "/spec/clusterIP"), cluster_ip, "the ClusterIP survives re-apply");

    // A type change allocates and frees node ports; the ClusterIP may not change.
    k.ok(&["patch", "service", "web", "-p", r#"{"spec":{"type":"NodePort"}}"#]);
    let np = k.json(&["get", "service", "web"]);
    let node_port = np.pointer("/spec/ports/0/nodePort").and_then(Value::as_i64).expect("a node port is allocated on the change to NodePort");
    assert_eq!(str_at(&np, "/spec/clusterIP"), cluster_ip);
    k.ok(&["patch", "service", "web", "-p", r#"{"spec":{"type":"ClusterIP"}}"#]);
    assert!(k.json(&["get", "service", "web"]).pointer("/spec/ports/0/nodePort").is_none(), "the node port goes with the NodePort type");
    // Freed: another Service may take it now.
    let taker = format!(r#"{{"apiVersion":"v1","kind":"Service","metadata":{{"name":"taker"}},"spec":{{"type":"NodePort","ports":[{{"port":80,"nodePort":{node_port}}}]}}}}"#);
    k.ok_stdin(&["create", "-f", "-"], &taker);
    let clash = k.fails(&["patch", "service", "web", "-p", &format!(r#"{{"spec":{{"type":"NodePort","ports":[{{"port":80,"nodePort":{node_port}}}]}}}}"#)]);
    assert_contains(&clash.stderr, "provided port is already allocated", "a node port another Service holds");
    let second = taker.replace(r#""name":"taker""#, r#""name":"taker2""#);
    let clash = k.fails_stdin(&["create", "-f", "-"], &second);
    assert_contains(&clash.stderr, "provided port is already allocated", "creating with a node port another Service holds");
    k.ok(&["delete", "service", "taker"]);
    let moved = k.fails(&["patch", "service", "web", "-p", r#"{"spec":{"clusterIP":"10.43.250.250"}}"#]);
    assert_contains(&moved.stderr, "may not change once set", "changing the ClusterIP");

    // Dual stack: up to PreferDualStack adds an IPv6 ClusterIP, which is then held;
    // down to SingleStack lets it go.
    k.ok(&["patch", "service", "web", "-p", r#"{"spec":{"ipFamilyPolicy":"PreferDualStack"}}"#]);
    let dual = k.json(&["get", "service", "web"]);
    assert_eq!(dual["spec"]["ipFamilies"], serde_json::json!(["IPv4", "IPv6"]), "{dual:#}");
    assert_eq!(str_at(&dual, "/spec/clusterIPs/0"), cluster_ip, "the IPv4 address stays first");
    let v6 = str_at(&dual, "/spec/clusterIPs/1").to_string();
    assert!(v6.starts_with("fd43::"), "an address of the IPv6 service CIDR: {v6}");
    let six = |name: &str| format!(r#"{{"apiVersion":"v1","kind":"Service","metadata":{{"name":"{name}"}},"spec":{{"clusterIP":"{v6}","ports":[{{"port":80}}]}}}}"#);
    let clash = k.fails_stdin(&["create", "-f", "-"], &six("six"));
    assert_contains(&clash.stderr, "provided IP is already allocated", "an IPv6 ClusterIP another Service holds");
    let dup = k.fails_stdin(&["create", "-f", "-"], r#"{"apiVersion":"v1","kind":"Service","metadata":{"name":"dup"},"spec":{"ipFamilyPolicy":"RequireDualStack","ipFamilies":["IPv4","IPv4"],"ports":[{"port":80}]}}"#);
    assert_contains(&dup.stderr, "spec.ipFamilies[1]: Duplicate value: \"IPv4\"", "one family twice");
    k.ok(&["patch", "service", "web", "-p", r#"{"spec":{"ipFamilyPolicy":"SingleStack"}}"#]);
    let single = k.json(&["get", "service", "web"]);
    assert_eq!((single["spec"]["clusterIPs"].clone(), single["spec"]["ipFamilies"].clone()), (serde_json::json!([cluster_ip]), serde_json::json!(["IPv4"])));
    k.ok_stdin(&["create", "-f", "-"], &six("six"));
    assert_eq!(str_at(&k.json(&["get", "service", "six"]), "/spec/ipFamilies/0"), "IPv6", "the freed IPv6 address is another's now");
    k.ok(&["delete", "service", "six"]);

    // Applying the same again changes nothing.
    let out = k.ok(&["apply", "-f", &fixture("app-v2.yaml")]);
    assert!(lines(&out).iter().all(|l| l.ends_with(" unchanged")), "third apply:\n{out}");

    // Three-way merge: a label removed from the manifest is removed from the object.
    let without_tier = std::fs::read_to_string(fixture("app-v2.yaml")).unwrap().replace("    tier: frontend\n", "");
    let out = k.ok_stdin(&["apply", "-f", "-"], &without_tier);
    assert_contains(&out, "deployment.apps/web configured", "apply without the tier label");
    let labels = k.json(&["get", "deployment", "web"])["metadata"]["labels"].clone();
    assert_eq!(labels, serde_json::json!({"app": "web"}), "label dropped from the manifest is removed");

    // Server-side apply: create (201), then update (200).
    let o = k.run(&["apply", "--server-side", "-f", &fixture("deployment-ssa.yaml"), "-v=6"]);
    assert!(o.success(), "server-side apply create:\n{o}");
    assert_eq!(o.stdout.trim(), "deployment.apps/ssa serverside-applied");
    assert_contains(&o.stderr, "201 Created", "server-side apply of a new object answers 201");
    let ssa = k.json(&["get", "deployment", "ssa"]);
    assert_eq!(ssa.pointer("/spec/replicas"), Some(&Value::from(3)));
    assert_eq!(str_at(&ssa, "/spec/template/spec/containers/0/image"), "nginx:1.25");
    let mf = managed_fields(&k, &["get", "deployment", "ssa"]);
    assert!(
        mf.iter().any(|m| m["manager"] == "kubectl" && m["operation"] == "Apply" && m.pointer("/fieldsV1/f:spec/f:replicas").is_some()),
        "the apply manager owns spec.replicas: {mf:#?}"
    );

    let o = k.run(&["apply", "--server-side", "-f", &fixture("deployment-ssa-v2.yaml"), "-v=6"]);
    assert!(o.success(), "server-side apply update:\n{o}");
    assert_eq!(o.stdout.trim(), "deployment.apps/ssa serverside-applied");
    assert_contains(&o.stderr, "200 OK", "server-side apply of an existing object answers 200");
    let ssa = k.json(&["get", "deployment", "ssa"]);
    assert_eq!(str_at(&ssa, "/spec/template/spec/containers/0/image"), "nginx:1.26");
    assert_eq!(str_at(&ssa, "/spec/strategy/type"), "RollingUpdate", "defaults are kept under server-side apply");

    // `kubectl scale` takes spec.replicas (an Update through the scale subresource); a
    // server-side apply that sets another value then conflicts.
    assert_eq!(k.ok(&["scale", "deployment", "ssa", "--replicas=5"]).trim(), "deployment.apps/ssa scaled");
    let mut soft = Soft::new();
    let o = k.run(&["apply", "--server-side", "-f", &fixture("deployment-ssa-v2.yaml")]);
    soft.check(!o.success(), || format!("server-side apply of replicas=3 after `kubectl scale --replicas=5` must conflict:\n{o}"));
    soft.contains(&o.stderr, "Apply failed with 1 conflict", "apply after scale");
    soft.contains(&o.stderr, ".spec.replicas", "apply after scale names the field");
    soft.contains(&o.stderr, "--force-conflicts", "kubectl explains how to force");
    soft.eq(k.ok(&["get", "deployment", "ssa", "-o", "jsonpath={.spec.replicas}"]).as_str(), "5", "a refused apply changes nothing");

    let out = k.ok(&["apply", "--server-side", "--force-conflicts", "-f", &fixture("deployment-ssa-v2.yaml")]);
    assert_eq!(out.trim(), "deployment.apps/ssa serverside-applied");
    assert_eq!(k.ok(&["get", "deployment", "ssa", "-o", "jsonpath={.spec.replicas}"]), "3", "forced apply takes replicas back");
    let mf = managed_fields(&k, &["get", "deployment", "ssa"]);
    let owners: Vec<&Value> = mf.iter().filter(|m| m.pointer("/fieldsV1/f:spec/f:replicas").is_some()).collect();
    soft.check(owners.len() == 1 && owners[0]["operation"] == "Apply", || {
        format!("after --force-conflicts only the applier owns spec.replicas: {mf:#?}")
    });

    tc.stop().await;
    soft.finish();
}

// ---------------------------------------------------------------------------------------
// 2 + 3. get and describe
// ---------------------------------------------------------------------------------------

const MORE_PODS: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: web-1
  labels: {app: web}
spec:
  containers: [{name: main, image: nginx}]
---
apiVersion: v1
kind: Pod
metadata:
  name: web-x
  labels: {app: web, tier: x}
spec:
  containers: [{name: main, image: nginx}]
---
apiVersion: v1
kind: Pod
metadata:
  name: api
  labels: {app: api}
spec:
  containers: [{name: main, image: nginx}]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_output_formats_selectors_pagination_and_describe() {
    let _machine = shared_machine();
    let tc = TestCluster::start_without_components().await;
    let k = tc.kubectl();
    k.ok(&["apply", "-f", &fixture("app.yaml")]);
    k.ok_stdin(&["apply", "-f", "-"], MORE_PODS);

    // Tables.
    let pods = k.ok(&["get", "pods"]);
    let header = header_columns(lines(&pods)[0]);
    assert_eq!(header, ["NAME", "READY", "STATUS", "RESTARTS", "AGE"], "get pods:\n{pods}");
    assert_eq!(row(&pods, "seed").map(|r| r[..4].to_vec()), Some(vec!["seed", "0/1", "Pending", "0"]), "get pods:\n{pods}");
    assert_eq!(lines(&pods).len(), 5, "header + 4 pods:\n{pods}");

    let wide = k.ok(&["get", "pods", "-o", "wide"]);
    let header = header_columns(lines(&wide)[0]);
    assert_eq!(
        header,
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED NODE", "READINESS GATES"],
        "get pods -o wide:\n{wide}"
    );
    assert_eq!(row(&wide, "seed").map(|r| r[5..].to_vec()), Some(vec!["<none>"; 4]), "unscheduled pod:\n{wide}");

    let deploy = k.ok(&["get", "deployments"]);
    assert_eq!(header_columns(lines(&deploy)[0]), ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"], "get deploy:\n{deploy}");
    // No controller manager runs in this cluster: nothing is up to date.
    assert_eq!(row(&deploy, "web").map(|r| r[..4].to_vec()), Some(vec!["web", "0/2", "0", "0"]), "get deploy:\n{deploy}");
    let deploy_wide = k.ok(&["get", "deploy", "-o", "wide"]);
    assert_eq!(
        header_columns(lines(&deploy_wide)[0]),
        ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE", "CONTAINERS", "IMAGES", "SELECTOR"],
        "get deploy -o wide:\n{deploy_wide}"
    );
    assert_eq!(row(&deploy_wide, "web").map(|r| r[5..].to_vec()), Some(vec!["web", "nginx:1.25", "app=web"]), "{deploy_wide}");

    let svc = k.ok(&["get", "svc"]);
    assert_eq!(header_columns(lines(&svc)[0]), ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"], "get svc:\n{svc}");
    let web = row(&svc, "web").unwrap_or_else(|| panic!("no web row:\n{svc}"));
    assert_eq!((web[1], web[3], web[4]), ("ClusterIP", "<none>", "80/TCP"), "get svc:\n{svc}");
    assert!(web[2].parse::<std::net::Ipv4Addr>().is_ok(), "CLUSTER-IP column:\n{svc}");

    let cm = k.ok(&["get", "configmaps"]);
    assert_eq!(header_columns(lines(&cm)[0]), ["NAME", "DATA", "AGE"], "get cm:\n{cm}");
    assert_eq!(row(&cm, "web-config").map(|r| r[..2].to_vec()), Some(vec!["web-config", "2"]), "get cm:\n{cm}");

    // Machine-readable outputs.
    let pod = k.json(&["get", "pod", "seed"]);
    assert_eq!((pod["kind"].as_str(), pod["apiVersion"].as_str()), (Some("Pod"), Some("v1")));
    assert_eq!(str_at(&pod, "/metadata/name"), "seed");
    assert_eq!(str_at(&pod, "/metadata/namespace"), "default");
    assert_eq!(str_at(&pod, "/status/phase"), "Pending");
    assert!(pod.pointer("/metadata/uid").and_then(Value::as_str).is_some_and(|u| !u.is_empty()));
    let list = k.json(&["get", "pods"]);
    assert_eq!(list["kind"], "List");
    assert_eq!(list["items"].as_array().map(Vec::len), Some(4));
    let yaml = k.ok(&["get", "pod", "seed", "-o", "yaml"]);
    for needle in ["apiVersion: v1", "kind: Pod", "  name: seed", "  namespace: default", "image: busybox:1.36", "phase: Pending"] {
        assert_contains(&yaml, needle, "get pod -o yaml");
    }
    assert_eq!(k.ok(&["get", "pod", "seed", "-o", "name"]).trim(), "pod/seed");
    assert_eq!(k.ok(&["get", "pod", "seed", "-o", "jsonpath={.spec.containers[0].image}"]), "busybox:1.36");
    let cc = k.ok(&["get", "pods", "-o", "custom-columns=NAME:.metadata.name,APP:.metadata.labels.app", "--sort-by=.metadata.name"]);
    assert_eq!(lines(&cc).iter().map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")).collect::<Vec<_>>(), [
        "NAME APP", "api api", "seed seed", "web-1 web", "web-x web"
    ]);

    // Label selectors.
    assert_eq!(k.names(&["deploy,svc,cm,pods", "-l", "app=web"]), [
        "configmap/web-config", "deployment.apps/web", "pod/web-1", "pod/web-x", "service/web"
    ]);
    assert_eq!(k.names(&["pods", "-l", "app in (web,seed),tier!=x"]), ["pod/seed", "pod/web-1"]);
    assert_eq!(k.names(&["pods", "-l", "tier"]), ["pod/seed", "pod/web-x"]);
    assert_eq!(k.names(&["pods", "-l", "!tier"]), ["pod/api", "pod/web-1"]);
    assert_eq!(k.names(&["pods", "-l", "app notin (web),app"]), ["pod/api", "pod/seed"]);
    let none = k.run(&["get", "pods", "-l", "app=nothing"]);
    assert!(none.success() && none.stdout.trim().is_empty(), "{none}");
    assert_contains(&none.stderr, "No resources found in default namespace.", "empty selection");
    let bad = k.fails(&["get", "pods", "-l", "app in (web"]);
    assert!(!bad.stderr.is_empty(), "a malformed selector is an error: {bad}");

    // Field selectors.
    assert_eq!(k.names(&["pods", "--field-selector", "metadata.name=seed"]), ["pod/seed"]);
    assert_eq!(k.names(&["pods", "--field-selector", "metadata.name!=seed", "-l", "app=web"]), ["pod/web-1", "pod/web-x"]);
    assert_eq!(k.names(&["pods", "--field-selector", "status.phase=Pending"]).len(), 4);
    assert!(k.names(&["pods", "--field-selector", "status.phase=Running"]).is_empty());
    let o = k.fails(&["get", "pods", "--field-selector", "spec.image=nginx"]);
    assert_contains(&o.stderr, "field label not supported: spec.image", "unsupported field selector");

    // Namespaces and -A.
    k.ok(&["create", "namespace", "other"]);
    k.ok(&["-n", "other", "create", "configmap", "elsewhere", "--from-literal=k=v"]);
    let all = k.ok(&["get", "configmaps", "-A"]);
    assert_eq!(header_columns(lines(&all)[0]), ["NAMESPACE", "NAME", "DATA", "AGE"], "get cm -A:\n{all}");
    assert!(row(&all, "other").is_some_and(|r| r[1] == "elsewhere"), "get cm -A:\n{all}");
    assert!(row(&all, "default").is_some_and(|r| r[1] == "web-config"), "get cm -A:\n{all}");
    assert!(row(&k.ok(&["get", "configmaps"]), "elsewhere").is_none(), "other namespaces are not listed without -A");
    let items = k.json(&["get", "pods", "--all-namespaces"])["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(items.len(), 4);
    let ns = k.ok(&["get", "ns"]);
    assert_eq!(header_columns(lines(&ns)[0]), ["NAME", "STATUS", "AGE"], "get ns:\n{ns}");
    for n in ["default", "kube-system", "kube-public", "kube-node-lease", "other"] {
        assert_eq!(row(&ns, n).map(|r| r[1]), Some("Active"), "namespace {n}:\n{ns}");
    }

    // Pagination: 5 configmaps read 2 at a time.
    for i in 1..=5 {
        k.ok(&["create", "configmap", &format!("page-{i}"), &format!("--from-literal=i={i}")]);
        k.ok(&["label", "configmap", &format!("page-{i}"), "page=yes"]);
    }
    let o = k.run(&["get", "configmaps", "-l", "page=yes", "--chunk-size=2", "-o", "name", "-v=6"]);
    assert!(o.success(), "{o}");
    let mut got = lines(&o.stdout);
    got.sort();
    assert_eq!(got, ["configmap/page-1", "configmap/page-2", "configmap/page-3", "configmap/page-4", "configmap/page-5"]);
    assert_contains(&o.stderr, "limit=2", "kubectl asked for pages of 2");
    assert_eq!(o.stderr.matches("continue=").count(), 2, "two continued pages after the first:\n{}", o.stderr);
    let table = k.ok(&["get", "configmaps", "--chunk-size=2"]);
    let own = lines(&table).into_iter().skip(1).filter(|l| !l.starts_with(ROOT_CA)).count();
    assert_eq!(own, 6, "6 configmaps (besides {ROOT_CA}), once each:\n{table}");

    // describe.
    let d = k.ok(&["describe", "pod", "seed"]);
    for needle in ["Name:", "seed", "Namespace:", "default", "Status:", "Pending", "busybox:1.36", "app=seed"] {
        assert_contains(&d, needle, "describe pod");
    }
    let d = k.ok(&["describe", "deployment", "web"]);
    for needle in ["Name:", "web", "Selector:", "app=web", "Replicas:", "2 desired", "StrategyType:", "RollingUpdate", "nginx:1.25"] {
        assert_contains(&d, needle, "describe deployment");
    }
    let d = k.ok(&["describe", "service", "web"]);
    assert_contains(&d, "Name:", "describe service");
    assert_contains(&d, "ClusterIP", "describe service");

    tc.stop().await;
}

// ---------------------------------------------------------------------------------------
// 4 + 5. patch, label, annotate, scale
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patch_label_annotate_and_scale() {
    let _machine = shared_machine();
    let tc = TestCluster::start().await;
    let k = tc.kubectl();
    k.ok(&["apply", "-f", &fixture("app.yaml")]);

    // Strategic merge patch (the default): containers merge by name.
    let out = k.ok(&["patch", "deployment", "web", "-p", r#"{"spec":{"template":{"spec":{"containers":[{"name":"sidecar","image":"busybox"}]}}}}"#]);
    assert_eq!(out.trim(), "deployment.apps/web patched");
    let d = k.json(&["get", "deployment", "web"]);
    let mut names: Vec<&str> =
        d["spec"]["template"]["spec"]["containers"].as_array().expect("containers").iter().filter_map(|c| c["name"].as_str()).collect();
    names.sort();
    assert_eq!(names, ["sidecar", "web"], "strategic merge keeps web and adds sidecar:\n{d:#}");
    let web = d["spec"]["template"]["spec"]["containers"].as_array().unwrap().iter().find(|c| c["name"] == "web").cloned().unwrap();
    assert_eq!(web["image"], "nginx:1.25", "the merged container is untouched");
    // Strategic $patch: delete.
    k.ok(&["patch", "deployment", "web", "-p", r#"{"spec":{"template":{"spec":{"containers":[{"name":"sidecar","$patch":"delete"}]}}}}"#]);
    assert_eq!(k.ok(&["get", "deployment", "web", "-o", "jsonpath={.spec.template.spec.containers[*].name}"]), "web");

    // Merge patch: null removes a key.
    let out = k.ok(&["patch", "configmap", "web-config", "--type=merge", "-p", r#"{"data":{"color":null,"size":"L"}}"#]);
    assert_eq!(out.trim(), "configmap/web-config patched");
    assert_eq!(k.json(&["get", "configmap", "web-config"])["data"], serde_json::json!({"greeting": "hello", "size": "L"}));
    // A merge patch replaces lists wholesale.
    k.ok(&["patch", "deployment", "web", "--type=merge", "-p", r#"{"spec":{"template":{"spec":{"containers":[{"name":"only","image":"redis"}]}}}}"#]);
    assert_eq!(k.ok(&["get", "deployment", "web", "-o", "jsonpath={.spec.template.spec.containers[*].name}"]), "only");

    // JSON patch.
    let out = k.ok(&[
        "patch",
        "pod",
        "seed",
        "--type=json",
        "-p",
        r#"[{"op":"add","path":"/metadata/labels/extra","value":"yes"},{"op":"replace","path":"/spec/containers/0/image","value":"busybox:1.37"}]"#,
    ]);
    assert_eq!(out.trim(), "pod/seed patched");
    let p = k.json(&["get", "pod", "seed"]);
    assert_eq!(p["metadata"]["labels"]["extra"], "yes");
    assert_eq!(p["spec"]["containers"][0]["image"], "busybox:1.37");
    // A failing `test` operation refuses the whole patch.
    k.fails(&[
        "patch",
        "pod",
        "seed",
        "--type=json",
        "-p",
        r#"[{"op":"test","path":"/metadata/labels/extra","value":"no"},{"op":"add","path":"/metadata/labels/bad","value":"x"}]"#,
    ]);
    assert!(k.json(&["get", "pod", "seed"]).pointer("/metadata/labels/bad").is_none(), "a refused JSON patch changes nothing");
    // A patch that changes nothing is no write: same resourceVersion, "(no change)".
    let mut soft = Soft::new();
    let before = k.json(&["get", "configmap", "web-config"]);
    let out = k.ok(&["patch", "configmap", "web-config", "--type=merge", "-p", r#"{"data":{"size":"L"}}"#]);
    soft.eq(out.trim(), "configmap/web-config patched (no change)", "a no-op merge patch");
    let after = k.json(&["get", "configmap", "web-config"]);
    soft.eq(rv_of(&after), rv_of(&before), "resourceVersion after a no-op patch");

    // label / annotate.
    assert_eq!(k.ok(&["label", "pod", "seed", "env=dev"]).trim(), "pod/seed labeled");
    let o = k.fails(&["label", "pod", "seed", "env=prod"]);
    assert_contains(&o.stderr, "'env' already has a value (dev), and --overwrite is false", "label without --overwrite");
    assert_eq!(k.ok(&["label", "pod", "seed", "env=prod", "--overwrite"]).trim(), "pod/seed labeled");
    assert_eq!(k.ok(&["label", "pod", "seed", "extra-"]).trim(), "pod/seed unlabeled");
    assert_eq!(k.ok(&["annotate", "pod", "seed", "note=hello world"]).trim(), "pod/seed annotated");
    let o = k.fails(&["annotate", "pod", "seed", "note=again"]);
    assert_contains(&o.stderr, "--overwrite is false", "annotate without --overwrite");
    assert_eq!(k.ok(&["annotate", "pod", "seed", "note=again", "--overwrite"]).trim(), "pod/seed annotated");
    let p = k.json(&["get", "pod", "seed"]);
    assert_eq!(p["metadata"]["labels"], serde_json::json!({"app": "seed", "tier": "backend", "env": "prod"}));
    assert_eq!(p["metadata"]["annotations"]["note"], "again");
    assert_eq!(k.ok(&["annotate", "pod", "seed", "note-"]).trim(), "pod/seed annotated");
    assert!(k.json(&["get", "pod", "seed"]).pointer("/metadata/annotations/note").is_none());
    // Label many objects by selector.
    let out = k.ok(&["label", "deploy,svc,cm", "-l", "app=web", "team=blue"]);
    assert_eq!(
        sorted(&lines(&out)),
        sorted(&["deployment.apps/web labeled", "service/web labeled", "configmap/web-config labeled"])
    );
    assert_eq!(k.names(&["all,cm", "-l", "team=blue"]), ["configmap/web-config", "deployment.apps/web", "service/web"]);

    // scale.
    assert_eq!(k.ok(&["scale", "deployment", "web", "--replicas=5"]).trim(), "deployment.apps/web scaled");
    assert_eq!(k.ok(&["get", "deployment", "web", "-o", "jsonpath={.spec.replicas}"]), "5");
    let o = k.fails(&["scale", "deployment", "web", "--replicas=7", "--current-replicas=2"]);
    assert_contains(&o.stderr, "Expected replicas to be 2, was 5", "scale with a wrong --current-replicas");
    assert_eq!(k.ok(&["get", "deployment", "web", "-o", "jsonpath={.spec.replicas}"]), "5");
    assert_eq!(k.ok(&["scale", "deployment", "web", "--replicas=0", "--current-replicas=5"]).trim(), "deployment.apps/web scaled");
    assert_eq!(k.ok(&["get", "deployment", "web", "-o", "jsonpath={.spec.replicas}"]), "0");
    let o = k.fails(&["scale", "deployment", "nope", "--replicas=1"]);
    assert_contains(&o.stderr, r#"deployments.apps "nope" not found"#, "scale of a missing deployment");

    tc.stop().await;
    soft.finish();
}

// ---------------------------------------------------------------------------------------
// 6. delete, cascade, namespaces
// ---------------------------------------------------------------------------------------

const HELD_NAMESPACE: &str = r#"
apiVersion: v1
kind: Namespace
metadata:
  name: held
  finalizers: ["example.com/hold"]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_cascades_and_namespaces() {
    let _machine = shared_machine();
    let tc = TestCluster::start().await;
    let k = tc.kubectl();
    k.ok(&["apply", "-f", &fixture("app.yaml")]);

    // delete pod (an unscheduled pod goes at once).
    assert_eq!(k.ok(&["delete", "pod", "seed"]).trim(), r#"pod "seed" deleted"#);
    let o = k.fails(&["get", "pod", "seed"]);
    assert_contains(&o.stderr, r#"pods "seed" not found"#, "deleted pod");

    // Foreground: the garbage collector deletes the Deployment's ReplicaSet (and its
    // pods) first, then removes the foregroundDeletion finalizer, and the Deployment goes.
    k.ok(&["create", "deployment", "fg", "--image=nginx"]);
    eventually(30 * SECOND, "deployment fg has its replica set", || {
        let sets = k.names(&["replicasets", "-l", "app=fg"]);
        (sets.len() == 1).then_some(()).ok_or_else(|| format!("{sets:?}"))
    });
    assert_eq!(k.ok(&["delete", "deployment", "fg", "--cascade=foreground", "--wait=false"]).trim(), r#"deployment.apps "fg" deleted"#);
    eventually(30 * SECOND, "deployment fg and its replica set are gone", || {
        let left = k.names(&["deployments,replicasets,pods", "-l", "app=fg"]);
        let o = k.run(&["get", "deployment", "fg"]);
        (left.is_empty() && o.stderr.contains(r#"deployments.apps "fg" not found"#)).then_some(()).ok_or_else(|| format!("{left:?} {o}"))
    });

    // Orphan: the Deployment goes, its ReplicaSet stays, released (no owner left).
    k.ok(&["create", "deployment", "orph", "--image=nginx"]);
    eventually(30 * SECOND, "deployment orph has its replica set", || {
        let sets = k.names(&["replicasets", "-l", "app=orph"]);
        (sets.len() == 1).then_some(()).ok_or_else(|| format!("{sets:?}"))
    });
    assert_eq!(k.ok(&["delete", "deployment", "orph", "--cascade=orphan", "--wait=false"]).trim(), r#"deployment.apps "orph" deleted"#);
    eventually(30 * SECOND, "deployment orph is gone and its replica set orphaned", || {
        let o = k.run(&["get", "deployment", "orph"]);
        let owners = k.run(&["get", "replicasets", "-l", "app=orph", "-o", "jsonpath={.items[*].metadata.ownerReferences}"]);
        let sets = k.names(&["replicasets", "-l", "app=orph"]);
        (o.stderr.contains("not found") && sets.len() == 1 && owners.stdout.trim().is_empty()).then_some(()).ok_or_else(|| format!("{o} {sets:?} {owners}"))
    });

    // Background (the default): the Deployment at once, what it owned soon after.
    k.ok(&["create", "deployment", "bg", "--image=nginx"]);
    assert_eq!(k.ok(&["delete", "deployment", "bg"]).trim(), r#"deployment.apps "bg" deleted"#);
    k.fails(&["get", "deployment", "bg"]);
    eventually(30 * SECOND, "deployment bg's replica set and pods are collected", || {
        let left = k.names(&["replicasets,pods", "-l", "app=bg"]);
        left.is_empty().then_some(()).ok_or_else(|| format!("{left:?}"))
    });

    // delete -f.
    k.ok(&["apply", "-f", &fixture("app.yaml")]);
    let out = k.ok(&["delete", "-f", &fixture("app.yaml")]);
    assert_eq!(
        sorted(&lines(&out)),
        sorted(&[
            r#"deployment.apps "web" deleted"#,
            r#"service "web" deleted"#,
            r#"configmap "web-config" deleted"#,
            r#"pod "seed" deleted"#
        ])
    );
    // The Deployment's pods are collected after it (the garbage collector is asynchronous).
    eventually(30 * SECOND, "everything of app.yaml is gone", || {
        let left = k.names(&["deploy,rs,svc,cm,pods", "-l", "app in (web,seed)"]);
        left.is_empty().then_some(()).ok_or_else(|| format!("{left:?}"))
    });
    let o = k.fails(&["delete", "-f", &fixture("app.yaml")]);
    assert_contains(&o.stderr, r#"Error from server (NotFound): error when deleting"#, "delete -f of deleted objects");
    assert_eq!(k.run(&["delete", "-f", &fixture("app.yaml"), "--ignore-not-found"]).code, 0);

    // delete --all.
    for i in 1..=3 {
        k.ok(&["create", "configmap", &format!("c{i}"), "--from-literal=k=v"]);
    }
    k.ok(&["create", "namespace", "keep"]);
    k.ok(&["-n", "keep", "create", "configmap", "kept", "--from-literal=k=v"]);
    // --all takes the published root CA too (as in Kubernetes); its publisher puts it back.
    let out = k.ok(&["delete", "configmap", "--all"]);
    let deleted: Vec<&str> = lines(&out).into_iter().filter(|l| !l.contains(ROOT_CA)).collect();
    assert_eq!(sorted(&deleted), sorted(&[r#"configmap "c1" deleted"#, r#"configmap "c2" deleted"#, r#"configmap "c3" deleted"#]));
    assert!(without_root_ca(k.names(&["configmaps"])).is_empty(), "after delete --all");
    assert_eq!(without_root_ca(k.names(&["configmaps", "-n", "keep"])), ["configmap/kept"], "delete --all stays in its namespace");
    // delete by label selector.
    k.ok(&["create", "configmap", "sel-a", "--from-literal=k=v"]);
    k.ok(&["create", "configmap", "sel-b", "--from-literal=k=v"]);
    k.ok(&["label", "configmap", "sel-a", "gone=yes"]);
    assert_eq!(k.ok(&["delete", "configmap", "-l", "gone=yes"]).trim(), r#"configmap "sel-a" deleted"#);
    assert_eq!(without_root_ca(k.names(&["configmaps"])), ["configmap/sel-b"]);

    // Deleting a namespace deletes its content, then the namespace.
    k.ok(&["create", "namespace", "demo"]);
    let kd = k.namespace("demo");
    kd.ok(&["create", "configmap", "a", "--from-literal=x=1"]);
    kd.ok(&["create", "deployment", "d", "--image=nginx"]);
    kd.ok(&["apply", "-f", &fixture("app.yaml")]);
    assert_eq!(without_root_ca(kd.names(&["pods,cm", "-l", "!pod-template-hash"])).len(), 3);
    assert_eq!(k.ok(&["delete", "namespace", "demo"]).trim(), r#"namespace "demo" deleted"#);
    eventually(30 * SECOND, "namespace demo is gone", || {
        let o = k.run(&["get", "namespace", "demo"]);
        o.stderr.contains(r#"Error from server (NotFound): namespaces "demo" not found"#).then_some(()).ok_or_else(|| o.to_string())
    });
    let everything = k.json(&["get", "all,cm,secrets,events", "-A"]);
    let left: Vec<String> = everything["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(|o| o.pointer("/metadata/namespace").and_then(Value::as_str) == Some("demo"))
        .map(|o| format!("{}/{}", o["kind"], o["metadata"]["name"]))
        .collect();
    assert!(left.is_empty(), "objects of the deleted namespace remain: {left:?}");
    // A re-created namespace starts with nothing but what every namespace gets: the
    // `default` ServiceAccount and the published root CA.
    k.ok(&["create", "namespace", "demo"]);
    eventually(30 * SECOND, "the re-created namespace demo has its default ServiceAccount and root CA", || {
        let got = kd.names(&["all,cm,sa"]);
        (got == ["configmap/kube-root-ca.crt", "serviceaccount/default"]).then_some(()).ok_or_else(|| format!("{got:?}"))
    });
    let ca = kd.ok(&["get", "configmap", ROOT_CA, "-o", "jsonpath={.data.ca\\.crt}"]);
    assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"), "kube-root-ca.crt holds the cluster CA: {ca}");

    // A namespace held by a finalizer stays Terminating: its content is removed and
    // nothing new may be created in it.
    k.ok_stdin(&["apply", "-f", "-"], HELD_NAMESPACE);
    k.namespace("held").ok(&["create", "configmap", "old", "--from-literal=x=1"]);
    k.ok(&["delete", "namespace", "held", "--wait=false"]);
    assert_eq!(k.ok(&["get", "namespace", "held", "-o", "jsonpath={.status.phase}"]), "Terminating");
    let ns_table = k.ok(&["get", "namespace", "held"]);
    assert_eq!(row(&ns_table, "held").map(|r| r[1]), Some("Terminating"), "{ns_table}");
    eventually(30 * SECOND, "the content of terminating namespace held is deleted", || {
        let o = k.namespace("held").run(&["get", "configmaps", "-o", "name"]);
        (o.success() && o.stdout.trim().is_empty()).then_some(()).ok_or_else(|| o.to_string())
    });
    let o = k.namespace("held").fails(&["create", "configmap", "new", "--from-literal=x=1"]);
    assert_contains(&o.stderr, "unable to create new content in namespace held because it is being terminated", "create in a terminating namespace");
    let o = k.fails_stdin(&["create", "-f", "-"], "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: new\n  namespace: held\ndata:\n  x: \"1\"\n");
    let mut soft = Soft::new();
    soft.contains(
        &o.stderr,
        r#"Error from server (Forbidden): error when creating "STDIN": configmaps "new" is forbidden: unable to create new content in namespace held because it is being terminated"#,
        "create -f in a terminating namespace",
    );
    k.ok(&["patch", "namespace", "held", "--type=merge", "-p", r#"{"metadata":{"finalizers":null}}"#]);
    eventually(30 * SECOND, "namespace held is gone once its finalizer is removed", || {
        let o = k.run(&["get", "namespace", "held"]);
        o.stderr.contains(r#"namespaces "held" not found"#).then_some(()).ok_or_else(|| o.to_string())
    });

    // Creating in a namespace that does not exist.
    let o = k.namespace("nope").fails(&["create", "configmap", "x", "--from-literal=k=v"]);
    soft.contains(&o.stderr, r#"namespaces "nope" not found"#, "create in a missing namespace");
    let o = k.fails_stdin(&["create", "-f", "-"], "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  namespace: nope\n");
    soft.contains(&o.stderr, r#"Error from server (NotFound): error when creating "STDIN": namespaces "nope" not found"#, "create -f in a missing namespace");

    tc.stop().await;
    soft.finish();
}

// ---------------------------------------------------------------------------------------
// 7. watch
// ---------------------------------------------------------------------------------------

fn first_two(l: &str) -> (String, String) {
    let mut it = l.split_whitespace();
    (it.next().unwrap_or("").to_string(), it.next().unwrap_or("").to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_watch_prints_added_modified_deleted() {
    let _machine = shared_machine();
    let tc = TestCluster::start().await;
    let k = tc.kubectl();
    let t = 20 * SECOND;
    k.ok(&["run", "pre", "--image=nginx"]);

    let mut all = k.spawn(&["get", "pods", "-w", "--output-watch-events"]);
    let mut selected = k.spawn(&["get", "pods", "-w", "--output-watch-events", "-l", "watched=yes"]);
    let mut plain = k.spawn(&["get", "pods", "-w"]);
    // The initial list is printed first: the watches are then running.
    all.wait_line(0, t, "ADDED pre", |l| first_two(l) == ("ADDED".into(), "pre".into()));
    plain.wait_line(0, t, "with pre", |l| l.split_whitespace().next() == Some("pre"));
    let (hdr, _) = all.wait_line(0, t, "header", |l| l.starts_with("EVENT"));
    assert_eq!(header_columns(&all.lines()[hdr]), ["EVENT", "NAME", "READY", "STATUS", "RESTARTS", "AGE"]);

    k.ok(&["run", "w1", "--image=nginx"]);
    let (a, _) = all.wait_line(0, t, "ADDED w1", |l| first_two(l) == ("ADDED".into(), "w1".into()));
    let (_, p) = plain.wait_line(0, t, "w1", |l| l.split_whitespace().next() == Some("w1"));
    assert!(p.contains("Pending"), "plain -w prints the row: {p}");

    k.ok(&["label", "pod", "w1", "watched=yes"]);
    let (m, _) = all.wait_line(a + 1, t, "MODIFIED w1", |l| first_two(l) == ("MODIFIED".into(), "w1".into()));
    // A watch with a label selector sees the pod appear when it starts to match.
    selected.wait_line(0, t, "ADDED w1 (now matching)", |l| first_two(l) == ("ADDED".into(), "w1".into()));

    k.ok(&["annotate", "pod", "w1", "n=1"]);
    all.wait_line(m + 1, t, "second MODIFIED w1", |l| first_two(l) == ("MODIFIED".into(), "w1".into()));
    selected.wait_line(0, t, "MODIFIED w1", |l| first_two(l) == ("MODIFIED".into(), "w1".into()));

    k.ok(&["delete", "pod", "w1", "--wait=false"]);
    all.wait_line(m + 1, t, "DELETED w1", |l| first_two(l) == ("DELETED".into(), "w1".into()));
    selected.wait_line(0, t, "DELETED w1", |l| first_two(l) == ("DELETED".into(), "w1".into()));
    assert!(
        !selected.lines().iter().any(|l| first_two(l).1 == "pre"),
        "pre does not match the selector: {:?}",
        selected.lines()
    );
    // The label and the annotation each modify w1; the scheduler may too (w1 finds no
    // node and gets PodScheduled=False), so there are at least two MODIFIED in between.
    let seen: Vec<String> = all.lines().iter().map(|l| first_two(l)).filter(|(_, n)| n == "w1").map(|(e, _)| e).collect();
    let modified = seen.iter().filter(|e| *e == "MODIFIED").count();
    assert!(
        seen.first().map(String::as_str) == Some("ADDED") && seen.last().map(String::as_str) == Some("DELETED") && modified >= 2 && seen.len() == modified + 2,
        "events of w1 in order: {:?}",
        all.lines()
    );
    all.stop();
    selected.stop();
    plain.stop();

    // Events: a core/v1 Event shows up in `kubectl get events -w`.
    let mut ev = k.spawn(&["get", "events", "-w"]);
    // kubectl prints nothing for an empty list; give the watch a moment to start (an
    // event created before it starts is printed from the initial list anyway).
    std::thread::sleep(SECOND);
    assert_eq!(k.ok(&["create", "-f", &fixture("event.yaml")]).trim(), "event/seed.watched created");
    let (_, line) = ev.wait_line(0, t, "the Testing event", |l| l.contains("Testing"));
    for needle in ["Normal", "pod/seed", "an event created by the kubectl test"] {
        assert_contains(&line, needle, "get events -w");
    }
    ev.stop();
    let table = k.ok(&["get", "events"]);
    assert_eq!(header_columns(lines(&table)[0]), ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"], "{table}");
    assert_eq!(k.names(&["events", "--field-selector", "involvedObject.name=seed,reason=Testing"]), ["event/seed.watched"]);
    assert!(k.names(&["events", "--field-selector", "involvedObject.name=other"]).is_empty());

    // Watch with events for something created and deleted while watching, -o name.
    let mut cmw = k.spawn(&["get", "configmaps", "-w", "-o", "name"]);
    let mut cmw_events = k.spawn(&["get", "configmaps", "-w", "--output-watch-events"]);
    std::thread::sleep(SECOND);
    k.ok(&["create", "configmap", "wcm", "--from-literal=k=v"]);
    let (i, _) = cmw.wait_line(0, t, "configmap/wcm", |l| l.trim() == "configmap/wcm");
    cmw_events.wait_line(0, t, "ADDED wcm", |l| first_two(l) == ("ADDED".into(), "wcm".into()));
    k.ok(&["delete", "configmap", "wcm"]);
    cmw.wait_line(i + 1, t, "configmap/wcm again (deleted)", |l| l.trim() == "configmap/wcm");
    cmw_events.wait_line(0, t, "DELETED wcm", |l| first_two(l) == ("DELETED".into(), "wcm".into()));
    cmw.stop();
    cmw_events.stop();

    tc.stop().await;
}

// ---------------------------------------------------------------------------------------
// 8. discovery and explain
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_resources_and_explain() {
    let _machine = shared_machine();
    let tc = TestCluster::start().await;
    let k = tc.kubectl();

    let names = lines(&k.ok(&["api-resources", "-o", "name"])).into_iter().map(String::from).collect::<Vec<_>>();
    for r in [
        "pods",
        "services",
        "configmaps",
        "secrets",
        "namespaces",
        "nodes",
        "events",
        "deployments.apps",
        "replicasets.apps",
        "statefulsets.apps",
        "jobs.batch",
        "leases.coordination.k8s.io",
        "roles.rbac.authorization.k8s.io",
    ] {
        assert!(names.iter().any(|n| n == r), "api-resources lists {r}: {names:?}");
    }
    let table = k.ok(&["api-resources"]);
    assert_eq!(header_columns(lines(&table)[0]), ["NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"], "{table}");
    assert_eq!(row(&table, "pods"), Some(vec!["pods", "po", "v1", "true", "Pod"]), "{table}");
    assert_eq!(row(&table, "deployments"), Some(vec!["deployments", "deploy", "apps/v1", "true", "Deployment"]), "{table}");
    assert_eq!(row(&table, "namespaces"), Some(vec!["namespaces", "ns", "v1", "false", "Namespace"]), "{table}");
    assert_eq!(row(&table, "leases"), Some(vec!["leases", "coordination.k8s.io/v1", "true", "Lease"]), "{table}");
    let apps = lines(&k.ok(&["api-resources", "--api-group=apps", "-o", "name"])).into_iter().map(String::from).collect::<Vec<_>>();
    assert!(apps.iter().all(|n| n.ends_with(".apps")) && apps.contains(&"deployments.apps".to_string()), "{apps:?}");
    let versions = k.ok(&["api-versions"]);
    for v in ["v1", "apps/v1", "batch/v1", "coordination.k8s.io/v1", "rbac.authorization.k8s.io/v1"] {
        assert!(lines(&versions).contains(&v), "api-versions lists {v}:\n{versions}");
    }
    let version = k.json(&["version"]);
    assert_eq!(version.pointer("/serverVersion/major").and_then(Value::as_str), Some("1"), "{version:#}");
    assert_eq!(version.pointer("/serverVersion/minor").and_then(Value::as_str), Some("33"), "{version:#}");

    let e = k.ok(&["explain", "pods.spec.containers"]);
    for needle in ["KIND:       Pod", "VERSION:    v1", "FIELD: containers <[]Container>", "DESCRIPTION:", "FIELDS:", "image\t<string>", "name\t<string> -required-", "ports\t<[]ContainerPort>"] {
        assert_contains(&e, needle, "explain pods.spec.containers");
    }
    let e = k.ok(&["explain", "deployment.spec"]);
    for needle in ["GROUP:      apps", "KIND:       Deployment", "FIELD: spec <DeploymentSpec>", "replicas\t<integer>", "selector\t<LabelSelector> -required-", "template\t<PodTemplateSpec> -required-", "strategy\t<DeploymentStrategy>"] {
        assert_contains(&e, needle, "explain deployment.spec");
    }
    let e = k.ok(&["explain", "svc.spec.type"]);
    assert_contains(&e, "FIELD: type <string>", "explain svc.spec.type");
    let e = k.ok(&["explain", "deployment.spec.template.spec.containers", "--recursive"]);
    assert_contains(&e, "livenessProbe", "explain --recursive");
    let o = k.fails(&["explain", "pods.spec.nope"]);
    assert_contains(&o.stderr, "field \"nope\" does not exist", "explain of an unknown field");

    tc.stop().await;
}

// ---------------------------------------------------------------------------------------
// 9. errors
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_kubernetes_errors() {
    let _machine = shared_machine();
    let tc = TestCluster::start().await;
    let k = tc.kubectl();
    let mut soft = Soft::new();
    k.ok(&["apply", "-f", &fixture("app.yaml")]);

    // NotFound.
    let o = k.run(&["get", "pod", "nope"]);
    assert_eq!(o.code, 1, "{o}");
    soft.eq(o.stderr.trim(), r#"Error from server (NotFound): pods "nope" not found"#, "kubectl error message");
    let o = k.fails(&["get", "deployment", "nope"]);
    soft.eq(o.stderr.trim(), r#"Error from server (NotFound): deployments.apps "nope" not found"#, "kubectl error message");
    let o = k.fails(&["delete", "configmap", "nope"]);
    soft.eq(o.stderr.trim(), r#"Error from server (NotFound): configmaps "nope" not found"#, "kubectl error message");
    let o = k.fails(&["get", "namespace", "nope"]);
    soft.eq(o.stderr.trim(), r#"Error from server (NotFound): namespaces "nope" not found"#, "kubectl error message");
    let o = k.fails(&["get", "widgets"]);
    soft.contains(&o.stderr, r#"the server doesn't have a resource type "widgets""#, "unknown resource type");

    // AlreadyExists.
    let o = k.fails(&["create", "-f", &fixture("app.yaml")]);
    for needle in [
        r#"Error from server (AlreadyExists): error when creating"#,
        r#"deployments.apps "web" already exists"#,
        r#"pods "seed" already exists"#,
        r#"configmaps "web-config" already exists"#,
        r#"services "web" already exists"#,
    ] {
        soft.contains(&o.stderr, needle, "create of existing objects");
    }
    let o = k.fails(&["create", "configmap", "web-config", "--from-literal=a=b"]);
    soft.contains(&o.stderr, r#"configmaps "web-config" already exists"#, "create configmap twice");

    // Invalid.
    let o = k.fails(&["apply", "-f", &fixture("deployment-negative-replicas.yaml")]);
    soft.contains(&o.stderr, r#"The Deployment "negative" is invalid"#, "negative replicas");
    soft.contains(&o.stderr, "spec.replicas: Invalid value: -1: must be greater than or equal to 0", "negative replicas");
    k.fails(&["get", "deployment", "negative"]);
    let o = k.fails(&["apply", "-f", &fixture("pod-no-containers.yaml")]);
    soft.contains(&o.stderr, r#"The Pod "empty" is invalid"#, "pod without containers");
    soft.contains(&o.stderr, "spec.containers: Required value", "pod without containers");
    let o = k.fails(&["create", "configmap", "Bad_Name", "--from-literal=a=b"]);
    soft.contains(&o.stderr, r#"ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name""#, "invalid name");
    let o = k.fails(&["scale", "deployment", "web", "--replicas=-1"]);
    assert!(!o.stderr.is_empty(), "negative scale is refused: {o}");
    assert_eq!(k.ok(&["get", "deployment", "web", "-o", "jsonpath={.spec.replicas}"]), "2");

    // Unknown fields: kubectl asks for fieldValidation=Strict.
    let o = k.fails(&["apply", "-f", &fixture("deployment-unknown-field.yaml")]);
    soft.contains(&o.stderr, r#"Error from server (BadRequest)"#, "apply with spec.replicass");
    soft.contains(&o.stderr, r#"unknown field "spec.replicass""#, "apply with spec.replicass");
    let o = k.fails(&["apply", "--server-side", "-f", &fixture("deployment-unknown-field.yaml")]);
    soft.contains(&o.stderr, r#"unknown field "spec.replicass""#, "server-side apply with spec.replicass");
    let o = k.fails(&["create", "-f", &fixture("deployment-unknown-field.yaml")]);
    soft.contains(&o.stderr, r#"unknown field "spec.replicass""#, "create with spec.replicass");
    k.fails(&["get", "deployment", "typo"]);
    // With validation off the unknown field is dropped and the object created.
    let out = k.ok(&["create", "-f", &fixture("deployment-unknown-field.yaml"), "--validate=false"]);
    assert_eq!(out.trim(), "deployment.apps/typo created");
    let typo = k.json(&["get", "deployment", "typo"]);
    soft.check(typo.pointer("/spec/replicass").is_none(), || format!("unknown fields are dropped, not stored (fieldValidation=Ignore): {typo:#}"));
    // --validate=warn: created with a warning.
    let warn = std::fs::read_to_string(fixture("deployment-unknown-field.yaml")).unwrap().replace("name: typo", "name: typo-warn");
    let o = k.run_stdin(&["apply", "-f", "-", "--validate=warn"], &warn);
    assert!(o.success(), "{o}");
    soft.eq(o.stdout.trim(), "deployment.apps/typo-warn created", "apply --validate=warn");
    soft.contains(&o.stderr, r#"unknown field "spec.replicass""#, "warning for an unknown field");

    // No credentials: 401.
    let url = tc.api_url(0);
    let curl = std::process::Command::new("curl")
        .args(["-sk", "--max-time", "20", "-w", "\n%{http_code}", &format!("{url}/api/v1/pods")])
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&curl.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", ""));
    assert_eq!(code, "401", "curl without credentials: {text}");
    let status: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("401 body is a Status ({e}): {body}"));
    assert_eq!((status["kind"].as_str(), status["reason"].as_str(), status["code"].as_i64()), (Some("Status"), Some("Unauthorized"), Some(401)));
    let healthz = std::process::Command::new("curl").args(["-sk", "--max-time", "20", &format!("{url}/healthz")]).output().expect("curl");
    assert_eq!(String::from_utf8_lossy(&healthz.stdout), "ok", "healthz needs no credentials");
    let bogus = bogus_token_kubeconfig(tc.tmp.path(), &url);
    let o = k.with_kubeconfig(&bogus).fails(&["get", "pods"]);
    soft.eq(o.stderr.trim(), "error: You must be logged in to the server (Unauthorized)", "kubectl error message");

    tc.stop().await;
    soft.finish();
}

// ---------------------------------------------------------------------------------------
// 10. every replica
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_replica_serves_and_reads_are_linearizable() {
    let _machine = shared_machine();
    let tc = TestCluster::start().await;
    let k = tc.kubectl();
    let ctx: Vec<Kubectl> = (0..3).map(|i| k.context(&tc.context_name(i))).collect();

    for (i, ki) in ctx.iter().enumerate() {
        let name = format!("from-{}", tc.context_name(i));
        let manifest = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  by: \"{i}\"\n");
        let created: Value = serde_json::from_str(&ki.ok_stdin(&["apply", "-f", "-", "-o", "json"], &manifest)).expect("apply -o json");
        let rv = rv_of(&created);
        // Visible through every replica at once, never older than the write.
        for (j, kj) in ctx.iter().enumerate() {
            let got = kj.json(&["get", "configmap", &name]);
            assert_eq!(got["data"]["by"], Value::from(i.to_string()), "written via {i}, read via {j}");
            assert!(rv_of(&got) >= rv, "read via {j} is older than the write via {i}");
            // The server's own list (kubectl -o json re-wraps lists without a version).
            let raw = kj.ok(&["get", "--raw", "/api/v1/namespaces/default/configmaps"]);
            let list: Value = serde_json::from_str(&raw).expect("ConfigMapList");
            assert_eq!(list["kind"], "ConfigMapList");
            assert!(rv_of(&list) >= rv, "list via {j} at {} is older than the write via {i} at {rv}", rv_of(&list));
            assert!(list["items"].as_array().is_some_and(|a| a.iter().any(|c| c["metadata"]["name"] == name.as_str())), "list via {j} lacks {name}");
        }
        // An update through one replica is seen by the next read through any other.
        ki.ok(&["label", "configmap", &name, &format!("round=r{i}")]);
        for kj in &ctx {
            assert_eq!(kj.ok(&["get", "configmap", &name, "-o", "jsonpath={.metadata.labels.round}"]), format!("r{i}"));
        }
        // Server-side apply and scale through each replica too.
        let dep = format!("dep-{i}");
        ki.ok(&["create", "deployment", &dep, "--image=nginx"]);
        let next = &ctx[(i + 1) % 3];
        assert_eq!(next.ok(&["scale", "deployment", &dep, "--replicas=3"]).trim(), format!("deployment.apps/{dep} scaled"));
        for kj in &ctx {
            assert_eq!(kj.ok(&["get", "deployment", &dep, "-o", "jsonpath={.spec.replicas}"]), "3");
        }
    }
    // Every replica lists the same objects and the same tables.
    let expected = k.names(&["configmaps,deployments"]);
    assert_eq!(without_root_ca(expected.clone()).len(), 6, "{expected:?}");
    for kj in &ctx {
        assert_eq!(kj.names(&["configmaps,deployments"]), expected);
        let table = kj.ok(&["get", "deployments"]);
        assert_eq!(header_columns(lines(&table)[0]), ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]);
        assert_eq!(kj.names(&["namespaces"]).len(), 4);
    }
    // Delete through one replica: gone through all the others at once.
    for (i, ki) in ctx.iter().enumerate() {
        let name = format!("from-{}", tc.context_name(i));
        ki.ok(&["delete", "configmap", &name]);
        for kj in &ctx {
            let o = kj.fails(&["get", "configmap", &name]);
            assert_contains(&o.stderr, "NotFound", "deleted via another replica");
        }
    }
    // A watch through one replica sees writes made through another.
    let mut w = ctx[2].spawn(&["get", "configmaps", "-w", "--output-watch-events"]);
    std::thread::sleep(SECOND);
    ctx[0].ok(&["create", "configmap", "cross", "--from-literal=k=v"]);
    w.wait_line(0, 20 * SECOND, "ADDED cross", |l| l.split_whitespace().take(2).collect::<Vec<_>>() == ["ADDED", "cross"]);
    ctx[1].ok(&["delete", "configmap", "cross"]);
    w.wait_line(0, 20 * SECOND, "DELETED cross", |l| l.split_whitespace().take(2).collect::<Vec<_>>() == ["DELETED", "cross"]);
    w.stop();

    tc.stop().await;
}

// ---------------------------------------------------------------------------------------
// 11. failover
// ---------------------------------------------------------------------------------------

/// Right after a kill, retries `kubectl get configmaps` on every survivor until each
/// answers; all must within `settle` of the kill.
fn settle(survivors: &[Kubectl], killed_at: Instant, settle: Duration) {
    for k in survivors {
        loop {
            let o = k.run(&["get", "configmaps", "-o", "name"]);
            if o.success() {
                break;
            }
            assert!(killed_at.elapsed() < settle, "{:?} did not serve within {settle:?} of the kill:\n{o}", k.context);
            std::thread::sleep(Duration::from_millis(250));
        }
        // And a write, which needs the new leader.
        loop {
            let value = format!("settled=t{}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos());
            let o = k.run(&["label", "namespace", "default", "--overwrite", &value]);
            if o.success() {
                break;
            }
            assert!(killed_at.elapsed() < settle, "{:?} did not accept writes within {settle:?} of the kill:\n{o}", k.context);
            std::thread::sleep(Duration::from_millis(250));
        }
    }
    eprintln!("survivors serve reads and writes {:?} after the kill", killed_at.elapsed());
}

/// Commands that must all succeed on the first try through `k`; `tag` keeps names apart.
fn workload(k: &Kubectl, tag: &str, expected: &mut Vec<String>) {
    let cm = format!("cm-{tag}");
    assert_eq!(k.ok(&["create", "configmap", &cm, &format!("--from-literal=tag={tag}")]).trim(), format!("configmap/{cm} created"));
    expected.push(format!("configmap/{cm}"));
    assert_eq!(k.ok(&["get", "configmap", &cm, "-o", "jsonpath={.data.tag}"]), tag);
    let dep = format!("dep-{tag}");
    assert_eq!(k.ok(&["create", "deployment", &dep, "--image=nginx"]).trim(), format!("deployment.apps/{dep} created"));
    assert_eq!(k.ok(&["scale", "deployment", &dep, "--replicas=4"]).trim(), format!("deployment.apps/{dep} scaled"));
    assert_eq!(k.ok(&["get", "deployment", &dep, "-o", "jsonpath={.spec.replicas}"]), "4");
    k.ok(&["apply", "-f", &fixture("deployment-ssa.yaml"), "--server-side"]);
    let names = k.names(&["configmaps"]);
    for e in expected.iter() {
        assert!(names.contains(e), "{e} missing from the list through {:?}: {names:?}", k.context);
    }
    assert_eq!(k.ok(&["delete", "deployment", &dep]).trim(), format!(r#"deployment.apps "{dep}" deleted"#));
    let o = k.fails(&["get", "deployment", &dep]);
    assert_contains(&o.stderr, "NotFound", "deleted deployment");
    k.ok(&["get", "pods"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failover_when_leader_and_then_a_follower_are_killed() {
    // Alone on the machine: the bounds below are about the cluster, not the scheduler.
    let _machine = exclusive_machine();
    let mut tc = TestCluster::start().await;
    let k = tc.kubectl();
    let ctx: Vec<Kubectl> = (0..3).map(|i| k.context(&tc.context_name(i))).collect();

    let mut expected: Vec<String> = Vec::new();
    for i in 0..10 {
        let name = format!("before-{i}");
        ctx[i % 3].ok(&["create", "configmap", &name, "--from-literal=k=v"]);
        expected.push(format!("configmap/{name}"));
    }
    ctx[0].ok(&["apply", "-f", &fixture("app.yaml")]);
    expected.push("configmap/web-config".into());

    // Kill the leader.
    let leader = tc.cluster.leader().await.expect("a leader");
    eprintln!("killing the leader {}", tc.context_name(leader));
    tc.cluster.kill(leader).await.expect("kill leader");
    let killed_at = Instant::now();
    let survivors: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    let sk: Vec<Kubectl> = survivors.iter().map(|i| ctx[*i].clone()).collect();
    settle(&sk, killed_at, 10 * SECOND);
    for round in 0..2 {
        for (n, k) in sk.iter().enumerate() {
            workload(k, &format!("l{round}-{n}"), &mut expected);
        }
    }
    for k in &sk {
        let names = k.names(&["configmaps"]);
        for e in &expected {
            assert!(names.contains(e), "after the leader's death, {e} is missing through {:?}", k.context);
        }
        assert_eq!(k.ok(&["get", "deployment", "web", "-o", "jsonpath={.spec.template.spec.containers[0].image}"]), "nginx:1.25");
    }

    // Restart it; it catches up and serves the same objects.
    tc.cluster.restart(leader).await.expect("restart");
    tc.cluster.wait_api(Duration::from_secs(60)).await.expect("restarted server serves the API");
    tc.cluster.wait_healthy(Duration::from_secs(60)).await.expect("cluster ready");
    // The Deployment's pods are the controller manager's to make (it may be moving to
    // another server right now): compared by count, everything else by name.
    let reference = ctx[survivors[0]].names(&["configmaps,deployments,services,pods", "-l", "!pod-template-hash"]);
    eventually(30 * SECOND, "the restarted former leader serves every object", || {
        let o = ctx[leader].run(&["get", "configmaps,deployments,services,pods", "-l", "!pod-template-hash", "-o", "name"]);
        let mut got: Vec<String> = lines(&o.stdout).into_iter().map(String::from).collect();
        got.sort();
        let web = ctx[leader].names(&["pods", "-l", "app=web,pod-template-hash"]);
        (o.success() && got == reference && web.len() == 2).then_some(()).ok_or_else(|| format!("{o}\nexpected {reference:?}; web pods {web:?}"))
    });

    // Kill a follower (one that was not killed before).
    let now_leader = tc.cluster.leader().await.expect("a leader");
    let follower = (0..3).find(|i| *i != now_leader && *i != leader).or_else(|| (0..3).find(|i| *i != now_leader)).expect("a follower");
    eprintln!("killing the follower {} (leader is {})", tc.context_name(follower), tc.context_name(now_leader));
    tc.cluster.kill(follower).await.expect("kill follower");
    let killed_at = Instant::now();
    let survivors: Vec<usize> = (0..3).filter(|i| *i != follower).collect();
    let sk: Vec<Kubectl> = survivors.iter().map(|i| ctx[*i].clone()).collect();
    settle(&sk, killed_at, 10 * SECOND);
    for round in 0..2 {
        for (n, k) in sk.iter().enumerate() {
            workload(k, &format!("f{round}-{n}"), &mut expected);
        }
    }
    tc.cluster.restart(follower).await.expect("restart follower");
    tc.cluster.wait_api(Duration::from_secs(60)).await.expect("restarted follower serves the API");
    tc.cluster.wait_healthy(Duration::from_secs(60)).await.expect("cluster ready");

    // All three serve the same objects, all of them (the Deployment's pods by count).
    let reference = ctx[survivors[0]].names(&["configmaps,deployments,services,pods", "-l", "!pod-template-hash"]);
    for e in &expected {
        assert!(reference.contains(e), "{e} is missing: {reference:?}");
    }
    for (i, kc) in ctx.iter().enumerate() {
        eventually(30 * SECOND, &format!("{} serves every object", tc.context_name(i)), || {
            let o = kc.run(&["get", "configmaps,deployments,services,pods", "-l", "!pod-template-hash", "-o", "name"]);
            let mut got: Vec<String> = lines(&o.stdout).into_iter().map(String::from).collect();
            got.sort();
            let web = kc.names(&["pods", "-l", "app=web,pod-template-hash"]);
            (o.success() && got == reference && web.len() == 2).then_some(()).ok_or_else(|| format!("{o}\nexpected {reference:?}; web pods {web:?}"))
        });
    }
    // And writes through the restarted ones work.
    workload(&ctx[leader], "after-restart-leader", &mut expected);
    workload(&ctx[follower], "after-restart-follower", &mut expected);

    tc.stop().await;
}

// ---------------------------------------------------------------------------------------
// 12. several kubectl versions
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_1_27_1_30_and_1_33_apply_get_delete() {
    let _machine = shared_machine();
    let tc = TestCluster::start().await;
    let base = tc.kubectl();

    for v in ["1.27", "1.30", "1.33"] {
        let ns = format!("v{}", v.replace('.', "-"));
        let k = base.version(v).namespace(&ns);
        let client = k.json(&["version", "--client"]);
        assert_eq!(client.pointer("/clientVersion/minor").and_then(Value::as_str), Some(v.split('.').nth(1).unwrap()), "{client:#}");
        assert_eq!(k.ok(&["create", "namespace", &ns]).trim(), format!("namespace/{ns} created"), "kubectl {v}");
        let out = k.ok(&["apply", "-f", &fixture("app.yaml")]);
        assert_eq!(
            sorted(&lines(&out)),
            sorted(&["deployment.apps/web created", "service/web created", "configmap/web-config created", "pod/seed created"]),
            "kubectl {v} apply"
        );
        let pods = k.ok(&["get", "pods"]);
        assert_eq!(header_columns(lines(&pods)[0]), ["NAME", "READY", "STATUS", "RESTARTS", "AGE"], "kubectl {v}:\n{pods}");
        assert_eq!(row(&pods, "seed").map(|r| r[..3].to_vec()), Some(vec!["seed", "0/1", "Pending"]), "kubectl {v}:\n{pods}");
        let out = k.ok(&["apply", "-f", &fixture("app-v2.yaml")]);
        assert_contains(&out, "deployment.apps/web configured", &format!("kubectl {v} re-apply"));
        assert_eq!(k.ok(&["get", "deploy", "web", "-o", "jsonpath={.spec.template.spec.containers[0].image}"]), "nginx:1.26", "kubectl {v}");
        let out = k.ok(&["apply", "--server-side", "-f", &fixture("deployment-ssa.yaml")]);
        assert_eq!(out.trim(), "deployment.apps/ssa serverside-applied", "kubectl {v}");
        assert_eq!(k.ok(&["scale", "deploy", "ssa", "--replicas=4"]).trim(), "deployment.apps/ssa scaled", "kubectl {v}");
        k.ok(&["label", "pod", "seed", "v=x"]);
        k.ok(&["get", "all"]);
        k.ok(&["describe", "deployment", "web"]);
        let o = k.fails(&["get", "pod", "nope"]);
        assert_eq!(o.stderr.trim(), r#"Error from server (NotFound): pods "nope" not found"#, "kubectl {v}");
        let out = k.ok(&["delete", "-f", &fixture("app.yaml")]);
        assert_contains(&out, r#"pod "seed" deleted"#, &format!("kubectl {v} delete"));
        assert_eq!(k.ok(&["delete", "deployment", "ssa"]).trim(), r#"deployment.apps "ssa" deleted"#, "kubectl {v}");
        // The Deployments' pods go with them, collected asynchronously.
        eventually(30 * SECOND, &format!("kubectl {v}: everything deleted"), || {
            let o = k.run(&["get", "pods,deployments,replicasets,services,configmaps", "-o", "name"]);
            let left = without_root_ca(lines(&o.stdout).into_iter().map(String::from).collect());
            (o.success() && left.is_empty()).then_some(()).ok_or_else(|| o.to_string())
        });
        let e = k.ok(&["explain", "pods.spec.restartPolicy"]);
        assert_contains(&e, "restartPolicy", &format!("kubectl {v} explain"));
    }
    tc.stop().await;
}

// ---------------------------------------------------------------------------------------
// 13. protobuf request bodies (kubectl 1.33 `create` subcommands)
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_sends_protobuf() {
    let _machine = shared_machine();
    let tc = TestCluster::start().await;
    let k = tc.kubectl().version("1.33");

    let o = k.run(&["create", "deployment", "pb", "--image=nginx", "--replicas=2", "-v=8"]);
    assert!(o.success(), "create deployment (protobuf):\n{o}");
    assert_eq!(o.stdout.trim(), "deployment.apps/pb created");
    assert_contains(&o.stderr, "Content-Type: application/vnd.kubernetes.protobuf", "kubectl 1.33 sends protobuf");
    let d = k.json(&["get", "deployment", "pb"]);
    assert_eq!(d.pointer("/spec/replicas"), Some(&Value::from(2)));
    assert_eq!(d.pointer("/spec/selector/matchLabels"), Some(&serde_json::json!({"app": "pb"})));
    assert_eq!(d.pointer("/metadata/labels"), Some(&serde_json::json!({"app": "pb"})));
    assert_eq!(d.pointer("/spec/template/metadata/labels"), Some(&serde_json::json!({"app": "pb"})));
    assert_eq!(str_at(&d, "/spec/template/spec/containers/0/name"), "nginx");
    assert_eq!(str_at(&d, "/spec/template/spec/containers/0/image"), "nginx");
    assert_eq!(str_at(&d, "/spec/strategy/type"), "RollingUpdate", "defaults apply to protobuf bodies too");
    assert_eq!(str_at(&d, "/metadata/namespace"), "default");
    let mf = managed_fields(&k, &["get", "deployment", "pb"]);
    assert!(mf.iter().any(|m| m["manager"] == "kubectl-create" && m["operation"] == "Update"), "{mf:#?}");

    let out = k.ok(&["create", "configmap", "pbcm", "--from-literal=k=v", "--from-literal=two=2"]);
    assert_eq!(out.trim(), "configmap/pbcm created");
    assert_eq!(k.json(&["get", "configmap", "pbcm"])["data"], serde_json::json!({"k": "v", "two": "2"}));

    let out = k.ok(&["create", "secret", "generic", "pbsecret", "--from-literal=password=s3cret"]);
    assert_eq!(out.trim(), "secret/pbsecret created");
    let s = k.json(&["get", "secret", "pbsecret"]);
    assert_eq!(s["type"], "Opaque");
    assert_eq!(s["data"]["password"], "czNjcmV0", "base64 of s3cret");

    assert_eq!(k.ok(&["create", "namespace", "pbns"]).trim(), "namespace/pbns created");
    let ns = k.json(&["get", "namespace", "pbns"]);
    assert_eq!(ns.pointer("/status/phase").and_then(Value::as_str), Some("Active"), "{ns:#}");
    assert_eq!(ns.pointer("/metadata/labels/kubernetes.io~1metadata.name").and_then(Value::as_str), Some("pbns"), "{ns:#}");

    let out = k.ok(&["create", "service", "clusterip", "pbsvc", "--tcp=80:8080"]);
    assert_eq!(out.trim(), "service/pbsvc created");
    let svc = k.json(&["get", "service", "pbsvc"]);
    assert_eq!(str_at(&svc, "/spec/type"), "ClusterIP");
    assert!(str_at(&svc, "/spec/clusterIP").parse::<std::net::Ipv4Addr>().is_ok(), "{svc:#}");
    assert_eq!(svc.pointer("/spec/ports/0/port"), Some(&Value::from(80)), "{svc:#}");
    assert_eq!(svc.pointer("/spec/ports/0/targetPort"), Some(&Value::from(8080)), "{svc:#}");
    assert_eq!(str_at(&svc, "/spec/ports/0/protocol"), "TCP");
    assert_eq!(str_at(&svc, "/spec/ports/0/name"), "80-8080");
    assert_eq!(svc.pointer("/spec/selector"), Some(&serde_json::json!({"app": "pbsvc"})), "{svc:#}");

    // In another namespace, and a pod via `run`.
    let kn = k.namespace("pbns");
    assert_eq!(kn.ok(&["create", "deployment", "pb2", "--image=redis:7", "--port=6379"]).trim(), "deployment.apps/pb2 created");
    assert_eq!(kn.json(&["get", "deployment", "pb2"]).pointer("/spec/template/spec/containers/0/ports/0/containerPort"), Some(&Value::from(6379)));
    assert_eq!(kn.ok(&["run", "pbpod", "--image=busybox", "--labels=a=b", "--", "sleep", "60"]).trim(), "pod/pbpod created");
    let pod = kn.json(&["get", "pod", "pbpod"]);
    assert_eq!(pod["spec"]["containers"][0]["args"], serde_json::json!(["sleep", "60"]), "{pod:#}");
    assert_eq!(pod["metadata"]["labels"], serde_json::json!({"a": "b"}));
    // An error on a protobuf body is still a readable Status.
    let o = k.fails(&["create", "configmap", "pbcm", "--from-literal=k=v"]);
    assert_contains(&o.stderr, r#"configmaps "pbcm" already exists"#, "duplicate create with a protobuf body");

    // Responses in protobuf: kubectl 1.33's typed client asks for protobuf first, decodes
    // what the server answers into its Go types and prints that. The object `create -o
    // json` prints went through the server's encoder and kubectl's decoder.
    let o = k.run(&["create", "deployment", "pbout", "--image=nginx:1.27", "--replicas=3", "-o", "json", "-v=8"]);
    assert!(o.success(), "create deployment -o json:\n{o}");
    assert_contains(&o.stderr, "Accept: application/vnd.kubernetes.protobuf", "kubectl 1.33 asks for protobuf");
    assert!(
        o.stderr.lines().filter(|l| l.contains("Content-Type: application/vnd.kubernetes.protobuf")).count() >= 2,
        "the request body and the response are protobuf:\n{}",
        o.stderr
    );
    let printed: Value = serde_json::from_str(o.stdout.trim()).expect("create -o json prints JSON");
    let stored = k.json(&["get", "deployment", "pbout"]);
    for path in ["/metadata/uid", "/metadata/generation", "/metadata/labels", "/metadata/creationTimestamp", "/spec/replicas", "/spec/selector", "/spec/strategy", "/spec/template/spec/containers/0/image", "/spec/template/spec/terminationGracePeriodSeconds", "/spec/revisionHistoryLimit"] {
        assert_eq!(printed.pointer(path), stored.pointer(path), "{path}: decoded from protobuf vs JSON\n{printed:#}\n{stored:#}");
    }
    assert_eq!(printed.pointer("/spec/strategy/rollingUpdate/maxSurge"), Some(&Value::from("25%")), "an IntOrString default survives protobuf");
    let cm = k.json(&["create", "configmap", "pbout", "--from-literal=a=1", "--from-literal=b=two", "-o", "json"]);
    assert_eq!(cm["data"], serde_json::json!({"a": "1", "b": "two"}));
    assert_eq!(cm["metadata"]["uid"], k.json(&["get", "configmap", "pbout"])["metadata"]["uid"]);
    // `describe` reads the object and its events through the typed client.
    let d = kn.ok(&["describe", "pod", "pbpod"]);
    for want in ["Name:", "pbpod", "Namespace:", "pbns", "Labels:", "a=b", "busybox", "Status:", "Pending"] {
        assert_contains(&d, want, "describe pod (protobuf)");
    }
    let d = k.ok(&["describe", "deployment", "pbout"]);
    assert_contains(&d, "3 desired", "describe deployment (protobuf)");
    assert_contains(&d, "RollingUpdate", "describe deployment (protobuf)");
    // A protobuf Status for an error: kubectl prints its message.
    let o = k.fails(&["describe", "pod", "nope"]);
    assert_contains(&o.stderr, r#"pods "nope" not found"#, "describe of a missing pod (protobuf Status)");
    protobuf_watch_frames(&tc).await;

    tc.stop().await;
}

/// `metav1.WatchEvent` as Kubernetes' `generated.proto` defines it, declared here rather
/// than taken from the encoder so the test reads the wire format independently.
#[derive(Clone, PartialEq, prost::Message)]
struct WireWatchEvent {
    #[prost(string, tag = "1")]
    r#type: String,
    #[prost(message, optional, tag = "2")]
    object: Option<WireRawExtension>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct WireRawExtension {
    #[prost(bytes = "vec", tag = "1")]
    raw: Vec<u8>,
}

/// A watch asked for in protobuf (as client-go's typed informers ask): length-prefixed
/// `WatchEvent`s whose objects decode to what a JSON GET returns.
async fn protobuf_watch_frames(tc: &TestCluster) {
    use futures::AsyncReadExt;
    use prost::Message;
    let kc = kube::config::Kubeconfig::read_from(tc.kubeconfig()).unwrap();
    let client = kube::Client::try_from(kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap()).unwrap();
    let get = |accept: &str, uri: &str| http::Request::get(uri).header(http::header::ACCEPT, accept).body(Vec::new()).unwrap();
    let accept = "application/vnd.kubernetes.protobuf, application/json";
    let uri = "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=0&fieldSelector=metadata.name%3Dpbcm&timeoutSeconds=5";
    let mut stream = client.request_stream(get(accept, uri)).await.expect("a protobuf watch");
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).await.expect("a frame's length");
    let mut frame = vec![0; u32::from_be_bytes(len) as usize];
    stream.read_exact(&mut frame).await.expect("a whole frame");
    let event = WireWatchEvent::decode(frame.as_slice()).expect("a WatchEvent");
    assert_eq!(event.r#type, "ADDED");
    let raw = event.object.expect("the event carries its object").raw;
    assert!(raw.starts_with(b"k8s\0"), "the object is a whole protobuf body");
    let decoded = keelson_kube_protobuf::decode(&raw).expect("the event's object decodes");
    let json: Value = client.request(get("application/json", "/api/v1/namespaces/default/configmaps/pbcm")).await.unwrap();
    assert_eq!(decoded, json, "the watched object is the stored one");
    // A kind without a protobuf form (a custom resource's would be one) still answers
    // JSON to a client that accepts both: discovery documents are such.
    let v: Value = client.request(get(accept, "/api/v1")).await.expect("discovery answered in JSON");
    assert_eq!(v["kind"], "APIResourceList");
}

/// The ConfigMap the root CA publisher keeps in every namespace.
const ROOT_CA: &str = "kube-root-ca.crt";

/// `kubectl get -o name` names without the published root CA.
fn without_root_ca(names: Vec<String>) -> Vec<String> {
    names.into_iter().filter(|n| n != "configmap/kube-root-ca.crt").collect()
}
