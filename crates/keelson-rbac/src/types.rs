//! Request-side types: who asks ([`UserInfo`]), what they ask for
//! ([`Attributes`]) and the answer ([`Decision`]).
//!
//! These mirror the Kubernetes authorizer interface (`authorizer.Attributes`,
//! `user.Info`, `authorizer.Decision`) closely enough that an API server can
//! build them straight from its request-info resolver.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The super-user group: members are allowed every request without RBAC.
pub const SYSTEM_MASTERS: &str = "system:masters";
/// Group every authenticated user belongs to.
pub const SYSTEM_AUTHENTICATED: &str = "system:authenticated";
/// Group of anonymous requests.
pub const SYSTEM_UNAUTHENTICATED: &str = "system:unauthenticated";
/// Group of node (kubelet) identities.
pub const SYSTEM_NODES: &str = "system:nodes";
/// Group of every service account.
pub const SYSTEM_SERVICE_ACCOUNTS: &str = "system:serviceaccounts";
/// Prefix of service-account user names: `system:serviceaccount:NS:NAME`.
pub const SERVICE_ACCOUNT_USER_PREFIX: &str = "system:serviceaccount:";
/// Prefix of node user names: `system:node:NAME`.
pub const NODE_USER_PREFIX: &str = "system:node:";

/// An authenticated identity, as Kubernetes' `user.Info`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserInfo {
    /// The user name (`alice`, `system:serviceaccount:ns:sa`, `system:node:n1`).
    pub name: String,
    /// Unique id of the user; informational, never used for decisions.
    #[serde(default)]
    pub uid: String,
    /// Groups the user belongs to; matched by `Group` subjects.
    #[serde(default)]
    pub groups: Vec<String>,
    /// Extra authenticator-provided attributes; informational here.
    #[serde(default)]
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// A user with the given name and no groups.
    pub fn new(name: impl Into<String>) -> Self {
        UserInfo {
            name: name.into(),
            ..UserInfo::default()
        }
    }

    /// Returns `self` with `groups` appended (duplicates are kept out).
    pub fn with_groups<I, S>(mut self, groups: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        for g in groups {
            let g = g.into();
            if !self.groups.contains(&g) {
                self.groups.push(g);
            }
        }
        self
    }

    /// The identity a service-account token authenticates as: user
    /// `system:serviceaccount:NS:NAME` in groups `system:serviceaccounts`,
    /// `system:serviceaccounts:NS` and `system:authenticated`.
    pub fn service_account(namespace: &str, name: &str) -> Self {
        UserInfo::new(service_account_username(namespace, name)).with_groups([
            SYSTEM_SERVICE_ACCOUNTS.to_string(),
            format!("{SYSTEM_SERVICE_ACCOUNTS}:{namespace}"),
            SYSTEM_AUTHENTICATED.to_string(),
        ])
    }

    /// The identity of a kubelet: user `system:node:NAME` in groups
    /// `system:nodes` and `system:authenticated`.
    pub fn node(name: &str) -> Self {
        UserInfo::new(format!("{NODE_USER_PREFIX}{name}"))
            .with_groups([SYSTEM_NODES, SYSTEM_AUTHENTICATED])
    }

    /// True when `group` is one of the user's groups (exact match).
    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }
}

/// `system:serviceaccount:NS:NAME`.
pub fn service_account_username(namespace: &str, name: &str) -> String {
    format!("{SERVICE_ACCOUNT_USER_PREFIX}{namespace}:{name}")
}

/// Splits `system:serviceaccount:NS:NAME` into `(NS, NAME)`; `None` for any
/// other user name or when either part is empty or NAME contains `:`.
pub fn parse_service_account_username(user: &str) -> Option<(&str, &str)> {
    let rest = user.strip_prefix(SERVICE_ACCOUNT_USER_PREFIX)?;
    let (ns, name) = rest.split_once(':')?;
    if ns.is_empty() || name.is_empty() || name.contains(':') {
        return None;
    }
    Some((ns, name))
}

/// A request against an API resource (`/api/...`, `/apis/...`).
///
/// `namespace` is `None` for cluster-scoped resources and for requests across
/// all namespaces; `name` is `None` when the URL names no object (list,
/// watch, deletecollection, and `create` on a collection). As in Kubernetes'
/// request-info resolver, a request for a `namespaces` object itself should
/// carry that namespace's name in both `namespace` and `name`.
/// `Some("")` is treated exactly like `None` everywhere in this crate.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceAttributes {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection`, or a special verb (`impersonate`, `bind`,
    /// `escalate`, `use`, `approve`, ...).
    pub verb: String,
    /// API group; `""` for the core group.
    pub api_group: String,
    /// Plural lower-case resource, e.g. `pods`.
    pub resource: String,
    /// Subresource, e.g. `log`, `status`, `scale`.
    pub subresource: Option<String>,
    /// Namespace of the request; `None` for cluster scope / all namespaces.
    pub namespace: Option<String>,
    /// Object name from the URL, if any.
    pub name: Option<String>,
}

impl ResourceAttributes {
    /// A request with the given verb, group and resource and nothing else.
    pub fn new(verb: &str, api_group: &str, resource: &str) -> Self {
        ResourceAttributes {
            verb: verb.to_string(),
            api_group: api_group.to_string(),
            resource: resource.to_string(),
            ..ResourceAttributes::default()
        }
    }

    /// Sets the namespace.
    pub fn in_namespace(mut self, namespace: &str) -> Self {
        self.namespace = Some(namespace.to_string());
        self
    }

    /// Sets the object name.
    pub fn named(mut self, name: &str) -> Self {
        self.name = Some(name.to_string());
        self
    }

    /// Sets the subresource.
    pub fn with_subresource(mut self, subresource: &str) -> Self {
        self.subresource = Some(subresource.to_string());
        self
    }

