use super::*;
use crate::frame::FLAG_UNIDIRECTIONAL;
use tokio::io::DuplexStream;

/// The client end: frames in and out, its own header contexts.
struct Client {
    io: DuplexStream,
    enc: HeaderEncoder,
    dec: HeaderDecoder,
    buf: BytesMut,
}

impl Client {
    fn new() -> (Self, Incoming) {
        let (a, b) = tokio::io::duplex(1 << 20);
        (Client { io: a, enc: HeaderEncoder::new(), dec: HeaderDecoder::new(), buf: BytesMut::new() }, serve(b))
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

    /// The next frame from the server; header blocks of replies checked and emptied.
    async fn next(&mut self) -> Option<Frame> {
        loop {
            if let Some(f) = frame::decode(&mut self.buf).unwrap() {
                if let Frame::SynReply { stream_id, flags, headers } = f {
                    assert_eq!(self.dec.decode(&headers).unwrap(), Headers::default());
                    return Some(Frame::SynReply { stream_id, flags, headers: Bytes::new() });
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
    let (mut c, mut incoming) = Client::new();
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
    let (mut c, _incoming) = Client::new();
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
    let (mut c, mut incoming) = Client::new();
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
    let (mut c, mut incoming) = Client::new();
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
    let (mut c, mut incoming) = Client::new();
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
    let (mut c, mut incoming) = Client::new();
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
    let (mut c, mut incoming) = Client::new();
    c.io.write_all(&unhex(KUBECTL_FIRST_FRAME)).await.unwrap();
    let s = incoming.accept().await.unwrap();
    assert_eq!((s.id, s.headers.get("streamType"), s.headers.get("port")), (1, Some("error"), Some("80")));
    assert_eq!(c.next().await, Some(reply(1)));
}
