//! Workload selectors, through the project's one label-selector implementation
//! (`keelson-apimachinery`), parsed once per sync.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// A workload's selector, ready to match many pods.
pub struct Selector(Option<keelson_apimachinery::labels::LabelSelector>);

impl Selector {
    /// An empty or malformed selector selects nothing: a workload with one would
    /// otherwise claim every pod of its namespace.
    pub fn new(sel: &LabelSelector) -> Self {
        let parsed = serde_json::to_value(sel).ok().and_then(|v| keelson_apimachinery::labels::LabelSelector::from_label_selector_json(&v).ok());
        Self(parsed.filter(|s| !s.is_empty()))
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.as_ref().is_some_and(|s| s.matches(labels))
    }
}
