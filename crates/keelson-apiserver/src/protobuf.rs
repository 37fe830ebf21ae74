//! Kubernetes protobuf (`application/vnd.kubernetes.protobuf`): request bodies decoded
//! to the JSON the rest of the server works in, and JSON responses encoded for clients
//! that prefer protobuf (client-go's typed clients, kubectl's `create`, `describe`,
//! `drain`).
//!
//! Handlers answer JSON; [`respond`] re-encodes a whole JSON response when the client
//! asked for protobuf first. Kinds (and fields) the encoder does not know are answered in
//! JSON when the client also accepts it, as kube-apiserver does for custom resources, and
//! refused 406 otherwise. Streams (watches, logs) are left to their handlers.

use axum::body::Body;
use axum::response::Response;
use http::StatusCode;
use axum::body::HttpBody as _;
use http_body_util::BodyExt;
use serde_json::Value;

use crate::error::ApiError;
use crate::http::negotiate::{ResponseMedia, PROTOBUF};

pub fn decode(body: &[u8]) -> Result<Value, ApiError> {
    keelson_kube_protobuf::decode(body).map_err(|e| {
        if e.is_unsupported() {
            ApiError::UnsupportedMediaType(format!("{e}; send this object as application/json"))
        } else {
            ApiError::BadRequest(format!("the protobuf request body is malformed: {e}"))
        }
    })
}

/// What to answer a client that prefers protobuf with, for one JSON value.
#[derive(Debug)]
pub enum Encoded {
    Protobuf(Vec<u8>),
    /// Protobuf cannot carry it and the client accepts JSON: answer the JSON as it is.
    Json,
    /// Protobuf cannot carry it and the client takes nothing else.
    Refused(ApiError),
}

/// Encodes one response value (object, list or Status) for a client preferring protobuf.
pub fn encode(value: &Value, json_acceptable: bool) -> Encoded {
    match keelson_kube_protobuf::encode(value) {
        Ok(body) => Encoded::Protobuf(body),
        Err(e) => {
            if !e.is_unsupported() {
                // The stored object has a shape the encoder does not expect: a bug to
                // see in the log, not the client's fault.
                tracing::warn!(error = %e, "a response could not be encoded as protobuf");
            }
            if json_acceptable {
                Encoded::Json
            } else if e.is_unsupported() {
                Encoded::Refused(ApiError::NotAcceptable(format!("{e}; only application/json is available for it")))
            } else {
                Encoded::Refused(ApiError::Internal(format!("the response could not be encoded as protobuf: {e}")))
            }
        }
    }
}

fn is_json(resp: &Response) -> bool {
    resp.headers().get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|ct| ct.split(';').next() == Some("application/json"))
}

/// The response in the serialization the client asked for: unchanged for JSON
/// clients, for streams (a body without an exact size) and for other content types;
/// otherwise its JSON body re-encoded as protobuf, or as [`encode`] decides.
pub async fn respond(media: ResponseMedia, resp: Response) -> Response {
    let ResponseMedia::Protobuf { json_acceptable } = media else {
        return resp;
    };
    if !is_json(&resp) || resp.body().size_hint().exact().is_none() {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let bytes = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return crate::http::error_response(&ApiError::Internal(format!("reading the response body: {e}"))),
    };
    let value: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        // Not a JSON document after all: pass it on as it is.
        Err(_) => return Response::from_parts(parts, Body::from(bytes)),
    };
    match encode(&value, json_acceptable) {
        Encoded::Protobuf(pb) => {
            parts.headers.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static(PROTOBUF));
            parts.headers.remove(http::header::CONTENT_LENGTH);
            Response::from_parts(parts, Body::from(pb))
        }
        Encoded::Json => Response::from_parts(parts, Body::from(bytes)),
        Encoded::Refused(e) if parts.status.is_success() => crate::http::error_response(&e),
        // An error the client cannot read in protobuf still says what went wrong.
        Encoded::Refused(_) => {
            parts.status = parts.status.max(StatusCode::BAD_REQUEST);
            Response::from_parts(parts, Body::from(bytes))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn json_response(v: &Value) -> Response {
        crate::http::json_response(StatusCode::CREATED, v)
    }

    async fn body_of(resp: Response) -> Vec<u8> {
        resp.into_body().collect().await.unwrap().to_bytes().to_vec()
    }

    #[tokio::test]
    async fn objects_become_protobuf_for_clients_preferring_it() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default", "resourceVersion": "5"}, "data": {"k": "v"}});
        let resp = respond(ResponseMedia::Protobuf { json_acceptable: true }, json_response(&cm)).await;
        assert_eq!(resp.status(), StatusCode::CREATED);
        assert_eq!(resp.headers()[http::header::CONTENT_TYPE], PROTOBUF);
        let body = body_of(resp).await;
        assert!(body.starts_with(b"k8s\0"));
        assert_eq!(keelson_kube_protobuf::decode(&body).unwrap(), cm);
        let same = respond(ResponseMedia::Json, json_response(&cm)).await;
        assert_eq!(same.headers()[http::header::CONTENT_TYPE], "application/json");
        assert_eq!(serde_json::from_slice::<Value>(&body_of(same).await).unwrap(), cm);
    }

    #[tokio::test]
    async fn errors_are_protobuf_statuses() {
        let e = ApiError::NotFound { resource: "configmaps".into(), name: "x".into() };
        let resp = respond(ResponseMedia::Protobuf { json_acceptable: true }, crate::http::error_response(&e)).await;
        assert_eq!(resp.status(), StatusCode::NOT_FOUND);
        assert_eq!(resp.headers()[http::header::CONTENT_TYPE], PROTOBUF);
        let status = keelson_kube_protobuf::decode_envelope(&body_of(resp).await).unwrap();
        assert_eq!((status.api_version.as_str(), status.kind.as_str()), ("v1", "Status"));
        let message = b"configmaps \"x\" not found";
        assert!(status.raw.windows(message.len()).any(|w| w == message), "the Status carries its message");
    }

    #[tokio::test]
    async fn unknown_kinds_fall_back_to_json_or_are_refused() {
        let custom = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 3}});
        let resp = respond(ResponseMedia::Protobuf { json_acceptable: true }, json_response(&custom)).await;
        assert_eq!(resp.headers()[http::header::CONTENT_TYPE], "application/json");
        assert_eq!(serde_json::from_slice::<Value>(&body_of(resp).await).unwrap(), custom);
        let refused = respond(ResponseMedia::Protobuf { json_acceptable: false }, json_response(&custom)).await;
        assert_eq!(refused.status(), StatusCode::NOT_ACCEPTABLE);
        let status: Value = serde_json::from_slice(&body_of(refused).await).unwrap();
        assert_eq!(status["reason"], "NotAcceptable");
    }

    #[tokio::test]
    async fn streams_and_other_types_are_left_alone() {
        let stream = futures::stream::iter(vec![Ok::<_, std::convert::Infallible>(bytes::Bytes::from_static(b"{}\n"))]);
        let resp = Response::builder().header(http::header::CONTENT_TYPE, "application/json").body(Body::from_stream(stream)).unwrap();
        let resp = respond(ResponseMedia::Protobuf { json_acceptable: false }, resp).await;
        assert_eq!(body_of(resp).await, b"{}\n");
        let text = Response::builder().header(http::header::CONTENT_TYPE, "text/plain").body(Body::from("log line")).unwrap();
        let text = respond(ResponseMedia::Protobuf { json_acceptable: false }, text).await;
        assert_eq!(text.headers()[http::header::CONTENT_TYPE], "text/plain");
    }
}
