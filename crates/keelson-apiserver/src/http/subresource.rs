//! Subresources: status, scale, binding, eviction, finalize, and the node-agent ones
//! (log, exec).

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::Request;
use axum::response::Response;
use http::{Method, StatusCode};
use keelson_apimachinery::labels::LabelSelector;
use serde_json::{json, Value};

use super::negotiate::{self, Representation};
use super::request::ResourceRequest;
use super::resource::{check_schema, delete_options, dry_run, object_response, read_body};
use super::{json_response, patch, ApiState};
use crate::catalog::{self, ResourceDef, Subresource};
use crate::error::ApiError;
use crate::meta::UpdateScope;
use crate::registry::{DeleteOptions, Deleted, Registry};
use crate::storage::list_prefix;

pub(crate) async fn handle(
    state: &Arc<ApiState>,
    reg: &Registry,
    rr: ResourceRequest,
    sub: Subresource,
    q: HashMap<String, String>,
    req: Request,
) -> Result<Response, ApiError> {
    let def = rr.def;
    let Some(name) = rr.name.clone() else { return Err(ApiError::NoRoute) };
    let ns = rr.namespace.clone();
    let method = req.method().clone();
    let repr = negotiate::representation(req.headers()).unwrap_or(Representation::Object);
    match (sub, method) {
        (Subresource::Status, Method::GET) => {
            let s = reg.get(def, ns.as_deref(), &name).await?;
            object_response(StatusCode::OK, def, &s.obj, repr, &q)
        }
        (Subresource::Status | Subresource::Finalize, Method::PUT) => {
            let (headers, body) = read_body(req).await?;
            let mut obj = negotiate::decode_body(&headers, &body)?;
            check_schema(def, &q, &mut obj)?;
            let scope = if sub == Subresource::Status { UpdateScope::Status } else { UpdateScope::Main };
            let (obj, _) = reg
                .update_with(def, ns.as_deref(), &name, scope, dry_run(&q)?, |cur| {
                    Ok(cur.map(|c| {
                        if sub == Subresource::Finalize {
                            // Only spec.finalizers may change through finalize.
                            let mut next = c.clone();
                            next["spec"]["finalizers"] = obj.pointer("/spec/finalizers").cloned().unwrap_or(json!([]));
                            next
                        } else {
                            obj.clone()
                        }
                    }))
                })
                .await?;
            object_response(StatusCode::OK, def, &obj, Representation::Object, &q)
        }
        (Subresource::Status, Method::PATCH) => {
            let (headers, body) = read_body(req).await?;
            let (obj, _) = patch::patch(reg, &rr, &name, UpdateScope::Status, &q, &headers, &body).await?;
            object_response(StatusCode::OK, def, &obj, Representation::Object, &q)
        }
        (Subresource::Scale, Method::GET) => {
            let s = reg.get(def, ns.as_deref(), &name).await?;
            Ok(json_response(StatusCode::OK, &scale_of(&s.obj)))
        }
        (Subresource::Scale, Method::PUT | Method::PATCH) => {
            let is_patch = req.method() == Method::PATCH;
            let (headers, body) = read_body(req).await?;
            let input = if is_patch { None } else { Some(negotiate::decode_body(&headers, &body)?) };
            let kind = if is_patch { Some(negotiate::patch_kind(&headers)?) } else { None };
            let patch_body = if is_patch { Some(negotiate::parse_json(&body)?) } else { None };
            let manager = super::patch::manager(&q, &headers);
            let (obj, _) = reg
                .update_with(def, ns.as_deref(), &name, UpdateScope::Main, dry_run(&q)?, |cur| {
                    let Some(cur) = cur else { return Ok(None) };
                    let current_scale = scale_of(cur);
                    let desired = match (&input, kind, &patch_body) {
                        (Some(i), _, _) => i.clone(),
                        (None, Some(negotiate::PatchKind::Json), Some(p)) => keelson_apimachinery::patch::json_patch::apply(&current_scale, p)
                            .map_err(|e| ApiError::BadRequest(e.to_string()))?,
                        (None, Some(_), Some(p)) => keelson_apimachinery::patch::merge_patch::apply(&current_scale, p),
                        _ => unreachable!("a scale request is a PUT or a PATCH"),
                    };
                    if let Some(rv) = desired.pointer("/metadata/resourceVersion").and_then(Value::as_str) {
                        if Some(rv) != cur.pointer("/metadata/resourceVersion").and_then(Value::as_str) {
                            return Err(ApiError::conflict(&def.qualified(), &name));
                        }
                    }
                    let replicas = desired.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(0);
                    if replicas < 0 {
                        return Err(ApiError::invalid("Scale", "autoscaling", &name, vec![crate::error::Cause::invalid("spec.replicas", "Invalid value: must be greater than or equal to 0")]));
                    }
                    let mut next = cur.clone();
                    next["spec"]["replicas"] = json!(replicas);
                    next["metadata"].as_object_mut().map(|m| m.remove("resourceVersion"));
                    crate::fieldset::record_update(Some(cur), &mut next, &manager, &def.api_version(), &crate::registry::now_rfc3339(), Some("scale"));
                    Ok(Some(next))
                })
                .await?;
            Ok(json_response(StatusCode::OK, &scale_of(&obj)))
        }
        (Subresource::Binding, Method::POST) => {
            let (headers, body) = read_body(req).await?;
            let binding = negotiate::decode_body(&headers, &body)?;
            bind_pod(reg, def, ns.as_deref(), &name, &binding, dry_run(&q)?).await
        }
        (Subresource::Eviction, Method::POST) => {
            let (headers, body) = read_body(req).await?;
            let eviction = if body.is_empty() { json!({}) } else { negotiate::decode_body(&headers, &body)? };
            let pod = reg.get(def, ns.as_deref(), &name).await?;
            reserve_disruption(state, ns.as_deref().unwrap_or("default"), &pod.obj).await?;
            let mut opts = match eviction.get("deleteOptions") {
                Some(d) if d.is_object() => delete_options(&q, &http::HeaderMap::new(), d.to_string().as_bytes())?,
                _ => DeleteOptions::default(),
            };
            opts.dry_run |= dry_run(&q)?;
            match reg.delete(def, ns.as_deref(), &name, &opts).await? {
                Deleted::Gone(_) | Deleted::Pending(_) => {}
            }
            Ok(json_response(StatusCode::CREATED, &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})))
        }
        (Subresource::Token, Method::POST) => {
            let (headers, body) = read_body(req).await?;
            let tr = if body.is_empty() { json!({}) } else { negotiate::decode_body(&headers, &body)? };
            let out = super::review::token_request(state, ns.as_deref().unwrap_or("default"), &name, tr).await?;
            Ok(json_response(StatusCode::CREATED, &out))
        }
        (Subresource::Log | Subresource::Exec | Subresource::Attach | Subresource::PortForward, _) => {
            let pod = reg.get(def, ns.as_deref(), &name).await?;
            let node = pod.obj.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or("");
            if node.is_empty() {
                return Err(ApiError::BadRequest(format!("pod {name} does not have a host assigned")));
            }
            let nodes = catalog::lookup("", "v1", "nodes").ok_or(ApiError::NoRoute)?;
            let node_obj = reg.get(nodes, None, node).await?;
            if sub == Subresource::Log {
                return super::node_proxy::pod_log(state.kubelet.as_ref(), &pod.obj, &node_obj.obj, &q).await;
            }
            if sub == Subresource::PortForward {
                return super::node_proxy::pod_port_forward(state.kubelet.as_ref(), &pod.obj, &node_obj.obj, req).await;
            }
            let kind = if sub == Subresource::Attach { super::node_proxy::RemoteCommand::Attach } else { super::node_proxy::RemoteCommand::Exec };
            super::node_proxy::pod_remote_command(state.kubelet.as_ref(), kind, &pod.obj, &node_obj.obj, req).await
        }
        _ => Err(ApiError::MethodNotAllowed),
    }
}


