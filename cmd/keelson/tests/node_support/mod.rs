//! What the tests of real nodes share: a network namespace per node with a veth to the
//! host (where the API server listens), child processes stopped on drop, a one-server
//! cluster with a node token, and `keelson agent` started inside the namespace.
#![allow(dead_code)]

pub mod registry;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

pub fn missing_tools() -> Vec<&'static str> {
    ["/usr/bin/containerd", "/usr/bin/ctr", "/usr/sbin/runc", "/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/bin/busybox", "/usr/bin/nsenter", "/usr/bin/curl", "/usr/sbin/nft", "/usr/lib/cni/portmap", "/usr/sbin/iptables", "/usr/bin/script"]
        .into_iter()
        .filter(|p| !Path::new(p).exists())
        .collect()
}

/// Whether this test can run; when it cannot, says so loudly, and fails if
/// KEELSON_REQUIRE_NODE_TESTS is set.
pub fn node_tests_possible(what: &str) -> bool {
    if is_root() && missing_tools().is_empty() {
        return true;
    }
    assert!(std::env::var_os("KEELSON_REQUIRE_NODE_TESTS").is_none(), "node tests required but root={} missing={:?}", is_root(), missing_tools());
    eprintln!("SKIPPED (needs root and {:?}): {what}; CI runs this as root", missing_tools());
    false
}

pub fn sh(args: &[&str]) -> std::process::Output {
    Command::new(args[0]).args(&args[1..]).output().unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

pub fn ok(args: &[&str]) {
    let o = sh(args);
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
}

/// A network namespace for the node and a veth to the host, removed on drop.
pub struct NodeNet {
    pub ns: String,
    pub host_if: String,
    pub host_ip: String,
    pub node_ip: String,
}

impl NodeNet {
    /// The namespace of node `index` (0, 1, …) of this test process.
    pub fn create(index: u32) -> Self {
        let id = (std::process::id() % 100) * 2 + 20 + index;
        let ns = format!("kagent-{}-{index}", std::process::id());
        let host_if = format!("kag{}h{index}", std::process::id() % 100_000);
        let (host_ip, node_ip) = (format!("10.215.{id}.1"), format!("10.215.{id}.2"));
        let _ = sh(&["ip", "netns", "del", &ns]);
        let _ = sh(&["ip", "link", "del", &host_if]);
        ok(&["ip", "netns", "add", &ns]);
        let net = NodeNet { ns: ns.clone(), host_if: host_if.clone(), host_ip: host_ip.clone(), node_ip: node_ip.clone() };
        ok(&["ip", "link", "add", &host_if, "type", "veth", "peer", "name", "eth0", "netns", &ns]);
        ok(&["ip", "addr", "add", &format!("{host_ip}/30"), "dev", &host_if]);
        ok(&["ip", "link", "set", &host_if, "up"]);
        ok(&["ip", "-n", &ns, "addr", "add", &format!("{node_ip}/30"), "dev", "eth0"]);
        ok(&["ip", "-n", &ns, "link", "set", "eth0", "up"]);
        ok(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
        ok(&["ip", "-n", &ns, "route", "add", "default", "via", &host_ip]);
        net
    }

    pub fn netns_path(&self) -> String {
        format!("--net=/run/netns/{}", self.ns)
    }

    /// `curl` from inside the node.
    pub fn curl(&self, url: &str) -> String {
        let o = sh(&["nsenter", &self.netns_path(), "curl", "-s", "-m", "3", url]);
        String::from_utf8_lossy(&o.stdout).to_string()
    }
}

impl Drop for NodeNet {
    fn drop(&mut self) {
        let _ = sh(&["ip", "link", "del", &self.host_if]);
        let _ = sh(&["ip", "netns", "del", &self.ns]);
    }
}

/// A child process, stopped (SIGTERM, then SIGKILL after 40 s) on drop.
pub struct Proc(pub Child);

impl Proc {
    pub fn terminate(&mut self, wait: Duration) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let deadline = std::time::Instant::now() + wait;
        while std::time::Instant::now() < deadline {
            if self.0.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            self.terminate(Duration::from_secs(40));
        }
    }
}

pub fn keelson() -> &'static str {
    env!("CARGO_BIN_EXE_keelson")
}

