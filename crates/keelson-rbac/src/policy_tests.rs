use super::*;
use crate::types::{NonResourceAttributes, ResourceAttributes};
use proptest::prelude::*;

fn rule(v: Value) -> PolicyRule {
    PolicyRule::from_json(&v, "rule").unwrap()
}

fn res(verb: &str, group: &str, resource: &str) -> ResourceAttributes {
    ResourceAttributes::new(verb, group, resource).in_namespace("default")
}

#[test]
fn verb_and_group_wildcards() {
    let r = rule(json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["deployments"]}));
    assert!(r.allows(&res("delete", "apps", "deployments").into()));
    assert!(r.allows(&res("escalate", "extensions", "deployments").into()));
    assert!(!r.allows(&res("get", "apps", "replicasets").into()));

    let r = rule(json!({"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}));
    assert!(r.allows(&res("list", "", "pods").into()));
    assert!(!r.allows(&res("watch", "", "pods").into()));
    assert!(!r.allows(&res("list", "apps", "pods").into()));
}

#[test]
fn empty_api_groups_match_no_resource_request() {
    let r = rule(json!({"verbs": ["*"], "resources": ["*"]}));
    assert!(!r.allows(&res("get", "", "pods").into()));
}

#[test]
fn subresources_need_explicit_grant() {
    let pods = rule(json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}));
    let log = res("get", "", "pods").named("web").with_subresource("log");
    assert!(!pods.allows(&log.clone().into()));
    let pods_log = rule(json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods/log"]}));
    assert!(pods_log.allows(&log.clone().into()));
    assert!(!pods_log.allows(&res("get", "", "pods").named("web").into()));
    let all = rule(json!({"verbs": ["get"], "apiGroups": [""], "resources": ["*"]}));
    assert!(all.allows(&log.into()));
}

#[test]
fn star_slash_subresource_wildcard() {
    let r = rule(json!({"verbs": ["update"], "apiGroups": ["*"], "resources": ["*/scale"]}));
    let scale = |res_name: &str| {
        ResourceAttributes::new("update", "apps", res_name)
            .in_namespace("d")
            .named("x")
            .with_subresource("scale")
    };
    assert!(r.allows(&scale("deployments").into()));
    assert!(r.allows(&scale("statefulsets").into()));
    assert!(!r.allows(&res("update", "apps", "deployments").named("x").into()));
    let status = res("update", "apps", "deployments")
        .named("x")
        .with_subresource("status");
    assert!(!r.allows(&status.into()));
    // "*/scale" must not match a subresource that merely ends in "scale".
    let rescale = res("update", "apps", "deployments")
        .named("x")
        .with_subresource("rescale");
    assert!(!r.allows(&rescale.into()));
}

#[test]
fn resource_names_restrict_named_requests_only() {
    let r = rule(
        json!({"verbs": ["get", "update", "list", "create", "delete"], "apiGroups": [""],
        "resources": ["configmaps"], "resourceNames": ["cfg"]}),
    );
    assert!(r.allows(&res("get", "", "configmaps").named("cfg").into()));
    assert!(r.allows(&res("delete", "", "configmaps").named("cfg").into()));
    assert!(!r.allows(&res("get", "", "configmaps").named("other").into()));
    // list has no name: never matches a resourceNames rule.
    assert!(!r.allows(&res("list", "", "configmaps").into()));
    // create on a collection never matches, even if a caller passes a name.
    assert!(!r.allows(&res("create", "", "configmaps").into()));
    assert!(!r.allows(&res("create", "", "configmaps").named("cfg").into()));
}

#[test]
fn create_on_named_subresource_matches_resource_names() {
    let r = rule(json!({"verbs": ["create"], "apiGroups": [""],
        "resources": ["serviceaccounts/token"], "resourceNames": ["builder"]}));
    let tok = |n: &str| {
        res("create", "", "serviceaccounts")
            .named(n)
            .with_subresource("token")
    };
    assert!(r.allows(&tok("builder").into()));
    assert!(!r.allows(&tok("other").into()));
}

#[test]
fn non_resource_urls() {
    let r =
        rule(json!({"verbs": ["get"], "nonResourceURLs": ["/healthz", "/apis/*", "/version/"]}));
    let nr =
        |verb: &str, path: &str| Attributes::NonResource(NonResourceAttributes::new(verb, path));
    assert!(r.allows(&nr("get", "/healthz")));
    assert!(!r.allows(&nr("get", "/healthz/etcd")));
    assert!(r.allows(&nr("get", "/apis/apps/v1")));
    assert!(r.allows(&nr("get", "/apis/")));
    assert!(!r.allows(&nr("get", "/apis")));
    assert!(r.allows(&nr("get", "/version/")));
    assert!(!r.allows(&nr("get", "/version")));
    assert!(!r.allows(&nr("post", "/healthz")));
    let all = rule(json!({"verbs": ["*"], "nonResourceURLs": ["*"]}));
    assert!(all.allows(&nr("delete", "/anything/at/all")));
    // A non-resource rule never grants resource requests and vice versa.
    assert!(!all.allows(&res("get", "", "pods").into()));
    let pods = rule(json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}));
    assert!(!pods.allows(&nr("get", "/healthz")));
}

#[test]
fn rule_json_round_trip_uses_api_field_names() {
    let v = json!({"verbs": ["get"], "nonResourceURLs": ["/x"]});
    let r = rule(v.clone());
    assert_eq!(r.to_json(), v);
    let v =
        json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"], "resourceNames": ["a"]});
    assert_eq!(rule(v.clone()).to_json(), v);
}

