//! The one catalog of served resources: a single table (`served.rs`) from which routing,
//! discovery, storage keys, the per-resource strategies, type checks, schemas, OpenAPI
//! and the `kubectl get` columns all read.
//!
//! Every entry names a k8s-openapi type; group, version, kind, list kind, the resource
//! plural and the scope are read from that type's `Resource` / `ListableResource`
//! constants, so the catalog cannot disagree with the types it hands to
//! [`crate::typecheck`] and the OpenAPI generator.

mod served;

use k8s_openapi::{ListableResource, Resource};
use keelson_apimachinery::table::Printer;

pub(crate) use served::KIND_TYPES;

/// Verbs of a normal, fully featured resource (sorted, as Kubernetes lists them).
pub const STANDARD_VERBS: &[&str] = &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];

/// Verbs of a create-only resource such as `bindings`.
pub const CREATE_ONLY_VERBS: &[&str] = &["create"];

/// Verbs of the `status` and `scale` subresources.
pub const GET_UPDATE_VERBS: &[&str] = &["get", "patch", "update"];

/// A sub-resource of a resource (`pods/status`, `deployments/scale`, …).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subresource {
    Status,
    Scale,
    Log,
    Exec,
    /// `pods/attach`.
    Attach,
    /// `pods/portforward`.
    PortForward,
    Eviction,
    Binding,
    Finalize,
    /// `serviceaccounts/token`: TokenRequest.
    Token,
}

impl Subresource {
    const ALL: [Subresource; 10] = [
        Subresource::Status,
        Subresource::Scale,
        Subresource::Log,
        Subresource::Exec,
        Subresource::Attach,
        Subresource::PortForward,
        Subresource::Eviction,
        Subresource::Binding,
        Subresource::Finalize,
        Subresource::Token,
    ];

    /// The path segment after `{name}`.
    pub const fn name(self) -> &'static str {
        match self {
            Subresource::Status => "status",
            Subresource::Scale => "scale",
            Subresource::Log => "log",
            Subresource::Exec => "exec",
            Subresource::Attach => "attach",
            Subresource::PortForward => "portforward",
            Subresource::Eviction => "eviction",
            Subresource::Binding => "binding",
            Subresource::Finalize => "finalize",
            Subresource::Token => "token",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|sub| sub.name() == s)
    }
}

/// How an object's name is validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameRule {
    /// RFC 1123 subdomain (most resources).
    Subdomain,
    /// RFC 1123 label (namespaces, services).
    Label,
    /// Anything without `/` or `%` and not `.`/`..` (RBAC objects, events).
    Path,
}

/// One served resource, at `/api/v1/...` or `/apis/<group>/<version>/...`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceDef {
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
    pub subresources: &'static [SubresourceDef],
    pub name_rule: NameRule,
    /// The object carries a `spec` whose changes bump `metadata.generation`.
    pub has_spec: bool,
    /// Extra field-selector labels besides `metadata.name` / `metadata.namespace`.
    pub field_labels: &'static [&'static str],
    /// The `kubectl get` columns.
    pub printer: Printer,
    /// Answered from the request and never stored (access and token reviews).
    pub answered: bool,
}

impl ResourceDef {
    /// `apiVersion` of objects of this kind (`v1`, `apps/v1`).
    pub fn api_version(&self) -> String {
        group_version_string(self.group, self.version)
    }

    /// Singular resource name as discovery reports it (lower-cased kind).
    pub fn singular(&self) -> String {
        self.kind.to_ascii_lowercase()
    }

