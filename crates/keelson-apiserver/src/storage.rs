//! Objects in the replicated store: one key per object, JSON values, resourceVersion =
//! the key's mod_revision (never stored inside the value).
//!
//! Key layout: `/registry/<group|core>/<plural>/<namespace>/<name>` for namespaced
//! resources, `/registry/<group|core>/<plural>/<name>` for cluster-scoped ones.

use keelson_client::api::ReadConsistency;
use keelson_client::StoreClient;
use keelson_mvcc::{
    Compare, CompareOp, CompareTarget, DeleteRangeRequest, KeyRange, KeyValue, Op, OpResponse, PutRequest, RangeRequest,
    Revision, TxnRequest,
};
use serde_json::Value;

use crate::catalog::ResourceDef;
use crate::encryption::{encrypts, SecretsCipher};
use crate::error::ApiError;

/// An object as read from the store.
#[derive(Debug)]
pub struct Stored {
    pub obj: Value,
    /// The key's mod_revision: the object's resourceVersion.
    pub rv: Revision,
    /// `obj` serialized, made on first use by a list response. Only lists fill it, and
    /// only for objects they no longer change: the watch cache's shared, immutable ones,
    /// which are then serialized once for every list that returns them.
    json: std::sync::OnceLock<bytes::Bytes>,
}

impl Stored {
    pub fn new(obj: Value, rv: Revision) -> Self {
        Self { obj, rv, json: std::sync::OnceLock::new() }
    }

    /// `obj` as JSON, serialized once.
    pub fn json(&self) -> &bytes::Bytes {
        self.json.get_or_init(|| serde_json::to_vec(&self.obj).expect("JSON values serialize").into())
    }
}

/// A clone may be changed: it does not keep the serialized form.
impl Clone for Stored {
    fn clone(&self) -> Self {
        Self::new(self.obj.clone(), self.rv)
    }
}

/// One page of a list.
pub struct Page {
    pub items: Vec<Stored>,
    /// The store revision the page was read at.
    pub revision: Revision,
    /// The last key read, when more keys follow it.
    pub next_after: Option<Vec<u8>>,
}

/// Object storage over the replicated store.
#[derive(Clone)]
pub struct ObjectStore {
    client: StoreClient,
    cipher: Option<std::sync::Arc<SecretsCipher>>,
}

/// An extra condition of a write: `key` must (still) have this mod_revision (0 = absent).
#[derive(Clone, Debug)]
pub struct Fence {
    pub key: Vec<u8>,
    pub mod_revision: Revision,
}

/// Another key written (Some) or deleted (None) in the same transaction as an object.
pub type SideWrite = (Vec<u8>, Option<Vec<u8>>);

/// A write that did not happen because a condition failed.
#[derive(Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    Written(Revision),
    /// The object's key did not hold the expected revision; it is now at this one
    /// (0 = absent).
    KeyMoved(Revision),
    /// A fence failed.
    Fenced,
}

pub fn object_key(def: &ResourceDef, namespace: Option<&str>, name: &str) -> Vec<u8> {
    match namespace.filter(|_| def.namespaced) {
        Some(ns) => format!("{}{ns}/{name}", def.key_prefix()).into_bytes(),
        None => format!("{}{name}", def.key_prefix()).into_bytes(),
    }
}

/// The key prefix of a list: the whole resource, or one namespace of it.
pub fn list_prefix(def: &ResourceDef, namespace: Option<&str>) -> Vec<u8> {
    match namespace.filter(|_| def.namespaced) {
        Some(ns) => format!("{}{ns}/", def.key_prefix()).into_bytes(),
        None => def.key_prefix().into_bytes(),
    }
}

/// Decodes a stored object that was not encrypted (see [`ObjectStore::decode`]).
pub fn decode(kv: &KeyValue) -> Result<Stored, ApiError> {
    decode_bytes(kv, &kv.value)
}

fn decode_bytes(kv: &KeyValue, value: &[u8]) -> Result<Stored, ApiError> {
    let mut obj: Value = serde_json::from_slice(value)
        .map_err(|e| ApiError::Internal(format!("stored object {} is corrupt: {e}", String::from_utf8_lossy(&kv.key))))?;
    set_resource_version(&mut obj, kv.mod_revision);
    Ok(Stored::new(obj, kv.mod_revision))
}

pub fn set_resource_version(obj: &mut Value, rv: Revision) {
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.insert("resourceVersion".into(), Value::String(rv.to_string()));
    }
}

fn encode(obj: &Value) -> Vec<u8> {
    let mut o = obj.clone();
    if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
    serde_json::to_vec(&o).expect("JSON values always serialize")
}

fn mod_rev_is(key: &[u8], rev: Revision) -> Compare {
    Compare { key: key.to_vec(), op: CompareOp::Equal, target: CompareTarget::ModRevision(rev) }
}

impl ObjectStore {
    pub fn new(client: StoreClient, cipher: Option<std::sync::Arc<SecretsCipher>>) -> Self {
        Self { client, cipher }
    }

    /// Decodes a stored object, decrypting it if it is encrypted.
    pub fn decode(&self, kv: &KeyValue) -> Result<Stored, ApiError> {
        match &self.cipher {
            Some(c) if encrypts(&kv.key) => {
                let plain = c.decrypt(&kv.key, &kv.value).map_err(|e| ApiError::Internal(format!("{}: {e}", String::from_utf8_lossy(&kv.key))))?;
                decode_bytes(kv, &plain)
            }
            _ => decode(kv),
        }
    }

