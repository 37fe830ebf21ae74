//! Kubernetes field selectors (`?fieldSelector=` on list and watch).
//!
//! A [`FieldSelector`] is a conjunction of `field=value` / `field==value` /
//! `field!=value` terms separated by commas; the empty selector matches
//! everything. In values, `,`, `=` and `\` must be escaped as `\,`, `\=`
//! and `\\`. Which fields are *supported* depends on the resource and is the
//! server's business (see [`FieldSelector::requirements`]); matching here is
//! generic, by dotted path into the object's JSON.

use std::fmt;
use std::str::FromStr;

use serde_json::Value;

/// Why a field selector was rejected. The `Display` text names the offending
/// term and is meant to be sent verbatim to API clients (HTTP 400 message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FieldSelectorError {
    /// `term` contains none of the operators `=`, `==`, `!=`.
    #[error("invalid field selector: '{term}': expected <field>=<value>, <field>==<value> or <field>!=<value>")]
    MissingOperator { term: String },
    /// The field path of `term` is empty or has characters other than ASCII
    /// alphanumerics and `.`, `_`, `-`, `/`.
    #[error("invalid field selector: '{term}': invalid field path \"{field}\": must be non-empty and consist of alphanumerics, '.', '_', '-' or '/'")]
    InvalidField { term: String, field: String },
    /// The value of `term` has a backslash followed by something other than
    /// `\`, `,` or `=` (`sequence`), or ends with a lone backslash.
    #[error("invalid field selector: '{term}': invalid escape sequence \"{sequence}\" in value (only \\\\, \\, and \\= are allowed)")]
    InvalidEscape { term: String, sequence: String },
    /// The value of `term` contains an unescaped `=`.
    #[error("invalid field selector: '{term}': unescaped '=' in value (write \\=)")]
    UnescapedEquals { term: String },
}

/// The operator of a field selector term.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldOperator {
    /// `field=value` or `field==value`.
    Equals,
    /// `field!=value`.
    NotEquals,
}

impl fmt::Display for FieldOperator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FieldOperator::Equals => "=",
            FieldOperator::NotEquals => "!=",
        })
    }
}

/// One term of a field selector: `field op value`, with `value` unescaped.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FieldRequirement {
    /// Dotted field path, e.g. `metadata.name`, `spec.nodeName`.
    pub field: String,
    /// `=` or `!=`.
    pub op: FieldOperator,
    /// The value to compare with (escapes already resolved; may be empty).
    pub value: String,
}

impl FieldRequirement {
    /// Whether `obj` satisfies this term. The field is looked up by dotted
    /// path ([`field_value`]); a missing or `null` field reads as `""`;
    /// objects and arrays equal no value (so `!=` always holds for them).
    pub fn matches(&self, obj: &Value) -> bool {
        let equal = field_value(obj, &self.field).is_some_and(|v| v == self.value);
        match self.op {
            FieldOperator::Equals => equal,
            FieldOperator::NotEquals => !equal,
        }
    }
}

impl fmt::Display for FieldRequirement {
    /// `field=value` / `field!=value`, re-escaping `\`, `,` and `=` in the value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.field, self.op)?;
        for c in self.value.chars() {
            if matches!(c, '\\' | ',' | '=') {
                f.write_str("\\")?;
            }
            write!(f, "{c}")?;
        }
        Ok(())
    }
}

/// A conjunction of [`FieldRequirement`]s in the order written. Empty =
/// match everything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct FieldSelector {
    requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// The selector that matches every object.
    pub fn everything() -> FieldSelector {
        FieldSelector::default()
    }

    /// Parses `f1=v1,f2!=v2,...`. Terms are split on unescaped commas; empty
    /// terms are skipped (as Kubernetes does), so `""` matches everything.
    /// The operator is the first `!=`, `==` or `=` in the term. Leading and
    /// trailing whitespace around fields and values is ignored. Values must
    /// escape `\`, `,` and `=` with a backslash.
    pub fn parse(input: &str) -> Result<FieldSelector, FieldSelectorError> {
        let mut requirements = Vec::new();
        for term in split_unescaped_commas(input) {
            let term = term.trim();
            if !term.is_empty() {
                requirements.push(parse_term(term)?);
            }
        }
        Ok(FieldSelector { requirements })
    }

    /// The terms, in the order written: lets a server check that every field
    /// is supported for the resource before listing.
    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.requirements
    }

    /// True when the selector has no terms (matches everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether `obj` satisfies every term (see [`FieldRequirement::matches`]).
    pub fn matches(&self, obj: &Value) -> bool {
        self.requirements.iter().all(|r| r.matches(obj))
    }

    /// The value of the first `field=value` (or `==`) term on `field`, if
    /// any. Lets a server narrow a list to one key (e.g. `metadata.name`);
    /// the result must still be filtered with [`matches`](Self::matches),
    /// since other terms may further restrict (or contradict) it.
    pub fn exact_match(&self, field: &str) -> Option<&str> {
        self.requirements
            .iter()
            .find(|r| r.op == FieldOperator::Equals && r.field == field)
            .map(|r| r.value.as_str())
    }
}

