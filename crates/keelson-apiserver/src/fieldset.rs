//! Field ownership for server-side apply: which manager owns which fields
//! (`metadata.managedFields`, `FieldsV1` format), conflicts, and removing fields a
//! manager stopped applying. Pure functions over JSON.
//!
//! Lists of objects whose items carry a merge key (`name`, or `containerPort`) are
//! tracked per item (`k:{"name":"main"}`); other lists are owned as a whole.

use std::collections::BTreeSet;

use serde_json::{json, Map, Value};

/// One step of a field path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Step {
    /// `f:NAME`
    Field(String),
    /// `k:{...}`: the list item whose key fields have these values (canonical JSON).
    Key(String),
}

pub type Path = Vec<Step>;

/// Metadata fields no manager owns.
const SERVER_OWNED: &[&str] = &["name", "namespace", "uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"];

fn item_key(item: &Value) -> Option<String> {
    let o = item.as_object()?;
    let mut k = Map::new();
    if let Some(n) = o.get("name").filter(|v| v.is_string()) {
        k.insert("name".into(), n.clone());
    } else if let Some(p) = o.get("containerPort").filter(|v| v.is_number()) {
        k.insert("containerPort".into(), p.clone());
        k.insert("protocol".into(), o.get("protocol").cloned().unwrap_or(json!("TCP")));
    } else if let Some(p) = o.get("port").filter(|v| v.is_number()) {
        k.insert("port".into(), p.clone());
        k.insert("protocol".into(), o.get("protocol").cloned().unwrap_or(json!("TCP")));
    } else {
        return None;
    }
    Some(Value::Object(k).to_string())
}

fn keyed(list: &[Value]) -> bool {
    !list.is_empty() && list.iter().all(|i| item_key(i).is_some())
}

/// Every owned leaf path of an object (what applying it claims).
pub fn leaves(obj: &Value) -> BTreeSet<Path> {
    let mut out = BTreeSet::new();
    walk(obj, &mut Vec::new(), &mut out, true);
    out
}

fn walk(v: &Value, path: &mut Path, out: &mut BTreeSet<Path>, root: bool) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                if root && (k == "apiVersion" || k == "kind") {
                    continue;
                }
                if path.len() == 1 && path[0] == Step::Field("metadata".into()) && SERVER_OWNED.contains(&k.as_str()) {
                    continue;
                }
                path.push(Step::Field(k.clone()));
                walk(child, path, out, false);
                path.pop();
            }
        }
        Value::Array(items) if keyed(items) => {
            for item in items {
                path.push(Step::Key(item_key(item).expect("keyed")));
                out.insert(path.clone()); // the item itself ("." in FieldsV1)
                walk(item, path, out, false);
                path.pop();
            }
        }
        _ if path.is_empty() => {}
        _ => {
            out.insert(path.clone());
        }
    }
}

/// The value at `path`, if present.
pub fn get<'a>(obj: &'a Value, path: &[Step]) -> Option<&'a Value> {
    let mut cur = obj;
    for s in path {
        cur = match s {
            Step::Field(f) => cur.get(f)?,
            Step::Key(k) => cur.as_array()?.iter().find(|i| item_key(i).as_deref() == Some(k))?,
        };
    }
    Some(cur)
}