    /// The namespace, with `Some("")` read as `None`.
    pub fn namespace(&self) -> Option<&str> {
        non_empty(&self.namespace)
    }

    /// The object name, with `Some("")` read as `None`.
    pub fn name(&self) -> Option<&str> {
        non_empty(&self.name)
    }

    /// The subresource, with `Some("")` read as `None`.
    pub fn subresource(&self) -> Option<&str> {
        non_empty(&self.subresource)
    }

    /// `resource` or `resource/subresource`, the form RBAC rules name.
    pub fn combined_resource(&self) -> String {
        match self.subresource() {
            Some(sub) => format!("{}/{}", self.resource, sub),
            None => self.resource.clone(),
        }
    }
}

/// A request for a non-resource URL such as `/healthz` or `/api`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NonResourceAttributes {
    /// Lower-case HTTP verb: `get`, `post`, `put`, `patch`, `delete`, ...
    pub verb: String,
    /// The request path, e.g. `/metrics`.
    pub path: String,
}

impl NonResourceAttributes {
    /// A request for `path` with `verb`.
    pub fn new(verb: &str, path: &str) -> Self {
        NonResourceAttributes {
            verb: verb.to_string(),
            path: path.to_string(),
        }
    }
}

/// What is being asked for: a resource request or a non-resource request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Attributes {
    /// A request against an API resource.
    Resource(ResourceAttributes),
    /// A request for a non-resource URL.
    NonResource(NonResourceAttributes),
}

impl Attributes {
    /// Shorthand for a resource request without namespace, name or subresource.
    pub fn resource(verb: &str, api_group: &str, resource: &str) -> Self {
        Attributes::Resource(ResourceAttributes::new(verb, api_group, resource))
    }

    /// Shorthand for a non-resource request.
    pub fn non_resource(verb: &str, path: &str) -> Self {
        Attributes::NonResource(NonResourceAttributes::new(verb, path))
    }

    /// The verb of either kind of request.
    pub fn verb(&self) -> &str {
        match self {
            Attributes::Resource(r) => &r.verb,
            Attributes::NonResource(n) => &n.verb,
        }
    }

    /// True for resource requests.
    pub fn is_resource_request(&self) -> bool {
        matches!(self, Attributes::Resource(_))
    }

    /// The namespace of a resource request (`None` for non-resource ones).
    pub fn namespace(&self) -> Option<&str> {
        match self {
            Attributes::Resource(r) => r.namespace(),
            Attributes::NonResource(_) => None,
        }
    }
}

impl From<ResourceAttributes> for Attributes {
    fn from(r: ResourceAttributes) -> Self {
        Attributes::Resource(r)
    }
}

impl From<NonResourceAttributes> for Attributes {
    fn from(n: NonResourceAttributes) -> Self {
        Attributes::NonResource(n)
    }
}

/// The outcome of an authorization check.
///
/// `Allow.reason` says which binding granted the request (for audit logs).
/// `Deny.reason` is empty when nothing granted the request, or
/// `RBAC: <errors>` when bindings that applied to the user could not be
/// evaluated (e.g. a missing role); it is the suffix Kubernetes appends to the
/// 403 message, see [`crate::forbidden_message_with_reason`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Decision {
    /// The request is allowed.
    Allow {
        /// Human-readable description of what allowed it.
        reason: String,
    },
    /// The request is not allowed (Kubernetes' "no opinion" from RBAC).
    Deny {
        /// Empty, or evaluation errors prefixed with `RBAC: `.
        reason: String,
    },
}

impl Decision {
    /// True for [`Decision::Allow`].
    pub fn is_allowed(&self) -> bool {
        matches!(self, Decision::Allow { .. })
    }

    /// The reason string of either variant.
    pub fn reason(&self) -> &str {
        match self {
            Decision::Allow { reason } | Decision::Deny { reason } => reason,
        }
    }
}

fn non_empty(s: &Option<String>) -> Option<&str> {
    s.as_deref().filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_account_identity_has_kubernetes_groups() {
        let u = UserInfo::service_account("ns1", "builder");
        assert_eq!(u.name, "system:serviceaccount:ns1:builder");
        assert!(u.in_group("system:serviceaccounts"));
        assert!(u.in_group("system:serviceaccounts:ns1"));
        assert!(u.in_group("system:authenticated"));
        assert!(!u.in_group("system:serviceaccounts:ns2"));
    }

    #[test]
    fn parse_service_account_names() {
        assert_eq!(
            parse_service_account_username("system:serviceaccount:a:b"),
            Some(("a", "b"))
        );
        assert_eq!(
            parse_service_account_username("system:serviceaccount:a:"),
            None
        );
        assert_eq!(
            parse_service_account_username("system:serviceaccount::b"),
            None
        );
        assert_eq!(
            parse_service_account_username("system:serviceaccount:a:b:c"),
            None
        );
        assert_eq!(parse_service_account_username("alice"), None);
    }

    #[test]
    fn empty_strings_read_as_absent() {
        let r = ResourceAttributes {
            namespace: Some(String::new()),
            name: Some(String::new()),
            subresource: Some(String::new()),
            ..ResourceAttributes::new("get", "", "pods")
        };
        assert_eq!(r.namespace(), None);
        assert_eq!(r.name(), None);
        assert_eq!(r.combined_resource(), "pods");
        assert_eq!(
            ResourceAttributes::new("get", "", "pods")
                .with_subresource("log")
                .combined_resource(),
            "pods/log"
        );
    }

    #[test]
    fn with_groups_does_not_duplicate() {
        let u = UserInfo::new("x").with_groups(["a", "b", "a"]);
        assert_eq!(u.groups, vec!["a", "b"]);
    }
}
