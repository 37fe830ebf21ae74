use super::*;
use crate::types::ResourceAttributes;
use serde_json::json;

fn attrs(verb: &str, group: &str, resource: &str) -> ResourceAttributes {
    ResourceAttributes::new(verb, group, resource)
}

fn pod(node: &str) -> Value {
    json!({"metadata": {"name": "p", "namespace": "default", "uid": "pod-uid", "labels": {"app": "x"}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]}})
}

fn mirror_pod(node: &str) -> Value {
    json!({
        "metadata": {"name": "static-web-n1", "namespace": "kube-system",
            "annotations": {"kubernetes.io/config.mirror": "hash"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node,
                "uid": "node-uid", "controller": true}]},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]}
    })
}

fn check(
    node: &str,
    a: ResourceAttributes,
    cur: Option<&Value>,
    new: Option<&Value>,
) -> Result<(), String> {
    node_restriction(node, &a.into(), cur, new)
}

#[test]
fn node_identity() {
    assert_eq!(node_name(&UserInfo::node("n1")), Some("n1"));
    // The name prefix alone is not enough: the group is required.
    assert_eq!(node_name(&UserInfo::new("system:node:n1")), None);
    assert_eq!(
        node_name(&UserInfo::new("alice").with_groups(["system:nodes"])),
        None
    );
    let nameless = UserInfo::new("system:node:").with_groups(["system:nodes"]);
    assert_eq!(node_name(&nameless), Some(""));
    let err = check("", attrs("update", "", "nodes").named("n1"), None, None).unwrap_err();
    assert_eq!(err, r#"could not determine node from user "system:node:""#);
}

#[test]
fn reads_and_unrelated_resources_are_not_restricted() {
    assert!(check("n1", attrs("get", "", "nodes").named("n2"), None, None).is_ok());
    assert!(check("n1", attrs("list", "", "pods"), None, None).is_ok());
    assert!(check(
        "n1",
        attrs("create", "", "events").in_namespace("d"),
        None,
        None
    )
    .is_ok());
    assert!(node_restriction(
        "n1",
        &Attributes::non_resource("get", "/healthz"),
        None,
        None
    )
    .is_ok());
}

#[test]
fn only_own_node_object() {
    let own = json!({"metadata": {"name": "n1"}});
    let other = json!({"metadata": {"name": "n2"}});
    assert!(check("n1", attrs("create", "", "nodes"), None, Some(&own)).is_ok());
    assert_eq!(
        check("n1", attrs("create", "", "nodes"), None, Some(&other)).unwrap_err(),
        r#"node "n1" is not allowed to modify node "n2""#
    );
    assert_eq!(
        check(
            "n1",
            attrs("patch", "", "nodes").named("n2"),
            Some(&other),
            Some(&other)
        )
        .unwrap_err(),
        r#"node "n1" is not allowed to modify node "n2""#
    );
    assert!(check(
        "n1",
        attrs("delete", "", "nodes").named("n2"),
        Some(&other),
        None
    )
    .is_err());
    assert!(check(
        "n1",
        attrs("delete", "", "nodes").named("n1"),
        Some(&own),
        None
    )
    .is_ok());
    let st = attrs("update", "", "nodes")
        .named("n1")
        .with_subresource("status");
    assert!(check("n1", st, Some(&own), Some(&own)).is_ok());
    let st = attrs("update", "", "nodes")
        .named("n2")
        .with_subresource("status");
    assert!(check("n1", st, Some(&other), Some(&other)).is_err());
}

#[test]
fn node_labels_taints_and_config_source() {
    let with = |labels: Value, taints: Value| json!({"metadata": {"name": "n1", "labels": labels}, "spec": {"taints": taints}});
    let base = with(
        json!({"kubernetes.io/hostname": "n1", "team": "a"}),
        json!(null),
    );
    let create = attrs("create", "", "nodes");
    assert!(check("n1", create.clone(), None, Some(&base)).is_ok());
    let bad = with(
        json!({"node-restriction.kubernetes.io/dedicated": "x", "node-role.kubernetes.io/master": "", "node.kubernetes.io/pool": "p"}),
        json!(null),
    );
    assert_eq!(
        check("n1", create, None, Some(&bad)).unwrap_err(),
        r#"node "n1" is not allowed to set the following labels: node-restriction.kubernetes.io/dedicated, node-role.kubernetes.io/master"#
    );
    let upd = attrs("patch", "", "nodes").named("n1");
    let relabeled = with(
        json!({"kubernetes.io/hostname": "n1", "team": "b", "topology.kubernetes.io/zone": "z"}),
        json!([]),
    );
    assert!(check("n1", upd.clone(), Some(&base), Some(&relabeled)).is_ok());
    let escalated = with(
        json!({"kubernetes.io/hostname": "n1", "team": "a", "sub.k8s.io/x": "1"}),
        json!(null),
    );
    assert_eq!(
        check("n1", upd.clone(), Some(&base), Some(&escalated)).unwrap_err(),
        "is not allowed to modify labels: sub.k8s.io/x"
    );
    // Removing a restricted label is a modification too.
    let restricted = with(
        json!({"node-restriction.kubernetes.io/a": "1"}),
        json!(null),
    );
    let removed = with(json!({}), json!(null));
    assert!(check("n1", upd.clone(), Some(&restricted), Some(&removed)).is_err());
    let tainted = with(
        json!({"kubernetes.io/hostname": "n1", "team": "a"}),
        json!([{"key": "k", "effect": "NoSchedule"}]),
    );
    assert_eq!(
        check("n1", upd.clone(), Some(&tainted), Some(&base)).unwrap_err(),
        r#"node "n1" is not allowed to modify taints"#
    );
    let cfg = json!({"metadata": {"name": "n1"}, "spec": {"configSource": {"configMap": {}}}});
    assert!(check("n1", upd, Some(&base), Some(&cfg)).is_err());
    assert!(check("n1", attrs("create", "", "nodes"), None, Some(&cfg)).is_err());
}

#[test]
fn mirror_pod_creation() {
    let create = attrs("create", "", "pods").in_namespace("kube-system");
    let node_obj = json!({"metadata": {"name": "n1", "uid": "node-uid"}});
    assert!(check(
        "n1",
        create.clone(),
        Some(&node_obj),
        Some(&mirror_pod("n1"))
    )
    .is_ok());
    assert!(check("n1", create.clone(), None, Some(&mirror_pod("n1"))).is_ok());
    let wrong_uid = json!({"metadata": {"name": "n1", "uid": "other"}});
    assert!(check(
        "n1",
        create.clone(),
        Some(&wrong_uid),
        Some(&mirror_pod("n1"))
    )
    .is_err());
    assert_eq!(
        check("n1", create.clone(), None, Some(&pod("n1"))).unwrap_err(),
        r#"pod does not have "kubernetes.io/config.mirror" annotation, node "n1" can only create mirror pods"#
    );
    let mut elsewhere = mirror_pod("n1");
    elsewhere["spec"]["nodeName"] = json!("n2");
    assert_eq!(
        check("n1", create.clone(), None, Some(&elsewhere)).unwrap_err(),
        r#"node "n1" can only create pods with spec.nodeName set to itself"#
    );
    let mut unowned = mirror_pod("n1");
    unowned["metadata"]["ownerReferences"] = json!([]);
    assert!(check("n1", create.clone(), None, Some(&unowned)).is_err());
    let mut not_controller = mirror_pod("n1");
    not_controller["metadata"]["ownerReferences"][0]["controller"] = json!(false);
    assert!(check("n1", create.clone(), None, Some(&not_controller)).is_err());
    for (field, value, what) in [
        ("serviceAccountName", json!("default"), "a service account"),
        ("imagePullSecrets", json!([{"name": "reg"}]), "secrets"),
        (
            "volumes",
            json!([{"name": "v", "secret": {"secretName": "s"}}]),
            "secrets",
        ),
        (
            "volumes",
            json!([{"name": "v", "configMap": {"name": "c"}}]),
            "configmaps",
        ),
        (
            "volumes",
            json!([{"name": "v", "persistentVolumeClaim": {"claimName": "c"}}]),
            "persistentvolumeclaims",
        ),
        (
            "volumes",
            json!([{"name": "v", "projected": {"sources": [{"clusterTrustBundle": {"name": "b"}}]}}]),
            "clustertrustbundles",
        ),
        (
            "volumes",
            json!([{"name": "v", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "s"}}}]),
            "secrets",
        ),
        (
            "containers",
            json!([{"name": "c", "env": [{"name": "E", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]}]),
            "configmaps",
        ),
        (
            "containers",
            json!([{"name": "c", "envFrom": [{"secretRef": {"name": "s"}}]}]),
            "secrets",
        ),
    ] {
        let mut p = mirror_pod("n1");
        p["spec"][field] = value;
        let err = check("n1", create.clone(), None, Some(&p)).unwrap_err();
        assert!(
            err.ends_with(&format!("reference {what}")),
            "{field}: {err}"
        );
    }
    let mut ok = mirror_pod("n1");
    ok["spec"]["volumes"] =
        json!([{"name": "v", "hostPath": {"path": "/etc"}}, {"name": "e", "emptyDir": {}}]);
    assert!(check("n1", create, None, Some(&ok)).is_ok());
}

