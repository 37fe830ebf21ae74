//! RBAC API objects (`rbac.authorization.k8s.io/v1`) parsed from their JSON
//! form, and the rule-matching functions of the Kubernetes RBAC authorizer.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::messages::go_quote;
use keelson_apimachinery::labels::{LabelSelector, LabelSelectorError as SelectorError};
use crate::types::{parse_service_account_username, Attributes, UserInfo};

/// The RBAC API group.
pub const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
/// The RBAC API version these objects are read as.
pub const RBAC_API_VERSION: &str = "rbac.authorization.k8s.io/v1";

/// Why an RBAC object could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The object is not a JSON object.
    #[error("object is not a JSON object")]
    NotAnObject,
    /// The `kind` field names another kind.
    #[error("expected kind {expected}, found {found:?}")]
    WrongKind {
        /// Kind the caller asked for.
        expected: &'static str,
        /// Kind found in the object.
        found: String,
    },
    /// `metadata.name` is missing or empty.
    #[error("metadata.name is missing")]
    MissingName,
    /// `metadata.namespace` is missing on a namespaced object.
    #[error("metadata.namespace is missing")]
    MissingNamespace,
    /// A field has the wrong JSON type.
    #[error("field {field}: {problem}")]
    BadField {
        /// Path of the field, e.g. `rules[0].verbs`.
        field: String,
        /// What is wrong.
        problem: &'static str,
    },
    /// `roleRef.kind` is not `Role` or `ClusterRole` (or `Role` on a
    /// ClusterRoleBinding).
    #[error("unsupported roleRef kind {0:?}")]
    BadRoleRef(String),
    /// An aggregation selector is invalid.
    #[error("aggregationRule.clusterRoleSelectors[{index}]: {source}")]
    BadSelector {
        /// Index of the selector.
        index: usize,
        /// The selector problem.
        source: SelectorError,
    },
}

/// One RBAC `PolicyRule`. Empty lists are kept empty (an empty `apiGroups`
/// matches no resource request, an empty `verbs` matches nothing).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRule {
    /// Verbs, or `*`.
    #[serde(default)]
    pub verbs: Vec<String>,
    /// API groups, or `*`; `""` is the core group.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub api_groups: Vec<String>,
    /// Resources: `pods`, `pods/log`, `*`, `*/scale`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
    /// Object names the rule is restricted to; empty means any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_names: Vec<String>,
    /// Non-resource URLs: exact, `*`, or a prefix ending in `*`.
    #[serde(
        default,
        rename = "nonResourceURLs",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub non_resource_urls: Vec<String>,
}

impl PolicyRule {
    /// Reads a rule; absent or `null` lists are empty, other types are errors.
    /// `field` prefixes error paths (e.g. `rules[3]`).
    pub fn from_json(v: &Value, field: &str) -> Result<Self, ParseError> {
        let obj = v.as_object().ok_or_else(|| ParseError::BadField {
            field: field.to_string(),
            problem: "must be an object",
        })?;
        Ok(PolicyRule {
            verbs: string_list(obj, "verbs", field)?,
            api_groups: string_list(obj, "apiGroups", field)?,
            resources: string_list(obj, "resources", field)?,
            resource_names: string_list(obj, "resourceNames", field)?,
            non_resource_urls: string_list(obj, "nonResourceURLs", field)?,
        })
    }

    /// The rule in API JSON form (empty lists other than `verbs` omitted).
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// Whether this rule grants `attrs` (Kubernetes `RuleAllows`): verb,
    /// group, resource (with subresource) and resource name must all match
    /// for resource requests; verb and URL for non-resource requests.
    ///
    /// A `create` on a collection (no subresource) never matches a rule with
    /// `resourceNames`: Kubernetes requests carry no name there, and a name
    /// wrongly supplied by the caller must not widen access. `create` on a
    /// named subresource (e.g. `pods/eviction`, `serviceaccounts/token`) does
    /// match by name, as in Kubernetes.
    pub fn allows(&self, attrs: &Attributes) -> bool {
        match attrs {
            Attributes::Resource(r) => {
                let name = if r.verb == "create" && r.subresource().is_none() {
                    None
                } else {
                    r.name()
                };
                verb_matches(self, &r.verb)
                    && api_group_matches(self, &r.api_group)
                    && resource_matches(self, &r.combined_resource(), r.subresource())
                    && resource_name_matches(self, name)
            }
            Attributes::NonResource(n) => {
                verb_matches(self, &n.verb) && non_resource_url_matches(self, &n.path)
            }
        }
    }
}

