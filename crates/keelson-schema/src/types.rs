//! The Rust types behind every kind this crate knows: the served resources
//! (from the catalog) plus the kinds that only travel through subresources or
//! as request options (`Scale`, `Eviction`, `Status`, `DeleteOptions`).

use std::borrow::Cow;

use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::policy::v1::Eviction;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, Status};
use k8s_openapi::Resource;
use schemars::{JsonSchema, SchemaGenerator};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::catalog::KIND_TYPES;

/// One kind and the monomorphised functions that work on its k8s-openapi type.
pub(crate) struct TypeEntry {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    /// Accepted under any group version (`DeleteOptions`).
    pub any_group: bool,
    /// Deserialises a JSON object into the type, discarding the result.
    pub check: fn(&Value) -> Result<(), serde_json::Error>,
    /// The type's schema name, which is its Kubernetes definition name.
    pub schema_name: fn() -> Cow<'static, str>,
    /// Adds the type's schema (and everything it references) to a generator.
    pub register: fn(&mut SchemaGenerator),
}

fn check<T: DeserializeOwned>(value: &Value) -> Result<(), serde_json::Error> {
    T::deserialize(value).map(drop)
}

fn register<T: JsonSchema>(generator: &mut SchemaGenerator) {
    generator.subschema_for::<T>();
}

impl TypeEntry {
    pub(crate) const fn of<T: Resource + DeserializeOwned + JsonSchema>() -> TypeEntry {
        TypeEntry::with_gvk::<T>(T::GROUP, T::VERSION, T::KIND, false)
    }

    const fn with_gvk<T: DeserializeOwned + JsonSchema>(
        group: &'static str,
        version: &'static str,
        kind: &'static str,
        any_group: bool,
    ) -> TypeEntry {
        TypeEntry {
            group,
            version,
            kind,
            any_group,
            check: check::<T>,
            schema_name: T::schema_name,
            register: register::<T>,
        }
    }
}

/// Kinds that are not resources of their own.
static EXTRA_TYPES: &[TypeEntry] = &[
    TypeEntry::of::<Scale>(),
    TypeEntry::of::<Eviction>(),
    TypeEntry::of::<Status>(),
    // DeleteOptions has no Resource impl: it is a meta kind every group accepts.
    TypeEntry::with_gvk::<DeleteOptions>("", "v1", "DeleteOptions", true),
];

/// Every known type: the catalog's resources first, then the extra kinds.
pub(crate) fn all_types() -> impl Iterator<Item = &'static TypeEntry> {
    KIND_TYPES.iter().chain(EXTRA_TYPES.iter())
}

/// The type for this group, version and kind.
pub(crate) fn find_type(group: &str, version: &str, kind: &str) -> Option<&'static TypeEntry> {
    all_types()
        .find(|t| t.group == group && t.version == version && t.kind == kind)
        .or_else(|| all_types().find(|t| t.any_group && t.kind == kind))
}

/// Whether [`crate::typecheck`] and [`crate::unknown_fields`] know this kind.
pub fn is_known_kind(group: &str, version: &str, kind: &str) -> bool {
    find_type(group, version, kind).is_some()
}

/// The Kubernetes definition name of a kind's schema
/// (`io.k8s.api.core.v1.Pod`), as used in `#/components/schemas/...`.
pub fn schema_name(group: &str, version: &str, kind: &str) -> Option<String> {
    find_type(group, version, kind).map(|t| (t.schema_name)().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_are_kubernetes_definition_names() {
        assert_eq!(
            schema_name("", "v1", "Pod").as_deref(),
            Some("io.k8s.api.core.v1.Pod")
        );
        assert_eq!(
            schema_name("events.k8s.io", "v1", "Event").as_deref(),
            Some("io.k8s.api.events.v1.Event")
        );
        assert_eq!(
            schema_name("autoscaling", "v1", "Scale").as_deref(),
            Some("io.k8s.api.autoscaling.v1.Scale")
        );
        assert_eq!(
            schema_name("", "v1", "Status").as_deref(),
            Some("io.k8s.apimachinery.pkg.apis.meta.v1.Status")
        );
        assert_eq!(schema_name("apps", "v1", "Pod"), None);
    }

    #[test]
    fn delete_options_is_accepted_in_every_group() {
        assert!(is_known_kind("", "v1", "DeleteOptions"));
        assert!(is_known_kind("apps", "v1", "DeleteOptions"));
        assert!(is_known_kind("meta.k8s.io", "v1", "DeleteOptions"));
        assert!(!is_known_kind("apps", "v1", "Frobnicator"));
    }

    #[test]
    fn kinds_are_unique() {
        let all: Vec<_> = all_types().map(|t| (t.group, t.version, t.kind)).collect();
        for (i, a) in all.iter().enumerate() {
            assert!(!all[i + 1..].contains(a), "duplicate {a:?}");
        }
    }
}
