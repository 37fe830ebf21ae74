//! Node restriction: what a kubelet identity may write, beyond RBAC
//! (Kubernetes' NodeRestriction admission plugin, as a pure function).
//!
//! A kubelet authenticates as user `system:node:NAME` in group
//! `system:nodes` ([`node_name`]). RBAC (the `system:node` role) grants all
//! nodes the same verbs; [`node_restriction`] then narrows mutating requests
//! to the node's own objects. Reads are never restricted here. The Node
//! authorizer's object graph (which secrets a node may read) is out of scope.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use crate::types::{Attributes, UserInfo, NODE_USER_PREFIX, SYSTEM_NODES};

/// Annotation that marks a mirror pod.
pub const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// Namespace holding node heartbeat leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

const KUBELET_LABELS: &[&str] = &[
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
];
const KUBELET_LABEL_DOMAINS: &[&str] = &["kubelet.kubernetes.io", "node.kubernetes.io"];
const NODE_RESTRICTION_DOMAIN: &str = "node-restriction.kubernetes.io";

/// The node a user is, if it is a node identity: `Some(NAME)` for user
/// `system:node:NAME` in group `system:nodes`, else `None`. `Some("")`
/// (user `system:node:`) is a node whose name cannot be determined;
/// [`node_restriction`] refuses every write for it.
pub fn node_name(user: &UserInfo) -> Option<&str> {
    if !user.in_group(SYSTEM_NODES) {
        return None;
    }
    user.name.strip_prefix(NODE_USER_PREFIX)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Create,
    Update,
    Delete,
}

impl Op {
    fn as_str(self) -> &'static str {
        match self {
            Op::Create => "CREATE",
            Op::Update => "UPDATE",
            Op::Delete => "DELETE",
        }
    }
}

