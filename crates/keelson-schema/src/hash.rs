//! A small, stable content digest for OpenAPI document URLs (`?hash=...`).
//!
//! Clients only compare these strings to decide whether a cached document is
//! stale, so a 64-bit FNV-1a digest is enough.

const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// 64-bit FNV-1a of `bytes`.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(FNV_OFFSET_BASIS, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(FNV_PRIME)
    })
}

/// [`fnv1a64`] as 16 upper-case hex digits.
pub fn content_hash(bytes: &[u8]) -> String {
    format!("{:016X}", fnv1a64(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vectors() {
        // Reference values of the FNV-1a 64-bit function.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x85944171f73967e8);
    }

    #[test]
    fn hex_form_is_fixed_width_and_content_sensitive() {
        assert_eq!(content_hash(b""), "CBF29CE484222325");
        assert_eq!(content_hash(b"a").len(), 16);
        assert_ne!(content_hash(b"{\"a\":1}"), content_hash(b"{\"a\":2}"));
    }
}
