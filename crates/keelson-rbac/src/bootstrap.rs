//! The default RBAC policy a fresh cluster starts with (Kubernetes'
//! `bootstrappolicy`): the ClusterRoles users and system components are
//! granted, and the ClusterRoleBindings granting them.

use serde_json::{json, Value};

use crate::policy::{subject_json, RBAC_API_VERSION};
use crate::types::{SYSTEM_AUTHENTICATED, SYSTEM_MASTERS, SYSTEM_NODES, SYSTEM_UNAUTHENTICATED};

/// Label every bootstrap object carries, with value `rbac-defaults`.
pub const BOOTSTRAP_LABEL: &str = "kubernetes.io/bootstrapping";
/// Annotation marking objects the API server may reconcile, value `"true"`.
pub const AUTOUPDATE_ANNOTATION: &str = "rbac.authorization.kubernetes.io/autoupdate";
/// Label that aggregates a ClusterRole into `admin`.
pub const AGGREGATE_TO_ADMIN: &str = "rbac.authorization.k8s.io/aggregate-to-admin";
/// Label that aggregates a ClusterRole into `edit` (and so `admin`).
pub const AGGREGATE_TO_EDIT: &str = "rbac.authorization.k8s.io/aggregate-to-edit";
/// Label that aggregates a ClusterRole into `view` (and so `edit`, `admin`).
pub const AGGREGATE_TO_VIEW: &str = "rbac.authorization.k8s.io/aggregate-to-view";

const READ: &[&str] = &["get", "list", "watch"];
const WRITE: &[&str] = &["create", "update", "patch", "delete", "deletecollection"];
const READ_WRITE: &[&str] = &[
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
];

/// The bootstrap ClusterRoles followed by the bootstrap ClusterRoleBindings,
/// as `rbac.authorization.k8s.io/v1` API objects (with `apiVersion`, `kind`,
/// `metadata.name`, the `kubernetes.io/bootstrapping: rbac-defaults` label
/// and the `rbac.authorization.kubernetes.io/autoupdate: "true"` annotation).
///
/// `admin`, `edit` and `view` are aggregated roles with no stored rules; their
/// rules come from `system:aggregate-to-{admin,edit,view}` (and any other
/// ClusterRole carrying the aggregation labels). `edit` is labeled to
/// aggregate into `admin` and `view` into `edit`, as in Kubernetes.
/// Deterministic: the same list, in the same order, on every call.
pub fn bootstrap_policy() -> Vec<Value> {
    let mut out = cluster_roles();
    out.extend(cluster_role_bindings());
    out
}

fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> Value {
    json!({"apiGroups": groups, "resources": resources, "verbs": verbs})
}

fn url_rule(verbs: &[&str], urls: &[&str]) -> Value {
    json!({"nonResourceURLs": urls, "verbs": verbs})
}

fn metadata(name: &str, extra_labels: &[(&str, &str)]) -> Value {
    let mut labels = serde_json::Map::new();
    labels.insert(BOOTSTRAP_LABEL.into(), json!("rbac-defaults"));
    for (k, v) in extra_labels {
        labels.insert((*k).into(), json!(v));
    }
    json!({
        "name": name,
        "labels": labels,
        "annotations": {AUTOUPDATE_ANNOTATION: "true"},
    })
}

fn cluster_role(name: &str, rules: Vec<Value>) -> Value {
    json!({
        "apiVersion": RBAC_API_VERSION,
        "kind": "ClusterRole",
        "metadata": metadata(name, &[]),
        "rules": rules,
    })
}

fn labeled_role(name: &str, label: &str, rules: Vec<Value>) -> Value {
    json!({
        "apiVersion": RBAC_API_VERSION,
        "kind": "ClusterRole",
        "metadata": metadata(name, &[(label, "true")]),
        "rules": rules,
    })
}

fn aggregated_role(name: &str, extra_labels: &[(&str, &str)], select: &str) -> Value {
    json!({
        "apiVersion": RBAC_API_VERSION,
        "kind": "ClusterRole",
        "metadata": metadata(name, extra_labels),
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {select: "true"}}]},
        "rules": [],
    })
}

fn binding(name: &str, role: &str, subjects: Vec<Value>) -> Value {
    json!({
        "apiVersion": RBAC_API_VERSION,
        "kind": "ClusterRoleBinding",
        "metadata": metadata(name, &[]),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": subjects,
    })
}

fn group(name: &str) -> Value {
    subject_json("Group", name, None)
}

fn user(name: &str) -> Value {
    subject_json("User", name, None)
}

