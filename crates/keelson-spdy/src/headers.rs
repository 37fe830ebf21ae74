//! SPDY/3 header blocks: `count(32)` then `len(32) name len(32) value` pairs (values of one
//! name joined by NUL), zlib-compressed with the SPDY/3 dictionary. Each direction of a
//! connection is one zlib stream: every block is deflated with a sync flush on the same
//! context, so blocks must be encoded and decoded in the order they travel.

use std::sync::OnceLock;

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

/// Header name/value pairs, names lower-case as SPDY/3 sends them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Headers(pub Vec<(String, String)>);

impl Headers {
    /// The first value of `name` (compared without regard to case, as Go's `http.Header`).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

impl<const N: usize> From<[(&str, &str); N]> for Headers {
    fn from(pairs: [(&str, &str); N]) -> Self {
        Headers(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
    }
}

/// A header block that cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum HeaderError {
    /// The zlib stream is corrupt, or wants a dictionary other than SPDY/3's.
    #[error("header block decompression: {0}")]
    Inflate(String),
    /// Compression failed (zlib reports no such case for valid input).
    #[error("header block compression: {0}")]
    Deflate(String),
    /// The decompressed block does not parse.
    #[error("malformed header block: {0}")]
    Malformed(&'static str),
}

/// The names (each with a 32-bit length before it) that start the SPDY/3 dictionary.
const DICTIONARY_WORDS: &[&str] = &[
    "options", "head", "post", "put", "delete", "trace", "accept", "accept-charset", "accept-encoding", "accept-language",
    "accept-ranges", "age", "allow", "authorization", "cache-control", "connection", "content-base", "content-encoding",
    "content-language", "content-length", "content-location", "content-md5", "content-range", "content-type", "date",
    "etag", "expect", "expires", "from", "host", "if-match", "if-modified-since", "if-none-match", "if-range",
    "if-unmodified-since", "last-modified", "location", "max-forwards", "pragma", "proxy-authenticate",
    "proxy-authorization", "range", "referer", "retry-after", "server", "te", "trailer", "transfer-encoding", "upgrade",
    "user-agent", "vary", "via", "warning", "www-authenticate", "method", "get", "status", "200 OK", "version",
    "HTTP/1.1", "url", "public", "set-cookie", "keep-alive", "origin",
];

/// The text that ends the SPDY/3 dictionary, as is.
const DICTIONARY_TAIL: &str = concat!(
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505",
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized",
    "403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service Unavailable",
    "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT",
    "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,",
    "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.",
);

/// The SPDY/3 zlib dictionary (SPDY/3 draft §2.6.10.1), 1,423 bytes, Adler-32 `e3c6a7c2`.
pub fn dictionary() -> &'static [u8] {
    static DICT: OnceLock<Vec<u8>> = OnceLock::new();
    DICT.get_or_init(|| {
        let mut d = Vec::with_capacity(1423);
        for w in DICTIONARY_WORDS {
            d.extend_from_slice(&(w.len() as u32).to_be_bytes());
            d.extend_from_slice(w.as_bytes());
        }
        d.extend_from_slice(DICTIONARY_TAIL.as_bytes());
        d
    })
}

/// The uncompressed form of `headers`.
pub fn encode_block(headers: &Headers) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(headers.0.len() as u32).to_be_bytes());
    for (k, v) in &headers.0 {
        for s in [k.to_ascii_lowercase().as_str(), v.as_str()] {
            out.extend_from_slice(&(s.len() as u32).to_be_bytes());
            out.extend_from_slice(s.as_bytes());
        }
    }
    out
}

/// Parses an uncompressed block; a NUL-joined value becomes one pair per value.
pub fn parse_block(mut b: &[u8]) -> Result<Headers, HeaderError> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Result<&'a [u8], HeaderError> {
        if b.len() < n {
            return Err(HeaderError::Malformed("truncated"));
        }
        let (head, rest) = b.split_at(n);
        *b = rest;
        Ok(head)
    }
    fn len(b: &mut &[u8]) -> Result<usize, HeaderError> {
        let w = take(b, 4)?;
        Ok(u32::from_be_bytes([w[0], w[1], w[2], w[3]]) as usize)
    }
    let count = len(&mut b)?;
    let mut out = Vec::new();
    for _ in 0..count {
        let n = len(&mut b)?;
        let name = std::str::from_utf8(take(&mut b, n)?).map_err(|_| HeaderError::Malformed("name is not UTF-8"))?.to_string();
        if name.is_empty() {
            return Err(HeaderError::Malformed("empty header name"));
        }
        let n = len(&mut b)?;
        let value = std::str::from_utf8(take(&mut b, n)?).map_err(|_| HeaderError::Malformed("value is not UTF-8"))?;
        for v in value.split('\0') {
            out.push((name.clone(), v.to_string()));
        }
    }
    Ok(Headers(out))
}

/// The compressing side of one direction of a connection.
pub struct HeaderEncoder {
    z: Compress,
}

impl Default for HeaderEncoder {
    fn default() -> Self {
        Self::new()
    }
}

impl HeaderEncoder {
    pub fn new() -> Self {
        // Best compression, as Kubernetes' spdystream (so blocks start `78 f9` as kubectl's do).
        let mut z = Compress::new(Compression::best(), true);
        z.set_dictionary(dictionary()).expect("zlib accepts a dictionary before the first deflate");
        Self { z }
    }

