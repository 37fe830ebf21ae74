//! Content negotiation: request body formats and response representations.

use http::HeaderMap;
use serde_json::Value;

use crate::error::ApiError;

/// Largest accepted request body (the Kubernetes limit is 3 MiB).
pub const MAX_BODY: usize = 3 << 20;

/// How much of a body over [`MAX_BODY`] is read and dropped before the 413 goes out. A
/// client sends its whole body before it reads the answer: a connection closed under it
/// while it still writes is a broken pipe where it should have seen the 413. Past this,
/// the connection is dropped.
pub const DRAIN_BEYOND_LIMIT: usize = 16 << 20;

/// A request body of at most [`MAX_BODY`] bytes. A larger one is refused (413) once it has
/// been read to its end, or [`DRAIN_BEYOND_LIMIT`] bytes past the limit.
pub async fn read_limited(body: axum::body::Body) -> Result<bytes::Bytes, ApiError> {
    use http_body_util::BodyExt;
    let mut body = body;
    let mut kept = bytes::BytesMut::new();
    let mut total = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| ApiError::BadRequest(format!("reading the request body: {e}")))?;
        let Ok(data) = frame.into_data() else { continue };
        total += data.len();
        if total <= MAX_BODY {
            kept.extend_from_slice(&data);
        } else if total > MAX_BODY + DRAIN_BEYOND_LIMIT {
            break;
        }
    }
    if total > MAX_BODY {
        return Err(ApiError::TooLarge(format!("the request body is larger than {MAX_BODY} bytes")));
    }
    Ok(kept.freeze())
}

/// How a PATCH body is to be applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchKind {
    Json,
    Merge,
    Strategic,
    Apply,
}

fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// The PATCH type named by the Content-Type.
pub fn patch_kind(headers: &HeaderMap) -> Result<PatchKind, ApiError> {
    match content_type(headers).as_str() {
        "application/json-patch+json" => Ok(PatchKind::Json),
        "application/merge-patch+json" => Ok(PatchKind::Merge),
        "application/strategic-merge-patch+json" => Ok(PatchKind::Strategic),
        "application/apply-patch+yaml" | "application/apply-patch+json" => Ok(PatchKind::Apply),
        other => Err(ApiError::UnsupportedMediaType(format!(
            "the body of the request was in an unknown format ({other:?}) - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json"
        ))),
    }
}

/// Decodes a create/update body by its Content-Type (JSON, YAML, or Kubernetes protobuf).
pub fn decode_body(headers: &HeaderMap, body: &[u8]) -> Result<Value, ApiError> {
    if body.len() > MAX_BODY {
        return Err(ApiError::TooLarge(format!("the request body is {} bytes; the limit is {MAX_BODY}", body.len())));
    }
    let ct = content_type(headers);
    match ct.as_str() {
        "" | "application/json" | "*/*" => parse_json(body),
        "application/yaml" | "application/x-yaml" | "text/yaml" | "application/apply-patch+yaml" => parse_yaml(body),
        "application/vnd.kubernetes.protobuf" => crate::protobuf::decode(body),
        other => Err(ApiError::UnsupportedMediaType(format!(
            "the body of the request was in an unknown format ({other:?}) - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf"
        ))),
    }
}

pub fn parse_json(body: &[u8]) -> Result<Value, ApiError> {
    keelson_apimachinery::body::parse_json(body).map_err(|e| ApiError::BadRequest(e.to_string()))
}

pub fn parse_yaml(body: &[u8]) -> Result<Value, ApiError> {
    keelson_apimachinery::body::parse_yaml(body).map_err(|e| ApiError::BadRequest(e.to_string()))
}

/// The representation a GET/LIST/WATCH should answer with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Representation {
    Object,
    /// `meta.k8s.io/v1 Table` (kubectl get).
    Table,
    /// `meta.k8s.io/v1 PartialObjectMetadata(List)`: metadata only (metadata informers,
    /// kube-rs's metadata watchers, garbage collectors).
    Metadata,
}

/// An object as `PartialObjectMetadata`: its kind and metadata only.
pub fn partial_metadata(obj: &serde_json::Value) -> serde_json::Value {
    serde_json::json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata").cloned().unwrap_or_else(|| serde_json::json!({}))})
}

