//! Building blocks shared by every converter: a JSON object builder that
//! applies the Kubernetes JSON omission rules, and the conversions of the
//! apimachinery scalar types (`Time`, `MicroTime`, `IntOrString`,
//! `Quantity`, `bytes`).
//!
//! # Omission rules
//!
//! The Go protobuf marshaller writes every non-pointer field, zero or not,
//! while Go's JSON marshaller drops `omitempty` zero values. The builder
//! therefore offers two flavours per scalar:
//!
//! * [`Obj::string`], [`Obj::int`], [`Obj::boolean`]: an `omitempty`
//!   non-pointer field; emitted only when present *and* non-zero.
//! * [`Obj::string_kept`], [`Obj::int_kept`], [`Obj::boolean_kept`]: a
//!   pointer field (`*int32`, …) or a field without `omitempty`; emitted
//!   whenever it is present on the wire, zero included (`replicas: 0`).
//!
//! Lists and maps are emitted only when non-empty (Go writes `null` or
//! omits them otherwise). Nested messages are emitted whenever present, so
//! `emptyDir: {}` and `resources: {}` survive as kubectl sends them.

use std::collections::BTreeMap;

use base64::Engine as _;
use k8s_pb::apimachinery::pkg::api::resource::Quantity;
use k8s_pb::apimachinery::pkg::apis::meta::v1::Time;
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Map, Value};

/// Why a decoded protobuf value has no Kubernetes JSON representation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConvertError {
    /// A `Time`/`MicroTime` lies outside the years 0000–9999 that RFC 3339
    /// can express, or its nanoseconds are outside `0..1_000_000_000`.
    #[error("field {field}: timestamp {seconds}s {nanos}ns cannot be written as RFC 3339")]
    TimeOutOfRange {
        /// JSON name of the offending field.
        field: String,
        /// Seconds since the Unix epoch as sent.
        seconds: i64,
        /// Nanoseconds as sent.
        nanos: i32,
    },
    /// An `IntOrString` whose `type` is neither 0 (int) nor 1 (string).
    #[error("field {field}: IntOrString has invalid type {value}")]
    InvalidIntOrString {
        /// JSON name of the offending field.
        field: String,
        /// The `type` value as sent.
        value: i64,
    },
    /// The object sets a field this crate does not translate. Rather than
    /// silently dropping it, decoding fails so the client can resend JSON.
    #[error("field {0} is not supported in protobuf request bodies; send JSON instead")]
    UnsupportedField(String),
}

/// Result type of every converter.
pub type Result<T> = std::result::Result<T, ConvertError>;

/// A JSON object under construction; see the module docs for the rules.
#[derive(Debug, Default)]
pub struct Obj(Map<String, Value>);

impl Obj {
    /// An empty object.
    pub fn new() -> Self {
        Self::default()
    }

    /// Inserts `value` unconditionally.
    pub fn put(&mut self, key: &str, value: Value) -> &mut Self {
        self.0.insert(key.to_owned(), value);
        self
    }

    /// Copies every key of `other` (a JSON object) into `self`; used for
    /// Go structs embedded with `json:",inline"`. Non-objects are ignored.
    pub fn inline(&mut self, other: Value) -> &mut Self {
        if let Value::Object(map) = other {
            self.0.extend(map);
        }
        self
    }

    /// An `omitempty` string: emitted when present and non-empty.
    pub fn string(&mut self, key: &str, value: &Option<String>) -> &mut Self {
        match value {
            Some(s) if !s.is_empty() => self.put(key, Value::String(s.clone())),
            _ => self,
        }
    }

    /// A `*string` or non-`omitempty` string: emitted whenever present.
    pub fn string_kept(&mut self, key: &str, value: &Option<String>) -> &mut Self {
        match value {
            Some(s) => self.put(key, Value::String(s.clone())),
            None => self,
        }
    }