    /// `pods`, or `deployments.apps` for messages.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// The subresource with this name (`status`, `scale`, ...).
    pub fn subresource(&self, name: &str) -> Option<&'static SubresourceDef> {
        self.subresources.iter().find(|s| s.which.name() == name)
    }

    pub fn has_subresource(&self, s: Subresource) -> bool {
        self.subresources.iter().any(|d| d.which == s)
    }

    /// Whether `verb` is in [`ResourceDef::verbs`].
    pub fn supports(&self, verb: &str) -> bool {
        self.verbs.contains(&verb)
    }

    /// Key prefix of all objects of this resource in the store.
    pub fn key_prefix(&self) -> String {
        let g = if self.group.is_empty() { "core" } else { self.group };
        format!("/registry/{g}/{}/", self.plural)
    }

    /// Whether `field` may be used in a field selector.
    pub fn supports_field(&self, field: &str) -> bool {
        field == "metadata.name" || (self.namespaced && field == "metadata.namespace") || self.field_labels.contains(&field)
    }

    const fn listable<T: ListableResource>(entry: Entry) -> ResourceDef
    where
        T::Scope: ScopeFlag,
    {
        ResourceDef::of::<T>(Some(T::LIST_KIND), STANDARD_VERBS, false, entry)
    }

    const fn create_only<T: Resource>(entry: Entry) -> ResourceDef
    where
        T::Scope: ScopeFlag,
    {
        ResourceDef::of::<T>(None, CREATE_ONLY_VERBS, false, entry)
    }

    /// A create-only resource answered from the request.
    const fn answered<T: Resource>(entry: Entry) -> ResourceDef
    where
        T::Scope: ScopeFlag,
    {
        ResourceDef::of::<T>(None, CREATE_ONLY_VERBS, true, entry)
    }

    const fn of<T: Resource>(list_kind: Option<&'static str>, verbs: &'static [&'static str], answered: bool, e: Entry) -> ResourceDef
    where
        T::Scope: ScopeFlag,
    {
        ResourceDef {
            group: T::GROUP,
            version: T::VERSION,
            kind: T::KIND,
            list_kind,
            plural: T::URL_PATH_SEGMENT,
            namespaced: <T::Scope as ScopeFlag>::NAMESPACED,
            verbs,
            short_names: e.short_names,
            categories: e.categories,
            subresources: e.subresources,
            name_rule: e.name_rule,
            has_spec: e.has_spec,
            field_labels: e.field_labels,
            printer: e.printer,
            answered,
        }
    }
}

/// What one line of the table says beyond its type.
struct Entry {
    short_names: &'static [&'static str],
    categories: &'static [&'static str],
    subresources: &'static [SubresourceDef],
    name_rule: NameRule,
    has_spec: bool,
    field_labels: &'static [&'static str],
    printer: Printer,
}

/// A subresource such as `pods/status` or `deployments/scale`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubresourceDef {
    pub which: Subresource,
    /// Group, version and kind of the objects sent to / returned by it.
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub verbs: &'static [&'static str],
}

impl SubresourceDef {
    /// Path segment after `{name}` (`status`, `scale`, `eviction`, `binding`).
    pub fn name(&self) -> &'static str {
        self.which.name()
    }

    const fn status<T: Resource>() -> SubresourceDef {
        SubresourceDef::of::<T>(Subresource::Status, GET_UPDATE_VERBS)
    }

    const fn of<T: Resource>(which: Subresource, verbs: &'static [&'static str]) -> SubresourceDef {
        SubresourceDef::named(which, T::GROUP, T::VERSION, T::KIND, verbs)
    }

    const fn named(
        which: Subresource,
        group: &'static str,
        version: &'static str,
        kind: &'static str,
        verbs: &'static [&'static str],
    ) -> SubresourceDef {
        SubresourceDef { which, group, version, kind, verbs }
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

/// Every resource served, in discovery order.
pub fn resources() -> &'static [ResourceDef] {
    served::RESOURCES
}

/// The resource serving objects of this group, version and kind.
pub fn by_kind(group: &str, version: &str, kind: &str) -> Option<&'static ResourceDef> {
    resources().iter().find(|k| k.group == group && k.version == version && k.kind == kind)
}

/// The resource with this plural name (`pods`) in this group version.
pub fn lookup(group: &str, version: &str, plural: &str) -> Option<&'static ResourceDef> {
    resources().iter().find(|k| k.group == group && k.version == version && k.plural == plural)
}

/// The resources of one group version, in catalog order.
pub fn resources_in<'a>(group: &'a str, version: &'a str) -> impl Iterator<Item = &'static ResourceDef> + 'a {
    resources().iter().filter(move |k| k.group == group && k.version == version)
}