/// `*` or an exact verb.
pub fn verb_matches(rule: &PolicyRule, verb: &str) -> bool {
    rule.verbs.iter().any(|v| v == "*" || v == verb)
}

/// `*` or an exact group.
pub fn api_group_matches(rule: &PolicyRule, group: &str) -> bool {
    rule.api_groups.iter().any(|g| g == "*" || g == group)
}

/// `*`, the exact combined resource (`pods` or `pods/log`), or `*/SUB` when
/// the request is for subresource `SUB`. `pods` alone never grants `pods/log`.
pub fn resource_matches(rule: &PolicyRule, combined: &str, subresource: Option<&str>) -> bool {
    rule.resources.iter().any(|r| {
        if r == "*" || r == combined {
            return true;
        }
        match subresource {
            Some(sub) if !sub.is_empty() => r.strip_prefix("*/") == Some(sub),
            _ => false,
        }
    })
}

/// A rule without `resourceNames` matches any (or no) name; a rule with them
/// matches only requests naming one of them.
pub fn resource_name_matches(rule: &PolicyRule, name: Option<&str>) -> bool {
    if rule.resource_names.is_empty() {
        return true;
    }
    match name {
        Some(n) if !n.is_empty() => rule.resource_names.iter().any(|r| r == n),
        _ => false,
    }
}

/// `*`, the exact path, or a prefix ending in `*` (`/apis/*` matches
/// `/apis/apps/v1` and `/apis/`, but not `/apis`).
pub fn non_resource_url_matches(rule: &PolicyRule, path: &str) -> bool {
    rule.non_resource_urls.iter().any(|u| {
        if u == "*" || u == path {
            return true;
        }
        match u.strip_suffix('*') {
            Some(prefix) => path.starts_with(prefix),
            None => false,
        }
    })
}

/// A binding subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    /// `User`, `Group`, `ServiceAccount` (others never match).
    pub kind: String,
    /// Name of the user, group or service account.
    pub name: String,
    /// Namespace of a service account; empty means the binding's namespace.
    pub namespace: String,
}

impl Subject {
    /// Kubernetes `appliesToUser`: `User` by name, `Group` by membership,
    /// `ServiceAccount` by the user name `system:serviceaccount:NS:NAME`
    /// where NS defaults to `binding_namespace` (empty for cluster bindings,
    /// in which case a namespace-less service account subject never matches).
    pub fn applies_to(&self, user: &UserInfo, binding_namespace: &str) -> bool {
        match self.kind.as_str() {
            "User" => user.name == self.name,
            "Group" => user.in_group(&self.name),
            "ServiceAccount" => {
                let ns = if self.namespace.is_empty() {
                    binding_namespace
                } else {
                    &self.namespace
                };
                !ns.is_empty()
                    && parse_service_account_username(&user.name) == Some((ns, &self.name))
            }
            _ => false,
        }
    }

    /// Kubernetes' description of the subject in allow reasons:
    /// `User "alice"`, `ServiceAccount "sa/ns"`.
    pub fn describe(&self, binding_namespace: &str) -> String {
        if self.kind == "ServiceAccount" {
            let ns = if self.namespace.is_empty() {
                binding_namespace
            } else {
                &self.namespace
            };
            format!(
                "{} {}",
                self.kind,
                go_quote(&format!("{}/{}", self.name, ns))
            )
        } else {
            format!("{} {}", self.kind, go_quote(&self.name))
        }
    }

    fn from_json(v: &Value, field: &str) -> Result<Self, ParseError> {
        let obj = v.as_object().ok_or_else(|| ParseError::BadField {
            field: field.to_string(),
            problem: "must be an object",
        })?;
        Ok(Subject {
            kind: required_str(obj, "kind", field)?,
            name: required_str(obj, "name", field)?,
            namespace: optional_str(obj, "namespace", field)?.unwrap_or_default(),
        })
    }
}

/// Kind of role a binding refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RoleRefKind {
    /// A namespaced Role (in the binding's namespace).
    Role,
    /// A ClusterRole.
    ClusterRole,
}

