//! OpenAPI v3 documents as served at `/openapi/v3` and `/openapi/v3/<path>`.
//!
//! Documents are generated once per process (generation walks every schema)
//! and cached together with their serialised JSON and content hash.
//!
//! Note for the server: kubectl 1.27 and 1.28 `explain` fetch `/openapi/v2`
//! before they use these v3 documents and fail on a 404. Answering
//! `/openapi/v2` with `200` and an empty body (a valid, empty protobuf v2
//! `Document`; media type e.g.
//! `application/com.github.proto-openapi.spec.v2.v1.0+protobuf`) is enough;
//! see `examples/openapi_server.rs`.

mod paths;

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde_json::{json, Map, Value};

pub use paths::PATCH_CONTENT_TYPES;

use crate::catalog::{group_versions, GroupVersion};
use crate::hash::content_hash;
use crate::schemas::{all_schemas, collect_refs, reachable};

/// The Kubernetes version the documents describe (`info.version`).
pub const KUBERNETES_VERSION: &str = "v1.33.0";

struct CachedDocument {
    value: Value,
    json: String,
    hash: String,
}

static DOCUMENTS: OnceLock<BTreeMap<String, CachedDocument>> = OnceLock::new();

fn documents() -> &'static BTreeMap<String, CachedDocument> {
    DOCUMENTS.get_or_init(|| {
        group_versions()
            .into_iter()
            .map(|gv| {
                let value = build_document(gv);
                let json = value.to_string();
                let hash = content_hash(json.as_bytes());
                (gv.path(), CachedDocument { value, json, hash })
            })
            .collect()
    })
}

fn build_document(gv: GroupVersion) -> Value {
    let paths = paths::group_version_paths(gv);
    let mut roots: Vec<String> = Vec::new();
    collect_refs(&Value::Object(paths.clone()), &mut |name| {
        roots.push(name.to_owned())
    });
    let defs = all_schemas();
    let schemas: Map<String, Value> = reachable(defs, &roots)
        .into_iter()
        .filter_map(|name| defs.get(&name).map(|schema| (name, schema.clone())))
        .collect();
    json!({
        "openapi": "3.0.0",
        "info": { "title": "Kubernetes", "version": KUBERNETES_VERSION },
        "paths": paths,
        "components": { "schemas": schemas },
    })
}

/// Accepts `api/v1`, `/api/v1`, `/openapi/v3/api/v1` and ignores a `?query`.
fn normalise(path: &str) -> &str {
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    let path = path.trim_start_matches('/');
    let path = path.strip_prefix("openapi/v3/").unwrap_or(path);
    path.trim_end_matches('/')
}

/// The `/openapi/v3` discovery document:
/// `{"paths":{"api/v1":{"serverRelativeURL":"/openapi/v3/api/v1?hash=<HASH>"},...}}`.
pub fn openapi_v3_index() -> Value {
    let paths: Map<String, Value> = documents()
        .iter()
        .map(|(path, doc)| {
            let url = format!("/openapi/v3/{path}?hash={}", doc.hash);
            (path.clone(), json!({ "serverRelativeURL": url }))
        })
        .collect();
    json!({ "paths": paths })
}

/// The OpenAPI 3.0 document of one group version (`api/v1`, `apis/apps/v1`).
pub fn openapi_v3_document(path: &str) -> Option<Value> {
    openapi_v3_document_ref(path).cloned()
}

/// Like [`openapi_v3_document`], without cloning the cached document.
pub fn openapi_v3_document_ref(path: &str) -> Option<&'static Value> {
    documents().get(normalise(path)).map(|doc| &doc.value)
}

/// The cached JSON serialisation of [`openapi_v3_document`], ready to serve.
pub fn openapi_v3_document_json(path: &str) -> Option<&'static str> {
    documents()
        .get(normalise(path))
        .map(|doc| doc.json.as_str())
}

