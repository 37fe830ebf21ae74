//! Encoding of protobuf responses: round trips through the decoder, field
//! values checked on the decoded `k8s_pb` messages, refusals, watch frames.

use std::collections::BTreeMap;

use k8s_pb::api::coordination::v1::Lease;
use k8s_pb::api::core::v1::{ConfigMapList, Namespace};
use k8s_pb::apimachinery::pkg::apis::meta::v1::{Status, WatchEvent};
use keelson_kube_protobuf::{
    decode, decode_envelope, encode, encode_watch_event, is_encodable, EncodeError,
};
use proptest::prelude::*;
use prost::Message;
use serde_json::{json, Value};

fn fixtures() -> Vec<std::path::PathBuf> {
    // The directory cargo names when it runs the test (a build cached from another checkout
    // would name that checkout at compile time).
    let dir = std::env::var_os("CARGO_MANIFEST_DIR").map(std::path::PathBuf::from).unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()).join("tests/fixtures");
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "pb"))
        .collect();
    out.sort();
    out
}

/// The envelope of `body` must name `api_version`/`kind`; returns the raw
/// message bytes.
fn raw_of(body: &[u8], api_version: &str, kind: &str) -> Vec<u8> {
    let env = decode_envelope(body).unwrap();
    assert_eq!(
        (env.api_version.as_str(), env.kind.as_str()),
        (api_version, kind)
    );
    env.raw
}

#[test]
fn fixtures_round_trip_or_are_refused() {
    let mut encoded = 0;
    for path in fixtures() {
        let j = decode(&std::fs::read(&path).unwrap()).unwrap();
        let (av, kind) = (
            j["apiVersion"].as_str().unwrap(),
            j["kind"].as_str().unwrap(),
        );
        match encode(&j) {
            Ok(body) => {
                assert!(is_encodable(av, kind), "{path:?}");
                assert_eq!(decode(&body).unwrap(), j, "{path:?}");
                encoded += 1;
            }
            Err(e) => {
                assert!(!is_encodable(av, kind), "{path:?}: {e}");
                assert!(e.is_unsupported(), "{path:?}: {e}");
                eprintln!("not encoded: {path:?}: {e}");
            }
        }
    }
    assert!(encoded >= 4, "only {encoded} fixtures were encodable");
}

fn full_meta() -> Value {
    json!({
        "name": "web", "namespace": "prod", "uid": "u-1", "resourceVersion": "42",
        "generation": 3, "creationTimestamp": "2024-05-01T10:00:00Z",
        "deletionTimestamp": "2024-05-02T10:00:00Z", "deletionGracePeriodSeconds": 30,
        "labels": {"app": "web"}, "annotations": {"a": ""},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1",
            "uid": "u-0", "controller": true, "blockOwnerDeletion": true}],
        "finalizers": ["example.com/f"],
        "managedFields": [{"manager": "kubectl", "operation": "Update", "apiVersion": "v1",
            "time": "2024-05-01T10:00:00Z", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {"f:k": {}}}}]
    })
}

#[test]
fn config_map_with_full_metadata_round_trips() {
    let j = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": full_meta(),
        "data": {"k": "v", "empty": ""}, "binaryData": {"b": "AAEC"}, "immutable": false});
    assert_eq!(decode(&encode(&j).unwrap()).unwrap(), j);
}

#[test]
fn secret_and_service_account_round_trip() {
    let s = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
        "data": {"p": "c2VjcmV0"}, "type": "Opaque"});
    assert_eq!(decode(&encode(&s).unwrap()).unwrap(), s);
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sa"},
        "secrets": [{"name": "tok"}], "imagePullSecrets": [{"name": "reg"}],
        "automountServiceAccountToken": false});
    assert_eq!(decode(&encode(&sa).unwrap()).unwrap(), sa);
}

#[test]
fn namespace_status_is_encoded() {
    let j = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "dev"},
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Terminating", "conditions": [{"type": "NamespaceDeletionContentFailure",
            "status": "False", "lastTransitionTime": "2024-05-01T10:00:00Z", "reason": "R"}]}});
    let body = encode(&j).unwrap();
    let ns = Namespace::decode(&raw_of(&body, "v1", "Namespace")[..]).unwrap();
    let status = ns.status.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Terminating"));
    let t = status.conditions[0].last_transition_time.unwrap();
    assert_eq!((t.seconds, t.nanos), (Some(1_714_557_600), Some(0)));
    // The spec part still goes through the decoder (which ignores status).
    let mut want = j.clone();
    want.as_object_mut().unwrap().remove("status");
    assert_eq!(decode(&body).unwrap(), want);
}

