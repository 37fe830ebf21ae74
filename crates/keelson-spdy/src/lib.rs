//! SPDY/3.1, the part Kubernetes' streaming protocols use (`kubectl port-forward`, and
//! exec/attach from kubectl before 1.30): [`frame`] (the wire format, pure),
//! [`headers`] (header blocks, zlib with the SPDY/3 dictionary) and [`session`] (both
//! sides of a connection: [`serve`] accepts client streams, [`connect`] opens them; each
//! stream is read and written in halves and half-closed).
//!
//! **API boundary:** the only crate that knows SPDY framing. It knows nothing of HTTP,
//! Kubernetes or port-forwarding: stream headers are handed over as they came.

pub mod frame;
pub mod headers;
pub mod session;

pub use headers::Headers;
pub use session::{connect, serve, Client, Incoming, Stream, StreamError, StreamReader, StreamWriter};