/// The content hash that the index puts in the document's URL; serve the
/// document with a long cache lifetime when a request's `hash` matches it.
pub fn openapi_v3_document_hash(path: &str) -> Option<&'static str> {
    documents()
        .get(normalise(path))
        .map(|doc| doc.hash.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_lists_every_group_version_with_its_hash() {
        let index = openapi_v3_index();
        let paths = index["paths"].as_object().unwrap();
        assert_eq!(paths.len(), group_versions().len());
        for path in [
            "api/v1",
            "apis/apps/v1",
            "apis/rbac.authorization.k8s.io/v1",
        ] {
            let url = paths[path]["serverRelativeURL"].as_str().unwrap();
            let hash = openapi_v3_document_hash(path).unwrap();
            assert_eq!(url, format!("/openapi/v3/{path}?hash={hash}"));
        }
        assert_eq!(openapi_v3_index(), index, "the index is stable");
    }

    #[test]
    fn v1_document_has_pod_with_group_version_kind() {
        let doc = openapi_v3_document("api/v1").unwrap();
        assert_eq!(doc["openapi"], "3.0.0");
        assert_eq!(
            doc["info"],
            json!({ "title": "Kubernetes", "version": "v1.33.0" })
        );
        let pod = &doc["components"]["schemas"]["io.k8s.api.core.v1.Pod"];
        assert_eq!(
            pod["x-kubernetes-group-version-kind"],
            json!([{ "group": "", "kind": "Pod", "version": "v1" }])
        );
        assert!(
            doc["components"]["schemas"]["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]
                .is_object()
        );
        assert!(doc["paths"]["/api/v1/namespaces/{namespace}/pods"].is_object());
        // Other groups' kinds stay in their own documents ...
        assert!(doc["components"]["schemas"]
            .get("io.k8s.api.apps.v1.Deployment")
            .is_none());
        // ... except kinds served through this group's subresources.
        assert!(doc["components"]["schemas"]["io.k8s.api.policy.v1.Eviction"].is_object());
    }

    #[test]
    fn every_ref_in_every_document_resolves() {
        let index = openapi_v3_index();
        for path in index["paths"].as_object().unwrap().keys() {
            let doc = openapi_v3_document_ref(path).unwrap();
            let schemas = doc["components"]["schemas"].as_object().unwrap();
            let mut refs = 0;
            let mut missing = Vec::new();
            crate::schemas::collect_refs(doc, &mut |name| {
                refs += 1;
                if !schemas.contains_key(name) {
                    missing.push(name.to_owned());
                }
            });
            assert!(missing.is_empty(), "{path}: unresolved {missing:?}");
            assert!(refs > 10, "{path}");
            // collect_refs only sees component refs: make sure there are no others.
            let text = openapi_v3_document_json(path).unwrap();
            assert_eq!(
                text.matches("\"$ref\":").count(),
                refs,
                "{path}: a $ref does not point into #/components/schemas/"
            );
        }
    }

    #[test]
    fn every_resource_kind_schema_is_found_by_its_group_version_kind() {
        for info in crate::catalog::resources() {
            let gv = GroupVersion {
                group: info.group,
                version: info.version,
            };
            let doc = openapi_v3_document_ref(&gv.path()).unwrap();
            let want = json!({ "group": info.group, "kind": info.kind, "version": info.version });
            let found = doc["components"]["schemas"]
                .as_object()
                .unwrap()
                .values()
                .any(|s| {
                    s["x-kubernetes-group-version-kind"]
                        .as_array()
                        .is_some_and(|list| list.contains(&want))
                });
            assert!(found, "{want}");
        }
    }

    #[test]
    fn lookups_normalise_the_path_and_serve_cached_json() {
        let json = openapi_v3_document_json("/openapi/v3/apis/apps/v1?hash=abc").unwrap();
        let parsed: Value = serde_json::from_str(json).unwrap();
        assert_eq!(Some(&parsed), openapi_v3_document_ref("apis/apps/v1"));
        assert!(
            parsed["components"]["schemas"]["io.k8s.api.apps.v1.Deployment"]["description"]
                .is_string()
        );
        assert!(openapi_v3_document("apis/nothing/v1").is_none());
        assert_ne!(
            openapi_v3_document_hash("api/v1"),
            openapi_v3_document_hash("apis/apps/v1")
        );
    }
}
