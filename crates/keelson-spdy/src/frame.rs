//! SPDY/3.1 frames as bytes: pure encode and decode, no I/O.
//!
//! A control frame is `1 | version(15) | type(16) | flags(8) | length(24) | payload`; a data
//! frame is `0 | stream id(31) | flags(8) | length(24) | payload`. Header blocks stay
//! compressed here: their zlib context spans the whole connection, so the session
//! (de)compresses them in order ([`crate::headers`]).

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// The protocol version in every control frame.
pub const VERSION: u16 = 3;
/// Last frame of its sender on the stream (half-close).
pub const FLAG_FIN: u8 = 0x01;
/// SYN_STREAM: the receiver may not send on the stream.
pub const FLAG_UNIDIRECTIONAL: u8 = 0x02;
/// The largest payload a frame can carry (24-bit length).
pub const MAX_PAYLOAD: usize = 0x00ff_ffff;

/// Control frame types.
pub mod kind {
    pub const SYN_STREAM: u16 = 1;
    pub const SYN_REPLY: u16 = 2;
    pub const RST_STREAM: u16 = 3;
    pub const SETTINGS: u16 = 4;
    pub const PING: u16 = 6;
    pub const GOAWAY: u16 = 7;
    pub const HEADERS: u16 = 8;
    pub const WINDOW_UPDATE: u16 = 9;
}

/// RST_STREAM status codes.
pub mod rst {
    pub const PROTOCOL_ERROR: u32 = 1;
    pub const INVALID_STREAM: u32 = 2;
    pub const REFUSED_STREAM: u32 = 3;
    pub const CANCEL: u32 = 5;
    pub const INTERNAL_ERROR: u32 = 6;
    pub const STREAM_IN_USE: u32 = 8;
    pub const STREAM_ALREADY_CLOSED: u32 = 9;
}

/// One frame. `headers` fields hold the compressed header block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    Data { stream_id: u32, flags: u8, data: Bytes },
    SynStream { stream_id: u32, associated_to: u32, priority: u8, slot: u8, flags: u8, headers: Bytes },
    SynReply { stream_id: u32, flags: u8, headers: Bytes },
    RstStream { stream_id: u32, status: u32 },
    /// `(flags, id, value)` entries.
    Settings { flags: u8, entries: Vec<(u8, u32, u32)> },
    Ping { id: u32 },
    GoAway { last_good_stream_id: u32, status: u32 },
    Headers { stream_id: u32, flags: u8, headers: Bytes },
    WindowUpdate { stream_id: u32, delta: u32 },
    /// A control frame of a type this codec does not know (the spec says: ignore it).
    Unknown { kind: u16, flags: u8, payload: Bytes },
}

/// A frame that cannot be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    /// A control frame of another SPDY version.
    #[error("unsupported SPDY version {0}")]
    Version(u16),
    /// A control frame whose payload is shorter than its type needs.
    #[error("control frame type {kind} with a {len}-byte payload is too short")]
    Short { kind: u16, len: usize },
    /// A SETTINGS frame whose entry count does not match its length.
    #[error("SETTINGS frame announces {count} entries in {len} bytes")]
    Settings { count: u32, len: usize },
}

const HEADER_LEN: usize = 8;
const STREAM_ID_MASK: u32 = 0x7fff_ffff;

/// Takes one whole frame off the front of `buf`; `None` (nothing consumed) until one is there.
pub fn decode(buf: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
    if buf.len() < HEADER_LEN {
        return Ok(None);
    }
    let len = (u32::from_be_bytes([0, buf[5], buf[6], buf[7]])) as usize;
    if buf.len() < HEADER_LEN + len {
        return Ok(None);
    }
    let head = buf.split_to(HEADER_LEN);
    let mut p = buf.split_to(len).freeze();
    let word = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
    let flags = head[4];
    if word & 0x8000_0000 == 0 {
        return Ok(Some(Frame::Data { stream_id: word & STREAM_ID_MASK, flags, data: p }));
    }
    let version = ((word >> 16) & 0x7fff) as u16;
    let kind = (word & 0xffff) as u16;
    if version != VERSION {
        return Err(FrameError::Version(version));
    }
    let need = |n: usize| if len < n { Err(FrameError::Short { kind, len }) } else { Ok(()) };
    let frame = match kind {
        kind::SYN_STREAM => {
            need(10)?;
            let stream_id = p.get_u32() & STREAM_ID_MASK;
            let associated_to = p.get_u32() & STREAM_ID_MASK;
            let priority = p.get_u8() >> 5;
            let slot = p.get_u8();
            Frame::SynStream { stream_id, associated_to, priority, slot, flags, headers: p }
        }
        kind::SYN_REPLY => {
            need(4)?;
            Frame::SynReply { stream_id: p.get_u32() & STREAM_ID_MASK, flags, headers: p }
        }
        kind::HEADERS => {
            need(4)?;
            Frame::Headers { stream_id: p.get_u32() & STREAM_ID_MASK, flags, headers: p }
        }
        kind::RST_STREAM => {
            need(8)?;
            Frame::RstStream { stream_id: p.get_u32() & STREAM_ID_MASK, status: p.get_u32() }
        }
        kind::SETTINGS => {
            need(4)?;
            let count = p.get_u32();
            if (count as usize).checked_mul(8) != Some(len - 4) {
                return Err(FrameError::Settings { count, len });
            }
            let entries = (0..count)
                .map(|_| {
                    let w = p.get_u32();
                    ((w >> 24) as u8, w & 0x00ff_ffff, p.get_u32())
                })
                .collect();
            Frame::Settings { flags, entries }
        }
        kind::PING => {
            need(4)?;
            Frame::Ping { id: p.get_u32() }
        }
        kind::GOAWAY => {
            need(4)?;
            let last_good_stream_id = p.get_u32() & STREAM_ID_MASK;
            // SPDY/2 GOAWAY had no status; be lenient.
            let status = if p.remaining() >= 4 { p.get_u32() } else { 0 };
            Frame::GoAway { last_good_stream_id, status }
        }
        kind::WINDOW_UPDATE => {
            need(8)?;
            Frame::WindowUpdate { stream_id: p.get_u32() & STREAM_ID_MASK, delta: p.get_u32() & STREAM_ID_MASK }
        }
        _ => Frame::Unknown { kind, flags, payload: p },
    };
    Ok(Some(frame))
}

