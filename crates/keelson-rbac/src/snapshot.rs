//! [`RbacSnapshot`]: every Role, ClusterRole, RoleBinding and
//! ClusterRoleBinding of a cluster, with the Kubernetes RBAC authorizer
//! ([`RbacSnapshot::authorize`]) and rule resolver
//! ([`RbacSnapshot::rules_for`]) over them.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::ControlFlow;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::messages::go_quote;
use crate::policy::{
    ClusterRole, ClusterRoleBinding, ParseError, PolicyRule, Role, RoleBinding, RoleRefKind,
    Subject,
};
use crate::types::{Attributes, Decision, UserInfo, SYSTEM_MASTERS};

/// Errors of snapshot maintenance.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    /// The object could not be read as the given kind; it was not stored and
    /// any previous object under the same key was removed.
    #[error("ignored {kind} {key}: {source}")]
    Malformed {
        /// The kind the object was offered as.
        kind: RbacKind,
        /// `"namespace/name"`, `"name"`, or `"<unnamed>"`.
        key: String,
        /// What is wrong with it.
        source: ParseError,
    },
    /// An object's `kind` is none of the four RBAC kinds.
    #[error("ignored object of unsupported kind {0:?}")]
    UnsupportedKind(String),
}

/// The four RBAC object kinds a snapshot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RbacKind {
    /// `Role` (namespaced).
    Role,
    /// `ClusterRole`.
    ClusterRole,
    /// `RoleBinding` (namespaced).
    RoleBinding,
    /// `ClusterRoleBinding`.
    ClusterRoleBinding,
}

impl RbacKind {
    /// The API kind name.
    pub fn as_str(self) -> &'static str {
        match self {
            RbacKind::Role => "Role",
            RbacKind::ClusterRole => "ClusterRole",
            RbacKind::RoleBinding => "RoleBinding",
            RbacKind::ClusterRoleBinding => "ClusterRoleBinding",
        }
    }

    /// From an API kind name (`Role`, ...); `None` for other kinds.
    pub fn from_kind(kind: &str) -> Option<Self> {
        [
            Self::Role,
            Self::ClusterRole,
            Self::RoleBinding,
            Self::ClusterRoleBinding,
        ]
        .into_iter()
        .find(|k| k.as_str() == kind)
    }

    /// From a resource name (`roles`, `clusterroles`, `rolebindings`,
    /// `clusterrolebindings`); `None` otherwise.
    pub fn from_resource(resource: &str) -> Option<Self> {
        match resource {
            "roles" => Some(Self::Role),
            "clusterroles" => Some(Self::ClusterRole),
            "rolebindings" => Some(Self::RoleBinding),
            "clusterrolebindings" => Some(Self::ClusterRoleBinding),
            _ => None,
        }
    }

    /// True for `Role` and `RoleBinding`.
    pub fn is_namespaced(self) -> bool {
        matches!(self, RbacKind::Role | RbacKind::RoleBinding)
    }
}

impl fmt::Display for RbacKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A resource rule as `SelfSubjectRulesReview.status.resourceRules` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRule {
    /// Verbs.
    pub verbs: Vec<String>,
    /// API groups.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub api_groups: Vec<String>,
    /// Resources.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
    /// Resource names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_names: Vec<String>,
}

/// A non-resource rule as `SelfSubjectRulesReview.status.nonResourceRules`
/// shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NonResourceRule {
    /// Verbs.
    pub verbs: Vec<String>,
    /// URLs.
    #[serde(
        default,
        rename = "nonResourceURLs",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub non_resource_urls: Vec<String>,
}

/// The status of a `SelfSubjectRulesReview`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RulesReview {
    /// Resource rules, in binding order (cluster bindings first).
    pub resource_rules: Vec<ResourceRule>,
    /// Non-resource rules, in binding order.
    pub non_resource_rules: Vec<NonResourceRule>,
    /// True when some applicable binding could not be evaluated.
    pub incomplete: bool,
    /// The evaluation errors, when `incomplete`.
    pub evaluation_error: Option<String>,
}

