//! The catalog of built-in kinds this server serves.
//!
//! Every entry names a k8s-openapi type; group, version, kind, list kind, the
//! resource plural and the scope are read from that type's `Resource` /
//! `ListableResource` constants, so the catalog cannot disagree with the
//! types it hands to [`crate::typecheck`] and the OpenAPI generator.

use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::core::v1::Binding;
use k8s_openapi::api::policy::v1::Eviction;
use k8s_openapi::{ListableResource, Resource};

use crate::types::TypeEntry;

/// Verbs of a normal, fully featured resource (sorted, as Kubernetes lists them).
pub const STANDARD_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// Verbs of a create-only resource such as `bindings`.
pub const CREATE_ONLY_VERBS: &[&str] = &["create"];

/// Verbs of the `status` and `scale` subresources.
pub const GET_UPDATE_VERBS: &[&str] = &["get", "patch", "update"];

/// A resource served at `/api/v1/...` or `/apis/<group>/<version>/...`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KindInfo {
    /// API group; `""` for the core group.
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    /// Kind of the list type (`PodList`); `None` for resources that cannot be listed.
    pub list_kind: Option<&'static str>,
    /// Resource name in URLs (`pods`).
    pub plural: &'static str,
    pub namespaced: bool,
    pub verbs: &'static [&'static str],
    pub short_names: &'static [&'static str],
    pub categories: &'static [&'static str],
    pub subresources: &'static [SubresourceInfo],
}

impl KindInfo {
    /// `apiVersion` of objects of this kind (`v1`, `apps/v1`).
    pub fn api_version(&self) -> String {
        group_version_string(self.group, self.version)
    }

    /// Singular resource name as discovery reports it (lower-cased kind).
    pub fn singular(&self) -> String {
        self.kind.to_ascii_lowercase()
    }

    /// The subresource with this name (`status`, `scale`, ...).
    pub fn subresource(&self, name: &str) -> Option<&'static SubresourceInfo> {
        self.subresources.iter().find(|s| s.name == name)
    }

    /// Whether `verb` is in [`KindInfo::verbs`].
    pub fn supports(&self, verb: &str) -> bool {
        self.verbs.contains(&verb)
    }

    const fn listable<T: ListableResource>(
        short_names: &'static [&'static str],
        categories: &'static [&'static str],
        subresources: &'static [SubresourceInfo],
    ) -> KindInfo
    where
        T::Scope: ScopeFlag,
    {
        KindInfo {
            group: T::GROUP,
            version: T::VERSION,
            kind: T::KIND,
            list_kind: Some(T::LIST_KIND),
            plural: T::URL_PATH_SEGMENT,
            namespaced: <T::Scope as ScopeFlag>::NAMESPACED,
            verbs: STANDARD_VERBS,
            short_names,
            categories,
            subresources,
        }
    }

    const fn create_only<T: Resource>(
        short_names: &'static [&'static str],
        categories: &'static [&'static str],
        subresources: &'static [SubresourceInfo],
    ) -> KindInfo
    where
        T::Scope: ScopeFlag,
    {
        KindInfo {
            group: T::GROUP,
            version: T::VERSION,
            kind: T::KIND,
            list_kind: None,
            plural: T::URL_PATH_SEGMENT,
            namespaced: <T::Scope as ScopeFlag>::NAMESPACED,
            verbs: CREATE_ONLY_VERBS,
            short_names,
            categories,
            subresources,
        }
    }
}

/// A subresource such as `pods/status` or `deployments/scale`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubresourceInfo {
    /// Path segment after `{name}` (`status`, `scale`, `eviction`, `binding`).
    pub name: &'static str,
    /// Group, version and kind of the objects sent to / returned by it.
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub verbs: &'static [&'static str],
}

impl SubresourceInfo {
    const fn status<T: Resource>() -> SubresourceInfo {
        SubresourceInfo {
            name: "status",
            group: T::GROUP,
            version: T::VERSION,
            kind: T::KIND,
            verbs: GET_UPDATE_VERBS,
        }
    }

    const fn of<T: Resource>(
        name: &'static str,
        verbs: &'static [&'static str],
    ) -> SubresourceInfo {
        SubresourceInfo {
            name,
            group: T::GROUP,
            version: T::VERSION,
            kind: T::KIND,
            verbs,
        }
    }
}

/// A served group version (`("", "v1")`, `("apps", "v1")`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupVersion {
    pub group: &'static str,
    pub version: &'static str,
}

impl GroupVersion {
    /// `v1` or `apps/v1`.
    pub fn api_version(&self) -> String {
        group_version_string(self.group, self.version)
    }

    /// The OpenAPI v3 / discovery path without leading slash: `api/v1` or `apis/apps/v1`.
    pub fn path(&self) -> String {
        if self.group.is_empty() {
            format!("api/{}", self.version)
        } else {
            format!("apis/{}/{}", self.group, self.version)
        }
    }
}

