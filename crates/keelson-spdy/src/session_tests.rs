use super::*;
use crate::frame::FLAG_UNIDIRECTIONAL;
use tokio::io::DuplexStream;

/// A hand-driven end of a connection: frames in and out, its own header contexts.
struct Peer {
    io: DuplexStream,
    enc: HeaderEncoder,
    dec: HeaderDecoder,
    buf: BytesMut,
    /// The headers of the last SYN_STREAM [`Peer::next`] returned.
    syn_headers: Option<Headers>,
}

impl Peer {
    fn new() -> (Self, Incoming) {
        let (a, b) = tokio::io::duplex(1 << 20);
        (Peer::over(a), serve(b))
    }

    /// A peer playing the server for a [`connect`]ed client.
    fn facing_client() -> (Self, super::Client) {
        let (a, b) = tokio::io::duplex(1 << 20);
        (Peer::over(a), connect(b))
    }

    fn over(io: DuplexStream) -> Self {
        Peer { io, enc: HeaderEncoder::new(), dec: HeaderDecoder::new(), buf: BytesMut::new(), syn_headers: None }
    }

    async fn send(&mut self, f: Frame) {
        let mut out = BytesMut::new();
        frame::encode(&f, &mut out);
        self.io.write_all(&out).await.unwrap();
    }

    async fn syn(&mut self, stream_id: u32, flags: u8, h: Headers) {
        let headers = self.enc.encode(&h).unwrap().into();
        self.send(Frame::SynStream { stream_id, associated_to: 0, priority: 0, slot: 0, flags, headers }).await;
    }

    async fn data(&mut self, stream_id: u32, data: &[u8], fin: bool) {
        self.send(Frame::Data { stream_id, flags: if fin { FLAG_FIN } else { 0 }, data: Bytes::copy_from_slice(data) }).await;
    }

    /// The next frame from the other end; header blocks of replies checked and emptied,
    /// those of SYN_STREAMs decoded into `syn_headers` and emptied.
    async fn next(&mut self) -> Option<Frame> {
        loop {
            if let Some(f) = frame::decode(&mut self.buf).unwrap() {
                if let Frame::SynReply { stream_id, flags, headers } = f {
                    assert_eq!(self.dec.decode(&headers).unwrap(), Headers::default());
                    return Some(Frame::SynReply { stream_id, flags, headers: Bytes::new() });
                }
                if let Frame::SynStream { stream_id, associated_to, priority, slot, flags, headers } = f {
                    self.syn_headers = Some(self.dec.decode(&headers).unwrap());
                    return Some(Frame::SynStream { stream_id, associated_to, priority, slot, flags, headers: Bytes::new() });
                }
                return Some(f);
            }
            if self.io.read_buf(&mut self.buf).await.unwrap() == 0 {
                return None;
            }
        }
    }
}

fn reply(stream_id: u32) -> Frame {
    Frame::SynReply { stream_id, flags: 0, headers: Bytes::new() }
}

