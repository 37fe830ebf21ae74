//! Decodes Kubernetes protobuf request bodies
//! (`Content-Type: application/vnd.kubernetes.protobuf`) into the JSON
//! object a client would have sent as `application/json`.
//!
//! kubectl 1.32+ sends protobuf for the typed-client commands:
//! `kubectl create deployment|configmap|secret|service|namespace|…`,
//! `kubectl create token`, `kubectl auth can-i|whoami`. The API server works
//! on `serde_json::Value`s with Kubernetes JSON field names, so [`decode`]
//! turns such a body into that JSON:
//!
//! ```
//! # use keelson_kube_protobuf::{decode, encode_envelope};
//! # let body = encode_envelope("v1", "Namespace", b"\x0a\x05\x0a\x03dev");
//! let object = decode(&body)?;
//! assert_eq!(object["kind"], "Namespace");
//! assert_eq!(object["metadata"]["name"], "dev");
//! # Ok::<(), keelson_kube_protobuf::ProtobufError>(())
//! ```
//!
//! # What the JSON looks like
//!
//! * Field names and value forms are Kubernetes JSON: `IntOrString` becomes
//!   a number or string, `Quantity` its string, `Time` RFC 3339, `[]byte`
//!   (Secret `data`) base64.
//! * Unset fields are omitted, never `null`; Go `omitempty` zero values
//!   (`""`, `0`, `false`) are omitted; pointer fields and required fields
//!   keep explicit zeros (`replicas: 0`, `containerPort`); nested objects
//!   present on the wire are kept even when empty (`emptyDir: {}`,
//!   `resources: {}`). The one systematic difference from `kubectl
//!   --dry-run=client -o json` is that kubectl prints
//!   `"creationTimestamp": null` (omitted here) and `"status": {}`.
//! * `status` is not translated (the API server ignores it on create and
//!   update), except for `CertificateSigningRequest`, whose conditions
//!   `kubectl certificate approve|deny` sends to the `/approval`
//!   subresource. A `/status` subresource handler must not rely on this
//!   crate for other kinds.
//! * Kinds outside [`supported_kinds`] fail with
//!   [`ProtobufError::UnsupportedKind`]; fields this crate does not
//!   translate (legacy volume plugins, alpha fields) fail with
//!   [`ConvertError::UnsupportedField`] instead of being dropped. For both,
//!   [`ProtobufError::is_unsupported`] is true and the server should answer
//!   415 with the error message. Note that kubectl 1.32/1.33 does not retry
//!   with JSON on 415 (except `kubectl autoscale`, which retries with
//!   `autoscaling/v1`): the command fails and prints the message.
//!
//! # Encoding responses
//!
//! The reverse direction answers clients that send `Accept:
//! application/vnd.kubernetes.protobuf`: [`encode`] turns one stored JSON
//! object (metadata, spec and status), a `<Kind>List` or a `v1` `Status`
//! into a response body, and [`encode_watch_event`] builds one frame of a
//! `;stream=watch` response. Only kinds in [`encodable_kinds`] (a table
//! separate from [`supported_kinds`]) are encoded; an unknown kind or an
//! untranslated JSON key fails with an [`EncodeError`] whose
//! [`EncodeError::is_unsupported`] is true, so the server can answer with
//! JSON instead. Nothing is dropped silently.
//!
//! ```
//! # use keelson_kube_protobuf::{decode, encode};
//! let object = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
//!     "metadata": {"name": "c", "resourceVersion": "7"}, "data": {"k": "v"}});
//! let body = encode(&object)?;
//! assert_eq!(decode(&body).unwrap(), object);
//! # Ok::<(), keelson_kube_protobuf::EncodeError>(())
//! ```
//!
//! Everything here is a pure function of its input: no I/O, no global state.
//!
//! # Errors
//!
//! Each module has at most one error enum: [`EnvelopeError`] (the outer
//! wrapper), [`ConvertError`] (shared by all the JSON converters),
//! [`ProtobufError`] (this module, wrapping the others) and [`EncodeError`]
//! (the response encoders).

mod apps;
mod auth;
mod autoscaling;
mod batch;
mod certificates;
mod container;
mod core_objects;
mod encode;
mod envelope;
mod json;
mod meta;
mod networking;
mod pod;
mod policy;
mod rbac;
mod volume;

use prost::Message;
use serde_json::Value;

pub use encode::{encodable_kinds, encode, encode_watch_event, is_encodable, EncodeError};
pub use envelope::{decode_envelope, encode_envelope, Envelope, EnvelopeError, MAGIC};
pub use json::ConvertError;