/// Maps a k8s-openapi scope marker type to "is namespaced".
trait ScopeFlag {
    const NAMESPACED: bool;
}

impl ScopeFlag for k8s_openapi::NamespaceResourceScope {
    const NAMESPACED: bool = true;
}

impl ScopeFlag for k8s_openapi::ClusterResourceScope {
    const NAMESPACED: bool = false;
}

/// Builds `KINDS` (the served resources) and `KIND_TYPES` (their type-check
/// and schema entries) from one list, so both stay in the same order.
///
/// Entry syntax: `listable|create_only <type> [short names] [categories] [subresources];`
/// where subresources are any of `status`, `scale`, `eviction`, `binding`.
macro_rules! catalog {
    ($(
        $mode:ident $ty:ty,
        [$($short:literal),*],
        [$($cat:literal),*],
        [$($sub:ident),*];
    )*) => {
        static KINDS: &[KindInfo] = &[$(
            KindInfo::$mode::<$ty>(
                &[$($short),*],
                &[$($cat),*],
                &[$(catalog!(@sub $sub $ty)),*],
            ),
        )*];

        pub(crate) static KIND_TYPES: &[TypeEntry] = &[$(TypeEntry::of::<$ty>(),)*];
    };
    (@sub status $ty:ty) => { SubresourceInfo::status::<$ty>() };
    (@sub scale $ty:ty) => { SubresourceInfo::of::<Scale>("scale", GET_UPDATE_VERBS) };
    (@sub eviction $ty:ty) => { SubresourceInfo::of::<Eviction>("eviction", CREATE_ONLY_VERBS) };
    (@sub binding $ty:ty) => { SubresourceInfo::of::<Binding>("binding", CREATE_ONLY_VERBS) };
}

use k8s_openapi::api::{
    apps::v1 as apps, batch::v1 as batch, coordination::v1 as coordination, core::v1 as core,
    discovery::v1 as discovery, events::v1 as events, networking::v1 as networking,
    policy::v1 as policy, rbac::v1 as rbac, storage::v1 as storage,
};

catalog! {
    listable core::Pod, ["po"], ["all"], [status, eviction, binding];
    listable core::Service, ["svc"], ["all"], [status];
    listable core::Endpoints, ["ep"], [], [];
    listable core::ConfigMap, ["cm"], [], [];
    listable core::Secret, [], [], [];
    listable core::Namespace, ["ns"], [], [status];
    listable core::Node, ["no"], [], [status];
    listable core::Event, ["ev"], [], [];
    listable core::PersistentVolume, ["pv"], [], [status];
    listable core::PersistentVolumeClaim, ["pvc"], [], [status];
    listable core::ServiceAccount, ["sa"], [], [];
    create_only core::Binding, [], [], [];
    listable apps::Deployment, ["deploy"], ["all"], [status, scale];
    listable apps::ReplicaSet, ["rs"], ["all"], [status, scale];
    listable apps::StatefulSet, ["sts"], ["all"], [status, scale];
    listable apps::DaemonSet, ["ds"], ["all"], [status];
    listable apps::ControllerRevision, [], [], [];
    listable batch::Job, [], ["all"], [status];
    listable batch::CronJob, ["cj"], ["all"], [status];
    listable coordination::Lease, [], [], [];
    listable discovery::EndpointSlice, [], [], [];
    listable networking::Ingress, ["ing"], [], [status];
    listable networking::IngressClass, [], [], [];
    listable storage::StorageClass, ["sc"], [], [];
    // No "ev": kubectl would warn that the short name is ambiguous.
    listable events::Event, [], [], [];
    listable rbac::Role, [], [], [];
    listable rbac::ClusterRole, [], [], [];
    listable rbac::RoleBinding, [], [], [];
    listable rbac::ClusterRoleBinding, [], [], [];
    listable policy::PodDisruptionBudget, ["pdb"], [], [status];
}

/// Every resource this server serves, grouped by group version.
pub fn kinds() -> &'static [KindInfo] {
    KINDS
}

/// The resource serving objects of this group, version and kind.
pub fn kind_info(group: &str, version: &str, kind: &str) -> Option<&'static KindInfo> {
    KINDS
        .iter()
        .find(|k| k.group == group && k.version == version && k.kind == kind)
}

/// The resource with this plural name (`pods`) in this group version.
pub fn resource_info(group: &str, version: &str, plural: &str) -> Option<&'static KindInfo> {
    KINDS
        .iter()
        .find(|k| k.group == group && k.version == version && k.plural == plural)
}

/// The resources of one group version, in catalog order.
pub fn kinds_in<'a>(
    group: &'a str,
    version: &'a str,
) -> impl Iterator<Item = &'static KindInfo> + 'a {
    KINDS
        .iter()
        .filter(move |k| k.group == group && k.version == version)
}