#[tokio::test]
async fn streams_are_accepted_replied_to_and_carry_data_both_ways() {
    let (mut c, mut incoming) = Peer::new();
    c.syn(1, 0, Headers::from([("streamtype", "error"), ("port", "80"), ("requestid", "0")])).await;
    c.syn(3, 0, Headers::from([("streamtype", "data"), ("port", "80"), ("requestid", "0")])).await;
    assert_eq!(c.next().await, Some(reply(1)));
    assert_eq!(c.next().await, Some(reply(3)));
    let mut err = incoming.accept().await.unwrap();
    let mut data = incoming.accept().await.unwrap();
    assert_eq!((err.id, err.headers.get("streamType")), (1, Some("error")));
    assert_eq!((data.id, data.headers.get("Port"), data.headers.get("requestID")), (3, Some("80"), Some("0")));

    // Client → server, then the client's half-close.
    c.data(3, b"GET / HTTP/1.0\r\n\r\n", false).await;
    c.data(1, b"", true).await;
    assert_eq!(data.reader.recv().await, Ok(Some(Bytes::from_static(b"GET / HTTP/1.0\r\n\r\n"))));
    assert_eq!(err.reader.recv().await, Ok(None), "FIN ends the error stream's reading");

    // Server → client, large writes split, then the server's half-close.
    let big = vec![7u8; MAX_DATA_FRAME + 10];
    data.writer.write(&big).await.unwrap();
    data.writer.finish().await.unwrap();
    let mut got = Vec::new();
    loop {
        match c.next().await.unwrap() {
            Frame::Data { stream_id: 3, flags, data } => {
                assert!(data.len() <= MAX_DATA_FRAME);
                got.extend_from_slice(&data);
                if flags & FLAG_FIN != 0 {
                    break;
                }
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(got, big);
    // Half-closed by the server, the stream still reads.
    c.data(3, b"more", true).await;
    assert_eq!(data.reader.read_to_end().await, Ok(b"more".to_vec()));
}

#[tokio::test]
async fn pings_are_answered_and_control_frames_ignored() {
    let (mut c, _incoming) = Peer::new();
    c.send(Frame::Settings { flags: 0, entries: vec![(0, 7, 1 << 20)] }).await;
    c.send(Frame::WindowUpdate { stream_id: 0, delta: 1000 }).await;
    c.send(Frame::Unknown { kind: 99, flags: 0, payload: Bytes::from_static(b"?") }).await;
    c.send(Frame::Ping { id: 1 }).await;
    c.send(Frame::Ping { id: 2 }).await;
    c.send(Frame::Ping { id: 3 }).await;
    assert_eq!(c.next().await, Some(Frame::Ping { id: 1 }));
    assert_eq!(c.next().await, Some(Frame::Ping { id: 3 }), "even ids are answers, not asked");
}

#[tokio::test]
async fn a_syn_with_fin_is_read_closed_and_rst_ends_the_reader() {
    let (mut c, mut incoming) = Peer::new();
    c.syn(1, FLAG_FIN | FLAG_UNIDIRECTIONAL, Headers::from([("streamtype", "error")])).await;
    let mut s = incoming.accept().await.unwrap();
    assert_eq!(s.reader.recv().await, Ok(None));
    c.syn(3, 0, Headers::from([("streamtype", "data")])).await;
    let mut d = incoming.accept().await.unwrap();
    c.send(Frame::RstStream { stream_id: 3, status: rst::CANCEL }).await;
    assert_eq!(d.reader.recv().await, Err(StreamError::Reset(rst::CANCEL)));
    assert_eq!(d.reader.recv().await, Err(StreamError::Reset(rst::CANCEL)), "and stays ended");
    // The server resets a stream of its own accord.
    d.writer.reset(rst::INTERNAL_ERROR).await.unwrap();
    assert_eq!(c.next().await, Some(reply(1)));
    assert_eq!(c.next().await, Some(reply(3)));
    assert_eq!(c.next().await, Some(Frame::RstStream { stream_id: 3, status: rst::INTERNAL_ERROR }));
}

#[tokio::test]
async fn reused_or_even_stream_ids_are_refused() {
    let (mut c, mut incoming) = Peer::new();
    c.syn(1, 0, Headers::from([("a", "1")])).await;
    c.syn(1, 0, Headers::from([("a", "2")])).await;
    c.syn(2, 0, Headers::from([("a", "3")])).await;
    assert_eq!(c.next().await, Some(reply(1)));
    assert_eq!(c.next().await, Some(Frame::RstStream { stream_id: 1, status: rst::PROTOCOL_ERROR }));
    assert_eq!(c.next().await, Some(Frame::RstStream { stream_id: 2, status: rst::PROTOCOL_ERROR }));
    assert_eq!(incoming.accept().await.unwrap().headers.get("a"), Some("1"));
}

#[tokio::test]
async fn a_closed_connection_aborts_open_streams_and_ends_accepting() {
    let (mut c, mut incoming) = Peer::new();
    c.syn(1, 0, Headers::from([("streamtype", "data")])).await;
    let mut s = incoming.accept().await.unwrap();
    drop(c);
    assert_eq!(s.reader.recv().await, Err(StreamError::ConnectionClosed));
    assert!(incoming.accept().await.is_none());
    // Writing after the end fails instead of hanging.
    tokio::time::timeout(std::time::Duration::from_secs(5), async {
        while s.writer.write(b"x").await.is_ok() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("writes fail once the connection is gone");
}

#[tokio::test]
async fn garbage_gets_a_goaway_and_the_connection_closes() {
    let (mut c, mut incoming) = Peer::new();
    c.io.write_all(&[0x80, 2, 0, 6, 0, 0, 0, 4, 0, 0, 0, 1]).await.unwrap();
    assert_eq!(c.next().await, Some(Frame::GoAway { last_good_stream_id: 0, status: 0 }));
    assert_eq!(c.next().await, None);
    assert!(incoming.accept().await.is_none());
}

/// kubectl 1.29's first frame of `kubectl port-forward pod/x 18778:80`, captured from a
/// fake server that answered its POST with 101: the error stream of the first connection.
const KUBECTL_FIRST_FRAME: &str = "800300010000003d0000000100000000000078f9e3c6a7c202253a703a2b294a4dcc851625aca9a0808614cb45a024cc6461c0c0c0c0590489c44c50e2663400000000ffff";

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

#[test]
fn kubectls_first_frame_decodes() {
    let mut buf = BytesMut::from(&unhex(KUBECTL_FIRST_FRAME)[..]);
    let Some(Frame::SynStream { stream_id: 1, associated_to: 0, flags: 0, headers, .. }) = frame::decode(&mut buf).unwrap() else { panic!("a SYN_STREAM of stream 1") };
    assert!(buf.is_empty());
    let h = HeaderDecoder::new().decode(&headers).unwrap();
    assert_eq!(h, Headers::from([("streamtype", "error"), ("port", "80"), ("requestid", "0")]));
}

#[tokio::test]
async fn kubectls_first_frame_is_accepted() {
    let (mut c, mut incoming) = Peer::new();
    c.io.write_all(&unhex(KUBECTL_FIRST_FRAME)).await.unwrap();
    let s = incoming.accept().await.unwrap();
    assert_eq!((s.id, s.headers.get("streamType"), s.headers.get("port")), (1, Some("error"), Some("80")));
    assert_eq!(c.next().await, Some(reply(1)));
}

// The client side.

fn syn(stream_id: u32) -> Frame {
    Frame::SynStream { stream_id, associated_to: 0, priority: 0, slot: 0, flags: 0, headers: Bytes::new() }
}

impl Peer {
    async fn reply(&mut self, stream_id: u32, h: Headers) {
        let headers = self.enc.encode(&h).unwrap().into();
        self.send(Frame::SynReply { stream_id, flags: 0, headers }).await;
    }
}

#[tokio::test]
async fn a_client_opens_streams_with_odd_increasing_ids_and_waits_for_the_reply() {
    let (mut server, client) = Peer::facing_client();
    let open = |kind: &'static str| {
        let client = client.clone();
        tokio::spawn(async move { client.open(Headers::from([("streamtype", kind)])).await })
    };
    let error = open("error");
    assert_eq!(server.next().await, Some(syn(1)));
    assert_eq!(server.syn_headers.take(), Some(Headers::from([("streamtype", "error")])));
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert!(!error.is_finished(), "open waits for the SYN_REPLY");
    server.reply(1, Headers::from([("x", "y")])).await;
    let error = error.await.unwrap().unwrap();
    assert_eq!((error.id, error.headers.get("x")), (1, Some("y")), "the reply's headers");

    // Opened at once, streams still go out in id order, each header block in step.
    let opening: Vec<_> = ["stdin", "stdout", "stderr"].into_iter().map(open).collect();
    let mut seen = Vec::new();
    for _ in 0..3 {
        let Some(Frame::SynStream { stream_id, .. }) = server.next().await else { panic!("a SYN_STREAM") };
        seen.push((stream_id, server.syn_headers.take().unwrap().get("streamType").unwrap().to_string()));
    }
    assert_eq!(seen.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [3, 5, 7]);
    for (id, _) in &seen {
        server.reply(*id, Headers::default()).await;
    }
    for o in opening {
        let s = o.await.unwrap().unwrap();
        let (_, kind) = seen.iter().find(|(id, _)| *id == s.id).unwrap();
        assert!(["stdin", "stdout", "stderr"].contains(&kind.as_str()));
    }
}

#[tokio::test]
async fn client_streams_carry_data_both_ways_half_close_and_reset() {
    let (mut server, client) = Peer::facing_client();
    let opening = tokio::spawn({
        let client = client.clone();
        async move { (client.open(Headers::from([("streamtype", "stdin")])).await, client.open(Headers::from([("streamtype", "stdout")])).await) }
    });
    assert_eq!(server.next().await, Some(syn(1)));
    server.reply(1, Headers::default()).await;
    assert_eq!(server.next().await, Some(syn(3)));
    server.reply(3, Headers::default()).await;
    let (stdin, stdout) = opening.await.unwrap();
    let (mut stdin, mut stdout) = (stdin.unwrap(), stdout.unwrap());

    stdin.writer.write(b"hi\n").await.unwrap();
    stdin.writer.finish().await.unwrap();
    assert_eq!(server.next().await, Some(Frame::Data { stream_id: 1, flags: 0, data: Bytes::from_static(b"hi\n") }));
    assert_eq!(server.next().await, Some(Frame::Data { stream_id: 1, flags: FLAG_FIN, data: Bytes::new() }), "finish is an empty DATA with FIN");

    server.data(3, b"out", false).await;
    server.data(3, b"put", true).await;
    assert_eq!(stdout.reader.read_to_end().await, Ok(b"output".to_vec()));
    assert_eq!(stdout.reader.recv().await, Ok(None));
    // Half-closed by the server, stdin still reads; a reset ends it.
    server.data(1, b"late", false).await;
    assert_eq!(stdin.reader.recv().await, Ok(Some(Bytes::from_static(b"late"))));
    server.send(Frame::RstStream { stream_id: 1, status: rst::CANCEL }).await;
    assert_eq!(stdin.reader.recv().await, Err(StreamError::Reset(rst::CANCEL)));
}

#[tokio::test]
async fn a_client_answers_server_pings_and_refuses_server_streams() {
    let (mut server, client) = Peer::facing_client();
    server.send(Frame::Ping { id: 1 }).await;
    server.send(Frame::Ping { id: 2 }).await;
    assert_eq!(server.next().await, Some(Frame::Ping { id: 2 }), "odd ids would answer the client's own pings");
    server.syn(2, 0, Headers::from([("streamtype", "push")])).await;
    assert_eq!(server.next().await, Some(Frame::RstStream { stream_id: 2, status: rst::REFUSED_STREAM }));
    // The header context stayed in step: the next stream opens normally.
    let opening = tokio::spawn(async move { client.open(Headers::from([("streamtype", "error")])).await });
    assert_eq!(server.next().await, Some(syn(1)));
    assert_eq!(server.syn_headers.take(), Some(Headers::from([("streamtype", "error")])));
    server.reply(1, Headers::from([("a", "b")])).await;
    assert_eq!(opening.await.unwrap().unwrap().headers.get("a"), Some("b"));
}

#[tokio::test]
async fn a_refused_open_and_a_closed_connection_fail_instead_of_hanging() {
    let (mut server, client) = Peer::facing_client();
    let refused = tokio::spawn({
        let client = client.clone();
        async move { client.open(Headers::from([("streamtype", "error")])).await.map(|s| s.id) }
    });
    assert_eq!(server.next().await, Some(syn(1)));
    server.send(Frame::RstStream { stream_id: 1, status: rst::REFUSED_STREAM }).await;
    assert_eq!(refused.await.unwrap(), Err(StreamError::Reset(rst::REFUSED_STREAM)));

    let open = tokio::spawn({
        let client = client.clone();
        async move { client.open(Headers::from([("streamtype", "stdout")])).await }
    });
    assert_eq!(server.next().await, Some(syn(3)));
    server.reply(3, Headers::default()).await;
    let mut open = open.await.unwrap().unwrap();
    let pending = tokio::spawn({
        let client = client.clone();
        async move { client.open(Headers::from([("streamtype", "stderr")])).await.map(|s| s.id) }
    });
    assert_eq!(server.next().await, Some(syn(5)));
    drop(server);
    assert_eq!(pending.await.unwrap(), Err(StreamError::ConnectionClosed), "an unanswered open fails");
    assert_eq!(open.reader.recv().await, Err(StreamError::ConnectionClosed), "an open stream is aborted");
    assert_eq!(client.open(Headers::default()).await.map(|s| s.id), Err(StreamError::ConnectionClosed), "and nothing opens any more");
}

#[tokio::test]
async fn client_and_server_sessions_talk_over_a_pipe() {
    let (a, b) = tokio::io::duplex(64 * 1024);
    let client = connect(a);
    let mut incoming = serve(b);
    let server = tokio::spawn(async move {
        let mut by_type = HashMap::new();
        for _ in 0..3 {
            let s = incoming.accept().await.unwrap();
            by_type.insert(s.headers.get("streamType").unwrap().to_string(), s);
        }
        let (error, mut stdin, stdout) = (by_type.remove("error").unwrap(), by_type.remove("stdin").unwrap(), by_type.remove("stdout").unwrap());
        // `cat`: stdin to stdout until stdin's FIN, then the status and the end.
        while let Some(b) = stdin.reader.recv().await.unwrap() {
            stdout.writer.write(&b).await.unwrap();
        }
        stdout.writer.finish().await.unwrap();
        error.writer.write(br#"{"metadata":{},"status":"Success"}"#).await.unwrap();
        error.writer.finish().await.unwrap();
        // The client closing the connection ends accepting.
        incoming.accept().await.is_none()
    });
    let mut error = client.open(Headers::from([("streamtype", "error")])).await.unwrap();
    let stdin = client.open(Headers::from([("streamtype", "stdin")])).await.unwrap();
    let mut stdout = client.open(Headers::from([("streamtype", "stdout")])).await.unwrap();
    assert_eq!((error.id, stdin.id, stdout.id), (1, 3, 5));
    let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let writing = tokio::spawn({
        let (w, big) = (stdin.writer.clone(), big.clone());
        async move {
            w.write(&big).await.unwrap();
            w.finish().await.unwrap();
        }
    });
    assert_eq!(stdout.reader.read_to_end().await.unwrap(), big);
    writing.await.unwrap();
    assert_eq!(error.reader.read_to_end().await.unwrap(), br#"{"metadata":{},"status":"Success"}"#.to_vec());
    client.close().await;
    assert!(tokio::time::timeout(std::time::Duration::from_secs(5), server).await.unwrap().unwrap());
}
