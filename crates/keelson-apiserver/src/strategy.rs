//! Per-resource behaviour: defaults and validation, as pure functions of the object.
//! Generic metadata handling is in [`crate::meta`].

use serde_json::{json, Value};

use crate::catalog::ResourceDef;
use crate::error::{ApiError, Cause};
use crate::meta::{dns_label_problem, name_of, validate_metadata};

/// Fills in defaults the way the Kubernetes API server does for built-in kinds.
pub fn apply_defaults(def: &ResourceDef, obj: &mut Value, creating: bool) {
    match (def.group, def.kind) {
        ("", "Pod") => {
            if let Some(spec) = obj.get_mut("spec") {
                default_pod_spec(spec);
            }
            if creating {
                let qos = qos_class(obj.get("spec").unwrap_or(&Value::Null));
                let status = ensure_obj(obj, "status");
                status.entry("phase").or_insert(json!("Pending"));
                status.entry("qosClass").or_insert(json!(qos));
            }
        }
        ("apps", "Deployment") => {
            let spec = ensure_obj(obj, "spec");
            spec.entry("replicas").or_insert(json!(1));
            spec.entry("revisionHistoryLimit").or_insert(json!(10));
            spec.entry("progressDeadlineSeconds").or_insert(json!(600));
            let strategy = spec.entry("strategy").or_insert(json!({}));
            if let Some(s) = strategy.as_object_mut() {
                let ty = s.entry("type").or_insert(json!("RollingUpdate")).clone();
                if ty == "RollingUpdate" {
                    let ru = s.entry("rollingUpdate").or_insert(json!({}));
                    if let Some(ru) = ru.as_object_mut() {
                        ru.entry("maxUnavailable").or_insert(json!("25%"));
                        ru.entry("maxSurge").or_insert(json!("25%"));
                    }
                }
            }
            default_template(obj, "/spec/template/spec");
        }
        ("apps", "ReplicaSet") => {
            ensure_obj(obj, "spec").entry("replicas").or_insert(json!(1));
            default_template(obj, "/spec/template/spec");
        }
        ("apps", "StatefulSet") => {
            let spec = ensure_obj(obj, "spec");
            spec.entry("replicas").or_insert(json!(1));
            spec.entry("podManagementPolicy").or_insert(json!("OrderedReady"));
            spec.entry("revisionHistoryLimit").or_insert(json!(10));
            spec.entry("updateStrategy").or_insert(json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}));
            spec.entry("persistentVolumeClaimRetentionPolicy").or_insert(json!({"whenDeleted": "Retain", "whenScaled": "Retain"}));
            default_template(obj, "/spec/template/spec");
        }
        ("apps", "DaemonSet") => {
            let spec = ensure_obj(obj, "spec");
            spec.entry("revisionHistoryLimit").or_insert(json!(10));
            spec.entry("updateStrategy")
                .or_insert(json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}));
            default_template(obj, "/spec/template/spec");
        }
        ("batch", "Job") => {
            if creating {
                generate_job_selector(obj);
            }
            default_job_spec(ensure_value(obj, "spec"));
        }
        ("batch", "CronJob") => {
            let spec = ensure_obj(obj, "spec");
            spec.entry("concurrencyPolicy").or_insert(json!("Allow"));
            spec.entry("suspend").or_insert(json!(false));
            spec.entry("successfulJobsHistoryLimit").or_insert(json!(3));
            spec.entry("failedJobsHistoryLimit").or_insert(json!(1));
            if let Some(js) = obj.pointer_mut("/spec/jobTemplate/spec") {
                default_job_spec(js);
            }
        }
        ("", "Service") => {
            let spec = ensure_obj(obj, "spec");
            spec.entry("type").or_insert(json!("ClusterIP"));
            spec.entry("sessionAffinity").or_insert(json!("None"));
            if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
                for p in ports.iter_mut().filter_map(Value::as_object_mut) {
                    p.entry("protocol").or_insert(json!("TCP"));
                    if let Some(port) = p.get("port").cloned() {
                        p.entry("targetPort").or_insert(port);
                    }
                }
            }
        }
        ("", "Namespace") => {
            let name = name_of(obj).to_string();
            let labels = ensure_obj(ensure_value(obj, "metadata"), "labels");
            labels.insert("kubernetes.io/metadata.name".into(), json!(name));
            ensure_obj(obj, "spec").entry("finalizers").or_insert(json!(["kubernetes"]));
            ensure_obj(obj, "status").entry("phase").or_insert(json!("Active"));
        }
        ("", "Secret") => {
            obj.as_object_mut().map(|o| o.entry("type").or_insert(json!("Opaque")));
            // stringData is write-only: merged into data (base64), never stored.
            if let Some(sd) = obj.as_object_mut().and_then(|o| o.remove("stringData")) {
                if let Some(m) = sd.as_object() {
                    let data = ensure_obj(obj, "data");
                    for (k, v) in m {
                        if let Some(s) = v.as_str() {
                            data.insert(k.clone(), json!(base64_encode(s.as_bytes())));
                        }
                    }
                }
            }
        }
        ("scheduling.k8s.io", "PriorityClass") => crate::admission::priority::default_priority_class_fields(obj),
        ("", "PersistentVolumeClaim") if creating => {
            ensure_obj(obj, "status").entry("phase").or_insert(json!("Pending"));
        }
        ("", "PersistentVolume") if creating => {
            ensure_obj(obj, "status").entry("phase").or_insert(json!("Pending"));
            ensure_obj(obj, "spec").entry("persistentVolumeReclaimPolicy").or_insert(json!("Retain"));
        }
        _ => {}
    }
}

