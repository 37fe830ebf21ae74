//! Strategic merge patch as kubectl sends it, against the built-in schema.

use serde_json::{json, Value};

use super::{apply, builtin_schema, ListStrategy, PatchSchema};

fn patch_kind(api_version: &str, kind: &str, original: Value, patch: Value) -> Value {
    apply(&original, &patch, &builtin_schema(api_version, kind)).expect("patch applies")
}

fn names(list: &Value) -> Vec<&str> {
    list.as_array()
        .expect("a list")
        .iter()
        .map(|c| c["name"].as_str().expect("a name"))
        .collect()
}

fn pod() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "labels": {"app": "web"}, "annotations": {"a": "1"}},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "nginx:1.25",
                    "ports": [{"containerPort": 80, "protocol": "TCP"}],
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                    "args": ["--x", "--y"]
                },
                {"name": "sidecar", "image": "envoy:1"}
            ],
            "tolerations": [{"key": "k1", "operator": "Exists"}]
        }
    })
}

#[test]
fn kubectl_apply_update_merges_containers_by_name() {
    let patch = json!({
        "metadata": {
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
            "labels": {"tier": "front"}
        },
        "spec": {
            "$setElementOrder/containers": [{"name": "main"}],
            "containers": [{"image": "nginx:1.27", "name": "main"}]
        }
    });
    let out = patch_kind("v1", "Pod", pod(), patch);
    let main = &out["spec"]["containers"][0];
    assert_eq!(main["name"], "main");
    assert_eq!(main["image"], "nginx:1.27");
    assert_eq!(
        main["ports"],
        json!([{"containerPort": 80, "protocol": "TCP"}])
    );
    assert_eq!(main["env"][1], json!({"name": "B", "value": "2"}));
    assert_eq!(main["args"], json!(["--x", "--y"]));
    // The sidecar only the server knew about stays.
    assert_eq!(names(&out["spec"]["containers"]), ["main", "sidecar"]);
    assert_eq!(
        out["metadata"]["labels"],
        json!({"app": "web", "tier": "front"})
    );
    assert_eq!(out["metadata"]["annotations"]["a"], "1");
    assert_eq!(
        out["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"],
        "{}"
    );
    assert!(out["spec"].get("$setElementOrder/containers").is_none());
    assert_eq!(out["spec"]["tolerations"], pod()["spec"]["tolerations"]);
}

#[test]
fn env_merges_by_name() {
    let patch = json!({"spec": {"containers": [{
        "name": "main",
        "env": [{"name": "B", "value": "two"}, {"name": "C", "value": "3"}]
    }]}});
    let out = patch_kind("v1", "Pod", pod(), patch);
    assert_eq!(
        out["spec"]["containers"][0]["env"],
        json!([
            {"name": "A", "value": "1"},
            {"name": "B", "value": "two"},
            {"name": "C", "value": "3"}
        ])
    );
}