fn control(out: &mut BytesMut, kind: u16, flags: u8, len: usize) {
    out.put_u32(0x8000_0000 | (u32::from(VERSION) << 16) | u32::from(kind));
    out.put_u32((u32::from(flags) << 24) | (len as u32 & 0x00ff_ffff));
}

/// Appends `frame` to `out`. Payloads longer than [`MAX_PAYLOAD`] are the caller's error
/// (the session splits data before it gets here).
pub fn encode(frame: &Frame, out: &mut BytesMut) {
    match frame {
        Frame::Data { stream_id, flags, data } => {
            out.put_u32(stream_id & STREAM_ID_MASK);
            out.put_u32((u32::from(*flags) << 24) | (data.len() as u32 & 0x00ff_ffff));
            out.extend_from_slice(data);
        }
        Frame::SynStream { stream_id, associated_to, priority, slot, flags, headers } => {
            control(out, kind::SYN_STREAM, *flags, 10 + headers.len());
            out.put_u32(stream_id & STREAM_ID_MASK);
            out.put_u32(associated_to & STREAM_ID_MASK);
            out.put_u8((priority & 0x07) << 5);
            out.put_u8(*slot);
            out.extend_from_slice(headers);
        }
        Frame::SynReply { stream_id, flags, headers } => {
            control(out, kind::SYN_REPLY, *flags, 4 + headers.len());
            out.put_u32(stream_id & STREAM_ID_MASK);
            out.extend_from_slice(headers);
        }
        Frame::Headers { stream_id, flags, headers } => {
            control(out, kind::HEADERS, *flags, 4 + headers.len());
            out.put_u32(stream_id & STREAM_ID_MASK);
            out.extend_from_slice(headers);
        }
        Frame::RstStream { stream_id, status } => {
            control(out, kind::RST_STREAM, 0, 8);
            out.put_u32(stream_id & STREAM_ID_MASK);
            out.put_u32(*status);
        }
        Frame::Settings { flags, entries } => {
            control(out, kind::SETTINGS, *flags, 4 + 8 * entries.len());
            out.put_u32(entries.len() as u32);
            for (f, id, value) in entries {
                out.put_u32((u32::from(*f) << 24) | (id & 0x00ff_ffff));
                out.put_u32(*value);
            }
        }
        Frame::Ping { id } => {
            control(out, kind::PING, 0, 4);
            out.put_u32(*id);
        }
        Frame::GoAway { last_good_stream_id, status } => {
            control(out, kind::GOAWAY, 0, 8);
            out.put_u32(last_good_stream_id & STREAM_ID_MASK);
            out.put_u32(*status);
        }
        Frame::WindowUpdate { stream_id, delta } => {
            control(out, kind::WINDOW_UPDATE, 0, 8);
            out.put_u32(stream_id & STREAM_ID_MASK);
            out.put_u32(delta & STREAM_ID_MASK);
        }
        Frame::Unknown { kind, flags, payload } => {
            control(out, *kind, *flags, payload.len());
            out.extend_from_slice(payload);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(frame: &Frame) -> Vec<u8> {
        let mut out = BytesMut::new();
        encode(frame, &mut out);
        out.to_vec()
    }

    #[test]
    fn every_frame_type_round_trips_and_has_its_wire_form() {
        let h = Bytes::from_static(b"\x78\xf9zz");
        let table: Vec<(Frame, Vec<u8>)> = vec![
            (Frame::Data { stream_id: 5, flags: FLAG_FIN, data: Bytes::from_static(b"hi") }, vec![0, 0, 0, 5, 1, 0, 0, 2, b'h', b'i']),
            (
                Frame::SynStream { stream_id: 1, associated_to: 0, priority: 0, slot: 0, flags: 0, headers: h.clone() },
                vec![0x80, 3, 0, 1, 0, 0, 0, 14, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0x78, 0xf9, b'z', b'z'],
            ),
            (
                Frame::SynStream { stream_id: 3, associated_to: 1, priority: 7, slot: 2, flags: FLAG_FIN | FLAG_UNIDIRECTIONAL, headers: h.clone() },
                vec![0x80, 3, 0, 1, 3, 0, 0, 14, 0, 0, 0, 3, 0, 0, 0, 1, 0xe0, 2, 0x78, 0xf9, b'z', b'z'],
            ),
            (Frame::SynReply { stream_id: 1, flags: 0, headers: h.clone() }, vec![0x80, 3, 0, 2, 0, 0, 0, 8, 0, 0, 0, 1, 0x78, 0xf9, b'z', b'z']),
            (Frame::RstStream { stream_id: 7, status: rst::CANCEL }, vec![0x80, 3, 0, 3, 0, 0, 0, 8, 0, 0, 0, 7, 0, 0, 0, 5]),
            (
                Frame::Settings { flags: 1, entries: vec![(0, 7, 65536)] },
                vec![0x80, 3, 0, 4, 1, 0, 0, 12, 0, 0, 0, 1, 0, 0, 0, 7, 0, 1, 0, 0],
            ),
            (Frame::Ping { id: 1 }, vec![0x80, 3, 0, 6, 0, 0, 0, 4, 0, 0, 0, 1]),
            (Frame::GoAway { last_good_stream_id: 9, status: 0 }, vec![0x80, 3, 0, 7, 0, 0, 0, 8, 0, 0, 0, 9, 0, 0, 0, 0]),
            (Frame::Headers { stream_id: 1, flags: FLAG_FIN, headers: h.clone() }, vec![0x80, 3, 0, 8, 1, 0, 0, 8, 0, 0, 0, 1, 0x78, 0xf9, b'z', b'z']),
            (Frame::WindowUpdate { stream_id: 1, delta: 1024 }, vec![0x80, 3, 0, 9, 0, 0, 0, 8, 0, 0, 0, 1, 0, 0, 4, 0]),
            (Frame::Unknown { kind: 42, flags: 0, payload: Bytes::from_static(b"x") }, vec![0x80, 3, 0, 42, 0, 0, 0, 1, b'x']),
        ];
        for (frame, wire) in table {
            assert_eq!(bytes(&frame), wire, "{frame:?}");
            let mut buf = BytesMut::from(&wire[..]);
            assert_eq!(decode(&mut buf), Ok(Some(frame.clone())), "{wire:02x?}");
            assert!(buf.is_empty());
        }
    }

    #[test]
    fn partial_frames_wait_and_back_to_back_frames_split() {
        let mut wire = bytes(&Frame::Ping { id: 1 });
        wire.extend(bytes(&Frame::Data { stream_id: 3, flags: 0, data: Bytes::from_static(b"abc") }));
        for cut in 0..12 {
            let mut buf = BytesMut::from(&wire[..cut]);
            assert_eq!(decode(&mut buf), Ok(None), "a {cut}-byte prefix is not a frame");
            assert_eq!(buf.len(), cut, "and is left in place");
        }
        let mut buf = BytesMut::from(&wire[..]);
        assert_eq!(decode(&mut buf), Ok(Some(Frame::Ping { id: 1 })));
        assert_eq!(decode(&mut buf), Ok(Some(Frame::Data { stream_id: 3, flags: 0, data: Bytes::from_static(b"abc") })));
        assert_eq!(decode(&mut buf), Ok(None));
    }

    #[test]
    fn the_reserved_bit_of_stream_ids_is_ignored() {
        let mut buf = BytesMut::from(&[0x80u8, 3, 0, 3, 0, 0, 0, 8, 0x80, 0, 0, 7, 0, 0, 0, 1][..]);
        assert_eq!(decode(&mut buf), Ok(Some(Frame::RstStream { stream_id: 7, status: rst::PROTOCOL_ERROR })));
    }

    #[test]
    fn malformed_control_frames_are_errors() {
        let mut v2 = BytesMut::from(&[0x80u8, 2, 0, 6, 0, 0, 0, 4, 0, 0, 0, 1][..]);
        assert_eq!(decode(&mut v2), Err(FrameError::Version(2)));
        let mut short = BytesMut::from(&[0x80u8, 3, 0, 3, 0, 0, 0, 4, 0, 0, 0, 1][..]);
        assert_eq!(decode(&mut short), Err(FrameError::Short { kind: kind::RST_STREAM, len: 4 }));
        let mut settings = BytesMut::from(&[0x80u8, 3, 0, 4, 0, 0, 0, 4, 0, 0, 0, 2][..]);
        assert_eq!(decode(&mut settings), Err(FrameError::Settings { count: 2, len: 4 }));
    }
}