/// A binding's `roleRef`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleRef {
    /// Role or ClusterRole.
    pub kind: RoleRefKind,
    /// Name of the role.
    pub name: String,
}

/// A namespaced Role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Role {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Rules.
    pub rules: Vec<PolicyRule>,
}

/// A ClusterRole. When `aggregation` is `Some`, the effective rules are the
/// union of the rules of the ClusterRoles its selectors match and the stored
/// `rules` are ignored (the aggregation controller would overwrite them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterRole {
    /// Name.
    pub name: String,
    /// metadata.labels, matched by other roles' aggregation selectors.
    pub labels: BTreeMap<String, String>,
    /// Stored rules.
    pub rules: Vec<PolicyRule>,
    /// `aggregationRule.clusterRoleSelectors`, if an aggregationRule is set.
    pub aggregation: Option<Vec<LabelSelector>>,
}

/// A RoleBinding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleBinding {
    /// Namespace the binding grants in.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The Role (same namespace) or ClusterRole granted.
    pub role_ref: RoleRef,
    /// Who is granted.
    pub subjects: Vec<Subject>,
}

/// A ClusterRoleBinding (roleRef is always a ClusterRole).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterRoleBinding {
    /// Name.
    pub name: String,
    /// Name of the ClusterRole granted.
    pub role_name: String,
    /// Who is granted.
    pub subjects: Vec<Subject>,
}

impl Role {
    /// Reads a `Role` object; `kind`, if present, must be `Role`.
    pub fn from_json(v: &Value) -> Result<Self, ParseError> {
        let (obj, meta) = object_and_meta(v, "Role")?;
        Ok(Role {
            namespace: meta_namespace(meta)?,
            name: meta_name(meta)?,
            rules: rules(obj)?,
        })
    }
}

impl ClusterRole {
    /// Reads a `ClusterRole` object; `kind`, if present, must be `ClusterRole`.
    /// An invalid aggregation selector makes the whole object invalid.
    pub fn from_json(v: &Value) -> Result<Self, ParseError> {
        let (obj, meta) = object_and_meta(v, "ClusterRole")?;
        let labels = match meta.get("labels") {
            None | Some(Value::Null) => BTreeMap::new(),
            Some(Value::Object(m)) => m
                .iter()
                .map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                .collect::<Option<_>>()
                .ok_or_else(|| bad("metadata.labels", "values must be strings"))?,
            Some(_) => return Err(bad("metadata.labels", "must be an object")),
        };
        let aggregation = match obj.get("aggregationRule") {
            None | Some(Value::Null) => None,
            Some(Value::Object(ar)) => {
                let sels = match ar.get("clusterRoleSelectors") {
                    None | Some(Value::Null) => Vec::new(),
                    Some(Value::Array(a)) => a
                        .iter()
                        .enumerate()
                        .map(|(index, s)| {
                            LabelSelector::from_label_selector_json(s)
                                .map_err(|source| ParseError::BadSelector { index, source })
                        })
                        .collect::<Result<_, _>>()?,
                    Some(_) => {
                        return Err(bad(
                            "aggregationRule.clusterRoleSelectors",
                            "must be a list",
                        ))
                    }
                };
                Some(sels)
            }
            Some(_) => return Err(bad("aggregationRule", "must be an object")),
        };
        Ok(ClusterRole {
            name: meta_name(meta)?,
            labels,
            rules: rules(obj)?,
            aggregation,
        })
    }
}

impl RoleBinding {
    /// Reads a `RoleBinding`; `roleRef.kind` must be `Role` or `ClusterRole`.
    pub fn from_json(v: &Value) -> Result<Self, ParseError> {
        let (obj, meta) = object_and_meta(v, "RoleBinding")?;
        Ok(RoleBinding {
            namespace: meta_namespace(meta)?,
            name: meta_name(meta)?,
            role_ref: role_ref(obj)?,
            subjects: subjects(obj)?,
        })
    }
}

impl ClusterRoleBinding {
    /// Reads a `ClusterRoleBinding`; `roleRef.kind` must be `ClusterRole`.
    pub fn from_json(v: &Value) -> Result<Self, ParseError> {
        let (obj, meta) = object_and_meta(v, "ClusterRoleBinding")?;
        let rr = role_ref(obj)?;
        if rr.kind != RoleRefKind::ClusterRole {
            return Err(ParseError::BadRoleRef("Role".into()));
        }
        Ok(ClusterRoleBinding {
            name: meta_name(meta)?,
            role_name: rr.name,
            subjects: subjects(obj)?,
        })
    }
}