#[test]
fn lease_micro_time_keeps_fraction() {
    let j = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "node-1", "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": "node-1", "leaseDurationSeconds": 40,
            "renewTime": "2024-05-01T10:00:00.123456Z", "leaseTransitions": 0}});
    let body = encode(&j).unwrap();
    let lease = Lease::decode(&raw_of(&body, "coordination.k8s.io/v1", "Lease")[..]).unwrap();
    let spec = lease.spec.unwrap();
    let renew = spec.renew_time.unwrap();
    assert_eq!(
        (renew.seconds, renew.nanos),
        (Some(1_714_557_600), Some(123_456_000))
    );
    assert_eq!(spec.lease_transitions, Some(0));
    assert_eq!(spec.lease_duration_seconds, Some(40));
    assert_eq!(spec.acquire_time, None);
}

#[test]
fn list_with_continue_token() {
    let item = |n: &str| json!({"metadata": {"name": n, "resourceVersion": "7"}, "data": {"k": n}});
    let mut typed = item("c");
    typed["apiVersion"] = json!("v1");
    typed["kind"] = json!("ConfigMap");
    let j = json!({"apiVersion": "v1", "kind": "ConfigMapList",
        "metadata": {"resourceVersion": "9", "continue": "tok", "remainingItemCount": 5},
        "items": [item("a"), item("b"), typed]});
    let body = encode(&j).unwrap();
    let list = ConfigMapList::decode(&raw_of(&body, "v1", "ConfigMapList")[..]).unwrap();
    let meta = list.metadata.unwrap();
    assert_eq!(meta.r#continue.as_deref(), Some("tok"));
    assert_eq!(meta.remaining_item_count, Some(5));
    let names: Vec<_> = list
        .items
        .iter()
        .map(|i| i.metadata.clone().unwrap().name.unwrap())
        .collect();
    assert_eq!(names, ["a", "b", "c"]);
    assert_eq!(list.items[2].data["k"], "c");
    // An item of another kind is refused.
    let mut bad = j.clone();
    bad["items"][0]["kind"] = json!("Secret");
    assert!(encode(&bad).is_err());
}

#[test]
fn status_404_with_causes() {
    let j = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "pods \"x\" not found", "reason": "NotFound",
        "details": {"name": "x", "kind": "pods", "causes": [{"reason": "FieldValueInvalid",
            "message": "bad", "field": "spec.x"}], "retryAfterSeconds": 0},
        "code": 404});
    let body = encode(&j).unwrap();
    let s = Status::decode(&raw_of(&body, "v1", "Status")[..]).unwrap();
    assert_eq!(s.code, Some(404));
    assert_eq!(s.reason.as_deref(), Some("NotFound"));
    let d = s.details.unwrap();
    assert_eq!(d.retry_after_seconds, Some(0));
    assert_eq!(d.causes[0].field.as_deref(), Some("spec.x"));
    assert!(s.metadata.is_some());
}