#[test]
fn malformed_rules_are_errors() {
    assert!(PolicyRule::from_json(&json!({"verbs": "get"}), "r").is_err());
    assert!(PolicyRule::from_json(&json!({"verbs": [1]}), "r").is_err());
    assert!(PolicyRule::from_json(&json!([]), "r").is_err());
    // null lists are empty lists.
    assert_eq!(
        PolicyRule::from_json(&json!({"verbs": null}), "r").unwrap(),
        PolicyRule::default()
    );
}

#[test]
fn subjects_apply_by_kind() {
    let alice = UserInfo::new("alice").with_groups(["devs"]);
    let s = |kind: &str, name: &str, ns: &str| Subject {
        kind: kind.into(),
        name: name.into(),
        namespace: ns.into(),
    };
    assert!(s("User", "alice", "").applies_to(&alice, ""));
    assert!(!s("User", "bob", "").applies_to(&alice, ""));
    assert!(s("Group", "devs", "").applies_to(&alice, ""));
    assert!(!s("Group", "ops", "").applies_to(&alice, ""));
    assert!(!s("Robot", "alice", "").applies_to(&alice, ""));

    let sa = UserInfo::service_account("ci", "builder");
    assert!(s("ServiceAccount", "builder", "ci").applies_to(&sa, ""));
    assert!(s("ServiceAccount", "builder", "").applies_to(&sa, "ci"));
    assert!(!s("ServiceAccount", "builder", "").applies_to(&sa, ""));
    assert!(!s("ServiceAccount", "builder", "").applies_to(&sa, "other"));
    assert!(!s("ServiceAccount", "deployer", "ci").applies_to(&sa, ""));
    // A plain user with the same short name is not the service account.
    assert!(!s("ServiceAccount", "builder", "ci").applies_to(&UserInfo::new("builder"), "ci"));
    assert_eq!(
        s("ServiceAccount", "builder", "").describe("ci"),
        "ServiceAccount \"builder/ci\""
    );
    assert_eq!(s("Group", "devs", "").describe("x"), "Group \"devs\"");
}

#[test]
fn parse_objects_and_reject_malformed() {
    let role = json!({"kind": "Role", "metadata": {"name": "r", "namespace": "ns"},
        "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]});
    let r = Role::from_json(&role).unwrap();
    assert_eq!(
        (r.namespace.as_str(), r.name.as_str(), r.rules.len()),
        ("ns", "r", 1)
    );
    assert_eq!(
        Role::from_json(&json!({"metadata": {"name": "r"}})),
        Err(ParseError::MissingNamespace)
    );
    assert!(matches!(
        Role::from_json(
            &json!({"kind": "ClusterRole", "metadata": {"name": "r", "namespace": "n"}})
        ),
        Err(ParseError::WrongKind { .. })
    ));
    assert_eq!(
        ClusterRole::from_json(&json!({"metadata": {}})),
        Err(ParseError::MissingName)
    );

    let crb = json!({"metadata": {"name": "b"}, "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": "x"}});
    assert_eq!(
        ClusterRoleBinding::from_json(&crb),
        Err(ParseError::BadRoleRef("Role".into()))
    );
    let rb = json!({"metadata": {"name": "b", "namespace": "n"},
        "roleRef": {"kind": "Thing", "name": "x"}});
    assert_eq!(
        RoleBinding::from_json(&rb),
        Err(ParseError::BadRoleRef("Thing".into()))
    );
    let rb = json!({"metadata": {"name": "b", "namespace": "n"},
        "roleRef": {"kind": "ClusterRole", "name": "x"}, "subjects": [{"kind": "User"}]});
    assert!(RoleBinding::from_json(&rb).is_err());

    let agg = json!({"metadata": {"name": "a", "labels": {"x": "y"}},
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"k": "v"}}]}});
    let a = ClusterRole::from_json(&agg).unwrap();
    assert_eq!(a.aggregation.as_ref().map(Vec::len), Some(1));
    assert_eq!(a.labels.get("x").map(String::as_str), Some("y"));
    let bad_agg = json!({"metadata": {"name": "a"},
        "aggregationRule": {"clusterRoleSelectors": [{"matchExpressions": [{"key": "k", "operator": "In"}]}]}});
    assert!(matches!(
        ClusterRole::from_json(&bad_agg),
        Err(ParseError::BadSelector { index: 0, .. })
    ));
}

proptest! {
    /// `*` in resources grants every resource and subresource; an exact
    /// resource never grants a subresource of it.
    #[test]
    fn wildcard_resource_covers_subresources(res_name in "[a-z]{1,8}", sub in proptest::option::of("[a-z]{1,6}")) {
        let star = PolicyRule { verbs: vec!["get".into()], api_groups: vec!["".into()], resources: vec!["*".into()], ..Default::default() };
        let exact = PolicyRule { resources: vec![res_name.clone()], ..star.clone() };
        let mut a = ResourceAttributes::new("get", "", &res_name).named("x");
        a.subresource = sub.clone();
        let attrs: Attributes = a.into();
        prop_assert!(star.allows(&attrs));
        prop_assert_eq!(exact.allows(&attrs), sub.is_none());
    }

    /// A URL pattern `P*` matches exactly the paths starting with `P`.
    #[test]
    fn url_prefix_semantics(prefix in "/[a-z]{0,4}", path in "/[a-z/]{0,8}") {
        let r = PolicyRule { verbs: vec!["get".into()], non_resource_urls: vec![format!("{prefix}*")], ..Default::default() };
        let attrs = Attributes::non_resource("get", &path);
        prop_assert_eq!(r.allows(&attrs), path.starts_with(&prefix));
    }
}
