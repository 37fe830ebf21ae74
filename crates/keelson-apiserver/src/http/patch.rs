//! PATCH: JSON patch, merge patch, strategic merge patch and server-side apply.

use std::collections::HashMap;

use http::HeaderMap;
use keelson_apimachinery::patch::{json_patch, merge_patch, strategic};
use serde_json::Value;

use super::negotiate::{self, PatchKind};
use super::request::{query_bool, ResourceRequest};
use super::resource::{check_schema, dry_run};
use crate::error::ApiError;
use crate::fieldset;
use crate::meta::UpdateScope;
use crate::registry::{now_rfc3339, Registry};

/// The field manager of a request: `fieldManager`, else the User-Agent's program name.
pub(crate) fn manager(q: &HashMap<String, String>, headers: &HeaderMap) -> String {
    if let Some(m) = q.get("fieldManager").filter(|m| !m.is_empty()) {
        return m.clone();
    }
    headers
        .get(http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .and_then(|ua| ua.split('/').next())
        .filter(|s| !s.is_empty())
        .unwrap_or("unknown")
        .to_string()
}

fn patch_sets_rv(kind: PatchKind, patch: &Value) -> bool {
    match kind {
        PatchKind::Json => patch.as_array().is_some_and(|ops| ops.iter().any(|o| o.get("path").and_then(Value::as_str) == Some("/metadata/resourceVersion"))),
        _ => patch.pointer("/metadata/resourceVersion").is_some_and(|v| !v.is_null()),
    }
}

/// Applies a patch to the object at `name`; returns the result and whether it was created
/// (server-side apply creates absent objects).
pub(crate) async fn patch(
    reg: &Registry,
    rr: &ResourceRequest,
    name: &str,
    scope: UpdateScope,
    q: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(Value, bool), ApiError> {
    let def = rr.def;
    let kind = negotiate::patch_kind(headers)?;
    if body.len() > negotiate::MAX_BODY {
        return Err(ApiError::TooLarge("the patch is too large".into()));
    }
    let mut patch = match kind {
        PatchKind::Apply => negotiate::parse_yaml(body)?,
        _ => negotiate::parse_json(body)?,
    };
    let force = query_bool(q, "force")?;
    if force && kind != PatchKind::Apply {
        return Err(ApiError::BadRequest("force is only allowed for apply patches".into()));
    }
    let manager = manager(q, headers);
    if kind == PatchKind::Apply && q.get("fieldManager").is_none_or(|m| m.is_empty()) {
        return Err(ApiError::BadRequest("PATCH, application/apply-patch+yaml requires fieldManager".into()));
    }
    if kind == PatchKind::Apply {
        check_schema(def, q, &mut patch)?;
        if !patch.is_object() {
            return Err(ApiError::BadRequest("an apply patch must be an object".into()));
        }
    }
    let pins_rv = patch_sets_rv(kind, &patch);
    let schema = strategic::builtin_schema(&def.api_version(), def.kind);
    let api_version = def.api_version();
    let subresource = (scope == UpdateScope::Status).then_some("status");
    reg.update_with(def, rr.namespace.as_deref(), name, scope, dry_run(q)?, |cur| {
            let now = now_rfc3339();
            let Some(cur) = cur else {
                if kind != PatchKind::Apply {
                    return Ok(None);
                }
                let mut created = patch.clone();
                if let Some(m) = created.get_mut("metadata").and_then(Value::as_object_mut) {
                    m.insert("name".into(), Value::String(name.into()));
                } else {
                    created["metadata"] = serde_json::json!({"name": name});
                }
                let applied = created.clone();
                fieldset::apply_ownership(None, &applied, &mut created, &manager, &api_version, &now, force).map_err(|c| conflict_error(def, name, &c))?;
                return Ok(Some(created));
            };
            let mut next = match kind {
                PatchKind::Json => json_patch::apply(cur, &patch).map_err(|e| ApiError::Invalid {
                    kind: def.kind.into(),
                    group: def.group.into(),
                    name: name.into(),
                    causes: vec![crate::error::Cause::invalid("", e.to_string())],
                })?,
                PatchKind::Merge => merge_patch::apply(cur, &patch),
                PatchKind::Strategic | PatchKind::Apply => strategic::apply(cur, &patch, &schema).map_err(|e| ApiError::BadRequest(e.to_string()))?,
            };
            if kind == PatchKind::Apply {
                fieldset::apply_ownership(Some(cur), &patch, &mut next, &manager, &api_version, &now, force).map_err(|c| conflict_error(def, name, &c))?;
            } else {
                check_schema(def, q, &mut next)?;
                fieldset::record_update(Some(cur), &mut next, &manager, &api_version, &now, subresource);
            }
            if !pins_rv {
                if let Some(m) = next.get_mut("metadata").and_then(Value::as_object_mut) {
                    m.remove("resourceVersion");
                }
            }
            Ok(Some(next))
        })
        .await
}

fn conflict_error(def: &crate::catalog::ResourceDef, name: &str, conflicts: &[fieldset::Conflict]) -> ApiError {
    let lines: Vec<String> = conflicts
        .iter()
        .map(|c| match &c.subresource {
            Some(sub) => format!("conflict with \"{}\" with subresource \"{sub}\" using {}: {}", c.manager, c.api_version, fieldset::render(&c.path)),
            None => format!("conflict with \"{}\" using {}: {}", c.manager, c.api_version, fieldset::render(&c.path)),
        })
        .collect();
    let message = if lines.len() == 1 {
        format!("Apply failed with 1 conflict: {}", lines[0])
    } else {
        format!("Apply failed with {} conflicts: {}", lines.len(), lines.join("\n"))
    };
    ApiError::Conflict { resource: def.qualified(), name: name.into(), message }
}