fn base64_encode(b: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(b)
}

fn ensure_value<'a>(obj: &'a mut Value, key: &str) -> &'a mut Value {
    if !obj.get(key).is_some_and(Value::is_object) {
        obj[key] = json!({});
    }
    &mut obj[key]
}

fn ensure_obj<'a>(obj: &'a mut Value, key: &str) -> &'a mut serde_json::Map<String, Value> {
    ensure_value(obj, key).as_object_mut().expect("ensured object")
}

fn default_template(obj: &mut Value, pointer: &str) {
    if let Some(spec) = obj.pointer_mut(pointer) {
        default_pod_spec(spec);
    }
}

/// Labels the Job's pods carry and its generated selector matches (Kubernetes'
/// `generateSelector`): the Job's uid and name, under the `batch.kubernetes.io/` keys and
/// the legacy bare ones.
fn generate_job_selector(obj: &mut Value) {
    if obj.pointer("/spec/manualSelector") == Some(&json!(true)) {
        return;
    }
    let uid = obj.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or("").to_string();
    let name = name_of(obj).to_string();
    let spec = ensure_value(obj, "spec");
    let template = ensure_value(spec, "template");
    let labels = ensure_obj(ensure_value(template, "metadata"), "labels");
    for (k, v) in [("batch.kubernetes.io/controller-uid", &uid), ("controller-uid", &uid), ("batch.kubernetes.io/job-name", &name), ("job-name", &name)] {
        labels.entry(k).or_insert(json!(v));
    }
    if spec.get("selector").is_none_or(Value::is_null) {
        spec["selector"] = json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}});
    }
}

fn default_job_spec(spec: &mut Value) {
    if let Some(s) = spec.as_object_mut() {
        // Both unset means one pod; parallelism alone leaves completions unset (a work queue).
        if s.get("completions").is_none() && s.get("parallelism").is_none() {
            s.insert("completions".into(), json!(1));
        }
        s.entry("parallelism").or_insert(json!(1));
        // With backoffLimitPerIndex the per-index limits rule: the Job-wide one is MaxInt32.
        let global = if s.get("backoffLimitPerIndex").is_some_and(|v| !v.is_null()) { i32::MAX } else { 6 };
        s.entry("backoffLimit").or_insert(json!(global));
        s.entry("completionMode").or_insert(json!("NonIndexed"));
        s.entry("suspend").or_insert(json!(false));
        if s.get("podFailurePolicy").is_none() {
            s.entry("podReplacementPolicy").or_insert(json!("TerminatingOrFailed"));
        }
        s.entry("manualSelector").or_insert(json!(false));
    }
    if let Some(ps) = spec.pointer_mut("/template/spec") {
        default_pod_spec(ps);
    }
}

