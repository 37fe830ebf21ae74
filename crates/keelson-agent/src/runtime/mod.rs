//! The container runtime an agent drives, as the kubelet drives CRI: sandboxes (one per
//! pod: its network namespace and IP) and containers inside them. [`cri`] implements it
//! over containerd's CRI plugin. Everything the pod worker decides is computed from the
//! [`SandboxInfo`] and [`ContainerInfo`] it lists, so the decisions stay pure.
//! [`simulated`] implements it without containers, for agents on machines without a
//! container runtime.

pub mod cri;
pub mod simulated;

use std::collections::BTreeMap;
use std::time::Duration;

/// Labels the agent puts on every sandbox and container, as the kubelet does.
pub const LABEL_POD_UID: &str = "io.kubernetes.pod.uid";
pub const LABEL_POD_NAME: &str = "io.kubernetes.pod.name";
pub const LABEL_POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
pub const LABEL_CONTAINER_NAME: &str = "io.kubernetes.container.name";

/// A runtime call failed.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("connecting to the container runtime at {endpoint}: {message}")]
    Connect { endpoint: String, message: String },
    #[error("{call}: {message}")]
    Call { call: &'static str, message: String },
    #[error("image {0} is not present on the node")]
    ImageMissing(String),
}

/// What a sandbox is made from.
#[derive(Clone, Debug, Default)]
pub struct SandboxSpec {
    pub pod_name: String,
    pub namespace: String,
    pub uid: String,
    pub attempt: u32,
    pub hostname: String,
    pub host_network: bool,
    pub log_directory: String,
    pub labels: BTreeMap<String, String>,
    /// The pod's annotations, passed on as the kubelet passes them.
    pub annotations: BTreeMap<String, String>,
    pub dns_servers: Vec<String>,
    pub dns_searches: Vec<String>,
    pub dns_options: Vec<String>,
    pub port_mappings: Vec<PortMapping>,
    pub cgroup_parent: String,
}

/// Credentials for one registry (CRI's `AuthConfig`), from an image pull secret.
#[derive(Clone, Default, PartialEq)]
pub struct RegistryAuth {
    pub username: String,
    pub password: String,
    pub server_address: String,
    pub identity_token: String,
    pub registry_token: String,
}

impl std::fmt::Debug for RegistryAuth {
    /// Never the secrets themselves.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryAuth").field("username", &self.username).field("server_address", &self.server_address).finish_non_exhaustive()
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct PortMapping {
    pub protocol: String,
    pub container_port: i32,
    pub host_port: i32,
    pub host_ip: String,
}

/// A sandbox as the runtime lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct SandboxInfo {
    pub id: String,
    pub uid: String,
    pub attempt: u32,
    pub ready: bool,
    pub ip: Option<String>,
    /// The pod's addresses of its other families (its IPv6 one on a dual-stack node).
    pub additional_ips: Vec<String>,
    pub created_at_ns: i64,
}

/// A host path mounted into a container.
#[derive(Clone, Debug, PartialEq)]
pub struct MountSpec {
    pub container_path: String,
    pub host_path: String,
    pub read_only: bool,
}

/// What a container is made from.
#[derive(Clone, Debug, Default)]
pub struct ContainerSpec {
    pub name: String,
    pub attempt: u32,
    pub image: String,
    pub command: Vec<String>,
    pub args: Vec<String>,
    pub working_dir: String,
    pub env: Vec<(String, String)>,
    pub mounts: Vec<MountSpec>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub log_path: String,
    pub resources: LinuxResources,
    pub run_as_user: Option<i64>,
    pub privileged: bool,
    pub tty: bool,
    pub stdin: bool,
    /// Close the container's stdin when the first attach session that had it ends.
    pub stdin_once: bool,
    /// An init container (what a simulated runtime runs to completion; CRI has no word
    /// for it).
    pub init: bool,
}

/// cgroup settings derived from requests and limits, as the kubelet computes them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LinuxResources {
    pub cpu_shares: i64,
    pub cpu_quota: i64,
    pub cpu_period: i64,
    pub memory_limit_bytes: i64,
}

/// A container's state as the runtime reports it.
#[derive(Clone, Debug, PartialEq)]
pub enum ContainerState {
    Created,
    Running { started_at_ns: i64 },
    Exited { exit_code: i32, reason: String, message: String, started_at_ns: i64, finished_at_ns: i64 },
    Unknown,
}

/// A container as the runtime lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct ContainerInfo {
    pub id: String,
    pub sandbox_id: String,
    pub pod_uid: String,
    pub pod_name: String,
    pub pod_namespace: String,
    pub name: String,
    pub attempt: u32,
    pub image: String,
    pub image_ref: String,
    pub created_at_ns: i64,
    pub state: ContainerState,
}

