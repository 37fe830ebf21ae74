use super::*;
use crate::types::ResourceAttributes;
use proptest::prelude::*;
use serde_json::json;

fn cluster_role(name: &str, labels: Value, rules: Value) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name, "labels": labels}, "rules": rules})
}

fn role(ns: &str, name: &str, rules: Value) -> Value {
    json!({"kind": "Role", "metadata": {"name": name, "namespace": ns}, "rules": rules})
}

fn rb(ns: &str, name: &str, kind: &str, role: &str, subjects: Value) -> Value {
    json!({"kind": "RoleBinding", "metadata": {"name": name, "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
        "subjects": subjects})
}

fn crb(name: &str, role: &str, subjects: Value) -> Value {
    json!({"kind": "ClusterRoleBinding", "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": subjects})
}

fn pod_reader() -> Value {
    cluster_role(
        "pod-reader",
        json!({}),
        json!([{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}]),
    )
}

fn get_pods(ns: Option<&str>) -> Attributes {
    let mut a = ResourceAttributes::new("list", "", "pods");
    a.namespace = ns.map(str::to_string);
    a.into()
}

#[test]
fn empty_snapshot_denies_with_empty_reason() {
    let s = RbacSnapshot::new();
    assert_eq!(
        s.authorize(&UserInfo::new("alice"), &get_pods(Some("default"))),
        Decision::Deny {
            reason: String::new()
        }
    );
}

#[test]
fn system_masters_always_allowed() {
    let s = RbacSnapshot::new();
    let root = UserInfo::new("root").with_groups(["system:masters"]);
    assert!(s
        .authorize(&root, &Attributes::resource("delete", "", "nodes"))
        .is_allowed());
    assert!(s
        .authorize(&root, &Attributes::non_resource("post", "/anything"))
        .is_allowed());
    let (res, non) = s.rules_for(&root, Some("default"));
    assert_eq!(res[0].verbs, vec!["*"]);
    assert_eq!(non[0].non_resource_urls, vec!["*"]);
}

#[test]
fn role_binding_to_cluster_role_is_namespace_scoped() {
    let s = RbacSnapshot::from_objects(
        &[],
        &[pod_reader()],
        &[rb(
            "team-a",
            "readers",
            "ClusterRole",
            "pod-reader",
            json!([{"kind": "User", "name": "alice"}]),
        )],
        &[],
    );
    let alice = UserInfo::new("alice");
    let d = s.authorize(&alice, &get_pods(Some("team-a")));
    assert_eq!(
        d,
        Decision::Allow {
            reason: r#"RBAC: allowed by RoleBinding "readers/team-a" of ClusterRole "pod-reader" to User "alice""#.into()
        }
    );
    assert!(!s.authorize(&alice, &get_pods(Some("team-b"))).is_allowed());
    // All-namespaces list is cluster scope: a RoleBinding never grants it.
    assert!(!s.authorize(&alice, &get_pods(None)).is_allowed());
    assert!(!s
        .authorize(&UserInfo::new("bob"), &get_pods(Some("team-a")))
        .is_allowed());
}

#[test]
fn cluster_role_binding_grants_everywhere() {
    let s = RbacSnapshot::from_objects(
        &[],
        &[pod_reader()],
        &[],
        &[crb(
            "readers",
            "pod-reader",
            json!([{"kind": "Group", "name": "devs", "apiGroup": "rbac.authorization.k8s.io"}]),
        )],
    );
    let dev = UserInfo::new("carol").with_groups(["devs"]);
    for ns in [Some("a"), Some("b"), None] {
        let d = s.authorize(&dev, &get_pods(ns));
        assert_eq!(
            d.reason(),
            r#"RBAC: allowed by ClusterRoleBinding "readers" of ClusterRole "pod-reader" to Group "devs""#
        );
    }
    assert!(!s
        .authorize(&dev, &Attributes::resource("delete", "", "pods"))
        .is_allowed());
}

#[test]
fn namespaced_role_only_in_its_namespace() {
    let s = RbacSnapshot::from_objects(
        &[role(
            "a",
            "r",
            json!([{"verbs": ["*"], "apiGroups": [""], "resources": ["configmaps"]}]),
        )],
        &[],
        &[
            rb(
                "a",
                "b",
                "Role",
                "r",
                json!([{"kind": "User", "name": "u"}]),
            ),
            // Same role name referenced from another namespace: no Role "r" there.
            rb(
                "b",
                "b",
                "Role",
                "r",
                json!([{"kind": "User", "name": "u"}]),
            ),
        ],
        &[],
    );
    let u = UserInfo::new("u");
    let cm = |ns: &str| -> Attributes {
        ResourceAttributes::new("create", "", "configmaps")
            .in_namespace(ns)
            .into()
    };
    assert!(s.authorize(&u, &cm("a")).is_allowed());
    assert_eq!(
        s.authorize(&u, &cm("b")),
        Decision::Deny {
            reason: r#"RBAC: role.rbac.authorization.k8s.io "r" not found"#.into()
        }
    );
}

#[test]
fn service_account_subjects() {
    let s = RbacSnapshot::from_objects(
        &[],
        &[pod_reader()],
        &[
            rb(
                "ci",
                "local",
                "ClusterRole",
                "pod-reader",
                json!([{"kind": "ServiceAccount", "name": "builder"}]),
            ),
            rb(
                "prod",
                "cross",
                "ClusterRole",
                "pod-reader",
                json!([{"kind": "ServiceAccount", "name": "builder", "namespace": "ci"}]),
            ),
            rb(
                "qa",
                "group",
                "ClusterRole",
                "pod-reader",
                json!([{"kind": "Group", "name": "system:serviceaccounts:ci"}]),
            ),
        ],
        &[crb(
            "no-ns",
            "pod-reader",
            json!([{"kind": "ServiceAccount", "name": "builder"}]),
        )],
    );
    let sa = UserInfo::service_account("ci", "builder");
    assert_eq!(
        s.authorize(&sa, &get_pods(Some("ci"))).reason(),
        r#"RBAC: allowed by RoleBinding "local/ci" of ClusterRole "pod-reader" to ServiceAccount "builder/ci""#
    );
    assert!(s.authorize(&sa, &get_pods(Some("prod"))).is_allowed());
    assert!(s.authorize(&sa, &get_pods(Some("qa"))).is_allowed());
    // The namespace-less SA subject of a ClusterRoleBinding matches nobody.
    assert!(!s.authorize(&sa, &get_pods(Some("other"))).is_allowed());
    let other_sa = UserInfo::service_account("dev", "builder");
    assert!(!s.authorize(&other_sa, &get_pods(Some("ci"))).is_allowed());
    assert!(!s.authorize(&other_sa, &get_pods(Some("prod"))).is_allowed());
}

#[test]
fn aggregation_adds_labeled_roles_at_evaluation_time() {
    let view = json!({"kind": "ClusterRole", "metadata": {"name": "view"},
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"agg": "view"}}]},
        // Stored rules of an aggregated role are ignored.
        "rules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]});
    let mut s = RbacSnapshot::from_objects(
        &[],
        &[
            view,
            cluster_role(
                "src",
                json!({"agg": "view"}),
                json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]),
            ),
        ],
        &[rb(
            "d",
            "v",
            "ClusterRole",
            "view",
            json!([{"kind": "User", "name": "u"}]),
        )],
        &[],
    );
    let u = UserInfo::new("u");
    let get = |res: &str, grp: &str| -> Attributes {
        ResourceAttributes::new("get", grp, res)
            .in_namespace("d")
            .named("x")
            .into()
    };
    assert!(s.authorize(&u, &get("pods", "")).is_allowed());
    assert!(!s.authorize(&u, &get("widgets", "example.com")).is_allowed());
    assert!(!s
        .authorize(
            &u,
            &Attributes::from(
                ResourceAttributes::new("delete", "", "pods")
                    .in_namespace("d")
                    .named("x")
            )
        )
        .is_allowed());

    let widgets = cluster_role(
        "widget-viewer",
        json!({"agg": "view"}),
        json!([{"verbs": ["get"], "apiGroups": ["example.com"], "resources": ["widgets"]}]),
    );
    s.upsert(RbacKind::ClusterRole, &widgets).unwrap();
    assert!(s.authorize(&u, &get("widgets", "example.com")).is_allowed());
    assert!(s.remove(RbacKind::ClusterRole, None, "widget-viewer"));
    assert!(!s.authorize(&u, &get("widgets", "example.com")).is_allowed());
}

