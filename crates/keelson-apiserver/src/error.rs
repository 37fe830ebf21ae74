//! API errors and their `meta/v1 Status` form.

use serde_json::{json, Value};

/// One `details.causes` entry of a 422 Invalid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    /// `FieldValueRequired`, `FieldValueInvalid`, `FieldValueNotSupported`, …
    pub reason: &'static str,
    pub field: String,
    pub message: String,
}

impl Cause {
    pub fn required(field: impl Into<String>) -> Self {
        Self { reason: "FieldValueRequired", field: field.into(), message: "Required value".into() }
    }
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { reason: "FieldValueInvalid", field: field.into(), message: message.into() }
    }
    pub fn too_long(field: impl Into<String>, limit: usize) -> Self {
        Self { reason: "FieldValueTooLong", field: field.into(), message: format!("Too long: may not be more than {limit} bytes") }
    }
}

/// An API failure; rendered as a `Status` with the matching HTTP code.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ApiError {
    /// 400: the request is malformed.
    #[error("{0}")]
    BadRequest(String),
    /// 401: no or unknown credentials.
    #[error("Unauthorized")]
    Unauthorized,
    /// 403: authenticated but not allowed.
    #[error("{0}")]
    Forbidden(String),
    /// 404: the object (or its namespace) does not exist.
    #[error("{resource} \"{name}\" not found")]
    NotFound { resource: String, name: String },
    /// 404 for a path this server does not serve.
    #[error("the server could not find the requested resource")]
    NoRoute,
    /// 405.
    #[error("the server does not allow this method on the requested resource")]
    MethodNotAllowed,
    /// 406: only representations this server does not produce were accepted.
    #[error("{0}")]
    NotAcceptable(String),
    /// 409: the name is taken.
    #[error("{resource} \"{name}\" already exists")]
    AlreadyExists { resource: String, name: String },
    /// 409: optimistic concurrency failure or other conflicting state.
    #[error("{message}")]
    Conflict { resource: String, name: String, message: String },
    /// 409: the request claimed a lease fence that no longer holds (see
    /// [`crate::lease_fence`]); nothing was written.
    #[error("{message}")]
    Fenced { lease: String, message: String },
    /// 410: the requested resourceVersion was compacted.
    #[error("{0}")]
    Gone(String),
    /// 413.
    #[error("{0}")]
    TooLarge(String),
    /// 415.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// 422: validation failed.
    #[error("{kind} \"{name}\" is invalid: {}", render_causes(.causes))]
    Invalid { kind: String, group: String, name: String, causes: Vec<Cause> },
    /// 429: refused for now (e.g. an eviction a disruption budget forbids).
    #[error("{0}")]
    TooManyRequests(String),
    /// 500.
    #[error("{0}")]
    Internal(String),
    /// 503: the store has no leader or the replica is shutting down; retry.
    #[error("{0}")]
    Unavailable(String),
    /// 504: the operation's outcome is unknown (it may still take effect).
    #[error("{0}")]
    Timeout(String),
}

fn render_causes(causes: &[Cause]) -> String {
    let parts: Vec<String> = causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect();
    if parts.len() == 1 {
        parts[0].clone()
    } else {
        format!("[{}]", parts.join(", "))
    }
}

impl ApiError {
    pub fn not_found(resource: impl Into<String>, name: impl Into<String>) -> Self {
        ApiError::NotFound { resource: resource.into(), name: name.into() }
    }

    pub fn conflict(resource: &str, name: &str) -> Self {
        ApiError::Conflict {
            resource: resource.into(),
            name: name.into(),
            message: format!(
                "Operation cannot be fulfilled on {resource} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
            ),
        }
    }

    pub fn invalid(kind: &str, group: &str, name: &str, causes: Vec<Cause>) -> Self {
        ApiError::Invalid { kind: kind.into(), group: group.into(), name: name.into(), causes }
    }

    pub fn code(&self) -> u16 {
        match self {
            ApiError::BadRequest(_) => 400,
            ApiError::Unauthorized => 401,
            ApiError::Forbidden(_) => 403,
            ApiError::NotFound { .. } | ApiError::NoRoute => 404,
            ApiError::MethodNotAllowed => 405,
            ApiError::NotAcceptable(_) => 406,
            ApiError::AlreadyExists { .. } | ApiError::Conflict { .. } | ApiError::Fenced { .. } => 409,
            ApiError::Gone(_) => 410,
            ApiError::TooLarge(_) => 413,
            ApiError::UnsupportedMediaType(_) => 415,
            ApiError::Invalid { .. } => 422,
            ApiError::TooManyRequests(_) => 429,
            ApiError::Internal(_) => 500,
            ApiError::Unavailable(_) => 503,
            ApiError::Timeout(_) => 504,
        }
    }