fn cluster_roles() -> Vec<Value> {
    vec![
        cluster_role(
            "cluster-admin",
            vec![rule(&["*"], &["*"], &["*"]), url_rule(&["*"], &["*"])],
        ),
        aggregated_role("admin", &[], AGGREGATE_TO_ADMIN),
        aggregated_role("edit", &[(AGGREGATE_TO_ADMIN, "true")], AGGREGATE_TO_EDIT),
        aggregated_role("view", &[(AGGREGATE_TO_EDIT, "true")], AGGREGATE_TO_VIEW),
        labeled_role(
            "system:aggregate-to-admin",
            AGGREGATE_TO_ADMIN,
            aggregate_to_admin(),
        ),
        labeled_role(
            "system:aggregate-to-edit",
            AGGREGATE_TO_EDIT,
            aggregate_to_edit(),
        ),
        labeled_role(
            "system:aggregate-to-view",
            AGGREGATE_TO_VIEW,
            aggregate_to_view(),
        ),
        // As metrics-server's: resource metrics readable wherever pods are.
        json!({
            "apiVersion": RBAC_API_VERSION,
            "kind": "ClusterRole",
            "metadata": metadata("system:aggregated-metrics-reader", &[(AGGREGATE_TO_ADMIN, "true"), (AGGREGATE_TO_EDIT, "true"), (AGGREGATE_TO_VIEW, "true")]),
            "rules": [rule(READ, &["metrics.k8s.io"], &["pods", "nodes"])],
        }),
        cluster_role(
            "system:basic-user",
            vec![
                rule(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                ),
                rule(
                    &["create"],
                    &["authentication.k8s.io"],
                    &["selfsubjectreviews"],
                ),
            ],
        ),
        cluster_role(
            "system:discovery",
            vec![url_rule(
                &["get"],
                &[
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                    "/healthz",
                    "/livez",
                    "/openapi",
                    "/openapi/*",
                    "/readyz",
                    "/version",
                    "/version/",
                ],
            )],
        ),
        cluster_role(
            "system:public-info-viewer",
            vec![url_rule(
                &["get"],
                &["/healthz", "/livez", "/readyz", "/version", "/version/"],
            )],
        ),
        cluster_role(
            "system:monitoring",
            vec![url_rule(
                &["get"],
                &[
                    "/healthz",
                    "/healthz/*",
                    "/livez",
                    "/livez/*",
                    "/metrics",
                    "/metrics/slis",
                    "/readyz",
                    "/readyz/*",
                ],
            )],
        ),
        cluster_role(
            "system:auth-delegator",
            vec![
                rule(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
                rule(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["subjectaccessreviews"],
                ),
            ],
        ),
        cluster_role("system:node", node_rules()),
        cluster_role("system:kube-scheduler", scheduler_rules()),
        cluster_role("system:kube-controller-manager", controller_manager_rules()),
        cluster_role(
            "system:node-proxier",
            vec![
                rule(&["list", "watch"], &[""], &["endpoints", "services"]),
                rule(READ, &[""], &["nodes"]),
                rule(
                    &["create", "patch", "update"],
                    &["", "events.k8s.io"],
                    &["events"],
                ),
                rule(
                    &["list", "watch"],
                    &["discovery.k8s.io"],
                    &["endpointslices"],
                ),
            ],
        ),
    ]
}

fn cluster_role_bindings() -> Vec<Value> {
    vec![
        binding(
            "cluster-admin",
            "cluster-admin",
            vec![group(SYSTEM_MASTERS)],
        ),
        binding(
            "system:basic-user",
            "system:basic-user",
            vec![group(SYSTEM_AUTHENTICATED)],
        ),
        binding(
            "system:discovery",
            "system:discovery",
            vec![group(SYSTEM_AUTHENTICATED)],
        ),
        binding(
            "system:public-info-viewer",
            "system:public-info-viewer",
            vec![group(SYSTEM_AUTHENTICATED), group(SYSTEM_UNAUTHENTICATED)],
        ),
        binding(
            "system:monitoring",
            "system:monitoring",
            vec![group("system:monitoring")],
        ),
        binding("system:node", "system:node", vec![group(SYSTEM_NODES)]),
        binding(
            "system:kube-scheduler",
            "system:kube-scheduler",
            vec![user("system:kube-scheduler")],
        ),
        binding(
            "system:kube-controller-manager",
            "system:kube-controller-manager",
            vec![user("system:kube-controller-manager")],
        ),
        binding(
            "system:node-proxier",
            "system:node-proxier",
            vec![user("system:kube-proxy")],
        ),
    ]
}

/// Read access to non-escalating namespaced resources (no secrets).
fn aggregate_to_view() -> Vec<Value> {
    vec![
        rule(
            READ,
            &[""],
            &[
                "configmaps",
                "endpoints",
                "persistentvolumeclaims",
                "persistentvolumeclaims/status",
                "pods",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "serviceaccounts",
                "services",
                "services/status",
            ],
        ),
        rule(
            READ,
            &[""],
            &[
                "bindings",
                "events",
                "limitranges",
                "namespaces/status",
                "pods/log",
                "pods/status",
                "replicationcontrollers/status",
                "resourcequotas",
                "resourcequotas/status",
            ],
        ),
        // Reading namespaces at namespace scope reads *this* namespace.
        rule(READ, &[""], &["namespaces"]),
        rule(READ, &["discovery.k8s.io"], &["endpointslices"]),
        rule(
            READ,
            &["apps"],
            &[
                "controllerrevisions",
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "statefulsets",
                "statefulsets/scale",
                "statefulsets/status",
            ],
        ),
        rule(
            READ,
            &["autoscaling"],
            &[
                "horizontalpodautoscalers",
                "horizontalpodautoscalers/status",
            ],
        ),
        rule(
            READ,
            &["batch"],
            &["cronjobs", "cronjobs/status", "jobs", "jobs/status"],
        ),
        rule(
            READ,
            &["extensions"],
            &[
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "ingresses",
                "ingresses/status",
                "networkpolicies",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "replicationcontrollers/scale",
            ],
        ),
        rule(
            READ,
            &["policy"],
            &["poddisruptionbudgets", "poddisruptionbudgets/status"],
        ),
        rule(
            READ,
            &["networking.k8s.io"],
            &["ingresses", "ingresses/status", "networkpolicies"],
        ),
    ]
}

/// Write access to user workloads and their inputs, including secrets.
fn aggregate_to_edit() -> Vec<Value> {
    vec![
        rule(
            READ,
            &[""],
            &[
                "pods/attach",
                "pods/exec",
                "pods/portforward",
                "pods/proxy",
                "secrets",
                "services/proxy",
            ],
        ),
        rule(&["impersonate"], &[""], &["serviceaccounts"]),
        rule(
            WRITE,
            &[""],
            &[
                "pods",
                "pods/attach",
                "pods/exec",
                "pods/portforward",
                "pods/proxy",
            ],
        ),
        rule(&["create"], &[""], &["pods/eviction"]),
        rule(
            WRITE,
            &[""],
            &[
                "configmaps",
                "events",
                "persistentvolumeclaims",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "secrets",
                "serviceaccounts",
                "services",
                "services/proxy",
            ],
        ),
        rule(&["create"], &[""], &["serviceaccounts/token"]),
        rule(
            WRITE,
            &["apps"],
            &[
                "daemonsets",
                "deployments",
                "deployments/rollback",
                "deployments/scale",
                "replicasets",
                "replicasets/scale",
                "statefulsets",
                "statefulsets/scale",
            ],
        ),
        rule(WRITE, &["autoscaling"], &["horizontalpodautoscalers"]),
        rule(WRITE, &["batch"], &["cronjobs", "jobs"]),
        rule(
            WRITE,
            &["extensions"],
            &[
                "daemonsets",
                "deployments",
                "deployments/rollback",
                "deployments/scale",
                "ingresses",
                "networkpolicies",
                "replicasets",
                "replicasets/scale",
                "replicationcontrollers/scale",
            ],
        ),
        rule(WRITE, &["policy"], &["poddisruptionbudgets"]),
        rule(
            WRITE,
            &["networking.k8s.io"],
            &["ingresses", "networkpolicies"],
        ),
        rule(READ_WRITE, &["coordination.k8s.io"], &["leases"]),
    ]
}

/// Granting access inside the namespace.
fn aggregate_to_admin() -> Vec<Value> {
    vec![
        rule(
            &["create"],
            &["authorization.k8s.io"],
            &["localsubjectaccessreviews"],
        ),
        rule(
            READ_WRITE,
            &["rbac.authorization.k8s.io"],
            &["rolebindings", "roles"],
        ),
    ]
}

/// What a kubelet needs; the node-restriction rules narrow the writes.
fn node_rules() -> Vec<Value> {
    vec![
        rule(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
        rule(
            &["create"],
            &["authorization.k8s.io"],
            &["localsubjectaccessreviews", "subjectaccessreviews"],
        ),
        rule(READ, &[""], &["services"]),
        rule(&["create", "get", "list", "watch"], &[""], &["nodes"]),
        rule(&["patch", "update"], &[""], &["nodes/status"]),
        rule(&["patch", "update"], &[""], &["nodes"]),
        rule(
            &["create", "patch", "update"],
            &["", "events.k8s.io"],
            &["events"],
        ),
        rule(READ, &[""], &["pods"]),
        // Mirror pods.
        rule(&["create", "delete"], &[""], &["pods"]),
        rule(&["patch", "update"], &[""], &["pods/status"]),
        rule(&["create"], &[""], &["pods/eviction"]),
        rule(READ, &[""], &["configmaps", "secrets"]),
        rule(&["get"], &[""], &["persistentvolumeclaims"]),
        // Keelson: nodes also list and watch volumes, to remove the directory of a
        // deleted local-path volume of their own (Kubernetes' role has only get).
        rule(&["get", "list", "watch"], &[""], &["persistentvolumes"]),
        rule(&["get"], &[""], &["endpoints"]),
        rule(READ, &["discovery.k8s.io"], &["endpointslices"]),
        rule(
            &["create", "get", "list", "watch"],
            &["certificates.k8s.io"],
            &["certificatesigningrequests"],
        ),
        rule(
            &["create", "delete", "get", "patch", "update"],
            &["coordination.k8s.io"],
            &["leases"],
        ),
        rule(&["get"], &["storage.k8s.io"], &["volumeattachments"]),
        rule(&["create"], &[""], &["serviceaccounts/token"]),
        rule(
            &["get", "patch", "update"],
            &[""],
            &["persistentvolumeclaims/status"],
        ),
        rule(READ, &["storage.k8s.io"], &["csidrivers"]),
        rule(
            &["create", "delete", "get", "patch", "update"],
            &["storage.k8s.io"],
            &["csinodes"],
        ),
        rule(READ, &["node.k8s.io"], &["runtimeclasses"]),
        // Keelson: every node runs the ingress controller (keelson-ingress), which mirrors
        // Ingresses and IngressClasses (and TLS Secrets, readable above).
        rule(READ, &["networking.k8s.io"], &["ingresses", "ingressclasses"]),
    ]
}

/// Kubernetes' scheduler role plus the volume-scheduler powers and leases
/// of any name (Keelson's scheduler elects a leader through a Lease).
fn scheduler_rules() -> Vec<Value> {
    vec![
        rule(
            &["create", "patch", "update"],
            &["", "events.k8s.io"],
            &["events"],
        ),
        rule(
            &["get", "list", "watch", "create", "update", "patch"],
            &["coordination.k8s.io"],
            &["leases"],
        ),
        rule(READ, &[""], &["nodes"]),
        rule(&["delete", "get", "list", "watch"], &[""], &["pods"]),
        rule(&["create"], &[""], &["bindings", "pods/binding"]),
        rule(&["patch", "update"], &[""], &["pods/status"]),
        rule(
            READ,
            &[""],
            &[
                "replicationcontrollers",
                "services",
                "namespaces",
                "configmaps",
            ],
        ),
        rule(READ, &["apps", "extensions"], &["replicasets"]),
        rule(READ, &["apps"], &["statefulsets"]),
        rule(READ, &["policy"], &["poddisruptionbudgets"]),
        rule(
            &["get", "list", "watch", "patch", "update"],
            &[""],
            &["persistentvolumeclaims", "persistentvolumes"],
        ),
        rule(
            READ,
            &["storage.k8s.io"],
            &[
                "storageclasses",
                "csinodes",
                "csidrivers",
                "csistoragecapacities",
                "volumeattachments",
            ],
        ),
        rule(
            READ,
            &["resource.k8s.io"],
            &["resourceclaims", "resourceslices", "deviceclasses"],
        ),
        rule(
            &["patch", "update"],
            &["resource.k8s.io"],
            &["resourceclaims/status"],
        ),
        rule(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
        rule(
            &["create"],
            &["authorization.k8s.io"],
            &["subjectaccessreviews"],
        ),
    ]
}

/// Keelson runs every controller under one identity, so this role is the
/// union of what Kubernetes' per-controller roles need: read, update and
/// delete anything (garbage collector, namespace deletion, quota), create in
/// the workload-bearing groups, and the certificate and aggregation powers.
/// It cannot create RBAC objects, CRDs or webhooks.
fn controller_manager_rules() -> Vec<Value> {
    vec![
        rule(
            &[
                "get",
                "list",
                "watch",
                "update",
                "patch",
                "delete",
                "deletecollection",
            ],
            &["*"],
            &["*"],
        ),
        rule(
            &["create"],
            &[
                "",
                "apps",
                "batch",
                "autoscaling",
                "policy",
                "discovery.k8s.io",
                "coordination.k8s.io",
                "events.k8s.io",
                "networking.k8s.io",
                "certificates.k8s.io",
                "storage.k8s.io",
                "resource.k8s.io",
                "authentication.k8s.io",
                "authorization.k8s.io",
            ],
            &["*"],
        ),
        rule(
            &["escalate", "bind"],
            &["rbac.authorization.k8s.io"],
            &["clusterroles"],
        ),
        rule(&["approve", "sign"], &["certificates.k8s.io"], &["signers"]),
    ]
}
