//! The agent's side of the runtime's streaming server (containerd's, the kubelet's
//! `pkg/cri/streaming`): the URL that CRI `Exec` or `Attach` returned, `POST`ed with
//! `Upgrade: SPDY/3.1` and `X-Stream-Protocol-Version: v4.channel.k8s.io`, then one
//! stream per channel (`streamType` error, stdin, stdout, stderr, resize) as the CRI
//! request asked. SPDY rather than that server's WebSocket: the WebSocket speaks v4 only,
//! which cannot say that stdin ended; a SPDY stream half-closes (FIN).
//!
//! # Guarantees
//! - Streams are opened in the order client-go opens them (error first) and exactly the
//!   set the server waits for: stdin, stdout if asked, stderr if asked and no tty,
//!   resize with a tty.

use hyper_util::rt::TokioIo;
use keelson_spdy::{Headers, StreamReader, StreamWriter};

use crate::runtime::Streams;

/// The remote-command protocol version asked of the runtime (CRI servers speak ≤ v4).
pub const RUNTIME_PROTOCOL: &str = "v4.channel.k8s.io";

/// Reaching the runtime's streaming server failed.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    /// The URL is not an `http://host:port/path` one.
    #[error("streaming URL {0:?} is not a plain http URL")]
    Url(String),
    /// Connecting or the HTTP exchange failed.
    #[error("connecting to the runtime's streaming server at {url}: {message}")]
    Connect { url: String, message: String },
    /// The server answered something other than `101 Switching Protocols`.
    #[error("the runtime's streaming server answered {status}: {body}")]
    Refused { status: u16, body: String },
    /// A stream could not be opened.
    #[error("opening the {kind} stream to the runtime: {source}")]
    Stream { kind: &'static str, #[source] source: keelson_spdy::StreamError },
}

/// The stream types a remote-command session carries for `s`, in client-go's order.
pub fn stream_types(s: Streams) -> Vec<&'static str> {
    let mut v = vec!["error"];
    if s.stdin {
        v.push("stdin");
    }
    if s.stdout {
        v.push("stdout");
    }
    if s.stderr && !s.tty {
        v.push("stderr");
    }
    if s.tty {
        v.push("resize");
    }
    v
}

/// An exec or attach session on the runtime: the halves the agent uses.
pub struct RuntimeSession {
    /// The status (`metav1.Status` JSON, v4) the runtime writes when the process ends.
    pub error: StreamReader,
    pub stdin: Option<StreamWriter>,
    pub stdout: Option<StreamReader>,
    pub stderr: Option<StreamReader>,
    /// `{"Width":…,"Height":…}` lines.
    pub resize: Option<StreamWriter>,
    pub conn: keelson_spdy::Client,
}

/// Host-and-port and path-and-query of an `http://` URL.
fn split_url(url: &str) -> Option<(String, String)> {
    let rest = url.strip_prefix("http://")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.is_empty() {
        return None;
    }
    let authority = if authority.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok()) { authority.to_string() } else { format!("{authority}:80") };
    Some((authority, path.to_string()))
}

/// Upgrades `url` to SPDY and opens the streams `s` asks for.
pub async fn dial(url: &str, s: Streams) -> Result<RuntimeSession, DialError> {
    let (authority, path) = split_url(url).ok_or_else(|| DialError::Url(url.to_string()))?;
    let connect = |e: &dyn std::fmt::Display| DialError::Connect { url: url.to_string(), message: e.to_string() };
    let tcp = tokio::time::timeout(std::time::Duration::from_secs(10), tokio::net::TcpStream::connect(&authority))
        .await
        .map_err(|_| connect(&"timed out"))?
        .map_err(|e| connect(&e))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await.map_err(|e| connect(&e))?;
    tokio::spawn(conn.with_upgrades());
    let req = http::Request::post(path)
        .header("host", &authority)
        .header("connection", "Upgrade")
        .header("upgrade", "SPDY/3.1")
        .header("x-stream-protocol-version", RUNTIME_PROTOCOL)
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .map_err(|e| connect(&e))?;
    let mut resp = sender.send_request(req).await.map_err(|e| connect(&e))?;
    if resp.status() != http::StatusCode::SWITCHING_PROTOCOLS {
        use http_body_util::BodyExt;
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.map(|b| String::from_utf8_lossy(&b.to_bytes()).trim().to_string()).unwrap_or_default();
        return Err(DialError::Refused { status, body });
    }
    let io = hyper::upgrade::on(&mut resp).await.map_err(|e| connect(&e))?;
    let conn = keelson_spdy::connect(TokioIo::new(io));
    let mut session = None;
    let (mut stdin, mut stdout, mut stderr, mut resize) = (None, None, None, None);
    for kind in stream_types(s) {
        let stream = conn.open(Headers::from([("streamtype", kind)])).await.map_err(|source| DialError::Stream { kind, source })?;
        match kind {
            "error" => session = Some(stream.reader),
            "stdin" => stdin = Some(stream.writer),
            "stdout" => stdout = Some(stream.reader),
            "stderr" => stderr = Some(stream.reader),
            _ => resize = Some(stream.writer),
        }
    }
    let error = session.expect("the error stream is always opened");
    Ok(RuntimeSession { error, stdin, stdout, stderr, resize, conn })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_streams_the_runtime_waits_for() {
        let all = Streams { stdin: true, stdout: true, stderr: true, tty: false };
        assert_eq!(stream_types(all), ["error", "stdin", "stdout", "stderr"]);
        assert_eq!(stream_types(Streams { tty: true, ..all }), ["error", "stdin", "stdout", "resize"], "a tty has no stderr but a resize stream");
        assert_eq!(stream_types(Streams { stdout: true, ..Default::default() }), ["error", "stdout"]);
    }

    #[test]
    fn streaming_urls_split_into_address_and_path() {
        assert_eq!(split_url("http://127.0.0.1:36789/exec/AbC_d"), Some(("127.0.0.1:36789".into(), "/exec/AbC_d".into())));
        assert_eq!(split_url("http://[::1]:10010/attach/x"), Some(("[::1]:10010".into(), "/attach/x".into())));
        assert_eq!(split_url("http://host"), Some(("host:80".into(), "/".into())));
        assert_eq!(split_url("https://127.0.0.1:1/exec/x"), None, "TLS streaming servers are not reached");
        assert_eq!(split_url("http:///x"), None);
    }
}
