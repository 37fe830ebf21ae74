//! Backend key layout and record encodings of the MVCC store (see `store.rs` for the
//! overview). Everything here is pure and deterministic.

use serde::{Deserialize, Serialize};

use crate::types::{KeyRange, KeyValue, Revision};

/// Current-value index: `c/{enc(key)}` → [`CurrentRecord`].
pub(crate) const CUR: &[u8] = b"c/";
/// History: `h/{enc(key)}{rev BE 8}{sub BE 4}` → [`HistRecord`].
pub(crate) const HIST: &[u8] = b"h/";
/// Revision log: `r/{rev BE 8}{sub BE 4}` → [`RevLogRecord`].
pub(crate) const REVLOG: &[u8] = b"r/";
/// Current store revision, 8 bytes big-endian.
pub(crate) const META_REV: &[u8] = b"m/rev";
/// Compacted revision, 8 bytes big-endian.
pub(crate) const META_COMPACTED: &[u8] = b"m/compacted";
/// Opaque applied bytes of the Raft layer.
pub(crate) const META_APPLIED: &[u8] = b"m/applied";
/// Present while a compaction's physical clean-up is unfinished: [`CompactionMarker`].
pub(crate) const META_COMPACTING: &[u8] = b"m/compacting";
/// Present while an import is unfinished (any value).
pub(crate) const META_IMPORT: &[u8] = b"m/import";
/// Exclusive upper bound of every key the store ever writes (all start with ASCII).
pub(crate) const ALL_END: &[u8] = b"\xff";

/// The value of a key at the current revision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CurrentRecord {
    pub value: Vec<u8>,
    pub create_revision: Revision,
    pub mod_revision: Revision,
    /// Sub-revision of the last mutation (locates its history entry).
    pub mod_sub: u32,
    pub version: i64,
}

impl CurrentRecord {
    pub fn to_kv(&self, key: &[u8]) -> KeyValue {
        KeyValue {
            key: key.to_vec(),
            value: self.value.clone(),
            create_revision: self.create_revision,
            mod_revision: self.mod_revision,
            version: self.version,
        }
    }
}

/// One mutation of one key. `mod_revision` and the sub-revision live in the key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct HistRecord {
    /// True for a deletion (then value is empty, version and create_revision 0).
    pub deleted: bool,
    pub value: Vec<u8>,
    pub create_revision: Revision,
    pub version: i64,
    /// (revision, sub) of the key's previous mutation, if the key was live before.
    pub prev: Option<(Revision, u32)>,
}

impl HistRecord {
    pub fn to_kv(&self, key: &[u8], rev: Revision) -> KeyValue {
        KeyValue {
            key: key.to_vec(),
            value: self.value.clone(),
            create_revision: self.create_revision,
            mod_revision: rev,
            version: self.version,
        }
    }
}

/// One revision-log entry: which key a mutation changed, plus what compaction needs
/// (so that compaction reads nothing but the revision log).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RevLogRecord {
    pub key: Vec<u8>,
    /// Same as the mutation's [`HistRecord::prev`].
    pub prev: Option<(Revision, u32)>,
    /// The mutation is a deletion.
    pub deleted: bool,
}

/// Progress of an unfinished compaction.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CompactionMarker {
    /// The compaction revision (equal to the stored compacted revision).
    pub target: Revision,
    /// Revision-log key from which the clean-up resumes.
    pub resume: Vec<u8>,
}

/// Appends the order-preserving, prefix-free encoding of a user key: each 0x00 becomes
/// 0x00 0xFF, and the key ends with 0x00 0x01. For keys `a < b`, `enc(a) < enc(b)`, and
/// also `enc(a) + anything < enc(b)`, so suffixes (revisions) never disturb key order.
pub(crate) fn encode_key_into(out: &mut Vec<u8>, key: &[u8]) {
    out.reserve(key.len() + 2);
    for &b in key {
        out.push(b);
        if b == 0 {
            out.push(0xff);
        }
    }
    out.extend_from_slice(&[0, 1]);
}

/// Decodes an encoded user key at the start of `enc`; returns it and the bytes consumed.
pub(crate) fn decode_key(enc: &[u8]) -> Option<(Vec<u8>, usize)> {
    let mut out = Vec::with_capacity(enc.len());
    let mut i = 0;
    while i < enc.len() {
        let b = enc[i];
        if b == 0 {
            match enc.get(i + 1) {
                Some(0xff) => out.push(0),
                Some(1) => return Some((out, i + 2)),
                _ => return None,
            }
            i += 2;
        } else {
            out.push(b);
            i += 1;
        }
    }
    None
}

fn prefixed(prefix: &[u8], key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + key.len() + 14);
    out.extend_from_slice(prefix);
    encode_key_into(&mut out, key);
    out
}

pub(crate) fn cur_key(key: &[u8]) -> Vec<u8> {
    prefixed(CUR, key)
}

/// `h/{enc(key)}`: the common prefix of a key's history entries.
pub(crate) fn hist_prefix(key: &[u8]) -> Vec<u8> {
    prefixed(HIST, key)
}