#[test]
fn aggregation_is_transitive_deduplicated_and_cycle_safe() {
    let agg = |name: &str, labels: Value, select: &str| {
        json!({"kind": "ClusterRole", "metadata": {"name": name, "labels": labels},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {select: "true"}}]}})
    };
    let r = json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]);
    let s = RbacSnapshot::from_objects(
        &[],
        &[
            agg("top", json!({"to-mid": "true"}), "to-top"),
            agg("mid", json!({"to-top": "true"}), "to-mid"),
            cluster_role("leaf1", json!({"to-mid": "true"}), r.clone()),
            cluster_role("leaf2", json!({"to-top": "true"}), r.clone()),
            cluster_role(
                "leaf3",
                json!({"to-mid": "true"}),
                json!([{"verbs": ["list"], "apiGroups": [""], "resources": ["pods"]}]),
            ),
        ],
        &[],
        &[],
    );
    let top = s.effective_cluster_role_rules("top").unwrap();
    // top <- {mid, leaf2}; mid <- {top (cycle), leaf1, leaf3}; duplicates merged.
    assert_eq!(top.len(), 2);
    assert_eq!(s.effective_cluster_role_rules("mid").unwrap().len(), 2);
    assert!(s.effective_cluster_role_rules("nope").is_none());
}