/// Which binding (and subject) a rule came from, for allow reasons.
enum Source<'a> {
    Cluster(&'a ClusterRoleBinding, &'a Subject),
    Namespaced(&'a RoleBinding, &'a Subject),
}

impl Source<'_> {
    /// Kubernetes' wording: `ClusterRoleBinding "b" of ClusterRole "r" to User "u"`,
    /// `RoleBinding "b/ns" of Role "r" to ServiceAccount "sa/ns"`.
    fn describe(&self) -> String {
        match self {
            Source::Cluster(b, s) => format!(
                "ClusterRoleBinding {} of ClusterRole {} to {}",
                go_quote(&b.name),
                go_quote(&b.role_name),
                s.describe("")
            ),
            Source::Namespaced(b, s) => format!(
                "RoleBinding {} of {} {} to {}",
                go_quote(&format!("{}/{}", b.name, b.namespace)),
                match b.role_ref.kind {
                    RoleRefKind::Role => "Role",
                    RoleRefKind::ClusterRole => "ClusterRole",
                },
                go_quote(&b.role_ref.name),
                s.describe(&b.namespace)
            ),
        }
    }
}

/// All RBAC objects of a cluster, parsed. Cheap to query; maintained from a
/// watch with [`RbacSnapshot::upsert`] and [`RbacSnapshot::remove`].
///
/// Invariants: each object is stored under its own `(namespace, name)`;
/// objects that failed to parse are absent and described in
/// [`RbacSnapshot::warnings`] until replaced or removed.
#[derive(Debug, Clone, Default)]
pub struct RbacSnapshot {
    roles: BTreeMap<(String, String), Role>,
    cluster_roles: BTreeMap<String, ClusterRole>,
    role_bindings: BTreeMap<String, BTreeMap<String, RoleBinding>>,
    cluster_role_bindings: BTreeMap<String, ClusterRoleBinding>,
    warnings: BTreeMap<(RbacKind, String, String), String>,
}

impl RbacSnapshot {
    /// An empty snapshot (denies everything except `system:masters`).
    pub fn new() -> Self {
        RbacSnapshot::default()
    }

    /// Builds a snapshot from the API JSON of all objects of each kind.
    /// Malformed objects are skipped and reported by [`Self::warnings`].
    pub fn from_objects(
        roles: &[Value],
        cluster_roles: &[Value],
        role_bindings: &[Value],
        cluster_role_bindings: &[Value],
    ) -> Self {
        let mut s = RbacSnapshot::new();
        for (kind, objs) in [
            (RbacKind::Role, roles),
            (RbacKind::ClusterRole, cluster_roles),
            (RbacKind::RoleBinding, role_bindings),
            (RbacKind::ClusterRoleBinding, cluster_role_bindings),
        ] {
            for o in objs {
                // The error is recorded in `warnings`.
                let _ = s.upsert(kind, o);
            }
        }
        s
    }

    /// Builds a snapshot from objects of mixed kinds, dispatching on each
    /// object's `kind` (e.g. the output of [`crate::bootstrap_policy`]).
    /// Objects of other kinds are skipped with a warning.
    pub fn from_typed_objects(objects: &[Value]) -> Self {
        let mut s = RbacSnapshot::new();
        for (i, o) in objects.iter().enumerate() {
            let kind_str = o.get("kind").and_then(Value::as_str).unwrap_or("");
            match RbacKind::from_kind(kind_str) {
                Some(kind) => {
                    let _ = s.upsert(kind, o);
                }
                None => {
                    let err = SnapshotError::UnsupportedKind(kind_str.to_string());
                    s.warnings.insert(
                        (RbacKind::Role, String::new(), format!("<object #{i}>")),
                        err.to_string(),
                    );
                }
            }
        }
        s
    }

