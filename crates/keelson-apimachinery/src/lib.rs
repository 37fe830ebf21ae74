//! Kubernetes API machinery as pure functions over `serde_json::Value`.
//!
//! - [`body`]: request bodies in JSON and YAML, decoded with their limits;
//! - [`duration`]: durations in Go's syntax (`1m30s`), as Kubernetes writes them;
//! - [`labels`]: label selectors (equality- and set-based), parse and match;
//! - [`fields`]: field selectors, parse and match against an object;
//! - [`patch`]: JSON patch (RFC 6902), JSON merge patch (RFC 7386), strategic merge patch;
//! - [`quantity`]: resource quantities, exactly;
//! - [`table`]: `meta.k8s.io/v1 Table` columns and rows per resource.
//!
//! Architecture invariant: nothing here does I/O or knows about the store.

pub mod body;
pub mod duration;
pub mod fields;
pub mod labels;
pub mod patch;
pub mod quantity;
pub mod table;
