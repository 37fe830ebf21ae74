//! Encodes Kubernetes JSON objects (as the API server stores and returns
//! them) into protobuf response bodies, the reverse of [`crate::decode`].
//!
//! [`encode`] handles one object, its `<Kind>List` and `meta.k8s.io`
//! `Status`; [`encode_watch_event`] builds one frame of a
//! `application/vnd.kubernetes.protobuf;stream=watch` response.
//!
//! Nothing is dropped silently: a kind outside [`encodable_kinds`] or a
//! JSON key the encoder does not translate is an
//! [`EncodeError::UnsupportedKind`] / [`EncodeError::UnsupportedField`]
//! ([`EncodeError::is_unsupported`] is true, the server should answer with
//! JSON instead); a value of the wrong JSON type is
//! [`EncodeError::WrongType`].

mod apps;
mod auth;
mod core_v1;
mod events;
mod fields;
mod meta;
mod node;
mod pod;
mod rbac;
mod workloads;

use prost::Message;
use serde_json::Value;

use crate::envelope::encode_envelope;
use fields::{Fields, Result};

/// Why a JSON object could not be encoded as protobuf.
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    /// The object is of a kind this crate cannot encode.
    #[error("protobuf encoding is not supported for {kind} ({api_version})")]
    UnsupportedKind {
        /// `apiVersion` of the object.
        api_version: String,
        /// `kind` of the object.
        kind: String,
    },
    /// The object has a key this crate does not translate (named by its
    /// JSON path, e.g. `spec.containers[0].fooBar`).
    #[error("field {0} has no protobuf encoding here")]
    UnsupportedField(String),
    /// A value has the wrong JSON type or form (e.g. a string where an
    /// integer belongs, a malformed time or base64 string).
    #[error("field {path}: expected {expected}")]
    WrongType {
        /// JSON path of the value.
        path: String,
        /// What the value should have been.
        expected: &'static str,
    },
    /// The object has no string `apiVersion` or `kind`.
    #[error("object has no apiVersion/kind")]
    MissingTypeMeta,
}

impl EncodeError {
    /// True when the object is fine but this crate cannot translate it (an
    /// unknown kind or field): the server should answer with JSON instead.
    pub fn is_unsupported(&self) -> bool {
        matches!(
            self,
            EncodeError::UnsupportedKind { .. } | EncodeError::UnsupportedField(_)
        )
    }
}

/// The `apiVersion`/`kind` of `meta.k8s.io` `Status` as the server
/// writes it.
const STATUS: (&str, &str) = ("v1", "Status");

/// Encodes one object, a `<Kind>List` of an encodable kind, or a `Status`
/// into a whole response body (`k8s\0` + `runtime.Unknown`).
/// `apiVersion`/`kind` are read from the object.
pub fn encode(object: &Value) -> std::result::Result<Vec<u8>, EncodeError> {
    let api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .ok_or(EncodeError::MissingTypeMeta)?;
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .ok_or(EncodeError::MissingTypeMeta)?;
    let raw = encode_raw(api_version, kind, object)?;
    Ok(encode_envelope(api_version, kind, &raw))
}

/// The message bytes (no magic, no envelope) of `object`, which is of
/// type `api_version`/`kind`.
fn encode_raw(api_version: &str, kind: &str, object: &Value) -> Result<Vec<u8>> {
    let mut f = Fields::new("", object)?;
    f.ignore(&["apiVersion", "kind"]);
    let raw = if (api_version, kind) == STATUS {
        meta::status(&mut f)?.encode_to_vec()
    } else if let Some(entry) = find(api_version, kind) {
        (entry.item)(&mut f)?
    } else if let Some(list) = kind
        .strip_suffix("List")
        .and_then(|item| find(api_version, item))
        .and_then(|entry| entry.list)
    {
        list(api_version, &mut f)?
    } else {
        return Err(EncodeError::UnsupportedKind {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
        });
    };
    f.finish()?;
    Ok(raw)
}

