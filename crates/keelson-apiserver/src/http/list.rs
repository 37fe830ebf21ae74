//! LIST: selectors, pagination at one consistent revision, resourceVersion semantics
//! (served from the watch cache where Kubernetes' cacher serves them), and the list
//! representations.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

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
use crate::watch_cache::{FeedPage, WatchCache};

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

/// The result of a list. The items are shared with the watch cache when it served the
/// list: render them, do not copy them.
#[derive(Clone)]
pub struct Listed {
    pub items: Vec<Arc<Stored>>,
    pub revision: Revision,
    pub continue_token: Option<String>,
}

/// Longest a list waits for the watch cache to reach the revision it needs before it is
/// served from the store (Kubernetes' cacher waits 3 s too).
pub const CACHE_WAIT_BOUND: Duration = Duration::from_secs(3);

/// Which state a list reads, by its `resourceVersion`, `resourceVersionMatch` and
/// `continue` parameters.
#[derive(Debug, PartialEq, Eq)]
enum ListRead {
    /// No resourceVersion: a revision at least the store's current one at the request's
    /// start (a consistent read).
    Consistent,
    /// `resourceVersion=0`: any revision this server has.
    Any,
    /// `resourceVersion=N` (NotOlderThan, or no match given): a revision ≥ N.
    NotOlderThan(Revision),
    /// `resourceVersionMatch=Exact`: exactly revision N, from the store's MVCC history.
    Exact(Revision),
    /// A continue token: the first page's revision after its last key, from the store.
    Continue { revision: Revision, after: Vec<u8> },
}

impl ListRead {
    fn from_query(q: &HashMap<String, String>) -> Result<Self, ApiError> {
        let rv = q.get("resourceVersion").map(String::as_str).unwrap_or("");
        let rv_match = q.get("resourceVersionMatch").map(String::as_str).unwrap_or("");
        if let Some(c) = q.get("continue").filter(|c| !c.is_empty()) {
            if !rv.is_empty() {
                return Err(ApiError::BadRequest("specifying resource version is not allowed when using continue".into()));
            }
            let (revision, after) = decode_continue(c)?;
            return Ok(ListRead::Continue { revision, after });
        }
        match (rv, rv_match) {
            ("", "") => Ok(ListRead::Consistent),
            ("", m) => Err(ApiError::BadRequest(format!("resourceVersionMatch {m:?} is forbidden unless resourceVersion is provided"))),
            ("0", "" | "NotOlderThan") => Ok(ListRead::Any),
            (n, "Exact") => Ok(ListRead::Exact(parse_rv(n)?)),
            (n, "" | "NotOlderThan") => Ok(ListRead::NotOlderThan(parse_rv(n)?)),
            (_, m) => Err(ApiError::BadRequest(format!("unsupported resourceVersionMatch {m:?}: supported values are Exact, NotOlderThan"))),
        }
    }

    /// The store read of this list: (revision, start after this key, serializable).
    fn store_read(self) -> (Revision, Option<Vec<u8>>, bool) {
        match self {
            ListRead::Consistent | ListRead::NotOlderThan(_) => (0, None, false),
            ListRead::Any => (0, None, true),
            ListRead::Exact(n) => (n, None, true),
            ListRead::Continue { revision, after } => (revision, Some(after), true),
        }
    }
}

