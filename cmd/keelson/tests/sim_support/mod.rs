//! Shared by the multi-process tests that run a node agent on the simulated runtime: a
//! node token, `keelson agent --runtime simulated` against every server of a cluster, its
//! log kept in the test's directory, and the agent stopped (SIGTERM, then SIGKILL) when
//! the handle is dropped.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::api::Api;

/// A running simulated agent.
pub struct SimulatedAgent {
    child: Child,
    log: PathBuf,
    pub name: String,
}

impl SimulatedAgent {
    /// Starts node `name` with pod CIDR `pod_cidr` in `dir/<name>`, given `more` flags.
    pub fn start(binary: &Path, cluster: &keelson_runner::Cluster, dir: &Path, name: &str, pod_cidr: &str, more: &[String]) -> Self {
        let kubeconfig = cluster.kubeconfig_path();
        let token = Command::new(binary).args(["token", "create", "--usage", "node", "--kubeconfig"]).arg(&kubeconfig).output().unwrap();
        assert!(token.status.success(), "{}", String::from_utf8_lossy(&token.stderr));
        let token = String::from_utf8(token.stdout).unwrap().trim().lines().last().unwrap().to_string();
        let log = dir.join(format!("{name}.log"));
        let mut agent = Command::new(binary);
        agent.args(["agent", "--runtime", "simulated", "--name", name, "--node-ip", "127.0.0.1", "--kubelet-port", "0", "--heartbeat", "2s"]);
        agent.args(["--ingress-http-port", "0", "--ingress-https-port", "0", "--pod-cidr", pod_cidr, "--eviction-hard", "nodefs.available<0%"]);
        agent.args(more);
        for url in cluster.api_endpoints() {
            agent.args(["--server", &format!("https://{url}")]);
        }
        let stderr = std::fs::File::create(&log).unwrap();
        let child = agent.arg("--data-dir").arg(dir.join(name)).env("KEELSON_TOKEN", &token).stdout(Stdio::null()).stderr(Stdio::from(stderr)).spawn().unwrap();
        Self { child, log, name: name.into() }
    }

    /// What the agent has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the agent's Node is Ready, and returns it.
    pub async fn wait_ready(&self, client: &kube::Client, within: Duration) -> Node {
        let nodes: Api<Node> = Api::all(client.clone());
        let deadline = Instant::now() + within;
        loop {
            let n = nodes.get_opt(&self.name).await.ok().flatten();
            let ready = n.as_ref().and_then(|n| n.status.as_ref()?.conditions.as_ref()).is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            if ready {
                return n.unwrap();
            }
            assert!(Instant::now() < deadline, "node {} not Ready within {within:?}: {:?}\nagent log:\n{}", self.name, n.and_then(|n| n.status), self.log());
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

impl Drop for SimulatedAgent {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
