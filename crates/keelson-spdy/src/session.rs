//! Both sides of a SPDY/3.1 connection as Kubernetes' streaming uses it: the client opens
//! every stream. [`serve`] is the server side (the kubelet's streaming endpoints): it
//! accepts each stream, answering `SYN_REPLY` at once as Kubernetes' `httpstream/spdy`
//! does, and hands over its headers and two halves to read and write. [`connect`] is the
//! client side (what the agent uses to reach containerd's streaming server): it opens
//! streams with headers and gets the same two halves once the server has replied. Both
//! answer the peer's PINGs; SETTINGS and WINDOW_UPDATE are ignored (Kubernetes'
//! `spdystream` does no flow control either).
//!
//! # Guarantees
//! - A stream's reader ends (`Ok(None)`) after the peer's FIN; a peer RST ends it with
//!   [`StreamError::Reset`], a lost connection with [`StreamError::ConnectionClosed`].
//! - [`StreamWriter::finish`] half-closes: the stream can still be read.
//! - Frames leave in the order they were queued, one connection-wide header context;
//!   a client's stream ids increase in the order its SYN_STREAMs go out.
//!
//! # Caveats
//! - One slow stream reader holds up the whole connection's reading (bounded buffers
//!   instead of flow control).
//! - A client refuses streams the server opens (server push is not used by Kubernetes).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

use crate::frame::{self, rst, Frame, FLAG_FIN};
use crate::headers::{HeaderDecoder, HeaderEncoder, Headers};

/// Data frames the session sends carry at most this much.
pub const MAX_DATA_FRAME: usize = 32 * 1024;
/// Frames buffered per stream before reading the connection waits for that stream.
const STREAM_BUFFER: usize = 64;

/// A stream operation that failed.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum StreamError {
    /// The peer reset the stream (RST_STREAM with this status).
    #[error("stream reset by the peer (status {0})")]
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
    Syn { stream_id: u32, headers: Headers },
    Reply { stream_id: u32 },
    Data { stream_id: u32, data: Bytes, fin: bool },
    Rst { stream_id: u32, status: u32 },
    Ping { id: u32 },
    GoAway { last: u32 },
    Shutdown,
}

/// A stream of the connection.
pub struct Stream {
    pub id: u32,
    /// On the server, the SYN_STREAM's headers (`streamType`, `port`, `requestID`, …); on
    /// the client, the SYN_REPLY's (Kubernetes sends none).
    pub headers: Headers,
    pub reader: StreamReader,
    pub writer: StreamWriter,
}

/// What the peer sends on one stream.
pub struct StreamReader {
    rx: mpsc::Receiver<Inbound>,
    done: Option<StreamError>,
}

impl StreamReader {
    /// The next data; `Ok(None)` once the peer has half-closed (FIN).
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
    let (in_tx, in_rx) = mpsc::channel(16);
    start(io, Role::Server(in_tx));
    Incoming { rx: in_rx }
}

/// The client side of a SPDY/3.1 connection: opens streams. Clones share the connection.
#[derive(Clone)]
pub struct Client {
    out: mpsc::Sender<Outbound>,
    shared: Arc<Mutex<Shared>>,
    /// The next stream id; held while a SYN_STREAM is queued so ids go out in order.
    next_id: Arc<tokio::sync::Mutex<u32>>,
}

impl Client {
    /// Opens a stream with `headers` (names as given; SPDY/3 peers expect lower case) and
    /// waits for the server's SYN_REPLY. A RST_STREAM instead is [`StreamError::Reset`].
    pub async fn open(&self, headers: Headers) -> Result<Stream, StreamError> {
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        let (reply_tx, reply_rx) = oneshot::channel();
        let id = {
            let mut next = self.next_id.lock().await;
            let id = *next;
            if id > STREAM_ID_MAX {
                return Err(StreamError::ConnectionClosed);
            }
            {
                let mut shared = self.shared.lock().expect("lock");
                if shared.closed {
                    return Err(StreamError::ConnectionClosed);
                }
                shared.streams.insert(id, Open { tx: Some(tx), reply: Some(reply_tx) });
            }
            *next = id + 2;
            if self.out.send(Outbound::Syn { stream_id: id, headers }).await.is_err() {
                self.shared.lock().expect("lock").streams.remove(&id);
                return Err(StreamError::ConnectionClosed);
            }
            id
        };
        let headers = reply_rx.await.map_err(|_| StreamError::ConnectionClosed)??;
        Ok(Stream { id, headers, reader: StreamReader { rx, done: None }, writer: StreamWriter { id, tx: self.out.clone() } })
    }

    /// Ends the connection from this side: what is queued goes out, then the write half
    /// closes (the server then closes too, ending every stream's reading).
    pub async fn close(&self) {
        let _ = self.out.send(Outbound::Shutdown).await;
    }
}

/// Runs the client side of SPDY/3.1 on `io` (a connection upgraded with
/// `Upgrade: SPDY/3.1`) in two tasks of its own; they end when either side closes it.
pub fn connect<S>(io: S) -> Client
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (out, shared) = start(io, Role::Client);
    Client { out, shared, next_id: Arc::new(tokio::sync::Mutex::new(1)) }
}

const STREAM_ID_MAX: u32 = 0x7fff_ffff;

/// Which side of the connection a session is.
enum Role {
    /// Accepts the peer's streams and hands them over here.
    Server(mpsc::Sender<Stream>),
    /// Opens streams; the peer's are refused.
    Client,
}

