//! `port-forward` over a WebSocket, as the kubelet serves it to clients that ask with
//! `?port=` (the API server's `?ports=`): kube-rs's `Api::portforward`, and anything else
//! speaking `v4.channel.k8s.io` (binary frames) or `v4.base64.channel.k8s.io` (text
//! frames, the channel as an ASCII digit and the payload in base64). Each asked port `i`
//! has two channels, data `2i` and error `2i + 1`; the first frame on each is the port
//! number (two bytes, little-endian), then the agent connects to `localhost:port` in the
//! pod's network namespace and carries the data channel's bytes to that connection and
//! back. One connection per port for the life of the socket: once every port's
//! connection has ended, the socket closes; a client that goes away ends them all.

use std::sync::Arc;

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use base64::Engine;
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::mpsc;

use super::port_forward::{connect_in_netns, Target};

/// The subprotocols served; a client offering none gets the binary framing.
pub const PROTOCOLS: [&str; 2] = ["v4.channel.k8s.io", "v4.base64.channel.k8s.io"];

/// The ports of a WebSocket port-forward request: every `port` (the kubelet's name) or
/// `ports` (the API server's) parameter, each a comma-separated list; the kubelet's
/// wording for what is wrong.
pub fn ports_of(query: &str) -> Result<Vec<u16>, String> {
    let mut ports = Vec::new();
    let mut asked = false;
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        if k != "port" && k != "ports" {
            continue;
        }
        asked = true;
        if v.is_empty() {
            return Err("query parameter \"port\" cannot be empty".into());
        }
        for p in v.split(',') {
            let port: u16 = p.trim().parse().map_err(|_| format!("unable to parse {p:?} as a port"))?;
            if port == 0 {
                return Err(format!("port {p:?} must be > 0"));
            }
            ports.push(port);
        }
    }
    if !asked {
        return Err("query parameter \"port\" is required".into());
    }
    Ok(ports)
}

/// What one client message means for `ports` forwarded ports.
#[derive(Debug, PartialEq, Eq)]
pub enum Inbound {
    /// Bytes for the connection of port index `.0`.
    Data(usize, Vec<u8>),
    /// Error channels are written by the agent only; unknown channels, empty frames and
    /// undecodable text are dropped, as the kubelet drops them.
    Ignored,
}

/// Reads a client message (binary, or text under the base64 protocol).
pub fn inbound(msg: &Message, base64: bool, ports: usize) -> Inbound {
    let (channel, payload) = match msg {
        Message::Binary(b) if !base64 => match b.split_first() {
            Some((ch, rest)) => (*ch as usize, rest.to_vec()),
            None => return Inbound::Ignored,
        },
        Message::Text(t) if base64 => {
            let t = t.as_str();
            let Some(ch) = t.as_bytes().first().and_then(|c| (*c as char).to_digit(10)) else { return Inbound::Ignored };
            match base64::engine::general_purpose::STANDARD.decode(&t[1..]) {
                Ok(b) => (ch as usize, b),
                Err(_) => return Inbound::Ignored,
            }
        }
        _ => return Inbound::Ignored,
    };
    if channel % 2 == 1 || channel / 2 >= ports || payload.is_empty() {
        return Inbound::Ignored;
    }
    Inbound::Data(channel / 2, payload)
}

/// The message carrying `payload` on `channel` in the session's framing.
pub fn outbound(channel: usize, payload: &[u8], base64: bool) -> Message {
    if base64 {
        let digit = char::from_digit(channel as u32 % 10, 10).expect("a digit");
        Message::Text(format!("{digit}{}", base64::engine::general_purpose::STANDARD.encode(payload)).into())
    } else {
        let mut m = Vec::with_capacity(payload.len() + 1);
        m.push(channel as u8);
        m.extend_from_slice(payload);
        Message::Binary(m.into())
    }
}

/// The frames that open a session: each port's number on its data and error channels.
pub fn opening(ports: &[u16], base64: bool) -> Vec<Message> {
    ports.iter().enumerate().flat_map(|(i, p)| [outbound(2 * i, &p.to_le_bytes(), base64), outbound(2 * i + 1, &p.to_le_bytes(), base64)]).collect()
}

/// What the per-port connection tasks tell the session.
enum Event {
    Connected(usize, OwnedWriteHalf),
    FromPod(usize, Vec<u8>),
    Failed(usize, String),
    Ended(usize),
}

/// One port's connection: dials the pod, then reads it until it ends.
async fn connection(i: usize, port: u16, target: Arc<Target>, events: mpsc::Sender<Event>) {
    let tcp = match connect_in_netns(target.netns.clone(), port).await {
        Ok(t) => t,
        Err(e) => {
            let msg = format!(
                "error forwarding port {port} to pod {}, uid {}: failed to connect to localhost:{port} inside the pod's network namespace {:?}: {e}",
                target.pod, target.uid, target.netns
            );
            tracing::info!(%msg, "port-forward");
            let _ = events.send(Event::Failed(i, msg)).await;
            let _ = events.send(Event::Ended(i)).await;
            return;
        }
    };
    let (mut from_pod, to_pod) = tcp.into_split();
    if events.send(Event::Connected(i, to_pod)).await.is_err() {
        return;
    }
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        match from_pod.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if events.send(Event::FromPod(i, buf[..n].to_vec())).await.is_err() {
                    return;
                }
            }
        }
    }
    let _ = events.send(Event::Ended(i)).await;
}