fn default_pod_spec(spec: &mut Value) {
    let Some(s) = spec.as_object_mut() else { return };
    s.entry("restartPolicy").or_insert(json!("Always"));
    s.entry("dnsPolicy").or_insert(json!("ClusterFirst"));
    s.entry("terminationGracePeriodSeconds").or_insert(json!(30));
    s.entry("schedulerName").or_insert(json!("default-scheduler"));
    s.entry("securityContext").or_insert(json!({}));
    s.entry("enableServiceLinks").or_insert(json!(true));
    s.entry("serviceAccountName").or_insert(json!("default"));
    for list in ["containers", "initContainers"] {
        if let Some(cs) = s.get_mut(list).and_then(Value::as_array_mut) {
            for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                let image = c.get("image").and_then(Value::as_str).unwrap_or("").to_string();
                c.entry("imagePullPolicy").or_insert(json!(default_pull_policy(&image)));
                c.entry("terminationMessagePath").or_insert(json!("/dev/termination-log"));
                c.entry("terminationMessagePolicy").or_insert(json!("File"));
                c.entry("resources").or_insert(json!({}));
                if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
                    for p in ports.iter_mut().filter_map(Value::as_object_mut) {
                        p.entry("protocol").or_insert(json!("TCP"));
                    }
                }
            }
        }
    }
}

/// `Always` for `:latest` or untagged images, `IfNotPresent` otherwise.
pub fn default_pull_policy(image: &str) -> &'static str {
    let without_digest = image.split('@').next().unwrap_or("");
    let last = without_digest.rsplit('/').next().unwrap_or("");
    if image.contains('@') {
        return "IfNotPresent";
    }
    match last.split_once(':') {
        Some((_, "latest")) | None => "Always",
        Some(_) => "IfNotPresent",
    }
}