#[test]
fn refusals() {
    let nested = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "a"},
        "imagePullSecrets": [{"name": "r"}, {"name": "q", "fooBar": 1}]});
    match encode(&nested) {
        Err(e @ EncodeError::UnsupportedField(_)) => {
            assert!(e.is_unsupported());
            assert!(e.to_string().contains("imagePullSecrets[1].fooBar"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    let top = json!({"apiVersion": "v1", "kind": "ConfigMap", "extra": true});
    assert!(matches!(encode(&top), Err(EncodeError::UnsupportedField(p)) if p == "extra"));
    let wrong = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generation": "3"}});
    match encode(&wrong) {
        Err(e @ EncodeError::WrongType { .. }) => {
            assert!(!e.is_unsupported());
            assert!(e.to_string().contains("metadata.generation"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    let bad_b64 = json!({"apiVersion": "v1", "kind": "Secret", "data": {"k": "!!"}});
    assert!(matches!(
        encode(&bad_b64),
        Err(EncodeError::WrongType { .. })
    ));
    let bad_time = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"creationTimestamp": "yesterday"}});
    assert!(matches!(
        encode(&bad_time),
        Err(EncodeError::WrongType { .. })
    ));
    let unknown = json!({"apiVersion": "example.com/v1", "kind": "Widget"});
    assert!(encode(&unknown).unwrap_err().is_unsupported());
    let limit_range = json!({"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "n"}});
    assert!(encode(&limit_range).unwrap_err().is_unsupported());
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "securityContext": {"privileged": true}}]}});
    match encode(&pod) {
        Err(EncodeError::UnsupportedField(p)) => {
            assert_eq!(p, "spec.containers[0].securityContext")
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        encode(&json!({"kind": "ConfigMap"})),
        Err(EncodeError::MissingTypeMeta)
    ));
}

/// Splits a watch frame: checks the length prefix, returns the event.
fn parse_frame(frame: &[u8]) -> WatchEvent {
    let len = u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
    assert_eq!(len, frame.len() - 4);
    WatchEvent::decode(&frame[4..]).unwrap()
}

#[test]
fn watch_frames() {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "resourceVersion": "5"},
        "data": {"k": "v"}});
    let event = parse_frame(&encode_watch_event("ADDED", &cm).unwrap());
    assert_eq!(event.r#type.as_deref(), Some("ADDED"));
    let raw = event.object.unwrap().raw.unwrap();
    assert_eq!(decode(&raw).unwrap(), cm);

    let bookmark = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"resourceVersion": "12", "annotations": {"k8s.io/initial-events-end": "true"}}});
    let event = parse_frame(&encode_watch_event("BOOKMARK", &bookmark).unwrap());
    assert_eq!(
        decode(&event.object.unwrap().raw.unwrap()).unwrap(),
        bookmark
    );

    let gone = json!({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
        "message": "too old resource version", "reason": "Expired", "code": 410});
    let event = parse_frame(&encode_watch_event("ERROR", &gone).unwrap());
    assert_eq!(event.r#type.as_deref(), Some("ERROR"));
    let raw = event.object.unwrap().raw.unwrap();
    let status = Status::decode(&raw_of(&raw, "v1", "Status")[..]).unwrap();
    assert_eq!(status.code, Some(410));
}

proptest! {
    #[test]
    fn config_maps_round_trip(
        data in proptest::collection::btree_map("[a-z._-]{1,12}", ".{0,20}", 0..6),
        binary in proptest::collection::btree_map("[a-z]{1,8}", proptest::collection::vec(any::<u8>(), 1..16), 0..3),
    ) {
        use base64::Engine as _;
        let binary: BTreeMap<_, _> = binary.into_iter()
            .map(|(k, v)| (k, base64::engine::general_purpose::STANDARD.encode(v))).collect();
        let mut j = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}});
        if !data.is_empty() { j["data"] = json!(data); }
        if !binary.is_empty() { j["binaryData"] = json!(binary); }
        prop_assert_eq!(decode(&encode(&j).unwrap()).unwrap(), j);
    }
}

#[test]
fn service_with_load_balancer_status() {
    use k8s_pb::api::core::v1::Service;
    let spec = json!({"ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": "web"},
            {"port": 443, "targetPort": 8443, "nodePort": 30443}],
        "selector": {"app": "web"}, "clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"],
        "type": "LoadBalancer", "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack"});
    let j = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": spec,
        "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4", "ipMode": "VIP",
            "ports": [{"port": 80, "protocol": "TCP"}]}]},
            "conditions": [{"type": "Ready", "status": "True", "observedGeneration": 1,
                "lastTransitionTime": "2024-05-01T10:00:00Z", "reason": "R", "message": ""}]}});
    let body = encode(&j).unwrap();
    let svc = Service::decode(&raw_of(&body, "v1", "Service")[..]).unwrap();
    let status = svc.status.unwrap();
    let ingress = &status.load_balancer.unwrap().ingress[0];
    assert_eq!(ingress.ip.as_deref(), Some("1.2.3.4"));
    assert_eq!(ingress.ports[0].port, Some(80));
    assert_eq!(status.conditions[0].observed_generation, Some(1));
    let target = svc.spec.unwrap().ports[0].target_port.clone().unwrap();
    assert_eq!(
        (target.r#type, target.str_val.as_deref()),
        (Some(1), Some("web"))
    );
    let mut want = j.clone();
    want.as_object_mut().unwrap().remove("status");
    assert_eq!(decode(&body).unwrap(), want);
}

