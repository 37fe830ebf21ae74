//! [`Fields`]: a reader over one JSON object that hands out typed values
//! and, at the end, refuses any key that was not consumed. The mirror
//! image of [`crate::json::Obj`].

use std::collections::BTreeMap;

use base64::Engine as _;
use k8s_pb::apimachinery::pkg::api::resource::Quantity;
use k8s_pb::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Map, Value};

use super::EncodeError;

/// Result of the encoders.
pub type Result<T> = std::result::Result<T, EncodeError>;

/// A JSON object being translated, with its JSON path for error messages.
pub struct Fields<'a> {
    path: String,
    map: &'a Map<String, Value>,
    used: Vec<&'static str>,
}

fn wrong(path: &str, expected: &'static str) -> EncodeError {
    EncodeError::WrongType {
        path: path.to_owned(),
        expected,
    }
}

impl<'a> Fields<'a> {
    /// Reads `value` (at JSON path `path`) as an object.
    pub fn new(path: &str, value: &'a Value) -> Result<Self> {
        let map = value.as_object().ok_or_else(|| wrong(path, "object"))?;
        Ok(Fields {
            path: path.to_owned(),
            map,
            used: Vec::new(),
        })
    }

    fn child(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// Marks `key` consumed and returns its value; `null` counts as absent.
    fn take(&mut self, key: &'static str) -> Option<&'a Value> {
        self.used.push(key);
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// Marks keys as handled without reading them (e.g. `apiVersion`).
    pub fn ignore(&mut self, keys: &[&'static str]) -> &mut Self {
        self.used.extend_from_slice(keys);
        self
    }

    /// A string field.
    pub fn string(&mut self, key: &'static str) -> Result<Option<String>> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(wrong(&self.child(key), "string")),
        }
    }

    /// A boolean field.
    pub fn boolean(&mut self, key: &'static str) -> Result<Option<bool>> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(wrong(&self.child(key), "boolean")),
        }
    }

    /// An `int64` field.
    pub fn i64(&mut self, key: &'static str) -> Result<Option<i64>> {
        match self.take(key) {
            None => Ok(None),
            Some(v) => v
                .as_i64()
                .map(Some)
                .ok_or_else(|| wrong(&self.child(key), "integer")),
        }
    }

    /// An `int32` field.
    pub fn i32(&mut self, key: &'static str) -> Result<Option<i32>> {
        let path = self.child(key);
        match self.i64(key)? {
            None => Ok(None),
            Some(v) => i32::try_from(v)
                .map(Some)
                .map_err(|_| wrong(&path, "32-bit integer")),
        }
    }

    /// A `[]string` field.
    pub fn strings(&mut self, key: &'static str) -> Result<Vec<String>> {
        let path = self.child(key);
        self.array(key, |p, v| {
            v.as_str()
                .map(str::to_owned)
                .ok_or_else(|| wrong(&p, "string"))
        })
        .map_err(|e| match e {
            EncodeError::WrongType {
                expected: "array", ..
            } => wrong(&path, "array of strings"),
            e => e,
        })
    }

    /// A `map[string]string` field.
    pub fn string_map(&mut self, key: &'static str) -> Result<BTreeMap<String, String>> {
        let path = self.child(key);
        self.map_of(key, |k, v| {
            v.as_str()
                .map(str::to_owned)
                .ok_or_else(|| wrong(&format!("{path}.{k}"), "string"))
        })
    }

    /// A `map[string][]byte` field (base64 values).
    pub fn bytes_map(&mut self, key: &'static str) -> Result<BTreeMap<String, Vec<u8>>> {
        let path = self.child(key);
        self.map_of(key, |k, v| decode_base64(&format!("{path}.{k}"), v))
    }

    /// A `Quantity` field (kept as its string).
    pub fn quantity(&mut self, key: &'static str) -> Result<Option<Quantity>> {
        Ok(self.string(key)?.map(|s| Quantity { string: Some(s) }))
    }

    /// A `ResourceList` field (map of `Quantity` strings).
    pub fn quantities(&mut self, key: &'static str) -> Result<BTreeMap<String, Quantity>> {
        Ok(self
            .string_map(key)?
            .into_iter()
            .map(|(k, v)| (k, Quantity { string: Some(v) }))
            .collect())
    }

    /// A `map[string][]string` field.
    pub fn string_list_map(&mut self, key: &'static str) -> Result<BTreeMap<String, Vec<String>>> {
        let path = self.child(key);
        self.map_of(key, |k, v| {
            let items = v
                .as_array()
                .ok_or_else(|| wrong(&format!("{path}.{k}"), "array of strings"))?;
            items
                .iter()
                .enumerate()
                .map(|(i, x)| {
                    x.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| wrong(&format!("{path}.{k}[{i}]"), "string"))
                })
                .collect()
        })
    }

    /// A `map[string]metav1.Time` field.
    pub fn time_map(&mut self, key: &'static str) -> Result<BTreeMap<String, Time>> {
        let path = self.child(key);
        self.map_of(key, |k, v| {
            let (seconds, _) = parse_time(&format!("{path}.{k}"), v)?;
            Ok(Time {
                seconds: Some(seconds),
                nanos: Some(0),
            })
        })
    }

    /// A `[]byte` field (base64).
    #[allow(dead_code)]
    pub fn bytes(&mut self, key: &'static str) -> Result<Option<Vec<u8>>> {
        let path = self.child(key);
        self.take(key).map(|v| decode_base64(&path, v)).transpose()
    }

    fn map_of<T>(
        &mut self,
        key: &'static str,
        mut f: impl FnMut(&str, &Value) -> Result<T>,
    ) -> Result<BTreeMap<String, T>> {
        match self.take(key) {
            None => Ok(BTreeMap::new()),
            Some(Value::Object(m)) => m.iter().map(|(k, v)| Ok((k.clone(), f(k, v)?))).collect(),
            Some(_) => Err(wrong(&self.child(key), "object")),
        }
    }

    /// A `metav1.Time` field (RFC 3339, whole seconds on the wire).
    pub fn time(&mut self, key: &'static str) -> Result<Option<Time>> {
        let path = self.child(key);
        self.take(key)
            .map(|v| {
                let (seconds, _) = parse_time(&path, v)?;
                Ok(Time {
                    seconds: Some(seconds),
                    nanos: Some(0),
                })
            })
            .transpose()
    }

    /// A `metav1.MicroTime` field (RFC 3339 with fractional seconds).
    pub fn micro_time(&mut self, key: &'static str) -> Result<Option<MicroTime>> {
        let path = self.child(key);
        self.take(key)
            .map(|v| {
                let (seconds, nanos) = parse_time(&path, v)?;
                Ok(MicroTime {
                    seconds: Some(seconds),
                    nanos: Some(nanos),
                })
            })
            .transpose()
    }

    /// An `IntOrString` field: a JSON integer (type 0) or string (type 1).
    pub fn int_or_string(&mut self, key: &'static str) -> Result<Option<IntOrString>> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(IntOrString {
                r#type: Some(1),
                int_val: None,
                str_val: Some(s.clone()),
            })),
            Some(v) => {
                let n = v
                    .as_i64()
                    .and_then(|n| i32::try_from(n).ok())
                    .ok_or_else(|| wrong(&self.child(key), "integer or string"))?;
                Ok(Some(IntOrString {
                    r#type: Some(0),
                    int_val: Some(n),
                    str_val: None,
                }))
            }
        }
    }

    /// A nested object field, converted by `f`.
    pub fn message<T>(
        &mut self,
        key: &'static str,
        f: impl FnOnce(&mut Fields<'a>) -> Result<T>,
    ) -> Result<Option<T>> {
        let path = self.child(key);
        match self.take(key) {
            None => Ok(None),
            Some(v) => {
                let mut inner = Fields::new(&path, v)?;
                let out = f(&mut inner)?;
                inner.finish()?;
                Ok(Some(out))
            }
        }
    }

    /// A list-of-objects field, each converted by `f`.
    pub fn messages<T>(
        &mut self,
        key: &'static str,
        mut f: impl FnMut(&mut Fields<'a>) -> Result<T>,
    ) -> Result<Vec<T>> {
        self.array(key, |p, v| {
            let mut inner = Fields::new(&p, v)?;
            let out = f(&mut inner)?;
            inner.finish()?;
            Ok(out)
        })
    }

    /// A raw JSON value (for callers that need the whole value).
    pub fn raw(&mut self, key: &'static str) -> Option<&'a Value> {
        self.take(key)
    }

    fn array<T>(
        &mut self,
        key: &'static str,
        mut f: impl FnMut(String, &'a Value) -> Result<T>,
    ) -> Result<Vec<T>> {
        let path = self.child(key);
        match self.take(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, v)| f(format!("{path}[{i}]"), v))
                .collect(),
            Some(_) => Err(wrong(&path, "array")),
        }
    }

    /// Fails with [`EncodeError::UnsupportedField`] if any key was not
    /// consumed.
    pub fn finish(&self) -> Result<()> {
        match self.map.keys().find(|k| !self.used.contains(&k.as_str())) {
            None => Ok(()),
            Some(k) => Err(EncodeError::UnsupportedField(self.child(k))),
        }
    }
}

fn decode_base64(path: &str, v: &Value) -> Result<Vec<u8>> {
    let s = v.as_str().ok_or_else(|| wrong(path, "base64 string"))?;
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_err(|_| wrong(path, "base64 string"))
}

fn parse_time(path: &str, v: &Value) -> Result<(i64, i32)> {
    let s = v.as_str().ok_or_else(|| wrong(path, "RFC 3339 time"))?;
    if let Ok(ts) = s.parse::<jiff::Timestamp>() {
        return Ok((ts.as_second(), ts.subsec_nanosecond()));
    }
    // `jiff::Timestamp` stops a day short of 9999-12-31 (room for offsets);
    // UTC times up to the end of year 9999 go through civil time.
    let civil: jiff::civil::DateTime = s
        .strip_suffix('Z')
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| wrong(path, "RFC 3339 time"))?;
    let since = civil.duration_since(jiff::civil::date(1970, 1, 1).at(0, 0, 0, 0));
    let (mut seconds, mut nanos) = (since.as_secs(), since.subsec_nanos());
    if nanos < 0 {
        seconds -= 1;
        nanos += 1_000_000_000;
    }
    Ok((seconds, nanos))
}