/// Guaranteed / Burstable / BestEffort from the containers' requests and limits.
pub fn qos_class(spec: &Value) -> &'static str {
    let cs: Vec<&Value> = spec.get("containers").and_then(Value::as_array).map(|a| a.iter().collect()).unwrap_or_default();
    let mut any = false;
    let mut guaranteed = !cs.is_empty();
    for c in cs {
        let req = c.pointer("/resources/requests").and_then(Value::as_object);
        let lim = c.pointer("/resources/limits").and_then(Value::as_object);
        if req.is_some_and(|r| !r.is_empty()) || lim.is_some_and(|l| !l.is_empty()) {
            any = true;
        }
        for r in ["cpu", "memory"] {
            let l = lim.and_then(|l| l.get(r));
            let q = req.and_then(|q| q.get(r)).or(l);
            if l.is_none() || q != l {
                guaranteed = false;
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// Validates an object (after defaults); 422 with every problem found.
pub fn validate(def: &ResourceDef, obj: &Value) -> Result<(), ApiError> {
    let mut causes = validate_metadata(def, obj);
    match (def.group, def.kind) {
        ("", "Pod") => validate_pod_spec(obj.get("spec"), "spec", &mut causes),
        ("apps", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet") => validate_workload(obj, &mut causes),
        ("batch", "Job") => validate_job_spec(obj.get("spec"), "spec", &mut causes),
        ("batch", "CronJob") => {
            if obj.pointer("/spec/schedule").and_then(Value::as_str).unwrap_or("").is_empty() {
                causes.push(Cause::required("spec.schedule"));
            }
            validate_job_spec(obj.pointer("/spec/jobTemplate/spec"), "spec.jobTemplate.spec", &mut causes);
        }
        ("", "Service") => validate_service(obj, &mut causes),
        ("scheduling.k8s.io", "PriorityClass") => crate::admission::priority::validate_priority_class(obj, &mut causes),
        ("", kind @ ("ConfigMap" | "Secret")) => {
            if let Some(cause) = data_size_problem(kind, obj) {
                causes.push(cause);
            }
            for field in ["data", "binaryData", "stringData"] {
                if let Some(m) = obj.get(field).and_then(Value::as_object) {
                    for k in m.keys() {
                        let ok = !k.is_empty() && k.len() <= 253 && k.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b));
                        if !ok {
                            causes.push(Cause::invalid(format!("{field}[{k}]"), format!("Invalid value: {k:?}: a valid config key must consist of alphanumeric characters, '-', '_' or '.'")));
                        }
                    }
                }
            }
        }
        _ => {}
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(def.kind, def.group, name_of(obj), causes))
    }
}

/// The most a ConfigMap's or Secret's data may hold (Kubernetes' `MaxSecretSize`, which
/// ConfigMaps share).
pub const MAX_DATA_BYTES: usize = 1 << 20;

/// Too much data in a ConfigMap (`data` and `binaryData`) or Secret (`data`, decoded,
/// and `stringData`), counted as Kubernetes counts it.
fn data_size_problem(kind: &str, obj: &Value) -> Option<Cause> {
    let values = |field: &str| obj.get(field).and_then(Value::as_object).into_iter().flat_map(|m| m.values()).filter_map(Value::as_str);
    let decoded = |b64: &str| (b64.len() / 4 * 3).saturating_sub(b64.bytes().rev().take_while(|&b| b == b'=').count());
    let (total, field) = if kind == "ConfigMap" {
        (values("data").map(str::len).sum::<usize>() + values("binaryData").map(decoded).sum::<usize>(), "")
    } else {
        (values("data").map(decoded).sum::<usize>() + values("stringData").map(str::len).sum::<usize>(), "data")
    };
    (total > MAX_DATA_BYTES).then(|| Cause::too_long(field, MAX_DATA_BYTES))
}

/// Validates an update against the stored object (fields that may not change); 422.
pub fn validate_update(def: &ResourceDef, old: &Value, new: &Value) -> Result<(), ApiError> {
    let mut causes = Vec::new();
    if (def.group, def.kind) == ("scheduling.k8s.io", "PriorityClass") {
        crate::admission::priority::validate_priority_class_update(old, new, &mut causes);
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(def.kind, def.group, name_of(new), causes))
    }
}

fn validate_pod_spec(spec: Option<&Value>, path: &str, causes: &mut Vec<Cause>) {
    let Some(spec) = spec else {
        causes.push(Cause::required(path));
        return;
    };
    let containers = spec.get("containers").and_then(Value::as_array);
    match containers {
        None => causes.push(Cause::required(format!("{path}.containers"))),
        Some(cs) if cs.is_empty() => causes.push(Cause::required(format!("{path}.containers"))),
        Some(_) => {}
    }
    let mut seen = std::collections::HashSet::new();
    for list in ["initContainers", "containers"] {
        for (i, c) in spec.get(list).and_then(Value::as_array).into_iter().flatten().enumerate() {
            let p = format!("{path}.{list}[{i}]");
            let name = c.get("name").and_then(Value::as_str).unwrap_or("");
            if name.is_empty() {
                causes.push(Cause::required(format!("{p}.name")));
            } else if let Some(e) = dns_label_problem(name) {
                causes.push(Cause::invalid(format!("{p}.name"), format!("Invalid value: {name:?}: {e}")));
            } else if !seen.insert(name.to_string()) {
                causes.push(Cause { reason: "FieldValueDuplicate", field: format!("{p}.name"), message: format!("Duplicate value: {name:?}") });
            }
            if c.get("image").and_then(Value::as_str).unwrap_or("").trim().is_empty() {
                causes.push(Cause::required(format!("{p}.image")));
            }
            for (j, port) in c.get("ports").and_then(Value::as_array).into_iter().flatten().enumerate() {
                match port.get("containerPort").and_then(Value::as_i64) {
                    Some(n) if (1..=65535).contains(&n) => {}
                    Some(n) => causes.push(Cause::invalid(format!("{p}.ports[{j}].containerPort"), format!("Invalid value: {n}: must be between 1 and 65535, inclusive"))),
                    None => causes.push(Cause::required(format!("{p}.ports[{j}].containerPort"))),
                }
            }
        }
    }
    if let Some(rp) = spec.get("restartPolicy").and_then(Value::as_str) {
        if !["Always", "OnFailure", "Never"].contains(&rp) {
            causes.push(Cause { reason: "FieldValueNotSupported", field: format!("{path}.restartPolicy"), message: format!("Unsupported value: {rp:?}: supported values: \"Always\", \"OnFailure\", \"Never\"") });
        }
    }
}

