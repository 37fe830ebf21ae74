//! The few pieces of RFC 6455 the API server needs to answer a WebSocket exec or attach
//! itself before it opens the session on the node agent (see
//! `KubeletClient::remote_command_websocket`): the accept key, the subprotocol, and the
//! unmasked server frames that carry an error on the remote-command error channel.

use base64::Engine;

/// The remote-command subprotocols the node agent speaks, preferred first.
pub(crate) const REMOTE_COMMAND_PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];

/// The remote-command channel that carries the session's outcome as a `Status`.
pub(crate) const ERROR_CHANNEL: u8 = 3;

/// `Sec-WebSocket-Accept` for the client's `Sec-WebSocket-Key`.
pub(crate) fn accept_key(key: &str) -> String {
    const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, format!("{key}{GUID}").as_bytes());
    base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
}

/// The remote-command subprotocol to speak: the most preferred one the client offers in
/// its `Sec-WebSocket-Protocol` headers.
pub(crate) fn remote_command_protocol<'a>(offered: impl IntoIterator<Item = &'a str>) -> Option<&'static str> {
    let offered: Vec<&str> = offered.into_iter().flat_map(|v| v.split(',')).map(str::trim).collect();
    REMOTE_COMMAND_PROTOCOLS.into_iter().find(|p| offered.contains(p))
}

/// One unmasked, final binary frame (server to client).
pub(crate) fn binary_frame(payload: &[u8]) -> Vec<u8> {
    let mut frame = vec![0x82];
    match payload.len() {
        n @ 0..=125 => frame.push(n as u8),
        n @ 126..=0xffff => {
            frame.push(126);
            frame.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            frame.push(127);
            frame.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    frame.extend_from_slice(payload);
    frame
}

/// A close frame with status 1000 (normal closure).
pub(crate) const NORMAL_CLOSE_FRAME: [u8; 4] = [0x88, 0x02, 0x03, 0xe8];

/// What the client reads when the agent will not open the session after the client's
/// handshake was answered: the agent's `Status` (or one made of its plain answer) on the
/// error channel, then a normal close. kubectl prints the message and exits 1.
pub(crate) fn failed_session_frames(agent_status: u16, agent_body: &[u8]) -> Vec<u8> {
    let status = match serde_json::from_slice::<serde_json::Value>(agent_body) {
        Ok(v) if v.get("kind").and_then(|k| k.as_str()) == Some("Status") || v.get("status").and_then(|s| s.as_str()) == Some("Failure") => v,
        _ => {
            let message = format!("error dialing backend: the node agent answered {agent_status}: {}", String::from_utf8_lossy(agent_body).trim());
            serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": "InternalError", "code": 500})
        }
    };
    let mut payload = vec![ERROR_CHANNEL];
    payload.extend_from_slice(status.to_string().as_bytes());
    let mut frames = binary_frame(&payload);
    frames.extend_from_slice(&NORMAL_CLOSE_FRAME);
    frames
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_accept_key_of_rfc_6455s_example() {
        assert_eq!(accept_key("dGhlIHNhbXBsZSBub25jZQ=="), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    }

    #[test]
    fn v5_is_preferred_then_v4_and_older_protocols_are_not_spoken() {
        assert_eq!(remote_command_protocol(["v4.channel.k8s.io, v5.channel.k8s.io"]), Some("v5.channel.k8s.io"));
        assert_eq!(remote_command_protocol(["v4.channel.k8s.io", "v3.channel.k8s.io"]), Some("v4.channel.k8s.io"));
        assert_eq!(remote_command_protocol(["v3.channel.k8s.io,channel.k8s.io"]), None);
        assert_eq!(remote_command_protocol([]), None);
    }

    #[test]
    fn frame_lengths_use_the_shortest_encoding() {
        assert_eq!(binary_frame(b"ab"), [0x82, 2, b'a', b'b']);
        let f = binary_frame(&[7; 126]);
        assert_eq!((&f[..4], f.len()), (&[0x82, 126, 0, 126][..], 130));
        let f = binary_frame(&[7; 70_000]);
        assert_eq!((&f[..10], f.len()), (&[0x82, 127, 0, 0, 0, 0, 0, 1, 0x11, 0x70][..], 70_010));
    }

    /// The payload of the unmasked frame at the start of `bytes`, and what follows it.
    fn first_frame(bytes: &[u8]) -> (&[u8], &[u8]) {
        let (len, start) = match bytes[1] {
            126 => (u16::from_be_bytes([bytes[2], bytes[3]]) as usize, 4),
            127 => (u64::from_be_bytes(bytes[2..10].try_into().unwrap()) as usize, 10),
            n => (n as usize, 2),
        };
        (&bytes[start..start + len], &bytes[start + len..])
    }

    #[test]
    fn an_agents_refusal_reaches_the_error_channel_as_a_status() {
        let status = br#"{"kind":"Status","status":"Failure","message":"container c of pod default/p is not running on node n1","code":404}"#;
        let frames = failed_session_frames(404, status);
        let (payload, rest) = first_frame(&frames);
        assert_eq!((frames[0], payload[0], rest), (0x82, ERROR_CHANNEL, &NORMAL_CLOSE_FRAME[..]));
        let sent: serde_json::Value = serde_json::from_slice(&payload[1..]).unwrap();
        assert_eq!(sent["message"], "container c of pod default/p is not running on node n1");

        let frames = failed_session_frames(502, b"bad gateway\n");
        let (payload, _) = first_frame(&frames);
        let sent: serde_json::Value = serde_json::from_slice(&payload[1..]).unwrap();
        assert_eq!((sent["status"].as_str(), sent["message"].as_str()), (Some("Failure"), Some("error dialing backend: the node agent answered 502: bad gateway")));
    }
}
