//! Encoders for `rbac.authorization.k8s.io/v1` (`Role`, `ClusterRole`,
//! `RoleBinding`, `ClusterRoleBinding`) and `scheduling.k8s.io/v1`
//! `PriorityClass`.

use k8s_pb::api::rbac::v1 as rbac;
use k8s_pb::api::scheduling::v1 as scheduling;

use super::fields::{Fields, Result};
use super::meta::{label_selector, object_meta};

/// `Role`.
pub fn role(f: &mut Fields<'_>) -> Result<rbac::Role> {
    Ok(rbac::Role {
        metadata: f.message("metadata", object_meta)?,
        rules: f.messages("rules", policy_rule)?,
    })
}

/// `ClusterRole` (with `aggregationRule`).
pub fn cluster_role(f: &mut Fields<'_>) -> Result<rbac::ClusterRole> {
    Ok(rbac::ClusterRole {
        metadata: f.message("metadata", object_meta)?,
        rules: f.messages("rules", policy_rule)?,
        aggregation_rule: f.message("aggregationRule", |a| {
            Ok(rbac::AggregationRule {
                cluster_role_selectors: a.messages("clusterRoleSelectors", label_selector)?,
            })
        })?,
    })
}

/// `PolicyRule`.
pub fn policy_rule(f: &mut Fields<'_>) -> Result<rbac::PolicyRule> {
    Ok(rbac::PolicyRule {
        verbs: f.strings("verbs")?,
        api_groups: f.strings("apiGroups")?,
        resources: f.strings("resources")?,
        resource_names: f.strings("resourceNames")?,
        non_resource_ur_ls: f.strings("nonResourceURLs")?,
    })
}

/// `RoleBinding`.
pub fn role_binding(f: &mut Fields<'_>) -> Result<rbac::RoleBinding> {
    Ok(rbac::RoleBinding {
        metadata: f.message("metadata", object_meta)?,
        subjects: f.messages("subjects", subject)?,
        role_ref: f.message("roleRef", role_ref)?,
    })
}

/// `ClusterRoleBinding`.
pub fn cluster_role_binding(f: &mut Fields<'_>) -> Result<rbac::ClusterRoleBinding> {
    Ok(rbac::ClusterRoleBinding {
        metadata: f.message("metadata", object_meta)?,
        subjects: f.messages("subjects", subject)?,
        role_ref: f.message("roleRef", role_ref)?,
    })
}

fn subject(f: &mut Fields<'_>) -> Result<rbac::Subject> {
    Ok(rbac::Subject {
        kind: f.string("kind")?,
        api_group: f.string("apiGroup")?,
        name: f.string("name")?,
        namespace: f.string("namespace")?,
    })
}

fn role_ref(f: &mut Fields<'_>) -> Result<rbac::RoleRef> {
    Ok(rbac::RoleRef {
        api_group: f.string("apiGroup")?,
        kind: f.string("kind")?,
        name: f.string("name")?,
    })
}

/// `PriorityClass`.
pub fn priority_class(f: &mut Fields<'_>) -> Result<scheduling::PriorityClass> {
    Ok(scheduling::PriorityClass {
        metadata: f.message("metadata", object_meta)?,
        value: f.i32("value")?,
        global_default: f.boolean("globalDefault")?,
        description: f.string("description")?,
        preemption_policy: f.string("preemptionPolicy")?,
    })
}