fn validate_selector_matches_template(obj: &Value, causes: &mut Vec<Cause>) {
    let selector = obj.pointer("/spec/selector");
    let labels = obj.pointer("/spec/template/metadata/labels").and_then(Value::as_object);
    match selector.and_then(|s| s.get("matchLabels")).and_then(Value::as_object) {
        Some(ml) => {
            for (k, v) in ml {
                if labels.and_then(|l| l.get(k)) != Some(v) {
                    causes.push(Cause::invalid("spec.template.metadata.labels", "Invalid value: `selector` does not match template `labels`"));
                    return;
                }
            }
        }
        None if selector.and_then(|s| s.get("matchExpressions")).is_none() => causes.push(Cause::required("spec.selector")),
        None => {}
    }
}

fn validate_workload(obj: &Value, causes: &mut Vec<Cause>) {
    validate_selector_matches_template(obj, causes);
    if let Some(r) = obj.pointer("/spec/replicas") {
        if r.as_i64().is_none_or(|n| n < 0) {
            causes.push(Cause::invalid("spec.replicas", format!("Invalid value: {r}: must be greater than or equal to 0")));
        }
    }
    validate_pod_spec(obj.pointer("/spec/template/spec"), "spec.template.spec", causes);
}

fn validate_job_spec(spec: Option<&Value>, path: &str, causes: &mut Vec<Cause>) {
    let Some(spec) = spec else {
        causes.push(Cause::required(path));
        return;
    };
    let ps = spec.pointer("/template/spec");
    validate_pod_spec(ps, &format!("{path}.template.spec"), causes);
    if let Some(rp) = ps.and_then(|p| p.get("restartPolicy")).and_then(Value::as_str) {
        if rp == "Always" {
            causes.push(Cause { reason: "FieldValueNotSupported", field: format!("{path}.template.spec.restartPolicy"), message: "Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\"".into() });
        }
    }
}