/// Runs a list with the request's query: selectors, `limit`/`continue`,
/// `resourceVersion` and `resourceVersionMatch`. Lists that need no exact past revision
/// are served from the watch cache when one is given and it has reached the revision
/// they need; the others, and those the cache cannot serve in time, read the store.
pub async fn list(registry: &Registry, cache: Option<&Arc<WatchCache>>, rr: &ResourceRequest, q: &HashMap<String, String>, sel: &Selectors) -> Result<Listed, ApiError> {
    let limit = query_i64(q, "limit")?.filter(|l| *l > 0).map(|l| l as u64);
    let read = ListRead::from_query(q)?;
    let prefix = list_prefix(rr.def, rr.namespace.as_deref());
    if let ListRead::Continue { after, .. } = &read {
        if !after.starts_with(&prefix) {
            return Err(ApiError::BadRequest("continue key is not valid: it belongs to another list".into()));
        }
    }
    // A name pinned by the field selector narrows the read to one key, in the store.
    let pinned = sel.pinned_name().filter(|_| rr.namespace.is_some() || !rr.def.namespaced);
    if let (Some(cache), None) = (cache, pinned) {
        let needed = match read {
            ListRead::Consistent => Some(registry.store.current_revision().await?),
            ListRead::Any => Some(0),
            ListRead::NotOlderThan(n) => Some(n),
            ListRead::Exact(_) | ListRead::Continue { .. } => None,
        };
        if let Some(needed) = needed {
            if let Some(listed) = list_from_cache(cache, rr, &prefix, needed, limit, sel).await {
                return Ok(listed);
            }
        }
    }
    let (revision, after, serializable) = read.store_read();
    if let Some(name) = pinned {
        let key = object_key(rr.def, rr.namespace.as_deref(), name);
        let page = registry.store.list_page(&key, None, revision, 1, serializable).await?;
        let items = page
            .items
            .into_iter()
            .filter(|s| s.obj.pointer("/metadata/name").and_then(Value::as_str) == Some(name) && sel.matches(&s.obj))
            .map(Arc::new)
            .collect();
        return Ok(Listed { items, revision: page.revision, continue_token: None });
    }
    list_from_store(registry, &prefix, revision, after, serializable, limit, sel).await
}

/// The list from the watch cache once its feed has reached `needed`; `None` when the
/// cache cannot serve it (feed not started or stopped, or not there within
/// [`CACHE_WAIT_BOUND`]).
async fn list_from_cache(cache: &Arc<WatchCache>, rr: &ResourceRequest, prefix: &[u8], needed: Revision, limit: Option<u64>, sel: &Selectors) -> Option<Listed> {
    let feed = match cache.feed(rr.def.key_prefix().as_bytes()).await {
        Ok(f) => f,
        Err(e) => {
            tracing::debug!(error = %e, "watch cache unavailable; listing from the store");
            return None;
        }
    };
    let served = match feed.wait_reached(needed, CACHE_WAIT_BOUND).await {
        true => feed.page(prefix, None, limit.unwrap_or(0) as usize, |o| sel.matches(o)),
        false => None,
    };
    let Some(FeedPage { page, revision }) = served else {
        tracing::debug!(needed, "watch cache not caught up; listing from the store");
        cache.metrics().list_fell_back(feed.resource());
        return None;
    };
    cache.metrics().list_served(feed.resource());
    let continue_token = page.next_after.map(|k| encode_continue(revision, &k));
    Some(Listed { items: page.items, revision, continue_token })
}

