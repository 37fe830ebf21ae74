//! The server side of a SPDY/3.1 connection, as the kubelet's streaming endpoints use it:
//! the client opens every stream, the server accepts each (answering `SYN_REPLY` at once,
//! as Kubernetes' `httpstream/spdy` does) and gets its headers and two halves to read and
//! write. PINGs are answered; SETTINGS and WINDOW_UPDATE are ignored (Kubernetes'
//! `spdystream` does no flow control either).
//!
//! # Guarantees
//! - A stream's reader ends (`Ok(None)`) after the client's FIN; a client RST ends it with
//!   [`StreamError::Reset`], a lost connection with [`StreamError::ConnectionClosed`].
//! - [`StreamWriter::finish`] half-closes: the stream can still be read.
//! - Frames leave in the order they were queued, one connection-wide header context.
//!
//! # Caveats
//! - One slow stream reader holds up the whole connection's reading (bounded buffers
//!   instead of flow control).

use std::collections::HashMap;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::frame::{self, rst, Frame, FLAG_FIN};
use crate::headers::{HeaderDecoder, HeaderEncoder, Headers};

/// Data frames the session sends carry at most this much.
pub const MAX_DATA_FRAME: usize = 32 * 1024;
/// Frames buffered per stream before reading the connection waits for that stream.
const STREAM_BUFFER: usize = 64;

/// A stream operation that failed.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum StreamError {
    /// The client reset the stream (RST_STREAM with this status).
    #[error("stream reset by the client (status {0})")]
    Reset(u32),
    /// The connection ended (closed, broken or unreadable) before the stream did.
    #[error("the SPDY connection is closed")]
    ConnectionClosed,
}

enum Inbound {
    Data(Bytes),
    Reset(u32),
    Aborted,
}

enum Outbound {
    Reply { stream_id: u32 },
    Data { stream_id: u32, data: Bytes, fin: bool },
    Rst { stream_id: u32, status: u32 },
    Ping { id: u32 },
    GoAway { last: u32 },
    Shutdown,
}

/// A stream the client opened.
pub struct Stream {
    pub id: u32,
    /// The SYN_STREAM's headers (`streamType`, `port`, `requestID`, …).
    pub headers: Headers,
    pub reader: StreamReader,
    pub writer: StreamWriter,
}

/// What the client sends on one stream.
pub struct StreamReader {
    rx: mpsc::Receiver<Inbound>,
    done: Option<StreamError>,
}

impl StreamReader {
    /// The next data; `Ok(None)` once the client has half-closed (FIN).
    pub async fn recv(&mut self) -> Result<Option<Bytes>, StreamError> {
        if let Some(e) = &self.done {
            return Err(e.clone());
        }
        match self.rx.recv().await {
            Some(Inbound::Data(b)) => Ok(Some(b)),
            None => Ok(None),
            Some(Inbound::Reset(status)) => Err(self.done.insert(StreamError::Reset(status)).clone()),
            Some(Inbound::Aborted) => Err(self.done.insert(StreamError::ConnectionClosed).clone()),
        }
    }

    /// Everything until FIN, concatenated.
    pub async fn read_to_end(&mut self) -> Result<Vec<u8>, StreamError> {
        let mut out = Vec::new();
        while let Some(b) = self.recv().await? {
            out.extend_from_slice(&b);
        }
        Ok(out)
    }
}

/// Sends on one stream; clones share the stream.
#[derive(Clone)]
pub struct StreamWriter {
    id: u32,
    tx: mpsc::Sender<Outbound>,
}

impl StreamWriter {
    /// Sends `data` as DATA frames of at most [`MAX_DATA_FRAME`] bytes.
    pub async fn write(&self, data: &[u8]) -> Result<(), StreamError> {
        for chunk in data.chunks(MAX_DATA_FRAME) {
            self.send(Outbound::Data { stream_id: self.id, data: Bytes::copy_from_slice(chunk), fin: false }).await?;
        }
        Ok(())
    }

    /// Half-closes the stream: an empty DATA frame with FIN.
    pub async fn finish(&self) -> Result<(), StreamError> {
        self.send(Outbound::Data { stream_id: self.id, data: Bytes::new(), fin: true }).await
    }

    /// Aborts the stream (RST_STREAM with `status`, e.g. [`rst::CANCEL`]).
    pub async fn reset(&self, status: u32) -> Result<(), StreamError> {
        self.send(Outbound::Rst { stream_id: self.id, status }).await
    }

    async fn send(&self, o: Outbound) -> Result<(), StreamError> {
        self.tx.send(o).await.map_err(|_| StreamError::ConnectionClosed)
    }
}

/// The streams a client opens on a served connection.
pub struct Incoming {
    rx: mpsc::Receiver<Stream>,
}

impl Incoming {
    /// The next stream the client opens; `None` once the connection has ended.
    pub async fn accept(&mut self) -> Option<Stream> {
        self.rx.recv().await
    }
}

/// Serves the server side of SPDY/3.1 on `io` (an upgraded connection) in two tasks of
/// its own; they end when the client closes the connection or it breaks.
pub fn serve<S>(io: S) -> Incoming
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (rd, wr) = tokio::io::split(io);
    let (out_tx, out_rx) = mpsc::channel(256);
    let (in_tx, in_rx) = mpsc::channel(16);
    tokio::spawn(write_loop(wr, out_rx));
    tokio::spawn(read_loop(rd, out_tx, in_tx));
    Incoming { rx: in_rx }
}

