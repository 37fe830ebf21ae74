//! The resources this server serves: one table, read by routing, discovery, storage and
//! the per-resource strategies.

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
    pub fn name(self) -> &'static str {
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
        Some(match s {
            "status" => Subresource::Status,
            "scale" => Subresource::Scale,
            "log" => Subresource::Log,
            "exec" => Subresource::Exec,
            "attach" => Subresource::Attach,
            "portforward" => Subresource::PortForward,
            "eviction" => Subresource::Eviction,
            "binding" => Subresource::Binding,
            "finalize" => Subresource::Finalize,
            "token" => Subresource::Token,
            _ => return None,
        })
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

/// One served resource.
#[derive(Clone, Debug)]
pub struct ResourceDef {
    /// API group, `""` for core.
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    /// Plural name used in URLs.
    pub plural: &'static str,
    pub singular: &'static str,
    pub namespaced: bool,
    pub short_names: &'static [&'static str],
    pub categories: &'static [&'static str],
    pub subresources: &'static [Subresource],
    pub name_rule: NameRule,
    /// The object carries a `spec` whose changes bump `metadata.generation`.
    pub has_spec: bool,
    /// Extra field-selector labels besides `metadata.name` / `metadata.namespace`.
    pub field_labels: &'static [&'static str],
}