/// A stream the read loop delivers to: its data, and (client) the reply awaited.
struct Open {
    tx: Option<mpsc::Sender<Inbound>>,
    reply: Option<oneshot::Sender<Result<Headers, StreamError>>>,
}

/// The open streams, shared by the read loop and a client's `open`.
#[derive(Default)]
struct Shared {
    streams: HashMap<u32, Open>,
    /// The read loop has ended: no stream can open any more.
    closed: bool,
}

fn start<S>(io: S, role: Role) -> (mpsc::Sender<Outbound>, Arc<Mutex<Shared>>)
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (rd, wr) = tokio::io::split(io);
    let (out_tx, out_rx) = mpsc::channel(256);
    let shared = Arc::new(Mutex::new(Shared::default()));
    tokio::spawn(write_loop(wr, out_rx));
    tokio::spawn(read_loop(rd, out_tx.clone(), role, shared.clone()));
    (out_tx, shared)
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
                Outbound::Syn { stream_id, headers: h } => match headers.encode(&h) {
                    Ok(h) => Frame::SynStream { stream_id, associated_to: 0, priority: 0, slot: 0, flags: 0, headers: h.into() },
                    Err(e) => {
                        tracing::info!(error = %e, "SPDY stream headers");
                        return;
                    }
                },
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

/// Where the read loop sends a DATA frame's payload: the stream's sender, taken out of
/// the shared map (the lock is not held across the send). `fin` removes the stream.
fn data_target(shared: &Mutex<Shared>, stream_id: u32, fin: bool) -> Option<mpsc::Sender<Inbound>> {
    let mut shared = shared.lock().expect("lock");
    let tx = shared.streams.get(&stream_id).and_then(|o| o.tx.clone());
    if fin {
        if let Some(o) = shared.streams.get_mut(&stream_id) {
            o.tx = None;
            if o.reply.is_none() {
                shared.streams.remove(&stream_id);
            }
        }
    }
    tx
}

async fn read_loop<R: AsyncRead + Unpin>(mut rd: R, out: mpsc::Sender<Outbound>, role: Role, shared: Arc<Mutex<Shared>>) {
    let mut headers = HeaderDecoder::new();
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut last_stream = 0;
    // The parity of the peer's ping ids: a client's are odd, a server's even.
    let peer_ping_parity = match role {
        Role::Server(_) => 1,
        Role::Client => 0,
    };
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
                    let Role::Server(incoming) = &role else {
                        let _ = out.send(Outbound::Rst { stream_id, status: rst::REFUSED_STREAM }).await;
                        continue;
                    };
                    let known = shared.lock().expect("lock").streams.contains_key(&stream_id);
                    if known || stream_id == 0 || stream_id % 2 == 0 {
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
                        shared.lock().expect("lock").streams.insert(stream_id, Open { tx: Some(tx), reply: None });
                    }
                    let _ = out.send(Outbound::Reply { stream_id }).await;
                    let stream = Stream { id: stream_id, headers: h, reader: StreamReader { rx, done: None }, writer: StreamWriter { id: stream_id, tx: out.clone() } };
                    if incoming.send(stream).await.is_err() {
                        shared.lock().expect("lock").streams.remove(&stream_id);
                        let _ = out.send(Outbound::Rst { stream_id, status: rst::REFUSED_STREAM }).await;
                    }
                }
                Frame::SynReply { stream_id, flags, headers: block } => {
                    let h = match headers.decode(&block) {
                        Ok(h) => h,
                        Err(e) => {
                            tracing::info!(error = %e, "SPDY SYN_REPLY headers");
                            break 'conn;
                        }
                    };
                    let reply = shared.lock().expect("lock").streams.get_mut(&stream_id).and_then(|o| o.reply.take());
                    if let Some(reply) = reply {
                        let _ = reply.send(Ok(h));
                    }
                    if flags & FLAG_FIN != 0 {
                        data_target(&shared, stream_id, true);
                    }
                }
                Frame::Data { stream_id, flags, data } => {
                    let fin = flags & FLAG_FIN != 0;
                    if let Some(tx) = data_target(&shared, stream_id, fin) {
                        // A reader that went away only loses its data.
                        if !data.is_empty() {
                            let _ = tx.send(Inbound::Data(data)).await;
                        }
                    }
                }
                Frame::RstStream { stream_id, status } => {
                    let open = shared.lock().expect("lock").streams.remove(&stream_id);
                    if let Some(open) = open {
                        if let Some(reply) = open.reply {
                            let _ = reply.send(Err(StreamError::Reset(status)));
                        }
                        if let Some(tx) = open.tx {
                            let _ = tx.try_send(Inbound::Reset(status));
                        }
                    }
                }
                Frame::Headers { headers: block, .. } => {
                    // Read only to keep the header context in step.
                    if let Err(e) = headers.decode(&block) {
                        tracing::info!(error = %e, "SPDY HEADERS");
                        break 'conn;
                    }
                }
                Frame::Ping { id } => {
                    // The peer's own pings are answered; the others answer ours.
                    if id % 2 == peer_ping_parity {
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
    let open: Vec<Open> = {
        let mut shared = shared.lock().expect("lock");
        shared.closed = true;
        shared.streams.drain().map(|(_, o)| o).collect()
    };
    for o in open {
        if let Some(reply) = o.reply {
            let _ = reply.send(Err(StreamError::ConnectionClosed));
        }
        if let Some(tx) = o.tx {
            let _ = tx.try_send(Inbound::Aborted);
        }
    }
    let _ = out.send(Outbound::Shutdown).await;
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