/// Whether node `node` may perform the mutating request `attrs`, on top of
/// RBAC. `Ok(())` means "no objection" (RBAC still decides); `Err` carries
/// the Kubernetes refusal text, e.g. `node "n1" is not allowed to modify node "n2"`.
///
/// `current` is the stored object the request acts on (update, patch,
/// delete, eviction) and `new` the object as it would be stored (create,
/// update, patch: after applying the patch). Special cases: for a mirror-pod
/// `create`, `current` may be the node's own Node object, and then the
/// owner reference UID must equal its `metadata.uid`; for
/// `serviceaccounts/token` `create`, `new` is the TokenRequest and `current`
/// the Pod its `spec.boundObjectRef` names (looked up by the caller).
/// `deletecollection` is judged like `delete` of `current`; callers should
/// check each object.
///
/// Rules (Kubernetes NodeRestriction):
/// - `nodes`, `nodes/status`: only the node's own object; on create no
///   `spec.configSource` and no forbidden labels; on update no new
///   configSource, no taint changes and no forbidden label changes
///   (`node-restriction.kubernetes.io/…` and `kubernetes.io`/`k8s.io` labels
///   other than the kubelet's own).
/// - `pods`: create only mirror pods bound to itself, owned by its Node and
///   referencing no service account, secret, configmap, PVC or cluster trust
///   bundle; delete only pods bound to itself; no other writes.
/// - `pods/status`: update only for pods bound to itself, without changing
///   labels, `spec.nodeName` or resource-claim statuses.
/// - `pods/eviction`: only pods bound to itself. Other pod subresources may
///   not be written (`exec`, `attach`, `portforward`, `proxy` are connections,
///   not writes, and are left to RBAC).
/// - `persistentvolumeclaims`: only `status` updates changing nothing but
///   `status.capacity`, `status.conditions` and the allocation status.
/// - `serviceaccounts/token`: only tokens bound to a pod on this node.
/// - `leases` (coordination.k8s.io): only `kube-node-lease/<node>`.
/// - `csinodes` (storage.k8s.io): only the one named after the node.
/// - Everything else: `Ok(())`.
pub fn node_restriction(
    node: &str,
    attrs: &Attributes,
    current: Option<&Value>,
    new: Option<&Value>,
) -> Result<(), String> {
    let Attributes::Resource(r) = attrs else {
        return Ok(());
    };
    let op = match r.verb.as_str() {
        "create" => Op::Create,
        "update" | "patch" => Op::Update,
        "delete" | "deletecollection" => Op::Delete,
        _ => return Ok(()),
    };
    let sub = r.subresource();
    // Connections (any verb) are not admission writes in Kubernetes.
    if matches!(sub, Some("exec" | "attach" | "portforward" | "proxy")) {
        return Ok(());
    }
    if node.is_empty() {
        return Err(format!(
            "could not determine node from user {:?}",
            NODE_USER_PREFIX
        ));
    }
    // The name a create targets is in the object, not the URL.
    let target_name = || -> String {
        match (r.name(), op) {
            (Some(n), _) => n.to_string(),
            (None, Op::Create) => new
                .map(|o| str_at(o, &["metadata", "name"]))
                .unwrap_or_default(),
            (None, _) => current
                .map(|o| str_at(o, &["metadata", "name"]))
                .unwrap_or_default(),
        }
    };
    match (r.api_group.as_str(), r.resource.as_str()) {
        ("", "pods") => match sub {
            None => admit_pod(node, op, &target_name(), current, new),
            Some("status") => admit_pod_status(node, op, current, new),
            Some("eviction") => admit_eviction(node, op, &target_name(), current),
            Some(other) => Err(format!(
                "unexpected pod subresource {other:?}, only 'status' and 'eviction' are allowed"
            )),
        },
        ("", "nodes") => admit_node(node, op, &target_name(), current, new),
        ("", "persistentvolumeclaims") => match sub {
            Some("status") => admit_pvc_status(node, op, current, new),
            _ => Err("may only update PVC status".to_string()),
        },
        ("", "serviceaccounts") if op == Op::Create && sub == Some("token") => {
            admit_token_request(node, current, new)
        }
        ("coordination.k8s.io", "leases") => {
            if r.namespace() != Some(NODE_LEASE_NAMESPACE) {
                return Err(format!(
                    "can only access leases in the {NODE_LEASE_NAMESPACE:?} system namespace"
                ));
            }
            if target_name() != node {
                return Err(
                    "can only access node lease with the same name as the requesting node".into(),
                );
            }
            Ok(())
        }
        ("storage.k8s.io", "csinodes") => {
            if target_name() != node {
                return Err(
                    "can only access CSINode with the same name as the requesting node".into(),
                );
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

fn admit_pod(
    node: &str,
    op: Op,
    name: &str,
    current: Option<&Value>,
    new: Option<&Value>,
) -> Result<(), String> {
    match op {
        Op::Create => admit_mirror_pod_create(node, current, new),
        Op::Delete => {
            let pod = current.ok_or_else(|| format!("pods {name:?} not found"))?;
            if str_at(pod, &["spec", "nodeName"]) != node {
                return Err(format!(
                    "node {node:?} can only delete pods with spec.nodeName set to itself"
                ));
            }
            Ok(())
        }
        Op::Update => Err(format!(
            "unexpected operation {:?}, node {node:?} can only create and delete mirror pods",
            op.as_str()
        )),
    }
}

fn admit_mirror_pod_create(
    node: &str,
    node_obj: Option<&Value>,
    new: Option<&Value>,
) -> Result<(), String> {
    let pod = new.ok_or_else(|| "unexpected type: no pod in request".to_string())?;
    let annotations = map_at(pod, &["metadata", "annotations"]);
    if annotations.is_none_or(|a| !a.contains_key(MIRROR_POD_ANNOTATION)) {
        return Err(format!(
            "pod does not have {MIRROR_POD_ANNOTATION:?} annotation, node {node:?} can only create mirror pods"
        ));
    }
    if str_at(pod, &["spec", "nodeName"]) != node {
        return Err(format!(
            "node {node:?} can only create pods with spec.nodeName set to itself"
        ));
    }
    let owners = at(pod, &["metadata", "ownerReferences"])
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    match owners {
        [] => {
            return Err(format!(
                "node {node:?} can only create pods with an owner reference set to itself"
            ))
        }
        [owner] => {
            if str_at(owner, &["apiVersion"]) != "v1"
                || str_at(owner, &["kind"]) != "Node"
                || str_at(owner, &["name"]) != node
            {
                return Err(format!(
                    "node {node:?} can only create pods with an owner reference set to itself"
                ));
            }
            if owner.get("controller").and_then(Value::as_bool) != Some(true) {
                return Err(format!(
                    "node {node:?} can only create pods with a controller owner reference set to itself"
                ));
            }
            if owner.get("blockOwnerDeletion").and_then(Value::as_bool) == Some(true) {
                return Err(format!(
                    "node {node:?} must not set blockOwnerDeletion on an owner reference"
                ));
            }
            if let Some(n) = node_obj {
                let (want, got) = (str_at(owner, &["uid"]), str_at(n, &["metadata", "uid"]));
                if want != got {
                    return Err(format!(
                        "node {node} UID mismatch: expected {want} got {got}"
                    ));
                }
            }
        }
        _ => {
            return Err(format!(
                "node {node:?} can only create pods with a single owner reference set to itself"
            ))
        }
    }
    if !str_at(pod, &["spec", "serviceAccountName"]).is_empty() {
        return Err(format!(
            "node {node:?} can not create pods that reference a service account"
        ));
    }
    let refs = pod_references(pod);
    for (what, present) in [
        ("secrets", refs.secrets),
        ("configmaps", refs.configmaps),
        ("clustertrustbundles", refs.trust_bundles),
        ("persistentvolumeclaims", refs.pvcs),
    ] {
        if present {
            return Err(format!(
                "node {node:?} can not create pods that reference {what}"
            ));
        }
    }
    Ok(())
}

#[derive(Default)]
struct PodRefs {
    secrets: bool,
    configmaps: bool,
    trust_bundles: bool,
    pvcs: bool,
}

/// Which other API objects a pod spec references.
fn pod_references(pod: &Value) -> PodRefs {
    let mut refs = PodRefs::default();
    let spec = pod.get("spec");
    let list = |v: Option<&Value>, key: &str| -> Vec<Value> {
        v.and_then(|s| s.get(key))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    if !list(spec, "imagePullSecrets").is_empty() {
        refs.secrets = true;
    }
    for key in ["containers", "initContainers", "ephemeralContainers"] {
        for c in list(spec, key) {
            for e in list(Some(&c), "env") {
                let from = e.get("valueFrom");
                refs.secrets |= from.and_then(|f| f.get("secretKeyRef")).is_some_and(is_set);
                refs.configmaps |= from
                    .and_then(|f| f.get("configMapKeyRef"))
                    .is_some_and(is_set);
            }
            for e in list(Some(&c), "envFrom") {
                refs.secrets |= e.get("secretRef").is_some_and(is_set);
                refs.configmaps |= e.get("configMapRef").is_some_and(is_set);
            }
        }
    }
    for vol in list(spec, "volumes") {
        let Some(vol) = vol.as_object() else { continue };
        for (kind, src) in vol {
            if !is_set(src) {
                continue;
            }
            match kind.as_str() {
                "secret" => refs.secrets = true,
                "configMap" => refs.configmaps = true,
                "persistentVolumeClaim" => refs.pvcs = true,
                "projected" => {
                    for s in list(Some(src), "sources") {
                        refs.secrets |= s.get("secret").is_some_and(is_set);
                        refs.configmaps |= s.get("configMap").is_some_and(is_set);
                        refs.trust_bundles |= s.get("clusterTrustBundle").is_some_and(is_set);
                    }
                }
                // Volume plugins that name a secret (azureFile, cephfs,
                // cinder, csi, flexVolume, iscsi, rbd, scaleIO, storageos).
                _ => {
                    refs.secrets |= ["secretRef", "nodePublishSecretRef", "secretName"]
                        .iter()
                        .any(|k| src.get(*k).is_some_and(is_set));
                }
            }
        }
    }
    refs
}

fn admit_pod_status(
    node: &str,
    op: Op,
    current: Option<&Value>,
    new: Option<&Value>,
) -> Result<(), String> {
    if op != Op::Update {
        return Err(format!("unexpected operation {:?}", op.as_str()));
    }
    let old = current.ok_or_else(|| "unexpected type: no existing pod".to_string())?;
    if str_at(old, &["spec", "nodeName"]) != node {
        return Err(format!(
            "node {node:?} can only update pod status for pods with spec.nodeName set to itself"
        ));
    }
    let new = new.ok_or_else(|| "unexpected type: no pod in request".to_string())?;
    if labels(old) != labels(new) {
        return Err(format!(
            "node {node:?} cannot update labels through pod status"
        ));
    }
    if str_at(new, &["spec", "nodeName"]) != node {
        return Err(format!(
            "node {node:?} cannot change spec.nodeName of a pod"
        ));
    }
    let claims = |p: &Value| {
        at(p, &["status", "resourceClaimStatuses"])
            .filter(|v| is_set(v))
            .cloned()
    };
    if claims(old) != claims(new) {
        return Err(format!(
            "node {node:?} cannot update resource claim statues"
        ));
    }
    Ok(())
}

fn admit_eviction(
    node: &str,
    op: Op,
    pod_name: &str,
    current: Option<&Value>,
) -> Result<(), String> {
    if op != Op::Create {
        return Err(format!("unexpected operation {}", op.as_str()));
    }
    if pod_name.is_empty() {
        return Err("could not determine pod from request data".into());
    }
    let pod = current.ok_or_else(|| format!("pods {pod_name:?} not found"))?;
    if str_at(pod, &["spec", "nodeName"]) != node {
        return Err(format!(
            "node {node} can only evict pods with spec.nodeName set to itself"
        ));
    }
    Ok(())
}

fn admit_node(
    node: &str,
    op: Op,
    requested: &str,
    current: Option<&Value>,
    new: Option<&Value>,
) -> Result<(), String> {
    if requested != node {
        return Err(format!(
            "node {node:?} is not allowed to modify node {requested:?}"
        ));
    }
    match op {
        Op::Create => {
            let obj = new.ok_or_else(|| "unexpected type: no node in request".to_string())?;
            if at(obj, &["spec", "configSource"]).is_some_and(|v| !v.is_null()) {
                return Err(format!(
                    "node {node:?} is not allowed to create pods with a non-nil configSource"
                ));
            }
            let forbidden = forbidden_labels(&modified_labels(&labels(obj), &BTreeMap::new()));
            if !forbidden.is_empty() {
                return Err(format!(
                    "node {node:?} is not allowed to set the following labels: {}",
                    forbidden.join(", ")
                ));
            }
        }
        Op::Update => {
            let (old, obj) = match (current, new) {
                (Some(o), Some(n)) => (o, n),
                _ => return Err("unexpected type: update needs the current and new node".into()),
            };
            let config = |o: &Value| {
                at(o, &["spec", "configSource"])
                    .filter(|v| !v.is_null())
                    .cloned()
            };
            if config(obj).is_some() && config(obj) != config(old) {
                return Err(format!(
                    "node {node:?} is not allowed to update configSource to a new non-nil configSource"
                ));
            }
            let taints = |o: &Value| at(o, &["spec", "taints"]).filter(|v| is_set(v)).cloned();
            if taints(obj) != taints(old) {
                return Err(format!("node {node:?} is not allowed to modify taints"));
            }
            let forbidden = forbidden_labels(&modified_labels(&labels(obj), &labels(old)));
            if !forbidden.is_empty() {
                return Err(format!(
                    "is not allowed to modify labels: {}",
                    forbidden.join(", ")
                ));
            }
        }
        Op::Delete => {}
    }
    Ok(())
}

fn admit_pvc_status(
    node: &str,
    op: Op,
    current: Option<&Value>,
    new: Option<&Value>,
) -> Result<(), String> {
    if op != Op::Update {
        return Err(format!("unexpected operation {:?}", op.as_str()));
    }
    let (old, obj) = match (current, new) {
        (Some(o), Some(n)) => (o, n),
        _ => return Err("unexpected type: update needs the current and new claim".into()),
    };
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
            m.remove("managedFields");
        }
        if let Some(s) = v.get_mut("status").and_then(Value::as_object_mut) {
            for k in [
                "capacity",
                "conditions",
                "allocatedResourceStatuses",
                "allocatedResources",
            ] {
                s.remove(k);
            }
        }
        v
    };
    let (a, b) = (strip(old), strip(obj));
    if a != b {
        let mut changed: Vec<String> = Vec::new();
        diff_paths(&a, &b, "", &mut changed);
        return Err(format!(
            "node {node:?} is not allowed to update fields other than status.capacity and status.conditions: {}",
            changed.join(", ")
        ));
    }
    Ok(())
}

fn admit_token_request(node: &str, pod: Option<&Value>, new: Option<&Value>) -> Result<(), String> {
    let tr = new.ok_or_else(|| "unexpected type: no TokenRequest in request".to_string())?;
    let Some(r) = at(tr, &["spec", "boundObjectRef"]).filter(|v| v.is_object()) else {
        return Err("node requested token not bound to a pod".into());
    };
    if str_at(r, &["apiVersion"]) != "v1"
        || str_at(r, &["kind"]) != "Pod"
        || str_at(r, &["name"]).is_empty()
    {
        return Err("node requested token not bound to a pod".into());
    }
    let uid = str_at(r, &["uid"]);
    if uid.is_empty() {
        return Err("node requested token with a pod binding without a uid".into());
    }
    let pod = pod.ok_or_else(|| format!("pods {:?} not found", str_at(r, &["name"])))?;
    if str_at(pod, &["metadata", "uid"]) != uid {
        return Err(format!(
            "the UID in the bound object reference ({uid}) does not match the UID in record. The object might have been deleted and then recreated"
        ));
    }
    if str_at(pod, &["spec", "nodeName"]) != node {
        return Err("node requested token bound to a pod scheduled on a different node".into());
    }
    Ok(())
}

fn label_domain(key: &str) -> &str {
    key.split_once('/').map_or("", |(d, _)| d)
}

fn in_domain(domain: &str, parent: &str) -> bool {
    domain == parent
        || domain
            .strip_suffix(parent)
            .is_some_and(|rest| rest.ends_with('.'))
}

fn is_kubelet_label(key: &str) -> bool {
    KUBELET_LABELS.contains(&key)
        || KUBELET_LABEL_DOMAINS
            .iter()
            .any(|d| in_domain(label_domain(key), d))
}

/// Labels a node may not add, change or remove on its own Node object.
fn forbidden_labels(modified: &BTreeSet<String>) -> Vec<String> {
    modified
        .iter()
        .filter(|k| {
            let d = label_domain(k);
            let restricted = in_domain(d, NODE_RESTRICTION_DOMAIN);
            let kube = in_domain(d, "kubernetes.io") || in_domain(d, "k8s.io");
            restricted || (kube && !is_kubelet_label(k))
        })
        .cloned()
        .collect()
}

fn modified_labels(a: &BTreeMap<String, String>, b: &BTreeMap<String, String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (k, v) in a {
        if b.get(k) != Some(v) {
            out.insert(k.clone());
        }
    }
    for (k, v) in b {
        if a.get(k) != Some(v) {
            out.insert(k.clone());
        }
    }
    out
}

fn labels(obj: &Value) -> BTreeMap<String, String> {
    map_at(obj, &["metadata", "labels"])
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.get(*k))
}

fn str_at(v: &Value, path: &[&str]) -> String {
    at(v, path)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn map_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Map<String, Value>> {
    at(v, path).and_then(Value::as_object)
}

/// Not null and not an empty list/object (Kubernetes' nil-or-empty equality).
fn is_set(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        _ => true,
    }
}

fn diff_paths(a: &Value, b: &Value, prefix: &str, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                match (x.get(k), y.get(k)) {
                    (Some(l), Some(r)) => diff_paths(l, r, &p, out),
                    _ => out.push(p),
                }
            }
        }
        _ if a != b => out.push(prefix.to_string()),
        _ => {}
    }
}

#[cfg(test)]
#[path = "node_tests.rs"]
mod tests;