#[test]
fn match_expressions_in_aggregation() {
    let agg = json!({"kind": "ClusterRole", "metadata": {"name": "a"},
        "aggregationRule": {"clusterRoleSelectors": [{"matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["x", "y"]},
            {"key": "legacy", "operator": "DoesNotExist"}]}]}});
    let r = |verb: &str| json!([{"verbs": [verb], "apiGroups": [""], "resources": ["pods"]}]);
    let s = RbacSnapshot::from_objects(
        &[],
        &[
            agg,
            cluster_role("x", json!({"tier": "x"}), r("get")),
            cluster_role("y", json!({"tier": "y", "legacy": "1"}), r("list")),
            cluster_role("z", json!({"tier": "z"}), r("watch")),
        ],
        &[],
        &[],
    );
    let verbs: Vec<String> = s
        .effective_cluster_role_rules("a")
        .unwrap()
        .iter()
        .flat_map(|r| r.verbs.clone())
        .collect();
    assert_eq!(verbs, vec!["get"]);
}

#[test]
fn missing_cluster_role_is_reported_in_reason() {
    let s = RbacSnapshot::from_objects(
        &[],
        &[],
        &[
            rb(
                "d",
                "b1",
                "ClusterRole",
                "gone",
                json!([{"kind": "User", "name": "u"}]),
            ),
            rb(
                "d",
                "b2",
                "ClusterRole",
                "gone",
                json!([{"kind": "User", "name": "u"}]),
            ),
            rb(
                "d",
                "b3",
                "Role",
                "gone",
                json!([{"kind": "User", "name": "u"}]),
            ),
            rb(
                "d",
                "b4",
                "Role",
                "gone",
                json!([{"kind": "User", "name": "someone-else"}]),
            ),
        ],
        &[],
    );
    assert_eq!(
        s.authorize(&UserInfo::new("u"), &get_pods(Some("d"))),
        Decision::Deny {
            reason: r#"RBAC: [clusterrole.rbac.authorization.k8s.io "gone" not found, role.rbac.authorization.k8s.io "gone" not found]"#.into()
        }
    );
    let review = s.rules_review(&UserInfo::new("u"), Some("d"));
    assert!(review.incomplete);
    assert!(review.evaluation_error.unwrap().contains("not found"));
    // Unrelated users see no errors.
    assert_eq!(
        s.authorize(&UserInfo::new("v"), &get_pods(Some("d")))
            .reason(),
        ""
    );
}

#[test]
fn malformed_objects_are_skipped_with_warnings() {
    let mut s = RbacSnapshot::from_objects(
        &[json!({"kind": "Role", "metadata": {"name": "no-ns"}})],
        &[
            pod_reader(),
            json!({"metadata": {"name": "bad"}, "rules": "nope"}),
        ],
        &[],
        &[json!({"metadata": {"name": "b"}, "roleRef": {"kind": "ClusterRole"}})],
    );
    assert_eq!(s.count(RbacKind::ClusterRole), 1);
    assert_eq!(s.count(RbacKind::Role), 0);
    let w = s.warnings();
    assert_eq!(w.len(), 3, "{w:?}");
    assert!(
        w.iter()
            .any(|w| w.starts_with("ignored ClusterRole bad: field rules")),
        "{w:?}"
    );
    // Fixing an object clears its warning.
    s.upsert(
        RbacKind::ClusterRole,
        &cluster_role("bad", json!({}), json!([])),
    )
    .unwrap();
    assert_eq!(s.warnings().len(), 2);
    // Removing a never-stored object clears its warning too.
    assert!(!s.remove(RbacKind::ClusterRoleBinding, None, "b"));
    assert_eq!(s.warnings().len(), 1);
}