/// Every served group version, the core group first, then in catalog order.
pub fn group_versions() -> Vec<GroupVersion> {
    let mut out: Vec<GroupVersion> = Vec::new();
    for k in resources() {
        let gv = GroupVersion { group: k.group, version: k.version };
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
            ("scheduling.k8s.io", "PriorityClass", "priorityclasses", false),
            ("authorization.k8s.io", "SelfSubjectAccessReview", "selfsubjectaccessreviews", false),
            ("authorization.k8s.io", "SelfSubjectRulesReview", "selfsubjectrulesreviews", false),
            ("authorization.k8s.io", "SubjectAccessReview", "subjectaccessreviews", false),
            ("authorization.k8s.io", "LocalSubjectAccessReview", "localsubjectaccessreviews", true),
            ("authentication.k8s.io", "SelfSubjectReview", "selfsubjectreviews", false),
            ("authentication.k8s.io", "TokenReview", "tokenreviews", false),
        ];
        assert_eq!(resources().len(), expect.len());
        for (group, kind, plural, namespaced) in expect {
            let info = by_kind(group, "v1", kind).unwrap_or_else(|| panic!("{group}/{kind}"));
            assert_eq!(info.plural, *plural, "{kind}");
            assert_eq!(info.namespaced, *namespaced, "{kind}");
            assert_eq!(lookup(group, "v1", plural), Some(info));
        }
    }

    #[test]
    fn list_kinds_verbs_and_subresources() {
        let pod = by_kind("", "v1", "Pod").unwrap();
        assert_eq!(pod.list_kind, Some("PodList"));
        assert_eq!(pod.verbs, STANDARD_VERBS);
        assert_eq!(pod.short_names, &["po"]);
        let eviction = pod.subresource("eviction").unwrap();
        assert_eq!((eviction.group, eviction.kind), ("policy", "Eviction"));
        assert_eq!(pod.subresource("status").unwrap().kind, "Pod");

        let binding = by_kind("", "v1", "Binding").unwrap();
        assert_eq!(binding.list_kind, None);
        assert!(binding.supports("create") && !binding.supports("list"));

        let scale = by_kind("apps", "v1", "Deployment")
            .unwrap()
            .subresource("scale")
            .unwrap();
        assert_eq!(
            (scale.group, scale.version, scale.kind),
            ("autoscaling", "v1", "Scale")
        );
        assert!(by_kind("apps", "v1", "Pod").is_none());
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
        assert_eq!(gvs.len(), 13);
        assert!(resources().iter().filter(|r| r.answered).all(|r| r.verbs == CREATE_ONLY_VERBS && r.list_kind.is_none()));
    }

    #[test]
    fn plurals_are_unique_per_group_version() {
        for r in resources() {
            let n = resources().iter().filter(|o| o.group == r.group && o.plural == r.plural).count();
            assert_eq!(n, 1, "{} declared twice", r.qualified());
        }
    }

    #[test]
    fn key_prefixes_do_not_nest() {
        for a in resources() {
            for b in resources() {
                if !std::ptr::eq(a, b) {
                    assert!(!a.key_prefix().starts_with(&b.key_prefix()), "{} inside {}", a.key_prefix(), b.key_prefix());
                }
            }
        }
    }

    #[test]
    fn subresource_names_parse_back() {
        for s in Subresource::ALL {
            assert_eq!(Subresource::parse(s.name()), Some(s));
        }
        assert_eq!(Subresource::parse("logs"), None);
        let pod = by_kind("", "v1", "Pod").unwrap();
        assert!(pod.has_subresource(Subresource::Exec) && !pod.has_subresource(Subresource::Scale));
        assert_eq!(pod.subresource("exec").unwrap().kind, "PodExecOptions");
        let token = by_kind("", "v1", "ServiceAccount").unwrap().subresource("token").unwrap();
        assert_eq!((token.group, token.kind), ("authentication.k8s.io", "TokenRequest"));
    }

    #[test]
    fn field_selectors_and_printers_come_with_the_resource() {
        let pods = lookup("", "v1", "pods").unwrap();
        assert!(pods.supports_field("spec.nodeName") && pods.supports_field("metadata.namespace"));
        assert!(!pods.supports_field("spec.containers"));
        assert!(!lookup("", "v1", "nodes").unwrap().supports_field("metadata.namespace"));
        assert_eq!(pods.printer, Printer::Pod);
        assert_eq!(lookup("events.k8s.io", "v1", "events").unwrap().printer, Printer::EventV1);
        assert_eq!(lookup("apps", "v1", "deployments").unwrap().key_prefix(), "/registry/apps/deployments/");
        assert_eq!(lookup("", "v1", "pods").unwrap().key_prefix(), "/registry/core/pods/");
    }
}
