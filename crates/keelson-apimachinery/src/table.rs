//! `meta.k8s.io/v1 Table` rendering, as the Kubernetes API server answers
//! `kubectl get` (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`).
//!
//! [`columns`] gives a resource's column definitions and [`row_cells`] one
//! object's cells in the same order; [`table`] assembles the whole response.
//! Like the real server, rows always carry every column, the `-o wide`
//! (priority 1) ones included; kubectl hides those unless asked.
//!
//! Pure functions: time enters only as the caller's `now` in Unix seconds.

mod json;
mod resources;
mod time;
mod workloads;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_more;

pub use time::{format_rfc3339, human_age, parse_rfc3339, Timestamp, GO_ZERO_UNIX};

use resources as r;
use serde::Serialize;
use serde_json::{json, Map, Value};
use workloads as w;

/// One `meta.k8s.io/v1` `TableColumnDefinition`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ColumnDefinition {
    /// Human-readable name; kubectl prints it uppercased.
    pub name: String,
    /// OpenAPI type: `string`, `integer`, `boolean`, `date`, ...
    #[serde(rename = "type")]
    pub type_: String,
    /// OpenAPI format; `name` marks the column holding the object name.
    pub format: String,
    pub description: String,
    /// 0 always shown; 1 only with `-o wide`.
    pub priority: i32,
}

/// What each row's `object` holds (the `includeObject` query parameter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IncludeObject {
    /// No `object` field.
    None,
    /// A `PartialObjectMetadata` carrying the object's metadata (default).
    #[default]
    Metadata,
    /// The full object.
    Object,
}

impl IncludeObject {
    /// Parses the `includeObject` query value; absent or empty means
    /// [`IncludeObject::Metadata`]; unknown values are `None` (reject them).
    pub fn from_query(value: Option<&str>) -> Option<IncludeObject> {
        match value.unwrap_or("") {
            "" | "Metadata" => Some(IncludeObject::Metadata),
            "None" => Some(IncludeObject::None),
            "Object" => Some(IncludeObject::Object),
            _ => None,
        }
    }
}

/// Which printer renders a resource's rows. The resource catalog names one per served
/// resource; [`Printer::Generic`] (Name, Age) serves everything else, custom resources
/// included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Printer {
    Pod,
    Service,
    Node,
    Namespace,
    Deployment,
    ReplicaSet,
    ReplicationController,
    StatefulSet,
    DaemonSet,
    Job,
    CronJob,
    ConfigMap,
    Secret,
    ServiceAccount,
    Endpoints,
    EndpointSlice,
    Event,
    EventV1,
    Lease,
    Ingress,
    IngressClass,
    PersistentVolume,
    PersistentVolumeClaim,
    StorageClass,
    PodDisruptionBudget,
    CreatedAt,
    RoleBinding,
    PriorityClass,
    Generic,
}

impl Printer {
    /// Every printer, for tests that check each one.
    pub const ALL: &'static [Printer] = &[
        Printer::Pod,
        Printer::Service,
        Printer::Node,
        Printer::Namespace,
        Printer::Deployment,
        Printer::ReplicaSet,
        Printer::ReplicationController,
        Printer::StatefulSet,
        Printer::DaemonSet,
        Printer::Job,
        Printer::CronJob,
        Printer::ConfigMap,
        Printer::Secret,
        Printer::ServiceAccount,
        Printer::Endpoints,
        Printer::EndpointSlice,
        Printer::Event,
        Printer::EventV1,
        Printer::Lease,
        Printer::Ingress,
        Printer::IngressClass,
        Printer::PersistentVolume,
        Printer::PersistentVolumeClaim,
        Printer::StorageClass,
        Printer::PodDisruptionBudget,
        Printer::CreatedAt,
        Printer::RoleBinding,
        Printer::PriorityClass,
        Printer::Generic,
    ];
}

/// Column definitions of `printer`'s resource. The first column is the `Name` column
/// (format `name`), except for
/// events, which like the API server lead with `Last Seen` and carry `Name`
/// last as a wide column.
pub fn columns(printer: Printer) -> Vec<ColumnDefinition> {
    use Printer::*;
    match printer {
        Pod => w::pod_columns(),
        Deployment => w::deployment_columns(),
        ReplicaSet => w::replicaset_columns(),
        ReplicationController => w::replicationcontroller_columns(),
        StatefulSet => w::statefulset_columns(),
        DaemonSet => w::daemonset_columns(),
        Job => w::job_columns(),
        CronJob => w::cronjob_columns(),
        Service => r::service_columns(),
        Node => r::node_columns(),
        Namespace => r::namespace_columns(),
        ConfigMap => r::configmap_columns(),
        Secret => r::secret_columns(),
        ServiceAccount => r::serviceaccount_columns(),
        Endpoints => r::endpoints_columns(),
        EndpointSlice => r::endpointslice_columns(),
        Event | EventV1 => r::event_columns(),
        Lease => r::lease_columns(),
        Ingress => r::ingress_columns(),
        IngressClass => r::ingressclass_columns(),
        PersistentVolume => r::pv_columns(),
        PersistentVolumeClaim => r::pvc_columns(),
        StorageClass => r::storageclass_columns(),
        PodDisruptionBudget => r::pdb_columns(),
        CreatedAt => r::created_at_columns(),
        RoleBinding => r::rolebinding_columns(),
        PriorityClass => r::priorityclass_columns(),
        Generic => r::generic_columns(),
    }
}

