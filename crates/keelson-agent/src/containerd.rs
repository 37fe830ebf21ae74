//! The node's own containerd: a configuration of its own (root, state, socket and runc
//! root inside the agent's data directory, so several nodes on one host never share
//! containers), started and stopped by the agent. Facts behind the settings are in
//! ARCHITECTURE.md ("Node runtime").

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// Starting containerd failed.
#[derive(Debug, thiserror::Error)]
pub enum ContainerdError {
    #[error("writing {path}: {source}")]
    Write { path: PathBuf, #[source] source: std::io::Error },
    #[error("starting {binary}: {source}")]
    Spawn { binary: String, #[source] source: std::io::Error },
    #[error("containerd exited during start-up (see {log})")]
    Exited { log: PathBuf },
    #[error("containerd did not answer on {socket} within {seconds}s (see {log})")]
    Timeout { socket: PathBuf, seconds: u64, log: PathBuf },
}

/// Where a node's containerd keeps everything.
#[derive(Clone, Debug)]
pub struct ContainerdLayout {
    pub dir: PathBuf,
    pub cni_conf_dir: PathBuf,
    pub cni_bin_dir: PathBuf,
    pub sandbox_image: String,
}

impl ContainerdLayout {
    pub fn new(data_dir: &Path, sandbox_image: &str) -> Self {
        Self { dir: data_dir.join("containerd"), cni_conf_dir: data_dir.join("cni/net.d"), cni_bin_dir: PathBuf::from("/usr/lib/cni"), sandbox_image: sandbox_image.into() }
    }
    pub fn socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }
    pub fn config_path(&self) -> PathBuf {
        self.dir.join("config.toml")
    }
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("containerd.log")
    }
    pub fn pid_path(&self) -> PathBuf {
        self.dir.join("containerd.pid")
    }
}

/// Stops a containerd an earlier agent on this data directory left running (it was
/// killed before it could stop it): two daemons must never share one root.
async fn stop_leftover(layout: &ContainerdLayout) {
    let Some(pid) = std::fs::read_to_string(layout.pid_path()).ok().and_then(|p| p.trim().parse::<i32>().ok()) else { return };
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let ours = String::from_utf8_lossy(&cmdline).contains(&layout.config_path().display().to_string());
    if !ours {
        return;
    }
    tracing::info!(pid, "stopping the containerd a previous agent left running");
    // SAFETY: kill(2) on a pid whose command line names our own configuration.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    for _ in 0..100 {
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    tokio::time::sleep(Duration::from_millis(200)).await;
}

/// containerd's configuration (version 2) for `layout`.
pub fn render_config(layout: &ContainerdLayout) -> String {
    let d = layout.dir.display();
    format!(
        r#"# Written by keelson agent; regenerated at every start.
version = 2
root = "{d}/root"
state = "{d}/state"
oom_score = 0

[grpc]
  address = "{sock}"

[ttrpc]
  address = "{sock}.ttrpc"

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "{sandbox}"
    netns_mounts_under_state_dir = true
    restrict_oom_score_adj = true
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = "{d}/runc"
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "{bin}"
      conf_dir = "{conf}"
"#,
        sock = layout.socket().display(),
        sandbox = layout.sandbox_image,
        bin = layout.cni_bin_dir.display(),
        conf = layout.cni_conf_dir.display(),
    )
}

/// A containerd the agent started.
pub struct Containerd {
    child: tokio::process::Child,
    pub layout: ContainerdLayout,
}

impl Containerd {
    /// Writes the configuration, starts `binary` and waits until its socket accepts.
    pub async fn start(binary: &str, layout: ContainerdLayout) -> Result<Self, ContainerdError> {
        for dir in [&layout.dir, &layout.cni_conf_dir] {
            std::fs::create_dir_all(dir).map_err(|source| ContainerdError::Write { path: dir.clone(), source })?;
        }
        let config = layout.config_path();
        std::fs::write(&config, render_config(&layout)).map_err(|source| ContainerdError::Write { path: config.clone(), source })?;
        stop_leftover(&layout).await;
        let log = std::fs::File::create(layout.log_path()).map_err(|source| ContainerdError::Write { path: layout.log_path(), source })?;
        let _ = std::fs::remove_file(layout.socket());
        let mut child = tokio::process::Command::new(binary)
            .arg("--config")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| ContainerdError::Spawn { binary: binary.into(), source })?;
        if let Some(pid) = child.id() {
            let _ = std::fs::write(layout.pid_path(), pid.to_string());
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if tokio::net::UnixStream::connect(layout.socket()).await.is_ok() {
                break;
            }
            if child.try_wait().ok().flatten().is_some() {
                return Err(ContainerdError::Exited { log: layout.log_path() });
            }
            if tokio::time::Instant::now() > deadline {
                return Err(ContainerdError::Timeout { socket: layout.socket(), seconds: 30, log: layout.log_path() });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tracing::info!(socket = %layout.socket().display(), "containerd started");
        Ok(Self { child, layout })
    }

    /// Stops containerd (SIGTERM, then SIGKILL after 10 s). Containers keep running in
    /// their shims; the next containerd on the same root finds them again.
    pub async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        }
        if tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await.is_err() {
            let _ = self.child.kill().await;
        }
        let _ = std::fs::remove_file(self.layout.pid_path());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_path_is_the_nodes_own() {
        let layout = ContainerdLayout::new(Path::new("/var/lib/n1"), "keelson.local/pause:3.10");
        let c = render_config(&layout);
        for needle in [
            "root = \"/var/lib/n1/containerd/root\"",
            "state = \"/var/lib/n1/containerd/state\"",
            "address = \"/var/lib/n1/containerd/containerd.sock\"",
            "Root = \"/var/lib/n1/containerd/runc\"",
            "conf_dir = \"/var/lib/n1/cni/net.d\"",
            "sandbox_image = \"keelson.local/pause:3.10\"",
            "restrict_oom_score_adj = true",
        ] {
            assert!(c.contains(needle), "{needle} missing from:\n{c}");
        }
    }
}
