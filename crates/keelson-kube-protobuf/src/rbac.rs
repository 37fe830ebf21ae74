//! `rbac.authorization.k8s.io/v1` object bodies: `Role`, `ClusterRole`,
//! `RoleBinding`, `ClusterRoleBinding`. Conversion failures are
//! [`crate::json::ConvertError`]s; this module adds no error type of its own.

use k8s_pb::api::rbac::v1 as rbac;
use serde_json::Value;

use crate::json::{Obj, Result};
use crate::meta::{label_selector, object_meta};

/// `Role` (`rules`).
pub fn role(r: &rbac::Role) -> Result<Value> {
    let mut o = Obj::new();
    o.message("metadata", &r.metadata, object_meta)?;
    o.messages("rules", &r.rules, policy_rule)?;
    Ok(o.build())
}

/// `ClusterRole` (`rules`, `aggregationRule`).
pub fn cluster_role(r: &rbac::ClusterRole) -> Result<Value> {
    let mut o = Obj::new();
    o.message("metadata", &r.metadata, object_meta)?;
    o.messages("rules", &r.rules, policy_rule)?;
    o.message("aggregationRule", &r.aggregation_rule, |a| {
        let mut o = Obj::new();
        o.messages(
            "clusterRoleSelectors",
            &a.cluster_role_selectors,
            label_selector,
        )?;
        Ok(o.build())
    })?;
    Ok(o.build())
}

/// `PolicyRule`; `apiGroups: [""]` (the core group) is kept as sent.
pub fn policy_rule(r: &rbac::PolicyRule) -> Result<Value> {
    Ok(Obj::new()
        .strings("verbs", &r.verbs)
        .strings("apiGroups", &r.api_groups)
        .strings("resources", &r.resources)
        .strings("resourceNames", &r.resource_names)
        .strings("nonResourceURLs", &r.non_resource_ur_ls)
        .build())
}

/// `RoleBinding` (`subjects`, `roleRef`).
pub fn role_binding(b: &rbac::RoleBinding) -> Result<Value> {
    let mut o = Obj::new();
    o.message("metadata", &b.metadata, object_meta)?;
    o.messages("subjects", &b.subjects, subject)?;
    o.message("roleRef", &b.role_ref, role_ref)?;
    Ok(o.build())
}

/// `ClusterRoleBinding` (`subjects`, `roleRef`).
pub fn cluster_role_binding(b: &rbac::ClusterRoleBinding) -> Result<Value> {
    let mut o = Obj::new();
    o.message("metadata", &b.metadata, object_meta)?;
    o.messages("subjects", &b.subjects, subject)?;
    o.message("roleRef", &b.role_ref, role_ref)?;
    Ok(o.build())
}

/// `Subject`; `kind` and `name` are required, `apiGroup` (empty for
/// ServiceAccounts) and `namespace` are `omitempty`.
pub fn subject(s: &rbac::Subject) -> Result<Value> {
    Ok(Obj::new()
        .string_kept("kind", &s.kind)
        .string("apiGroup", &s.api_group)
        .string_kept("name", &s.name)
        .string("namespace", &s.namespace)
        .build())
}

/// `RoleRef`; all three fields are required.
pub fn role_ref(r: &rbac::RoleRef) -> Result<Value> {
    Ok(Obj::new()
        .string_kept("apiGroup", &r.api_group)
        .string_kept("kind", &r.kind)
        .string_kept("name", &r.name)
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn service_account_subject_omits_empty_api_group() {
        let s = rbac::Subject {
            kind: Some("ServiceAccount".into()),
            api_group: Some(String::new()),
            name: Some("builder".into()),
            namespace: Some("default".into()),
        };
        assert_eq!(
            subject(&s).unwrap(),
            json!({"kind": "ServiceAccount", "name": "builder", "namespace": "default"})
        );
    }

    #[test]
    fn core_group_rule_keeps_empty_group_name() {
        let r = rbac::PolicyRule {
            verbs: vec!["get".into()],
            api_groups: vec![String::new()],
            resources: vec!["pods".into()],
            resource_names: vec![],
            non_resource_ur_ls: vec![],
        };
        assert_eq!(
            policy_rule(&r).unwrap(),
            json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]})
        );
    }
}
