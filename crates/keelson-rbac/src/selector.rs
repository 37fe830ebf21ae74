//! The small label-selector matcher ClusterRole aggregation needs
//! (`metav1.LabelSelector`: `matchLabels` plus `matchExpressions` with the
//! operators `In`, `NotIn`, `Exists`, `DoesNotExist`).
//!
//! Semantics follow Kubernetes: all `matchLabels` pairs and all expressions
//! must hold (logical AND); an empty selector (`{}` or `null`) matches every
//! label set; `NotIn` and `DoesNotExist` match objects lacking the key.

use std::collections::BTreeMap;

use serde_json::Value;

/// Why a selector could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// The selector is neither an object nor `null`.
    #[error("label selector must be an object")]
    NotAnObject,
    /// `matchLabels` is not a map of strings.
    #[error("matchLabels must be a map of string to string")]
    BadMatchLabels,
    /// `matchExpressions` is not a list, or an entry lacks a string field.
    #[error("invalid matchExpressions entry: {0}")]
    BadExpression(String),
    /// An operator other than In, NotIn, Exists, DoesNotExist.
    #[error("{0:?} is not a valid label selector operator")]
    UnknownOperator(String),
    /// `In`/`NotIn` with no values, or `Exists`/`DoesNotExist` with values.
    #[error("operator {operator} on key {key:?}: {problem}")]
    BadValues {
        /// The operator.
        operator: &'static str,
        /// The key of the expression.
        key: String,
        /// What is wrong with the values.
        problem: &'static str,
    },
}

/// A set-based selector operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    /// The label's value is one of the values.
    In,
    /// The label is absent or its value is none of the values.
    NotIn,
    /// The label is present (any value).
    Exists,
    /// The label is absent.
    DoesNotExist,
}

impl Operator {
    fn as_str(self) -> &'static str {
        match self {
            Operator::In => "In",
            Operator::NotIn => "NotIn",
            Operator::Exists => "Exists",
            Operator::DoesNotExist => "DoesNotExist",
        }
    }
}

/// One `matchExpressions` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    /// Label key.
    pub key: String,
    /// Operator.
    pub operator: Operator,
    /// Values (non-empty for In/NotIn, empty otherwise).
    pub values: Vec<String>,
}

impl Requirement {
    /// Whether `labels` satisfy this requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            Operator::In => value.is_some_and(|v| self.values.contains(v)),
            Operator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
        }
    }
}

/// A parsed `metav1.LabelSelector`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    /// Exact key=value pairs that must all be present.
    pub match_labels: BTreeMap<String, String>,
    /// Set-based requirements that must all hold.
    pub match_expressions: Vec<Requirement>,
}

impl LabelSelector {
    /// Parses a selector from its API JSON form. `null` parses as the empty
    /// selector (as Go decodes a `null` list element to the zero value).
    /// Operators are validated as the API server does: `In`/`NotIn` need at
    /// least one value, `Exists`/`DoesNotExist` take none.
    pub fn from_json(v: &Value) -> Result<Self, SelectorError> {
        let obj = match v {
            Value::Null => return Ok(LabelSelector::default()),
            Value::Object(o) => o,
            _ => return Err(SelectorError::NotAnObject),
        };
        let mut sel = LabelSelector::default();
        match obj.get("matchLabels") {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) => {
                for (k, v) in m {
                    let v = v.as_str().ok_or(SelectorError::BadMatchLabels)?;
                    sel.match_labels.insert(k.clone(), v.to_string());
                }
            }
            Some(_) => return Err(SelectorError::BadMatchLabels),
        }
        match obj.get("matchExpressions") {
            None | Some(Value::Null) => {}
            Some(Value::Array(exprs)) => {
                for e in exprs {
                    sel.match_expressions.push(parse_requirement(e)?);
                }
            }
            Some(_) => {
                return Err(SelectorError::BadExpression(
                    "matchExpressions must be a list".into(),
                ))
            }
        }
        Ok(sel)
    }

    /// True when the selector has neither labels nor expressions (it then
    /// matches everything).
    pub fn is_empty(&self) -> bool {
        self.match_labels.is_empty() && self.match_expressions.is_empty()
    }

    /// Whether `labels` satisfy every `matchLabels` pair and expression.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| r.matches(labels))
    }
}

