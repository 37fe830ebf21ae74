//! Mutating admission of built-in plugins that Kubernetes enables by default, as pure
//! functions of the object being created: DefaultTolerationSeconds and ServiceAccount
//! (the token volume every pod mounts unless it opts out), and DefaultStorageClass (a new
//! claim that names no class gets the default one; [`default_storage_class`] picks it).
//! Priority (PriorityClass resolution and rules) is in [`priority`].

pub mod priority;

use serde_json::{json, Value};

use crate::catalog::ResourceDef;

/// The annotation that makes a StorageClass the default (and its beta spelling).
pub const DEFAULT_CLASS_ANNOTATION: &str = "storageclass.kubernetes.io/is-default-class";
const BETA_DEFAULT_CLASS_ANNOTATION: &str = "storageclass.beta.kubernetes.io/is-default-class";

/// Kubernetes' DefaultStorageClass plugin's choice among `classes`: the classes annotated
/// as default, the newest of them when there are several (by creationTimestamp, then
/// name, as Kubernetes 1.26+ does); `None` when no class is the default.
pub fn default_storage_class(classes: &[Value]) -> Option<String> {
    let is_default = |c: &&Value| {
        [DEFAULT_CLASS_ANNOTATION, BETA_DEFAULT_CLASS_ANNOTATION]
            .iter()
            .any(|a| c.pointer("/metadata/annotations").and_then(|m| m.get(*a)).and_then(Value::as_str) == Some("true"))
    };
    let field = |c: &Value, f: &str| c.pointer(&format!("/metadata/{f}")).and_then(Value::as_str).unwrap_or("").to_string();
    classes
        .iter()
        .filter(is_default)
        .max_by(|a, b| field(a, "creationTimestamp").cmp(&field(b, "creationTimestamp")).then_with(|| field(b, "name").cmp(&field(a, "name"))))
        .map(|c| field(c, "name"))
}

/// DefaultStorageClass on a new claim: one without `spec.storageClassName` (absent or
/// null; an empty string asks for no class) gets `class`. Returns whether it changed.
pub fn set_default_storage_class(claim: &mut Value, class: Option<&str>) -> bool {
    let Some(class) = class else { return false };
    let Some(spec) = claim.get_mut("spec").and_then(Value::as_object_mut) else { return false };
    if spec.get("storageClassName").is_some_and(|v| !v.is_null()) {
        return false;
    }
    spec.insert("storageClassName".into(), json!(class));
    true
}

/// Whether a new claim needs the DefaultStorageClass plugin (it names no class).
pub fn wants_default_storage_class(def: &ResourceDef, obj: &Value) -> bool {
    (def.group, def.kind) == ("", "PersistentVolumeClaim") && obj.pointer("/spec/storageClassName").is_none_or(Value::is_null)
}

/// DefaultTolerationSeconds' `--default-not-ready-toleration-seconds` and
/// `--default-unreachable-toleration-seconds`.
pub const DEFAULT_TOLERATION_SECONDS: i64 = 300;

const NOT_READY: &str = "node.kubernetes.io/not-ready";
const UNREACHABLE: &str = "node.kubernetes.io/unreachable";

/// Where the ServiceAccount plugin mounts the token, CA and namespace in each container.
pub const SERVICE_ACCOUNT_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
const ACCESS_VOLUME_PREFIX: &str = "kube-api-access-";

/// Admission on create: what the enabled plugins change in `obj`. `suffix` names the
/// service-account volume (`kube-api-access-<suffix>`).
///
/// `trace` is the creating request's context when its trace is recorded: a pod keeps it
/// in [`keelson_tracecontext::POD_ANNOTATION`] so the scheduler and the node agent continue
/// that trace (a value the client wrote there is replaced; without a trace it is kept).
pub fn admit_create(def: &ResourceDef, obj: &mut Value, suffix: &str, trace: Option<keelson_tracecontext::TraceParent>) {
    if (def.group, def.kind) == ("", "Pod") {
        default_toleration_seconds(obj, DEFAULT_TOLERATION_SECONDS, DEFAULT_TOLERATION_SECONDS);
        mount_service_account_token(obj, suffix);
        if let Some(trace) = trace {
            record_creation_trace(obj, trace);
        }
    }
}

fn record_creation_trace(obj: &mut Value, trace: keelson_tracecontext::TraceParent) {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else { return };
    let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
    if !annotations.is_object() {
        *annotations = json!({});
    }
    if let Some(a) = annotations.as_object_mut() {
        a.insert(keelson_tracecontext::POD_ANNOTATION.into(), Value::String(trace.to_string()));
    }
}