/// Binds pod `name` to the node a `Binding` targets: `pods/{name}/binding`, or
/// `namespaces/{ns}/bindings` naming the pod in its metadata.
pub(crate) async fn bind_pod(reg: &Registry, def: &'static ResourceDef, ns: Option<&str>, name: &str, binding: &Value, dry_run: bool) -> Result<Response, ApiError> {
    let name = name.to_string();
    let node = binding.pointer("/target/name").and_then(Value::as_str).unwrap_or("").to_string();
    if node.is_empty() {
        return Err(ApiError::invalid("Binding", "", &name, vec![crate::error::Cause::required("target.name")]));
    }
    reg.update_with(def, ns, &name, UpdateScope::Whole, dry_run, |cur| {
        let Some(cur) = cur else { return Ok(None) };
        if let Some(existing) = cur.pointer("/spec/nodeName").and_then(Value::as_str).filter(|n| !n.is_empty()) {
            return Err(ApiError::Conflict { resource: "pods".into(), name: name.clone(), message: format!("Operation cannot be fulfilled on pods/binding \"{name}\": pod {name} is already assigned to node \"{existing}\"") });
        }
        let mut next = cur.clone();
        next["spec"]["nodeName"] = json!(node);
        next["metadata"].as_object_mut().map(|m| m.remove("resourceVersion"));
        set_pod_scheduled(&mut next);
        Ok(Some(next))
    })
    .await?;
    Ok(json_response(StatusCode::CREATED, &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})))
}

