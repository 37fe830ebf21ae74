//! Row tests for services, nodes and the other resources, the whole-table
//! structure, and robustness over empty or arbitrary objects.

use super::tests::{ago, cells, NOW};
use super::*;
use proptest::prelude::*;
use serde_json::json;

#[test]
fn table_service_rows() {
    let svc = |spec: Value, status: Value| {
        json!({"metadata": {"name": "s", "creationTimestamp": ago(30)}, "spec": spec, "status": status})
    };
    let dns = svc(
        json!({"type": "ClusterIP", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
               "selector": {"k8s-app": "kube-dns"},
               "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}, {"port": 9153}]}),
        json!({}),
    );
    assert_eq!(
        cells(Printer::Service, &dns),
        vec![
            json!("s"), json!("ClusterIP"), json!("10.96.0.10"), json!("<none>"),
            json!("53/UDP,53/TCP,9153/TCP"), json!("30s"), json!("k8s-app=kube-dns")
        ]
    );
    let np = svc(
        json!({"type": "NodePort", "clusterIP": "10.96.1.1", "externalIPs": ["1.1.1.1"],
               "selector": {"b": "2", "a": "1"}, "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}]}),
        json!({}),
    );
    let c = cells(Printer::Service, &np);
    assert_eq!(c[3..5], [json!("1.1.1.1"), json!("80:30080/TCP")]);
    assert_eq!(c[6], json!("a=1,b=2"));
    let lb_spec = json!({"type": "LoadBalancer", "clusterIP": "10.96.2.2",
                         "ports": [{"port": 443, "nodePort": 31443, "protocol": "TCP"}]});
    let pending = svc(lb_spec.clone(), json!({"loadBalancer": {}}));
    let c = cells(Printer::Service, &pending);
    assert_eq!(c[1..5], [json!("LoadBalancer"), json!("10.96.2.2"), json!("<pending>"), json!("443:31443/TCP")]);
    assert_eq!(c[6], json!("<none>"));
    let ready = svc(lb_spec.clone(), json!({"loadBalancer": {"ingress": [{"ip": "203.0.113.9"}, {"hostname": "lb.example.com"}]}}));
    assert_eq!(cells(Printer::Service, &ready)[3], json!("203.0.113.9,lb.example.com"));
    let mut with_ext = ready.clone();
    with_ext["spec"]["externalIPs"] = json!(["198.51.100.1"]);
    assert_eq!(cells(Printer::Service, &with_ext)[3], json!("203.0.113.9,lb.example.com,198.51.100.1"));
    let ext = svc(json!({"type": "ExternalName", "externalName": "db.example.com"}), json!({}));
    let c = cells(Printer::Service, &ext);
    assert_eq!(c[1..5], [json!("ExternalName"), json!("<none>"), json!("db.example.com"), json!("<none>")]);
    let headless = svc(json!({"clusterIP": "None", "ports": []}), json!({}));
    assert_eq!(cells(Printer::Service, &headless)[1..5], [json!("ClusterIP"), json!("None"), json!("<none>"), json!("<none>")]);
}

#[test]
fn table_node_rows() {
    let node = json!({
        "metadata": {"name": "cp-1", "creationTimestamp": ago(86_400 * 20),
                     "labels": {"node-role.kubernetes.io/control-plane": "", "node-role.kubernetes.io/etcd": "",
                                "kubernetes.io/role": "master", "kubernetes.io/hostname": "cp-1"}},
        "spec": {"unschedulable": true},
        "status": {
            "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}],
            "addresses": [{"type": "Hostname", "address": "cp-1"}, {"type": "InternalIP", "address": "192.168.1.10"}],
            "nodeInfo": {"kubeletVersion": "v1.33.1", "osImage": "Debian GNU/Linux 12 (bookworm)",
                         "kernelVersion": "6.1.0-18-amd64", "containerRuntimeVersion": "containerd://1.7.13"}
        }
    });
    assert_eq!(
        cells(Printer::Node, &node),
        vec![
            json!("cp-1"), json!("Ready,SchedulingDisabled"), json!("control-plane,etcd,master"), json!("20d"),
            json!("v1.33.1"), json!("192.168.1.10"), json!("<none>"), json!("Debian GNU/Linux 12 (bookworm)"),
            json!("6.1.0-18-amd64"), json!("containerd://1.7.13")
        ]
    );
    let lost = json!({"metadata": {"name": "w"}, "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}});
    let c = cells(Printer::Node, &lost);
    assert_eq!(c[1..3], [json!("NotReady"), json!("<none>")]);
    assert_eq!(c[7], json!("<unknown>"));
    assert_eq!(cells(Printer::Node, &json!({"metadata": {"name": "x"}}))[1], json!("Unknown"));
}

#[test]
fn table_config_namespace_and_account_rows() {
    let ns = json!({"metadata": {"name": "kube-system", "creationTimestamp": ago(4000)}, "status": {"phase": "Terminating"}});
    assert_eq!(cells(Printer::Namespace, &ns), vec![json!("kube-system"), json!("Terminating"), json!("66m")]);
    assert_eq!(cells(Printer::Namespace, &json!({}))[1], json!("Active"));
    let cm = json!({"metadata": {"name": "cfg"}, "data": {"a": "1", "b": "2"}, "binaryData": {"c": "AA=="}});
    assert_eq!(cells(Printer::ConfigMap, &cm)[1], json!(3));
    let secret = json!({"metadata": {"name": "tls"}, "type": "kubernetes.io/tls", "data": {"tls.crt": "", "tls.key": ""}});
    assert_eq!(cells(Printer::Secret, &secret)[..3], [json!("tls"), json!("kubernetes.io/tls"), json!(2)]);
    let sa = json!({"metadata": {"name": "default", "creationTimestamp": ago(10)}});
    assert_eq!(cells(Printer::ServiceAccount, &sa), vec![json!("default"), json!(0), json!("10s")]);
    let lease = json!({"metadata": {"name": "kube-scheduler"}, "spec": {"holderIdentity": "cp-1_abc"}});
    assert_eq!(cells(Printer::Lease, &lease)[1], json!("cp-1_abc"));
}

#[test]
fn table_endpoints_and_slices() {
    let addrs = |ips: &[&str]| ips.iter().map(|ip| json!({"ip": ip})).collect::<Vec<_>>();
    let ep = json!({"metadata": {"name": "web"}, "subsets": [
        {"addresses": addrs(&["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"]), "ports": [{"port": 80}]}
    ]});
    assert_eq!(cells(Printer::Endpoints, &ep)[1], json!("10.0.0.1:80,10.0.0.2:80,10.0.0.3:80 + 2 more..."));
    let few = json!({"subsets": [
        {"addresses": addrs(&["fd00::1"]), "ports": [{"port": 443}]},
        {"addresses": addrs(&["10.0.0.9"])}
    ]});
    assert_eq!(cells(Printer::Endpoints, &few)[1], json!("[fd00::1]:443,10.0.0.9"));
    assert_eq!(cells(Printer::Endpoints, &json!({}))[1], json!("<none>"));

    let slice = json!({"metadata": {"name": "web-abc"}, "addressType": "IPv4",
        "ports": [{"port": 80, "name": "http"}, {"name": "metrics"}, {}],
        "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2", "10.0.0.3"]}, {"addresses": ["10.0.0.4"]}]});
    assert_eq!(
        cells(Printer::EndpointSlice, &slice)[..4],
        [json!("web-abc"), json!("IPv4"), json!("80,metrics,*"), json!("10.0.0.1,10.0.0.2,10.0.0.3 + 1 more...")]
    );
    let empty = cells(Printer::EndpointSlice, &json!({}));
    assert_eq!(empty[2..4], [json!("<unset>"), json!("<unset>")]);
}

#[test]
fn table_event_rows_core_and_events_v1() {
    let ev = json!({
        "metadata": {"name": "web-1.17a"},
        "involvedObject": {"kind": "Pod", "name": "web-1", "fieldPath": "spec.containers{app}"},
        "reason": "BackOff", "type": "Warning", "message": " Back-off restarting failed container \n",
        "source": {"component": "kubelet", "host": "node-a"},
        "firstTimestamp": ago(600), "lastTimestamp": ago(20), "count": 7
    });
    assert_eq!(
        cells(Printer::Event, &ev),
        vec![
            json!("20s"), json!("Warning"), json!("BackOff"), json!("pod/web-1"), json!("spec.containers{app}"),
            json!("kubelet, node-a"), json!("Back-off restarting failed container"), json!("10m"), json!(7),
            json!("web-1.17a")
        ]
    );
    let v1 = json!({
        "metadata": {"name": "e2"},
        "regarding": {"kind": "Deployment", "name": "web"},
        "reason": "ScalingReplicaSet", "type": "Normal", "note": "Scaled up",
        "reportingController": "deployment-controller", "eventTime": "2026-11-30T07:58:59.5Z",
        "series": {"count": 4, "lastObservedTime": "2026-11-30T07:59:50.5Z"}
    });
    let c = cells(Printer::EventV1, &v1);
    assert_eq!(c[..4], [json!("9s"), json!("Normal"), json!("ScalingReplicaSet"), json!("deployment/web")]);
    assert_eq!(c[5..9], [json!("deployment-controller"), json!("Scaled up"), json!("60s"), json!(4)]);
    let bare = cells(Printer::Event, &json!({"involvedObject": {"kind": "Node"}}));
    assert_eq!((&bare[0], &bare[3], &bare[8]), (&json!("<unknown>"), &json!("node"), &json!(1)));
    let cols = columns(Printer::Event);
    assert_eq!(cols[0].name, "Last Seen");
    let shown: Vec<&str> = cols.iter().filter(|c| c.priority == 0).map(|c| c.name.as_str()).collect();
    assert_eq!(shown, ["Last Seen", "Type", "Reason", "Object", "Message"]);
}

#[test]
fn table_networking_storage_policy_rbac_rows() {
    let ing = json!({"metadata": {"name": "web"}, "spec": {"ingressClassName": "nginx",
        "rules": [{"host": "a.example"}, {"host": "b.example"}], "tls": [{"hosts": ["a.example"]}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.5"}]}}});
    assert_eq!(
        cells(Printer::Ingress, &ing)[..5],
        [json!("web"), json!("nginx"), json!("a.example,b.example"), json!("203.0.113.5"), json!("80, 443")]
    );
    let many = json!({"spec": {"rules": [{"host": "a"}, {}, {"host": "b"}, {"host": "c"}, {"host": "d"}, {"host": "e"}]}});
    assert_eq!(cells(Printer::Ingress, &many)[2], json!("a,b,c + 3 more..."));
    let c = cells(Printer::Ingress, &json!({"spec": {"rules": [{}]}}));
    assert_eq!(c[1..5], [json!("<none>"), json!("*"), json!(""), json!("80")]);
    let ic = json!({"spec": {"controller": "k8s.io/ingress-nginx",
        "parameters": {"apiGroup": "k8s.example.com", "kind": "IngressParameters", "name": "external-lb"}}});
    assert_eq!(cells(Printer::IngressClass, &ic)[1..3],
        [json!("k8s.io/ingress-nginx"), json!("IngressParameters.k8s.example.com/external-lb")]);

    let pv = json!({"metadata": {"name": "pv1"}, "spec": {"capacity": {"storage": "10Gi"},
        "accessModes": ["ReadWriteOncePod", "ReadWriteOnce"], "persistentVolumeReclaimPolicy": "Retain",
        "claimRef": {"namespace": "db", "name": "data-0"}, "storageClassName": "fast"}, "status": {"phase": "Bound"}});
    assert_eq!(
        cells(Printer::PersistentVolume, &pv)[..9],
        [json!("pv1"), json!("10Gi"), json!("RWO,RWOP"), json!("Retain"), json!("Bound"), json!("db/data-0"),
         json!("fast"), json!("<unset>"), json!("")]
    );
    let pvc = json!({"metadata": {"name": "data-0", "annotations": {"volume.beta.kubernetes.io/storage-class": "legacy"}},
        "spec": {"volumeName": "pv1", "storageClassName": "fast", "volumeMode": "Filesystem"},
        "status": {"phase": "Bound", "capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"]}});
    let c = cells(Printer::PersistentVolumeClaim, &pvc);
    assert_eq!(c[..7], [json!("data-0"), json!("Bound"), json!("pv1"), json!("10Gi"), json!("RWO"), json!("legacy"), json!("<unset>")]);
    assert_eq!(c[8], json!("Filesystem"));
    let pending = cells(Printer::PersistentVolumeClaim, &json!({"status": {"phase": "Pending"}, "spec": {"storageClassName": "fast"}}));
    assert_eq!(pending[1..6], [json!("Pending"), json!(""), json!(""), json!(""), json!("fast")]);

    let sc = json!({"metadata": {"name": "standard", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": "rancher.io/local-path", "volumeBindingMode": "WaitForFirstConsumer"});
    assert_eq!(
        cells(Printer::StorageClass, &sc)[..5],
        [json!("standard (default)"), json!("rancher.io/local-path"), json!("Delete"), json!("WaitForFirstConsumer"), json!(false)]
    );
    let pdb = json!({"spec": {"minAvailable": "50%"}, "status": {"disruptionsAllowed": 1}});
    assert_eq!(cells(Printer::PodDisruptionBudget, &pdb)[1..4], [json!("50%"), json!("N/A"), json!(1)]);
    let pdb = json!({"spec": {"maxUnavailable": 1}});
    assert_eq!(cells(Printer::PodDisruptionBudget, &pdb)[1..4], [json!("N/A"), json!("1"), json!(0)]);

    let role = json!({"metadata": {"name": "pod-reader", "creationTimestamp": "2026-11-29T09:30:00+01:30"}});
    assert_eq!(cells(Printer::CreatedAt, &role), vec![json!("pod-reader"), json!("2026-11-29T08:00:00Z")]);
    assert_eq!(columns(Printer::CreatedAt)[1].type_, "date");
    assert_eq!(cells(Printer::CreatedAt, &json!({}))[1], json!("0001-01-01T00:00:00Z"));
    let rb = json!({"metadata": {"name": "read-pods", "creationTimestamp": ago(3 * 3600 + 300)},
        "roleRef": {"kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "User", "name": "jane"}, {"kind": "User", "name": "bob"}, {"kind": "Group", "name": "devs"},
                     {"kind": "ServiceAccount", "namespace": "ci", "name": "runner"}]});
    assert_eq!(
        cells(Printer::RoleBinding, &rb),
        vec![json!("read-pods"), json!("ClusterRole/view"), json!("3h5m"), json!("jane, bob"), json!("devs"), json!("ci/runner")]
    );
    let pc = json!({"metadata": {"name": "system-cluster-critical"}, "value": 2_000_000_000, "globalDefault": false});
    assert_eq!(cells(Printer::PriorityClass, &pc)[..3], [json!("system-cluster-critical"), json!(2_000_000_000), json!(false)]);
    let widget = json!({"metadata": {"name": "w1", "creationTimestamp": ago(86_400 * 800)}});
    assert_eq!(cells(Printer::Generic, &widget), vec![json!("w1"), json!("2y70d")]);
}

#[test]
fn table_every_resource_handles_empty_and_mistyped_objects() {
    let odd = json!({"metadata": [], "spec": 5, "status": "x", "data": null, "subsets": {"a": 1}});
    for &p in Printer::ALL {
        let cols = columns(p);
        for obj in [json!({}), json!(null), json!([]), odd.clone()] {
            assert_eq!(row_cells(p, &obj, NOW).len(), cols.len(), "{p:?} with {obj}");
        }
        let names: Vec<&str> = cols.iter().map(|c| c.name.as_str()).collect();
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "{p:?} duplicate column names");
        let name_cols: Vec<&ColumnDefinition> = cols.iter().filter(|c| c.format == "name").collect();
        assert_eq!(name_cols.len(), 1, "{p:?} has exactly one name column");
        assert_eq!(name_cols[0].name, "Name");
        if !matches!(p, Printer::Event | Printer::EventV1) {
            assert_eq!(cols[0], name_cols[0].clone(), "{p:?} starts with Name");
            assert_eq!(cols[0].priority, 0);
        }
        assert!(cols.iter().all(|c| (c.priority == 0 || c.priority == 1) && !c.description.is_empty()));
        if p != Printer::CreatedAt {
            assert!(names.contains(&"Age") || names.contains(&"Last Seen"), "{p:?} has an age");
        }
    }
}

#[test]
fn table_structure_and_include_object() {
    let pods = vec![
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "namespace": "ns", "labels": {"x": "y"}},
               "spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Succeeded"}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "b", "namespace": "ns"}}),
    ];
    let t = table(Printer::Pod, &pods, NOW, IncludeObject::Metadata, "42", Some("tok"), Some(7));
    assert_eq!(t["kind"], "Table");
    assert_eq!(t["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(t["metadata"], json!({"resourceVersion": "42", "continue": "tok", "remainingItemCount": 7}));
    let col0 = &t["columnDefinitions"][0];
    assert_eq!(col0["name"], "Name");
    assert_eq!(col0["type"], "string");
    assert_eq!(col0["format"], "name");
    assert_eq!(col0["priority"], 0);
    assert!(col0["description"].is_string());
    assert!(col0.get("type_").is_none());
    assert_eq!(t["columnDefinitions"].as_array().unwrap().len(), 9);
    assert_eq!(t["columnDefinitions"][5]["priority"], 1);
    let rows = t["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["cells"][0], "a");
    assert_eq!(rows[0]["cells"].as_array().unwrap().len(), 9);
    assert_eq!(rows[0]["conditions"][0]["reason"], "Succeeded");
    assert!(rows[1].get("conditions").is_none());
    assert_eq!(
        rows[0]["object"],
        json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
               "metadata": {"name": "a", "namespace": "ns", "labels": {"x": "y"}}})
    );

    let t = table(Printer::Pod, &pods, NOW, IncludeObject::Object, "", None, None);
    assert_eq!(t["metadata"], json!({}));
    assert_eq!(t["rows"][1]["object"], pods[1]);
    let t = table(Printer::Pod, &pods, NOW, IncludeObject::None, "1", Some(""), None);
    assert_eq!(t["metadata"], json!({"resourceVersion": "1"}));
    assert!(t["rows"][0].get("object").is_none());
    let t = table(Printer::Deployment, &[], NOW, IncludeObject::default(), "9", None, None);
    assert_eq!(t["rows"], json!([]));
    assert_eq!(partial_object_metadata(&json!({}))["metadata"], json!({}));

    assert_eq!(IncludeObject::from_query(None), Some(IncludeObject::Metadata));
    assert_eq!(IncludeObject::from_query(Some("Object")), Some(IncludeObject::Object));
    assert_eq!(IncludeObject::from_query(Some("None")), Some(IncludeObject::None));
    assert_eq!(IncludeObject::from_query(Some("all")), None);
}

/// Arbitrary JSON built from the field names the printers read, so random
/// trees reach deep into the printing logic.
fn arb_json() -> impl Strategy<Value = Value> {
    let keys = prop::sample::select(vec![
        "metadata", "spec", "status", "name", "containers", "containerStatuses", "initContainers",
        "initContainerStatuses", "state", "waiting", "terminated", "running", "lastState", "reason",
        "restartCount", "ready", "started", "restartPolicy", "phase", "conditions", "type", "ports",
        "port", "nodePort", "selector", "matchLabels", "matchExpressions", "operator", "values",
        "subsets", "addresses", "ip", "labels", "creationTimestamp", "deletionTimestamp", "finishedAt",
        "replicas", "completions", "parallelism", "startTime", "series", "count", "loadBalancer",
        "ingress", "rules", "host", "capacity", "storage", "accessModes", "data", "endpoints",
    ]);
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        prop::sample::select(vec!["", "True", "Always", "In", "Completed", "LoadBalancer", "2026-11-30T07:00:00Z", "x"])
            .prop_map(Value::from),
    ];
    leaf.prop_recursive(5, 64, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(keys.clone(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
        ]
    })
}

proptest! {
    #[test]
    fn table_rows_never_panic_and_match_columns(obj in arb_json(), idx in 0usize..32, now in any::<i64>()) {
        let p = Printer::ALL[idx % Printer::ALL.len()];
        prop_assert_eq!(row_cells(p, &obj, now).len(), columns(p).len());
    }

    #[test]
    fn table_rfc3339_round_trip(unix in -62_135_596_800i64..253_402_300_799) {
        let text = format_rfc3339(unix);
        prop_assert_eq!(parse_rfc3339(&text).map(|t| t.unix), Some(unix));
    }
}
