//! The table of served resources. One line per resource; everything else about it (group,
//! version, kind, list kind, plural, scope) is read from its k8s-openapi type.
//!
//! Entry syntax:
//! `listable|create_only|answered <type> { short: [..], categories: [..], sub: [..], name: <NameRule>,
//! spec: <bool>, fields: [..], printer: <Printer> };`
//! - `sub`: any of `status scale log exec attach portforward eviction binding finalize token`;
//! - `spec`: the object has a `spec` whose changes bump `metadata.generation`;
//! - `fields`: field-selector labels besides `metadata.name` and `metadata.namespace`;
//! - `printer`: the `kubectl get` columns.

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::core::v1::Binding;
use k8s_openapi::api::policy::v1::Eviction;
use keelson_apimachinery::table::Printer;

use super::{Entry, NameRule, ResourceDef, Subresource, SubresourceDef, CREATE_ONLY_VERBS, GET_UPDATE_VERBS};
use crate::types::TypeEntry;

/// Builds `RESOURCES` (the served resources) and `KIND_TYPES` (their type-check and schema
/// entries) from one list, so both stay in the same order.
macro_rules! catalog {
    ($(
        $mode:ident $ty:ty {
            short: [$($short:literal),*],
            categories: [$($cat:literal),*],
            sub: [$($sub:ident),*],
            name: $rule:ident,
            spec: $spec:literal,
            fields: [$($field:literal),*],
            printer: $printer:ident $(,)?
        };
    )*) => {
        pub(super) static RESOURCES: &[ResourceDef] = &[$(
            ResourceDef::$mode::<$ty>(Entry {
                short_names: &[$($short),*],
                categories: &[$($cat),*],
                subresources: &[$(catalog!(@sub $sub $ty)),*],
                name_rule: NameRule::$rule,
                has_spec: $spec,
                field_labels: &[$($field),*],
                printer: Printer::$printer,
            }),
        )*];

        pub(crate) static KIND_TYPES: &[TypeEntry] = &[$(TypeEntry::of::<$ty>(),)*];
    };
    (@sub status $ty:ty) => { SubresourceDef::status::<$ty>() };
    (@sub scale $ty:ty) => { SubresourceDef::of::<Scale>(Subresource::Scale, GET_UPDATE_VERBS) };
    (@sub eviction $ty:ty) => { SubresourceDef::of::<Eviction>(Subresource::Eviction, CREATE_ONLY_VERBS) };
    (@sub binding $ty:ty) => { SubresourceDef::of::<Binding>(Subresource::Binding, CREATE_ONLY_VERBS) };
    (@sub finalize $ty:ty) => { SubresourceDef::of::<$ty>(Subresource::Finalize, &["update"]) };
    // Kinds k8s-openapi has no type for: named as Kubernetes' discovery names them.
    (@sub log $ty:ty) => { SubresourceDef::named(Subresource::Log, "", "v1", "Pod", &["get"]) };
    (@sub exec $ty:ty) => { SubresourceDef::named(Subresource::Exec, "", "v1", "PodExecOptions", &["create", "get"]) };
    (@sub attach $ty:ty) => { SubresourceDef::named(Subresource::Attach, "", "v1", "PodAttachOptions", &["create", "get"]) };
    (@sub portforward $ty:ty) => { SubresourceDef::named(Subresource::PortForward, "", "v1", "PodPortForwardOptions", &["create", "get"]) };
    (@sub token $ty:ty) => { SubresourceDef::of::<TokenRequest>(Subresource::Token, CREATE_ONLY_VERBS) };
}

use k8s_openapi::api::{
    apps::v1 as apps, authentication::v1 as authentication, authorization::v1 as authorization, batch::v1 as batch, coordination::v1 as coordination, core::v1 as core,
    discovery::v1 as discovery, events::v1 as events, networking::v1 as networking,
    policy::v1 as policy, rbac::v1 as rbac, scheduling::v1 as scheduling, storage::v1 as storage,
};