#[test]
fn events_and_endpoint_slices() {
    use k8s_pb::api::core::v1::Event as CoreEvent;
    use k8s_pb::api::discovery::v1::EndpointSlice;
    use k8s_pb::api::events::v1::Event;
    let core_event = json!({"apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "p.17", "namespace": "default"},
        "involvedObject": {"kind": "Pod", "namespace": "default", "name": "p", "uid": "u",
            "apiVersion": "v1", "resourceVersion": "3", "fieldPath": "spec.containers{c}"},
        "reason": "Pulled", "message": "ok", "source": {"component": "kubelet", "host": "n1"},
        "firstTimestamp": "2024-05-01T10:00:00Z", "lastTimestamp": "2024-05-01T10:00:05Z",
        "count": 2, "type": "Normal", "eventTime": null, "reportingComponent": "kubelet",
        "reportingInstance": "n1"});
    let body = encode(&core_event).unwrap();
    let e = CoreEvent::decode(&raw_of(&body, "v1", "Event")[..]).unwrap();
    assert_eq!(e.count, Some(2));
    assert_eq!(e.last_timestamp.unwrap().seconds, Some(1_714_557_605));
    assert_eq!(e.event_time, None);
    assert_eq!(
        e.involved_object.unwrap().field_path.as_deref(),
        Some("spec.containers{c}")
    );

    let event = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "x"}, "eventTime": "2024-05-01T10:00:00.500000Z",
        "series": {"count": 4, "lastObservedTime": "2024-05-01T10:01:00.000001Z"},
        "reportingController": "c", "reportingInstance": "i", "action": "A", "reason": "R",
        "regarding": {"kind": "Node", "name": "n1"}, "note": "hi", "type": "Warning"});
    let body = encode(&event).unwrap();
    let e = Event::decode(&raw_of(&body, "events.k8s.io/v1", "Event")[..]).unwrap();
    assert_eq!(e.event_time.unwrap().nanos, Some(500_000_000));
    assert_eq!(
        e.series.unwrap().last_observed_time.unwrap().nanos,
        Some(1_000)
    );

    let slice = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web-abc", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.1.0.5"], "conditions": {"ready": true, "serving": true,
            "terminating": false}, "nodeName": "n1", "zone": "z",
            "targetRef": {"kind": "Pod", "name": "web-1", "namespace": "default"},
            "hints": {"forZones": [{"name": "z"}]}}],
        "ports": [{"name": "http", "protocol": "TCP", "port": 8080}]});
    let body = encode(&slice).unwrap();
    let s =
        EndpointSlice::decode(&raw_of(&body, "discovery.k8s.io/v1", "EndpointSlice")[..]).unwrap();
    let ep = &s.endpoints[0];
    assert_eq!(ep.conditions.unwrap().terminating, Some(false));
    assert_eq!(
        ep.hints.clone().unwrap().for_zones[0].name.as_deref(),
        Some("z")
    );
    assert_eq!(s.ports[0].port, Some(8080));
}

#[test]
fn encodable_table_is_consistent() {
    for (av, kind) in keelson_kube_protobuf::encodable_kinds() {
        assert!(is_encodable(av, kind));
        let list =
            json!({"apiVersion": av, "kind": format!("{kind}List"), "metadata": {}, "items": []});
        match kind {
            // Not listable in Kubernetes: no list message exists.
            "TokenRequest" | "SelfSubjectReview" => {
                assert!(encode(&list).unwrap_err().is_unsupported())
            }
            _ => drop(encode(&list).unwrap()),
        }
    }
    assert!(is_encodable("v1", "Status"));
    assert!(!is_encodable("v1", "LimitRange"));
}