/// The media type of Kubernetes protobuf bodies.
pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// How a response body is serialized, from the Accept header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponseMedia {
    Json,
    /// Protobuf is preferred (client-go's typed clients send
    /// `application/vnd.kubernetes.protobuf,application/json`); `json_acceptable` says
    /// whether JSON may be answered for what protobuf cannot carry.
    Protobuf { json_acceptable: bool },
}

/// The media types of the Accept header in preference order (by `q`, then position),
/// each with its parameters; those with `q=0` are left out.
fn accepted(headers: &HeaderMap) -> Vec<(String, Vec<String>)> {
    let accept = headers.get(http::header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    let mut out: Vec<(f32, String, Vec<String>)> = Vec::new();
    for part in accept.split(',') {
        let mut params = part.split(';').map(str::trim);
        let mime = params.next().unwrap_or("").to_ascii_lowercase();
        if mime.is_empty() {
            continue;
        }
        let mut q = 1.0;
        let mut rest = Vec::new();
        for p in params.filter(|p| !p.is_empty()) {
            match p.strip_prefix("q=").map(str::parse::<f32>) {
                Some(Ok(v)) => q = v,
                _ => rest.push(p.to_string()),
            }
        }
        if q > 0.0 {
            out.push((q, mime, rest));
        }
    }
    out.sort_by(|a, b| b.0.total_cmp(&a.0));
    out.into_iter().map(|(_, m, p)| (m, p)).collect()
}

/// Whether the response is protobuf: the most preferred acceptable type is plain
/// `application/vnd.kubernetes.protobuf` (not a Table or metadata representation,
/// which are served as JSON only).
pub fn response_media(headers: &HeaderMap) -> ResponseMedia {
    let accepted = accepted(headers);
    let is_json = |m: &str| matches!(m, "application/json" | "*/*" | "application/*");
    let plain = |p: &[String]| !p.iter().any(|p| p.to_ascii_lowercase().starts_with("as="));
    match accepted.iter().position(|(m, p)| m == PROTOBUF && plain(p)) {
        Some(i) if accepted[..i].iter().all(|(m, _)| !is_json(m)) => {
            ResponseMedia::Protobuf { json_acceptable: accepted[i + 1..].iter().any(|(m, _)| is_json(m)) }
        }
        _ => ResponseMedia::Json,
    }
}

/// Picks the response representation from the Accept header.
pub fn representation(headers: &HeaderMap) -> Result<Representation, ApiError> {
    let accept = headers.get(http::header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    if accept.trim().is_empty() {
        return Ok(Representation::Object);
    }
    let mut json_ok = false;
    for part in accept.split(',') {
        let mut params = part.split(';').map(str::trim);
        let mime = params.next().unwrap_or("").to_ascii_lowercase();
        let params: Vec<&str> = params.collect();
        let is_table = params.iter().any(|p| p.eq_ignore_ascii_case("as=Table"));
        let g_meta = params.iter().any(|p| p.eq_ignore_ascii_case("g=meta.k8s.io"));
        if (mime == "application/json" || mime == "*/*") && is_table && g_meta {
            return Ok(Representation::Table);
        }
        let is_partial = params.iter().any(|p| p.eq_ignore_ascii_case("as=PartialObjectMetadata") || p.eq_ignore_ascii_case("as=PartialObjectMetadataList"));
        if (mime == "application/json" || mime == "*/*") && is_partial && g_meta {
            return Ok(Representation::Metadata);
        }
        let other_as = params.iter().any(|p| p.to_ascii_lowercase().starts_with("as="));
        if (mime == "application/json" || mime == "*/*" || mime == "application/*" || mime == PROTOBUF) && !other_as {
            json_ok = true;
        }
    }
    if json_ok {
        Ok(Representation::Object)
    } else {
        Err(ApiError::NotAcceptable(format!("only the following media types are accepted: application/json, application/vnd.kubernetes.protobuf, application/json;as=Table;v=v1;g=meta.k8s.io, application/json;as=PartialObjectMetadata(List);v=v1;g=meta.k8s.io (asked for {accept:?})")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(k: http::header::HeaderName, v: &str) -> HeaderMap {
        let mut m = HeaderMap::new();
        m.insert(k, v.parse().unwrap());
        m
    }

    #[test]
    fn kubectl_accept_headers() {
        let t = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(representation(&h(http::header::ACCEPT, t)).unwrap(), Representation::Table);
        assert_eq!(representation(&h(http::header::ACCEPT, "application/json")).unwrap(), Representation::Object);
        let m = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
        assert_eq!(representation(&h(http::header::ACCEPT, m)).unwrap(), Representation::Metadata);
        assert_eq!(partial_metadata(&serde_json::json!({"kind": "Pod", "metadata": {"name": "p"}, "spec": {}})), serde_json::json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": {"name": "p"}}));
        assert_eq!(representation(&h(http::header::ACCEPT, "application/vnd.kubernetes.protobuf,application/json")).unwrap(), Representation::Object);
        assert_eq!(representation(&h(http::header::ACCEPT, "application/vnd.kubernetes.protobuf")).unwrap(), Representation::Object);
        assert_eq!(representation(&h(http::header::ACCEPT, "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io")).unwrap_err().code(), 406);
        assert_eq!(representation(&h(http::header::ACCEPT, "text/html")).unwrap_err().code(), 406);
    }

    #[test]
    fn protobuf_when_preferred() {
        let media = |accept: &str| response_media(&h(http::header::ACCEPT, accept));
        assert_eq!(media("application/vnd.kubernetes.protobuf,application/json"), ResponseMedia::Protobuf { json_acceptable: true });
        assert_eq!(media("application/vnd.kubernetes.protobuf"), ResponseMedia::Protobuf { json_acceptable: false });
        assert_eq!(media("application/json, application/vnd.kubernetes.protobuf"), ResponseMedia::Json);
        assert_eq!(media("application/json;q=0.5, application/vnd.kubernetes.protobuf"), ResponseMedia::Protobuf { json_acceptable: true });
        assert_eq!(media("application/vnd.kubernetes.protobuf;q=0, application/json"), ResponseMedia::Json);
        assert_eq!(media("application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1;g=meta.k8s.io"), ResponseMedia::Json);
        assert_eq!(media("*/*"), ResponseMedia::Json);
        assert_eq!(media(""), ResponseMedia::Json);
    }

    /// A body of `chunks` chunks of `size` bytes, counting the chunks read.
    fn counted_body(chunks: usize, size: usize) -> (axum::body::Body, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        use futures::StreamExt;
        let read = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = read.clone();
        let stream = futures::stream::iter(0..chunks).map(move |_| {
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok::<_, std::io::Error>(bytes::Bytes::from(vec![b' '; size]))
        });
        (axum::body::Body::from_stream(stream), read)
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_read_to_its_end_before_the_413() {
        let (exact, _) = counted_body(3, 1 << 20);
        assert_eq!(read_limited(exact).await.unwrap().len(), MAX_BODY, "3 MiB is taken");
        // 4 MiB: refused, and read whole so the client is not cut off mid-send.
        let (over, read) = counted_body(64, 64 << 10);
        assert_eq!(read_limited(over).await.unwrap_err().code(), 413);
        assert_eq!(read.load(std::sync::atomic::Ordering::Relaxed), 64);
        // Without end: read only to the drain bound.
        let (endless, read) = counted_body(usize::MAX, 1 << 20);
        assert_eq!(read_limited(endless).await.unwrap_err().code(), 413);
        let chunks = read.load(std::sync::atomic::Ordering::Relaxed);
        assert!(chunks <= (MAX_BODY + DRAIN_BEYOND_LIMIT) / (1 << 20) + 1, "{chunks} chunks read");
    }

    #[test]
    fn bodies() {
        let yaml = h(http::header::CONTENT_TYPE, "application/yaml");
        let v = decode_body(&yaml, b"metadata:\n  name: web\nspec:\n  replicas: 2\n").unwrap();
        assert_eq!(v["metadata"]["name"], "web");
        assert_eq!(v["spec"]["replicas"], 2);
        let json = h(http::header::CONTENT_TYPE, "application/json");
        assert_eq!(decode_body(&json, b"{nope").unwrap_err().code(), 400);
        assert_eq!(decode_body(&json, b"").unwrap_err().code(), 400);
        assert_eq!(decode_body(&h(http::header::CONTENT_TYPE, "text/html"), b"<p>").unwrap_err().code(), 415);
        assert_eq!(decode_body(&json, &vec![b' '; MAX_BODY + 1]).unwrap_err().code(), 413);
        assert_eq!(patch_kind(&h(http::header::CONTENT_TYPE, "application/strategic-merge-patch+json")).unwrap(), PatchKind::Strategic);
        assert_eq!(patch_kind(&h(http::header::CONTENT_TYPE, "application/json")).unwrap_err().code(), 415);
    }
}
