//! Request bodies: JSON and YAML decoded into `serde_json::Value`, refusing what is empty,
//! not UTF-8, malformed, or nested deeper than [`MAX_DEPTH`].
//!
//! Kubernetes decodes YAML by converting it to JSON first; here a YAML body that already
//! is JSON (the common case for `kubectl apply`'s `apply-patch+yaml`) goes through the JSON
//! decoder, and only other YAML through the YAML parser.

use serde_json::Value;

/// The deepest nesting of arrays and objects a body may have. serde_json refuses JSON
/// deeper than 128 on its own; YAML is held to the same bound so a decoded body never
/// drives later recursive passes (patches, pruning, schema checks) deeper than that.
pub const MAX_DEPTH: usize = 128;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BodyError {
    #[error("the request body is empty")]
    Empty,
    #[error("the request body is not UTF-8")]
    NotUtf8,
    #[error("the request body is not valid JSON: {0}")]
    Json(String),
    #[error("the request body is not valid YAML: {0}")]
    Yaml(String),
    #[error("the request body is nested more than {MAX_DEPTH} levels deep")]
    TooDeep,
}

/// A JSON body.
pub fn parse_json(body: &[u8]) -> Result<Value, BodyError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(BodyError::Empty);
    }
    serde_json::from_slice(body).map_err(|e| BodyError::Json(e.to_string()))
}

/// A YAML (or JSON) body: one document.
pub fn parse_yaml(body: &[u8]) -> Result<Value, BodyError> {
    let text = std::str::from_utf8(body).map_err(|_| BodyError::NotUtf8)?;
    if text.trim().is_empty() {
        return Err(BodyError::Empty);
    }
    if let Ok(v) = serde_json::from_str(text) {
        return Ok(v);
    }
    let value: Value = serde_saphyr::from_str(text).map_err(|e| BodyError::Yaml(e.to_string()))?;
    if depth_exceeds(&value, MAX_DEPTH) {
        return Err(BodyError::TooDeep);
    }
    Ok(value)
}

/// Whether `value` nests arrays and objects more than `limit` levels deep (iteratively,
/// so the check itself cannot overflow the stack).
pub fn depth_exceeds(value: &Value, limit: usize) -> bool {
    let mut stack = vec![(value, 0usize)];
    while let Some((v, depth)) = stack.pop() {
        let nested = matches!(v, Value::Array(_) | Value::Object(_));
        if nested && depth >= limit {
            return true;
        }
        match v {
            Value::Array(items) => stack.extend(items.iter().map(|c| (c, depth + 1))),
            Value::Object(map) => stack.extend(map.values().map(|c| (c, depth + 1))),
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_and_yaml_bodies_decode_to_the_same_value() {
        let json = parse_json(br#"{"kind":"ConfigMap","data":{"a":"1"}}"#).unwrap();
        let yaml = parse_yaml(b"kind: ConfigMap\ndata:\n  a: \"1\"\n").unwrap();
        assert_eq!(json, yaml);
        assert_eq!(parse_yaml(br#"{"kind":"ConfigMap","data":{"a":"1"}}"#).unwrap(), json);
    }

    #[test]
    fn empty_malformed_and_non_utf8_bodies_are_refused_with_their_reason() {
        assert_eq!(parse_json(b" \n").unwrap_err(), BodyError::Empty);
        assert_eq!(parse_yaml(b"  ").unwrap_err(), BodyError::Empty);
        assert_eq!(parse_yaml(&[0xff, 0xfe]).unwrap_err(), BodyError::NotUtf8);
        assert!(matches!(parse_json(b"{").unwrap_err(), BodyError::Json(_)));
        assert!(matches!(parse_yaml(b"a: [").unwrap_err(), BodyError::Yaml(_)));
    }

    #[test]
    fn nesting_is_bounded_in_both_formats() {
        let deep_json = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert!(matches!(parse_json(deep_json.as_bytes()).unwrap_err(), BodyError::Json(m) if m.contains("recursion")));
        let ok_yaml = format!("{}1{}", "[".repeat(100), "]".repeat(100));
        assert!(parse_yaml(ok_yaml.as_bytes()).is_ok());
        let mut deep_yaml = String::new();
        for i in 0..(MAX_DEPTH + 5) {
            deep_yaml.push_str(&format!("{}k:\n", "  ".repeat(i)));
        }
        deep_yaml.push_str(&format!("{}leaf", "  ".repeat(MAX_DEPTH + 5)));
        let refused = parse_yaml(deep_yaml.as_bytes()).unwrap_err();
        assert!(matches!(refused, BodyError::TooDeep | BodyError::Yaml(_)), "{refused:?}");
    }

    #[test]
    fn depth_counts_containers_only() {
        let v: Value = serde_json::json!({"a": [{"b": 1}]});
        assert!(!depth_exceeds(&v, 3));
        assert!(depth_exceeds(&v, 2));
        assert!(!depth_exceeds(&Value::from(1), 0));
    }
}