fn running_pod(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": "u", "resourceVersion": "11",
            "creationTimestamp": "2024-05-01T10:00:00Z"},
        "spec": {"containers": [
            {"name": "web", "image": "nginx:1.27", "ports": [{"containerPort": 80, "protocol": "TCP"}],
             "env": [{"name": "A", "value": "1"}, {"name": "POD", "valueFrom": {"fieldRef":
                {"apiVersion": "v1", "fieldPath": "metadata.name"}}}],
             "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}, "requests": {"cpu": "100m"}},
             "readinessProbe": {"httpGet": {"path": "/", "port": 80, "scheme": "HTTP"},
                "periodSeconds": 10, "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3},
             "volumeMounts": [{"name": "cfg", "mountPath": "/etc/cfg", "readOnly": true}],
             "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
             "imagePullPolicy": "IfNotPresent"},
            {"name": "side", "image": "busybox", "command": ["sh", "-c", "sleep 1d"],
             "resources": {}, "imagePullPolicy": "Always"}],
            "volumes": [{"name": "cfg", "configMap": {"name": "cfg", "defaultMode": 420}},
                        {"name": "tmp", "emptyDir": {}}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "serviceAccount": "default", "nodeName": "n1",
            "securityContext": {}, "schedulerName": "default-scheduler",
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                "effect": "NoExecute", "tolerationSeconds": 300}],
            "priority": 0, "enableServiceLinks": true, "preemptionPolicy": "PreemptLowerPriority"},
        "status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": null,
                "lastTransitionTime": "2024-05-01T10:00:07Z"}],
            "hostIP": "192.168.1.10", "hostIPs": [{"ip": "192.168.1.10"}],
            "podIP": "10.1.0.5", "podIPs": [{"ip": "10.1.0.5"}], "startTime": "2024-05-01T10:00:00Z",
            "containerStatuses": [
                {"name": "web", "state": {"running": {"startedAt": "2024-05-01T10:00:05Z"}},
                 "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled",
                    "startedAt": "2024-05-01T09:00:00Z", "finishedAt": "2024-05-01T10:00:04Z",
                    "containerID": "containerd://old"}},
                 "ready": true, "restartCount": 1, "image": "nginx:1.27", "imageID": "sha256:x",
                 "containerID": "containerd://new", "started": true},
                {"name": "side", "state": {"waiting": {"reason": "ContainerCreating"}},
                 "lastState": {}, "ready": false, "restartCount": 0, "image": "busybox", "imageID": ""}],
            "qosClass": "Burstable"}})
}

#[test]
fn running_pod_status_is_encoded() {
    use k8s_pb::api::core::v1::Pod;
    let j = running_pod("web-1");
    let body = encode(&j).unwrap();
    let pod = Pod::decode(&raw_of(&body, "v1", "Pod")[..]).unwrap();
    let status = pod.status.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Running"));
    assert_eq!(status.pod_ip.as_deref(), Some("10.1.0.5"));
    assert_eq!(status.pod_ips[0].ip.as_deref(), Some("10.1.0.5"));
    assert_eq!(status.qos_class.as_deref(), Some("Burstable"));
    assert_eq!(
        status.conditions[0].last_transition_time.unwrap().seconds,
        Some(1_714_557_607)
    );
    assert_eq!(status.conditions[0].last_probe_time, None);
    let web = &status.container_statuses[0];
    assert_eq!(web.restart_count, Some(1));
    let last = web.last_state.clone().unwrap().terminated.unwrap();
    assert_eq!(
        (last.exit_code, last.reason.as_deref()),
        (Some(137), Some("OOMKilled"))
    );
    assert!(web.state.clone().unwrap().running.is_some());
    assert_eq!(status.container_statuses[1].restart_count, Some(0));
    let spec = pod.spec.unwrap();
    assert_eq!(
        spec.containers[0].resources.clone().unwrap().limits["cpu"]
            .string
            .as_deref(),
        Some("500m")
    );
    // Everything outside status goes back through the decoder unchanged.
    let mut want = j.clone();
    want.as_object_mut().unwrap().remove("status");
    assert_eq!(decode(&body).unwrap(), want);
}

#[test]
fn pod_list_with_three_items() {
    use k8s_pb::api::core::v1::PodList;
    let mut items: Vec<Value> = ["a", "b", "c"].iter().map(|n| running_pod(n)).collect();
    for item in &mut items[..2] {
        let map = item.as_object_mut().unwrap();
        map.remove("apiVersion");
        map.remove("kind");
    }
    let j = json!({"apiVersion": "v1", "kind": "PodList",
        "metadata": {"resourceVersion": "99", "continue": "eyJ2IjoibWV0YSJ9"}, "items": items});
    let body = encode(&j).unwrap();
    let list = PodList::decode(&raw_of(&body, "v1", "PodList")[..]).unwrap();
    assert_eq!(list.items.len(), 3);
    assert_eq!(
        list.metadata.unwrap().r#continue.as_deref(),
        Some("eyJ2IjoibWV0YSJ9")
    );
    assert_eq!(
        list.items[2].metadata.clone().unwrap().name.as_deref(),
        Some("c")
    );
    assert_eq!(
        list.items[1].status.clone().unwrap().phase.as_deref(),
        Some("Running")
    );
}