#[test]
fn env_item_field_deleted_with_null() {
    let mut original = pod();
    original["spec"]["containers"][0]["env"][0] =
        json!({"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}});
    let patch = json!({"spec": {"containers": [{
        "name": "main",
        "env": [{"name": "A", "value": "x", "valueFrom": null}]
    }]}});
    let out = patch_kind("v1", "Pod", original, patch);
    assert_eq!(
        out["spec"]["containers"][0]["env"][0],
        json!({"name": "A", "value": "x"})
    );
}

#[test]
fn patch_delete_removes_container() {
    let patch = json!({"spec": {"containers": [{"$patch": "delete", "name": "sidecar"}]}});
    let out = patch_kind("v1", "Pod", pod(), patch);
    assert_eq!(names(&out["spec"]["containers"]), ["main"]);
    assert_eq!(out["spec"]["containers"][0]["image"], "nginx:1.25");
}

#[test]
fn container_ports_merge_by_container_port() {
    let patch = json!({"spec": {"containers": [{
        "name": "main",
        "ports": [{"containerPort": 80, "name": "http"}, {"containerPort": 443, "name": "https"}]
    }]}});
    let out = patch_kind("v1", "Pod", pod(), patch);
    assert_eq!(
        out["spec"]["containers"][0]["ports"],
        json!([
            {"containerPort": 80, "protocol": "TCP", "name": "http"},
            {"containerPort": 443, "name": "https"}
        ])
    );
}

#[test]
fn new_container_without_order_goes_first() {
    // As in Kubernetes (see the `kubectl patch` task page): without
    // `$setElementOrder`, patch items come first, in patch order, and items
    // only the server had follow.
    let patch = json!({"spec": {"containers": [{"name": "log", "image": "busybox"}]}});
    let out = patch_kind("v1", "Pod", pod(), patch);
    assert_eq!(
        names(&out["spec"]["containers"]),
        ["log", "main", "sidecar"]
    );
    assert_eq!(out["spec"]["containers"][1]["image"], "nginx:1.25");
}

#[test]
fn new_container_with_order_is_appended() {
    let patch = json!({"spec": {
        "$setElementOrder/containers": [{"name": "main"}, {"name": "sidecar"}, {"name": "log"}],
        "containers": [{"name": "log", "image": "busybox"}]
    }});
    let out = patch_kind("v1", "Pod", pod(), patch);
    assert_eq!(
        names(&out["spec"]["containers"]),
        ["main", "sidecar", "log"]
    );
}

#[test]
fn atomic_lists_are_replaced() {
    let patch = json!({"spec": {
        "tolerations": [{"key": "k2", "operator": "Exists"}],
        "containers": [{"name": "main", "args": ["--z"]}]
    }});
    let out = patch_kind("v1", "Pod", pod(), patch);
    assert_eq!(
        out["spec"]["tolerations"],
        json!([{"key": "k2", "operator": "Exists"}])
    );
    assert_eq!(out["spec"]["containers"][0]["args"], json!(["--z"]));
}

#[test]
fn deployment_template_containers_merge() {
    let original = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {"replicas": 1, "template": {
            "metadata": {"labels": {"app": "d"}},
            "spec": {"containers": [{"name": "main", "image": "a:1", "env": [{"name": "X", "value": "1"}]}]}
        }}
    });
    let patch = json!({"spec": {"replicas": 3, "template": {"spec": {"containers": [
        {
            "name": "main",
            "$setElementOrder/env": [{"name": "X"}, {"name": "Y"}],
            "env": [{"name": "Y", "value": "2"}]
        }
    ]}}}});
    let out = patch_kind("apps/v1", "Deployment", original, patch);
    assert_eq!(out["spec"]["replicas"], 3);
    let c = &out["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["image"], "a:1");
    assert_eq!(
        c["env"],
        json!([{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}])
    );
}

#[test]
fn cronjob_nested_template_merges() {
    let original = json!({
        "apiVersion": "batch/v1", "kind": "CronJob",
        "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": {
            "restartPolicy": "OnFailure",
            "containers": [{"name": "job", "image": "busybox:1", "command": ["date"]}],
            "volumes": [{"name": "data", "emptyDir": {}}]
        }}}}}
    });
    let patch = json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {
        "containers": [{"name": "job", "image": "busybox:2"}],
        "volumes": [{"name": "cache", "emptyDir": {}}]
    }}}}}});
    let out = patch_kind("batch/v1", "CronJob", original, patch);
    let spec = &out["spec"]["jobTemplate"]["spec"]["template"]["spec"];
    assert_eq!(
        spec["containers"],
        json!([{"name": "job", "image": "busybox:2", "command": ["date"]}])
    );
    assert_eq!(names(&spec["volumes"]), ["cache", "data"]);
    assert_eq!(spec["restartPolicy"], "OnFailure");
}

