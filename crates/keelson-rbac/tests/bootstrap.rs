//! The default policy, end to end: every bootstrap binding grants what it
//! should and nothing it should not.

use keelson_rbac::{
    bootstrap_policy, forbidden_message, forbidden_message_with_reason, Attributes, Decision,
    RbacKind, RbacSnapshot, ResourceAttributes, UserInfo,
};
use serde_json::{json, Value};

fn snapshot() -> RbacSnapshot {
    let s = RbacSnapshot::from_typed_objects(&bootstrap_policy());
    assert!(s.warnings().is_empty(), "{:?}", s.warnings());
    s
}

fn authenticated(name: &str) -> UserInfo {
    UserInfo::new(name).with_groups(["system:authenticated"])
}

fn res(verb: &str, group: &str, resource: &str, ns: Option<&str>) -> ResourceAttributes {
    let mut a = ResourceAttributes::new(verb, group, resource);
    a.namespace = ns.map(str::to_string);
    a
}

fn can(s: &RbacSnapshot, u: &UserInfo, a: impl Into<Attributes>) -> bool {
    s.authorize(u, &a.into()).is_allowed()
}

fn can_path(s: &RbacSnapshot, u: &UserInfo, verb: &str, path: &str) -> bool {
    s.authorize(u, &Attributes::non_resource(verb, path))
        .is_allowed()
}

/// A snapshot where `alice` holds `role` through a RoleBinding in `team`.
fn bound_in_team(role: &str) -> (RbacSnapshot, UserInfo) {
    let mut s = snapshot();
    s.upsert(
        RbacKind::RoleBinding,
        &json!({"kind": "RoleBinding", "metadata": {"name": "alice-role", "namespace": "team"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}]}),
    )
    .unwrap();
    (s, authenticated("alice"))
}

fn by_name<'a>(objs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objs.iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("{kind} {name} missing"))
}

