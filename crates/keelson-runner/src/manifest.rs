//! `cluster.json` (every member: name, kind, pid, addresses, data directory) and the
//! admin kubeconfig, both kept in the cluster's directory.
//!
//! ```json
//! {"topology": "netns", "run_id": "a1b2c3", "subnet": "192.0.2.0", "pod_net": "10.42.0.0",
//!  "host_addr": "192.0.2.1",
//!  "members": [
//!   {"name": "keelson-1", "kind": "server", "pid": 4242, "running": true, "netns": "kca1b2c3-n0",
//!    "addr": "192.0.2.10", "raft_addr": "192.0.2.10:2380", "api_addr": "192.0.2.10:6443",
//!    "metrics_addr": "192.0.2.10:2381", "data_dir": "…/keelson-1", "log": "…/keelson-1.log"},
//!   {"name": "node-1", "kind": "node", "pid": 4250, "running": true, "netns": "kca1b2c3-n3",
//!    "addr": "192.0.2.13", "pod_cidr": "10.42.0.0/24", "data_dir": "…/node-1", "log": "…/node-1.log"}]}
//! ```

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::RunnerError;

/// What a member runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemberKind {
    /// `keelson server`: a store replica with the Kubernetes API and the components.
    Server,
    /// `keelson agent` in its own network namespace, with the containerd it starts.
    Node,
}

/// One member as `cluster.json` records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberEntry {
    pub name: String,
    pub kind: MemberKind,
    pub pid: Option<u32>,
    pub running: bool,
    /// Its network namespace (namespace topology).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns: Option<String>,
    /// Its IP address.
    pub addr: String,
    /// Its IPv6 address (a dual-stack cluster).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub addr6: String,
    /// Store (gRPC, Raft) `ip:port` (servers).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub raft_addr: String,
    /// The Kubernetes API (HTTPS) `ip:port` (servers).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_addr: String,
    /// The metrics page `ip:port` (servers).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub metrics_addr: String,
    /// Pod addresses (nodes): one CIDR, or an IPv4 and an IPv6 one, comma-separated.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pod_cidr: String,
    pub data_dir: PathBuf,
    /// Its stdout and stderr.
    pub log: PathBuf,
}

/// The whole of `cluster.json`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// `loopback` or `netns`.
    pub topology: String,
    /// The run id of the namespaces, veths and owner file (`kc<id>…`).
    #[serde(default)]
    pub run_id: String,
    /// Network address of the members' /24 (namespace topology).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet: Option<Ipv4Addr>,
    /// Network address of the pods' /16 (namespace topology).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_net: Option<Ipv4Addr>,
    /// The host's own address on the bridge (namespace topology).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_addr: Option<Ipv4Addr>,
    /// A dual-stack cluster's IPv6 networks: the members' /64 and the pods' /48.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet6: Option<Ipv6Addr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_net6: Option<Ipv6Addr>,
    pub members: Vec<MemberEntry>,
}

impl Manifest {
    /// The servers, in order.
    pub fn servers(&self) -> impl Iterator<Item = &MemberEntry> {
        self.members.iter().filter(|m| m.kind == MemberKind::Server)
    }

    /// The nodes, in order.
    pub fn nodes(&self) -> impl Iterator<Item = &MemberEntry> {
        self.members.iter().filter(|m| m.kind == MemberKind::Node)
    }

    /// `DIR/cluster.json`, or `None` when there is none.
    pub fn load(dir: &Path) -> Result<Option<Manifest>, RunnerError> {
        let path = dir.join("cluster.json");
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| RunnerError::Manifest(format!("{}: {e}", path.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(RunnerError::Io { context: path.display().to_string(), source: e }),
        }
    }

    /// Writes `DIR/cluster.json` atomically.
    pub(crate) fn save(&self, dir: &Path) -> Result<(), RunnerError> {
        let path = dir.join("cluster.json");
        let tmp = dir.join("cluster.json.tmp");
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| RunnerError::Manifest(e.to_string()))?;
        std::fs::write(&tmp, bytes).map_err(RunnerError::io(tmp.display().to_string()))?;
        std::fs::rename(&tmp, &path).map_err(RunnerError::io(path.display().to_string()))
    }
}

/// The cluster CA (created once in `DIR/pki`), the admin identity, and `DIR/kubeconfig`:
/// one context per server (`keelson-1` …), admin credentials, current context the first.
pub(crate) fn write_kubeconfig(dir: &Path, manifest: &Manifest) -> Result<keelson_client::PeerTls, RunnerError> {
    let pki = dir.join("pki");
    let material = keelson_pki::ClusterMaterial::load_or_create(&pki, "keelson").map_err(RunnerError::Pki)?;
    let ca = material.ca;
    let admin = ca
        .load_or_issue(&pki, "admin", |ca| ca.issue_client(keelson_pki::ADMIN_USER, &[keelson_pki::ADMIN_GROUP]))
        .map_err(RunnerError::Pki)?;
    let contexts: Vec<_> = manifest
        .servers()
        .map(|s| keelson_pki::KubeconfigContext { name: s.name.clone(), server: format!("https://{}", s.api_addr) })
        .collect();
    let text = keelson_pki::kubeconfig(&contexts, ca.cert_pem(), "admin", &admin);
    let path = dir.join("kubeconfig");
    std::fs::write(&path, text).map_err(RunnerError::io(path.display().to_string()))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).map_err(RunnerError::io(path.display().to_string()))?;
    Ok(keelson_client::PeerTls::new(ca.cert_pem(), admin.cert_pem, admin.key_pem))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_round_trip_and_split_by_kind() {
        let entry = |name: &str, kind| MemberEntry {
            name: name.into(),
            kind,
            pid: Some(1),
            running: true,
            netns: None,
            addr: "127.0.0.1".into(),
            addr6: String::new(),
            raft_addr: if kind == MemberKind::Server { "127.0.0.1:1".into() } else { String::new() },
            api_addr: String::new(),
            metrics_addr: String::new(),
            pod_cidr: String::new(),
            data_dir: PathBuf::from("/d"),
            log: PathBuf::from("/d.log"),
        };
        let m = Manifest {
            topology: "loopback".into(),
            members: vec![entry("keelson-1", MemberKind::Server), entry("node-1", MemberKind::Node)],
            ..Default::default()
        };
        let text = serde_json::to_string(&m).unwrap();
        assert!(text.contains(r#""kind":"node""#) && !text.contains("pod_cidr") && !text.contains("addr6"), "{text}");
        let back: Manifest = serde_json::from_str(&text).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.servers().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["keelson-1"]);
        assert_eq!(back.nodes().count(), 1);
    }
}