    pub fn reason(&self) -> &'static str {
        match self {
            ApiError::BadRequest(_) => "BadRequest",
            ApiError::Unauthorized => "Unauthorized",
            ApiError::Forbidden(_) => "Forbidden",
            ApiError::NotFound { .. } | ApiError::NoRoute => "NotFound",
            ApiError::MethodNotAllowed => "MethodNotAllowed",
            ApiError::NotAcceptable(_) => "NotAcceptable",
            ApiError::AlreadyExists { .. } => "AlreadyExists",
            ApiError::Conflict { .. } => "Conflict",
            ApiError::Fenced { .. } => "Fenced",
            ApiError::Gone(_) => "Expired",
            ApiError::TooLarge(_) => "RequestEntityTooLarge",
            ApiError::UnsupportedMediaType(_) => "UnsupportedMediaType",
            ApiError::Invalid { .. } => "Invalid",
            ApiError::TooManyRequests(_) => "TooManyRequests",
            ApiError::Internal(_) => "InternalError",
            ApiError::Unavailable(_) => "ServiceUnavailable",
            ApiError::Timeout(_) => "Timeout",
        }
    }

    /// The `Status` object.
    pub fn status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.to_string(),
            "reason": self.reason(),
            "code": self.code(),
        });
        let details = match self {
            ApiError::NotFound { resource, name } | ApiError::AlreadyExists { resource, name } | ApiError::Conflict { resource, name, .. } => {
                let (kind, group) = split_qualified(resource);
                Some(json!({"name": name, "group": group, "kind": kind}))
            }
            ApiError::Fenced { lease, .. } => Some(json!({"name": lease, "group": "coordination.k8s.io", "kind": "leases"})),
            ApiError::Invalid { kind, group, name, causes } => Some(json!({
                "name": name, "group": group, "kind": kind,
                "causes": causes.iter().map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field})).collect::<Vec<_>>(),
            })),
            _ => None,
        };
        if let Some(d) = details {
            s["details"] = strip_empty_group(d);
        }
        s
    }
}

fn split_qualified(resource: &str) -> (&str, &str) {
    resource.split_once('.').unwrap_or((resource, ""))
}

fn strip_empty_group(mut d: Value) -> Value {
    if d["group"] == "" {
        d.as_object_mut().map(|o| o.remove("group"));
    }
    d
}

impl From<keelson_client::ClientError> for ApiError {
    fn from(e: keelson_client::ClientError) -> Self {
        use keelson_client::api::StoreError;
        use keelson_client::ClientError;
        match e {
            ClientError::Store(StoreError::Compacted { compacted }) => ApiError::Gone(format!(
                "The resourceVersion for the provided list is too old (compacted up to {compacted})."
            )),
            ClientError::Store(StoreError::FutureRevision { current }) => {
                ApiError::Timeout(format!("Too large resource version, current resource version is {current}"))
            }
            ClientError::Store(StoreError::InvalidRequest(m)) => ApiError::Internal(format!("store rejected the request: {m}")),
            // As kube-apiserver answers etcd's "request is too large".
            ClientError::Store(StoreError::RequestTooLarge { size, limit }) => ApiError::TooLarge(format!(
                "the object is too large to store: {size} bytes, the limit is {limit}"
            )),
            ClientError::Store(
                e @ (StoreError::NoLeader(_) | StoreError::NotLeader { .. } | StoreError::Unavailable(_) | StoreError::NoSpace(_)),
            ) => {
                ApiError::Unavailable(format!("storage is unavailable: {e}"))
            }
            ClientError::Store(e) => ApiError::Internal(e.to_string()),
            ClientError::Transport { status, .. } if keelson_client::never_sent(&status) => {
                ApiError::Unavailable(format!("storage is unavailable: {status}"))
            }
            ClientError::Transport { status, .. } => {
                ApiError::Timeout(format!("the outcome of the storage operation is unknown: {}", status.message()))
            }
            e => ApiError::Internal(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_status_is_what_kubectl_prints() {
        let s = ApiError::not_found("pods", "nope").status();
        assert_eq!(s["code"], 404);
        assert_eq!(s["reason"], "NotFound");
        assert_eq!(s["message"], "pods \"nope\" not found");
        assert_eq!(s["details"], json!({"name": "nope", "kind": "pods"}));
    }

    #[test]
    fn invalid_lists_causes() {
        let e = ApiError::invalid("Pod", "", "x", vec![Cause::required("spec.containers"), Cause::invalid("metadata.name", "bad")]);
        let s = e.status();
        assert_eq!(s["code"], 422);
        assert_eq!(s["details"]["causes"].as_array().unwrap().len(), 2);
        assert_eq!(s["message"], "Pod \"x\" is invalid: [spec.containers: Required value, metadata.name: bad]");
        let d = ApiError::AlreadyExists { resource: "deployments.apps".into(), name: "web".into() }.status();
        assert_eq!(d["details"]["group"], "apps");
        assert_eq!(d["details"]["kind"], "deployments");
    }
}