/// Builds a `rbac.authorization.k8s.io/v1` Subject JSON object.
pub fn subject_json(kind: &str, name: &str, namespace: Option<&str>) -> Value {
    match namespace {
        Some(ns) => json!({"kind": kind, "name": name, "namespace": ns}),
        None if kind == "ServiceAccount" => json!({"kind": kind, "name": name}),
        None => json!({"apiGroup": RBAC_GROUP, "kind": kind, "name": name}),
    }
}

fn bad(field: &str, problem: &'static str) -> ParseError {
    ParseError::BadField {
        field: field.to_string(),
        problem,
    }
}

type JsonObject = Map<String, Value>;

fn object_and_meta<'a>(
    v: &'a Value,
    kind: &'static str,
) -> Result<(&'a JsonObject, &'a JsonObject), ParseError> {
    let obj = v.as_object().ok_or(ParseError::NotAnObject)?;
    match obj.get("kind") {
        None | Some(Value::Null) => {}
        Some(Value::String(k)) if k == kind => {}
        Some(other) => {
            return Err(ParseError::WrongKind {
                expected: kind,
                found: other
                    .as_str()
                    .map_or_else(|| other.to_string(), str::to_string),
            })
        }
    }
    let meta = obj
        .get("metadata")
        .and_then(Value::as_object)
        .ok_or(ParseError::MissingName)?;
    Ok((obj, meta))
}

fn meta_name(meta: &Map<String, Value>) -> Result<String, ParseError> {
    match meta.get("name").and_then(Value::as_str) {
        Some(n) if !n.is_empty() => Ok(n.to_string()),
        _ => Err(ParseError::MissingName),
    }
}

fn meta_namespace(meta: &Map<String, Value>) -> Result<String, ParseError> {
    match meta.get("namespace").and_then(Value::as_str) {
        Some(n) if !n.is_empty() => Ok(n.to_string()),
        _ => Err(ParseError::MissingNamespace),
    }
}

fn rules(obj: &Map<String, Value>) -> Result<Vec<PolicyRule>, ParseError> {
    match obj.get("rules") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, r)| PolicyRule::from_json(r, &format!("rules[{i}]")))
            .collect(),
        Some(_) => Err(bad("rules", "must be a list")),
    }
}

fn role_ref(obj: &Map<String, Value>) -> Result<RoleRef, ParseError> {
    let rr = obj
        .get("roleRef")
        .and_then(Value::as_object)
        .ok_or_else(|| bad("roleRef", "must be an object"))?;
    let kind = required_str(rr, "kind", "roleRef")?;
    let name = required_str(rr, "name", "roleRef")?;
    let kind = match kind.as_str() {
        "Role" => RoleRefKind::Role,
        "ClusterRole" => RoleRefKind::ClusterRole,
        _ => return Err(ParseError::BadRoleRef(kind)),
    };
    Ok(RoleRef { kind, name })
}

fn subjects(obj: &Map<String, Value>) -> Result<Vec<Subject>, ParseError> {
    match obj.get("subjects") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, s)| Subject::from_json(s, &format!("subjects[{i}]")))
            .collect(),
        Some(_) => Err(bad("subjects", "must be a list")),
    }
}

fn required_str(obj: &Map<String, Value>, key: &str, field: &str) -> Result<String, ParseError> {
    match obj.get(key).and_then(Value::as_str) {
        Some(s) if !s.is_empty() => Ok(s.to_string()),
        _ => Err(ParseError::BadField {
            field: format!("{field}.{key}"),
            problem: "must be a non-empty string",
        }),
    }
}

fn optional_str(
    obj: &Map<String, Value>,
    key: &str,
    field: &str,
) -> Result<Option<String>, ParseError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(ParseError::BadField {
            field: format!("{field}.{key}"),
            problem: "must be a string",
        }),
    }
}

fn string_list(
    obj: &Map<String, Value>,
    key: &str,
    field: &str,
) -> Result<Vec<String>, ParseError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| ParseError::BadField {
                field: format!("{field}.{key}"),
                problem: "must be a list of strings",
            }),
        Some(_) => Err(ParseError::BadField {
            field: format!("{field}.{key}"),
            problem: "must be a list of strings",
        }),
    }
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
