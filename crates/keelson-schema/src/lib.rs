//! Kubernetes type knowledge for the Keelson API server.
//!
//! - [`catalog`]: the one table of served built-in resources (group, version,
//!   kind, plural, scope, verbs, subresources, name rules, field selectors,
//!   printers), backed by k8s-openapi types.
//! - [`typecheck`]: does a JSON body deserialise as the kind's type?
//! - [`unknown_fields`]: Kubernetes-style `unknown field "a.b[0].c"` messages
//!   for `fieldValidation`, from the kind's OpenAPI schema.
//! - [`openapi_v3_index`] / [`openapi_v3_document`]: the `/openapi/v3`
//!   documents kubectl reads (explain, field-validation support, apply).
//!
//! Everything is a pure function of the compiled-in types; expensive results
//! are generated once and cached.

pub mod catalog;
mod hash;
mod openapi;
mod schemas;
mod typecheck;
mod types;
mod unknown;

pub use hash::{content_hash, fnv1a64};
pub use openapi::{
    openapi_v3_document, openapi_v3_document_hash, openapi_v3_document_json,
    openapi_v3_document_ref, openapi_v3_index, KUBERNETES_VERSION, PATCH_CONTENT_TYPES,
};
pub use schemas::{component_schema, REF_PREFIX};
pub use typecheck::{typecheck, SchemaError};
pub use types::{is_known_kind, schema_name};
pub use unknown::{unknown_field_paths, unknown_fields};