/// The list from the store at `revision` (0 = latest), after the key `after`.
async fn list_from_store(
    registry: &Registry,
    prefix: &[u8],
    mut revision: Revision,
    mut after: Option<Vec<u8>>,
    serializable: bool,
    limit: Option<u64>,
    sel: &Selectors,
) -> Result<Listed, ApiError> {
    let mut items = Vec::new();
    loop {
        let want = limit.map(|l| l - items.len() as u64).unwrap_or(0);
        let page = registry
            .store
            .list_page(prefix, after.as_deref(), revision, want, serializable || revision > 0)
            .await
            .map_err(|e| match e {
                ApiError::Gone(_) if after.is_some() => ApiError::Gone(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.".into(),
                ),
                e => e,
            })?;
        revision = page.revision;
        items.extend(page.items.into_iter().filter(|s| sel.matches(&s.obj)).map(Arc::new));
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

/// A list response's body, with the keys in the order `serde_json::Value` writes them
/// (sorted), so the bytes are what the list as a `Value` would serialize to.
#[derive(Serialize)]
struct ListBody<'a, T: Serialize> {
    #[serde(rename = "apiVersion")]
    api_version: &'a str,
    items: T,
    kind: &'a str,
    metadata: Value,
}

fn list_metadata(listed: &Listed) -> Value {
    let mut metadata = json!({"resourceVersion": listed.revision.to_string()});
    if let Some(c) = &listed.continue_token {
        metadata["continue"] = json!(c);
    }
    metadata
}

/// The `<Kind>List` object, serialized. Each item's JSON is its own serialized form
/// ([`Stored::json`]): a watch cache object listed again is not serialized again.
pub fn list_body(def: &ResourceDef, listed: &Listed) -> Vec<u8> {
    let total: usize = listed.items.iter().map(|s| s.json().len() + 1).sum();
    let mut out = Vec::with_capacity(total + 256);
    for piece in ListPieces::new(def, listed.clone()) {
        out.extend_from_slice(&piece);
    }
    out
}

/// About how large each piece of a streamed list body is.
const LIST_PIECE_BYTES: usize = 64 << 10;

/// [`list_body`] in pieces of about [`LIST_PIECE_BYTES`], made as they are asked for: a
/// list response is written as it goes, so a server holds one piece of each list it is
/// sending rather than the whole body (tens of MiB for thousands of pods).
pub struct ListPieces {
    head: Option<Vec<u8>>,
    items: std::vec::IntoIter<Arc<Stored>>,
    first: bool,
    tail: Option<Vec<u8>>,
}

impl ListPieces {
    pub fn new(def: &ResourceDef, listed: Listed) -> Self {
        fn to_json<T: Serialize + ?Sized>(v: &T) -> Vec<u8> {
            serde_json::to_vec(v).expect("JSON values serialize")
        }
        let (api_version, kind) = (def.api_version(), format!("{}List", def.kind));
        let mut head = b"{\"apiVersion\":".to_vec();
        head.extend_from_slice(&to_json(api_version.as_str()));
        head.extend_from_slice(b",\"items\":[");
        let mut tail = b"],\"kind\":".to_vec();
        tail.extend_from_slice(&to_json(kind.as_str()));
        tail.extend_from_slice(b",\"metadata\":");
        tail.extend_from_slice(&to_json(&list_metadata(&listed)));
        tail.push(b'}');
        ListPieces { head: Some(head), items: listed.items.into_iter(), first: true, tail: Some(tail) }
    }
}

impl Iterator for ListPieces {
    type Item = bytes::Bytes;

    fn next(&mut self) -> Option<bytes::Bytes> {
        let mut piece = match self.head.take() {
            Some(head) => head,
            None if self.tail.is_none() => return None,
            None => Vec::with_capacity(LIST_PIECE_BYTES + 4096),
        };
        while piece.len() < LIST_PIECE_BYTES {
            let Some(item) = self.items.next() else {
                piece.extend_from_slice(&self.tail.take().expect("the tail goes last"));
                break;
            };
            if !std::mem::take(&mut self.first) {
                piece.push(b',');
            }
            piece.extend_from_slice(item.json());
        }
        Some(piece.into())
    }
}

/// The `PartialObjectMetadataList` of a list, serialized.
pub fn metadata_list_body(listed: &Listed) -> Vec<u8> {
    let items: Vec<Value> = listed.items.iter().map(|s| super::negotiate::partial_metadata(&s.obj)).collect();
    let body = ListBody { api_version: "meta.k8s.io/v1", items, kind: "PartialObjectMetadataList", metadata: list_metadata(listed) };
    serde_json::to_vec(&body).expect("JSON values serialize")
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

    fn read(pairs: &[(&str, &str)]) -> Result<ListRead, ApiError> {
        ListRead::from_query(&pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
    }

    #[test]
    fn resource_versions_choose_the_read() {
        assert_eq!(read(&[]).unwrap(), ListRead::Consistent);
        assert_eq!(read(&[("resourceVersion", "0")]).unwrap(), ListRead::Any);
        assert_eq!(read(&[("resourceVersion", "0"), ("resourceVersionMatch", "NotOlderThan")]).unwrap(), ListRead::Any);
        assert_eq!(read(&[("resourceVersion", "17")]).unwrap(), ListRead::NotOlderThan(17));
        assert_eq!(read(&[("resourceVersion", "17"), ("resourceVersionMatch", "NotOlderThan")]).unwrap(), ListRead::NotOlderThan(17));
        assert_eq!(read(&[("resourceVersion", "17"), ("resourceVersionMatch", "Exact")]).unwrap(), ListRead::Exact(17));
        let token = encode_continue(42, b"/registry/core/pods/default/web-1");
        assert_eq!(read(&[("continue", &token)]).unwrap(), ListRead::Continue { revision: 42, after: b"/registry/core/pods/default/web-1".to_vec() });
        assert_eq!(read(&[("continue", &token), ("resourceVersion", "42")]).unwrap_err().code(), 400);
        assert_eq!(read(&[("resourceVersionMatch", "Exact")]).unwrap_err().code(), 400);
        assert_eq!(read(&[("resourceVersion", "1"), ("resourceVersionMatch", "Newer")]).unwrap_err().code(), 400);
        assert_eq!(read(&[("resourceVersion", "x")]).unwrap_err().code(), 400);
    }

    #[test]
    fn only_exact_and_continued_lists_read_a_past_revision_of_the_store() {
        assert_eq!(ListRead::Exact(5).store_read(), (5, None, true));
        assert_eq!(ListRead::Continue { revision: 5, after: b"k".to_vec() }.store_read(), (5, Some(b"k".to_vec()), true));
        assert_eq!(ListRead::Consistent.store_read(), (0, None, false));
        assert_eq!(ListRead::NotOlderThan(5).store_read(), (0, None, false));
        assert_eq!(ListRead::Any.store_read(), (0, None, true));
    }

    #[test]
    fn a_streamed_list_is_the_whole_body_in_bounded_pieces() {
        let pods = crate::catalog::lookup("", "v1", "pods").unwrap();
        let items: Vec<Arc<Stored>> = (0..3000i64).map(|i| Arc::new(Stored::new(json!({"metadata": {"name": format!("pod-{i}"), "labels": {"n": "x".repeat(i as usize % 200)}}}), i))).collect();
        for n in [0, 1, 3000] {
            let listed = Listed { items: items[..n].to_vec(), revision: 7, continue_token: None };
            let pieces: Vec<bytes::Bytes> = ListPieces::new(pods, listed.clone()).collect();
            assert_eq!(pieces.concat(), list_body(pods, &listed));
            let expected = json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "7"}, "items": items[..n].iter().map(|s| s.obj.clone()).collect::<Vec<_>>()});
            assert_eq!(serde_json::from_slice::<Value>(&pieces.concat()).unwrap(), expected);
            let largest_item = items[..n].iter().map(|s| s.json().len()).max().unwrap_or(0);
            assert!(pieces.iter().all(|p| p.len() <= LIST_PIECE_BYTES + largest_item + 256), "a piece of {n} items is too large");
            if n == 3000 {
                assert!(pieces.len() > 3, "{} pieces", pieces.len());
            } else {
                assert_eq!(pieces.len(), 1);
            }
        }
    }

    #[test]
    fn list_bodies_render_as_the_value_would() {
        let pods = crate::catalog::lookup("", "v1", "pods").unwrap();
        let item = Arc::new(Stored::new(json!({"metadata": {"name": "a", "resourceVersion": "3", "labels": {"x": "y"}, "annotations": {"q": "a \"quoted\" ü"}}, "spec": {}}), 3));
        let listed = Listed { items: vec![item.clone()], revision: 9, continue_token: Some("tok".into()) };
        let expected = json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "9", "continue": "tok"}, "items": [item.obj.clone()]});
        assert_eq!(list_body(pods, &listed), serde_json::to_vec(&expected).unwrap());
        let meta: Value = serde_json::from_slice(&metadata_list_body(&listed)).unwrap();
        assert_eq!(meta["kind"], "PartialObjectMetadataList");
        assert_eq!(meta["items"][0]["metadata"]["name"], "a");
        assert_eq!(meta["metadata"]["continue"], "tok");
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