    /// The compressed block for `headers`, continuing this direction's zlib stream.
    pub fn encode(&mut self, headers: &Headers) -> Result<Vec<u8>, HeaderError> {
        let input = encode_block(headers);
        let mut out = Vec::with_capacity(input.len() + 64);
        let start = self.z.total_in();
        loop {
            let used = (self.z.total_in() - start) as usize;
            if out.capacity() - out.len() < 64 {
                out.reserve(256);
            }
            self.z.compress_vec(&input[used..], &mut out, FlushCompress::Sync).map_err(|e| HeaderError::Deflate(e.to_string()))?;
            // A sync flush is complete once all input is in and zlib left output room unused.
            if (self.z.total_in() - start) as usize == input.len() && out.len() < out.capacity() {
                return Ok(out);
            }
        }
    }
}

/// The decompressing side of one direction of a connection.
pub struct HeaderDecoder {
    z: Decompress,
}

impl Default for HeaderDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl HeaderDecoder {
    pub fn new() -> Self {
        Self { z: Decompress::new(true) }
    }

    /// Decompresses and parses the next block of this direction's zlib stream.
    pub fn decode(&mut self, block: &[u8]) -> Result<Headers, HeaderError> {
        let mut out = Vec::with_capacity(block.len() * 4 + 64);
        let start = self.z.total_in();
        loop {
            let used = (self.z.total_in() - start) as usize;
            if out.capacity() - out.len() < 64 {
                out.reserve(out.capacity().max(256));
            }
            match self.z.decompress_vec(&block[used..], &mut out, FlushDecompress::Sync) {
                Ok(Status::StreamEnd) => break,
                Ok(_) => {}
                Err(e) if e.needs_dictionary().is_some() => {
                    self.z.set_dictionary(dictionary()).map_err(|e| HeaderError::Inflate(e.to_string()))?;
                    continue;
                }
                Err(e) => return Err(HeaderError::Inflate(e.to_string())),
            }
            let used_now = (self.z.total_in() - start) as usize;
            if used_now == block.len() && out.len() < out.capacity() {
                break;
            }
            if used_now == used && out.len() < out.capacity() {
                return Err(HeaderError::Inflate("no progress on the header block".into()));
            }
        }
        parse_block(&out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adler32(data: &[u8]) -> u32 {
        let (mut a, mut b) = (1u32, 0u32);
        for &x in data {
            a = (a + u32::from(x)) % 65521;
            b = (b + a) % 65521;
        }
        (b << 16) | a
    }

    #[test]
    fn the_dictionary_is_spdy3s() {
        let d = dictionary();
        assert_eq!(d.len(), 1423);
        assert_eq!(&d[..11], b"\0\0\0\x07options");
        assert!(d.ends_with(b",*,enq=0."));
        // The id every SPDY/3 header stream names after `78 f9` (FDICT).
        assert_eq!(adler32(d), 0xe3c6_a7c2);
    }

    #[test]
    fn blocks_parse_and_nul_joined_values_split() {
        let block = encode_block(&Headers::from([("StreamType", "error"), ("port", "80")]));
        assert_eq!(&block[..8], &[0, 0, 0, 2, 0, 0, 0, 10]);
        assert_eq!(parse_block(&block).unwrap(), Headers::from([("streamtype", "error"), ("port", "80")]));
        let mut multi = vec![0, 0, 0, 1, 0, 0, 0, 1, b'a', 0, 0, 0, 3, b'x', 0, b'y'];
        assert_eq!(parse_block(&multi).unwrap(), Headers::from([("a", "x"), ("a", "y")]));
        multi.truncate(10);
        assert!(matches!(parse_block(&multi), Err(HeaderError::Malformed("truncated"))));
    }

    #[test]
    fn one_context_per_direction_across_blocks() {
        let (mut enc, mut dec) = (HeaderEncoder::new(), HeaderDecoder::new());
        let first = Headers::from([("streamtype", "error"), ("port", "8080"), ("requestid", "0")]);
        let second = Headers::from([("streamtype", "data"), ("port", "8080"), ("requestid", "0")]);
        let a = enc.encode(&first).unwrap();
        assert_eq!(&a[..6], &[0x78, 0xf9, 0xe3, 0xc6, 0xa7, 0xc2], "zlib header with the dictionary's id");
        assert!(a.ends_with(&[0, 0, 0xff, 0xff]), "sync-flushed");
        let b = enc.encode(&second).unwrap();
        assert_ne!(&b[..2], &[0x78, 0xf9], "the second block continues the stream");
        assert_eq!(dec.decode(&a).unwrap(), first);
        assert_eq!(dec.decode(&b).unwrap(), second);
        // A fresh decoder cannot read the second block alone.
        assert!(HeaderDecoder::new().decode(&b).is_err());
        // Empty blocks (an empty SYN_REPLY) and large ones work too.
        let big = Headers(vec![("x".into(), "v".repeat(100_000))]);
        assert_eq!(dec.decode(&enc.encode(&Headers::default()).unwrap()).unwrap(), Headers::default());
        assert_eq!(dec.decode(&enc.encode(&big).unwrap()).unwrap(), big);
    }
}