    /// Inserts or replaces one object (a watch ADDED/MODIFIED event).
    ///
    /// On success any warning for the same key is cleared. On failure the
    /// object is not stored, a previously stored object with the same key (if
    /// the key can be read) is removed so stale grants do not survive, a
    /// warning is recorded and the error returned.
    pub fn upsert(&mut self, kind: RbacKind, obj: &Value) -> Result<(), SnapshotError> {
        let meta = obj.get("metadata");
        let field = |k: &str| {
            meta.and_then(|m| m.get(k))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let (ns, name) = (
            if kind.is_namespaced() {
                field("namespace")
            } else {
                String::new()
            },
            field("name"),
        );
        let result = match kind {
            RbacKind::Role => Role::from_json(obj).map(|r| {
                self.roles.insert((r.namespace.clone(), r.name.clone()), r);
            }),
            RbacKind::ClusterRole => ClusterRole::from_json(obj).map(|r| {
                self.cluster_roles.insert(r.name.clone(), r);
            }),
            RbacKind::RoleBinding => RoleBinding::from_json(obj).map(|b| {
                self.role_bindings
                    .entry(b.namespace.clone())
                    .or_default()
                    .insert(b.name.clone(), b);
            }),
            RbacKind::ClusterRoleBinding => ClusterRoleBinding::from_json(obj).map(|b| {
                self.cluster_role_bindings.insert(b.name.clone(), b);
            }),
        };
        let wkey = (
            kind,
            ns.clone(),
            if name.is_empty() {
                "<unnamed>".to_string()
            } else {
                name.clone()
            },
        );
        match result {
            Ok(()) => {
                self.warnings.remove(&wkey);
                Ok(())
            }
            Err(source) => {
                if !name.is_empty() {
                    self.remove_object(kind, &ns, &name);
                }
                let key = match (ns.is_empty(), name.is_empty()) {
                    (_, true) => "<unnamed>".to_string(),
                    (true, false) => name.clone(),
                    (false, false) => format!("{ns}/{name}"),
                };
                let err = SnapshotError::Malformed { kind, key, source };
                self.warnings.insert(wkey, err.to_string());
                Err(err)
            }
        }
    }

    /// Removes one object (a watch DELETED event) and its warning, if any.
    /// `namespace` is ignored for cluster-scoped kinds. Returns whether an
    /// object was stored under that key.
    pub fn remove(&mut self, kind: RbacKind, namespace: Option<&str>, name: &str) -> bool {
        let ns = if kind.is_namespaced() {
            namespace.unwrap_or("")
        } else {
            ""
        };
        self.warnings
            .remove(&(kind, ns.to_string(), name.to_string()));
        self.remove_object(kind, ns, name)
    }

    fn remove_object(&mut self, kind: RbacKind, ns: &str, name: &str) -> bool {
        match kind {
            RbacKind::Role => self
                .roles
                .remove(&(ns.to_string(), name.to_string()))
                .is_some(),
            RbacKind::ClusterRole => self.cluster_roles.remove(name).is_some(),
            RbacKind::RoleBinding => {
                let Some(m) = self.role_bindings.get_mut(ns) else {
                    return false;
                };
                let removed = m.remove(name).is_some();
                if m.is_empty() {
                    self.role_bindings.remove(ns);
                }
                removed
            }
            RbacKind::ClusterRoleBinding => self.cluster_role_bindings.remove(name).is_some(),
        }
    }

    /// One line per object currently ignored because it was malformed.
    pub fn warnings(&self) -> Vec<String> {
        self.warnings.values().cloned().collect()
    }

    /// Number of stored objects of `kind`.
    pub fn count(&self, kind: RbacKind) -> usize {
        match kind {
            RbacKind::Role => self.roles.len(),
            RbacKind::ClusterRole => self.cluster_roles.len(),
            RbacKind::RoleBinding => self.role_bindings.values().map(BTreeMap::len).sum(),
            RbacKind::ClusterRoleBinding => self.cluster_role_bindings.len(),
        }
    }

    /// The stored ClusterRole `name`.
    pub fn cluster_role(&self, name: &str) -> Option<&ClusterRole> {
        self.cluster_roles.get(name)
    }

    /// The rules ClusterRole `name` grants: its own rules, or for an
    /// aggregated role the de-duplicated union of the rules of every
    /// non-aggregated ClusterRole reachable through its selectors (following
    /// aggregated roles transitively, never the role itself, cycle-safe) —
    /// the fixpoint Kubernetes' aggregation controller converges to.
    /// `None` when no such ClusterRole exists.
    pub fn effective_cluster_role_rules(&self, name: &str) -> Option<Cow<'_, [PolicyRule]>> {
        let role = self.cluster_roles.get(name)?;
        if role.aggregation.is_none() {
            return Some(Cow::Borrowed(&role.rules));
        }
        let mut seen: BTreeSet<&str> = BTreeSet::from([role.name.as_str()]);
        let mut out: Vec<PolicyRule> = Vec::new();
        let mut stack: Vec<&ClusterRole> = vec![role];
        while let Some(r) = stack.pop() {
            let Some(selectors) = &r.aggregation else {
                for rule in &r.rules {
                    if !out.contains(rule) {
                        out.push(rule.clone());
                    }
                }
                continue;
            };
            let mut matched = Vec::new();
            for sel in selectors {
                for (n, other) in &self.cluster_roles {
                    if !seen.contains(n.as_str()) && sel.matches(&other.labels) {
                        seen.insert(n.as_str());
                        matched.push(other);
                    }
                }
            }
            // Reverse so the stack pops them in selector/name order.
            stack.extend(matched.into_iter().rev());
        }
        Some(Cow::Owned(out))
    }

