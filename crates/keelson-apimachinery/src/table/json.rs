//! Lenient accessors over JSON objects and the small formatters the printers
//! share (labels, label selectors, container lists, load-balancer status).
//! Missing or mistyped fields read as empty; nothing here panics.

use super::time::{parse_rfc3339, since, Timestamp};
use super::ColumnDefinition;
use serde_json::{Map, Value};

/// The value at `path`, treating JSON `null` as absent.
pub(super) fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter()
        .try_fold(v, |cur, key| cur.get(*key))
        .filter(|v| !v.is_null())
}

/// The object at `path`, if it is one.
pub(super) fn obj_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Map<String, Value>> {
    at(v, path).and_then(Value::as_object)
}

/// The string at `path`, or `""`.
pub(super) fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    opt_str(v, path).unwrap_or("")
}

/// The string at `path` if present and non-empty.
pub(super) fn opt_str<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    at(v, path).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// The integer at `path` (integral JSON numbers only).
pub(super) fn int_at(v: &Value, path: &[&str]) -> Option<i64> {
    let n = at(v, path)?;
    n.as_i64()
        .or_else(|| n.as_u64().map(|u| u.min(i64::MAX as u64) as i64))
}

/// The integer at `path`, or 0.
pub(super) fn int0(v: &Value, path: &[&str]) -> i64 {
    int_at(v, path).unwrap_or(0)
}

pub(super) fn bool_at(v: &Value, path: &[&str]) -> Option<bool> {
    at(v, path).and_then(Value::as_bool)
}

/// The array at `path`, or an empty slice.
pub(super) fn arr_at<'a>(v: &'a Value, path: &[&str]) -> &'a [Value] {
    at(v, path)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// Number of keys of the object at `path` (0 when absent).
pub(super) fn key_count(v: &Value, path: &[&str]) -> usize {
    obj_at(v, path).map_or(0, Map::len)
}

pub(super) fn timestamp_at(v: &Value, path: &[&str]) -> Option<Timestamp> {
    at(v, path)
        .and_then(Value::as_str)
        .and_then(parse_rfc3339)
        .filter(|t| !t.is_go_zero())
}

/// A string cell.
pub(super) fn s(text: impl Into<String>) -> Value {
    Value::String(text.into())
}

/// An integer cell.
pub(super) fn n(value: impl Into<i64>) -> Value {
    Value::from(value.into())
}

pub(super) fn name_cell(obj: &Value) -> Value {
    s(str_at(obj, &["metadata", "name"]))
}

/// `metadata.deletionTimestamp` is set.
pub(super) fn deleting(obj: &Value) -> bool {
    at(obj, &["metadata", "deletionTimestamp"]).is_some()
}

/// The age cell of `obj` from `metadata.creationTimestamp`.
pub(super) fn age_cell(obj: &Value, now_unix: i64) -> Value {
    s(since(at(obj, &["metadata", "creationTimestamp"]).and_then(Value::as_str), now_unix))
}

/// A priority-0 column.
pub(super) fn col(name: &str, type_: &str, description: &str) -> ColumnDefinition {
    ColumnDefinition {
        name: name.into(),
        type_: type_.into(),
        format: String::new(),
        description: description.into(),
        priority: 0,
    }
}

/// A priority-1 column (shown by `kubectl get -o wide`).
pub(super) fn wide(name: &str, type_: &str, description: &str) -> ColumnDefinition {
    ColumnDefinition { priority: 1, ..col(name, type_, description) }
}

pub(super) fn name_col() -> ColumnDefinition {
    ColumnDefinition {
        format: "name".into(),
        ..col("Name", "string", "Name must be unique within a namespace.")
    }
}

pub(super) fn age_col() -> ColumnDefinition {
    col("Age", "string", "Time since the object was created (metadata.creationTimestamp).")
}

pub(super) fn containers_cols() -> [ColumnDefinition; 2] {
    [
        wide("Containers", "string", "Names of each container in the template."),
        wide("Images", "string", "Images referenced by each container in the template."),
    ]
}

pub(super) fn selector_col() -> ColumnDefinition {
    wide("Selector", "string", "Label selector over the pods this object manages.")
}

/// Comma-joined container names and images of a container list.
pub(super) fn container_cells(containers: &[Value]) -> [Value; 2] {
    let names: Vec<&str> = containers.iter().map(|c| str_at(c, &["name"])).collect();
    let images: Vec<&str> = containers.iter().map(|c| str_at(c, &["image"])).collect();
    [s(names.join(",")), s(images.join(","))]
}

fn scalar_text(v: &Value) -> String {
    match v {
        Value::String(t) => t.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// A label map as `a=1,b=2` sorted by key, or `<none>` when empty.
pub(super) fn format_labels(map: Option<&Value>) -> String {
    let mut pairs: Vec<String> = map
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| format!("{k}={}", scalar_text(v))).collect())
        .unwrap_or_default();
    pairs.sort();
    if pairs.is_empty() {
        "<none>".into()
    } else {
        pairs.join(",")
    }
}