/// The ServiceAccount plugin's other mutation: a pod without `imagePullSecrets` gets
/// those of its ServiceAccount `sa`.
pub fn copy_service_account_pull_secrets(pod: &mut Value, sa: &Value) {
    let Some(secrets) = sa.get("imagePullSecrets").and_then(Value::as_array).filter(|a| !a.is_empty()) else { return };
    if let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) {
        let has = spec.get("imagePullSecrets").and_then(Value::as_array).is_some_and(|a| !a.is_empty());
        if !has {
            spec.insert("imagePullSecrets".into(), Value::Array(secrets.clone()));
        }
    }
}

/// Kubernetes' ServiceAccount plugin, its mutating part: the pod runs as `default` unless
/// it names an account, and unless `automountServiceAccountToken` is false it gets a
/// projected volume (a bound token that expires after 3607 s, the `kube-root-ca.crt`
/// CA and the namespace) mounted read-only at [`SERVICE_ACCOUNT_MOUNT_PATH`] in every
/// container and init container that does not already mount something there.
/// (Kubernetes also honours the ServiceAccount's own `automountServiceAccountToken`;
/// here only the pod's is read.)
pub fn mount_service_account_token(pod: &mut Value, suffix: &str) {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else { return };
    spec.entry("serviceAccountName").or_insert(json!("default"));
    if spec.get("automountServiceAccountToken") == Some(&json!(false)) {
        return;
    }
    let volumes = spec.entry("volumes").or_insert(json!([]));
    let Some(volumes) = volumes.as_array_mut() else { return };
    let existing = volumes.iter().find_map(|v| v.get("name").and_then(Value::as_str).filter(|n| n.starts_with(ACCESS_VOLUME_PREFIX)).map(str::to_string));
    let name = match existing {
        Some(n) => n,
        None => {
            let name = format!("{ACCESS_VOLUME_PREFIX}{suffix}");
            volumes.push(json!({"name": name, "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
            ]}}));
            name
        }
    };
    for list in ["initContainers", "containers"] {
        let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) else { continue };
        for c in containers.iter_mut().filter_map(Value::as_object_mut) {
            let mounts = c.entry("volumeMounts").or_insert(json!([]));
            let Some(mounts) = mounts.as_array_mut() else { continue };
            if mounts.iter().any(|m| m.get("mountPath").and_then(Value::as_str) == Some(SERVICE_ACCOUNT_MOUNT_PATH)) {
                continue;
            }
            mounts.push(json!({"name": name, "mountPath": SERVICE_ACCOUNT_MOUNT_PATH, "readOnly": true}));
        }
    }
}

