//! [`Runtime`] over the Container Runtime Interface (v1) on containerd's unix socket.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use k8s_cri::v1 as cri;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use tonic::transport::{Channel, Endpoint};

use super::{
    ContainerInfo, ContainerStats, ContainerSpec, ContainerState, ExecResult, ImageInfo, RegistryAuth, Runtime, RuntimeError, SandboxInfo, SandboxSpec, Streams, LABEL_CONTAINER_NAME,
    LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID,
};

/// A CRI client of one runtime socket.
#[derive(Clone)]
pub struct CriRuntime {
    runtime: RuntimeServiceClient<Channel>,
    images: ImageServiceClient<Channel>,
}

fn call(name: &'static str) -> impl Fn(tonic::Status) -> RuntimeError {
    move |s| RuntimeError::Call { call: name, message: s.message().to_string() }
}

impl CriRuntime {
    async fn sandboxes(&self, filter: Option<cri::PodSandboxFilter>) -> Result<Vec<SandboxInfo>, RuntimeError> {
        let mut rt = self.runtime.clone();
        let items = rt.list_pod_sandbox(cri::ListPodSandboxRequest { filter }).await.map_err(call("ListPodSandbox"))?.into_inner().items;
        let mut out = Vec::with_capacity(items.len());
        for sb in items {
            let ready = sb.state == cri::PodSandboxState::SandboxReady as i32;
            let (ip, additional_ips) = if ready {
                match rt.pod_sandbox_status(cri::PodSandboxStatusRequest { pod_sandbox_id: sb.id.clone(), verbose: false }).await {
                    Ok(r) => {
                        let network = r.into_inner().status.and_then(|s| s.network);
                        let more = network.as_ref().map(|n| n.additional_ips.iter().map(|p| p.ip.clone()).filter(|ip| !ip.is_empty()).collect()).unwrap_or_default();
                        (network.map(|n| n.ip).filter(|ip| !ip.is_empty()), more)
                    }
                    Err(e) if e.code() == tonic::Code::NotFound => continue,
                    Err(e) => return Err(call("PodSandboxStatus")(e)),
                }
            } else {
                (None, Vec::new())
            };
            let meta = sb.metadata.unwrap_or_default();
            out.push(SandboxInfo {
                uid: sb.labels.get(LABEL_POD_UID).cloned().unwrap_or(meta.uid),
                id: sb.id,
                attempt: meta.attempt,
                ready,
                ip,
                additional_ips,
                created_at_ns: sb.created_at,
            });
        }
        Ok(out)
    }

    async fn containers(&self, filter: Option<cri::ContainerFilter>) -> Result<Vec<ContainerInfo>, RuntimeError> {
        let mut rt = self.runtime.clone();
        let items = rt.list_containers(cri::ListContainersRequest { filter }).await.map_err(call("ListContainers"))?.into_inner().containers;
        let mut out = Vec::with_capacity(items.len());
        for c in items {
            let status = match rt.container_status(cri::ContainerStatusRequest { container_id: c.id.clone(), verbose: false }).await {
                Ok(r) => r.into_inner().status,
                Err(e) if e.code() == tonic::Code::NotFound => continue,
                Err(e) => return Err(call("ContainerStatus")(e)),
            };
            let Some(status) = status else { continue };
            let meta = c.metadata.clone().unwrap_or_default();
            out.push(ContainerInfo {
                id: c.id.clone(),
                sandbox_id: c.pod_sandbox_id.clone(),
                pod_uid: c.labels.get(LABEL_POD_UID).cloned().unwrap_or_default(),
                pod_name: c.labels.get(LABEL_POD_NAME).cloned().unwrap_or_default(),
                pod_namespace: c.labels.get(LABEL_POD_NAMESPACE).cloned().unwrap_or_default(),
                name: c.labels.get(LABEL_CONTAINER_NAME).cloned().unwrap_or(meta.name),
                attempt: meta.attempt,
                image: status.image.as_ref().map(|i| i.image.clone()).unwrap_or_default(),
                image_ref: status.image_ref.clone(),
                created_at_ns: c.created_at,
                state: state_of(&status),
            });
        }
        Ok(out)
    }

