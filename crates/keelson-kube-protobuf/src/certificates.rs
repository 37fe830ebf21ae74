//! `certificates.k8s.io/v1` `CertificateSigningRequest`.
//!
//! Unlike the other kinds, `status` (conditions and the issued
//! certificate) is translated: `kubectl certificate approve|deny` sends the
//! whole object with the new condition to the `/approval` subresource.
//! Conversion failures are [`crate::json::ConvertError`]s; this module adds
//! no error type of its own.

use k8s_pb::api::certificates::v1 as certs;
use serde_json::{Map, Value};

use crate::json::{Obj, Result};
use crate::meta::object_meta;

/// `CertificateSigningRequest` with `spec` and `status`.
pub fn certificate_signing_request(c: &certs::CertificateSigningRequest) -> Result<Value> {
    let mut o = Obj::new();
    o.message("metadata", &c.metadata, object_meta)?;
    o.message("spec", &c.spec, |s| {
        let mut o = Obj::new();
        o.bytes_kept("request", &s.request)
            .string_kept("signerName", &s.signer_name)
            .int_kept("expirationSeconds", s.expiration_seconds)
            .strings("usages", &s.usages)
            .string("username", &s.username)
            .string("uid", &s.uid)
            .strings("groups", &s.groups);
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
        Ok(o.build())
    })?;
    o.message("status", &c.status, |s| {
        let mut o = Obj::new();
        o.messages("conditions", &s.conditions, |c| {
            let mut o = Obj::new();
            o.string_kept("type", &c.r#type)
                .string_kept("status", &c.status)
                .string("reason", &c.reason)
                .string("message", &c.message);
            o.time("lastUpdateTime", &c.last_update_time)?;
            o.time("lastTransitionTime", &c.last_transition_time)?;
            Ok(o.build())
        })?;
        Ok(o.bytes("certificate", &s.certificate).build())
    })?;
    Ok(o.build())
}