/// The result of running a command in a container.
#[derive(Clone, Debug)]
pub struct ExecResult {
    pub exit_code: i32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// An image present on the node.
#[derive(Clone, Debug, PartialEq)]
pub struct ImageInfo {
    pub id: String,
    pub names: Vec<String>,
    pub size_bytes: u64,
}

/// A container's resource usage as the runtime measures it from its cgroup (CRI
/// `ListContainerStats`): cumulative CPU and current memory, each with its sample time.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContainerStats {
    pub id: String,
    pub name: String,
    pub pod_uid: String,
    pub pod_name: String,
    pub pod_namespace: String,
    /// When the CPU sample was taken (Unix nanoseconds).
    pub cpu_timestamp_ns: i64,
    pub cpu_usage_core_nanos: Option<u64>,
    pub memory_timestamp_ns: i64,
    pub memory_working_set_bytes: Option<u64>,
    pub memory_usage_bytes: Option<u64>,
    pub memory_rss_bytes: Option<u64>,
    pub memory_available_bytes: Option<u64>,
    pub writable_layer_bytes: Option<u64>,
    pub writable_layer_inodes: Option<u64>,
}

/// The calls a pod worker makes. Implemented by [`cri::CriRuntime`] and, without
/// containers, [`simulated::SimulatedRuntime`].
#[async_trait::async_trait]
pub trait Runtime: Send + Sync + 'static {
    /// `containerd://1.6.20`, as `nodeInfo.containerRuntimeVersion` shows it.
    async fn version(&self) -> Result<String, RuntimeError>;
    /// The node's pod CIDR, once it has one (CRI `UpdateRuntimeConfig`); runtimes whose
    /// network comes from CNI's configuration need nothing of it.
    async fn update_runtime_config(&self, pod_cidr: &str) -> Result<(), RuntimeError> {
        let _ = pod_cidr;
        Ok(())
    }
    async fn run_sandbox(&self, spec: &SandboxSpec) -> Result<String, RuntimeError>;
    async fn stop_sandbox(&self, id: &str) -> Result<(), RuntimeError>;
    async fn remove_sandbox(&self, id: &str) -> Result<(), RuntimeError>;
    async fn list_sandboxes(&self) -> Result<Vec<SandboxInfo>, RuntimeError>;
    async fn list_containers(&self) -> Result<Vec<ContainerInfo>, RuntimeError>;
    /// The sandboxes of one pod (by uid).
    async fn pod_sandboxes(&self, uid: &str) -> Result<Vec<SandboxInfo>, RuntimeError> {
        Ok(self.list_sandboxes().await?.into_iter().filter(|s| s.uid == uid).collect())
    }
    /// The containers of one pod (by uid).
    async fn pod_containers(&self, uid: &str) -> Result<Vec<ContainerInfo>, RuntimeError> {
        Ok(self.list_containers().await?.into_iter().filter(|c| c.pod_uid == uid).collect())
    }
    /// Whether `image` is present; its id (digest) if so.
    async fn image_id(&self, image: &str) -> Result<Option<String>, RuntimeError>;
    /// Pulls `image` from its registry, with `auth` when given.
    async fn pull_image(&self, image: &str, auth: Option<&RegistryAuth>) -> Result<String, RuntimeError>;
    async fn list_images(&self) -> Result<Vec<ImageInfo>, RuntimeError>;
    async fn create_container(&self, sandbox_id: &str, sandbox: &SandboxSpec, spec: &ContainerSpec) -> Result<String, RuntimeError>;
    async fn start_container(&self, id: &str) -> Result<(), RuntimeError>;
    /// Stops a container: SIGTERM, then SIGKILL after `grace`.
    async fn stop_container(&self, id: &str, grace: Duration) -> Result<(), RuntimeError>;
    async fn remove_container(&self, id: &str) -> Result<(), RuntimeError>;
    async fn exec_sync(&self, id: &str, cmd: &[String], timeout: Duration) -> Result<ExecResult, RuntimeError>;
    /// A streaming exec session: the URL of the runtime's streaming server serving it.
    async fn exec_stream(&self, id: &str, cmd: &[String], streams: Streams) -> Result<String, RuntimeError>;
    /// A streaming attach session to the container's own process: the URL of the
    /// runtime's streaming server serving it.
    async fn attach_stream(&self, id: &str, streams: Streams) -> Result<String, RuntimeError>;
    /// The network namespace of sandbox `id` as a path to open (`/proc/<pid>/ns/net` or a
    /// bind-mounted netns); `None` when the runtime does not say.
    async fn sandbox_netns(&self, id: &str) -> Result<Option<String>, RuntimeError> {
        let _ = id;
        Ok(None)
    }
    /// Usage of every container that has a cgroup (running ones); none when the runtime
    /// does not measure.
    async fn container_stats(&self) -> Result<Vec<ContainerStats>, RuntimeError> {
        Ok(Vec::new())
    }
}

/// Which streams an exec session carries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Streams {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}
