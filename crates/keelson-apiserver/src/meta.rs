//! Object metadata on create and update: the generic part of every resource's strategy.
//! Pure functions; the caller supplies time, uid and random suffixes.

use serde_json::{json, Map, Value};

use crate::catalog::{NameRule, ResourceDef, Subresource};
use crate::error::{ApiError, Cause};

/// What the server decides for a new object besides its content.
pub struct Minted {
    /// RFC 3339 creation time.
    pub now: String,
    pub uid: String,
    /// Five characters appended to `generateName`.
    pub suffix: String,
}

pub fn name_of(obj: &Value) -> &str {
    obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("")
}

pub fn namespace_of(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/namespace").and_then(Value::as_str).filter(|s| !s.is_empty())
}

fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    obj["metadata"].as_object_mut().expect("metadata is an object")
}

/// Checks `apiVersion`/`kind` of a request body against the resource (empty = filled in).
pub fn check_type(def: &ResourceDef, obj: &mut Value) -> Result<(), ApiError> {
    if !obj.is_object() {
        return Err(ApiError::BadRequest("the request body must be a JSON object".into()));
    }
    let want_av = def.api_version();
    match obj.get("apiVersion").and_then(Value::as_str) {
        None | Some("") => obj["apiVersion"] = json!(want_av),
        Some(av) if av == want_av => {}
        Some(av) => {
            return Err(ApiError::BadRequest(format!(
                "the API version in the data ({av}) does not match the expected API version ({want_av})"
            )))
        }
    }
    match obj.get("kind").and_then(Value::as_str) {
        None | Some("") => obj["kind"] = json!(def.kind),
        Some(k) if k == def.kind => {}
        Some(k) => return Err(ApiError::BadRequest(format!("the kind in the data ({k}) does not match the expected kind ({})", def.kind))),
    }
    Ok(())
}

/// Validates a name by the resource's rule; `None` when fine.
pub fn name_problem(rule: NameRule, name: &str) -> Option<String> {
    match rule {
        NameRule::Path => {
            if name == "." || name == ".." {
                Some(format!("may not be '{name}'"))
            } else if name.contains('/') || name.contains('%') {
                Some("may not contain '/' or '%'".into())
            } else {
                None
            }
        }
        NameRule::Label => dns_label_problem(name),
        NameRule::Subdomain => dns_subdomain_problem(name),
    }
}

pub fn dns_label_problem(s: &str) -> Option<String> {
    let ok = !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-');
    (!ok).then(|| {
        format!(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?'), got {s:?}"
        )
    })
}

pub fn dns_subdomain_problem(s: &str) -> Option<String> {
    let ok = !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|p| {
            !p.is_empty()
                && p.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !p.starts_with('-')
                && !p.ends_with('-')
        });
    (!ok).then(|| {
        format!(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*'), got {s:?}"
        )
    })
}

/// Label/annotation map checks: keys as Kubernetes qualified names, label values ≤ 63.
/// The most an object's annotations may hold, keys and values together (Kubernetes'
/// `TotalAnnotationSizeLimitB`).
pub const TOTAL_ANNOTATION_BYTES: usize = 256 << 10;

fn check_string_map(obj: &Value, field: &str, values_are_labels: bool, causes: &mut Vec<Cause>) {
    let Some(v) = obj.pointer(&format!("/metadata/{field}")) else { return };
    if v.is_null() {
        return;
    }
    let Some(m) = v.as_object() else {
        causes.push(Cause::invalid(format!("metadata.{field}"), "must be a map of strings"));
        return;
    };
    if !values_are_labels {
        let total: usize = m.iter().map(|(k, v)| k.len() + v.as_str().map_or(0, str::len)).sum();
        if total > TOTAL_ANNOTATION_BYTES {
            causes.push(Cause::too_long(format!("metadata.{field}"), TOTAL_ANNOTATION_BYTES));
        }
    }
    for (k, val) in m {
        if let Some(p) = qualified_name_problem(k) {
            causes.push(Cause::invalid(format!("metadata.{field}"), format!("{k:?}: {p}")));
        }
        match val.as_str() {
            None => causes.push(Cause::invalid(format!("metadata.{field}.{k}"), "must be a string")),
            Some(s) if values_are_labels => {
                let ok = s.len() <= 63
                    && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
                    && (s.is_empty() || (s.as_bytes()[0].is_ascii_alphanumeric() && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric()));
                if !ok {
                    causes.push(Cause::invalid(
                        format!("metadata.labels.{k}"),
                        format!("{s:?}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"),
                    ));
                }
            }
            Some(_) => {}
        }
    }
}

