//! Handlers of a resource's collection and items: get, list, watch, create, update,
//! patch, delete, deletecollection.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, Method, StatusCode};
use serde_json::{json, Value};

use super::list::{self, Selectors};
use super::negotiate::{self, Representation};
use super::request::{query_bool, query_i64, ResourceRequest};
use super::{json_bytes_response, json_response, patch, watch, ApiState};
use crate::catalog::ResourceDef;
use crate::error::ApiError;
use crate::meta::UpdateScope;
use crate::registry::{DeleteOptions, Deleted, Registry};

pub(crate) async fn read_body(req: Request) -> Result<(HeaderMap, Vec<u8>), ApiError> {
    let (parts, body) = req.into_parts();
    let bytes = negotiate::read_limited(body).await?;
    Ok((parts.headers, bytes.to_vec()))
}

pub(crate) fn dry_run(q: &HashMap<String, String>) -> Result<bool, ApiError> {
    match q.get("dryRun").map(String::as_str) {
        None | Some("") => Ok(false),
        Some("All") => Ok(true),
        Some(v) => Err(ApiError::BadRequest(format!("unsupported dryRun value {v:?}: only All is supported"))),
    }
}

/// Schema checks of a request body: type errors are 400; unknown fields are dropped,
/// and reported — as an error under `fieldValidation=Strict`, as warnings under `Warn`
/// (the default), not at all under `Ignore`. Returns the warnings.
pub(crate) fn check_schema(def: &ResourceDef, q: &HashMap<String, String>, obj: &mut Value) -> Result<Vec<String>, ApiError> {
    keelson_schema::typecheck(def.group, def.version, def.kind, obj).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let mode = q.get("fieldValidation").map(String::as_str).unwrap_or("Warn");
    if !["Strict", "Warn", "Ignore", ""].contains(&mode) {
        return Err(ApiError::BadRequest(format!("fieldValidation must be one of Ignore, Warn, Strict; got {mode:?}")));
    }
    let unknown = keelson_schema::unknown_field_paths(def.group, def.version, def.kind, obj);
    if unknown.is_empty() {
        return Ok(Vec::new());
    }
    let msgs: Vec<String> = unknown.iter().map(|u| format!("unknown field {u:?}")).collect();
    if mode == "Strict" {
        return Err(ApiError::BadRequest(format!("strict decoding error: {}", msgs.join(", "))));
    }
    for path in &unknown {
        crate::prune::remove_path(obj, path);
    }
    Ok(if mode == "Ignore" { Vec::new() } else { msgs })
}

pub(crate) fn with_warnings(mut resp: Response, warnings: &[String]) -> Response {
    for w in warnings {
        if let Ok(v) = format!("299 - \"{}\"", w.replace('\\', "\\\\").replace('"', "\\\"")).parse() {
            resp.headers_mut().append("Warning", v);
        }
    }
    resp
}

/// One object in the representation the client asked for.
pub(crate) fn object_response(code: StatusCode, def: &ResourceDef, obj: &Value, repr: Representation, q: &HashMap<String, String>) -> Result<Response, ApiError> {
    Ok(match repr {
        Representation::Object => json_response(code, obj),
        Representation::Metadata => json_response(code, &negotiate::partial_metadata(obj)),
        Representation::Table => {
            let rv = obj.pointer("/metadata/resourceVersion").and_then(Value::as_str).unwrap_or("").to_string();
            json_response(code, &list::table_object(def, std::slice::from_ref(obj), list::include_object(q)?, &rv, None))
        }
    })
}