impl ResourceDef {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `pods`, or `deployments.apps` for messages.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    pub fn has_subresource(&self, s: Subresource) -> bool {
        self.subresources.contains(&s)
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
}

use NameRule::*;
use Subresource::*;

macro_rules! res {
    ($group:expr, $kind:expr, $plural:expr, $singular:expr, ns=$ns:expr, short=[$($s:expr),*], sub=[$($sub:expr),*], name=$rule:expr, spec=$spec:expr, fields=[$($f:expr),*] $(, cat=[$($c:expr),*])?) => {
        ResourceDef {
            group: $group,
            version: "v1",
            kind: $kind,
            plural: $plural,
            singular: $singular,
            namespaced: $ns,
            short_names: &[$($s),*],
            categories: &[$($($c),*)?],
            subresources: &[$($sub),*],
            name_rule: $rule,
            has_spec: $spec,
            field_labels: &[$($f),*],
        }
    };
}

/// Every resource served, in discovery order.
pub static RESOURCES: &[ResourceDef] = &[
    res!("", "Pod", "pods", "pod", ns=true, short=["po"], sub=[Status, Log, Exec, Attach, PortForward, Eviction, Binding], name=Subdomain, spec=false,
        fields=["spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName", "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName"], cat=["all"]),
    res!("", "Service", "services", "service", ns=true, short=["svc"], sub=[Status], name=Label, spec=false, fields=[], cat=["all"]),
    res!("", "Endpoints", "endpoints", "endpoints", ns=true, short=["ep"], sub=[], name=Subdomain, spec=false, fields=[]),
    res!("", "ConfigMap", "configmaps", "configmap", ns=true, short=["cm"], sub=[], name=Subdomain, spec=false, fields=[]),
    res!("", "Secret", "secrets", "secret", ns=true, short=[], sub=[], name=Subdomain, spec=false, fields=["type"]),
    res!("", "Namespace", "namespaces", "namespace", ns=false, short=["ns"], sub=[Status, Finalize], name=Label, spec=false, fields=["status.phase"]),
    res!("", "Node", "nodes", "node", ns=false, short=["no"], sub=[Status], name=Subdomain, spec=false, fields=["spec.unschedulable"]),
    res!("", "Event", "events", "event", ns=true, short=["ev"], sub=[], name=Path, spec=false,
        fields=["involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type"]),
    res!("", "PersistentVolume", "persistentvolumes", "persistentvolume", ns=false, short=["pv"], sub=[Status], name=Subdomain, spec=false, fields=[]),
    res!("", "PersistentVolumeClaim", "persistentvolumeclaims", "persistentvolumeclaim", ns=true, short=["pvc"], sub=[Status], name=Subdomain, spec=false, fields=[]),
    res!("", "ServiceAccount", "serviceaccounts", "serviceaccount", ns=true, short=["sa"], sub=[Token], name=Subdomain, spec=false, fields=[]),
    res!("apps", "Deployment", "deployments", "deployment", ns=true, short=["deploy"], sub=[Status, Scale], name=Subdomain, spec=true, fields=[], cat=["all"]),
    res!("apps", "ReplicaSet", "replicasets", "replicaset", ns=true, short=["rs"], sub=[Status, Scale], name=Subdomain, spec=true, fields=["status.replicas"], cat=["all"]),
    res!("apps", "StatefulSet", "statefulsets", "statefulset", ns=true, short=["sts"], sub=[Status, Scale], name=Subdomain, spec=true, fields=[], cat=["all"]),
    res!("apps", "DaemonSet", "daemonsets", "daemonset", ns=true, short=["ds"], sub=[Status], name=Subdomain, spec=true, fields=[], cat=["all"]),
    res!("apps", "ControllerRevision", "controllerrevisions", "controllerrevision", ns=true, short=[], sub=[], name=Subdomain, spec=false, fields=[]),
    res!("batch", "Job", "jobs", "job", ns=true, short=[], sub=[Status], name=Subdomain, spec=true, fields=["status.successful"], cat=["all"]),
    res!("batch", "CronJob", "cronjobs", "cronjob", ns=true, short=["cj"], sub=[Status], name=Subdomain, spec=true, fields=[], cat=["all"]),
    res!("coordination.k8s.io", "Lease", "leases", "lease", ns=true, short=[], sub=[], name=Subdomain, spec=false, fields=[]),
    res!("discovery.k8s.io", "EndpointSlice", "endpointslices", "endpointslice", ns=true, short=[], sub=[], name=Subdomain, spec=false, fields=["addressType"]),
    res!("networking.k8s.io", "Ingress", "ingresses", "ingress", ns=true, short=["ing"], sub=[Status], name=Subdomain, spec=true, fields=[]),
    res!("networking.k8s.io", "IngressClass", "ingressclasses", "ingressclass", ns=false, short=[], sub=[], name=Subdomain, spec=true, fields=[]),
    res!("storage.k8s.io", "StorageClass", "storageclasses", "storageclass", ns=false, short=["sc"], sub=[], name=Subdomain, spec=false, fields=[]),
    res!("events.k8s.io", "Event", "events", "event", ns=true, short=[], sub=[], name=Path, spec=false,
        fields=["regarding.kind", "regarding.namespace", "regarding.name", "regarding.uid", "reason", "reportingController", "type"]),
    res!("rbac.authorization.k8s.io", "Role", "roles", "role", ns=true, short=[], sub=[], name=Path, spec=false, fields=[]),
    res!("rbac.authorization.k8s.io", "ClusterRole", "clusterroles", "clusterrole", ns=false, short=[], sub=[], name=Path, spec=false, fields=[]),
    res!("rbac.authorization.k8s.io", "RoleBinding", "rolebindings", "rolebinding", ns=true, short=[], sub=[], name=Path, spec=false, fields=[]),
    res!("rbac.authorization.k8s.io", "ClusterRoleBinding", "clusterrolebindings", "clusterrolebinding", ns=false, short=[], sub=[], name=Path, spec=false, fields=[]),
    res!("policy", "PodDisruptionBudget", "poddisruptionbudgets", "poddisruptionbudget", ns=true, short=["pdb"], sub=[Status], name=Subdomain, spec=true, fields=[]),
];

/// Group versions in discovery order: (group, version).
pub fn group_versions() -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    for r in RESOURCES {
        if !out.contains(&(r.group, r.version)) {
            out.push((r.group, r.version));
        }
    }
    out
}

/// The resource `plural` of `group/version`.
pub fn lookup(group: &str, version: &str, plural: &str) -> Option<&'static ResourceDef> {
    RESOURCES.iter().find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The resource serving `kind` in `group/version`.
pub fn by_kind(group: &str, version: &str, kind: &str) -> Option<&'static ResourceDef> {
    RESOURCES.iter().find(|r| r.group == group && r.version == version && r.kind == kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plurals_are_unique_per_group_version() {
        for r in RESOURCES {
            let n = RESOURCES.iter().filter(|o| o.group == r.group && o.plural == r.plural).count();
            assert_eq!(n, 1, "{} declared twice", r.qualified());
        }
    }

    #[test]
    fn key_prefixes_do_not_nest() {
        for a in RESOURCES {
            for b in RESOURCES {
                if !std::ptr::eq(a, b) {
                    assert!(!a.key_prefix().starts_with(&b.key_prefix()), "{} inside {}", a.key_prefix(), b.key_prefix());
                }
            }
        }
    }
}