async fn write_loop<W: AsyncWrite + Unpin>(mut wr: W, mut rx: mpsc::Receiver<Outbound>) {
    let mut headers = HeaderEncoder::new();
    let mut buf = BytesMut::new();
    while let Some(first) = rx.recv().await {
        let mut next = Some(first);
        let mut shutdown = false;
        // Everything queued meanwhile goes out in one write.
        while let Some(o) = next.take() {
            let f = match o {
                Outbound::Reply { stream_id } => match headers.encode(&Headers::default()) {
                    Ok(h) => Frame::SynReply { stream_id, flags: 0, headers: h.into() },
                    Err(e) => {
                        tracing::info!(error = %e, "SPDY reply headers");
                        return;
                    }
                },
                Outbound::Data { stream_id, data, fin } => Frame::Data { stream_id, flags: if fin { FLAG_FIN } else { 0 }, data },
                Outbound::Rst { stream_id, status } => Frame::RstStream { stream_id, status },
                Outbound::Ping { id } => Frame::Ping { id },
                Outbound::GoAway { last } => Frame::GoAway { last_good_stream_id: last, status: 0 },
                Outbound::Shutdown => {
                    shutdown = true;
                    break;
                }
            };
            frame::encode(&f, &mut buf);
            if buf.len() < 256 * 1024 {
                next = rx.try_recv().ok();
            }
        }
        if !buf.is_empty() && (wr.write_all(&buf).await.is_err() || wr.flush().await.is_err()) {
            return;
        }
        buf.clear();
        if shutdown {
            break;
        }
    }
    let _ = wr.shutdown().await;
}

async fn read_loop<R: AsyncRead + Unpin>(mut rd: R, out: mpsc::Sender<Outbound>, incoming: mpsc::Sender<Stream>) {
    let mut headers = HeaderDecoder::new();
    let mut streams: HashMap<u32, mpsc::Sender<Inbound>> = HashMap::new();
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut last_stream = 0;
    'conn: loop {
        loop {
            let f = match frame::decode(&mut buf) {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => {
                    tracing::info!(error = %e, "SPDY frame");
                    let _ = out.send(Outbound::GoAway { last: last_stream }).await;
                    break 'conn;
                }
            };
            match f {
                Frame::SynStream { stream_id, flags, headers: block, .. } => {
                    let h = match headers.decode(&block) {
                        Ok(h) => h,
                        Err(e) => {
                            // The header context is lost: the connection cannot go on.
                            tracing::info!(error = %e, "SPDY SYN_STREAM headers");
                            let _ = out.send(Outbound::GoAway { last: last_stream }).await;
                            break 'conn;
                        }
                    };
                    if streams.contains_key(&stream_id) || stream_id == 0 || stream_id % 2 == 0 {
                        let _ = out.send(Outbound::Rst { stream_id, status: rst::PROTOCOL_ERROR }).await;
                        continue;
                    }
                    last_stream = last_stream.max(stream_id);
                    if incoming.is_closed() {
                        let _ = out.send(Outbound::Rst { stream_id, status: rst::REFUSED_STREAM }).await;
                        continue;
                    }
                    let (tx, rx) = mpsc::channel(STREAM_BUFFER);
                    if flags & FLAG_FIN == 0 {
                        streams.insert(stream_id, tx);
                    }
                    let _ = out.send(Outbound::Reply { stream_id }).await;
                    let stream = Stream { id: stream_id, headers: h, reader: StreamReader { rx, done: None }, writer: StreamWriter { id: stream_id, tx: out.clone() } };
                    if incoming.send(stream).await.is_err() {
                        streams.remove(&stream_id);
                        let _ = out.send(Outbound::Rst { stream_id, status: rst::REFUSED_STREAM }).await;
                    }
                }
                Frame::Data { stream_id, flags, data } => {
                    let fin = flags & FLAG_FIN != 0;
                    if let Some(tx) = streams.get(&stream_id) {
                        // A reader that went away only loses its data.
                        if !data.is_empty() {
                            let _ = tx.send(Inbound::Data(data)).await;
                        }
                        if fin {
                            streams.remove(&stream_id);
                        }
                    }
                }
                Frame::RstStream { stream_id, status } => {
                    if let Some(tx) = streams.remove(&stream_id) {
                        let _ = tx.try_send(Inbound::Reset(status));
                    }
                }
                Frame::Headers { headers: block, .. } | Frame::SynReply { headers: block, .. } => {
                    // Read only to keep the header context in step.
                    if let Err(e) = headers.decode(&block) {
                        tracing::info!(error = %e, "SPDY HEADERS");
                        break 'conn;
                    }
                }
                Frame::Ping { id } => {
                    // Client pings are odd; an even id would be the answer to one of ours.
                    if id % 2 == 1 {
                        let _ = out.send(Outbound::Ping { id }).await;
                    }
                }
                Frame::GoAway { .. } | Frame::Settings { .. } | Frame::WindowUpdate { .. } | Frame::Unknown { .. } => {}
            }
        }
        match rd.read_buf(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    for (_, tx) in streams.drain() {
        let _ = tx.try_send(Inbound::Aborted);
    }
    let _ = out.send(Outbound::Shutdown).await;
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