/// Kubernetes' DefaultTolerationSeconds plugin: a pod that does not already tolerate
/// `node.kubernetes.io/not-ready:NoExecute` (or `unreachable`) gets an `Exists`
/// toleration of it for the given seconds. A toleration with that key, or an empty key,
/// and effect NoExecute or none counts as tolerating it.
pub fn default_toleration_seconds(pod: &mut Value, not_ready_seconds: i64, unreachable_seconds: i64) {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else { return };
    let existing: &[Value] = spec.get("tolerations").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
    let tolerates = |key: &str| {
        existing.iter().any(|t| {
            let k = t.get("key").and_then(Value::as_str).unwrap_or("");
            let e = t.get("effect").and_then(Value::as_str).unwrap_or("");
            (k == key || k.is_empty()) && (e == "NoExecute" || e.is_empty())
        })
    };
    let mut added = Vec::new();
    for (key, seconds) in [(NOT_READY, not_ready_seconds), (UNREACHABLE, unreachable_seconds)] {
        if !tolerates(key) {
            added.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}));
        }
    }
    if added.is_empty() {
        return;
    }
    match spec.get_mut("tolerations").and_then(Value::as_array_mut) {
        Some(list) => list.extend(added),
        None => {
            spec.insert("tolerations".into(), Value::Array(added));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(name: &str, created: &str, default: Option<&str>) -> Value {
        let mut c = json!({"metadata": {"name": name, "creationTimestamp": created}, "provisioner": "p"});
        if let Some(v) = default {
            c["metadata"]["annotations"] = json!({DEFAULT_CLASS_ANNOTATION: v});
        }
        c
    }

    #[test]
    fn the_newest_default_class_is_chosen() {
        let classes = [class("slow", "2026-01-01T00:00:00Z", Some("true")), class("fast", "2026-02-01T00:00:00Z", Some("true")), class("other", "2026-03-01T00:00:00Z", Some("false")), class("plain", "2026-04-01T00:00:00Z", None)];
        assert_eq!(default_storage_class(&classes).as_deref(), Some("fast"));
        assert_eq!(default_storage_class(&classes[2..]), None);
        let beta = json!({"metadata": {"name": "b", "annotations": {BETA_DEFAULT_CLASS_ANNOTATION: "true"}}});
        assert_eq!(default_storage_class(&[beta]).as_deref(), Some("b"));
    }

    #[test]
    fn only_a_claim_without_a_class_gets_the_default() {
        let def = crate::catalog::lookup("", "v1", "persistentvolumeclaims").unwrap();
        let mut none = json!({"spec": {"resources": {"requests": {"storage": "1Gi"}}}});
        let mut null = json!({"spec": {"storageClassName": null}});
        let mut empty = json!({"spec": {"storageClassName": ""}});
        let mut named = json!({"spec": {"storageClassName": "fast"}});
        assert!(wants_default_storage_class(def, &none) && wants_default_storage_class(def, &null));
        assert!(!wants_default_storage_class(def, &empty) && !wants_default_storage_class(def, &named));
        assert!(set_default_storage_class(&mut none, Some("local-path")));
        assert_eq!(none["spec"]["storageClassName"], "local-path");
        assert!(set_default_storage_class(&mut null, Some("local-path")));
        assert!(!set_default_storage_class(&mut empty, Some("local-path")));
        assert!(!set_default_storage_class(&mut named, Some("local-path")));
        let mut without = json!({"spec": {}});
        assert!(!set_default_storage_class(&mut without, None), "no default class: left alone");
        assert!(without["spec"].get("storageClassName").is_none());
    }

    fn admitted(tolerations: Value) -> Value {
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}], "tolerations": tolerations}});
        if tolerations.is_null() {
            pod["spec"].as_object_mut().unwrap().remove("tolerations");
        }
        admit_create(crate::catalog::lookup("", "v1", "pods").unwrap(), &mut pod, "x2b4z", None);
        pod["spec"]["tolerations"].clone()
    }

    fn keys(tolerations: &Value) -> Vec<(String, Option<i64>)> {
        tolerations
            .as_array()
            .unwrap()
            .iter()
            .map(|t| (t["key"].as_str().unwrap_or("").to_string(), t["tolerationSeconds"].as_i64()))
            .collect()
    }

    #[test]
    fn a_pod_without_tolerations_gets_both_for_300_seconds() {
        let t = admitted(Value::Null);
        assert_eq!(
            t,
            json!([
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            ])
        );
    }

    #[test]
    fn existing_tolerations_of_a_key_are_kept_and_not_doubled() {
        let t = admitted(json!([{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 2}, {"key": "gpu", "operator": "Exists"}]));
        assert_eq!(keys(&t), [("node.kubernetes.io/unreachable".into(), Some(2)), ("gpu".into(), None), ("node.kubernetes.io/not-ready".into(), Some(300))]);
        // No effect means every effect; an empty key with no effect tolerates both.
        let t = admitted(json!([{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}]));
        assert_eq!(keys(&t), [("node.kubernetes.io/not-ready".into(), None), ("node.kubernetes.io/unreachable".into(), Some(300))]);
        let t = admitted(json!([{"operator": "Exists"}]));
        assert_eq!(keys(&t), [("".into(), None)]);
    }

    #[test]
    fn a_toleration_of_another_effect_does_not_count() {
        let t = admitted(json!([{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoSchedule"}]));
        assert_eq!(keys(&t).len(), 3);
    }

    #[test]
    fn only_pods_are_changed() {
        let mut rs = json!({"spec": {"template": {"spec": {}}}});
        admit_create(crate::catalog::lookup("apps", "v1", "replicasets").unwrap(), &mut rs, "x2b4z", Some(TRACE.parse().unwrap()));
        assert_eq!(rs, json!({"spec": {"template": {"spec": {}}}}));
    }

    const TRACE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_pod_created_in_a_trace_keeps_its_context_for_later_actors() {
        let pods = crate::catalog::lookup("", "v1", "pods").unwrap();
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
        admit_create(pods, &mut pod, "x2b4z", Some(TRACE.parse().unwrap()));
        assert_eq!(pod["metadata"]["annotations"][keelson_tracecontext::POD_ANNOTATION], TRACE);
        // A client's own value is replaced by the request's; other annotations stay.
        let mut pod = json!({"metadata": {"name": "p", "annotations": {"a": "b", keelson_tracecontext::POD_ANNOTATION: "forged"}}, "spec": {"containers": []}});
        admit_create(pods, &mut pod, "x2b4z", Some(TRACE.parse().unwrap()));
        assert_eq!(pod["metadata"]["annotations"], json!({"a": "b", keelson_tracecontext::POD_ANNOTATION: TRACE}));
        // Outside a recorded trace nothing is added.
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"containers": []}});
        admit_create(pods, &mut pod, "x2b4z", None);
        assert!(pod["metadata"].get("annotations").is_none(), "{pod}");
    }

    fn access_mounts(c: &Value) -> Vec<&Value> {
        c["volumeMounts"].as_array().map(|m| m.iter().filter(|m| m["mountPath"] == SERVICE_ACCOUNT_MOUNT_PATH).collect()).unwrap_or_default()
    }

    #[test]
    fn a_pod_without_pull_secrets_gets_its_service_accounts() {
        let sa = json!({"metadata": {"name": "builder"}, "imagePullSecrets": [{"name": "regcred"}]});
        let mut pod = json!({"spec": {"serviceAccountName": "builder", "containers": [{"name": "a", "image": "x"}]}});
        copy_service_account_pull_secrets(&mut pod, &sa);
        assert_eq!(pod["spec"]["imagePullSecrets"], json!([{"name": "regcred"}]));
        let mut own = json!({"spec": {"imagePullSecrets": [{"name": "mine"}], "containers": []}});
        copy_service_account_pull_secrets(&mut own, &sa);
        assert_eq!(own["spec"]["imagePullSecrets"], json!([{"name": "mine"}]), "the pod's own are kept");
        let mut none = json!({"spec": {"containers": []}});
        copy_service_account_pull_secrets(&mut none, &json!({"metadata": {"name": "default"}}));
        assert!(none["spec"].get("imagePullSecrets").is_none());
    }

    #[test]
    fn every_container_mounts_the_service_account_volume() {
        let mut pod = json!({"spec": {"initContainers": [{"name": "i", "image": "x"}], "containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "x", "volumeMounts": [{"name": "w", "mountPath": "/w"}]}]}});
        mount_service_account_token(&mut pod, "x2b4z");
        assert_eq!(pod["spec"]["serviceAccountName"], "default");
        let volumes = pod["spec"]["volumes"].as_array().unwrap();
        assert_eq!(volumes.len(), 1);
        assert_eq!(volumes[0]["name"], "kube-api-access-x2b4z");
        let sources = volumes[0]["projected"]["sources"].as_array().unwrap();
        assert_eq!(sources[0]["serviceAccountToken"], json!({"expirationSeconds": 3607, "path": "token"}));
        assert_eq!(sources[1]["configMap"]["name"], "kube-root-ca.crt");
        assert_eq!(sources[2]["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"], "metadata.namespace");
        for c in pod["spec"]["initContainers"].as_array().unwrap().iter().chain(pod["spec"]["containers"].as_array().unwrap()) {
            let m = access_mounts(c);
            assert_eq!(m.len(), 1, "{c}");
            assert_eq!((m[0]["name"].as_str(), m[0]["readOnly"].as_bool()), (Some("kube-api-access-x2b4z"), Some(true)));
        }
        assert_eq!(pod["spec"]["containers"][1]["volumeMounts"].as_array().unwrap().len(), 2, "own mounts are kept");
    }

    #[test]
    fn opting_out_or_an_own_mount_at_the_path_is_respected() {
        let mut out = json!({"spec": {"serviceAccountName": "builder", "automountServiceAccountToken": false, "containers": [{"name": "a", "image": "x"}]}});
        mount_service_account_token(&mut out, "x2b4z");
        assert_eq!(out["spec"]["serviceAccountName"], "builder");
        assert!(out["spec"].get("volumes").is_none() && out["spec"]["containers"][0].get("volumeMounts").is_none(), "{out}");
        let own = json!({"name": "mine", "mountPath": SERVICE_ACCOUNT_MOUNT_PATH});
        let mut pod = json!({"spec": {"containers": [{"name": "a", "image": "x", "volumeMounts": [own.clone()]}]}});
        mount_service_account_token(&mut pod, "x2b4z");
        assert_eq!(pod["spec"]["containers"][0]["volumeMounts"], json!([own]));
    }
}