fn parse_requirement(e: &Value) -> Result<Requirement, SelectorError> {
    let obj = e
        .as_object()
        .ok_or_else(|| SelectorError::BadExpression("entry must be an object".into()))?;
    let key = obj
        .get("key")
        .and_then(Value::as_str)
        .ok_or_else(|| SelectorError::BadExpression("key must be a string".into()))?
        .to_string();
    let op = obj
        .get("operator")
        .and_then(Value::as_str)
        .ok_or_else(|| SelectorError::BadExpression("operator must be a string".into()))?;
    let operator = match op {
        "In" => Operator::In,
        "NotIn" => Operator::NotIn,
        "Exists" => Operator::Exists,
        "DoesNotExist" => Operator::DoesNotExist,
        other => return Err(SelectorError::UnknownOperator(other.to_string())),
    };
    let values = match obj.get("values") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(vs)) => vs
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| SelectorError::BadExpression("values must be strings".into()))?,
        Some(_) => return Err(SelectorError::BadExpression("values must be a list".into())),
    };
    match operator {
        Operator::In | Operator::NotIn if values.is_empty() => Err(SelectorError::BadValues {
            operator: operator.as_str(),
            key,
            problem: "values must be non-empty",
        }),
        Operator::Exists | Operator::DoesNotExist if !values.is_empty() => {
            Err(SelectorError::BadValues {
                operator: operator.as_str(),
                key,
                problem: "values must be empty",
            })
        }
        _ => Ok(Requirement {
            key,
            operator,
            values,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn sel(v: Value) -> LabelSelector {
        LabelSelector::from_json(&v).unwrap()
    }

    #[test]
    fn match_labels_requires_every_pair() {
        let s = sel(json!({"matchLabels": {"a": "1", "b": "2"}}));
        assert!(s.matches(&labels(&[("a", "1"), ("b", "2"), ("c", "3")])));
        assert!(!s.matches(&labels(&[("a", "1")])));
        assert!(!s.matches(&labels(&[("a", "1"), ("b", "3")])));
    }

    #[test]
    fn operators() {
        let l = labels(&[("tier", "web"), ("env", "prod")]);
        let m = |op: &str, key: &str, vals: Value| {
            sel(json!({"matchExpressions": [{"key": key, "operator": op, "values": vals}]}))
                .matches(&l)
        };
        assert!(m("In", "tier", json!(["web", "db"])));
        assert!(!m("In", "tier", json!(["db"])));
        assert!(!m("In", "missing", json!(["web"])));
        assert!(m("NotIn", "tier", json!(["db"])));
        assert!(!m("NotIn", "tier", json!(["web"])));
        assert!(m("NotIn", "missing", json!(["x"])));
        assert!(m("Exists", "env", json!(null)));
        assert!(!m("Exists", "missing", json!([])));
        assert!(m("DoesNotExist", "missing", json!(null)));
        assert!(!m("DoesNotExist", "env", json!(null)));
    }

    #[test]
    fn empty_and_null_selectors_match_everything() {
        assert!(sel(json!({})).matches(&labels(&[])));
        assert!(sel(json!(null)).matches(&labels(&[("x", "y")])));
        assert!(sel(json!({})).is_empty());
    }

    #[test]
    fn invalid_selectors_are_rejected() {
        let bad = [
            json!("x"),
            json!({"matchLabels": {"a": 1}}),
            json!({"matchLabels": []}),
            json!({"matchExpressions": {}}),
            json!({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}),
            json!({"matchExpressions": [{"key": "a", "operator": "In"}]}),
            json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["1"]}]}),
            json!({"matchExpressions": [{"operator": "Exists"}]}),
            json!({"matchExpressions": [{"key": "a", "operator": "In", "values": [1]}]}),
        ];
        for b in bad {
            assert!(LabelSelector::from_json(&b).is_err(), "accepted {b}");
        }
        assert!(matches!(
            LabelSelector::from_json(&json!({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]})),
            Err(SelectorError::UnknownOperator(op)) if op == "Gt"
        ));
    }

    proptest! {
        /// A matchLabels selector matches exactly the label sets that contain
        /// all of its pairs.
        #[test]
        fn match_labels_is_subset_test(
            sel_pairs in proptest::collection::btree_map("[a-c]", "[xy]", 0..3),
            obj_pairs in proptest::collection::btree_map("[a-d]", "[xyz]", 0..4),
        ) {
            let s = LabelSelector { match_labels: sel_pairs.clone(), match_expressions: vec![] };
            let expected = sel_pairs.iter().all(|(k, v)| obj_pairs.get(k) == Some(v));
            prop_assert_eq!(s.matches(&obj_pairs), expected);
        }

        /// NotIn is the complement of In for the same key and values.
        #[test]
        fn not_in_complements_in(
            vals in proptest::collection::vec("[xyz]", 1..3),
            obj_pairs in proptest::collection::btree_map("[ab]", "[xyz]", 0..2),
        ) {
            let r = |operator| Requirement { key: "a".into(), operator, values: vals.clone() };
            prop_assert_ne!(r(Operator::In).matches(&obj_pairs), r(Operator::NotIn).matches(&obj_pairs));
        }
    }
}