catalog! {
    listable core::Pod {
        short: ["po"], categories: ["all"],
        sub: [status, log, exec, attach, portforward, eviction, binding],
        name: Subdomain, spec: false,
        fields: ["spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
            "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName"],
        printer: Pod,
    };
    listable core::Service { short: ["svc"], categories: ["all"], sub: [status], name: Label, spec: false, fields: [], printer: Service };
    listable core::Endpoints { short: ["ep"], categories: [], sub: [], name: Subdomain, spec: false, fields: [], printer: Endpoints };
    listable core::ConfigMap { short: ["cm"], categories: [], sub: [], name: Subdomain, spec: false, fields: [], printer: ConfigMap };
    listable core::Secret { short: [], categories: [], sub: [], name: Subdomain, spec: false, fields: ["type"], printer: Secret };
    listable core::Namespace { short: ["ns"], categories: [], sub: [status, finalize], name: Label, spec: false, fields: ["status.phase"], printer: Namespace };
    listable core::Node { short: ["no"], categories: [], sub: [status], name: Subdomain, spec: false, fields: ["spec.unschedulable"], printer: Node };
    listable core::Event {
        short: ["ev"], categories: [], sub: [], name: Path, spec: false,
        fields: ["involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid",
            "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath",
            "reason", "reportingComponent", "source", "type"],
        printer: Event,
    };
    listable core::PersistentVolume { short: ["pv"], categories: [], sub: [status], name: Subdomain, spec: false, fields: [], printer: PersistentVolume };
    listable core::PersistentVolumeClaim { short: ["pvc"], categories: [], sub: [status], name: Subdomain, spec: false, fields: [], printer: PersistentVolumeClaim };
    listable core::ServiceAccount { short: ["sa"], categories: [], sub: [token], name: Subdomain, spec: false, fields: [], printer: ServiceAccount };
    // `POST namespaces/{ns}/bindings` binds the pod the body names, as `pods/binding` does.
    create_only core::Binding { short: [], categories: [], sub: [], name: Subdomain, spec: false, fields: [], printer: Generic };
    listable apps::Deployment { short: ["deploy"], categories: ["all"], sub: [status, scale], name: Subdomain, spec: true, fields: [], printer: Deployment };
    listable apps::ReplicaSet { short: ["rs"], categories: ["all"], sub: [status, scale], name: Subdomain, spec: true, fields: ["status.replicas"], printer: ReplicaSet };
    listable apps::StatefulSet { short: ["sts"], categories: ["all"], sub: [status, scale], name: Subdomain, spec: true, fields: [], printer: StatefulSet };
    listable apps::DaemonSet { short: ["ds"], categories: ["all"], sub: [status], name: Subdomain, spec: true, fields: [], printer: DaemonSet };
    listable apps::ControllerRevision { short: [], categories: [], sub: [], name: Subdomain, spec: false, fields: [], printer: Generic };
    listable batch::Job { short: [], categories: ["all"], sub: [status], name: Subdomain, spec: true, fields: ["status.successful"], printer: Job };
    listable batch::CronJob { short: ["cj"], categories: ["all"], sub: [status], name: Subdomain, spec: true, fields: [], printer: CronJob };
    listable coordination::Lease { short: [], categories: [], sub: [], name: Subdomain, spec: false, fields: [], printer: Lease };
    listable discovery::EndpointSlice { short: [], categories: [], sub: [], name: Subdomain, spec: false, fields: ["addressType"], printer: EndpointSlice };
    listable networking::Ingress { short: ["ing"], categories: [], sub: [status], name: Subdomain, spec: true, fields: [], printer: Ingress };
    listable networking::IngressClass { short: [], categories: [], sub: [], name: Subdomain, spec: true, fields: [], printer: IngressClass };
    listable storage::StorageClass { short: ["sc"], categories: [], sub: [], name: Subdomain, spec: false, fields: [], printer: StorageClass };
    // No "ev": kubectl would warn that the short name is ambiguous.
    listable events::Event {
        short: [], categories: [], sub: [], name: Path, spec: false,
        fields: ["regarding.kind", "regarding.namespace", "regarding.name", "regarding.uid", "reason",
            "reportingController", "type"],
        printer: EventV1,
    };
    listable rbac::Role { short: [], categories: [], sub: [], name: Path, spec: false, fields: [], printer: CreatedAt };
    listable rbac::ClusterRole { short: [], categories: [], sub: [], name: Path, spec: false, fields: [], printer: CreatedAt };
    listable rbac::RoleBinding { short: [], categories: [], sub: [], name: Path, spec: false, fields: [], printer: RoleBinding };
    listable rbac::ClusterRoleBinding { short: [], categories: [], sub: [], name: Path, spec: false, fields: [], printer: RoleBinding };
    listable policy::PodDisruptionBudget { short: ["pdb"], categories: [], sub: [status], name: Subdomain, spec: true, fields: [], printer: PodDisruptionBudget };
    listable scheduling::PriorityClass { short: ["pc"], categories: [], sub: [], name: Subdomain, spec: false, fields: [], printer: PriorityClass };
    answered authorization::SelfSubjectAccessReview { short: [], categories: [], sub: [], name: Path, spec: false, fields: [], printer: Generic };
    answered authorization::SelfSubjectRulesReview { short: [], categories: [], sub: [], name: Path, spec: false, fields: [], printer: Generic };
    answered authorization::SubjectAccessReview { short: [], categories: [], sub: [], name: Path, spec: false, fields: [], printer: Generic };
    answered authorization::LocalSubjectAccessReview { short: [], categories: [], sub: [], name: Path, spec: false, fields: [], printer: Generic };
    answered authentication::SelfSubjectReview { short: [], categories: [], sub: [], name: Path, spec: false, fields: [], printer: Generic };
    answered authentication::TokenReview { short: [], categories: [], sub: [], name: Path, spec: false, fields: [], printer: Generic };
}