    /// An `omitempty` integer: emitted when present and non-zero.
    pub fn int<T: Copy + Into<i64>>(&mut self, key: &str, value: Option<T>) -> &mut Self {
        match value.map(Into::into) {
            Some(n) if n != 0 => self.put(key, Value::from(n)),
            _ => self,
        }
    }

    /// A pointer or non-`omitempty` integer: emitted whenever present.
    pub fn int_kept<T: Copy + Into<i64>>(&mut self, key: &str, value: Option<T>) -> &mut Self {
        match value.map(Into::into) {
            Some(n) => self.put(key, Value::from(n)),
            None => self,
        }
    }

    /// An `omitempty` bool: emitted only when `true`.
    pub fn boolean(&mut self, key: &str, value: Option<bool>) -> &mut Self {
        match value {
            Some(true) => self.put(key, Value::Bool(true)),
            _ => self,
        }
    }

    /// A `*bool` or non-`omitempty` bool: emitted whenever present.
    pub fn boolean_kept(&mut self, key: &str, value: Option<bool>) -> &mut Self {
        match value {
            Some(b) => self.put(key, Value::Bool(b)),
            None => self,
        }
    }

    /// A list of strings, emitted when non-empty.
    pub fn strings(&mut self, key: &str, values: &[String]) -> &mut Self {
        if values.is_empty() {
            return self;
        }
        self.put(key, values.iter().cloned().map(Value::String).collect())
    }

    /// A list of integers, emitted when non-empty.
    pub fn ints<T: Copy + Into<i64>>(&mut self, key: &str, values: &[T]) -> &mut Self {
        if values.is_empty() {
            return self;
        }
        self.put(
            key,
            values.iter().map(|v| Value::from((*v).into())).collect(),
        )
    }

    /// A `map[string]string`, emitted when non-empty.
    pub fn string_map(&mut self, key: &str, map: &BTreeMap<String, String>) -> &mut Self {
        if map.is_empty() {
            return self;
        }
        let obj = map
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        self.put(key, Value::Object(obj))
    }

    /// A `map[string][]byte` (Secret `data`, ConfigMap `binaryData`),
    /// emitted when non-empty, values base64-encoded as in Kubernetes JSON.
    pub fn bytes_map(&mut self, key: &str, map: &BTreeMap<String, Vec<u8>>) -> &mut Self {
        if map.is_empty() {
            return self;
        }
        let obj = map
            .iter()
            .map(|(k, v)| (k.clone(), bytes_to_json(v)))
            .collect();
        self.put(key, Value::Object(obj))
    }

    /// A `ResourceList` (`map[ResourceName]resource.Quantity`), emitted
    /// when non-empty, each quantity as its string.
    pub fn quantities(&mut self, key: &str, map: &BTreeMap<String, Quantity>) -> &mut Self {
        if map.is_empty() {
            return self;
        }
        let obj = map
            .iter()
            .map(|(k, q)| (k.clone(), quantity_to_json(q)))
            .collect();
        self.put(key, Value::Object(obj))
    }

    /// A `resource.Quantity` (pointer or not), emitted whenever present.
    pub fn quantity(&mut self, key: &str, value: &Option<Quantity>) -> &mut Self {
        match value {
            Some(q) => self.put(key, quantity_to_json(q)),
            None => self,
        }
    }

    /// An `omitempty` `[]byte`, emitted base64-encoded when non-empty.
    pub fn bytes(&mut self, key: &str, value: &Option<Vec<u8>>) -> &mut Self {
        match value {
            Some(b) if !b.is_empty() => self.put(key, bytes_to_json(b)),
            _ => self,
        }
    }

    /// A required `[]byte`, emitted base64-encoded whenever present.
    pub fn bytes_kept(&mut self, key: &str, value: &Option<Vec<u8>>) -> &mut Self {
        match value {
            Some(b) => self.put(key, bytes_to_json(b)),
            None => self,
        }
    }