impl fmt::Display for FieldSelector {
    /// Terms joined by `,`, values re-escaped; parses back to an equal selector.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl FromStr for FieldSelector {
    type Err = FieldSelectorError;

    /// Same as [`FieldSelector::parse`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FieldSelector::parse(s)
    }
}

/// The string form of the field at dotted `path` in `obj`, as field
/// selectors compare it: strings as is, booleans and numbers in their JSON
/// spelling (`true`, `3`), missing fields and `null` as `""`. Path segments
/// index objects by key and arrays by decimal position. Returns `None` when
/// the field is an object or array, which has no string form.
pub fn field_value(obj: &Value, path: &str) -> Option<String> {
    let mut current = obj;
    for segment in path.split('.') {
        let next = match current {
            Value::Object(map) => map.get(segment),
            Value::Array(items) => segment.parse::<usize>().ok().and_then(|i| items.get(i)),
            _ => None,
        };
        match next {
            Some(v) => current = v,
            None => return Some(String::new()),
        }
    }
    match current {
        Value::Null => Some(String::new()),
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::Array(_) | Value::Object(_) => None,
    }
}

/// Splits on commas not preceded by an escaping backslash (escapes are kept).
fn split_unescaped_commas(input: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut escaped) = (0, false);
    for (i, c) in input.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            ',' => {
                parts.push(&input[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&input[start..]);
    parts
}

fn parse_term(term: &str) -> Result<FieldRequirement, FieldSelectorError> {
    let (field, op, raw_value) = ["!=", "==", "="]
        .iter()
        .filter_map(|op| term.find(op).map(|at| (at, *op)))
        .min_by_key(|&(at, op)| (at, std::cmp::Reverse(op.len())))
        .map(|(at, op)| (&term[..at], op, &term[at + op.len()..]))
        .ok_or_else(|| FieldSelectorError::MissingOperator { term: term.into() })?;
    let field = field.trim();
    let field_ok = !field.is_empty()
        && field
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-/".contains(&b));
    if !field_ok {
        let (term, field) = (term.into(), field.into());
        return Err(FieldSelectorError::InvalidField { term, field });
    }
    let op = if op == "!=" {
        FieldOperator::NotEquals
    } else {
        FieldOperator::Equals
    };
    let value = unescape(raw_value.trim(), term)?;
    Ok(FieldRequirement {
        field: field.into(),
        op,
        value,
    })
}

/// Resolves `\\`, `\,`, `\=`; rejects other escapes and bare `=`.
fn unescape(raw: &str, term: &str) -> Result<String, FieldSelectorError> {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e @ ('\\' | ',' | '=')) => out.push(e),
                other => {
                    let sequence = format!("\\{}", other.map(String::from).unwrap_or_default());
                    let term = term.into();
                    return Err(FieldSelectorError::InvalidEscape { term, sequence });
                }
            },
            '=' => return Err(FieldSelectorError::UnescapedEquals { term: term.into() }),
            _ => out.push(c),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Value {
        json!({
            "metadata": {"name": "web-1", "namespace": "default", "uid": "u-1"},
            "spec": {"nodeName": "node-2", "unschedulable": true, "priority": 7,
                     "containers": [{"name": "app"}]},
            "status": {"phase": "Running", "note": null}
        })
    }

    #[test]
    fn parses_terms_and_escapes() {
        let sel = FieldSelector::parse(
            "spec.nodeName=node-2, status.phase == Running,metadata.namespace!=kube-system",
        )
        .unwrap();
        let terms: Vec<_> = sel
            .requirements()
            .iter()
            .map(|r| (r.field.as_str(), r.op, r.value.as_str()))
            .collect();
        assert_eq!(
            terms,
            [
                ("spec.nodeName", FieldOperator::Equals, "node-2"),
                ("status.phase", FieldOperator::Equals, "Running"),
                (
                    "metadata.namespace",
                    FieldOperator::NotEquals,
                    "kube-system"
                ),
            ]
        );
        assert_eq!(
            sel.to_string(),
            "spec.nodeName=node-2,status.phase=Running,metadata.namespace!=kube-system"
        );

        let sel: FieldSelector = r"a.b=x\,y\=z\\w,c!=".parse().unwrap();
        assert_eq!(sel.requirements()[0].value, r"x,y=z\w");
        assert_eq!(sel.requirements()[1].value, "");
        assert_eq!(sel.to_string(), r"a.b=x\,y\=z\\w,c!=");
        assert_eq!(FieldSelector::parse(&sel.to_string()), Ok(sel));

        for empty in ["", "  ", ",", " , ,"] {
            let sel = FieldSelector::parse(empty).unwrap();
            assert!(sel.is_empty() && sel.matches(&json!({})), "{empty:?}");
        }
    }

    #[test]
    fn matches_objects_by_dotted_path() {
        let cases = [
            ("metadata.name=web-1", true),
            ("metadata.name==web-2", false),
            ("metadata.namespace!=default", false),
            ("metadata.namespace!=other", true),
            ("spec.nodeName=node-2,status.phase=Running", true),
            ("spec.nodeName=node-2,status.phase=Pending", false),
            ("spec.unschedulable=true", true),
            ("spec.unschedulable=false", false),
            ("spec.priority=7", true),
            ("spec.missing=", true),
            ("spec.missing!=", false),
            ("spec.missing=x", false),
            ("status.note=", true),
            ("spec.containers.0.name=app", true),
            ("spec.containers.1.name=", true),
            ("spec.containers!=", true),
            ("spec=", false),
            ("metadata.name.deeper=", true),
        ];
        let pod = pod();
        for (input, expected) in cases {
            assert_eq!(
                FieldSelector::parse(input).unwrap().matches(&pod),
                expected,
                "{input}"
            );
        }
        assert_eq!(field_value(&pod, "spec.priority").as_deref(), Some("7"));
        assert_eq!(field_value(&pod, "metadata"), None);
        let escaped = FieldSelector::parse(r"metadata.name=a\,b").unwrap();
        assert!(escaped.matches(&json!({"metadata": {"name": "a,b"}})));
        assert!(!escaped.matches(&json!({"metadata": {"name": r"a\,b"}})));
    }

    #[test]
    fn exact_match_finds_equality_terms_only() {
        let sel =
            FieldSelector::parse("metadata.namespace!=x,metadata.name==web-1,metadata.name=other")
                .unwrap();
        assert_eq!(sel.exact_match("metadata.name"), Some("web-1"));
        assert_eq!(sel.exact_match("metadata.namespace"), None);
        assert_eq!(sel.exact_match("spec.nodeName"), None);
        assert_eq!(
            FieldSelector::everything().exact_match("metadata.name"),
            None
        );
    }

    #[test]
    fn rejects_malformed_selectors() {
        use FieldSelectorError as E;
        let cases: [(&str, E, &str); 8] = [
            (
                "metadata.name",
                E::MissingOperator {
                    term: "metadata.name".into(),
                },
                "expected <field>=<value>",
            ),
            ("a=b,c", E::MissingOperator { term: "c".into() }, "'c'"),
            (
                "=x",
                E::InvalidField {
                    term: "=x".into(),
                    field: "".into(),
                },
                "invalid field path \"\"",
            ),
            (
                "a b=x",
                E::InvalidField {
                    term: "a b=x".into(),
                    field: "a b".into(),
                },
                "\"a b\"",
            ),
            (
                "a!b=x",
                E::InvalidField {
                    term: "a!b=x".into(),
                    field: "a!b".into(),
                },
                "\"a!b\"",
            ),
            (
                r"a=x\y",
                E::InvalidEscape {
                    term: r"a=x\y".into(),
                    sequence: r"\y".into(),
                },
                r#""\y""#,
            ),
            (
                r"a=x\",
                E::InvalidEscape {
                    term: r"a=x\".into(),
                    sequence: r"\".into(),
                },
                "invalid escape",
            ),
            (
                "a!=b=c",
                E::UnescapedEquals {
                    term: "a!=b=c".into(),
                },
                "unescaped '='",
            ),
        ];
        for (input, expected, fragment) in cases {
            let err = FieldSelector::parse(input).expect_err(input);
            assert_eq!(err, expected, "{input}");
            let msg = err.to_string();
            assert!(msg.starts_with("invalid field selector: "), "{msg}");
            assert!(
                msg.contains(fragment),
                "{input}: {msg:?} lacks {fragment:?}"
            );
        }
    }
}
