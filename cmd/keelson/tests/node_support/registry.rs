//! A registry stand-in inside a node's network namespace, for image pull secrets: it
//! answers every request without the expected Basic credentials with Docker's 401
//! challenge, and with them says the manifest is unknown (there is no image to serve),
//! recording the `Authorization` header of every request it gets.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};

pub struct FakeRegistry {
    pub port: u16,
    /// The `Authorization` header of each request ("" for none), in order.
    pub seen: Arc<Mutex<Vec<String>>>,
}

impl FakeRegistry {
    /// Listens on 127.0.0.1 of network namespace `/run/netns/<ns>` (a thread joins the
    /// namespace to bind, then serves from it); `user:password` is the one accepted.
    pub fn start_in(ns: &str, user_password: &str) -> Self {
        use base64::Engine;
        let expected = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(user_password));
        let ns_file = std::fs::File::open(format!("/run/netns/{ns}")).expect("the node's netns");
        let (tx, rx) = std::sync::mpsc::channel();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            // SAFETY: setns(2) on this thread only, with an open namespace file.
            assert_eq!(unsafe { libc::setns(ns_file.as_raw_fd(), libc::CLONE_NEWNET) }, 0, "setns: {}", std::io::Error::last_os_error());
            let listener = TcpListener::bind("127.0.0.1:0").expect("bind in the node");
            tx.send(listener.local_addr().unwrap().port()).unwrap();
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut line = String::new();
                let mut auth = String::new();
                if reader.read_line(&mut line).is_err() {
                    continue;
                }
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                        break;
                    }
                    if let Some((name, value)) = h.split_once(':') {
                        if name.eq_ignore_ascii_case("authorization") {
                            auth = value.trim().to_string();
                        }
                    }
                }
                log.lock().unwrap().push(auth.clone());
                let (status, extra, body) = if auth == expected {
                    ("404 Not Found", "", r#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}"#)
                } else {
                    ("401 Unauthorized", "WWW-Authenticate: Basic realm=\"keelson-test\"\r\n", r#"{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}"#)
                };
                let _ = write!(
                    conn,
                    "HTTP/1.1 {status}\r\nDocker-Distribution-API-Version: registry/2.0\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        FakeRegistry { port: rx.recv().expect("the registry's port"), seen }
    }
}
