//! Answered-not-stored resources: access reviews (`kubectl auth can-i`), whoami,
//! token reviews, and `serviceaccounts/token` (`kubectl create token`).

use std::sync::Arc;

use keelson_rbac::{Attributes, Decision, NonResourceAttributes, ResourceAttributes, UserInfo};
use serde_json::{json, Value};

use super::request::VirtualRequest;
use super::ApiState;
use crate::auth::authn::{user, TokenIdentity};
use crate::auth::sa_token;
use crate::catalog;
use crate::error::ApiError;

fn attributes_from_spec(spec: &Value, default_ns: Option<&str>) -> Result<Attributes, ApiError> {
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let opt = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).filter(|x| !x.is_empty()).map(String::from);
    if let Some(r) = spec.get("resourceAttributes") {
        return Ok(Attributes::Resource(ResourceAttributes {
            verb: s(r, "verb"),
            api_group: s(r, "group"),
            resource: s(r, "resource"),
            subresource: opt(r, "subresource"),
            namespace: opt(r, "namespace").or_else(|| default_ns.map(String::from)),
            name: opt(r, "name"),
        }));
    }
    if let Some(n) = spec.get("nonResourceAttributes") {
        return Ok(Attributes::NonResource(NonResourceAttributes { verb: s(n, "verb"), path: s(n, "path") }));
    }
    Err(ApiError::invalid("SelfSubjectAccessReview", "authorization.k8s.io", "", vec![crate::error::Cause::required("spec.resourceAttributes")]))
}

fn review_status(d: &Decision) -> Value {
    match d {
        Decision::Allow { reason } => json!({"allowed": true, "reason": reason}),
        Decision::Deny { reason } => json!({"allowed": false, "reason": reason}),
    }
}

fn user_json(u: &UserInfo) -> Value {
    json!({"username": u.name, "uid": u.uid, "groups": u.groups, "extra": u.extra})
}

/// Handles a POST to a virtual resource on behalf of `caller`.
/// The review's `spec`: the body must be an object and its `spec`, when set, one too
/// (as Kubernetes' decoding into the review's struct requires), else a 400.
fn review_spec(body: &Value) -> Result<Value, ApiError> {
    let kind = |v: &Value| match v {
        Value::Array(_) => "sequence",
        Value::String(_) => "string",
        Value::Number(_) => "number",
        Value::Bool(_) => "boolean",
        Value::Null => "null",
        Value::Object(_) => "object",
    };
    if !body.is_object() {
        return Err(ApiError::BadRequest(format!("expected a JSON object, got {}", kind(body))));
    }
    match body.get("spec") {
        None | Some(Value::Null) => Ok(json!({})),
        Some(spec @ Value::Object(_)) => Ok(spec.clone()),
        Some(other) => Err(ApiError::BadRequest(format!("spec: expected a JSON object, got {}", kind(other)))),
    }
}

pub(crate) async fn handle(state: &Arc<ApiState>, v: &VirtualRequest, caller: &UserInfo, body: Value) -> Result<Value, ApiError> {
    let spec = review_spec(&body)?;
    let status = match v.def.plural {
        "selfsubjectaccessreviews" => {
            let attrs = attributes_from_spec(&spec, None)?;
            review_status(&state.authz.authorize(caller, &attrs).await?)
        }
        "subjectaccessreviews" | "localsubjectaccessreviews" => {
            let mut subject = UserInfo::new(spec.get("user").and_then(Value::as_str).unwrap_or(""));
            subject.groups = spec.get("groups").and_then(Value::as_array).map(|g| g.iter().filter_map(|x| x.as_str().map(String::from)).collect()).unwrap_or_default();
            subject.uid = spec.get("uid").and_then(Value::as_str).unwrap_or("").into();
            let mut attrs = attributes_from_spec(&spec, v.namespace.as_deref())?;
            if let (Some(ns), Attributes::Resource(r)) = (&v.namespace, &mut attrs) {
                if r.namespace.as_deref().is_some_and(|n| n != ns) {
                    return Err(ApiError::BadRequest("spec.resourceAttributes.namespace must match the URL's namespace".into()));
                }
                r.namespace = Some(ns.clone());
            }
            review_status(&state.authz.authorize(&subject, &attrs).await?)
        }
        "selfsubjectrulesreviews" => {
            let ns = spec.get("namespace").and_then(Value::as_str).filter(|s| !s.is_empty());
            let r = state.authz.snapshot().rules_review(caller, ns);
            let mut st = json!({"resourceRules": r.resource_rules, "nonResourceRules": r.non_resource_rules, "incomplete": r.incomplete});
            if let Some(e) = r.evaluation_error {
                st["evaluationError"] = json!(e);
            }
            st
        }
        "selfsubjectreviews" => json!({"userInfo": user_json(caller)}),
        "tokenreviews" => {
            let token = spec.get("token").and_then(Value::as_str).unwrap_or("");
            match state.authn.authenticate(token, jiff::Timestamp::now().as_second()) {
                TokenIdentity::User(u) => json!({"authenticated": true, "user": user_json(&u)}),
                TokenIdentity::ServiceAccount(u, claim) => {
                    if service_account_uid(state, &claim.namespace, &claim.name).await?.as_deref() == Some(claim.uid.as_str()) {
                        json!({"authenticated": true, "user": user_json(&u), "audiences": [sa_token::ISSUER]})
                    } else {
                        json!({"authenticated": false, "error": "service account no longer exists"})
                    }
                }
                TokenIdentity::Invalid(e) => json!({"authenticated": false, "error": e}),
            }
        }
        _ => return Err(ApiError::NoRoute),
    };
    let mut out = body;
    out["apiVersion"] = json!(v.def.api_version());
    out["kind"] = json!(v.def.kind);
    if !out.get("metadata").is_some_and(Value::is_object) {
        out["metadata"] = json!({});
    }
    out["status"] = status;
    Ok(out)
}

