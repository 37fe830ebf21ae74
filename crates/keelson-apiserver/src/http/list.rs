//! LIST: selectors, pagination at one consistent revision, resourceVersion semantics,
//! and the Table representation.

use std::collections::HashMap;

use base64::Engine;
use keelson_apimachinery::fields::FieldSelector;
use keelson_apimachinery::labels::LabelSelector;
use keelson_apimachinery::table::{self, IncludeObject};
use keelson_mvcc::Revision;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::request::{query_i64, ResourceRequest};
use crate::catalog::ResourceDef;
use crate::error::ApiError;
use crate::registry::Registry;
use crate::storage::{list_prefix, object_key, Stored};

/// The filters of a list or watch.
#[derive(Clone, Debug)]
pub struct Selectors {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Selectors {
    pub fn parse(def: &ResourceDef, q: &HashMap<String, String>) -> Result<Self, ApiError> {
        let labels = LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or(""))
            .map_err(|e| ApiError::BadRequest(format!("unable to parse requirement: {e}")))?;
        let fields = FieldSelector::parse(q.get("fieldSelector").map(String::as_str).unwrap_or(""))
            .map_err(|e| ApiError::BadRequest(format!("invalid field selector: {e}")))?;
        for r in fields.requirements() {
            if !def.supports_field(&r.field) {
                return Err(ApiError::BadRequest(format!("field label not supported: {}", r.field)));
            }
        }
        Ok(Self { labels, fields })
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.labels.matches_object(obj) && self.fields.matches(obj)
    }

    /// The single object name the selectors pin, if any (`metadata.name=x`).
    pub fn pinned_name(&self) -> Option<&str> {
        self.fields.exact_match("metadata.name")
    }
}

#[derive(Serialize, Deserialize)]
struct ContinueToken {
    /// Revision the list is read at.
    rv: Revision,
    /// Last key returned (hex).
    start: String,
}

fn encode_continue(rv: Revision, last_key: &[u8]) -> String {
    let t = ContinueToken { rv, start: last_key.iter().map(|b| format!("{b:02x}")).collect() };
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(serde_json::to_vec(&t).expect("serializable"))
}

fn decode_continue(s: &str) -> Result<(Revision, Vec<u8>), ApiError> {
    let bad = || ApiError::BadRequest("continue key is not valid: malformed token".into());
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(s).map_err(|_| bad())?;
    let t: ContinueToken = serde_json::from_slice(&raw).map_err(|_| bad())?;
    if t.start.len() % 2 != 0 {
        return Err(bad());
    }
    let key = (0..t.start.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&t.start[i..i + 2], 16))
        .collect::<Result<Vec<u8>, _>>()
        .map_err(|_| bad())?;
    Ok((t.rv, key))
}

/// The result of a list.
pub struct Listed {
    pub items: Vec<Stored>,
    pub revision: Revision,
    pub continue_token: Option<String>,
}