/// The media type of Kubernetes protobuf bodies.
pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// Why a protobuf body could not be turned into JSON.
#[derive(Debug, thiserror::Error)]
pub enum ProtobufError {
    /// The body is not a well-formed `k8s\0` + `runtime.Unknown` envelope.
    #[error(transparent)]
    Envelope(#[from] EnvelopeError),
    /// The envelope names a type this crate cannot decode; the client
    /// should send `application/json` instead.
    #[error("protobuf request bodies are not supported for {kind} ({api_version}); send application/json")]
    UnsupportedKind {
        /// `apiVersion` from the envelope, e.g. `apps/v1`.
        api_version: String,
        /// `kind` from the envelope, e.g. `Deployment`.
        kind: String,
    },
    /// The envelope's `contentType` says the embedded object is not
    /// protobuf (for example JSON wrapped in an `Unknown`).
    #[error("unsupported embedded content type {0:?}")]
    UnsupportedContentType(String),
    /// The embedded object bytes are not a valid message of the named type
    /// (truncated, wrong wire type, invalid UTF-8, …).
    #[error("malformed protobuf {kind} ({api_version}): {source}")]
    MalformedObject {
        /// `apiVersion` from the envelope.
        api_version: String,
        /// `kind` from the envelope.
        kind: String,
        /// The decoder's description of the problem.
        #[source]
        source: prost::DecodeError,
    },
    /// The object decoded but a value has no JSON form, or uses a field
    /// this crate does not translate.
    #[error("{kind} ({api_version}): {source}")]
    Convert {
        /// `apiVersion` from the envelope.
        api_version: String,
        /// `kind` from the envelope.
        kind: String,
        /// What could not be converted.
        #[source]
        source: ConvertError,
    },
}

impl ProtobufError {
    /// True when the body may well be valid but this crate cannot translate
    /// it (unknown kind, untranslated field, foreign embedded content type):
    /// the server should answer 415 Unsupported Media Type so the client
    /// falls back to JSON. False for malformed input (answer 400).
    pub fn is_unsupported(&self) -> bool {
        match self {
            ProtobufError::UnsupportedKind { .. } | ProtobufError::UnsupportedContentType(_) => {
                true
            }
            ProtobufError::Convert { source, .. } => {
                matches!(source, ConvertError::UnsupportedField(_))
            }
            ProtobufError::Envelope(e) => matches!(e, EnvelopeError::UnsupportedContentEncoding(_)),
            ProtobufError::MalformedObject { .. } => false,
        }
    }
}

/// Whether a `Content-Type` header value denotes a Kubernetes protobuf body
/// (parameters such as `; charset=…` are ignored).
pub fn is_protobuf_content_type(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or_default().trim();
    essence.eq_ignore_ascii_case(CONTENT_TYPE)
}

/// Decodes a whole request body (magic + `runtime.Unknown`) into the
/// Kubernetes JSON object, `apiVersion` and `kind` included.
pub fn decode(body: &[u8]) -> Result<Value, ProtobufError> {
    let envelope = decode_envelope(body)?;
    let ct = envelope.content_type.as_str();
    if !ct.is_empty() && !is_protobuf_content_type(ct) {
        return Err(ProtobufError::UnsupportedContentType(envelope.content_type));
    }
    decode_object(&envelope.api_version, &envelope.kind, &envelope.raw)
}

/// Decodes the bytes of one typed object (the `raw` of an envelope) of the
/// given `apiVersion`/`kind` into Kubernetes JSON, `apiVersion` and `kind`
/// included.
pub fn decode_object(api_version: &str, kind: &str, raw: &[u8]) -> Result<Value, ProtobufError> {
    let entry = KINDS
        .iter()
        .find(|k| k.api_version == api_version && k.kind == kind)
        .ok_or_else(|| ProtobufError::UnsupportedKind {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
        })?;
    let body = (entry.decode)(api_version, kind, raw)?;
    let mut object = serde_json::Map::new();
    object.insert(
        "apiVersion".to_owned(),
        Value::String(api_version.to_owned()),
    );
    object.insert("kind".to_owned(), Value::String(kind.to_owned()));
    if let Value::Object(fields) = body {
        object.extend(fields);
    }
    Ok(Value::Object(object))
}

/// Whether [`decode_object`] understands this `apiVersion`/`kind`.
pub fn is_supported(api_version: &str, kind: &str) -> bool {
    KINDS
        .iter()
        .any(|k| k.api_version == api_version && k.kind == kind)
}

/// Every `(apiVersion, kind)` that can be decoded.
pub fn supported_kinds() -> impl Iterator<Item = (&'static str, &'static str)> {
    KINDS.iter().map(|k| (k.api_version, k.kind))
}

/// Decodes `raw` as message `M` and converts it with `convert`, naming
/// `api_version`/`kind` in any error.
fn typed<M: Message + Default>(
    api_version: &str,
    kind: &str,
    raw: &[u8],
    convert: fn(&M) -> json::Result<Value>,
) -> Result<Value, ProtobufError> {
    let message = M::decode(raw).map_err(|source| ProtobufError::MalformedObject {
        api_version: api_version.to_owned(),
        kind: kind.to_owned(),
        source,
    })?;
    convert(&message).map_err(|source| ProtobufError::Convert {
        api_version: api_version.to_owned(),
        kind: kind.to_owned(),
        source,
    })
}

struct Kind {
    api_version: &'static str,
    kind: &'static str,
    decode: fn(&str, &str, &[u8]) -> Result<Value, ProtobufError>,
}

macro_rules! kinds {
    ($($api_version:literal $kind:literal => $ty:ty, $convert:path;)*) => {
        &[$(Kind {
            api_version: $api_version,
            kind: $kind,
            decode: |api_version, kind, raw| typed::<$ty>(api_version, kind, raw, $convert),
        }),*]
    };
}

use k8s_pb::api as pb;

static KINDS: &[Kind] = kinds! {
    "v1" "ConfigMap" => pb::core::v1::ConfigMap, core_objects::config_map;
    "v1" "Secret" => pb::core::v1::Secret, core_objects::secret;
    "v1" "Namespace" => pb::core::v1::Namespace, core_objects::namespace;
    "v1" "ServiceAccount" => pb::core::v1::ServiceAccount, core_objects::service_account;
    "v1" "Service" => pb::core::v1::Service, core_objects::service;
    "v1" "ResourceQuota" => pb::core::v1::ResourceQuota, core_objects::resource_quota;
    "v1" "Pod" => pb::core::v1::Pod, pod::pod;
    "v1" "PersistentVolumeClaim" => pb::core::v1::PersistentVolumeClaim, volume::persistent_volume_claim;
    "apps/v1" "Deployment" => pb::apps::v1::Deployment, apps::deployment;
    "apps/v1" "ReplicaSet" => pb::apps::v1::ReplicaSet, apps::replica_set;
    "apps/v1" "DaemonSet" => pb::apps::v1::DaemonSet, apps::daemon_set;
    "apps/v1" "StatefulSet" => pb::apps::v1::StatefulSet, apps::stateful_set;
    "batch/v1" "Job" => pb::batch::v1::Job, batch::job;
    "batch/v1" "CronJob" => pb::batch::v1::CronJob, batch::cron_job;
    "rbac.authorization.k8s.io/v1" "Role" => pb::rbac::v1::Role, rbac::role;
    "rbac.authorization.k8s.io/v1" "ClusterRole" => pb::rbac::v1::ClusterRole, rbac::cluster_role;
    "rbac.authorization.k8s.io/v1" "RoleBinding" => pb::rbac::v1::RoleBinding, rbac::role_binding;
    "rbac.authorization.k8s.io/v1" "ClusterRoleBinding" => pb::rbac::v1::ClusterRoleBinding, rbac::cluster_role_binding;
    "policy/v1" "PodDisruptionBudget" => pb::policy::v1::PodDisruptionBudget, policy::pod_disruption_budget;
    "policy/v1" "Eviction" => pb::policy::v1::Eviction, policy::eviction;
    "scheduling.k8s.io/v1" "PriorityClass" => pb::scheduling::v1::PriorityClass, policy::priority_class;
    "networking.k8s.io/v1" "Ingress" => pb::networking::v1::Ingress, networking::ingress;
    "networking.k8s.io/v1" "IngressClass" => pb::networking::v1::IngressClass, networking::ingress_class;
    "networking.k8s.io/v1" "NetworkPolicy" => pb::networking::v1::NetworkPolicy, networking::network_policy;
    "autoscaling/v2" "HorizontalPodAutoscaler" => pb::autoscaling::v2::HorizontalPodAutoscaler, autoscaling::hpa_v2;
    "autoscaling/v1" "HorizontalPodAutoscaler" => pb::autoscaling::v1::HorizontalPodAutoscaler, autoscaling::hpa_v1;
    "certificates.k8s.io/v1" "CertificateSigningRequest" => pb::certificates::v1::CertificateSigningRequest, certificates::certificate_signing_request;
    "authentication.k8s.io/v1" "TokenRequest" => pb::authentication::v1::TokenRequest, auth::token_request;
    "authentication.k8s.io/v1" "TokenReview" => pb::authentication::v1::TokenReview, auth::token_review;
    "authentication.k8s.io/v1" "SelfSubjectReview" => pb::authentication::v1::SelfSubjectReview, auth::self_subject_review;
    "authorization.k8s.io/v1" "SelfSubjectAccessReview" => pb::authorization::v1::SelfSubjectAccessReview, auth::self_subject_access_review;
    "authorization.k8s.io/v1" "SelfSubjectRulesReview" => pb::authorization::v1::SelfSubjectRulesReview, auth::self_subject_rules_review;
    "authorization.k8s.io/v1" "SubjectAccessReview" => pb::authorization::v1::SubjectAccessReview, auth::subject_access_review;
};