/// Serves one upgraded socket until every port's connection has ended or the client has
/// gone; the connection tasks go with the session.
pub(super) async fn serve(socket: WebSocket, ports: Vec<u16>, target: Arc<Target>) {
    let base64 = socket.protocol().is_some_and(|p| p.as_bytes() == PROTOCOLS[1].as_bytes());
    let (mut tx, mut rx) = socket.split();
    for m in opening(&ports, base64) {
        if tx.send(m).await.is_err() {
            return;
        }
    }
    let (events_tx, mut events) = mpsc::channel::<Event>(64);
    let mut tasks = tokio::task::JoinSet::new();
    for (i, port) in ports.iter().copied().enumerate() {
        tasks.spawn(connection(i, port, target.clone(), events_tx.clone()));
    }
    drop(events_tx);
    // Per port: the connection's writing half once made, and what the client sent before.
    let mut to_pod: Vec<Option<OwnedWriteHalf>> = ports.iter().map(|_| None).collect();
    let mut early: Vec<Vec<Vec<u8>>> = ports.iter().map(|_| Vec::new()).collect();
    let mut open = ports.len();
    while open > 0 {
        tokio::select! {
            m = rx.next() => match m {
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => {
                    tracing::debug!("port-forward client went away");
                    return;
                }
                Some(Ok(m)) => {
                    if let Inbound::Data(i, bytes) = inbound(&m, base64, ports.len()) {
                        match &mut to_pod[i] {
                            Some(w) => {
                                if w.write_all(&bytes).await.is_err() {
                                    to_pod[i] = None;
                                }
                            }
                            None => early[i].push(bytes),
                        }
                    }
                }
            },
            e = events.recv() => match e {
                Some(Event::Connected(i, mut w)) => {
                    let mut ok = true;
                    for b in std::mem::take(&mut early[i]) {
                        ok = ok && w.write_all(&b).await.is_ok();
                    }
                    to_pod[i] = ok.then_some(w);
                }
                Some(Event::FromPod(i, bytes)) => {
                    if tx.send(outbound(2 * i, &bytes, base64)).await.is_err() {
                        return;
                    }
                }
                Some(Event::Failed(i, msg)) => {
                    let _ = tx.send(outbound(2 * i + 1, msg.as_bytes(), base64)).await;
                }
                Some(Event::Ended(i)) => {
                    to_pod[i] = None;
                    early[i].clear();
                    open -= 1;
                }
                None => break,
            },
        }
    }
    tasks.abort_all();
    let _ = tx.send(Message::Close(Some(CloseFrame { code: 1000, reason: "".into() }))).await;
    // The closing handshake: read until the client's Close. Closing the connection with
    // its bytes unread would reset it, and a reset drops what is still on its way out.
    let _ = tokio::time::timeout(CLOSE_WAIT, async { while let Some(Ok(_)) = rx.next().await {} }).await;
}

/// How long a closed session waits for the client's Close.
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_come_from_every_port_or_ports_parameter() {
        assert_eq!(ports_of("port=80"), Ok(vec![80]));
        assert_eq!(ports_of("ports=80%2C1234&port=9"), Ok(vec![80, 1234, 9]));
        assert_eq!(ports_of("&ports=80,8080"), Ok(vec![80, 8080]));
        assert_eq!(ports_of(""), Err("query parameter \"port\" is required".into()));
        assert_eq!(ports_of("port="), Err("query parameter \"port\" cannot be empty".into()));
        assert_eq!(ports_of("port=0"), Err("port \"0\" must be > 0".into()));
        assert_eq!(ports_of("port=http"), Err("unable to parse \"http\" as a port".into()));
        assert_eq!(ports_of("port=70000"), Err("unable to parse \"70000\" as a port".into()));
    }

    #[test]
    fn a_session_opens_with_each_ports_number_on_both_its_channels() {
        let frames: Vec<Vec<u8>> = opening(&[80, 8080], false)
            .into_iter()
            .map(|m| match m {
                Message::Binary(b) => b.to_vec(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(frames, vec![vec![0, 80, 0], vec![1, 80, 0], vec![2, 0x90, 0x1f], vec![3, 0x90, 0x1f]]);
        let text: Vec<String> = opening(&[80], true)
            .into_iter()
            .map(|m| match m {
                Message::Text(t) => t.as_str().to_string(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(text, vec!["0UAA=", "1UAA="]);
    }

    #[test]
    fn client_frames_reach_their_port_and_nothing_else_does() {
        let bin = |b: &[u8]| Message::Binary(b.to_vec().into());
        assert_eq!(inbound(&bin(&[0, b'h', b'i']), false, 1), Inbound::Data(0, b"hi".to_vec()));
        assert_eq!(inbound(&bin(&[2, 7]), false, 2), Inbound::Data(1, vec![7]));
        assert_eq!(inbound(&bin(&[1, 7]), false, 2), Inbound::Ignored, "an error channel is the agent's to write");
        assert_eq!(inbound(&bin(&[4, 7]), false, 2), Inbound::Ignored, "no third port");
        assert_eq!(inbound(&bin(&[0]), false, 1), Inbound::Ignored);
        assert_eq!(inbound(&bin(&[]), false, 1), Inbound::Ignored);
        assert_eq!(inbound(&Message::Text("0aGk=".into()), false, 1), Inbound::Ignored, "text under the binary protocol");
        assert_eq!(inbound(&Message::Text("0aGk=".into()), true, 1), Inbound::Data(0, b"hi".to_vec()));
        assert_eq!(inbound(&Message::Text("0%%".into()), true, 1), Inbound::Ignored);
        // What the agent sends decodes back to the same channel and bytes.
        for base64 in [false, true] {
            assert_eq!(inbound(&outbound(2, b"abc", base64), base64, 2), Inbound::Data(1, b"abc".to_vec()));
        }
    }
}