    /// A nested message, emitted whenever present (possibly as `{}`).
    pub fn message<T>(
        &mut self,
        key: &str,
        value: &Option<T>,
        convert: impl FnOnce(&T) -> Result<Value>,
    ) -> Result<&mut Self> {
        match value {
            Some(v) => {
                let json = convert(v)?;
                Ok(self.put(key, json))
            }
            None => Ok(self),
        }
    }

    /// A list of messages, emitted when non-empty.
    pub fn messages<T>(
        &mut self,
        key: &str,
        values: &[T],
        convert: impl Fn(&T) -> Result<Value>,
    ) -> Result<&mut Self> {
        if values.is_empty() {
            return Ok(self);
        }
        let list = values.iter().map(convert).collect::<Result<Vec<_>>>()?;
        Ok(self.put(key, Value::Array(list)))
    }

    /// A `metav1.Time` (pointer or not); a zero time is Go's `null` and so
    /// is omitted.
    pub fn time(&mut self, key: &str, value: &Option<Time>) -> Result<&mut Self> {
        let Some(t) = value else { return Ok(self) };
        match time_to_json(key, t.seconds, t.nanos, false)? {
            Some(json) => Ok(self.put(key, json)),
            None => Ok(self),
        }
    }

    /// A non-pointer `IntOrString` (`targetPort`, probe `port`): omitted
    /// when it holds the zero value (int 0 or empty string), which the API
    /// server treats as unset.
    pub fn int_or_string(&mut self, key: &str, value: &Option<IntOrString>) -> Result<&mut Self> {
        let Some(v) = value else { return Ok(self) };
        let json = int_or_string_to_json(key, v)?;
        if json == 0 || json == "" {
            return Ok(self);
        }
        Ok(self.put(key, json))
    }

    /// A `*IntOrString` (`maxSurge`, `minAvailable`): emitted whenever
    /// present, zero included.
    pub fn int_or_string_kept(
        &mut self,
        key: &str,
        value: &Option<IntOrString>,
    ) -> Result<&mut Self> {
        let Some(v) = value else { return Ok(self) };
        let json = int_or_string_to_json(key, v)?;
        Ok(self.put(key, json))
    }

    /// The finished JSON object.
    pub fn build(&mut self) -> Value {
        Value::Object(std::mem::take(&mut self.0))
    }
}

/// Fails with [`ConvertError::UnsupportedField`] when `present` is true.
pub fn reject_if(present: bool, field: &str) -> Result<()> {
    if present {
        Err(ConvertError::UnsupportedField(field.to_owned()))
    } else {
        Ok(())
    }
}

/// A `resource.Quantity` as its canonical string (as sent by the client).
pub fn quantity_to_json(q: &Quantity) -> Value {
    Value::String(q.string.clone().unwrap_or_default())
}

/// Bytes as standard (padded) base64, the JSON encoding of Go's `[]byte`.
pub fn bytes_to_json(bytes: &[u8]) -> Value {
    Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// An `IntOrString` as a JSON number (type 0) or string (type 1).
pub fn int_or_string_to_json(field: &str, v: &IntOrString) -> Result<Value> {
    match v.r#type.unwrap_or(0) {
        0 => Ok(Value::from(v.int_val.unwrap_or(0))),
        1 => Ok(Value::String(v.str_val.clone().unwrap_or_default())),
        other => Err(ConvertError::InvalidIntOrString {
            field: field.to_owned(),
            value: other,
        }),
    }
}

/// Seconds from 0001-01-01T00:00:00Z to the Unix epoch: Go's zero `Time`.
const GO_ZERO_TIME_UNIX: i64 = -62_135_596_800;

