//! Which lists of an object merge, and how.

use std::collections::BTreeMap;

/// How a list field behaves under strategic merge patch.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ListStrategy {
    /// A list of objects merged item by item: a patch item merges into the
    /// original item whose value at this key equals the patch item's
    /// (`containers` by `"name"`); unmatched patch items are appended.
    MergeByKey(String),
    /// A list of primitive values merged as a set: the union of original and
    /// patch values, without duplicates (`metadata.finalizers`).
    MergePrimitives,
    /// Atomic: the patch's list replaces the original wholesale. This is the
    /// strategy of every list the schema does not mention.
    Replace,
}

/// The patch strategies of the list fields of one kind of object.
///
/// Fields are named by their dotted path from the object root. Descending
/// into the items of a list adds no segment, so a container's environment
/// in a Deployment is `spec.template.spec.containers.env`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PatchSchema {
    lists: BTreeMap<String, ListStrategy>,
}

/// Returned for paths the schema does not mention.
static REPLACE: ListStrategy = ListStrategy::Replace;

impl PatchSchema {
    /// A schema in which every list is replaced (JSON merge patch semantics
    /// plus directives).
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the strategy of the list at `path`, replacing any previous one.
    pub fn insert(&mut self, path: impl Into<String>, strategy: ListStrategy) {
        self.lists.insert(path.into(), strategy);
    }

    /// Builder form of [`insert`](Self::insert).
    pub fn with_list(mut self, path: impl Into<String>, strategy: ListStrategy) -> Self {
        self.insert(path, strategy);
        self
    }

    /// Builder: the list at `path` holds objects merged by field `key`.
    pub fn merge_by_key(self, path: impl Into<String>, key: impl Into<String>) -> Self {
        self.with_list(path, ListStrategy::MergeByKey(key.into()))
    }

    /// Builder: the list at `path` is a primitive set merged by union.
    pub fn merge_primitives(self, path: impl Into<String>) -> Self {
        self.with_list(path, ListStrategy::MergePrimitives)
    }

    /// Builder: the list at `path` is atomic. Equivalent to not mentioning
    /// it, but documents intent (and overrides an earlier entry).
    pub fn atomic(self, path: impl Into<String>) -> Self {
        self.with_list(path, ListStrategy::Replace)
    }

    /// The strategy of the list at `path`; [`ListStrategy::Replace`] when the
    /// schema does not mention it.
    pub fn list_strategy(&self, path: &str) -> &ListStrategy {
        self.lists.get(path).unwrap_or(&REPLACE)
    }

    /// All entries, in path order.
    pub fn lists(&self) -> impl Iterator<Item = (&str, &ListStrategy)> {
        self.lists.iter().map(|(p, s)| (p.as_str(), s))
    }

    /// Whether no list merges (every list is replaced).
    pub fn is_empty(&self) -> bool {
        self.lists.values().all(|s| *s == ListStrategy::Replace)
    }
}