/// A `metav1.LabelSelector` in selector syntax (`app=web,tier in (a,b)`),
/// requirements sorted by key; `""` selects everything (or nothing, when
/// absent). `Err` for an unknown operator.
pub(super) fn selector_string(sel: Option<&Value>) -> Result<String, ()> {
    let Some(sel) = sel else { return Ok(String::new()) };
    let mut reqs: Vec<(String, String)> = Vec::new();
    if let Some(m) = obj_at(sel, &["matchLabels"]) {
        for (k, v) in m {
            reqs.push((k.clone(), format!("{k}={}", scalar_text(v))));
        }
    }
    for e in arr_at(sel, &["matchExpressions"]) {
        let key = str_at(e, &["key"]);
        let mut values: Vec<String> = arr_at(e, &["values"]).iter().map(scalar_text).collect();
        values.sort();
        let text = match str_at(e, &["operator"]) {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_string(),
            "DoesNotExist" => format!("!{key}"),
            _ => return Err(()),
        };
        reqs.push((key.to_string(), text));
    }
    reqs.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(reqs.into_iter().map(|(_, t)| t).collect::<Vec<_>>().join(","))
}

/// `metav1.FormatLabelSelector`: the selector string, `<none>` when empty,
/// `<error>` when invalid.
pub(super) fn format_label_selector(sel: Option<&Value>) -> String {
    match selector_string(sel) {
        Ok(t) if t.is_empty() => "<none>".into(),
        Ok(t) => t,
        Err(()) => "<error>".into(),
    }
}

/// Load-balancer ingress points (IP, else hostname), sorted, de-duplicated,
/// comma-joined; `""` when there are none.
pub(super) fn lb_ingress(status: &Value) -> String {
    let mut points: Vec<&str> = arr_at(status, &["loadBalancer", "ingress"])
        .iter()
        .filter_map(|i| opt_str(i, &["ip"]).or_else(|| opt_str(i, &["hostname"])))
        .collect();
    points.sort_unstable();
    points.dedup();
    points.join(",")
}

/// Persistent volume access modes in their short forms, in the fixed order
/// RWO, ROX, RWX, RWOP.
pub(super) fn access_modes(modes: &[Value]) -> String {
    let has = |m: &str| modes.iter().any(|v| v.as_str() == Some(m));
    [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ]
    .iter()
    .filter(|(long, _)| has(long))
    .map(|(_, short)| *short)
    .collect::<Vec<_>>()
    .join(",")
}

/// An IntOrString rendered as text (`1`, `50%`).
pub(super) fn int_or_string(v: &Value) -> String {
    scalar_text(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn selectors_format_like_kubernetes() {
        let sel = json!({
            "matchLabels": {"tier": "web", "app": "shop"},
            "matchExpressions": [
                {"key": "env", "operator": "In", "values": ["prod", "dev"]},
                {"key": "zone", "operator": "NotIn", "values": ["b"]},
                {"key": "canary", "operator": "DoesNotExist"},
                {"key": "gpu", "operator": "Exists"}
            ]
        });
        assert_eq!(
            selector_string(Some(&sel)).unwrap(),
            "app=shop,!canary,env in (dev,prod),gpu,tier=web,zone notin (b)"
        );
        assert_eq!(format_label_selector(Some(&json!({}))), "<none>");
        assert_eq!(format_label_selector(None), "<none>");
        let bad = json!({"matchExpressions": [{"key": "a", "operator": "Near"}]});
        assert_eq!(format_label_selector(Some(&bad)), "<error>");
        assert_eq!(format_labels(Some(&json!({"b": "2", "a": "1"}))), "a=1,b=2");
        assert_eq!(format_labels(Some(&json!({}))), "<none>");
    }

    #[test]
    fn lenient_accessors() {
        let v = json!({"a": {"b": null, "n": 3, "s": "", "arr": [1]}});
        assert!(at(&v, &["a", "b"]).is_none());
        assert_eq!(int_at(&v, &["a", "n"]), Some(3));
        assert_eq!(opt_str(&v, &["a", "s"]), None);
        assert_eq!(arr_at(&v, &["a", "arr"]).len(), 1);
        assert_eq!(arr_at(&v, &["a", "n"]).len(), 0);
        assert_eq!(access_modes(&[json!("ReadWriteMany"), json!("ReadWriteOnce")]), "RWO,RWX");
        let lb = json!({"loadBalancer": {"ingress": [{"ip": "5.6.7.8"}, {"hostname": "lb.example"}, {"ip": "1.2.3.4"}, {"ip": "1.2.3.4"}]}});
        assert_eq!(lb_ingress(&lb), "1.2.3.4,5.6.7.8,lb.example");
    }
}