    /// Connects to the CRI socket at `socket` (lazily: the first call connects).
    pub fn connect(socket: &Path) -> Result<Self, RuntimeError> {
        let path: PathBuf = socket.to_path_buf();
        let endpoint = Endpoint::try_from("http://[::1]:0").map_err(|e| RuntimeError::Connect { endpoint: socket.display().to_string(), message: e.to_string() })?;
        let channel = endpoint.timeout(Duration::from_secs(120)).connect_with_connector_lazy(tower::service_fn(move |_| {
            let path = path.clone();
            async move { tokio::net::UnixStream::connect(path).await.map(TokioIo::new) }
        }));
        Ok(Self { runtime: RuntimeServiceClient::new(channel.clone()), images: ImageServiceClient::new(channel) })
    }
}

fn sandbox_config(spec: &SandboxSpec) -> cri::PodSandboxConfig {
    let mode = if spec.host_network { cri::NamespaceMode::Node } else { cri::NamespaceMode::Pod } as i32;
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata { name: spec.pod_name.clone(), uid: spec.uid.clone(), namespace: spec.namespace.clone(), attempt: spec.attempt }),
        hostname: spec.hostname.clone(),
        log_directory: spec.log_directory.clone(),
        dns_config: Some(cri::DnsConfig { servers: spec.dns_servers.clone(), searches: spec.dns_searches.clone(), options: spec.dns_options.clone() }),
        port_mappings: spec
            .port_mappings
            .iter()
            .map(|p| cri::PortMapping {
                protocol: match p.protocol.as_str() {
                    "UDP" => cri::Protocol::Udp,
                    "SCTP" => cri::Protocol::Sctp,
                    _ => cri::Protocol::Tcp,
                } as i32,
                container_port: p.container_port,
                host_port: p.host_port,
                host_ip: p.host_ip.clone(),
            })
            .collect(),
        labels: spec.labels.clone().into_iter().collect(),
        annotations: spec.annotations.clone().into_iter().collect(),
        linux: Some(cri::LinuxPodSandboxConfig {
            cgroup_parent: spec.cgroup_parent.clone(),
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(cri::NamespaceOption { network: mode, pid: cri::NamespaceMode::Container as i32, ipc: mode, ..Default::default() }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        windows: None,
    }
}

fn state_of(status: &cri::ContainerStatus) -> ContainerState {
    match cri::ContainerState::try_from(status.state) {
        Ok(cri::ContainerState::ContainerCreated) => ContainerState::Created,
        Ok(cri::ContainerState::ContainerRunning) => ContainerState::Running { started_at_ns: status.started_at },
        Ok(cri::ContainerState::ContainerExited) => ContainerState::Exited {
            exit_code: status.exit_code,
            reason: status.reason.clone(),
            message: status.message.clone(),
            started_at_ns: status.started_at,
            finished_at_ns: status.finished_at,
        },
        _ => ContainerState::Unknown,
    }
}

#[async_trait::async_trait]
impl Runtime for CriRuntime {
    async fn version(&self) -> Result<String, RuntimeError> {
        let v = self.runtime.clone().version(cri::VersionRequest { version: "v1".into() }).await.map_err(call("Version"))?.into_inner();
        Ok(format!("{}://{}", v.runtime_name, v.runtime_version.trim_start_matches('v')))
    }

    #[tracing::instrument(name = "RunPodSandbox", level = "info", skip_all, fields(runtime = "cri"))]
    async fn run_sandbox(&self, spec: &SandboxSpec) -> Result<String, RuntimeError> {
        let req = cri::RunPodSandboxRequest { config: Some(sandbox_config(spec)), runtime_handler: String::new() };
        Ok(self.runtime.clone().run_pod_sandbox(req).await.map_err(call("RunPodSandbox"))?.into_inner().pod_sandbox_id)
    }

    #[tracing::instrument(name = "StopPodSandbox", level = "info", skip_all, fields(runtime = "cri"))]
    async fn stop_sandbox(&self, id: &str) -> Result<(), RuntimeError> {
        self.runtime.clone().stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: id.into() }).await.map_err(call("StopPodSandbox"))?;
        Ok(())
    }

    #[tracing::instrument(name = "RemovePodSandbox", level = "info", skip_all, fields(runtime = "cri"))]
    async fn remove_sandbox(&self, id: &str) -> Result<(), RuntimeError> {
        self.runtime.clone().remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: id.into() }).await.map_err(call("RemovePodSandbox"))?;
        Ok(())
    }

    async fn list_sandboxes(&self) -> Result<Vec<SandboxInfo>, RuntimeError> {
        self.sandboxes(None).await
    }

    async fn pod_sandboxes(&self, uid: &str) -> Result<Vec<SandboxInfo>, RuntimeError> {
        let filter = cri::PodSandboxFilter { label_selector: [(LABEL_POD_UID.to_string(), uid.to_string())].into(), ..Default::default() };
        self.sandboxes(Some(filter)).await
    }

    async fn list_containers(&self) -> Result<Vec<ContainerInfo>, RuntimeError> {
        self.containers(None).await
    }

    async fn pod_containers(&self, uid: &str) -> Result<Vec<ContainerInfo>, RuntimeError> {
        let filter = cri::ContainerFilter { label_selector: [(LABEL_POD_UID.to_string(), uid.to_string())].into(), ..Default::default() };
        self.containers(Some(filter)).await
    }


    async fn image_id(&self, image: &str) -> Result<Option<String>, RuntimeError> {
        let req = cri::ImageStatusRequest { image: Some(cri::ImageSpec { image: image.into(), ..Default::default() }), verbose: false };
        Ok(self.images.clone().image_status(req).await.map_err(call("ImageStatus"))?.into_inner().image.map(|i| i.id))
    }

    #[tracing::instrument(name = "PullImage", level = "info", skip_all, fields(runtime = "cri"))]
    async fn pull_image(&self, image: &str, auth: Option<&RegistryAuth>) -> Result<String, RuntimeError> {
        let auth = auth.map(|a| cri::AuthConfig {
            username: a.username.clone(),
            password: a.password.clone(),
            server_address: a.server_address.clone(),
            identity_token: a.identity_token.clone(),
            registry_token: a.registry_token.clone(),
            ..Default::default()
        });
        let req = cri::PullImageRequest { image: Some(cri::ImageSpec { image: image.into(), ..Default::default() }), auth, sandbox_config: None };
        Ok(self.images.clone().pull_image(req).await.map_err(call("PullImage"))?.into_inner().image_ref)
    }

    async fn list_images(&self) -> Result<Vec<ImageInfo>, RuntimeError> {
        let images = self.images.clone().list_images(cri::ListImagesRequest { filter: None }).await.map_err(call("ListImages"))?.into_inner().images;
        Ok(images
            .into_iter()
            .map(|i| ImageInfo { names: i.repo_tags.into_iter().chain(i.repo_digests).collect(), id: i.id, size_bytes: i.size })
            .collect())
    }

    #[tracing::instrument(name = "CreateContainer", level = "info", skip_all, fields(runtime = "cri"))]
    async fn create_container(&self, sandbox_id: &str, sandbox: &SandboxSpec, spec: &ContainerSpec) -> Result<String, RuntimeError> {
        let r = &spec.resources;
        let config = cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata { name: spec.name.clone(), attempt: spec.attempt }),
            image: Some(cri::ImageSpec { image: spec.image.clone(), ..Default::default() }),
            command: spec.command.clone(),
            args: spec.args.clone(),
            working_dir: spec.working_dir.clone(),
            envs: spec.env.iter().map(|(k, v)| cri::KeyValue { key: k.clone(), value: v.clone() }).collect(),
            mounts: spec
                .mounts
                .iter()
                .map(|m| cri::Mount { container_path: m.container_path.clone(), host_path: m.host_path.clone(), readonly: m.read_only, ..Default::default() })
                .collect(),
            labels: spec.labels.clone().into_iter().collect(),
            annotations: spec.annotations.clone().into_iter().collect(),
            log_path: spec.log_path.clone(),
            stdin: spec.stdin,
            stdin_once: spec.stdin_once,
            tty: spec.tty,
            linux: Some(cri::LinuxContainerConfig {
                resources: Some(cri::LinuxContainerResources {
                    cpu_shares: r.cpu_shares,
                    cpu_quota: r.cpu_quota,
                    cpu_period: r.cpu_period,
                    memory_limit_in_bytes: r.memory_limit_bytes,
                    ..Default::default()
                }),
                security_context: Some(cri::LinuxContainerSecurityContext {
                    privileged: spec.privileged,
                    run_as_user: spec.run_as_user.map(|value| cri::Int64Value { value }),
                    namespace_options: Some(cri::NamespaceOption {
                        network: if sandbox.host_network { cri::NamespaceMode::Node } else { cri::NamespaceMode::Pod } as i32,
                        pid: cri::NamespaceMode::Container as i32,
                        ipc: if sandbox.host_network { cri::NamespaceMode::Node } else { cri::NamespaceMode::Pod } as i32,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
            }),
            ..Default::default()
        };
        let req = cri::CreateContainerRequest { pod_sandbox_id: sandbox_id.into(), config: Some(config), sandbox_config: Some(sandbox_config(sandbox)) };
        Ok(self.runtime.clone().create_container(req).await.map_err(call("CreateContainer"))?.into_inner().container_id)
    }

    #[tracing::instrument(name = "StartContainer", level = "info", skip_all, fields(runtime = "cri"))]
    async fn start_container(&self, id: &str) -> Result<(), RuntimeError> {
        self.runtime.clone().start_container(cri::StartContainerRequest { container_id: id.into() }).await.map_err(call("StartContainer"))?;
        Ok(())
    }

    #[tracing::instrument(name = "StopContainer", level = "info", skip_all, fields(runtime = "cri"))]
    async fn stop_container(&self, id: &str, grace: Duration) -> Result<(), RuntimeError> {
        let req = cri::StopContainerRequest { container_id: id.into(), timeout: grace.as_secs() as i64 };
        self.runtime.clone().stop_container(req).await.map_err(call("StopContainer"))?;
        Ok(())
    }

    #[tracing::instrument(name = "RemoveContainer", level = "info", skip_all, fields(runtime = "cri"))]
    async fn remove_container(&self, id: &str) -> Result<(), RuntimeError> {
        self.runtime.clone().remove_container(cri::RemoveContainerRequest { container_id: id.into() }).await.map_err(call("RemoveContainer"))?;
        Ok(())
    }

    #[tracing::instrument(name = "ExecSync", level = "info", skip_all, fields(runtime = "cri"))]
    async fn exec_sync(&self, id: &str, cmd: &[String], timeout: Duration) -> Result<ExecResult, RuntimeError> {
        let req = cri::ExecSyncRequest { container_id: id.into(), cmd: cmd.to_vec(), timeout: timeout.as_secs().max(1) as i64 };
        let r = self.runtime.clone().exec_sync(req).await.map_err(call("ExecSync"))?.into_inner();
        Ok(ExecResult { exit_code: r.exit_code, stdout: r.stdout, stderr: r.stderr })
    }

    async fn sandbox_netns(&self, id: &str) -> Result<Option<String>, RuntimeError> {
        let req = cri::PodSandboxStatusRequest { pod_sandbox_id: id.into(), verbose: true };
        let info = self.runtime.clone().pod_sandbox_status(req).await.map_err(call("PodSandboxStatus"))?.into_inner().info;
        let Some(v) = info.get("info").and_then(|s| serde_json::from_str::<serde_json::Value>(s).ok()) else { return Ok(None) };
        Ok(netns_of_verbose_info(&v))
    }

    async fn container_stats(&self) -> Result<Vec<ContainerStats>, RuntimeError> {
        let items = self.runtime.clone().list_container_stats(cri::ListContainerStatsRequest { filter: None }).await.map_err(call("ListContainerStats"))?.into_inner().stats;
        Ok(items.into_iter().filter_map(stats_of).collect())
    }

    async fn exec_stream(&self, id: &str, cmd: &[String], s: Streams) -> Result<String, RuntimeError> {
        let req = cri::ExecRequest { container_id: id.into(), cmd: cmd.to_vec(), tty: s.tty, stdin: s.stdin, stdout: s.stdout, stderr: s.stderr && !s.tty };
        Ok(self.runtime.clone().exec(req).await.map_err(call("Exec"))?.into_inner().url)
    }

    async fn attach_stream(&self, id: &str, s: Streams) -> Result<String, RuntimeError> {
        let req = cri::AttachRequest { container_id: id.into(), tty: s.tty, stdin: s.stdin, stdout: s.stdout, stderr: s.stderr && !s.tty };
        Ok(self.runtime.clone().attach(req).await.map_err(call("Attach"))?.into_inner().url)
    }
}

/// One container's CRI stats; `None` for a container without CPU figures (no task, so no
/// cgroup: created or exited).
fn stats_of(s: cri::ContainerStats) -> Option<ContainerStats> {
    let attrs = s.attributes.unwrap_or_default();
    let cpu = s.cpu?;
    let total = cpu.usage_core_nano_seconds.map(|v| v.value)?;
    let memory = s.memory.unwrap_or_default();
    let layer = s.writable_layer.unwrap_or_default();
    let label = |k: &str| attrs.labels.get(k).cloned().unwrap_or_default();
    Some(ContainerStats {
        name: attrs.labels.get(LABEL_CONTAINER_NAME).cloned().or_else(|| attrs.metadata.as_ref().map(|m| m.name.clone())).unwrap_or_default(),
        pod_uid: label(LABEL_POD_UID),
        pod_name: label(LABEL_POD_NAME),
        pod_namespace: label(LABEL_POD_NAMESPACE),
        id: attrs.id,
        cpu_timestamp_ns: cpu.timestamp,
        cpu_usage_core_nanos: Some(total),
        memory_timestamp_ns: memory.timestamp,
        memory_working_set_bytes: memory.working_set_bytes.map(|v| v.value),
        memory_usage_bytes: memory.usage_bytes.map(|v| v.value),
        memory_rss_bytes: memory.rss_bytes.map(|v| v.value),
        memory_available_bytes: memory.available_bytes.map(|v| v.value),
        writable_layer_bytes: layer.used_bytes.map(|v| v.value),
        writable_layer_inodes: layer.inodes_used.map(|v| v.value),
    })
}

/// The sandbox's network namespace from containerd's verbose sandbox info: the network
/// namespace path of its runtime spec, else its process's.
pub(crate) fn netns_of_verbose_info(v: &serde_json::Value) -> Option<String> {
    let from_spec = v.pointer("/runtimeSpec/linux/namespaces").and_then(serde_json::Value::as_array).and_then(|ns| {
        ns.iter().find(|n| n["type"] == "network").and_then(|n| n["path"].as_str()).filter(|p| !p.is_empty()).map(String::from)
    });
    from_spec.or_else(|| v["pid"].as_u64().filter(|p| *p > 0).map(|pid| format!("/proc/{pid}/ns/net")))
}

#[cfg(test)]
mod netns_tests {
    #[test]
    fn the_spec_path_then_the_process() {
        let v = serde_json::json!({"pid": 42, "runtimeSpec": {"linux": {"namespaces": [{"type": "pid"}, {"type": "network", "path": "/run/netns/cni-1"}]}}});
        assert_eq!(super::netns_of_verbose_info(&v).as_deref(), Some("/run/netns/cni-1"));
        assert_eq!(super::netns_of_verbose_info(&serde_json::json!({"pid": 42})).as_deref(), Some("/proc/42/ns/net"));
        assert_eq!(super::netns_of_verbose_info(&serde_json::json!({"pid": 0})), None);
    }
}
