//! The status page at `/ui` on real `keelson server` processes, in headless Chromium:
//! behind the API's authentication (401 without credentials, the page and its document
//! with the admin's), reached the way an operator opens it (`kubectl proxy`), it draws
//! the three servers, the component Leases, the nodes and a timeline; when the Raft
//! leader is killed, the same page (never reloaded) shows it unreachable, the new
//! leader and term, and the fault in its timeline.

mod browser_support;
mod cluster_support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use browser_support::{browser_possible, Browser};
use cluster_support::{client, eventually, start_short_elections};
use serde_json::Value;

/// `kubectl proxy` to one server's API on a free loopback port; killed on drop.
struct Proxy {
    child: Child,
    url: String,
}

impl Proxy {
    fn start(kubeconfig: &std::path::Path, context: &str) -> Proxy {
        let mut child = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--context", context, "proxy", "--port=0", "--address=127.0.0.1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("kubectl proxy starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).expect("kubectl proxy says where it serves");
        // "Starting to serve on 127.0.0.1:PORT"
        let addr = line.trim().rsplit(' ').next().unwrap_or_default().to_string();
        assert!(addr.contains(':'), "kubectl proxy said {line:?}");
        Proxy { child, url: format!("http://{addr}") }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the page shows, read off its DOM.
const PAGE_STATE: &str = r##"(() => {
  const members = [...document.querySelectorAll("[data-member]")].map(m => ({
    name: m.dataset.member, reachable: m.dataset.reachable === "true", api: m.dataset.api, role: m.dataset.role }));
  return {
    refreshes: Number(document.body.dataset.refreshes || 0),
    leader: document.getElementById("leader").textContent,
    term: Number(document.getElementById("term").textContent),
    server: document.getElementById("server").textContent,
    members,
    leases: [...document.querySelectorAll("[data-lease]")].map(l => l.textContent),
    nodes: [...document.querySelectorAll("[data-node]")].map(n => n.dataset.node + "=" + n.dataset.ready),
    timeline: [...document.querySelectorAll("#timeline li")].map(li => ({ kind: li.dataset.kind, subject: li.dataset.subject,
      fault: li.classList.contains("fault"), text: li.textContent })),
    bands: document.querySelectorAll("#terms rect").length,
    marker: window.__testMarker || null,
    navigations: performance.getEntriesByType("navigation").length,
  };
})()"##;

/// Reads the page every 500 ms until `shown` holds of what it draws, failing after `within`.
async fn page_until(browser: &mut Browser, what: &str, within: Duration, shown: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let last = browser.eval(PAGE_STATE).await;
        if let Ok(s) = &last {
            if shown(s) {
                return s.clone();
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: not within {within:?}; last drawn: {last:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_status_page_draws_the_cluster_and_follows_a_killed_leader() {
    if !browser_possible("the /ui status page in headless Chromium") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    let mut cluster = start_short_elections(&dir).await;
    let admin = client(&cluster, "keelson-1").await;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let hollow = tokio::spawn(keelson_agent::hollow::run(admin.clone(), keelson_agent::hollow::HollowConfig::new("hollow", 2), shutdown.clone()));

    // Without credentials: the API's own 401, for the page and its document alike.
    let anonymous = {
        let kc = kube::config::Kubeconfig::read_from(cluster.kubeconfig_path()).unwrap();
        let opts = kube::config::KubeConfigOptions { context: Some("keelson-1".into()), ..Default::default() };
        let mut config = kube::Config::from_custom_kubeconfig(kc, &opts).await.unwrap();
        config.auth_info = Default::default();
        config.default_retry = false;
        kube::Client::try_from(config).unwrap()
    };
    for path in ["/ui", "/ui/status"] {
        match anonymous.request_text(http::Request::get(path).body(Vec::new()).unwrap()).await {
            Err(kube::Error::Api(s)) => assert_eq!(s.code, 401, "{path} without credentials: {s:?}"),
            other => panic!("{path} without credentials answered {other:?}"),
        }
    }

    // With them: the document names the three members and their leader.
    let doc: Value = eventually("the status document with a leader and three ready APIs", Duration::from_secs(60), || async {
        let text = admin.request_text(http::Request::get("/ui/status").body(Vec::new()).unwrap()).await.map_err(|e| e.to_string())?;
        let doc: Value = serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))?;
        let ready = doc["members"].as_array().map_or(0, |m| m.iter().filter(|m| m["reachable"] == true && m["api"]["state"] == "ready").count());
        if !doc["leader"].is_string() || ready != 3 {
            return Err(format!("not whole yet: {doc}"));
        }
        Ok(doc)
    })
    .await;
    assert_eq!(doc["server"], "keelson-1");
    let leader = doc["leader"].as_str().unwrap().to_string();
    let leader_index: usize = leader.strip_prefix("keelson-").and_then(|n| n.parse::<usize>().ok()).expect("a server name") - 1;
    // The page is opened through a server that will stay up.
    let viewer = if leader_index == 0 { "keelson-2" } else { "keelson-1" };

    let proxy = Proxy::start(&cluster.kubeconfig_path(), viewer);
    let mut browser = Browser::launch().await;
    browser.navigate(&format!("{}/ui/", proxy.url)).await;
    let whole = page_until(&mut browser, "the page drawing the whole cluster", Duration::from_secs(60), |s| {
        let ready = s["members"].as_array().map_or(0, |m| m.iter().filter(|m| m["reachable"] == true && m["api"] == "ready").count());
        let nodes_ready = s["nodes"].as_array().map_or(0, |n| n.iter().filter(|n| n.as_str().is_some_and(|n| n.ends_with("=True"))).count());
        let held = s["leases"].as_array().map_or(0, |l| l.iter().filter(|l| l.as_str().is_some_and(|t| t.contains("keelson-"))).count());
        ready == 3 && nodes_ready == 2 && held == 2 && s["leader"] == leader.as_str()
    })
    .await;
    eprintln!("the page, whole: {whole:#}");
    assert_eq!(whole["server"], viewer);
    assert!(whole["timeline"].as_array().is_some_and(|t| t.iter().any(|e| e["kind"] == "leader")), "a leader entry in the timeline: {whole}");
    assert!(whole["bands"].as_u64().is_some_and(|n| n >= 1), "the leaders' strip is drawn: {whole}");
    let term_before = whole["term"].as_u64().unwrap();
    if let Some(path) = std::env::var_os("KEELSON_UI_SCREENSHOT") {
        browser.screenshot(std::path::Path::new(&path)).await;
    }
    // Marks this page load: seen again below, the page was never reloaded.
    browser.eval("window.__testMarker = 'before the kill'").await.unwrap();

    cluster.kill(leader_index).await.unwrap();
    let after = page_until(&mut browser, "the same page showing the killed leader and the new one", Duration::from_secs(90), |s| {
        let killed = s["members"].as_array().and_then(|m| m.iter().find(|m| m["name"] == leader.as_str())).cloned().unwrap_or_default();
        let new_leader = s["leader"].as_str().unwrap_or_default();
        let fault = s["timeline"].as_array().is_some_and(|t| t.iter().any(|e| e["subject"] == leader.as_str() && e["fault"] == true && e["kind"] == "member"));
        let new_term = s["timeline"].as_array().is_some_and(|t| t.iter().any(|e| e["kind"] == "leader" && e["subject"] == new_leader && e["fault"] == false));
        killed["reachable"] == false && killed["api"] == "down" && new_leader != leader && new_leader.starts_with("keelson-") && fault && new_term
    })
    .await;
    eprintln!("the page, after killing {leader}: {after:#}");
    assert_eq!(after["marker"], "before the kill", "the page was reloaded");
    assert_eq!(after["navigations"], 1);
    assert!(after["term"].as_u64().unwrap() > term_before, "a new term: {after}");
    assert!(after["refreshes"].as_u64().unwrap() > whole["refreshes"].as_u64().unwrap());
    let alive = after["members"].as_array().unwrap().iter().filter(|m| m["reachable"] == true && m["api"] == "ready").count();
    assert_eq!(alive, 2, "the other two stay healthy: {after}");
    assert!(after["bands"].as_u64().is_some_and(|n| n >= 2), "the strip shows the new leadership: {after}");
    if let Some(path) = std::env::var_os("KEELSON_UI_SCREENSHOT_AFTER") {
        browser.screenshot(std::path::Path::new(&path)).await;
    }

    drop(browser);
    drop(proxy);
    shutdown.cancel();
    let _ = hollow.await;
    cluster.stop(Duration::from_secs(10)).await.unwrap();
}