/// Removes the field or list item at `path`.
pub fn remove(obj: &mut Value, path: &[Step]) {
    let Some((last, parent)) = path.split_last() else { return };
    let mut cur = obj;
    for s in parent {
        let next = match s {
            Step::Field(f) => cur.get_mut(f),
            Step::Key(k) => cur.as_array_mut().and_then(|a| a.iter_mut().find(|i| item_key(i).as_deref() == Some(k))),
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    match last {
        Step::Field(f) => {
            cur.as_object_mut().map(|o| o.remove(f));
        }
        Step::Key(k) => {
            if let Some(a) = cur.as_array_mut() {
                a.retain(|i| item_key(i).as_deref() != Some(k));
            }
        }
    }
}

/// FieldsV1 JSON of a set of paths.
pub fn to_fields_v1(paths: &BTreeSet<Path>) -> Value {
    let mut root = json!({});
    for p in paths {
        let mut cur = &mut root;
        for s in p {
            let k = match s {
                Step::Field(f) => format!("f:{f}"),
                Step::Key(k) => format!("k:{k}"),
            };
            cur = cur.as_object_mut().expect("object").entry(k).or_insert_with(|| json!({}));
        }
        if matches!(p.last(), Some(Step::Key(_))) {
            cur.as_object_mut().expect("object").insert(".".into(), json!({}));
        }
    }
    root
}

/// Paths in a FieldsV1 JSON.
pub fn from_fields_v1(v: &Value) -> BTreeSet<Path> {
    fn go(v: &Value, path: &mut Path, out: &mut BTreeSet<Path>) {
        let Some(m) = v.as_object() else { return };
        if m.is_empty() && !path.is_empty() {
            out.insert(path.clone());
        }
        for (k, child) in m {
            if k == "." {
                out.insert(path.clone());
                continue;
            }
            let step = if let Some(f) = k.strip_prefix("f:") {
                Step::Field(f.into())
            } else if let Some(key) = k.strip_prefix("k:") {
                Step::Key(key.into())
            } else {
                continue;
            };
            path.push(step);
            go(child, path, out);
            path.pop();
        }
    }
    let mut out = BTreeSet::new();
    go(v, &mut Vec::new(), &mut out);
    out
}

/// `.spec.replicas`, `.spec.template.spec.containers[name="main"].image`
pub fn render(path: &[Step]) -> String {
    let mut s = String::new();
    for step in path {
        match step {
            Step::Field(f) => {
                s.push('.');
                s.push_str(f);
            }
            Step::Key(k) => {
                let v: Value = serde_json::from_str(k).unwrap_or(Value::Null);
                let parts: Vec<String> = v.as_object().map(|o| o.iter().map(|(a, b)| format!("{a}={b}")).collect()).unwrap_or_default();
                s.push_str(&format!("[{}]", parts.join(",")));
            }
        }
    }
    s
}

/// One `managedFields` entry.
#[derive(Clone, Debug)]
pub struct Managed {
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    pub api_version: String,
    pub time: String,
    pub fields: BTreeSet<Path>,
    pub subresource: Option<String>,
}

pub fn read_managed(obj: &Value) -> Vec<Managed> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|e| Managed {
                    manager: e.get("manager").and_then(Value::as_str).unwrap_or("").into(),
                    operation: e.get("operation").and_then(Value::as_str).unwrap_or("Update").into(),
                    api_version: e.get("apiVersion").and_then(Value::as_str).unwrap_or("").into(),
                    time: e.get("time").and_then(Value::as_str).unwrap_or("").into(),
                    fields: e.get("fieldsV1").map(from_fields_v1).unwrap_or_default(),
                    subresource: e.get("subresource").and_then(Value::as_str).map(String::from),
                })
                .collect()
        })
        .unwrap_or_default()
}

pub fn write_managed(obj: &mut Value, managed: &[Managed]) {
    let entries: Vec<Value> = managed
        .iter()
        .filter(|m| !m.fields.is_empty())
        .map(|m| {
            let mut e = json!({"manager": m.manager, "operation": m.operation, "apiVersion": m.api_version, "time": m.time, "fieldsType": "FieldsV1", "fieldsV1": to_fields_v1(&m.fields)});
            if let Some(s) = &m.subresource {
                e["subresource"] = json!(s);
            }
            e
        })
        .collect();
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if entries.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), Value::Array(entries));
        }
    }
}