/// A timestamp as Kubernetes writes it: `Time` as RFC 3339 in UTC with
/// whole seconds (`2024-05-01T12:00:00Z`), `MicroTime` with six fractional
/// digits. `None` for the zero time (an empty message, or Go's zero time),
/// which Go writes as `null`.
pub fn time_to_json(
    field: &str,
    seconds: Option<i64>,
    nanos: Option<i32>,
    micro: bool,
) -> Result<Option<Value>> {
    if seconds.is_none() && nanos.is_none() {
        return Ok(None);
    }
    let (secs, nanos) = (seconds.unwrap_or(0), nanos.unwrap_or(0));
    if secs == GO_ZERO_TIME_UNIX && nanos == 0 {
        return Ok(None);
    }
    let out_of_range = || ConvertError::TimeOutOfRange {
        field: field.to_owned(),
        seconds: secs,
        nanos,
    };
    if !(0..1_000_000_000).contains(&nanos) {
        return Err(out_of_range());
    }
    // Civil time, not `jiff::Timestamp`: a timestamp stops a day short of 9999-12-31
    // (room for offsets), and Kubernetes' times reach its end.
    let epoch = jiff::civil::date(1970, 1, 1).at(0, 0, 0, 0);
    let civil = epoch.checked_add(jiff::SignedDuration::new(secs, nanos)).map_err(|_| out_of_range())?;
    if !(0..=9999).contains(&civil.year()) {
        return Err(out_of_range());
    }
    // `%.6f` truncates to microseconds, as Go's MicroTime marshalling does.
    let format = if micro { "%Y-%m-%dT%H:%M:%S%.6fZ" } else { "%Y-%m-%dT%H:%M:%SZ" };
    let text = civil.strftime(format).to_string();
    Ok(Some(Value::String(text)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ios(t: i64, i: i32, s: &str) -> IntOrString {
        IntOrString {
            r#type: Some(t),
            int_val: Some(i),
            str_val: Some(s.to_owned()),
        }
    }

    #[test]
    fn omitempty_and_kept_scalars() {
        let v = Obj::new()
            .string("a", &Some(String::new()))
            .string("b", &Some("x".into()))
            .string("c", &None)
            .string_kept("d", &Some(String::new()))
            .int("e", Some(0i32))
            .int("f", Some(3i32))
            .int_kept("g", Some(0i64))
            .int_kept::<i32>("h", None)
            .boolean("i", Some(false))
            .boolean("j", Some(true))
            .boolean_kept("k", Some(false))
            .strings("l", &[])
            .strings("m", &["p".to_owned()])
            .string_map("n", &BTreeMap::new())
            .build();
        assert_eq!(
            v,
            json!({"b": "x", "d": "", "f": 3, "g": 0, "j": true, "k": false, "m": ["p"]})
        );
    }

    #[test]
    fn messages_are_kept_even_when_empty() {
        let mut o = Obj::new();
        o.message("emptyDir", &Some(()), |_| Ok(json!({}))).unwrap();
        o.message("absent", &None::<()>, |_| Ok(json!({}))).unwrap();
        o.messages("none", &Vec::<()>::new(), |_| Ok(json!(1)))
            .unwrap();
        o.messages("two", &[1, 2], |n| Ok(json!(n * 10))).unwrap();
        assert_eq!(o.build(), json!({"emptyDir": {}, "two": [10, 20]}));
    }

    #[test]
    fn converter_errors_propagate() {
        let mut o = Obj::new();
        let err = o
            .messages("xs", &[1], |_| {
                Err(ConvertError::UnsupportedField("x".into()))
            })
            .unwrap_err();
        assert_eq!(err, ConvertError::UnsupportedField("x".into()));
    }

    #[test]
    fn int_or_string_forms() {
        assert_eq!(
            int_or_string_to_json("p", &ios(0, 8080, "")).unwrap(),
            json!(8080)
        );
        assert_eq!(
            int_or_string_to_json("p", &ios(1, 0, "http")).unwrap(),
            json!("http")
        );
        assert_eq!(
            int_or_string_to_json("p", &IntOrString::default()).unwrap(),
            json!(0)
        );
        assert!(matches!(
            int_or_string_to_json("p", &ios(7, 0, "")),
            Err(ConvertError::InvalidIntOrString { value: 7, .. })
        ));
        let mut o = Obj::new();
        o.int_or_string("targetPort", &Some(ios(0, 0, ""))).unwrap();
        o.int_or_string("name", &Some(ios(1, 0, ""))).unwrap();
        o.int_or_string_kept("maxSurge", &Some(ios(0, 0, "")))
            .unwrap();
        o.int_or_string_kept("maxUnavailable", &Some(ios(1, 0, "25%")))
            .unwrap();
        assert_eq!(o.build(), json!({"maxSurge": 0, "maxUnavailable": "25%"}));
    }

    #[test]
    fn bytes_and_quantities() {
        let mut data = BTreeMap::new();
        data.insert("k".to_owned(), vec![0u8, 255, 1]);
        data.insert("empty".to_owned(), vec![]);
        let mut q = BTreeMap::new();
        q.insert(
            "cpu".to_owned(),
            Quantity {
                string: Some("500m".into()),
            },
        );
        let v = Obj::new()
            .bytes_map("data", &data)
            .quantities("hard", &q)
            .bytes("raw", &Some(b"hi".to_vec()))
            .bytes("none", &Some(vec![]))
            .bytes_kept("req", &Some(vec![]))
            .build();
        assert_eq!(
            v,
            json!({"data": {"k": "AP8B", "empty": ""}, "hard": {"cpu": "500m"}, "raw": "aGk=", "req": ""})
        );
    }

    fn t(seconds: Option<i64>, nanos: Option<i32>, micro: bool) -> Result<Option<Value>> {
        time_to_json("t", seconds, nanos, micro)
    }

    #[test]
    fn times_in_rfc3339() {
        assert_eq!(t(None, None, false).unwrap(), None);
        assert_eq!(t(Some(GO_ZERO_TIME_UNIX), Some(0), false).unwrap(), None);
        assert_eq!(
            t(Some(0), None, false).unwrap(),
            Some(json!("1970-01-01T00:00:00Z"))
        );
        assert_eq!(
            t(Some(1_700_000_000), Some(5), false).unwrap(),
            Some(json!("2023-11-14T22:13:20Z"))
        );
        assert_eq!(
            t(Some(1_709_210_096), Some(123_456_789), true).unwrap(),
            Some(json!("2024-02-29T12:34:56.123456Z"))
        );
        assert_eq!(
            t(Some(-1), None, false).unwrap(),
            Some(json!("1969-12-31T23:59:59Z"))
        );
        assert_eq!(
            t(Some(951_782_400), None, false).unwrap(),
            Some(json!("2000-02-29T00:00:00Z"))
        );
        assert_eq!(
            t(Some(4_107_542_400), None, false).unwrap(),
            Some(json!("2100-03-01T00:00:00Z"))
        );
        assert_eq!(
            t(Some(253_402_300_799), None, false).unwrap(),
            Some(json!("9999-12-31T23:59:59Z"))
        );
        assert_eq!(
            t(Some(GO_ZERO_TIME_UNIX + 1), None, false).unwrap(),
            Some(json!("0001-01-01T00:00:01Z"))
        );
        assert_eq!(
            t(Some(GO_ZERO_TIME_UNIX - 86_400), Some(999_999_999), true).unwrap(),
            Some(json!("0000-12-31T00:00:00.999999Z"))
        );
    }

    #[test]
    fn times_out_of_range_fail() {
        assert!(t(Some(253_402_300_800), None, false).is_err());
        assert!(t(Some(i64::MAX), None, false).is_err());
        assert!(t(Some(i64::MIN), None, false).is_err());
        assert!(t(Some(0), Some(-1), false).is_err());
        assert!(t(Some(0), Some(1_000_000_000), false).is_err());
    }
}
