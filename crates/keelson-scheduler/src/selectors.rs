//! Matching labels and fields as the scheduler needs it: label selectors (matchLabels,
//! matchExpressions In/NotIn/Exists/DoesNotExist) and node selector terms (In, NotIn,
//! Exists, DoesNotExist, Gt, Lt over labels; matchFields on `metadata.name`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeSelectorRequirement, NodeSelectorTerm};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

pub type Labels = BTreeMap<String, String>;

/// The labels of an object that has none.
pub static NO_LABELS: Labels = BTreeMap::new();

/// Whether `labels` match `sel`; an empty selector matches everything.
pub fn label_selector_matches(sel: &LabelSelector, labels: &Labels) -> bool {
    let by_labels = sel.match_labels.iter().flatten().all(|(k, v)| labels.get(k) == Some(v));
    let by_exprs = sel.match_expressions.iter().flatten().all(|e| {
        let have = labels.get(&e.key);
        let values = e.values.as_deref().unwrap_or(&[]);
        match e.operator.as_str() {
            "In" => have.is_some_and(|h| values.contains(h)),
            "NotIn" => have.is_none_or(|h| !values.contains(h)),
            "Exists" => have.is_some(),
            "DoesNotExist" => have.is_none(),
            _ => false,
        }
    });
    by_labels && by_exprs
}

fn requirement_matches(r: &NodeSelectorRequirement, value: Option<&String>) -> bool {
    let values = r.values.as_deref().unwrap_or(&[]);
    let number = |s: &str| s.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => matches!((value.and_then(|v| number(v)), values.first().and_then(|v| number(v))), (Some(a), Some(b)) if a > b),
        "Lt" => matches!((value.and_then(|v| number(v)), values.first().and_then(|v| number(v))), (Some(a), Some(b)) if a < b),
        _ => false,
    }
}

/// Whether `node` matches a node selector term: every expression and every field. A
/// term with neither matches nothing, as in Kubernetes.
pub fn term_matches(term: &NodeSelectorTerm, node: &Node) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or(&[]);
    let fields = term.match_fields.as_deref().unwrap_or(&[]);
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    let labels = node.metadata.labels.as_ref().unwrap_or(&NO_LABELS);
    let name = node.metadata.name.clone().unwrap_or_default();
    exprs.iter().all(|r| requirement_matches(r, labels.get(&r.key)))
        && fields.iter().all(|r| r.key == "metadata.name" && requirement_matches(r, Some(&name)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn label_selectors() {
        let sel: LabelSelector = serde_json::from_value(json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["front", "edge"]}, {"key": "canary", "operator": "DoesNotExist"}],
        }))
        .unwrap();
        assert!(label_selector_matches(&sel, &labels(&[("app", "web"), ("tier", "edge")])));
        assert!(!label_selector_matches(&sel, &labels(&[("app", "web"), ("tier", "back")])));
        assert!(!label_selector_matches(&sel, &labels(&[("app", "web"), ("tier", "front"), ("canary", "1")])));
        assert!(label_selector_matches(&LabelSelector::default(), &labels(&[])));
    }

    #[test]
    fn node_selector_terms() {
        let node: Node = serde_json::from_value(json!({"metadata": {"name": "n1", "labels": {"zone": "a", "cores": "8"}}})).unwrap();
        let term = |v: serde_json::Value| -> NodeSelectorTerm { serde_json::from_value(v).unwrap() };
        assert!(term_matches(&term(json!({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]})), &node));
        assert!(term_matches(&term(json!({"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["4"]}]})), &node));
        assert!(!term_matches(&term(json!({"matchExpressions": [{"key": "cores", "operator": "Lt", "values": ["4"]}]})), &node));
        assert!(term_matches(&term(json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]})), &node));
        assert!(!term_matches(&term(json!({"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]})), &node));
        assert!(!term_matches(&term(json!({})), &node), "an empty term matches nothing");
    }
}
