//! Kubernetes strategic merge patch (`application/strategic-merge-patch+json`)
//! over [`serde_json::Value`].
//!
//! This is the patch format `kubectl apply`, `kubectl edit`, `kubectl label`,
//! `kubectl annotate`, `kubectl cordon` and `kubectl patch` (default type) send.
//! It is JSON merge patch (RFC 7386) plus two things:
//!
//! 1. A per-kind [`PatchSchema`] saying which lists merge instead of being
//!    replaced: lists of objects merged by a *merge key* (containers by `name`,
//!    container ports by `containerPort`, …) and primitive "set" lists merged
//!    by union (`metadata.finalizers`). [`builtin_schema`] returns the table
//!    for the Kubernetes built-in kinds; every other list is replaced.
//! 2. Directives embedded in the patch:
//!    - `"$patch": "replace" | "delete" | "merge"` in a map, and
//!      `{"$patch": "replace"}` / `{"$patch": "delete", <key>: <value>}` as
//!      items of a merged list;
//!    - `"$setElementOrder/<field>": [...]` to order a merged list;
//!    - `"$deleteFromPrimitiveList/<field>": [...]` to remove values from a
//!      primitive list;
//!    - `"$retainKeys": [...]` to drop every key of a map not listed.
//!
//! Directives never appear in the result. Any other key starting with `$`
//! (for example `$ref` in a CRD's OpenAPI schema) is an ordinary field.
//!
//! Entry point: [`apply`].

mod apply;
mod builtin;
mod error;
mod schema;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_directives;

pub use apply::apply;
pub use builtin::builtin_schema;
pub use error::StrategicMergeError;
pub use schema::{ListStrategy, PatchSchema};
