//! A digest of the store's history for cross-replica corruption checks (as etcd's
//! `HashKV`): replicas that applied the same log hold the same history, so the same
//! revision hashes the same everywhere, and a replica whose bytes differ stands out.
//!
//! Hashed: every history entry (`h/` key and value) with a revision after the compacted
//! one and at most the one asked for, in key order. Entries at or below the compacted
//! revision are left out (compaction removes them progressively, so two healthy replicas
//! can hold different ones for a moment), and so is the current-value index (it moves on
//! with later revisions). FNV-1a over lengths and bytes: a divergence detector, not a
//! cryptographic one.

use crate::backend::{KvBackend, ReadView};
use crate::layout::{self, HIST, META_COMPACTED, META_REV};
use crate::read;
use crate::store::{MvccError, MvccStore};
use crate::types::Revision;

/// The digest of a store's history at `revision`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KvHash {
    pub revision: Revision,
    /// The compacted revision of the view hashed: two digests compare only when equal.
    pub compacted: Revision,
    pub hash: u64,
    /// History entries hashed.
    pub entries: u64,
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

impl<B: KvBackend> MvccStore<B> {
    /// The digest of the history up to `revision` (see the module). `revision` must be
    /// applied here and not compacted.
    pub fn hash_kv(&self, revision: Revision) -> Result<KvHash, MvccError> {
        let view = self.backend().view();
        let current = read::read_rev_meta(&view, META_REV)?;
        let compacted = read::read_rev_meta(&view, META_COMPACTED)?;
        if revision > current {
            return Err(MvccError::FutureRevision { requested: revision, current });
        }
        if revision < compacted {
            return Err(MvccError::Compacted { requested: revision, compacted });
        }
        let (mut hash, mut entries) = (FNV_OFFSET, 0u64);
        let end = layout::bytes_prefix_end(HIST);
        view.scan(HIST, &end, &mut |k, v| {
            let Some((_, rev, _)) = layout::parse_hist_key(k) else { return true };
            if rev > compacted && rev <= revision {
                for part in [k, v] {
                    hash = fnv(hash, &(part.len() as u64).to_le_bytes());
                    hash = fnv(hash, part);
                }
                entries += 1;
            }
            true
        })?;
        Ok(KvHash { revision, compacted, hash, entries })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Command, MemBackend, Op, PutRequest, TxnRequest, WriteBatch};

    fn put(store: &MvccStore<MemBackend>, key: &str, value: &str) {
        let txn = TxnRequest { success: vec![Op::Put(PutRequest { key: key.into(), value: value.into(), prev_kv: false })], ..Default::default() };
        store.apply(&Command::Txn(txn), b"applied").unwrap();
    }

    fn filled() -> MvccStore<MemBackend> {
        let store = MvccStore::open(MemBackend::default()).unwrap();
        for i in 0..20 {
            put(&store, &format!("/k/{}", i % 5), &format!("v{i}"));
        }
        store
    }

    #[test]
    fn the_same_history_hashes_the_same_and_a_flipped_byte_does_not() {
        let (a, b) = (filled(), filled());
        assert_eq!(a.hash_kv(15).unwrap(), b.hash_kv(15).unwrap());
        assert_eq!(a.hash_kv(15).unwrap().entries, 15);
        // Later writes do not change the digest of an earlier revision.
        put(&a, "/k/later", "x");
        assert_eq!(a.hash_kv(15).unwrap(), b.hash_kv(15).unwrap());
        // One byte of one stored entry changed under the store.
        let mut victim = None;
        let view = b.backend().view();
        view.scan(HIST, &layout::bytes_prefix_end(HIST), &mut |k, v| {
            victim = Some((k.to_vec(), v.to_vec()));
            false
        })
        .unwrap();
        drop(view);
        let (k, mut v) = victim.unwrap();
        *v.last_mut().unwrap() ^= 0x01;
        let mut batch = WriteBatch::default();
        batch.put(k, v);
        b.backend().write(batch).unwrap();
        assert_ne!(a.hash_kv(15).unwrap().hash, b.hash_kv(15).unwrap().hash);
    }

    #[test]
    fn future_and_compacted_revisions_are_refused() {
        let store = filled();
        assert!(matches!(store.hash_kv(21), Err(MvccError::FutureRevision { .. })));
        store.apply(&Command::Compact { revision: 10 }, b"applied").unwrap();
        assert!(matches!(store.hash_kv(9), Err(MvccError::Compacted { .. })));
        let after = store.hash_kv(20).unwrap();
        assert_eq!((after.compacted, after.entries), (10, 10), "only the history after the compacted revision");
    }
}