#[test]
fn malformed_update_removes_previous_grant() {
    let binding = rb(
        "d",
        "b",
        "ClusterRole",
        "pod-reader",
        json!([{"kind": "User", "name": "u"}]),
    );
    let mut s = RbacSnapshot::from_objects(&[], &[pod_reader()], &[binding], &[]);
    let u = UserInfo::new("u");
    assert!(s.authorize(&u, &get_pods(Some("d"))).is_allowed());
    let broken =
        json!({"kind": "RoleBinding", "metadata": {"name": "b", "namespace": "d"}, "roleRef": 7});
    let err = s.upsert(RbacKind::RoleBinding, &broken).unwrap_err();
    assert!(
        matches!(err, SnapshotError::Malformed { kind: RbacKind::RoleBinding, ref key, .. } if key == "d/b")
    );
    assert!(!s.authorize(&u, &get_pods(Some("d"))).is_allowed());
    assert_eq!(s.count(RbacKind::RoleBinding), 0);
    // Wrong kind for the slot is malformed too.
    assert!(s.upsert(RbacKind::Role, &pod_reader()).is_err());
}

#[test]
fn upsert_replaces_and_remove_deletes() {
    let mut s = RbacSnapshot::new();
    let u = UserInfo::new("u");
    s.upsert(RbacKind::ClusterRole, &pod_reader()).unwrap();
    s.upsert(
        RbacKind::RoleBinding,
        &rb(
            "d",
            "b",
            "ClusterRole",
            "pod-reader",
            json!([{"kind": "User", "name": "u"}]),
        ),
    )
    .unwrap();
    assert!(s.authorize(&u, &get_pods(Some("d"))).is_allowed());
    s.upsert(
        RbacKind::RoleBinding,
        &rb(
            "d",
            "b",
            "ClusterRole",
            "pod-reader",
            json!([{"kind": "User", "name": "w"}]),
        ),
    )
    .unwrap();
    assert!(!s.authorize(&u, &get_pods(Some("d"))).is_allowed());
    assert!(s.remove(RbacKind::RoleBinding, Some("d"), "b"));
    assert!(!s.remove(RbacKind::RoleBinding, Some("d"), "b"));
    assert_eq!(s.count(RbacKind::RoleBinding), 0);
}

