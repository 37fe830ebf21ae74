//! Headless Chromium (Debian's `chromium`) driven over the DevTools protocol, for tests
//! of pages the servers serve: one tab, `navigate`, `eval` (JSON results) and
//! `screenshot`. The browser runs with a fresh profile in a temporary directory and no
//! background networking, and is killed (and its profile removed) on drop.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

pub const CHROMIUM: &str = "/usr/bin/chromium";

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Whether a browser test can run; when it cannot, says so loudly, and fails if
/// KEELSON_REQUIRE_NODE_TESTS is set (CI installs chromium and sets it).
pub fn browser_possible(what: &str) -> bool {
    if Path::new(CHROMIUM).exists() {
        return true;
    }
    assert!(std::env::var_os("KEELSON_REQUIRE_NODE_TESTS").is_none(), "browser tests required but {CHROMIUM} is missing (apt-get install chromium)");
    eprintln!("SKIPPED (needs {CHROMIUM}: apt-get install chromium): {what}; CI runs this");
    false
}

/// One headless browser with one tab.
pub struct Browser {
    child: Child,
    socket: Socket,
    session: String,
    next_id: u64,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts Chromium and opens a blank tab.
    pub async fn launch() -> Browser {
        let profile = tempfile::tempdir().expect("profile dir");
        let child = Command::new(CHROMIUM)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-dev-shm-usage",
                "--remote-debugging-port=0",
                "--window-size=1280,900",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromium starts");
        let endpoint = devtools_endpoint(profile.path()).await;
        let (socket, _) = tokio_tungstenite::connect_async(endpoint.as_str()).await.expect("DevTools WebSocket");
        let mut b = Browser { child, socket, session: String::new(), next_id: 0, _profile: profile };
        let target = b.call(None, "Target.createTarget", json!({"url": "about:blank"})).await;
        let target_id = target["targetId"].as_str().expect("targetId").to_string();
        let attached = b.call(None, "Target.attachToTarget", json!({"targetId": target_id, "flatten": true})).await;
        b.session = attached["sessionId"].as_str().expect("sessionId").to_string();
        b.tab("Page.enable", json!({})).await;
        b.tab("Runtime.enable", json!({})).await;
        b
    }

    /// Opens `url` in the tab (returns once the navigation is committed).
    pub async fn navigate(&mut self, url: &str) {
        let r = self.tab("Page.navigate", json!({"url": url})).await;
        assert!(r.get("errorText").is_none(), "navigating to {url}: {r}");
    }

    /// The value of a JavaScript expression in the page (awaited if it is a promise).
    pub async fn eval(&mut self, expression: &str) -> Result<Value, String> {
        let r = self.tab("Runtime.evaluate", json!({"expression": expression, "returnByValue": true, "awaitPromise": true})).await;
        if let Some(e) = r.get("exceptionDetails") {
            return Err(format!("{expression}: {e}"));
        }
        Ok(r["result"].get("value").cloned().unwrap_or(Value::Null))
    }

    /// A PNG of the tab as it is drawn now.
    pub async fn screenshot(&mut self, to: &Path) {
        use base64::Engine;
        let r = self.tab("Page.captureScreenshot", json!({"format": "png"})).await;
        let png = base64::engine::general_purpose::STANDARD.decode(r["data"].as_str().expect("screenshot data")).expect("base64");
        std::fs::write(to, png).expect("writing the screenshot");
    }

    async fn tab(&mut self, method: &str, params: Value) -> Value {
        let session = self.session.clone();
        self.call(Some(&session), method, params).await
    }

    /// Sends one command and waits for its answer, passing over events.
    async fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        self.socket.send(Message::text(msg.to_string())).await.unwrap_or_else(|e| panic!("{method}: {e}"));
        let answer = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(m) = self.socket.next().await {
                let Ok(Message::Text(text)) = m else { continue };
                let v: Value = serde_json::from_str(&text).expect("DevTools sends JSON");
                if v["id"] == id {
                    return v;
                }
            }
            panic!("{method}: the browser closed the DevTools connection");
        })
        .await
        .unwrap_or_else(|_| panic!("{method}: no answer from the browser within 30 s"));
        if let Some(e) = answer.get("error") {
            panic!("{method}: {e}");
        }
        answer["result"].clone()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The browser's DevTools WebSocket, from the `DevToolsActivePort` file it writes in its
/// profile (port, then path) once it listens.
async fn devtools_endpoint(profile: &Path) -> String {
    let file: PathBuf = profile.join("DevToolsActivePort");
    for _ in 0..300 {
        if let Ok(text) = std::fs::read_to_string(&file) {
            let mut lines = text.lines();
            if let (Some(port), Some(path)) = (lines.next(), lines.next()) {
                return format!("ws://127.0.0.1:{port}{path}");
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("chromium wrote no {} within 30 s", file.display());
}