#[test]
fn deployment_with_status() {
    use k8s_pb::api::apps::v1::Deployment;
    let template = json!({"metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "web", "image": "nginx", "resources": {}}]}});
    let j = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "generation": 2, "annotations": {"deployment.kubernetes.io/revision": "2"}},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": template,
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": 1}},
            "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600},
        "status": {"observedGeneration": 2, "replicas": 3, "updatedReplicas": 3, "readyReplicas": 2,
            "availableReplicas": 2, "unavailableReplicas": 1,
            "conditions": [{"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable",
                "message": "m", "lastUpdateTime": "2024-05-01T10:00:00Z",
                "lastTransitionTime": "2024-05-01T10:00:01Z"}]}});
    let body = encode(&j).unwrap();
    let d = Deployment::decode(&raw_of(&body, "apps/v1", "Deployment")[..]).unwrap();
    let status = d.status.unwrap();
    assert_eq!(
        (status.ready_replicas, status.unavailable_replicas),
        (Some(2), Some(1))
    );
    assert_eq!(
        status.conditions[0].last_transition_time.unwrap().seconds,
        Some(1_714_557_601)
    );
    let ru = d.spec.unwrap().strategy.unwrap().rolling_update.unwrap();
    assert_eq!(ru.max_unavailable.unwrap().str_val.as_deref(), Some("25%"));
    assert_eq!(ru.max_surge.unwrap().int_val, Some(1));
    let mut want = j.clone();
    want.as_object_mut().unwrap().remove("status");
    assert_eq!(decode(&body).unwrap(), want);
}

#[test]
fn token_request_status_and_pdb_status() {
    use k8s_pb::api::authentication::v1::TokenRequest;
    use k8s_pb::api::policy::v1::PodDisruptionBudget;
    let j = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "metadata": {"name": "default", "namespace": "default", "creationTimestamp": null},
        "spec": {"audiences": ["https://kubernetes.default.svc"], "expirationSeconds": 3600,
            "boundObjectRef": null},
        "status": {"token": "eyJhbGc", "expirationTimestamp": "2024-05-01T11:00:00Z"}});
    let body = encode(&j).unwrap();
    let t = TokenRequest::decode(&raw_of(&body, "authentication.k8s.io/v1", "TokenRequest")[..])
        .unwrap();
    let status = t.status.unwrap();
    assert_eq!(status.token.as_deref(), Some("eyJhbGc"));
    assert_eq!(
        status.expiration_timestamp.unwrap().seconds,
        Some(1_714_561_200)
    );
    assert_eq!(t.spec.unwrap().expiration_seconds, Some(3600));

    let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "p"},
        "spec": {"minAvailable": "50%", "selector": {"matchLabels": {"app": "web"}}},
        "status": {"observedGeneration": 1, "disruptionsAllowed": 0, "currentHealthy": 1,
            "desiredHealthy": 1, "expectedPods": 2, "disruptedPods": {"web-1": "2024-05-01T10:00:00Z"},
            "conditions": [{"type": "DisruptionAllowed", "status": "False", "observedGeneration": 1,
                "lastTransitionTime": "2024-05-01T10:00:00Z", "reason": "InsufficientPods", "message": ""}]}});
    let body = encode(&pdb).unwrap();
    let p = PodDisruptionBudget::decode(&raw_of(&body, "policy/v1", "PodDisruptionBudget")[..])
        .unwrap();
    let status = p.status.unwrap();
    assert_eq!(
        (status.disruptions_allowed, status.expected_pods),
        (Some(0), Some(2))
    );
    assert_eq!(status.disrupted_pods["web-1"].seconds, Some(1_714_557_600));
    let mut want = pdb.clone();
    want.as_object_mut().unwrap().remove("status");
    assert_eq!(decode(&body).unwrap(), want);
}