#[test]
fn typed_objects_dispatch_on_kind() {
    let s = RbacSnapshot::from_typed_objects(&[
        pod_reader(),
        crb("x", "pod-reader", json!([{"kind": "User", "name": "u"}])),
        json!({"kind": "ConfigMap", "metadata": {"name": "c"}}),
    ]);
    assert_eq!(s.count(RbacKind::ClusterRole), 1);
    assert_eq!(s.count(RbacKind::ClusterRoleBinding), 1);
    assert_eq!(
        s.warnings(),
        vec![r#"ignored object of unsupported kind "ConfigMap""#.to_string()]
    );
    assert_eq!(
        RbacKind::from_resource("rolebindings"),
        Some(RbacKind::RoleBinding)
    );
    assert_eq!(
        RbacKind::from_kind("ClusterRoleBinding"),
        Some(RbacKind::ClusterRoleBinding)
    );
}

#[test]
fn rules_for_lists_cluster_and_namespace_rules() {
    let s = RbacSnapshot::from_objects(
        &[role(
            "d",
            "cm",
            json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["app"]}]),
        )],
        &[
            cluster_role(
                "disc",
                json!({}),
                json!([{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}]),
            ),
            pod_reader(),
        ],
        &[rb(
            "d",
            "b",
            "Role",
            "cm",
            json!([{"kind": "User", "name": "u"}]),
        )],
        &[
            crb("disc", "disc", json!([{"kind": "User", "name": "u"}])),
            crb("pods", "pod-reader", json!([{"kind": "User", "name": "u"}])),
        ],
    );
    let u = UserInfo::new("u");
    let (res, non) = s.rules_for(&u, Some("d"));
    assert_eq!(
        non,
        vec![NonResourceRule {
            verbs: vec!["get".into()],
            non_resource_urls: vec!["/healthz".into()]
        }]
    );
    assert_eq!(res.len(), 2);
    assert_eq!(res[0].resources, vec!["pods"]);
    assert_eq!(res[1].resource_names, vec!["app"]);
    let (res, _) = s.rules_for(&u, Some("other"));
    assert_eq!(res.len(), 1);
    let (res, _) = s.rules_for(&u, None);
    assert_eq!(res.len(), 1);
    assert_eq!(
        serde_json::to_value(&res[0]).unwrap(),
        json!({"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]})
    );
    assert_eq!(
        serde_json::to_value(non_rule()).unwrap(),
        json!({"verbs": ["get"], "nonResourceURLs": ["/x"]})
    );
}

fn non_rule() -> NonResourceRule {
    NonResourceRule {
        verbs: vec!["get".into()],
        non_resource_urls: vec!["/x".into()],
    }
}

proptest! {
    /// Whatever `authorize` allows is allowed by some rule `rules_for`
    /// reports for the request's namespace, and vice versa.
    #[test]
    fn authorize_agrees_with_rules_for(
        verbs in proptest::collection::vec(prop_oneof!["get", "list", "\\*"], 1..3),
        resources in proptest::collection::vec(prop_oneof!["pods", "pods/log", "\\*", "\\*/log", "secrets"], 1..3),
        names in proptest::collection::vec(prop_oneof!["a", "b"], 0..2),
        binding_ns in prop_oneof!["d", "e"],
        cluster_wide in any::<bool>(),
        req_verb in prop_oneof!["get", "list", "delete"],
        req_res in prop_oneof!["pods", "secrets"],
        req_sub in proptest::option::of(Just("log".to_string())),
        req_ns in proptest::option::of(prop_oneof!["d", "e"]),
        req_name in proptest::option::of(prop_oneof!["a", "b"]),
    ) {
        let rule = json!([{"verbs": verbs, "apiGroups": [""], "resources": resources, "resourceNames": names}]);
        let subj = json!([{"kind": "User", "name": "u"}]);
        let (rbs, crbs) = if cluster_wide {
            (vec![], vec![crb("b", "r", subj)])
        } else {
            (vec![rb(&binding_ns, "b", "ClusterRole", "r", subj)], vec![])
        };
        let s = RbacSnapshot::from_objects(&[], &[cluster_role("r", json!({}), rule)], &rbs, &crbs);
        let mut a = ResourceAttributes::new(&req_verb, "", &req_res);
        a.subresource = req_sub;
        a.namespace = req_ns.clone();
        a.name = req_name;
        let attrs: Attributes = a.into();
        let u = UserInfo::new("u");
        let (rules, _) = s.rules_for(&u, req_ns.as_deref());
        let by_rules = rules.iter().any(|r| PolicyRule {
            verbs: r.verbs.clone(), api_groups: r.api_groups.clone(), resources: r.resources.clone(),
            resource_names: r.resource_names.clone(), non_resource_urls: vec![],
        }.allows(&attrs));
        prop_assert_eq!(s.authorize(&u, &attrs).is_allowed(), by_rules);
    }
}

#[test]
fn view_edit_and_admin_read_resource_metrics() {
    let roles: Vec<Value> = crate::bootstrap::bootstrap_policy().into_iter().filter(|o| o["kind"] == "ClusterRole").collect();
    let bindings: Vec<Value> = ["view", "edit", "admin"].iter().map(|r| rb("d", r, "ClusterRole", r, json!([{"kind": "User", "name": r}]))).collect();
    let s = RbacSnapshot::from_objects(&[], &roles, &bindings, &[crb("nodes-view", "view", json!([{"kind": "User", "name": "view"}]))]);
    let list = |res: &str, ns: Option<&str>| -> Attributes {
        let mut a = ResourceAttributes::new("list", "metrics.k8s.io", res);
        a.namespace = ns.map(str::to_string);
        a.into()
    };
    for who in ["view", "edit", "admin"] {
        assert!(s.authorize(&UserInfo::new(who), &list("pods", Some("d"))).is_allowed(), "{who} lists pod metrics");
    }
    assert!(!s.authorize(&UserInfo::new("edit"), &list("pods", Some("other"))).is_allowed());
    assert!(s.authorize(&UserInfo::new("view"), &list("nodes", None)).is_allowed(), "view cluster-wide lists node metrics");
    assert!(!s.authorize(&UserInfo::new("admin"), &list("nodes", None)).is_allowed(), "a namespace binding gives no node metrics");
}
