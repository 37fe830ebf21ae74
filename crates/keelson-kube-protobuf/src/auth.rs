//! Review and token request bodies: `authentication.k8s.io/v1`
//! `TokenRequest` (`kubectl create token`), `TokenReview`,
//! `SelfSubjectReview` (`kubectl auth whoami`) and
//! `authorization.k8s.io/v1` `SelfSubjectAccessReview` (`kubectl auth
//! can-i`), `SelfSubjectRulesReview` (`kubectl auth can-i --list`),
//! `SubjectAccessReview`. Only the request side (`spec`) is translated.
//! Conversion failures are [`crate::json::ConvertError`]s; this module adds
//! no error type of its own.

use k8s_pb::api::authentication::v1 as authn;
use k8s_pb::api::authorization::v1 as authz;
use serde_json::{Map, Value};

use crate::json::{Obj, Result};
use crate::meta::{field_selector_requirement, label_selector_requirement, object_meta};

/// `TokenRequest` (`spec.audiences`, `expirationSeconds`, `boundObjectRef`).
pub fn token_request(t: &authn::TokenRequest) -> Result<Value> {
    let mut o = Obj::new();
    o.message("metadata", &t.metadata, object_meta)?;
    o.message("spec", &t.spec, |s| {
        let mut o = Obj::new();
        o.strings("audiences", &s.audiences)
            .int_kept("expirationSeconds", s.expiration_seconds);
        o.message("boundObjectRef", &s.bound_object_ref, |r| {
            Ok(Obj::new()
                .string("kind", &r.kind)
                .string("apiVersion", &r.api_version)
                .string("name", &r.name)
                .string("uid", &r.u_id)
                .build())
        })?;
        Ok(o.build())
    })?;
    Ok(o.build())
}

/// `TokenReview` (`spec.token`, `spec.audiences`).
pub fn token_review(t: &authn::TokenReview) -> Result<Value> {
    let mut o = Obj::new();
    o.message("metadata", &t.metadata, object_meta)?;
    o.message("spec", &t.spec, |s| {
        Ok(Obj::new()
            .string("token", &s.token)
            .strings("audiences", &s.audiences)
            .build())
    })?;
    Ok(o.build())
}

/// `SelfSubjectReview`: only metadata on the request side.
pub fn self_subject_review(r: &authn::SelfSubjectReview) -> Result<Value> {
    let mut o = Obj::new();
    o.message("metadata", &r.metadata, object_meta)?;
    Ok(o.build())
}

/// `SelfSubjectAccessReview` (`spec.resourceAttributes` or
/// `spec.nonResourceAttributes`).
pub fn self_subject_access_review(r: &authz::SelfSubjectAccessReview) -> Result<Value> {
    let mut o = Obj::new();
    o.message("metadata", &r.metadata, object_meta)?;
    o.message("spec", &r.spec, |s| {
        let mut o = Obj::new();
        o.message(
            "resourceAttributes",
            &s.resource_attributes,
            resource_attributes,
        )?;
        o.message(
            "nonResourceAttributes",
            &s.non_resource_attributes,
            non_resource_attributes,
        )?;
        Ok(o.build())
    })?;
    Ok(o.build())
}

/// `SelfSubjectRulesReview` (`spec.namespace`).
pub fn self_subject_rules_review(r: &authz::SelfSubjectRulesReview) -> Result<Value> {
    let mut o = Obj::new();
    o.message("metadata", &r.metadata, object_meta)?;
    o.message("spec", &r.spec, |s| {
        Ok(Obj::new().string("namespace", &s.namespace).build())
    })?;
    Ok(o.build())
}

/// `SubjectAccessReview` (attributes plus `user`, `groups`, `extra`, `uid`).
pub fn subject_access_review(r: &authz::SubjectAccessReview) -> Result<Value> {
    let mut o = Obj::new();
    o.message("metadata", &r.metadata, object_meta)?;
    o.message("spec", &r.spec, |s| {
        let mut o = Obj::new();
        o.message(
            "resourceAttributes",
            &s.resource_attributes,
            resource_attributes,
        )?;
        o.message(
            "nonResourceAttributes",
            &s.non_resource_attributes,
            non_resource_attributes,
        )?;
        o.string("user", &s.user).strings("groups", &s.groups);
        if !s.extra.is_empty() {
            let extra: Map<String, Value> = s
                .extra
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v.items.iter().cloned().map(Value::String).collect(),
                    )
                })
                .collect();
            o.put("extra", Value::Object(extra));
        }
        Ok(o.string("uid", &s.uid).build())
    })?;
    Ok(o.build())
}

fn resource_attributes(a: &authz::ResourceAttributes) -> Result<Value> {
    let mut o = Obj::new();
    o.string("namespace", &a.namespace)
        .string("verb", &a.verb)
        .string("group", &a.group)
        .string("version", &a.version)
        .string("resource", &a.resource)
        .string("subresource", &a.subresource)
        .string("name", &a.name);
    o.message("fieldSelector", &a.field_selector, |f| {
        let mut o = Obj::new();
        o.string("rawSelector", &f.raw_selector);
        o.messages("requirements", &f.requirements, field_selector_requirement)?;
        Ok(o.build())
    })?;
    o.message("labelSelector", &a.label_selector, |l| {
        let mut o = Obj::new();
        o.string("rawSelector", &l.raw_selector);
        o.messages("requirements", &l.requirements, label_selector_requirement)?;
        Ok(o.build())
    })?;
    Ok(o.build())
}

fn non_resource_attributes(a: &authz::NonResourceAttributes) -> Result<Value> {
    Ok(Obj::new()
        .string("path", &a.path)
        .string("verb", &a.verb)
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn subject_access_review_extra() {
        let r = authz::SubjectAccessReview {
            metadata: None,
            spec: Some(authz::SubjectAccessReviewSpec {
                user: Some("alice".into()),
                extra: [(
                    "scopes".to_owned(),
                    authz::ExtraValue {
                        items: vec!["a".into()],
                    },
                )]
                .into(),
                non_resource_attributes: Some(authz::NonResourceAttributes {
                    path: Some("/healthz".into()),
                    verb: Some("get".into()),
                }),
                ..Default::default()
            }),
            status: Some(Default::default()),
        };
        assert_eq!(
            subject_access_review(&r).unwrap(),
            json!({"spec": {"user": "alice", "extra": {"scopes": ["a"]},
                   "nonResourceAttributes": {"path": "/healthz", "verb": "get"}}})
        );
    }
}