fn validate_service(obj: &Value, causes: &mut Vec<Cause>) {
    let ty = obj.pointer("/spec/type").and_then(Value::as_str).unwrap_or("ClusterIP");
    if !["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"].contains(&ty) {
        causes.push(Cause { reason: "FieldValueNotSupported", field: "spec.type".into(), message: format!("Unsupported value: {ty:?}") });
    }
    let ports = obj.pointer("/spec/ports").and_then(Value::as_array);
    if ty != "ExternalName" && ports.is_none_or(|p| p.is_empty()) && obj.pointer("/spec/clusterIP") != Some(&json!("None")) {
        causes.push(Cause::required("spec.ports"));
    }
    if ty == "ExternalName" && obj.pointer("/spec/clusterIP").and_then(Value::as_str).is_some_and(|ip| !ip.is_empty()) {
        causes.push(Cause { reason: "FieldValueForbidden", field: "spec.clusterIPs".into(), message: "Forbidden: may not be set for ExternalName services".into() });
    }
    if obj.pointer("/spec/healthCheckNodePort").is_some_and(|n| !n.is_null()) && !(ty == "LoadBalancer" && obj.pointer("/spec/externalTrafficPolicy").and_then(Value::as_str) == Some("Local")) {
        causes.push(Cause::invalid("spec.healthCheckNodePort", "Invalid value: may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'"));
    }
    for (i, p) in ports.into_iter().flatten().enumerate() {
        if !["NodePort", "LoadBalancer"].contains(&ty) && p.get("nodePort").is_some_and(|n| !n.is_null()) {
            causes.push(Cause { reason: "FieldValueForbidden", field: format!("spec.ports[{i}].nodePort"), message: format!("Forbidden: may not be used when `type` is '{ty}'") });
        }
        match p.get("port").and_then(Value::as_i64) {
            Some(n) if (1..=65535).contains(&n) => {}
            _ => causes.push(Cause::invalid(format!("spec.ports[{i}].port"), "Invalid value: must be between 1 and 65535, inclusive")),
        }
        if ports.is_some_and(|ps| ps.len() > 1) && p.get("name").and_then(Value::as_str).unwrap_or("").is_empty() {
            causes.push(Cause::required(format!("spec.ports[{i}].name")));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::lookup;

    #[test]
    fn pod_defaults_match_kubernetes() {
        let def = lookup("", "v1", "pods").unwrap();
        let mut p = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "main", "image": "nginx", "ports": [{"containerPort": 80}]}]}});
        apply_defaults(def, &mut p, true);
        assert_eq!(p["spec"]["restartPolicy"], "Always");
        assert_eq!(p["spec"]["dnsPolicy"], "ClusterFirst");
        assert_eq!(p["spec"]["terminationGracePeriodSeconds"], 30);
        assert_eq!(p["spec"]["containers"][0]["imagePullPolicy"], "Always");
        assert_eq!(p["spec"]["containers"][0]["ports"][0]["protocol"], "TCP");
        assert_eq!(p["status"]["phase"], "Pending");
        assert_eq!(p["status"]["qosClass"], "BestEffort");
        assert!(validate(def, &p).is_ok());
    }

    #[test]
    fn jobs_get_a_generated_selector_and_kubernetes_defaults() {
        let def = lookup("batch", "v1", "jobs").unwrap();
        let mut j = json!({"metadata": {"name": "pi", "uid": "u-1"}, "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}});
        apply_defaults(def, &mut j, true);
        assert_eq!(j["spec"]["selector"], json!({"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}}));
        let labels = &j["spec"]["template"]["metadata"]["labels"];
        assert_eq!((labels["batch.kubernetes.io/job-name"].as_str(), labels["job-name"].as_str()), (Some("pi"), Some("pi")));
        assert_eq!((labels["batch.kubernetes.io/controller-uid"].as_str(), labels["controller-uid"].as_str()), (Some("u-1"), Some("u-1")));
        assert_eq!((j["spec"]["completions"].as_i64(), j["spec"]["parallelism"].as_i64(), j["spec"]["backoffLimit"].as_i64()), (Some(1), Some(1), Some(6)));
        assert_eq!(j["spec"]["podReplacementPolicy"], "TerminatingOrFailed");
        assert!(validate(def, &j).is_ok());
        let mut per_index = json!({"metadata": {"name": "pi", "uid": "u-3"}, "spec": {"completionMode": "Indexed", "completions": 3, "backoffLimitPerIndex": 1, "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}});
        apply_defaults(def, &mut per_index, true);
        assert_eq!(per_index["spec"]["backoffLimit"].as_i64(), Some(i64::from(i32::MAX)), "per-index limits: no Job-wide one");
        let mut queue = json!({"metadata": {"name": "q", "uid": "u-2"}, "spec": {"parallelism": 3, "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}});
        apply_defaults(def, &mut queue, true);
        assert!(queue["spec"].get("completions").is_none(), "parallelism alone is a work queue");
        let mut manual = json!({"metadata": {"name": "m", "uid": "u-3"}, "spec": {"manualSelector": true, "selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}}}}});
        apply_defaults(def, &mut manual, true);
        assert_eq!(manual["spec"]["selector"], json!({"matchLabels": {"a": "b"}}));
        assert!(manual["spec"]["template"]["metadata"]["labels"].get("job-name").is_none());
    }

    #[test]
    fn pull_policy_and_qos() {
        assert_eq!(default_pull_policy("nginx:1.27"), "IfNotPresent");
        assert_eq!(default_pull_policy("localhost:5000/nginx"), "Always");
        assert_eq!(default_pull_policy("nginx:latest"), "Always");
        assert_eq!(default_pull_policy("nginx@sha256:abc"), "IfNotPresent");
        let g = json!({"containers": [{"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]});
        assert_eq!(qos_class(&g), "Guaranteed");
        let b = json!({"containers": [{"resources": {"requests": {"cpu": "1"}}}]});
        assert_eq!(qos_class(&b), "Burstable");
    }

    #[test]
    fn invalid_objects_list_every_cause() {
        let def = lookup("apps", "v1", "deployments").unwrap();
        let d = json!({"metadata": {"name": "web"}, "spec": {"replicas": -1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "other"}}, "spec": {"containers": [{"name": "Main"}]}}}});
        let err = validate(def, &d).unwrap_err();
        let ApiError::Invalid { causes, .. } = &err else { panic!("{err:?}") };
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, ["spec.template.metadata.labels", "spec.replicas", "spec.template.spec.containers[0].name", "spec.template.spec.containers[0].image"]);
        let job = lookup("batch", "v1", "jobs").unwrap();
        let j = json!({"metadata": {"name": "j"}, "spec": {"template": {"spec": {"restartPolicy": "Always", "containers": [{"name": "a", "image": "b"}]}}}});
        assert!(validate(job, &j).is_err());
    }

    #[test]
    fn data_and_annotations_are_held_to_kubernetes_sizes() {
        let too_long = |def: &ResourceDef, obj: &Value| match validate(def, obj) {
            Ok(()) => None,
            Err(ApiError::Invalid { causes, .. }) => causes.iter().find(|c| c.reason == "FieldValueTooLong").map(|c| c.field.clone()),
            Err(e) => panic!("{e:?}"),
        };
        let cm = lookup("", "v1", "configmaps").unwrap();
        let half = "x".repeat(MAX_DATA_BYTES / 2);
        assert_eq!(too_long(cm, &json!({"metadata": {"name": "c"}, "data": {"a": half, "b": half}})), None);
        assert_eq!(too_long(cm, &json!({"metadata": {"name": "c"}, "data": {"a": half, "b": format!("{half}y")}})), Some(String::new()));
        // binaryData counts decoded: 4 base64 characters are 3 bytes.
        let b64 = "QUJD".repeat(MAX_DATA_BYTES / 3 / 2);
        assert_eq!(too_long(cm, &json!({"metadata": {"name": "c"}, "data": {"a": half}, "binaryData": {"b": b64}})), None);
        let secret = lookup("", "v1", "secrets").unwrap();
        let full = "QUJD".repeat(MAX_DATA_BYTES / 3);
        assert_eq!(too_long(secret, &json!({"metadata": {"name": "s"}, "data": {"a": full}})), None);
        assert_eq!(too_long(secret, &json!({"metadata": {"name": "s"}, "data": {"a": full, "b": "QUJD"}})), Some("data".into()));
        assert_eq!(too_long(secret, &json!({"metadata": {"name": "s"}, "data": {"a": full}, "stringData": {"b": "xy"}})), Some("data".into()));
        let annotations = |n: usize| json!({"metadata": {"name": "c", "annotations": {"a": "x".repeat(n)}}});
        assert_eq!(too_long(cm, &annotations(crate::meta::TOTAL_ANNOTATION_BYTES - 1)), None);
        assert_eq!(too_long(cm, &annotations(crate::meta::TOTAL_ANNOTATION_BYTES)), Some("metadata.annotations".into()));
    }

    #[test]
    fn service_defaults_and_validation() {
        let def = lookup("", "v1", "services").unwrap();
        let mut s = json!({"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}});
        apply_defaults(def, &mut s, true);
        assert_eq!(s["spec"]["type"], "ClusterIP");
        assert_eq!(s["spec"]["ports"][0]["targetPort"], 80);
        assert!(validate(def, &s).is_ok());
        let bad = json!({"metadata": {"name": "web"}, "spec": {"ports": [{"port": 0}, {"port": 81}]}});
        let ApiError::Invalid { causes, .. } = validate(def, &bad).unwrap_err() else { panic!() };
        assert_eq!(causes.len(), 3);
    }
}