/// Runs a list with the request's query: selectors, `limit`/`continue`,
/// `resourceVersion` and `resourceVersionMatch`.
pub async fn list(registry: &Registry, rr: &ResourceRequest, q: &HashMap<String, String>, sel: &Selectors) -> Result<Listed, ApiError> {
    let limit = query_i64(q, "limit")?.filter(|l| *l > 0).map(|l| l as u64);
    let rv = q.get("resourceVersion").map(String::as_str).unwrap_or("");
    let rv_match = q.get("resourceVersionMatch").map(String::as_str).unwrap_or("");
    let prefix = list_prefix(rr.def, rr.namespace.as_deref());
    let (mut revision, mut after, serializable) = match q.get("continue").filter(|c| !c.is_empty()) {
        Some(c) => {
            if !rv.is_empty() {
                return Err(ApiError::BadRequest("specifying resource version is not allowed when using continue".into()));
            }
            let (rev, key) = decode_continue(c)?;
            if !key.starts_with(&prefix) {
                return Err(ApiError::BadRequest("continue key is not valid: it belongs to another list".into()));
            }
            (rev, Some(key), true)
        }
        None => match (rv, rv_match) {
            ("", "") => (0, None, false),
            ("", m) => return Err(ApiError::BadRequest(format!("resourceVersionMatch {m:?} is forbidden unless resourceVersion is provided"))),
            ("0", "" | "NotOlderThan") => (0, None, true),
            (n, "Exact") => (parse_rv(n)?, None, true),
            (n, "" | "NotOlderThan") => {
                parse_rv(n)?;
                (0, None, false)
            }
            (_, m) => return Err(ApiError::BadRequest(format!("unsupported resourceVersionMatch {m:?}: supported values are Exact, NotOlderThan"))),
        },
    };
    // A name pinned by the field selector narrows the read to one key.
    if let Some(name) = sel.pinned_name() {
        if rr.namespace.is_some() || !rr.def.namespaced {
            let key = object_key(rr.def, rr.namespace.as_deref(), name);
            let page = registry.store.list_page(&key, None, revision, 1, serializable).await?;
            let items = page.items.into_iter().filter(|s| s.obj.pointer("/metadata/name").and_then(Value::as_str) == Some(name) && sel.matches(&s.obj)).collect();
            return Ok(Listed { items, revision: page.revision, continue_token: None });
        }
    }
    let mut items = Vec::new();
    loop {
        let want = limit.map(|l| l - items.len() as u64).unwrap_or(0);
        let page = registry
            .store
            .list_page(&prefix, after.as_deref(), revision, want, serializable || revision > 0)
            .await
            .map_err(|e| match e {
                ApiError::Gone(_) if after.is_some() => ApiError::Gone(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.".into(),
                ),
                e => e,
            })?;
        revision = page.revision;
        items.extend(page.items.into_iter().filter(|s| sel.matches(&s.obj)));
        after = page.next_after;
        let full = limit.is_some_and(|l| items.len() as u64 >= l);
        if after.is_none() || full {
            let continue_token = after.map(|k| encode_continue(revision, &k));
            return Ok(Listed { items, revision, continue_token });
        }
    }
}

fn parse_rv(s: &str) -> Result<Revision, ApiError> {
    s.parse::<Revision>()
        .ok()
        .filter(|r| *r >= 0)
        .ok_or_else(|| ApiError::BadRequest(format!("invalid resource version {s:?}")))
}

/// The `<Kind>List` object.
pub fn list_object(def: &ResourceDef, listed: &Listed) -> Value {
    let mut metadata = json!({"resourceVersion": listed.revision.to_string()});
    if let Some(c) = &listed.continue_token {
        metadata["continue"] = json!(c);
    }
    json!({
        "kind": format!("{}List", def.kind),
        "apiVersion": def.api_version(),
        "metadata": metadata,
        "items": listed.items.iter().map(|s| s.obj.clone()).collect::<Vec<_>>(),
    })
}

pub fn now_unix() -> i64 {
    jiff::Timestamp::now().as_second()
}

pub fn include_object(q: &HashMap<String, String>) -> Result<IncludeObject, ApiError> {
    IncludeObject::from_query(q.get("includeObject").map(String::as_str))
        .ok_or_else(|| ApiError::BadRequest("includeObject must be one of None, Metadata, Object".into()))
}

/// A Table of `items`.
pub fn table_object(def: &ResourceDef, items: &[Value], include: IncludeObject, rv: &str, cont: Option<&str>) -> Value {
    table::table(def.printer, items, now_unix(), include, rv, cont, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip_and_reject_garbage() {
        let t = encode_continue(42, b"/registry/core/pods/default/web-1");
        assert_eq!(decode_continue(&t).unwrap(), (42, b"/registry/core/pods/default/web-1".to_vec()));
        assert_eq!(decode_continue("%%%").unwrap_err().code(), 400);
        let odd = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(br#"{"rv":1,"start":"abc"}"#);
        assert!(decode_continue(&odd).is_err());
    }

    #[test]
    fn unsupported_field_selectors_are_rejected() {
        let pods = crate::catalog::lookup("", "v1", "pods").unwrap();
        let q = |f: &str| HashMap::from([("fieldSelector".to_string(), f.to_string())]);
        assert!(Selectors::parse(pods, &q("spec.nodeName=n1,status.phase=Running")).is_ok());
        assert_eq!(Selectors::parse(pods, &q("spec.image=x")).unwrap_err().to_string(), "field label not supported: spec.image");
        let s = Selectors::parse(pods, &q("metadata.name=web")).unwrap();
        assert_eq!(s.pinned_name(), Some("web"));
        let bad = HashMap::from([("labelSelector".to_string(), "app in (web".to_string())]);
        assert_eq!(Selectors::parse(pods, &bad).unwrap_err().code(), 400);
    }
}