#[test]
fn pod_delete_update_and_status() {
    let del = attrs("delete", "", "pods")
        .in_namespace("default")
        .named("p");
    assert!(check("n1", del.clone(), Some(&pod("n1")), None).is_ok());
    assert_eq!(
        check("n1", del.clone(), Some(&pod("n2")), None).unwrap_err(),
        r#"node "n1" can only delete pods with spec.nodeName set to itself"#
    );
    assert!(check("n1", del, None, None).is_err());
    let upd = attrs("update", "", "pods")
        .in_namespace("default")
        .named("p");
    assert_eq!(
        check("n1", upd, Some(&pod("n1")), Some(&pod("n1"))).unwrap_err(),
        r#"unexpected operation "UPDATE", node "n1" can only create and delete mirror pods"#
    );

    let st = attrs("patch", "", "pods")
        .in_namespace("default")
        .named("p")
        .with_subresource("status");
    let mut running = pod("n1");
    running["status"] = json!({"phase": "Running"});
    assert!(check("n1", st.clone(), Some(&pod("n1")), Some(&running)).is_ok());
    assert_eq!(
        check("n1", st.clone(), Some(&pod("n2")), Some(&pod("n2"))).unwrap_err(),
        r#"node "n1" can only update pod status for pods with spec.nodeName set to itself"#
    );
    let mut relabeled = pod("n1");
    relabeled["metadata"]["labels"]["app"] = json!("y");
    assert_eq!(
        check("n1", st.clone(), Some(&pod("n1")), Some(&relabeled)).unwrap_err(),
        r#"node "n1" cannot update labels through pod status"#
    );
    assert!(check("n1", st.clone(), Some(&pod("n1")), Some(&pod("n2"))).is_err());
    let mut claims = pod("n1");
    claims["status"] = json!({"resourceClaimStatuses": [{"name": "c", "resourceClaimName": "x"}]});
    assert!(check("n1", st, Some(&pod("n1")), Some(&claims)).is_err());
}