/// A bound pod's `PodScheduled` condition becomes True, as Kubernetes' binding sets it.
fn set_pod_scheduled(pod: &mut Value) {
    let now = crate::registry::now_rfc3339();
    let condition = json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now});
    if !pod["status"].is_object() {
        pod["status"] = json!({});
    }
    let conditions = pod["status"]["conditions"].as_array().cloned().unwrap_or_default();
    let mut kept: Vec<Value> = conditions.into_iter().filter(|c| c["type"] != "PodScheduled").collect();
    kept.push(condition);
    pod["status"]["conditions"] = Value::Array(kept);
}

/// The `autoscaling/v1 Scale` view of a workload.
pub(crate) fn scale_of(obj: &Value) -> Value {
    let selector = obj
        .pointer("/spec/selector")
        .and_then(|s| LabelSelector::from_label_selector_json(s).ok())
        .map(|s| s.to_string())
        .unwrap_or_default();
    let m = &obj["metadata"];
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": m["name"], "namespace": m["namespace"], "uid": m["uid"],
            "resourceVersion": m["resourceVersion"], "creationTimestamp": m["creationTimestamp"],
        },
        "spec": {"replicas": obj.pointer("/spec/replicas").cloned().unwrap_or(json!(0))},
        "status": {"replicas": obj.pointer("/status/replicas").cloned().unwrap_or(json!(0)), "selector": selector},
    })
}

/// Whether a budget's selector covers `pod` (policy/v1: an empty selector covers every
/// pod of the namespace, a missing one none).
fn budget_covers(pdb: &Value, pod: &Value) -> bool {
    let Some(sel) = pdb.pointer("/spec/selector").filter(|s| !s.is_null()) else { return false };
    match LabelSelector::from_label_selector_json(sel) {
        Ok(sel) => sel.is_empty() || sel.matches_object(pod),
        Err(_) => false,
    }
}

/// Takes one disruption from the PodDisruptionBudget covering `pod` before it is
/// evicted, as Kubernetes' eviction does: a pod that is finished, pending or already
/// deleting needs none; more than one budget is an error; none allowed is a 429; else
/// `disruptionsAllowed` goes down by one and the pod is recorded in `disruptedPods`, in
/// one conditional write of the budget's status (so two evictions cannot both take
/// the last one). An unready pod under a budget that is already healthy enough is
/// evicted without taking one (`IfHealthyBudget`).
async fn reserve_disruption(state: &Arc<ApiState>, ns: &str, pod: &Value) -> Result<(), ApiError> {
    let phase = pod.pointer("/status/phase").and_then(Value::as_str).unwrap_or("Pending");
    if matches!(phase, "Succeeded" | "Failed" | "Pending") || pod.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null()) {
        return Ok(());
    }
    let pdbs: &ResourceDef = catalog::lookup("policy", "v1", "poddisruptionbudgets").expect("served");
    let page = state.registry.store.list_page(&list_prefix(pdbs, Some(ns)), None, 0, 0, false).await?;
    let covering: Vec<Value> = page.items.into_iter().map(|s| s.obj).filter(|b| budget_covers(b, pod)).collect();
    let pdb = match covering.as_slice() {
        [] => return Ok(()),
        [one] => one,
        _ => return Err(ApiError::Internal("This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.".into())),
    };
    let name = pdb.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
    let pod_name = pod.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
    let ready = pod.pointer("/status/conditions").and_then(Value::as_array).is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"));
    let now = crate::registry::now_rfc3339();
    state
        .registry
        .update_with(pdbs, Some(ns), &name, UpdateScope::Status, false, |cur| {
            let Some(cur) = cur else { return Ok(None) };
            let st = |f: &str| cur.pointer(&format!("/status/{f}")).and_then(Value::as_i64).unwrap_or(0);
            let (allowed, healthy, desired) = (st("disruptionsAllowed"), st("currentHealthy"), st("desiredHealthy"));
            let generation = cur.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(0);
            let observed = cur.pointer("/status/observedGeneration").and_then(Value::as_i64).unwrap_or(0);
            if !ready && healthy >= desired && observed >= generation {
                // IfHealthyBudget: evicting an unready pod does not lower the budget.
                return Ok(Some(cur.clone()));
            }
            if observed < generation || allowed <= 0 {
                return Err(ApiError::TooManyRequests(format!(
                    "Cannot evict pod as it would violate the pod's disruption budget. The disruption budget {name} needs {desired} healthy pods and has {healthy} currently"
                )));
            }
            let mut next = cur.clone();
            next["status"]["disruptionsAllowed"] = json!(allowed - 1);
            next["status"]["disruptedPods"][&pod_name] = json!(now);
            Ok(Some(next))
        })
        .await
        .map(|_| ())
}
