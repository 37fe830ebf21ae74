//! Node restriction: a node identity (`system:node:NAME`, group `system:nodes`) may
//! write only its own Node and Lease and the pods bound to it. Applied after RBAC, to
//! mutating requests of node identities only; the rules are `keelson_rbac::node_restriction`.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use http::Method;
use keelson_apimachinery::patch::{json_patch, merge_patch, strategic};
use keelson_rbac::UserInfo;
use serde_json::Value;

use super::negotiate::{self, PatchKind};
use super::request::{parse_query, ResourceRequest};
use super::ApiState;
use crate::error::ApiError;

/// Checks a node's request; returns the request (its body re-attached) to go on with.
pub(crate) async fn check(state: &Arc<ApiState>, user: &UserInfo, rr: &ResourceRequest, req: Request) -> Result<Request, ApiError> {
    let Some(node) = keelson_rbac::node_name(user) else { return Ok(req) };
    if !matches!(*req.method(), Method::POST | Method::PUT | Method::PATCH | Method::DELETE) {
        return Ok(req);
    }
    let node = node.to_string();
    let query = parse_query(req.uri().query());
    let attrs = crate::auth::attributes::attributes(req.method(), &super::request::Route::Resource(rr.clone()), req.uri().path(), &query);
    let (parts, body) = req.into_parts();
    let bytes = negotiate::read_limited(body).await?;
    let current = match &rr.name {
        Some(name) => match state.registry.get(rr.def, rr.namespace.as_deref(), name).await {
            Ok(s) => Some(s.obj),
            Err(ApiError::NotFound { .. }) => None,
            Err(e) => return Err(e),
        },
        None => None,
    };
    let new: Option<Value> = match parts.method {
        Method::POST | Method::PUT if !bytes.is_empty() => Some(negotiate::decode_body(&parts.headers, &bytes)?),
        Method::PATCH => match (&current, negotiate::patch_kind(&parts.headers)?) {
            (Some(cur), PatchKind::Json) => json_patch::apply(cur, &negotiate::parse_json(&bytes)?).ok(),
            (Some(cur), PatchKind::Merge) => Some(merge_patch::apply(cur, &negotiate::parse_json(&bytes)?)),
            (Some(cur), PatchKind::Strategic | PatchKind::Apply) => {
                let patch = negotiate::parse_yaml(&bytes)?;
                strategic::apply(cur, &patch, &strategic::builtin_schema(&rr.def.api_version(), rr.def.kind)).ok()
            }
            (None, _) => None,
        },
        _ => None,
    };
    let current_for_check = if rr.def.kind == "Pod" && parts.method == Method::POST && rr.subresource.is_none() {
        // A mirror pod's owner is the node's own Node object.
        let nodes = crate::catalog::lookup("", "v1", "nodes").expect("served");
        state.registry.get(nodes, None, &node).await.ok().map(|s| s.obj)
    } else if rr.subresource == Some(crate::catalog::Subresource::Token) {
        // A node may only get tokens bound to a pod on itself: the pod is what is judged.
        let bound = new.as_ref().and_then(|n| n.pointer("/spec/boundObjectRef")).filter(|b| b.get("kind").and_then(Value::as_str) == Some("Pod"));
        match bound.and_then(|b| b.get("name")).and_then(Value::as_str) {
            Some(pod) => {
                let pods = crate::catalog::lookup("", "v1", "pods").expect("served");
                state.registry.get(pods, rr.namespace.as_deref(), pod).await.ok().map(|s| s.obj)
            }
            None => None,
        }
    } else {
        current
    };
    keelson_rbac::node_restriction(&node, &attrs, current_for_check.as_ref(), new.as_ref()).map_err(ApiError::Forbidden)?;
    Ok(Request::from_parts(parts, Body::from(bytes)))
}