#[test]
fn pod_subresources() {
    let ev = attrs("create", "", "pods")
        .in_namespace("default")
        .named("p")
        .with_subresource("eviction");
    assert!(check("n1", ev.clone(), Some(&pod("n1")), None).is_ok());
    assert_eq!(
        check("n1", ev.clone(), Some(&pod("n2")), None).unwrap_err(),
        "node n1 can only evict pods with spec.nodeName set to itself"
    );
    assert!(check("n1", ev, None, None).is_err());
    let binding = attrs("create", "", "pods")
        .in_namespace("d")
        .named("p")
        .with_subresource("binding");
    assert_eq!(
        check("n1", binding, None, None).unwrap_err(),
        r#"unexpected pod subresource "binding", only 'status' and 'eviction' are allowed"#
    );
    let exec = attrs("create", "", "pods")
        .in_namespace("d")
        .named("p")
        .with_subresource("exec");
    assert!(check("n1", exec, None, None).is_ok());
    let proxy = attrs("delete", "", "pods")
        .in_namespace("d")
        .named("p")
        .with_subresource("proxy");
    assert!(check("n1", proxy, None, None).is_ok());
    let node_proxy = attrs("update", "", "nodes")
        .named("n2")
        .with_subresource("proxy");
    assert!(check("n1", node_proxy, None, None).is_ok());
}

