//! Compact bitset of linearized operations and the memo of visited
//! (linearized set, state) configurations.
//!
//! The set is hashed incrementally (Zobrist hashing: XOR of a fixed random
//! word per operation), so hashing a configuration costs O(1); equality is
//! checked exactly on hash matches. Stored sets are compacted: leading words
//! that are all ones (everything before the oldest pending operation) are
//! replaced by a count, trailing zero words are dropped.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// FxHash-style hasher with a final mix, for small integer and string keys.
#[derive(Default, Clone, Copy)]
pub(crate) struct FastHasher(u64);

impl Hasher for FastHasher {
    fn finish(&self) -> u64 {
        // The multiply only carries entropy upwards; the final mix spreads
        // it to the low bits that pick hash buckets.
        mix64(self.0)
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut buf = [0u8; 8];
            buf[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(buf));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.write_u64(u64::from(i));
    }

    fn write_u32(&mut self, i: u32) {
        self.write_u64(u64::from(i));
    }

    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
}

/// Build-hasher for [`FastHasher`].
pub(crate) type FastBuild = BuildHasherDefault<FastHasher>;

/// Hasher for keys that already are uniformly distributed 64-bit hashes.
#[derive(Default, Clone, Copy)]
pub(crate) struct PassHasher(u64);

impl Hasher for PassHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, i: u64) {
        self.0 = i;
    }
}

/// SplitMix64: a fixed pseudo-random 64-bit value for `x`.
pub(crate) fn mix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Set of linearized operations with its incremental hash.
pub(crate) struct Bitset {
    words: Vec<u64>,
    hash: u64,
    /// One past the highest word that was ever non-zero.
    high: usize,
}

impl Bitset {
    pub(crate) fn new(len: usize) -> Bitset {
        Bitset {
            words: vec![0; len.div_ceil(64).max(1)],
            hash: 0,
            high: 0,
        }
    }

    fn zobrist(i: usize) -> u64 {
        mix64(i as u64 ^ 0x5bd1_e995_0000_0000)
    }

    pub(crate) fn set(&mut self, i: usize) {
        self.words[i / 64] |= 1 << (i % 64);
        self.hash ^= Self::zobrist(i);
        self.high = self.high.max(i / 64 + 1);
    }

    pub(crate) fn clear(&mut self, i: usize) {
        self.words[i / 64] &= !(1 << (i % 64));
        self.hash ^= Self::zobrist(i);
    }

    /// Canonical compact view: (number of leading all-ones words, the words
    /// after them up to the last non-zero one). `first_unset` must be a
    /// lower bound of the first cleared bit (used to skip the prefix fast).
    fn compact(&self, first_unset: usize) -> (usize, &[u64]) {
        let mut lead = first_unset / 64;
        while lead < self.high && self.words[lead] == u64::MAX {
            lead += 1;
        }
        let mut end = self.high;
        while end > lead && self.words[end - 1] == 0 {
            end -= 1;
        }
        (lead, &self.words[lead..end])
    }
}

struct Entry {
    state: u32,
    lead: u32,
    offset: usize,
    len: u32,
    /// Next entry with the same hash, or `u32::MAX`.
    next: u32,
}

/// Memo of visited (linearized set, state) configurations.
#[derive(Default)]
pub(crate) struct Cache {
    heads: HashMap<u64, u32, BuildHasherDefault<PassHasher>>,
    entries: Vec<Entry>,
    words: Vec<u64>,
}

impl Cache {
    /// Number of configurations stored.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Inserts (`set`, `state`) unless already present; returns true if it
    /// was new. `first_unset` is a lower bound of the set's first cleared bit.
    pub(crate) fn insert(&mut self, set: &Bitset, first_unset: usize, state: u32) -> bool {
        let key = set.hash ^ mix64(u64::from(state));
        let (lead, words) = set.compact(first_unset);
        let mut cursor = self.heads.get(&key).copied().unwrap_or(u32::MAX);
        let chain = cursor;
        while cursor != u32::MAX {
            let e = &self.entries[cursor as usize];
            if e.state == state
                && e.lead as usize == lead
                && e.len as usize == words.len()
                && &self.words[e.offset..e.offset + e.len as usize] == words
            {
                return false;
            }
            cursor = e.next;
        }
        let offset = self.words.len();
        self.words.extend_from_slice(words);
        self.entries.push(Entry {
            state,
            lead: lead as u32,
            offset,
            len: words.len() as u32,
            next: chain,
        });
        self.heads.insert(key, (self.entries.len() - 1) as u32);
        true
    }
}