#[test]
fn objects_carry_bootstrap_metadata() {
    let objs = bootstrap_policy();
    assert_eq!(objs, bootstrap_policy(), "deterministic");
    for o in &objs {
        assert_eq!(o["apiVersion"], "rbac.authorization.k8s.io/v1");
        assert_eq!(
            o["metadata"]["labels"]["kubernetes.io/bootstrapping"], "rbac-defaults",
            "{o}"
        );
        assert_eq!(
            o["metadata"]["annotations"]["rbac.authorization.kubernetes.io/autoupdate"],
            "true"
        );
    }
    for name in [
        "cluster-admin",
        "admin",
        "edit",
        "view",
        "system:aggregate-to-admin",
        "system:aggregate-to-edit",
        "system:aggregate-to-view",
        "system:basic-user",
        "system:discovery",
        "system:public-info-viewer",
        "system:node",
        "system:kube-scheduler",
        "system:kube-controller-manager",
        "system:node-proxier",
    ] {
        by_name(&objs, "ClusterRole", name);
    }
    let view = by_name(&objs, "ClusterRole", "view");
    assert_eq!(
        view["aggregationRule"]["clusterRoleSelectors"][0]["matchLabels"]
            ["rbac.authorization.k8s.io/aggregate-to-view"],
        "true"
    );
    assert_eq!(
        view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"],
        "true"
    );
    let subjects = |name: &str| by_name(&objs, "ClusterRoleBinding", name)["subjects"].clone();
    assert_eq!(subjects("cluster-admin")[0]["name"], "system:masters");
    assert_eq!(subjects("cluster-admin")[0]["kind"], "Group");
    assert_eq!(
        subjects("system:public-info-viewer")
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(subjects("system:kube-scheduler")[0]["kind"], "User");
    assert_eq!(
        subjects("system:node-proxier")[0]["name"],
        "system:kube-proxy"
    );
}

#[test]
fn cluster_admin_role_grants_everything() {
    let mut s = snapshot();
    s.upsert(
        RbacKind::ClusterRoleBinding,
        &json!({"kind": "ClusterRoleBinding", "metadata": {"name": "root"},
            "roleRef": {"kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "User", "name": "root"}]}),
    )
    .unwrap();
    let root = UserInfo::new("root");
    assert!(can(&s, &root, res("delete", "", "nodes", None).named("n1")));
    assert!(can(
        &s,
        &root,
        res(
            "escalate",
            "rbac.authorization.k8s.io",
            "clusterroles",
            None
        )
    ));
    assert!(can_path(&s, &root, "post", "/logs/x"));
    let master = UserInfo::new("m").with_groups(["system:masters"]);
    assert!(can(
        &s,
        &master,
        res("create", "rbac.authorization.k8s.io", "clusterroles", None)
    ));
}

#[test]
fn authenticated_users_get_discovery_and_self_reviews_only() {
    let s = snapshot();
    let u = authenticated("alice");
    for (group, resource) in [
        ("authorization.k8s.io", "selfsubjectaccessreviews"),
        ("authorization.k8s.io", "selfsubjectrulesreviews"),
        ("authentication.k8s.io", "selfsubjectreviews"),
    ] {
        assert!(
            can(&s, &u, res("create", group, resource, None)),
            "{resource}"
        );
    }
    assert!(!can(
        &s,
        &u,
        res(
            "create",
            "authorization.k8s.io",
            "subjectaccessreviews",
            None
        )
    ));
    for path in [
        "/api",
        "/api/v1",
        "/apis",
        "/apis/apps/v1",
        "/healthz",
        "/livez",
        "/readyz",
        "/version",
        "/version/",
        "/openapi/v2",
        "/openapi/v3/apis/apps/v1",
    ] {
        assert!(can_path(&s, &u, "get", path), "{path}");
    }
    assert!(!can_path(&s, &u, "get", "/metrics"));
    assert!(!can_path(&s, &u, "post", "/api"));
    assert!(!can(&s, &u, res("list", "", "pods", Some("default"))));
    assert!(!can(&s, &u, res("list", "", "namespaces", None)));

    let anon = UserInfo::new("system:anonymous").with_groups(["system:unauthenticated"]);
    for path in ["/healthz", "/livez", "/readyz", "/version", "/version/"] {
        assert!(can_path(&s, &anon, "get", path), "{path}");
    }
    assert!(!can_path(&s, &anon, "get", "/api"));
    assert!(!can_path(&s, &anon, "get", "/apis/apps"));
    assert!(!can(
        &s,
        &anon,
        res(
            "create",
            "authorization.k8s.io",
            "selfsubjectaccessreviews",
            None
        )
    ));
}

#[test]
fn view_reads_workloads_but_not_secrets() {
    let (s, u) = bound_in_team("view");
    let team = Some("team");
    assert!(can(&s, &u, res("list", "", "pods", team)));
    assert!(can(
        &s,
        &u,
        res("get", "", "pods", team)
            .named("web")
            .with_subresource("log")
    ));
    assert!(can(&s, &u, res("watch", "apps", "deployments", team)));
    assert!(can(
        &s,
        &u,
        res("get", "apps", "deployments", team)
            .named("d")
            .with_subresource("scale")
    ));
    assert!(can(&s, &u, res("list", "batch", "cronjobs", team)));
    assert!(can(&s, &u, res("get", "", "configmaps", team).named("c")));
    assert!(can(
        &s,
        &u,
        res("list", "discovery.k8s.io", "endpointslices", team)
    ));
    assert!(!can(&s, &u, res("get", "", "secrets", team).named("s")));
    assert!(!can(&s, &u, res("list", "", "secrets", team)));
    assert!(!can(&s, &u, res("create", "", "pods", team)));
    assert!(!can(
        &s,
        &u,
        res("create", "", "pods", team)
            .named("web")
            .with_subresource("exec")
    ));
    assert!(!can(
        &s,
        &u,
        res("list", "rbac.authorization.k8s.io", "roles", team)
    ));
    assert!(!can(&s, &u, res("list", "", "pods", Some("elsewhere"))));
}

#[test]
fn edit_writes_workloads_but_cannot_grant() {
    let (s, u) = bound_in_team("edit");
    let team = Some("team");
    assert!(can(&s, &u, res("create", "apps", "deployments", team)));
    assert!(can(
        &s,
        &u,
        res("patch", "apps", "deployments", team)
            .named("d")
            .with_subresource("scale")
    ));
    assert!(can(&s, &u, res("delete", "", "pods", team).named("web")));
    for sub in ["exec", "attach", "portforward", "eviction"] {
        assert!(
            can(
                &s,
                &u,
                res("create", "", "pods", team)
                    .named("web")
                    .with_subresource(sub)
            ),
            "{sub}"
        );
    }
    assert!(can(
        &s,
        &u,
        res("create", "", "serviceaccounts", team)
            .named("sa")
            .with_subresource("token")
    ));
    assert!(can(&s, &u, res("get", "", "secrets", team).named("s")));
    assert!(can(&s, &u, res("create", "", "secrets", team)));
    assert!(can(
        &s,
        &u,
        res("update", "", "persistentvolumeclaims", team).named("c")
    ));
    assert!(can(&s, &u, res("create", "batch", "jobs", team)));
    assert!(can(
        &s,
        &u,
        res("create", "networking.k8s.io", "ingresses", team)
    ));
    // Inherited from view through aggregation.
    assert!(can(
        &s,
        &u,
        res("get", "", "pods", team)
            .named("web")
            .with_subresource("log")
    ));
    assert!(!can(
        &s,
        &u,
        res("create", "rbac.authorization.k8s.io", "roles", team)
    ));
    assert!(!can(
        &s,
        &u,
        res("create", "rbac.authorization.k8s.io", "rolebindings", team)
    ));
    assert!(!can(&s, &u, res("create", "", "resourcequotas", team)));
    assert!(!can(
        &s,
        &u,
        res("update", "", "pods", team)
            .named("web")
            .with_subresource("status")
    ));
}

#[test]
fn admin_grants_in_its_namespace_only() {
    let (s, u) = bound_in_team("admin");
    let team = Some("team");
    assert!(can(
        &s,
        &u,
        res("create", "rbac.authorization.k8s.io", "rolebindings", team)
    ));
    assert!(can(
        &s,
        &u,
        res("create", "rbac.authorization.k8s.io", "roles", team)
    ));
    assert!(can(
        &s,
        &u,
        res(
            "create",
            "authorization.k8s.io",
            "localsubjectaccessreviews",
            team
        )
    ));
    assert!(can(&s, &u, res("create", "apps", "deployments", team)));
    assert!(can(&s, &u, res("list", "", "secrets", team)));
    assert!(can(
        &s,
        &u,
        res("get", "", "namespaces", team).named("team")
    ));
    assert!(!can(
        &s,
        &u,
        res("create", "rbac.authorization.k8s.io", "clusterroles", None)
    ));
    assert!(!can(
        &s,
        &u,
        res(
            "create",
            "rbac.authorization.k8s.io",
            "clusterrolebindings",
            None
        )
    ));
    assert!(!can(
        &s,
        &u,
        res(
            "create",
            "rbac.authorization.k8s.io",
            "rolebindings",
            Some("other")
        )
    ));
    assert!(!can(
        &s,
        &u,
        res("delete", "", "namespaces", team).named("team")
    ));
}

#[test]
fn new_aggregate_to_view_role_extends_view_edit_and_admin() {
    let widgets = |verb: &str| res(verb, "example.com", "widgets", Some("team"));
    for role in ["view", "edit", "admin"] {
        let (mut s, u) = bound_in_team(role);
        assert!(!can(&s, &u, widgets("list")), "{role} before");
        s.upsert(
            RbacKind::ClusterRole,
            &json!({"kind": "ClusterRole",
                "metadata": {"name": "widget-view", "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
                "rules": [{"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get", "list", "watch"]}]}),
        )
        .unwrap();
        assert!(can(&s, &u, widgets("list")), "{role} after");
        assert!(!can(&s, &u, widgets("delete")), "{role} delete");
    }
}

#[test]
fn kubelet_identity() {
    let s = snapshot();
    let n = UserInfo::node("n1");
    assert!(can(&s, &n, res("get", "", "nodes", None).named("n1")));
    assert!(can(&s, &n, res("create", "", "nodes", None)));
    assert!(can(
        &s,
        &n,
        res("patch", "", "nodes", None)
            .named("n1")
            .with_subresource("status")
    ));
    assert!(can(&s, &n, res("watch", "", "pods", None)));
    assert!(can(&s, &n, res("create", "", "pods", Some("kube-system"))));
    assert!(can(&s, &n, res("delete", "", "pods", Some("d")).named("p")));
    assert!(can(
        &s,
        &n,
        res("patch", "", "pods", Some("d"))
            .named("p")
            .with_subresource("status")
    ));
    assert!(can(&s, &n, res("get", "", "secrets", Some("d")).named("s")));
    assert!(can(
        &s,
        &n,
        res("get", "", "configmaps", Some("d")).named("c")
    ));
    assert!(can(&s, &n, res("create", "", "events", Some("d"))));
    assert!(can(
        &s,
        &n,
        res("patch", "", "events", Some("d")).named("e")
    ));
    for verb in ["get", "create", "update"] {
        assert!(
            can(
                &s,
                &n,
                res(
                    verb,
                    "coordination.k8s.io",
                    "leases",
                    Some("kube-node-lease")
                )
                .named("n1")
            ),
            "{verb}"
        );
    }
    assert!(can(
        &s,
        &n,
        res("create", "", "serviceaccounts", Some("d"))
            .named("sa")
            .with_subresource("token")
    ));
    assert!(can(&s, &n, res("list", "", "services", None)));
    assert!(!can(&s, &n, res("delete", "", "nodes", None).named("n1")));
    assert!(!can(
        &s,
        &n,
        res("update", "", "pods", Some("d")).named("p")
    ));
    assert!(!can(
        &s,
        &n,
        res("create", "apps", "deployments", Some("d"))
    ));
    assert!(!can(
        &s,
        &n,
        res("update", "", "secrets", Some("d")).named("s")
    ));
}

#[test]
fn scheduler_controller_manager_and_proxy() {
    let s = snapshot();
    let sched = authenticated("system:kube-scheduler");
    assert!(can(
        &s,
        &sched,
        res("create", "", "pods", Some("d"))
            .named("p")
            .with_subresource("binding")
    ));
    assert!(can(&s, &sched, res("list", "", "nodes", None)));
    assert!(can(
        &s,
        &sched,
        res("update", "", "pods", Some("d"))
            .named("p")
            .with_subresource("status")
    ));
    assert!(can(
        &s,
        &sched,
        res("watch", "storage.k8s.io", "storageclasses", None)
    ));
    assert!(can(
        &s,
        &sched,
        res(
            "update",
            "coordination.k8s.io",
            "leases",
            Some("kube-system")
        )
        .named("kube-scheduler")
    ));
    assert!(!can(&s, &sched, res("create", "", "secrets", Some("d"))));
    assert!(!can(
        &s,
        &sched,
        res("create", "apps", "deployments", Some("d"))
    ));

    let kcm = authenticated("system:kube-controller-manager");
    for (verb, group, resource) in [
        ("create", "", "pods"),
        ("delete", "", "pods"),
        ("create", "apps", "replicasets"),
        ("update", "apps", "deployments"),
        ("create", "discovery.k8s.io", "endpointslices"),
        ("create", "", "endpoints"),
        ("create", "coordination.k8s.io", "leases"),
        ("create", "batch", "jobs"),
        ("delete", "batch", "cronjobs"),
        ("create", "", "events"),
        ("update", "", "namespaces"),
        ("delete", "", "nodes"),
        ("create", "", "serviceaccounts"),
        ("create", "", "secrets"),
        ("create", "", "persistentvolumes"),
        ("list", "example.com", "widgets"),
    ] {
        assert!(
            can(&s, &kcm, res(verb, group, resource, Some("d"))),
            "{verb} {group}/{resource}"
        );
    }
    assert!(can(
        &s,
        &kcm,
        res("update", "apps", "deployments", Some("d"))
            .named("x")
            .with_subresource("status")
    ));
    // What the workload controllers write: their objects' status, pods' finalizers.
    for (group, resource) in [
        ("batch", "jobs"),
        ("batch", "cronjobs"),
        ("apps", "daemonsets"),
    ] {
        assert!(
            can(
                &s,
                &kcm,
                res("update", group, resource, Some("d"))
                    .named("x")
                    .with_subresource("status")
            ),
            "update {group}/{resource}/status"
        );
    }
    assert!(can(
        &s,
        &kcm,
        res("patch", "", "pods", Some("d")).named("x")
    ));
    assert!(!can(
        &s,
        &kcm,
        res("create", "rbac.authorization.k8s.io", "clusterroles", None)
    ));
    assert!(!can(
        &s,
        &kcm,
        res(
            "create",
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            None
        )
    ));

    let proxy = authenticated("system:kube-proxy");
    assert!(can(&s, &proxy, res("list", "", "services", None)));
    assert!(can(
        &s,
        &proxy,
        res("watch", "discovery.k8s.io", "endpointslices", None)
    ));
    assert!(can(&s, &proxy, res("get", "", "nodes", None).named("n1")));
    assert!(can(
        &s,
        &proxy,
        res("create", "", "events", Some("default"))
    ));
    assert!(!can(
        &s,
        &proxy,
        res("get", "", "secrets", Some("default")).named("s")
    ));
    assert!(!can(
        &s,
        &proxy,
        res("update", "", "services", Some("default")).named("s")
    ));
}

#[test]
fn rules_for_authenticated_user_lists_discovery() {
    let s = snapshot();
    let (res_rules, non) = s.rules_for(&authenticated("alice"), Some("default"));
    assert!(res_rules.iter().any(|r| r
        .resources
        .contains(&"selfsubjectaccessreviews".to_string())));
    assert!(non
        .iter()
        .any(|r| r.non_resource_urls.contains(&"/apis/*".to_string())));
    assert!(!res_rules
        .iter()
        .any(|r| r.resources.contains(&"pods".to_string())));
    let (with_view, _) = bound_in_team("view")
        .0
        .rules_for(&authenticated("alice"), Some("team"));
    assert!(with_view
        .iter()
        .any(|r| r.resources.contains(&"pods".to_string())));
}

#[test]
fn denial_builds_kubernetes_message() {
    let s = snapshot();
    let u = authenticated("alice");
    let a: Attributes = res("list", "", "pods", Some("default")).into();
    let d = s.authorize(&u, &a);
    assert_eq!(
        d,
        Decision::Deny {
            reason: String::new()
        }
    );
    assert_eq!(
        forbidden_message_with_reason(&u, &a, d.reason()),
        r#"pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "default""#
    );
    assert_eq!(
        forbidden_message(&u, &Attributes::non_resource("get", "/metrics")),
        r#"forbidden: User "alice" cannot get path "/metrics""#
    );
}

#[test]
fn the_controller_manager_may_do_what_the_node_controllers_do() {
    let s = snapshot();
    let kcm = authenticated("system:kube-controller-manager");
    let sub = |verb: &str, group: &str, resource: &str, subresource: Option<&str>, ns: Option<&str>| {
        let mut a = res(verb, group, resource, ns);
        a.subresource = subresource.map(str::to_string);
        a
    };
    let needed = [
        // IPAM and lifecycle: Nodes, their status and their Leases.
        sub("list", "", "nodes", None, None),
        sub("watch", "", "nodes", None, None),
        sub("get", "", "nodes", None, None),
        sub("patch", "", "nodes", None, None),
        sub("update", "", "nodes", None, None),
        sub("patch", "", "nodes", Some("status"), None),
        sub("update", "", "nodes", Some("status"), None),
        sub("list", "coordination.k8s.io", "leases", None, Some("kube-node-lease")),
        sub("watch", "coordination.k8s.io", "leases", None, Some("kube-node-lease")),
        sub("get", "coordination.k8s.io", "leases", None, Some("kube-node-lease")),
        // MarkPodsNotReady and taint eviction.
        sub("patch", "", "pods", Some("status"), Some("default")),
        sub("delete", "", "pods", None, Some("default")),
        // Their Events.
        sub("create", "", "events", None, Some("default")),
        sub("patch", "", "events", None, Some("default")),
    ];
    for a in needed {
        assert!(can(&s, &kcm, a.clone()), "{a:?}");
    }
}