#[test]
fn leases_and_csinodes() {
    let lease = |ns: &str, name: &str| {
        attrs("update", "coordination.k8s.io", "leases")
            .in_namespace(ns)
            .named(name)
    };
    assert!(check("n1", lease("kube-node-lease", "n1"), None, None).is_ok());
    assert_eq!(
        check("n1", lease("kube-node-lease", "n2"), None, None).unwrap_err(),
        "can only access node lease with the same name as the requesting node"
    );
    assert_eq!(
        check("n1", lease("kube-system", "n1"), None, None).unwrap_err(),
        r#"can only access leases in the "kube-node-lease" system namespace"#
    );
    let create = attrs("create", "coordination.k8s.io", "leases").in_namespace("kube-node-lease");
    assert!(check(
        "n1",
        create.clone(),
        None,
        Some(&json!({"metadata": {"name": "n1"}}))
    )
    .is_ok());
    assert!(check(
        "n1",
        create,
        None,
        Some(&json!({"metadata": {"name": "n2"}}))
    )
    .is_err());
    assert!(check(
        "n1",
        attrs("get", "coordination.k8s.io", "leases")
            .in_namespace("x")
            .named("n2"),
        None,
        None
    )
    .is_ok());
    assert!(check(
        "n1",
        attrs("delete", "storage.k8s.io", "csinodes").named("n2"),
        None,
        None
    )
    .is_err());
    assert!(check(
        "n1",
        attrs("patch", "storage.k8s.io", "csinodes").named("n1"),
        None,
        None
    )
    .is_ok());
}

#[test]
fn pvcs_only_status() {
    let pvc = json!({"metadata": {"name": "c", "resourceVersion": "1"}, "spec": {"resources": {}}, "status": {"phase": "Bound"}});
    let mut resized = pvc.clone();
    resized["metadata"]["resourceVersion"] = json!("2");
    resized["status"]["capacity"] = json!({"storage": "2Gi"});
    let st = attrs("update", "", "persistentvolumeclaims")
        .in_namespace("d")
        .named("c")
        .with_subresource("status");
    assert!(check("n1", st.clone(), Some(&pvc), Some(&resized)).is_ok());
    let mut phase = pvc.clone();
    phase["status"]["phase"] = json!("Lost");
    let err = check("n1", st, Some(&pvc), Some(&phase)).unwrap_err();
    assert!(err.ends_with("status.phase"), "{err}");
    let plain = attrs("update", "", "persistentvolumeclaims")
        .in_namespace("d")
        .named("c");
    assert_eq!(
        check("n1", plain, Some(&pvc), Some(&pvc)).unwrap_err(),
        "may only update PVC status"
    );
}

#[test]
fn token_requests_bound_to_own_pods() {
    let tok = attrs("create", "", "serviceaccounts")
        .in_namespace("default")
        .named("sa")
        .with_subresource("token");
    let req = |uid: &str| json!({"spec": {"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": uid}}});
    assert!(check("n1", tok.clone(), Some(&pod("n1")), Some(&req("pod-uid"))).is_ok());
    assert_eq!(
        check("n1", tok.clone(), Some(&pod("n2")), Some(&req("pod-uid"))).unwrap_err(),
        "node requested token bound to a pod scheduled on a different node"
    );
    assert!(
        check("n1", tok.clone(), Some(&pod("n1")), Some(&req("stale")))
            .unwrap_err()
            .contains("does not match")
    );
    assert_eq!(
        check(
            "n1",
            tok.clone(),
            Some(&pod("n1")),
            Some(&json!({"spec": {}}))
        )
        .unwrap_err(),
        "node requested token not bound to a pod"
    );
    assert!(check("n1", tok.clone(), Some(&pod("n1")), Some(&req(""))).is_err());
    assert!(check("n1", tok, None, Some(&req("pod-uid"))).is_err());
    // Other service-account writes are left to RBAC.
    assert!(check(
        "n1",
        attrs("update", "", "serviceaccounts")
            .in_namespace("d")
            .named("sa"),
        None,
        None
    )
    .is_ok());
}