#[test]
fn node_cordon_and_taints() {
    let original = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n1"},
        "spec": {"podCIDRs": ["10.0.0.0/24"], "taints": [
            {"key": "a", "effect": "NoSchedule"},
            {"key": "b", "effect": "NoExecute"}
        ]}
    });
    // kubectl cordon
    let out = patch_kind(
        "v1",
        "Node",
        original.clone(),
        json!({"spec": {"unschedulable": true}}),
    );
    assert_eq!(out["spec"]["unschedulable"], true);
    assert_eq!(out["spec"]["taints"], original["spec"]["taints"]);
    // `kubectl taint node n1 a-` sends the remaining taints; Kubernetes gives
    // `spec.taints` no patch strategy, so the list is replaced and `a` is gone.
    let out = patch_kind(
        "v1",
        "Node",
        original,
        json!({"spec": {"taints": [{"key": "b", "effect": "NoExecute"}]}}),
    );
    assert_eq!(
        out["spec"]["taints"],
        json!([{"key": "b", "effect": "NoExecute"}])
    );
}

#[test]
fn node_status_conditions_and_addresses_merge_by_type() {
    let original = json!({"kind": "Node", "status": {
        "conditions": [{"type": "Ready", "status": "True"}, {"type": "DiskPressure", "status": "False"}],
        "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]
    }});
    let patch = json!({"status": {
        "conditions": [{"type": "Ready", "status": "False", "reason": "KubeletDown"}],
        "addresses": [{"type": "Hostname", "address": "n1"}]
    }});
    let out = patch_kind("v1", "Node", original, patch);
    assert_eq!(
        out["status"]["conditions"],
        json!([
            {"type": "Ready", "status": "False", "reason": "KubeletDown"},
            {"type": "DiskPressure", "status": "False"}
        ])
    );
    assert_eq!(out["status"]["addresses"].as_array().map(Vec::len), Some(2));
}

#[test]
fn service_ports_merge_by_port() {
    let original = json!({"kind": "Service", "spec": {"ports": [
        {"port": 80, "targetPort": 8080, "name": "http"}
    ]}});
    let patch = json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}, {"port": 443}]}});
    let out = patch_kind("v1", "Service", original, patch);
    assert_eq!(
        out["spec"]["ports"],
        json!([{"port": 80, "targetPort": 9090, "name": "http"}, {"port": 443}])
    );
}

#[test]
fn owner_references_merge_by_uid() {
    let original = json!({"metadata": {"ownerReferences": [
        {"uid": "u1", "kind": "ReplicaSet", "name": "rs1"}
    ]}});
    let patch = json!({"metadata": {"ownerReferences": [
        {"uid": "u1", "controller": true}, {"uid": "u2", "kind": "Foo", "name": "f"}
    ]}});
    let out = patch_kind("apps/v1", "ReplicaSet", original, patch);
    assert_eq!(
        out["metadata"]["ownerReferences"],
        json!([
            {"uid": "u1", "kind": "ReplicaSet", "name": "rs1", "controller": true},
            {"uid": "u2", "kind": "Foo", "name": "f"}
        ])
    );
}

#[test]
fn finalizers_union_without_duplicates() {
    let original = json!({"metadata": {"finalizers": ["a", "b"]}});
    let patch = json!({"metadata": {"finalizers": ["b", "c", "c"]}});
    let out = patch_kind("v1", "ConfigMap", original, patch);
    assert_eq!(out["metadata"]["finalizers"], json!(["a", "b", "c"]));
}

#[test]
fn unknown_kind_replaces_lists() {
    let original = json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"finalizers": ["a"]},
        "spec": {"containers": [{"name": "main", "image": "x"}], "items": [1, 2]}
    });
    let patch = json!({
        "metadata": {"finalizers": ["b"]},
        "spec": {"containers": [{"name": "other"}], "items": [3]}
    });
    let out = patch_kind("example.com/v1", "Widget", original, patch);
    assert_eq!(out["metadata"]["finalizers"], json!(["b"]));
    assert_eq!(out["spec"]["containers"], json!([{"name": "other"}]));
    assert_eq!(out["spec"]["items"], json!([3]));
}