#[test]
fn far_times_round_trip() {
    for t in [
        "9999-12-31T23:59:59Z",
        "0001-01-01T00:00:01Z",
        "1969-12-31T23:59:59Z",
    ] {
        let j = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "creationTimestamp": t}});
        assert_eq!(decode(&encode(&j).unwrap()).unwrap(), j, "{t}");
    }
}

#[test]
fn stateful_set_and_pvc_status() {
    use k8s_pb::api::apps::v1::StatefulSet;
    use k8s_pb::api::core::v1::PersistentVolumeClaim;
    let claim = json!({"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}}, "volumeMode": "Filesystem"}});
    let j = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "db"}}, "serviceName": "db",
            "template": {"metadata": {"labels": {"app": "db"}},
                "spec": {"containers": [{"name": "db", "image": "postgres", "resources": {}}]}},
            "volumeClaimTemplates": [claim],
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
            "podManagementPolicy": "OrderedReady"},
        "status": {"observedGeneration": 1, "replicas": 2, "readyReplicas": 1, "currentReplicas": 2,
            "updatedReplicas": 2, "currentRevision": "db-1", "updateRevision": "db-1",
            "collisionCount": 0, "availableReplicas": 1}});
    let body = encode(&j).unwrap();
    let s = StatefulSet::decode(&raw_of(&body, "apps/v1", "StatefulSet")[..]).unwrap();
    assert_eq!(s.status.unwrap().available_replicas, Some(1));
    let spec = s.spec.unwrap();
    let req = &spec.volume_claim_templates[0]
        .spec
        .clone()
        .unwrap()
        .resources
        .unwrap()
        .requests;
    assert_eq!(req["storage"].string.as_deref(), Some("1Gi"));
    assert_eq!(
        spec.update_strategy
            .unwrap()
            .rolling_update
            .unwrap()
            .partition,
        Some(0)
    );

    let pvc = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data-db-0"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
            "storageClassName": "standard", "volumeName": "pv-1", "volumeMode": "Filesystem"},
        "status": {"phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}}});
    let body = encode(&pvc).unwrap();
    let p =
        PersistentVolumeClaim::decode(&raw_of(&body, "v1", "PersistentVolumeClaim")[..]).unwrap();
    let status = p.status.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Bound"));
    assert_eq!(status.capacity["storage"].string.as_deref(), Some("1Gi"));
    let mut want = pvc.clone();
    want.as_object_mut().unwrap().remove("status");
    assert_eq!(decode(&body).unwrap(), want);
}

#[test]
fn node_status_is_encoded() {
    use k8s_pb::api::core::v1::Node;
    let j = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
        "spec": {"podCIDR": "10.1.0.0/24", "podCIDRs": ["10.1.0.0/24"],
            "taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]},
        "status": {"capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "allocatable": {"cpu": "3800m", "memory": "15Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "2024-05-01T10:00:00Z",
                "lastTransitionTime": "2024-05-01T09:00:00Z", "reason": "KubeletReady",
                "message": "kubelet is posting ready status"}],
            "addresses": [{"type": "InternalIP", "address": "192.168.1.10"}, {"type": "Hostname", "address": "n1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": "m", "systemUUID": "s", "bootID": "b", "kernelVersion": "6.8",
                "osImage": "Ubuntu", "containerRuntimeVersion": "containerd://1.7", "kubeletVersion": "v1.33.0",
                "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"},
            "images": [{"names": ["nginx:1.27"], "sizeBytes": 7000000}]}});
    let body = encode(&j).unwrap();
    let n = Node::decode(&raw_of(&body, "v1", "Node")[..]).unwrap();
    let status = n.status.unwrap();
    assert_eq!(status.allocatable["cpu"].string.as_deref(), Some("3800m"));
    assert_eq!(
        status.conditions[0].last_heartbeat_time.unwrap().seconds,
        Some(1_714_557_600)
    );
    assert_eq!(status.addresses[1].address.as_deref(), Some("n1"));
    assert_eq!(
        status
            .daemon_endpoints
            .unwrap()
            .kubelet_endpoint
            .unwrap()
            .port,
        Some(10250)
    );
    assert_eq!(
        status.node_info.unwrap().kubelet_version.as_deref(),
        Some("v1.33.0")
    );
    assert_eq!(status.images[0].size_bytes, Some(7_000_000));
    assert_eq!(
        n.spec.unwrap().taints[0].effect.as_deref(),
        Some("NoSchedule")
    );
}