    /// Visits every rule granted to `user` by ClusterRoleBindings, then by
    /// RoleBindings in `namespace` (if any), until `visit` breaks. Bindings
    /// whose role is missing add a Kubernetes-style error to `errors`.
    fn visit_rules<'a>(
        &'a self,
        user: &UserInfo,
        namespace: Option<&str>,
        errors: &mut Vec<String>,
        mut visit: impl FnMut(&Source<'a>, &PolicyRule) -> ControlFlow<()>,
    ) {
        for b in self.cluster_role_bindings.values() {
            let Some(subject) = b.subjects.iter().find(|s| s.applies_to(user, "")) else {
                continue;
            };
            let Some(rules) = self.effective_cluster_role_rules(&b.role_name) else {
                errors.push(not_found("clusterrole", &b.role_name));
                continue;
            };
            let src = Source::Cluster(b, subject);
            for r in rules.iter() {
                if visit(&src, r).is_break() {
                    return;
                }
            }
        }
        let Some(ns) = namespace.filter(|n| !n.is_empty()) else {
            return;
        };
        let Some(bindings) = self.role_bindings.get(ns) else {
            return;
        };
        for b in bindings.values() {
            let Some(subject) = b.subjects.iter().find(|s| s.applies_to(user, ns)) else {
                continue;
            };
            let rules: Cow<'_, [PolicyRule]> = match b.role_ref.kind {
                RoleRefKind::ClusterRole => {
                    match self.effective_cluster_role_rules(&b.role_ref.name) {
                        Some(r) => r,
                        None => {
                            errors.push(not_found("clusterrole", &b.role_ref.name));
                            continue;
                        }
                    }
                }
                RoleRefKind::Role => {
                    match self.roles.get(&(ns.to_string(), b.role_ref.name.clone())) {
                        Some(r) => Cow::Borrowed(&r.rules),
                        None => {
                            errors.push(not_found("role", &b.role_ref.name));
                            continue;
                        }
                    }
                }
            };
            let src = Source::Namespaced(b, subject);
            for r in rules.iter() {
                if visit(&src, r).is_break() {
                    return;
                }
            }
        }
    }

    /// Decides `attrs` for `user` with Kubernetes RBAC semantics.
    ///
    /// Members of `system:masters` are always allowed. Otherwise the request
    /// is allowed iff some rule of some role bound to the user allows it:
    /// ClusterRoleBindings grant in every namespace and at cluster scope;
    /// RoleBindings grant only for requests whose namespace is the binding's
    /// (so never for cluster-scoped, all-namespaces or non-resource
    /// requests). See [`Decision`] for the reason strings.
    pub fn authorize(&self, user: &UserInfo, attrs: &Attributes) -> Decision {
        if user.in_group(SYSTEM_MASTERS) {
            return Decision::Allow {
                reason: format!(
                    "allowed: user is a member of the {} group",
                    go_quote(SYSTEM_MASTERS)
                ),
            };
        }
        let mut errors = Vec::new();
        let mut allowed_by = None;
        self.visit_rules(user, attrs.namespace(), &mut errors, |src, rule| {
            if rule.allows(attrs) {
                allowed_by = Some(src.describe());
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
        match allowed_by {
            Some(by) => Decision::Allow {
                reason: format!("RBAC: allowed by {by}"),
            },
            None if errors.is_empty() => Decision::Deny {
                reason: String::new(),
            },
            None => Decision::Deny {
                reason: format!("RBAC: {}", aggregate(&errors)),
            },
        }
    }

    /// The rules `user` holds in `namespace` (`None` or `""`: cluster-wide
    /// bindings only), for `SelfSubjectRulesReview` / `kubectl auth can-i
    /// --list`. Rules with resources become [`ResourceRule`]s, rules with
    /// URLs [`NonResourceRule`]s. `system:masters` members get `*` rules first.
    pub fn rules_for(
        &self,
        user: &UserInfo,
        namespace: Option<&str>,
    ) -> (Vec<ResourceRule>, Vec<NonResourceRule>) {
        let r = self.rules_review(user, namespace);
        (r.resource_rules, r.non_resource_rules)
    }

    /// As [`Self::rules_for`], with the `incomplete` / `evaluationError`
    /// status fields of a `SelfSubjectRulesReview`.
    pub fn rules_review(&self, user: &UserInfo, namespace: Option<&str>) -> RulesReview {
        let mut review = RulesReview::default();
        if user.in_group(SYSTEM_MASTERS) {
            let star = || vec!["*".to_string()];
            review.resource_rules.push(ResourceRule {
                verbs: star(),
                api_groups: star(),
                resources: star(),
                resource_names: Vec::new(),
            });
            review.non_resource_rules.push(NonResourceRule {
                verbs: star(),
                non_resource_urls: star(),
            });
        }
        let mut errors = Vec::new();
        self.visit_rules(user, namespace, &mut errors, |_, rule| {
            if !rule.resources.is_empty() {
                review.resource_rules.push(ResourceRule {
                    verbs: rule.verbs.clone(),
                    api_groups: rule.api_groups.clone(),
                    resources: rule.resources.clone(),
                    resource_names: rule.resource_names.clone(),
                });
            }
            if !rule.non_resource_urls.is_empty() {
                review.non_resource_rules.push(NonResourceRule {
                    verbs: rule.verbs.clone(),
                    non_resource_urls: rule.non_resource_urls.clone(),
                });
            }
            ControlFlow::Continue(())
        });
        if !errors.is_empty() {
            review.incomplete = true;
            review.evaluation_error = Some(aggregate(&errors));
        }
        review
    }
}

fn not_found(resource: &str, name: &str) -> String {
    format!(
        "{resource}.rbac.authorization.k8s.io {} not found",
        go_quote(name)
    )
}

/// Kubernetes' aggregate error text: the single message, or the distinct
/// messages joined by `, ` inside brackets.
fn aggregate(errors: &[String]) -> String {
    let mut distinct: Vec<&str> = Vec::new();
    for e in errors {
        if !distinct.contains(&e.as_str()) {
            distinct.push(e);
        }
    }
    if distinct.len() == 1 {
        distinct[0].to_string()
    } else {
        format!("[{}]", distinct.join(", "))
    }
}

#[cfg(test)]
#[path = "snapshot_tests.rs"]
mod tests;