/// The cells of one object's row, matching [`columns`] in length and order.
/// Missing fields never panic; they render as the API server would render
/// the zero value. `now_unix` is the current time in Unix seconds.
pub fn row_cells(printer: Printer, obj: &Value, now_unix: i64) -> Vec<Value> {
    use Printer::*;
    let now = now_unix;
    match printer {
        Pod => w::pod_cells(obj, now),
        Deployment => w::deployment_cells(obj, now),
        ReplicaSet => w::replicaset_cells(obj, now),
        ReplicationController => w::replicationcontroller_cells(obj, now),
        StatefulSet => w::statefulset_cells(obj, now),
        DaemonSet => w::daemonset_cells(obj, now),
        Job => w::job_cells(obj, now),
        CronJob => w::cronjob_cells(obj, now),
        Service => r::service_cells(obj, now),
        Node => r::node_cells(obj, now),
        Namespace => r::namespace_cells(obj, now),
        ConfigMap => r::configmap_cells(obj, now),
        Secret => r::secret_cells(obj, now),
        ServiceAccount => r::serviceaccount_cells(obj, now),
        Endpoints => r::endpoints_cells(obj, now),
        EndpointSlice => r::endpointslice_cells(obj, now),
        Event => r::event_cells(obj, now, false),
        EventV1 => r::event_cells(obj, now, true),
        Lease => r::lease_cells(obj, now),
        Ingress => r::ingress_cells(obj, now),
        IngressClass => r::ingressclass_cells(obj, now),
        PersistentVolume => r::pv_cells(obj, now),
        PersistentVolumeClaim => r::pvc_cells(obj, now),
        StorageClass => r::storageclass_cells(obj, now),
        PodDisruptionBudget => r::pdb_cells(obj, now),
        CreatedAt => r::created_at_cells(obj),
        RoleBinding => r::rolebinding_cells(obj, now),
        PriorityClass => r::priorityclass_cells(obj, now),
        Generic => r::generic_cells(obj, now),
    }
}

/// Row `conditions` the server attaches: finished pods get a `Completed`
/// condition (reason `Succeeded` or `Failed`). `None` for everything else.
pub fn row_conditions(printer: Printer, obj: &Value) -> Option<Value> {
    match printer {
        Printer::Pod => w::pod_conditions(obj),
        _ => None,
    }
}

/// `{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":…}`
/// for `obj` (empty metadata when it has none).
pub fn partial_object_metadata(obj: &Value) -> Value {
    let metadata = obj.get("metadata").filter(|m| m.is_object()).cloned();
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata.unwrap_or_else(|| json!({})),
    })
}

/// The complete `meta.k8s.io/v1 Table` for `items`.
///
/// `metadata` carries `resourceVersion` (when non-empty), `continue` (when
/// given and non-empty) and `remainingItemCount` (when given). Each row has
/// `cells`, pod rows may have `conditions`, and `object` follows
/// `include_object`.
#[allow(clippy::too_many_arguments)]
pub fn table(
    printer: Printer,
    items: &[Value],
    now_unix: i64,
    include_object: IncludeObject,
    resource_version: &str,
    continue_token: Option<&str>,
    remaining: Option<i64>,
) -> Value {
    let mut metadata = Map::new();
    if !resource_version.is_empty() {
        metadata.insert("resourceVersion".into(), resource_version.into());
    }
    if let Some(token) = continue_token.filter(|t| !t.is_empty()) {
        metadata.insert("continue".into(), token.into());
    }
    if let Some(count) = remaining {
        metadata.insert("remainingItemCount".into(), count.into());
    }
    let rows: Vec<Value> = items
        .iter()
        .map(|obj| {
            let mut row = Map::new();
            row.insert("cells".into(), Value::Array(row_cells(printer, obj, now_unix)));
            if let Some(conditions) = row_conditions(printer, obj) {
                row.insert("conditions".into(), conditions);
            }
            match include_object {
                IncludeObject::None => {}
                IncludeObject::Metadata => {
                    row.insert("object".into(), partial_object_metadata(obj));
                }
                IncludeObject::Object => {
                    row.insert("object".into(), obj.clone());
                }
            }
            Value::Object(row)
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": columns(printer),
        "rows": rows,
    })
}
