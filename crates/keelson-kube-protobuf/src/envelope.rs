//! The outer wrapper of a Kubernetes protobuf body: the 4-byte magic
//! `k8s\0` followed by a `k8s.io.apimachinery.pkg.runtime.Unknown` message
//! that names the object's `apiVersion`/`kind` and carries its encoded bytes.

use k8s_pb::apimachinery::pkg::runtime::Unknown;
use prost::Message;

/// The four bytes every Kubernetes protobuf body starts with.
pub const MAGIC: [u8; 4] = *b"k8s\0";

/// Why a body could not be unwrapped into an [`Envelope`].
#[derive(Debug, thiserror::Error)]
pub enum EnvelopeError {
    /// The body does not start with the `k8s\0` magic prefix (or is shorter
    /// than it), so it is not a Kubernetes protobuf body at all.
    #[error("body does not start with the Kubernetes protobuf magic prefix k8s\\0")]
    BadMagic,
    /// The bytes after the magic are not a valid `runtime.Unknown` message
    /// (truncated, wrong wire types, bad UTF-8 in a string field, ...).
    #[error("malformed runtime.Unknown envelope: {0}")]
    Malformed(#[source] prost::DecodeError),
    /// The envelope has no `typeMeta.apiVersion` or no `typeMeta.kind`, so
    /// the embedded object cannot be interpreted.
    #[error("runtime.Unknown envelope has no apiVersion/kind (typeMeta)")]
    MissingTypeMeta,
    /// The envelope declares a `contentEncoding` (such as gzip); kubectl
    /// never sends one and none is supported.
    #[error("unsupported runtime.Unknown contentEncoding {0:?}")]
    UnsupportedContentEncoding(String),
}

/// A decoded `runtime.Unknown`: the object's type and its still-encoded bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    /// `typeMeta.apiVersion`, e.g. `apps/v1` or `v1`.
    pub api_version: String,
    /// `typeMeta.kind`, e.g. `Deployment`.
    pub kind: String,
    /// The protobuf encoding of the typed object (e.g. a
    /// `k8s.io.api.apps.v1.Deployment` message), without magic prefix.
    pub raw: Vec<u8>,
    /// `contentType` of `raw` as declared by the sender; usually empty,
    /// meaning protobuf.
    pub content_type: String,
}

/// Strips the magic prefix and decodes the `runtime.Unknown` wrapper.
pub fn decode_envelope(body: &[u8]) -> Result<Envelope, EnvelopeError> {
    let rest = body
        .strip_prefix(&MAGIC[..])
        .ok_or(EnvelopeError::BadMagic)?;
    let unknown = Unknown::decode(rest).map_err(EnvelopeError::Malformed)?;
    let encoding = unknown.content_encoding.unwrap_or_default();
    if !encoding.is_empty() {
        return Err(EnvelopeError::UnsupportedContentEncoding(encoding));
    }
    let type_meta = unknown.type_meta.unwrap_or_default();
    let api_version = type_meta.api_version.unwrap_or_default();
    let kind = type_meta.kind.unwrap_or_default();
    if api_version.is_empty() || kind.is_empty() {
        return Err(EnvelopeError::MissingTypeMeta);
    }
    Ok(Envelope {
        api_version,
        kind,
        raw: unknown.raw.unwrap_or_default(),
        content_type: unknown.content_type.unwrap_or_default(),
    })
}

/// Encodes an object's bytes into a body as a Kubernetes client would send
/// it (magic + `runtime.Unknown`). The inverse of [`decode_envelope`];
/// useful for tests and for answering protobuf clients.
pub fn encode_envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
            api_version: Some(api_version.to_owned()),
            kind: Some(kind.to_owned()),
        }),
        raw: Some(raw.to_vec()),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = MAGIC.to_vec();
    unknown
        .encode(&mut out)
        .expect("encoding into a Vec cannot run out of space");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_encode() {
        let body = encode_envelope("apps/v1", "Deployment", &[1, 2, 3]);
        assert_eq!(&body[..4], b"k8s\0");
        let env = decode_envelope(&body).unwrap();
        assert_eq!(env.api_version, "apps/v1");
        assert_eq!(env.kind, "Deployment");
        assert_eq!(env.raw, vec![1, 2, 3]);
        assert_eq!(env.content_type, "");
    }

    #[test]
    fn rejects_missing_or_wrong_magic() {
        assert!(matches!(decode_envelope(b""), Err(EnvelopeError::BadMagic)));
        assert!(matches!(
            decode_envelope(b"k8s"),
            Err(EnvelopeError::BadMagic)
        ));
        assert!(matches!(
            decode_envelope(b"{\"kind\":1}"),
            Err(EnvelopeError::BadMagic)
        ));
        let mut body = encode_envelope("v1", "Pod", b"");
        body[3] = b'x';
        assert!(matches!(
            decode_envelope(&body),
            Err(EnvelopeError::BadMagic)
        ));
    }

    #[test]
    fn truncated_envelope_never_yields_partial_data() {
        let body = encode_envelope("v1", "ConfigMap", b"abcdef");
        let mut errors = 0;
        for cut in 4..body.len() {
            match decode_envelope(&body[..cut]) {
                Err(EnvelopeError::Malformed(_)) | Err(EnvelopeError::MissingTypeMeta) => {
                    errors += 1
                }
                // A cut that falls exactly between two fields is a valid
                // (shorter) message; the raw bytes are then whole or absent.
                Ok(env) => assert!(
                    env.raw.is_empty() || env.raw == b"abcdef",
                    "cut {cut}: {env:?}"
                ),
                Err(other) => panic!("cut at {cut}: unexpected error {other:?}"),
            }
        }
        // Every cut inside typeMeta or inside raw must fail.
        assert!(
            errors >= body.len() - 4 - 4,
            "only {errors} truncations failed"
        );
    }

    #[test]
    fn rejects_missing_type_meta() {
        // Magic followed by an empty message: no typeMeta at all.
        assert!(matches!(
            decode_envelope(b"k8s\0"),
            Err(EnvelopeError::MissingTypeMeta)
        ));
        let body = encode_envelope("", "Pod", b"");
        assert!(matches!(
            decode_envelope(&body),
            Err(EnvelopeError::MissingTypeMeta)
        ));
    }

    #[test]
    fn rejects_content_encoding() {
        let unknown = Unknown {
            type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
            }),
            raw: Some(vec![]),
            content_encoding: Some("gzip".into()),
            content_type: None,
        };
        let mut body = MAGIC.to_vec();
        unknown.encode(&mut body).unwrap();
        match decode_envelope(&body) {
            Err(EnvelopeError::UnsupportedContentEncoding(e)) => assert_eq!(e, "gzip"),
            other => panic!("expected UnsupportedContentEncoding, got {other:?}"),
        }
    }
}