fn qualified_name_problem(k: &str) -> Option<String> {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    if let Some(p) = prefix {
        if let Some(e) = dns_subdomain_problem(p) {
            return Some(format!("prefix part {e}"));
        }
    }
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric();
    (!ok).then(|| "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character".to_string())
}

/// Generic metadata checks shared by create and update.
pub fn validate_metadata(def: &ResourceDef, obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let name = name_of(obj);
    if name.is_empty() {
        causes.push(Cause::required("metadata.name"));
    } else if let Some(p) = name_problem(def.name_rule, name) {
        causes.push(Cause::invalid("metadata.name", format!("Invalid value: {name:?}: {p}")));
    }
    check_string_map(obj, "labels", true, &mut causes);
    check_string_map(obj, "annotations", false, &mut causes);
    causes
}

/// Fills server-owned metadata of a new object: namespace, name from generateName, uid,
/// creationTimestamp, generation; drops what clients may not set.
pub fn prepare_create(def: &ResourceDef, obj: &mut Value, namespace: Option<&str>, minted: &Minted) -> Result<(), ApiError> {
    check_type(def, obj)?;
    let has_spec = def.has_spec;
    let m = meta_mut(obj);
    if def.namespaced {
        let url_ns = namespace.unwrap_or("default");
        match m.get("namespace").and_then(Value::as_str) {
            None | Some("") => {
                m.insert("namespace".into(), json!(url_ns));
            }
            Some(ns) if ns == url_ns => {}
            Some(_) => {
                return Err(ApiError::BadRequest(
                    "the namespace of the provided object does not match the namespace sent on the request".into(),
                ))
            }
        }
    } else {
        m.remove("namespace");
    }
    let name = m.get("name").and_then(Value::as_str).unwrap_or("").to_string();
    if name.is_empty() {
        if let Some(g) = m.get("generateName").and_then(Value::as_str).filter(|g| !g.is_empty()) {
            let base: String = g.chars().take(58).collect();
            m.insert("name".into(), json!(format!("{base}{}", minted.suffix)));
        }
    }
    m.insert("uid".into(), json!(minted.uid));
    m.insert("creationTimestamp".into(), json!(minted.now));
    for k in ["resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"] {
        m.remove(k);
    }
    if has_spec {
        m.insert("generation".into(), json!(1));
    } else {
        m.remove("generation");
    }
    Ok(())
}

/// What an update request may change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpdateScope {
    /// The main resource: everything but `status` (when the resource has a status
    /// subresource).
    Main,
    /// The status subresource: only `status`.
    Status,
    /// A change the server makes to both (a pod's binding sets `spec.nodeName` and its
    /// `PodScheduled` condition).
    Whole,
}

/// Merges an update into the stored object: server-owned metadata is kept, the
/// spec/status split applied, generation bumped on spec changes.
pub fn prepare_update(def: &ResourceDef, old: &Value, new: &mut Value, scope: UpdateScope) -> Result<(), ApiError> {
    check_type(def, new)?;
    if name_of(new) != name_of(old) && !name_of(new).is_empty() {
        return Err(ApiError::BadRequest(format!(
            "the name of the object ({}) does not match the name on the URL ({})",
            name_of(new),
            name_of(old)
        )));
    }
    if let (Some(a), Some(b)) = (namespace_of(new), namespace_of(old)) {
        if a != b {
            return Err(ApiError::BadRequest("the namespace of the object does not match the namespace on the URL".into()));
        }
    }
    let split = def.has_subresource(Subresource::Status);
    match scope {
        UpdateScope::Status => {
            // Only status changes; everything else stays as stored.
            let status = new.get("status").cloned();
            let mut merged = old.clone();
            match status {
                Some(s) => merged["status"] = s,
                None => {
                    merged.as_object_mut().map(|o| o.remove("status"));
                }
            }
            *new = merged;
        }
        UpdateScope::Main if split => {
            match old.get("status") {
                Some(s) => new["status"] = s.clone(),
                None => {
                    new.as_object_mut().map(|o| o.remove("status"));
                }
            }
        }
        UpdateScope::Main | UpdateScope::Whole => {}
    }
    let old_meta = old.get("metadata").cloned().unwrap_or_else(|| json!({}));
    let spec_changed = def.has_spec && spec_of(old) != spec_of(new);
    let m = meta_mut(new);
    for k in ["name", "namespace", "uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"] {
        match old_meta.get(k) {
            Some(v) => {
                m.insert(k.into(), v.clone());
            }
            None => {
                m.remove(k);
            }
        }
    }
    m.remove("resourceVersion");
    if spec_changed {
        let g = old_meta.get("generation").and_then(Value::as_i64).unwrap_or(0);
        m.insert("generation".into(), json!(g + 1));
    }
    Ok(())
}