/// The uid of a ServiceAccount, if it exists.
pub(crate) async fn service_account_uid(state: &ApiState, ns: &str, name: &str) -> Result<Option<String>, ApiError> {
    let def = catalog::lookup("", "v1", "serviceaccounts").expect("served");
    match state.registry.get(def, Some(ns), name).await {
        Ok(s) => Ok(s.obj.pointer("/metadata/uid").and_then(Value::as_str).map(String::from)),
        Err(ApiError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// `POST serviceaccounts/NAME/token`: a TokenRequest answered with a signed token.
pub(crate) async fn token_request(state: &Arc<ApiState>, ns: &str, name: &str, body: Value) -> Result<Value, ApiError> {
    let signer = state.authn.signer().ok_or_else(|| ApiError::Unavailable("this server has no service-account signing key".into()))?;
    let spec = review_spec(&body)?;
    let uid = service_account_uid(state, ns, name).await?.ok_or_else(|| ApiError::not_found("serviceaccounts", name))?;
    let ttl = spec.get("expirationSeconds").and_then(Value::as_i64).unwrap_or(3600);
    if ttl < 600 {
        return Err(ApiError::invalid("TokenRequest", "authentication.k8s.io", name, vec![crate::error::Cause::invalid("spec.expirationSeconds", "may not specify a duration less than 10 minutes")]));
    }
    let audiences: Vec<String> = spec
        .get("audiences")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|x| x.as_str().map(String::from)).collect())
        .filter(|a: &Vec<String>| !a.is_empty())
        .unwrap_or_else(|| vec![sa_token::ISSUER.to_string()]);
    let now = jiff::Timestamp::now().as_second();
    let token = signer.sign(&sa_token::claims_for(ns, name, &uid, audiences.clone(), now, ttl));
    let exp = jiff::Timestamp::from_second(now + ttl).map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()).unwrap_or_default();
    Ok(json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": name, "namespace": ns, "creationTimestamp": null},
        "spec": {"audiences": audiences, "expirationSeconds": ttl, "boundObjectRef": spec.get("boundObjectRef").cloned().unwrap_or(Value::Null)},
        "status": {"token": token, "expirationTimestamp": exp},
    }))
}

/// The user a request acts as after `Impersonate-*` headers (each checked with the
/// `impersonate` verb), or the caller when there are none.
pub(crate) async fn impersonate(state: &ApiState, caller: UserInfo, headers: &http::HeaderMap) -> Result<(UserInfo, Option<String>), ApiError> {
    let as_user = headers.get("impersonate-user").and_then(|v| v.to_str().ok()).map(String::from);
    let groups: Vec<String> = headers.get_all("impersonate-group").iter().filter_map(|v| v.to_str().ok().map(String::from)).collect();
    let uid = headers.get("impersonate-uid").and_then(|v| v.to_str().ok()).map(String::from);
    let Some(name) = as_user else {
        if !groups.is_empty() || uid.is_some() {
            return Err(ApiError::BadRequest("requested impersonation of groups or uid without impersonating a user".into()));
        }
        return Ok((caller, None));
    };
    let mut checks: Vec<ResourceAttributes> = Vec::new();
    match keelson_rbac::types::parse_service_account_username(&name) {
        Some((ns, sa)) => checks.push(ResourceAttributes { verb: "impersonate".into(), api_group: String::new(), resource: "serviceaccounts".into(), subresource: None, namespace: Some(ns.into()), name: Some(sa.into()) }),
        None => checks.push(ResourceAttributes { verb: "impersonate".into(), api_group: String::new(), resource: "users".into(), subresource: None, namespace: None, name: Some(name.clone()) }),
    }
    for g in &groups {
        checks.push(ResourceAttributes { verb: "impersonate".into(), api_group: String::new(), resource: "groups".into(), subresource: None, namespace: None, name: Some(g.clone()) });
    }
    if let Some(u) = &uid {
        checks.push(ResourceAttributes { verb: "impersonate".into(), api_group: "authentication.k8s.io".into(), resource: "uids".into(), subresource: None, namespace: None, name: Some(u.clone()) });
    }
    for c in checks {
        let attrs = Attributes::Resource(c);
        if matches!(state.authz.authorize(&caller, &attrs).await?, Decision::Deny { .. }) {
            return Err(ApiError::Forbidden(keelson_rbac::forbidden_message(&caller, &attrs)));
        }
    }
    let mut g = groups;
    if let Some((ns, _)) = keelson_rbac::types::parse_service_account_username(&name) {
        g.push("system:serviceaccounts".into());
        g.push(format!("system:serviceaccounts:{ns}"));
    }
    let mut u = user(name, g);
    u.uid = uid.unwrap_or_default();
    Ok((u, Some(caller.name)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_review_body_and_its_spec_must_be_objects() {
        // schemathesis found `[null, null]` panicking the handler (a 500).
        assert_eq!(review_spec(&json!([null, null])).unwrap_err().to_string(), ApiError::BadRequest("expected a JSON object, got sequence".into()).to_string());
        assert!(review_spec(&json!({"spec": [1]})).unwrap_err().to_string().contains("spec: expected a JSON object, got sequence"));
        assert_eq!(review_spec(&json!({"kind": "TokenReview"})).unwrap(), json!({}));
        assert_eq!(review_spec(&json!({"spec": null})).unwrap(), json!({}));
        assert_eq!(review_spec(&json!({"spec": {"token": "t"}})).unwrap(), json!({"token": "t"}));
    }
}