/// After a non-apply update: `manager` owns every leaf whose value changed; other
/// managers lose those leaves.
pub fn record_update(old: Option<&Value>, new: &mut Value, manager: &str, api_version: &str, now: &str, subresource: Option<&str>) {
    // A client that edits managedFields itself (e.g. kubectl moving client-side-apply
    // ownership to its server-side-apply manager) sets the new base.
    let sent = new.pointer("/metadata/managedFields");
    let mut managed = match (sent, old) {
        (Some(s), Some(o)) if Some(s) != o.pointer("/metadata/managedFields") => read_managed(new),
        (Some(_), None) => read_managed(new),
        (_, o) => o.map(read_managed).unwrap_or_default(),
    };
    let changed: BTreeSet<Path> = leaves(new).into_iter().filter(|p| old.and_then(|o| get(o, p)) != get(new, p)).collect();
    if changed.is_empty() {
        write_managed(new, &managed);
        return;
    }
    for m in managed.iter_mut() {
        m.fields.retain(|p| !changed.contains(p));
    }
    match managed.iter_mut().find(|m| m.manager == manager && m.operation == "Update" && m.subresource.as_deref() == subresource) {
        Some(m) => {
            m.fields.extend(changed);
            m.time = now.into();
        }
        None => managed.push(Managed { manager: manager.into(), operation: "Update".into(), api_version: api_version.into(), time: now.into(), fields: changed, subresource: subresource.map(String::from) }),
    }
    write_managed(new, &managed);
}

/// A field another manager owns with a different value than the applied one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    pub manager: String,
    /// Set when the owner wrote through a subresource (`scale`, `status`).
    pub subresource: Option<String>,
    pub api_version: String,
    pub path: Path,
}

impl Managed {
    /// This entry is `manager`'s server-side apply of the main resource.
    fn is_apply_by(&self, manager: &str) -> bool {
        self.manager == manager && self.operation == "Apply" && self.subresource.is_none()
    }
}