pub(crate) async fn handle(state: &Arc<ApiState>, reg: &Registry, rr: ResourceRequest, q: HashMap<String, String>, req: Request) -> Result<Response, ApiError> {
    let def = rr.def;
    let ns = rr.namespace.clone();
    if def.namespaced && rr.name.is_some() && ns.is_none() {
        return Err(ApiError::NoRoute);
    }
    let method = req.method().clone();
    if def.list_kind.is_none() {
        return create_only(reg, &rr, &q, req).await;
    }
    let repr = negotiate::representation(req.headers())?;
    match (method, rr.name.clone()) {
        (Method::GET, Some(name)) => {
            if query_bool(&q, "watch")? {
                return Err(ApiError::BadRequest("watch on a single object: use a list with fieldSelector=metadata.name=NAME".into()));
            }
            let s = reg.get(def, ns.as_deref(), &name).await?;
            object_response(StatusCode::OK, def, &s.obj, repr, &q)
        }
        (Method::GET, None) => {
            let sel = Selectors::parse(def, &q)?;
            if query_bool(&q, "watch")? {
                let watcher = req.headers().get(http::header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
                return watch::serve(state.clone(), rr, q, sel, repr, negotiate::response_media(req.headers()), watcher).await;
            }
            let listed = list::list(reg, Some(&state.watch_cache), &rr, &q, &sel).await?;
            match repr {
                // Written as it is made for a JSON client; a protobuf client's body is
                // whole, to be encoded again.
                Representation::Object if negotiate::response_media(req.headers()) == negotiate::ResponseMedia::Json => {
                    let pieces = futures::stream::iter(list::ListPieces::new(def, listed).map(Ok::<_, std::convert::Infallible>));
                    Ok((StatusCode::OK, [(http::header::CONTENT_TYPE, "application/json")], axum::body::Body::from_stream(pieces)).into_response())
                }
                Representation::Object => Ok(json_bytes_response(StatusCode::OK, list::list_body(def, &listed))),
                Representation::Metadata => Ok(json_bytes_response(StatusCode::OK, list::metadata_list_body(&listed))),
                Representation::Table => {
                    let items: Vec<Value> = listed.items.iter().map(|s| s.obj.clone()).collect();
                    let t = list::table_object(def, &items, list::include_object(&q)?, &listed.revision.to_string(), listed.continue_token.as_deref());
                    Ok(json_response(StatusCode::OK, &t))
                }
            }
        }
        (Method::POST, None) => {
            let (headers, body) = read_body(req).await?;
            let mut obj = negotiate::decode_body(&headers, &body)?;
            let warnings = check_schema(def, &q, &mut obj)?;
            let manager = super::patch::manager(&q, &headers);
            crate::fieldset::record_update(None, &mut obj, &manager, &def.api_version(), &crate::registry::now_rfc3339(), None);
            let created = reg.create(def, ns.as_deref(), obj, dry_run(&q)?).await?;
            Ok(with_warnings(object_response(StatusCode::CREATED, def, &created, repr, &q)?, &warnings))
        }
        (Method::PUT, Some(name)) => {
            let (headers, body) = read_body(req).await?;
            let mut obj = negotiate::decode_body(&headers, &body)?;
            let warnings = check_schema(def, &q, &mut obj)?;
            let manager = super::patch::manager(&q, &headers);
            let create_on_update = def.group.is_empty() && def.kind == "Endpoints";
            let (obj, created) = reg
                .update_with(def, ns.as_deref(), &name, UpdateScope::Main, dry_run(&q)?, |cur| {
                    if cur.is_none() && !create_on_update {
                        return Ok(None);
                    }
                    let mut next = obj.clone();
                    crate::fieldset::record_update(cur, &mut next, &manager, &def.api_version(), &crate::registry::now_rfc3339(), None);
                    Ok(Some(next))
                })
                .await?;
            let code = if created { StatusCode::CREATED } else { StatusCode::OK };
            Ok(with_warnings(object_response(code, def, &obj, repr, &q)?, &warnings))
        }
        (Method::PATCH, Some(name)) => {
            let (headers, body) = read_body(req).await?;
            let (obj, created) = patch::patch(reg, &rr, &name, UpdateScope::Main, &q, &headers, &body).await?;
            let code = if created { StatusCode::CREATED } else { StatusCode::OK };
            object_response(code, def, &obj, repr, &q)
        }
        (Method::DELETE, Some(name)) => {
            let (headers, body) = read_body(req).await?;
            let opts = delete_options(&q, &headers, &body)?;
            match reg.delete(def, ns.as_deref(), &name, &opts).await? {
                Deleted::Gone(obj) => object_response(StatusCode::OK, def, &obj, repr, &q),
                // A namespace's content is deleted by the namespace controller.
                Deleted::Pending(obj) => object_response(StatusCode::ACCEPTED, def, &obj, repr, &q),
            }
        }
        (Method::DELETE, None) => {
            let (headers, body) = read_body(req).await?;
            let opts = delete_options(&q, &headers, &body)?;
            let sel = Selectors::parse(def, &q)?;
            let listed = list::list(reg, Some(&state.watch_cache), &rr, &HashMap::new(), &sel).await?;
            let mut deleted = Vec::new();
            for s in listed.items {
                let name = s.obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
                let item_ns = s.obj.pointer("/metadata/namespace").and_then(Value::as_str).map(String::from);
                match reg.delete(def, item_ns.as_deref(), &name, &opts).await {
                    Ok(Deleted::Gone(o) | Deleted::Pending(o)) => deleted.push(o),
                    Err(ApiError::NotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(json_response(StatusCode::OK, &json!({"kind": format!("{}List", def.kind), "apiVersion": def.api_version(), "metadata": {}, "items": deleted})))
        }
        (Method::POST, Some(_)) | (Method::PUT | Method::PATCH, None) => Err(ApiError::MethodNotAllowed),
        _ => Err(ApiError::MethodNotAllowed),
    }
}

/// A create-only resource the router sends here, not to a review: `POST
/// namespaces/{ns}/bindings` binds the pod its body names.
async fn create_only(reg: &Registry, rr: &ResourceRequest, q: &HashMap<String, String>, req: Request) -> Result<Response, ApiError> {
    let def = rr.def;
    if req.method() != Method::POST || rr.name.is_some() || (def.group, def.kind) != ("", "Binding") {
        return Err(ApiError::MethodNotAllowed);
    }
    let (headers, body) = read_body(req).await?;
    let binding = negotiate::decode_body(&headers, &body)?;
    let pod = binding.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
    if pod.is_empty() {
        return Err(ApiError::invalid("Binding", "", "", vec![crate::error::Cause::required("metadata.name")]));
    }
    let pods = crate::catalog::lookup("", "v1", "pods").expect("pods are served");
    super::subresource::bind_pod(reg, pods, rr.namespace.as_deref(), pod, &binding, dry_run(q)?).await
}

/// DeleteOptions from the body (JSON) and query parameters.
pub(crate) fn delete_options(q: &HashMap<String, String>, headers: &HeaderMap, body: &[u8]) -> Result<DeleteOptions, ApiError> {
    let mut o = DeleteOptions::default();
    if !body.iter().all(u8::is_ascii_whitespace) {
        let v = negotiate::decode_body(headers, body)?;
        o.grace_period_seconds = v.get("gracePeriodSeconds").and_then(Value::as_i64);
        o.propagation_policy = v.get("propagationPolicy").and_then(Value::as_str).map(String::from);
        o.precondition_uid = v.pointer("/preconditions/uid").and_then(Value::as_str).map(String::from);
        o.precondition_rv = v.pointer("/preconditions/resourceVersion").and_then(Value::as_str).map(String::from);
        o.dry_run = v.get("dryRun").and_then(Value::as_array).is_some_and(|a| a.iter().any(|x| x == "All"));
        if v.get("orphanDependents") == Some(&json!(true)) && o.propagation_policy.is_none() {
            o.propagation_policy = Some("Orphan".into());
        }
    }
    if let Some(g) = query_i64(q, "gracePeriodSeconds")? {
        o.grace_period_seconds = Some(g);
    }
    if let Some(p) = q.get("propagationPolicy").filter(|p| !p.is_empty()) {
        o.propagation_policy = Some(p.clone());
    }
    o.dry_run |= dry_run(q)?;
    Ok(o)
}