/// One frame of a protobuf watch stream
/// (`application/vnd.kubernetes.protobuf;stream=watch`): a 4-byte
/// big-endian length, then a bare `metav1.WatchEvent` message (no magic,
/// no envelope: the stream uses the raw serializer) whose
/// `object.raw` is the object's whole protobuf body ([`encode`]: magic +
/// envelope). `event_type` is `ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK`
/// or `ERROR` (whose object is a `Status`).
pub fn encode_watch_event(
    event_type: &str,
    object: &Value,
) -> std::result::Result<Vec<u8>, EncodeError> {
    let event = k8s_pb::apimachinery::pkg::apis::meta::v1::WatchEvent {
        r#type: Some(event_type.to_owned()),
        object: Some(k8s_pb::apimachinery::pkg::runtime::RawExtension {
            raw: Some(encode(object)?),
        }),
    };
    let body = event.encode_to_vec();
    let len = u32::try_from(body.len()).expect("a watch event is far below 4 GiB");
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

/// Whether [`encode`] understands objects (and lists) of this
/// `apiVersion`/`kind`. `Status` (`v1`) is always encodable.
pub fn is_encodable(api_version: &str, kind: &str) -> bool {
    (api_version, kind) == STATUS || find(api_version, kind).is_some()
}

/// Every `(apiVersion, kind)` whose objects (and `<Kind>List`s, where the
/// kind has one) [`encode`] handles, besides `v1` `Status`.
pub fn encodable_kinds() -> impl Iterator<Item = (&'static str, &'static str)> {
    ENCODABLE.iter().map(|k| (k.api_version, k.kind))
}

/// Encodes a `<Kind>List` (`metadata` + `items`) of the given `apiVersion`.
type ListEncoder = fn(&str, &mut Fields<'_>) -> Result<Vec<u8>>;

struct Encodable {
    api_version: &'static str,
    kind: &'static str,
    item: fn(&mut Fields<'_>) -> Result<Vec<u8>>,
    /// `None` for kinds that have no list type (e.g. `TokenRequest`).
    list: Option<ListEncoder>,
}

fn find(api_version: &str, kind: &str) -> Option<&'static Encodable> {
    ENCODABLE
        .iter()
        .find(|k| k.api_version == api_version && k.kind == kind)
}

/// Reads one list item: it may carry its own `apiVersion`/`kind`, which
/// must then match the list's.
fn list_item<'a, T>(
    api_version: &str,
    kind: &str,
    f: &mut Fields<'a>,
    convert: fn(&mut Fields<'a>) -> Result<T>,
) -> Result<T> {
    for (key, want) in [("apiVersion", api_version), ("kind", kind)] {
        if let Some(got) = f.string(key)? {
            if got != want {
                return Err(EncodeError::UnsupportedKind {
                    api_version: api_version.to_owned(),
                    kind: format!("{kind} list item of kind {got}"),
                });
            }
        }
    }
    convert(f)
}

macro_rules! list_encoder {
    ($kind:literal, $convert:path, []) => {
        None
    };
    ($kind:literal, $convert:path, [$($list:tt)+]) => {
        Some(|api_version, f| {
            type List = $($list)+;
            let list = List {
                metadata: f.message("metadata", meta::list_meta)?,
                items: f.messages("items", |i| list_item(api_version, $kind, i, $convert))?,
            };
            Ok(list.encode_to_vec())
        })
    };
}

macro_rules! encodable {
    ($($api_version:literal $kind:literal => $convert:path, $list:tt;)*) => {
        &[$(Encodable {
            api_version: $api_version,
            kind: $kind,
            item: |f| Ok($convert(f)?.encode_to_vec()),
            list: list_encoder!($kind, $convert, $list),
        }),*]
    };
}

use k8s_pb::api as pb;

static ENCODABLE: &[Encodable] = encodable! {
    "v1" "ConfigMap" => core_v1::config_map, [pb::core::v1::ConfigMapList];
    "v1" "Secret" => core_v1::secret, [pb::core::v1::SecretList];
    "v1" "Namespace" => core_v1::namespace, [pb::core::v1::NamespaceList];
    "v1" "ServiceAccount" => core_v1::service_account, [pb::core::v1::ServiceAccountList];
    "v1" "Pod" => pod::pod, [pb::core::v1::PodList];
    "v1" "Node" => node::node, [pb::core::v1::NodeList];
    "v1" "Service" => core_v1::service, [pb::core::v1::ServiceList];
    "apps/v1" "Deployment" => apps::deployment, [pb::apps::v1::DeploymentList];
    "apps/v1" "ReplicaSet" => apps::replica_set, [pb::apps::v1::ReplicaSetList];
    "apps/v1" "DaemonSet" => workloads::daemon_set, [pb::apps::v1::DaemonSetList];
    "apps/v1" "StatefulSet" => workloads::stateful_set, [pb::apps::v1::StatefulSetList];
    "v1" "PersistentVolumeClaim" => workloads::persistent_volume_claim, [pb::core::v1::PersistentVolumeClaimList];
    "policy/v1" "PodDisruptionBudget" => auth::pod_disruption_budget, [pb::policy::v1::PodDisruptionBudgetList];
    "rbac.authorization.k8s.io/v1" "Role" => rbac::role, [pb::rbac::v1::RoleList];
    "rbac.authorization.k8s.io/v1" "ClusterRole" => rbac::cluster_role, [pb::rbac::v1::ClusterRoleList];
    "rbac.authorization.k8s.io/v1" "RoleBinding" => rbac::role_binding, [pb::rbac::v1::RoleBindingList];
    "rbac.authorization.k8s.io/v1" "ClusterRoleBinding" => rbac::cluster_role_binding, [pb::rbac::v1::ClusterRoleBindingList];
    "scheduling.k8s.io/v1" "PriorityClass" => rbac::priority_class, [pb::scheduling::v1::PriorityClassList];
    "v1" "Event" => events::core_event, [pb::core::v1::EventList];
    "v1" "Endpoints" => events::endpoints, [pb::core::v1::EndpointsList];
    "events.k8s.io/v1" "Event" => events::event, [pb::events::v1::EventList];
    "discovery.k8s.io/v1" "EndpointSlice" => events::endpoint_slice, [pb::discovery::v1::EndpointSliceList];
    "authentication.k8s.io/v1" "TokenRequest" => auth::token_request, [];
    "authentication.k8s.io/v1" "SelfSubjectReview" => auth::self_subject_review, [];
    "coordination.k8s.io/v1" "Lease" => core_v1::lease, [pb::coordination::v1::LeaseList];
};