/// Server-side apply of `applied` by `manager` onto `live` (already merged into
/// `merged` by the caller): finds conflicts, and unless `force` refuses on any; removes
/// fields this manager applied before and no longer applies (when nobody else owns
/// them); records ownership.
pub fn apply_ownership(
    live: Option<&Value>,
    applied: &Value,
    merged: &mut Value,
    manager: &str,
    api_version: &str,
    now: &str,
    force: bool,
) -> Result<(), Vec<Conflict>> {
    let mut managed = live.map(read_managed).unwrap_or_default();
    let claimed = leaves(applied);
    // Every entry but this manager's own apply is another owner: the same manager name
    // writing through `kubectl scale` (an Update) is a different owner.
    let mut conflicts = Vec::new();
    if let Some(live) = live {
        for m in managed.iter().filter(|m| !m.is_apply_by(manager)) {
            for p in claimed.intersection(&m.fields) {
                if get(live, p) != get(applied, p) && !matches!(p.last(), Some(Step::Key(_))) {
                    conflicts.push(Conflict { manager: m.manager.clone(), subresource: m.subresource.clone(), api_version: m.api_version.clone(), path: p.clone() });
                }
            }
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(conflicts);
    }
    let previous: BTreeSet<Path> = managed.iter().filter(|m| m.is_apply_by(manager)).flat_map(|m| m.fields.clone()).collect();
    let others: BTreeSet<Path> = managed.iter().filter(|m| !m.is_apply_by(manager)).flat_map(|m| m.fields.clone()).collect();
    for p in previous.difference(&claimed) {
        if !others.contains(p) {
            remove(merged, p);
        }
    }
    // Forcing takes the conflicting fields away from their previous owners.
    for m in managed.iter_mut().filter(|m| !m.is_apply_by(manager)) {
        m.fields.retain(|p| !conflicts.iter().any(|c| &c.path == p));
    }
    managed.retain(|m| !m.is_apply_by(manager));
    managed.push(Managed { manager: manager.into(), operation: "Apply".into(), api_version: api_version.into(), time: now.into(), fields: claimed, subresource: None });
    write_managed(merged, &managed);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deploy(replicas: i64, image: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "labels": {"app": "web"}},
               "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "main", "image": image}]}}}})
    }

    #[test]
    fn an_update_without_managed_fields_keeps_the_records_and_an_empty_list_resets_them() {
        let mut live = deploy(2, "nginx");
        record_update(None, &mut live, "creator", "apps/v1", "t0", None);
        let records = live["metadata"]["managedFields"].clone();
        assert_eq!(records.as_array().map(Vec::len), Some(1));

        // A client writing from a copy with the records stripped (as the components'
        // mirrors hold objects) keeps them, and its change is recorded beside them.
        let mut stripped = live.clone();
        stripped["metadata"].as_object_mut().unwrap().remove("managedFields");
        stripped["spec"]["replicas"] = json!(3);
        record_update(Some(&live), &mut stripped, "scaler", "apps/v1", "t1", None);
        let kept = stripped["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(kept.len(), 2, "{kept:?}");
        assert_eq!(kept[0]["manager"], "creator");
        assert!(kept[0]["fieldsV1"]["f:spec"].get("f:replicas").is_none(), "replicas moved to the scaler: {kept:?}");
        assert!(kept[1]["fieldsV1"]["f:spec"]["f:replicas"].is_object());

        // An update that sends an empty list drops every record but its own.
        let mut reset = stripped.clone();
        reset["metadata"]["managedFields"] = json!([]);
        reset["spec"]["replicas"] = json!(4);
        record_update(Some(&stripped), &mut reset, "resetter", "apps/v1", "t2", None);
        let left = reset["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(left.len(), 1, "{left:?}");
        assert_eq!(left[0]["manager"], "resetter");
    }

    #[test]
    fn fields_v1_round_trips_with_keyed_items() {
        let l = leaves(&deploy(2, "nginx"));
        let v = to_fields_v1(&l);
        assert!(v["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"main\"}"]["f:image"].is_object());
        assert!(v["f:metadata"].get("f:name").is_none());
        assert_eq!(from_fields_v1(&v), l);
        let p = l.iter().find(|p| render(p).ends_with(".image")).unwrap();
        assert_eq!(render(p), ".spec.template.spec.containers[name=\"main\"].image");
    }

    #[test]
    fn apply_conflicts_with_another_manager_unless_forced() {
        let mut live = deploy(2, "nginx");
        record_update(None, &mut live, "kubectl-create", "apps/v1", "t0", None);
        // The same values: no conflict, shared ownership.
        let mut merged = live.clone();
        apply_ownership(Some(&live), &deploy(2, "nginx"), &mut merged, "kubectl", "apps/v1", "t1", false).unwrap();
        // Another manager changes replicas; re-applying the old value conflicts.
        let mut scaled = merged.clone();
        scaled["spec"]["replicas"] = json!(5);
        // kubectl scale writes as manager "kubectl" through the scale subresource: the
        // same name as the applier, yet another owner.
        record_update(Some(&merged), &mut scaled, "kubectl", "apps/v1", "t2", Some("scale"));
        let mut m2 = scaled.clone();
        let err = apply_ownership(Some(&scaled), &deploy(2, "nginx"), &mut m2, "kubectl", "apps/v1", "t3", false).unwrap_err();
        assert_eq!(err.len(), 1);
        assert_eq!((err[0].manager.as_str(), err[0].subresource.as_deref(), render(&err[0].path).as_str()), ("kubectl", Some("scale"), ".spec.replicas"));
        let mut m3 = scaled.clone();
        m3["spec"]["replicas"] = json!(2);
        apply_ownership(Some(&scaled), &deploy(2, "nginx"), &mut m3, "kubectl", "apps/v1", "t3", true).unwrap();
        let owners = read_managed(&m3);
        let scale = owners.iter().find(|m| m.subresource.as_deref() == Some("scale"));
        assert!(scale.is_none_or(|m| !m.fields.iter().any(|p| render(p) == ".spec.replicas")), "forcing takes ownership");
        let apply = owners.iter().find(|m| m.operation == "Apply").unwrap();
        assert!(apply.fields.iter().any(|p| render(p) == ".spec.replicas"));
    }

    #[test]
    fn fields_dropped_from_an_apply_are_removed() {
        let mut first = deploy(2, "nginx");
        first["metadata"]["labels"]["tier"] = json!("front");
        let mut live = first.clone();
        apply_ownership(None, &first, &mut live, "kubectl", "apps/v1", "t", false).unwrap();
        let second = deploy(2, "nginx"); // no tier label
        let mut merged = live.clone();
        apply_ownership(Some(&live), &second, &mut merged, "kubectl", "apps/v1", "t", false).unwrap();
        assert!(merged["metadata"]["labels"].get("tier").is_none());
        assert_eq!(merged["metadata"]["labels"]["app"], "web");
    }
}