pub(crate) fn hist_key(key: &[u8], rev: Revision, sub: u32) -> Vec<u8> {
    let mut out = hist_prefix(key);
    push_rev(&mut out, rev, sub);
    out
}

pub(crate) fn push_rev(out: &mut Vec<u8>, rev: Revision, sub: u32) {
    out.extend_from_slice(&(rev as u64).to_be_bytes());
    out.extend_from_slice(&sub.to_be_bytes());
}

pub(crate) fn rev_key(rev: Revision, sub: u32) -> Vec<u8> {
    let mut out = REVLOG.to_vec();
    push_rev(&mut out, rev, sub);
    out
}

/// Parses the 12-byte `{rev BE 8}{sub BE 4}` suffix.
pub(crate) fn parse_rev_suffix(b: &[u8]) -> Option<(Revision, u32)> {
    if b.len() != 12 {
        return None;
    }
    let rev = u64::from_be_bytes(b[..8].try_into().ok()?) as Revision;
    let sub = u32::from_be_bytes(b[8..].try_into().ok()?);
    Some((rev, sub))
}

/// Parses `r/{rev}{sub}`.
pub(crate) fn parse_rev_key(k: &[u8]) -> Option<(Revision, u32)> {
    parse_rev_suffix(k.strip_prefix(REVLOG)?)
}

/// Parses `h/{enc(key)}{rev}{sub}` into (user key, rev, sub).
pub(crate) fn parse_hist_key(k: &[u8]) -> Option<(Vec<u8>, Revision, u32)> {
    let rest = k.strip_prefix(HIST)?;
    let (key, used) = decode_key(rest)?;
    let (rev, sub) = parse_rev_suffix(&rest[used..])?;
    Some((key, rev, sub))
}

/// Parses `c/{enc(key)}` into the user key.
pub(crate) fn parse_cur_key(k: &[u8]) -> Option<Vec<u8>> {
    let rest = k.strip_prefix(CUR)?;
    let (key, used) = decode_key(rest)?;
    (used == rest.len()).then_some(key)
}

/// The smallest byte string greater than every string starting with `p`
/// (empty = unbounded, only when `p` is all 0xFF).
pub(crate) fn bytes_prefix_end(p: &[u8]) -> Vec<u8> {
    let mut end = p.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    Vec::new()
}

/// Backend scan bounds `[start, end)` covering every backend key under `prefix`
/// (`c/` or `h/`) whose user key lies in `range`; `None` if the range is empty.
pub(crate) fn scan_bounds(prefix: &[u8], range: &KeyRange) -> Option<(Vec<u8>, Vec<u8>)> {
    let start = prefixed(prefix, &range.key);
    let end = if range.range_end.is_empty() {
        bytes_prefix_end(&start)
    } else if range.range_end.as_slice() == [0] {
        bytes_prefix_end(prefix)
    } else {
        if range.range_end <= range.key {
            return None;
        }
        prefixed(prefix, &range.range_end)
    };
    Some((start, end))
}

pub(crate) fn encode_rev(rev: Revision) -> Vec<u8> {
    rev.to_be_bytes().to_vec()
}

pub(crate) fn decode_rev(b: &[u8]) -> Option<Revision> {
    Some(Revision::from_be_bytes(b.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_encoding_preserves_order_and_is_prefix_free() {
        let keys: Vec<Vec<u8>> = vec![
            vec![],
            vec![0],
            vec![0, 0],
            vec![0, 1],
            vec![0, 0xff],
            vec![1],
            b"a".to_vec(),
            b"a\0".to_vec(),
            b"a\0b".to_vec(),
            b"a\x01".to_vec(),
            b"ab".to_vec(),
            vec![0xff],
            vec![0xff, 0],
        ];
        for a in &keys {
            for b in &keys {
                let ea = hist_key(a, 7, 3);
                let eb = hist_key(b, 1, 0);
                assert_eq!(a.cmp(b), cur_key(a).cmp(&cur_key(b)), "{a:?} vs {b:?}");
                if a != b {
                    assert_eq!(a.cmp(b), ea.cmp(&eb), "suffixed {a:?} vs {b:?}");
                }
            }
            assert_eq!(parse_hist_key(&hist_key(a, 7, 3)), Some((a.clone(), 7, 3)));
            assert_eq!(parse_cur_key(&cur_key(a)), Some(a.clone()));
        }
        assert_eq!(parse_rev_key(&rev_key(9, 2)), Some((9, 2)));
    }

    #[test]
    fn scan_bounds_follow_key_range_rules() {
        let r = KeyRange { key: b"b".to_vec(), range_end: b"a".to_vec() };
        assert!(scan_bounds(CUR, &r).is_none());
        let (s, e) = scan_bounds(CUR, &KeyRange::single("a")).unwrap();
        assert!(s <= cur_key(b"a") && cur_key(b"a") < e);
        assert!(cur_key(b"a\0") >= e);
        let (s, e) = scan_bounds(HIST, &KeyRange { key: vec![], range_end: vec![0] }).unwrap();
        assert!(s <= hist_key(b"", 1, 0) && hist_key(&[0xff; 4], 1, 0) < e);
    }
}