/// Everything of an object outside `metadata` and `status`.
fn spec_of(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        for k in ["metadata", "status", "apiVersion", "kind"] {
            m.remove(k);
        }
    }
    o
}

pub fn finalizers(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|v| v.as_str().map(String::from)).collect())
        .unwrap_or_default()
}

pub fn is_deleting(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp").is_some_and(|v| !v.is_null())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::lookup;

    fn minted() -> Minted {
        Minted { now: "2026-11-30T08:00:00Z".into(), uid: "u-1".into(), suffix: "x7k2p".into() }
    }

    #[test]
    fn create_fills_server_metadata() {
        let def = lookup("apps", "v1", "deployments").unwrap();
        let mut d = json!({"metadata": {"generateName": "web-", "resourceVersion": "9"}, "spec": {}});
        prepare_create(def, &mut d, Some("prod"), &minted()).unwrap();
        assert_eq!(d["apiVersion"], "apps/v1");
        assert_eq!(d["kind"], "Deployment");
        assert_eq!(d["metadata"]["name"], "web-x7k2p");
        assert_eq!(d["metadata"]["namespace"], "prod");
        assert_eq!(d["metadata"]["generation"], 1);
        assert!(d["metadata"].get("resourceVersion").is_none());
        let mut wrong = json!({"kind": "Pod", "metadata": {"name": "a"}});
        assert!(prepare_create(def, &mut wrong, Some("prod"), &minted()).is_err());
        let mut other_ns = json!({"metadata": {"name": "a", "namespace": "dev"}});
        assert_eq!(prepare_create(def, &mut other_ns, Some("prod"), &minted()).unwrap_err().code(), 400);
    }

    #[test]
    fn update_keeps_server_fields_and_bumps_generation_on_spec_change() {
        let def = lookup("apps", "v1", "deployments").unwrap();
        let old = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "d", "uid": "u", "generation": 3, "creationTimestamp": "t"},
            "spec": {"replicas": 1}, "status": {"replicas": 1}});
        let mut new = json!({"metadata": {"name": "web", "uid": "forged", "labels": {"a": "b"}}, "spec": {"replicas": 2}, "status": {"replicas": 7}});
        prepare_update(def, &old, &mut new, UpdateScope::Main).unwrap();
        assert_eq!(new["metadata"]["uid"], "u");
        assert_eq!(new["metadata"]["generation"], 4);
        assert_eq!(new["metadata"]["labels"]["a"], "b");
        assert_eq!(new["status"]["replicas"], 1, "status is owned by the status subresource");
        let mut label_only = old.clone();
        label_only["metadata"]["labels"] = json!({"x": "y"});
        prepare_update(def, &old, &mut label_only, UpdateScope::Main).unwrap();
        assert_eq!(label_only["metadata"]["generation"], 3);
        let mut status = json!({"metadata": {"name": "web"}, "spec": {"replicas": 9}, "status": {"replicas": 5}});
        prepare_update(def, &old, &mut status, UpdateScope::Status).unwrap();
        assert_eq!(status["spec"]["replicas"], 1);
        assert_eq!(status["status"]["replicas"], 5);
    }

    #[test]
    fn names_and_labels_are_validated() {
        let def = lookup("", "v1", "services").unwrap();
        let bad = json!({"metadata": {"name": "Web.1", "labels": {"-x": "ok", "a": "not ok!"}}});
        let causes = validate_metadata(def, &bad);
        assert_eq!(causes.len(), 3, "{causes:?}");
        let good = json!({"metadata": {"name": "web-1", "labels": {"app.kubernetes.io/name": "web"}, "annotations": {"x/y": "any thing"}}});
        assert!(validate_metadata(def, &good).is_empty());
        assert!(name_problem(NameRule::Path, "system:admin").is_none());
        assert!(name_problem(NameRule::Path, "a/b").is_some());
    }
}