pub fn free_port() -> u16 {
    keelson_runner::free_loopback_port().unwrap()
}

pub async fn poll<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// One `keelson server` listening for the API on the host side of `net`'s veth, with an
/// admin client and a node join token.
pub struct Server {
    pub proc: Proc,
    pub url: String,
    pub kubeconfig: PathBuf,
    pub client: kube::Client,
    pub token: String,
}

pub async fn start_server(net: &NodeNet, dir: &Path) -> Server {
    let api = format!("{}:{}", net.host_ip, free_port());
    let log = std::fs::File::create(dir.join("server.log")).unwrap();
    let proc = Proc(
        Command::new(keelson())
            .args(["server", "--cluster-init", "--name", "s1", "--listen", &format!("127.0.0.1:{}", free_port()), "--api-listen", &api])
            .arg("--data-dir")
            .arg(dir.join("s1"))
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap(),
    );
    let kubeconfig = dir.join("s1/pki/admin.kubeconfig");
    poll("the admin kubeconfig", Duration::from_secs(60), || async { kubeconfig.exists().then_some(()) }).await;
    let kc = kube::config::Kubeconfig::read_from(&kubeconfig).unwrap();
    let client = kube::Client::try_from(kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap()).unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    poll("the API", Duration::from_secs(60), || async { nodes.list(&ListParams::default()).await.ok() }).await;
    let token = Command::new(keelson()).args(["token", "create", "--usage", "node", "--kubeconfig"]).arg(&kubeconfig).output().unwrap();
    assert!(token.status.success(), "{}", String::from_utf8_lossy(&token.stderr));
    let token = String::from_utf8(token.stdout).unwrap().trim().lines().last().unwrap().to_string();
    Server { proc, url: format!("https://{api}"), kubeconfig, client, token }
}

/// `keelson agent` as node `name` inside `net`, logging to `dir/<log>`.
pub fn start_agent(net: &NodeNet, dir: &Path, server: &str, token: &str, name: &str, pod_cidr: &str, log: &str) -> Proc {
    let log = std::fs::File::create(dir.join(log)).unwrap();
    let child = Command::new("nsenter")
        .arg(net.netns_path())
        .arg(keelson())
        .args(["agent", "--server", server, "--token", token, "--name", name, "--pod-cidr", pod_cidr, "--heartbeat", "2s", "--stop-pods-on-exit", "--eviction-hard", "nodefs.available<0%"])
        .arg("--data-dir")
        .arg(dir.join(name))
        .env("KEELSON_LOG", "info,keelson_agent=debug,keelson_proxy=debug,keelson_dns=debug")
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .spawn()
        .unwrap();
    Proc(child)
}

/// Waits until node `name` is Ready.
pub async fn node_ready(client: &kube::Client, name: &str) -> Node {
    let nodes: Api<Node> = Api::all(client.clone());
    poll(&format!("node {name} Ready"), Duration::from_secs(60), || async {
        let n = nodes.get_opt(name).await.ok().flatten()?;
        let st = n.status.as_ref()?;
        st.conditions.as_ref()?.iter().any(|c| c.type_ == "Ready" && c.status == "True").then_some(n)
    })
    .await
}

/// A one-server cluster and one Ready agent in a node namespace of their own, with the
/// test's directory; dropped in field order: agent, server, namespace, directory.
pub struct OneNode {
    pub agent: Proc,
    pub cluster: Server,
    pub net: NodeNet,
    pub dir: PathBuf,
    _tmp: tempfile::TempDir,
}

/// Starts [`OneNode`]: node `name` with podCIDR `pod_cidr`, logging to `agent.log`.
pub async fn one_node(name: &str, pod_cidr: &str) -> OneNode {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let net = NodeNet::create(0);
    let cluster = start_server(&net, &dir).await;
    let agent = start_agent(&net, &dir, &cluster.url, &cluster.token, name, pod_cidr, "agent.log");
    node_ready(&cluster.client, name).await;
    OneNode { agent, cluster, net, dir, _tmp: tmp }
}