/// Every served group version, the core group first, then in catalog order.
pub fn group_versions() -> Vec<GroupVersion> {
    let mut out: Vec<GroupVersion> = Vec::new();
    for k in KINDS {
        let gv = GroupVersion {
            group: k.group,
            version: k.version,
        };
        if !out.contains(&gv) {
            out.push(gv);
        }
    }
    out
}

/// `v1` for the core group, `<group>/<version>` otherwise.
pub fn group_version_string(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_requested_kind_is_served_with_its_plural_and_scope() {
        let expect: &[(&str, &str, &str, bool)] = &[
            ("", "Pod", "pods", true),
            ("", "Service", "services", true),
            ("", "Endpoints", "endpoints", true),
            ("", "ConfigMap", "configmaps", true),
            ("", "Secret", "secrets", true),
            ("", "Namespace", "namespaces", false),
            ("", "Node", "nodes", false),
            ("", "Event", "events", true),
            ("", "PersistentVolume", "persistentvolumes", false),
            ("", "PersistentVolumeClaim", "persistentvolumeclaims", true),
            ("", "ServiceAccount", "serviceaccounts", true),
            ("", "Binding", "bindings", true),
            ("apps", "Deployment", "deployments", true),
            ("apps", "ReplicaSet", "replicasets", true),
            ("apps", "StatefulSet", "statefulsets", true),
            ("apps", "DaemonSet", "daemonsets", true),
            ("apps", "ControllerRevision", "controllerrevisions", true),
            ("batch", "Job", "jobs", true),
            ("batch", "CronJob", "cronjobs", true),
            ("coordination.k8s.io", "Lease", "leases", true),
            ("discovery.k8s.io", "EndpointSlice", "endpointslices", true),
            ("networking.k8s.io", "Ingress", "ingresses", true),
            ("networking.k8s.io", "IngressClass", "ingressclasses", false),
            ("storage.k8s.io", "StorageClass", "storageclasses", false),
            ("events.k8s.io", "Event", "events", true),
            ("rbac.authorization.k8s.io", "Role", "roles", true),
            (
                "rbac.authorization.k8s.io",
                "ClusterRole",
                "clusterroles",
                false,
            ),
            (
                "rbac.authorization.k8s.io",
                "RoleBinding",
                "rolebindings",
                true,
            ),
            (
                "rbac.authorization.k8s.io",
                "ClusterRoleBinding",
                "clusterrolebindings",
                false,
            ),
            (
                "policy",
                "PodDisruptionBudget",
                "poddisruptionbudgets",
                true,
            ),
        ];
        assert_eq!(kinds().len(), expect.len());
        for (group, kind, plural, namespaced) in expect {
            let info = kind_info(group, "v1", kind).unwrap_or_else(|| panic!("{group}/{kind}"));
            assert_eq!(info.plural, *plural, "{kind}");
            assert_eq!(info.namespaced, *namespaced, "{kind}");
            assert_eq!(resource_info(group, "v1", plural), Some(info));
        }
    }

    #[test]
    fn list_kinds_verbs_and_subresources() {
        let pod = kind_info("", "v1", "Pod").unwrap();
        assert_eq!(pod.list_kind, Some("PodList"));
        assert_eq!(pod.verbs, STANDARD_VERBS);
        assert_eq!(pod.short_names, &["po"]);
        let eviction = pod.subresource("eviction").unwrap();
        assert_eq!((eviction.group, eviction.kind), ("policy", "Eviction"));
        assert_eq!(pod.subresource("status").unwrap().kind, "Pod");

        let binding = kind_info("", "v1", "Binding").unwrap();
        assert_eq!(binding.list_kind, None);
        assert!(binding.supports("create") && !binding.supports("list"));

        let scale = kind_info("apps", "v1", "Deployment")
            .unwrap()
            .subresource("scale")
            .unwrap();
        assert_eq!(
            (scale.group, scale.version, scale.kind),
            ("autoscaling", "v1", "Scale")
        );
        assert!(kind_info("apps", "v1", "Pod").is_none());
    }

    #[test]
    fn group_versions_are_unique_and_core_first() {
        let gvs = group_versions();
        assert_eq!(gvs[0].path(), "api/v1");
        assert_eq!(gvs[0].api_version(), "v1");
        let paths: Vec<String> = gvs.iter().map(GroupVersion::path).collect();
        assert!(paths.contains(&"apis/apps/v1".to_owned()));
        assert!(paths.contains(&"apis/rbac.authorization.k8s.io/v1".to_owned()));
        let mut dedup = paths.clone();
        dedup.sort();
        dedup.dedup();
        assert_eq!(dedup.len(), paths.len());
        assert_eq!(gvs.len(), 10);
    }
}