    fn encode(&self, key: &[u8], obj: &Value) -> Vec<u8> {
        let plain = encode(obj);
        match &self.cipher {
            Some(c) if encrypts(key) => c.encrypt(key, &plain),
            _ => plain,
        }
    }

    pub fn client(&self) -> &StoreClient {
        &self.client
    }

    /// Reads one object, linearizably.
    pub async fn get(&self, key: &[u8]) -> Result<Option<Stored>, ApiError> {
        let reply = self.client.get(key).await?;
        reply.response.kvs.first().map(|kv| self.decode(kv)).transpose()
    }

    /// The mod_revision of `key` (0 = absent), linearizably.
    pub async fn mod_revision(&self, key: &[u8]) -> Result<Revision, ApiError> {
        let reply = self.client.get(key).await?;
        Ok(reply.response.kvs.first().map_or(0, |kv| kv.mod_revision))
    }

    /// The current store revision, linearizably.
    pub async fn current_revision(&self) -> Result<Revision, ApiError> {
        let reply = self
            .client
            .range(
                RangeRequest { range: KeyRange::single(b"/registry/".to_vec()), count_only: true, ..Default::default() },
                ReadConsistency::Linearizable,
            )
            .await?;
        Ok(reply.header.revision)
    }

    /// Reads up to `limit` keys (0 = all) under `prefix` after `after` at `revision`
    /// (0 = latest, linearizable unless `serializable`).
    pub async fn list_page(
        &self,
        prefix: &[u8],
        after: Option<&[u8]>,
        revision: Revision,
        limit: u64,
        serializable: bool,
    ) -> Result<Page, ApiError> {
        let end = keelson_mvcc::prefix_end(prefix);
        let start = match after {
            Some(k) => {
                let mut s = k.to_vec();
                s.push(0);
                s
            }
            None => prefix.to_vec(),
        };
        let consistency = if serializable { ReadConsistency::Serializable } else { ReadConsistency::Linearizable };
        let reply = self
            .client
            .range(RangeRequest { range: KeyRange { key: start, range_end: end }, limit, revision, ..Default::default() }, consistency)
            .await?;
        let items = reply.response.kvs.iter().map(|kv| self.decode(kv)).collect::<Result<Vec<_>, _>>()?;
        let next_after = if reply.response.more { reply.response.kvs.last().map(|kv| kv.key.clone()) } else { None };
        let revision = if revision > 0 { revision } else { reply.header.revision };
        Ok(Page { items, revision, next_after })
    }

    /// Writes `obj` at `key` if the key's mod_revision is `expected` (0 = create) and every
    /// fence holds.
    pub async fn put(&self, key: &[u8], obj: &Value, expected: Revision, fences: &[Fence]) -> Result<WriteOutcome, ApiError> {
        self.write(key, Some(obj), expected, fences, &[]).await
    }

    /// Deletes `key` if its mod_revision is `expected`.
    pub async fn delete(&self, key: &[u8], expected: Revision) -> Result<WriteOutcome, ApiError> {
        self.write(key, None, expected, &[], &[]).await
    }

    /// Writes (`Some`) or deletes (`None`) the object at `key` if its mod_revision is
    /// `expected` and every fence holds, together with `side` writes, atomically.
    pub async fn write(
        &self,
        key: &[u8],
        obj: Option<&Value>,
        expected: Revision,
        fences: &[Fence],
        side: &[SideWrite],
    ) -> Result<WriteOutcome, ApiError> {
        let mut compare = vec![mod_rev_is(key, expected)];
        compare.extend(fences.iter().map(|f| mod_rev_is(&f.key, f.mod_revision)));
        let op = |key: &[u8], value: Option<Vec<u8>>| match value {
            Some(value) => Op::Put(PutRequest { key: key.to_vec(), value, prev_kv: false }),
            None => Op::DeleteRange(DeleteRangeRequest { range: KeyRange::single(key.to_vec()), prev_kv: false }),
        };
        let mut success = vec![op(key, obj.map(|o| self.encode(key, o)))];
        success.extend(side.iter().map(|(k, v)| op(k, v.clone())));
        let reply = self
            .client
            .txn(TxnRequest {
                compare,
                success,
                failure: vec![Op::Range(RangeRequest { range: KeyRange::single(key.to_vec()), keys_only: true, ..Default::default() })],
            })
            .await?;
        let r = reply.response;
        if r.succeeded {
            return Ok(WriteOutcome::Written(r.revision));
        }
        let now = match r.responses.first() {
            Some(OpResponse::Range(rr)) => rr.kvs.first().map(|kv| kv.mod_revision).unwrap_or(0),
            _ => 0,
        };
        if now != expected {
            Ok(WriteOutcome::KeyMoved(now))
        } else {
            Ok(WriteOutcome::Fenced)
        }
    }

    /// Deletes every key under `prefix` (namespace cleanup).
    pub async fn delete_prefix(&self, prefix: &[u8]) -> Result<i64, ApiError> {
        let reply = self.client.delete(KeyRange::prefix(prefix.to_vec())).await?;
        Ok(match reply.response.responses.first() {
            Some(OpResponse::DeleteRange(d)) => d.deleted,
            _ => 0,
        })
    }
}