#[test]
fn builtin_schema_matches_group_and_kind() {
    let deploy = builtin_schema("apps/v1", "Deployment");
    assert_eq!(
        deploy.list_strategy("spec.template.spec.containers"),
        &ListStrategy::MergeByKey("name".into())
    );
    assert_eq!(
        deploy.list_strategy("spec.template.spec.initContainers.volumeMounts"),
        &ListStrategy::MergeByKey("mountPath".into())
    );
    assert_eq!(
        deploy.list_strategy("status.conditions"),
        &ListStrategy::MergeByKey("type".into())
    );
    assert_eq!(
        deploy.list_strategy("metadata.finalizers"),
        &ListStrategy::MergePrimitives
    );
    assert_eq!(
        deploy.list_strategy("spec.template.spec.tolerations"),
        &ListStrategy::Replace
    );
    assert_eq!(
        deploy.list_strategy("spec.containers"),
        &ListStrategy::Replace
    );

    let pod = builtin_schema("v1", "Pod");
    assert_eq!(
        pod.list_strategy("spec.ephemeralContainers.volumeDevices"),
        &ListStrategy::MergeByKey("devicePath".into())
    );
    assert_eq!(
        pod.list_strategy("spec.hostAliases"),
        &ListStrategy::MergeByKey("ip".into())
    );
    assert_eq!(
        pod.list_strategy("spec.topologySpreadConstraints"),
        &ListStrategy::MergeByKey("topologyKey".into())
    );
    assert_eq!(
        pod.list_strategy("spec.containers.envFrom"),
        &ListStrategy::Replace
    );
    assert_eq!(
        pod.list_strategy("spec.containers.resizePolicy"),
        &ListStrategy::Replace
    );

    let cron = builtin_schema("batch/v1", "CronJob");
    assert_eq!(
        cron.list_strategy("spec.jobTemplate.spec.template.spec.containers.env"),
        &ListStrategy::MergeByKey("name".into())
    );
    // A built-in kind name under another group is unknown.
    assert!(builtin_schema("example.com/v1", "Deployment").is_empty());
    assert!(builtin_schema("v1", "Deployment").is_empty());
    assert!(!builtin_schema("v1", "Service").is_empty());
    let slice = builtin_schema("discovery.k8s.io/v1", "EndpointSlice");
    assert_eq!(slice.list_strategy("endpoints"), &ListStrategy::Replace);
    assert_eq!(
        slice.list_strategy("metadata.finalizers"),
        &ListStrategy::MergePrimitives
    );
}

#[test]
fn custom_schema_builder() {
    let schema = PatchSchema::new()
        .merge_by_key("spec.things", "id")
        .merge_primitives("spec.tags")
        .atomic("spec.things");
    assert_eq!(schema.list_strategy("spec.things"), &ListStrategy::Replace);
    assert_eq!(
        schema.list_strategy("spec.tags"),
        &ListStrategy::MergePrimitives
    );
    assert_eq!(schema.lists().count(), 2);
}

#[test]
fn pod_status_patch_from_kubelet() {
    let original = json!({"kind": "Pod", "status": {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "True"}]
    }});
    let patch = json!({"status": {
        "$setElementOrder/conditions": [{"type": "PodScheduled"}, {"type": "Ready"}],
        "conditions": [{"type": "Ready", "status": "True"}],
        "phase": "Running",
        "podIPs": [{"ip": "10.1.0.5"}]
    }});
    let out = patch_kind("v1", "Pod", original, patch);
    assert_eq!(
        out["status"],
        json!({
            "phase": "Running",
            "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}],
            "podIPs": [{"ip": "10.1.0.5"}]
        })
    );
}
