//! A runtime without containers (simulated): sandboxes and containers are records in
//! memory that go through the states a real runtime reports, so an agent runs its real
//! pod workers, status reporting, probes and Events on a machine with no containerd and
//! no root — as Kubernetes' kubemark runs a real kubelet on a fake runtime. The node
//! reports `simulated://` as its container runtime, so nothing mistakes it for a real one.
//!
//! What is simulated, and how:
//! - a sandbox gets the next free address of the node's pod CIDR (CRI's
//!   `UpdateRuntimeConfig` gives it, as the kubelet does once the Node has one);
//!   host-network sandboxes get the node's address; nothing answers there;
//! - every image pull succeeds at once (no registry is contacted), and the image is then
//!   present;
//! - an init container runs [`SIMULATED_INIT_RUN`] and exits 0; any other container runs
//!   until stopped, or, in a pod annotated [`crate::hollow::EXIT_CODE_ANNOTATION`], for
//!   [`crate::hollow::SIMULATED_RUN`] and then exits with that code (the hollow nodes'
//!   convention, so Jobs complete);
//! - a stopped container exits 143 (SIGTERM's); exec commands (exec probes) exit 0 with no
//!   output; streaming exec, attach and port-forward are refused: there is no process;
//! - each container's log file is made, and stays empty.
//!
//! States are computed when listed, from the clock, so no task runs per container.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::sync::Mutex;
use std::time::Duration;

use super::{ContainerInfo, ContainerSpec, ContainerState, ExecResult, ImageInfo, RegistryAuth, Runtime, RuntimeError, SandboxInfo, SandboxSpec, Streams};
use super::{LABEL_CONTAINER_NAME, LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID};

/// What `nodeInfo.containerRuntimeVersion` shows for a simulated node.
pub const VERSION: &str = "simulated://keelson";

/// How long a simulated init container runs.
pub const SIMULATED_INIT_RUN: Duration = Duration::from_millis(200);

/// Exit code of a container stopped by the agent (SIGTERM).
const STOPPED_EXIT_CODE: i32 = 143;

/// The addresses sandboxes get: `base` + 2 … up to the last of the prefix.
#[derive(Clone, Copy, Debug)]
struct AddressPool {
    base: u32,
    size: u32,
}

impl AddressPool {
    fn parse(cidr: &str) -> Result<Self, String> {
        let (addr, len) = cidr.split_once('/').ok_or_else(|| format!("pod CIDR {cidr:?}: expected ADDRESS/PREFIX"))?;
        let addr: Ipv4Addr = addr.parse().map_err(|e| format!("pod CIDR {cidr:?}: {e}"))?;
        let len: u32 = len.parse().ok().filter(|l| (8..=30).contains(l)).ok_or_else(|| format!("pod CIDR {cidr:?}: the prefix must be 8 to 30 bits"))?;
        let mask = u32::MAX << (32 - len);
        Ok(Self { base: u32::from(addr) & mask, size: 1 << (32 - len) })
    }

    /// The lowest address not in `taken`, skipping the network, the gateway (.1) and
    /// broadcast addresses.
    fn next(&self, taken: &BTreeSet<Ipv4Addr>) -> Option<Ipv4Addr> {
        (2..self.size - 1).map(|i| Ipv4Addr::from(self.base + i)).find(|a| !taken.contains(a))
    }
}

#[derive(Clone, Debug)]
struct SimSandbox {
    info: SandboxInfo,
    annotations: BTreeMap<String, String>,
}

#[derive(Clone, Debug)]
struct SimContainer {
    info: ContainerInfo,
    /// How it ends by itself: after this long running, with this code.
    exits_after: Option<(Duration, i32)>,
}

#[derive(Default)]
struct State {
    next_id: u64,
    sandboxes: BTreeMap<String, SimSandbox>,
    containers: BTreeMap<String, SimContainer>,
    images: BTreeMap<String, String>,
    pool: Option<AddressPool>,
}

/// The simulated runtime of one node.
pub struct SimulatedRuntime {
    node_ip: Ipv4Addr,
    clock: Box<dyn Fn() -> i64 + Send + Sync>,
    state: Mutex<State>,
}

fn wall_clock_ns() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0)
}

impl SimulatedRuntime {
    /// A runtime for the node at `node_ip`.
    pub fn new(node_ip: Ipv4Addr) -> Self {
        Self::with_clock(node_ip, Box::new(wall_clock_ns))
    }

    /// As [`Self::new`], reading time (Unix nanoseconds) from `clock`.
    pub fn with_clock(node_ip: Ipv4Addr, clock: Box<dyn Fn() -> i64 + Send + Sync>) -> Self {
        Self { node_ip, clock, state: Mutex::new(State::default()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A container's state now: a running one that ends by itself has ended once its time
    /// is up.
    fn current(c: &SimContainer, now: i64) -> ContainerState {
        match (&c.info.state, c.exits_after) {
            (ContainerState::Running { started_at_ns }, Some((after, code))) if now - started_at_ns >= after.as_nanos() as i64 => ContainerState::Exited {
                exit_code: code,
                reason: if code == 0 { "Completed".into() } else { "Error".into() },
                message: String::new(),
                started_at_ns: *started_at_ns,
                finished_at_ns: started_at_ns + after.as_nanos() as i64,
            },
            (s, _) => s.clone(),
        }
    }
}

fn not_found(call: &'static str, what: &str, id: &str) -> RuntimeError {
    RuntimeError::Call { call, message: format!("{what} {id:?} not found") }
}

fn no_process(call: &'static str) -> RuntimeError {
    RuntimeError::Call { call, message: "the simulated runtime runs no processes: nothing to stream".into() }
}

#[async_trait::async_trait]
impl Runtime for SimulatedRuntime {
    async fn version(&self) -> Result<String, RuntimeError> {
        Ok(VERSION.into())
    }

    async fn update_runtime_config(&self, pod_cidr: &str) -> Result<(), RuntimeError> {
        let pool = AddressPool::parse(crate::cni::split_pod_cidrs(pod_cidr).into_iter().find(|c| !c.contains(':')).unwrap_or(pod_cidr)).map_err(|message| RuntimeError::Call { call: "UpdateRuntimeConfig", message })?;
        self.lock().pool = Some(pool);
        Ok(())
    }

    #[tracing::instrument(name = "RunPodSandbox", level = "info", skip_all, fields(runtime = "simulated"))]
    async fn run_sandbox(&self, spec: &SandboxSpec) -> Result<String, RuntimeError> {
        let now = (self.clock)();
        let mut st = self.lock();
        let ip = if spec.host_network {
            self.node_ip
        } else {
            let pool = st.pool.ok_or_else(|| RuntimeError::Call { call: "RunPodSandbox", message: "the node has no pod CIDR yet".into() })?;
            let taken: BTreeSet<Ipv4Addr> = st.sandboxes.values().filter_map(|s| s.info.ip.as_ref()?.parse().ok()).collect();
            pool.next(&taken).ok_or_else(|| RuntimeError::Call { call: "RunPodSandbox", message: "no address left in the pod CIDR".into() })?
        };
        st.next_id += 1;
        let id = format!("sim-sandbox-{}", st.next_id);
        let info = SandboxInfo { id: id.clone(), uid: spec.uid.clone(), attempt: spec.attempt, ready: true, ip: Some(ip.to_string()), additional_ips: Vec::new(), created_at_ns: now };
        st.sandboxes.insert(id.clone(), SimSandbox { info, annotations: spec.annotations.clone() });
        Ok(id)
    }

    #[tracing::instrument(name = "StopPodSandbox", level = "info", skip_all, fields(runtime = "simulated"))]
    async fn stop_sandbox(&self, id: &str) -> Result<(), RuntimeError> {
        let now = (self.clock)();
        let mut st = self.lock();
        let sandbox = st.sandboxes.get_mut(id).ok_or_else(|| not_found("StopPodSandbox", "sandbox", id))?;
        sandbox.info.ready = false;
        for c in st.containers.values_mut().filter(|c| c.info.sandbox_id == id) {
            c.info.state = stopped(Self::current(c, now), now);
            c.exits_after = None;
        }
        Ok(())
    }

    #[tracing::instrument(name = "RemovePodSandbox", level = "info", skip_all, fields(runtime = "simulated"))]
    async fn remove_sandbox(&self, id: &str) -> Result<(), RuntimeError> {
        let mut st = self.lock();
        st.sandboxes.remove(id);
        st.containers.retain(|_, c| c.info.sandbox_id != id);
        Ok(())
    }

    async fn list_sandboxes(&self) -> Result<Vec<SandboxInfo>, RuntimeError> {
        Ok(self.lock().sandboxes.values().map(|s| s.info.clone()).collect())
    }

    async fn list_containers(&self) -> Result<Vec<ContainerInfo>, RuntimeError> {
        let now = (self.clock)();
        Ok(self.lock().containers.values().map(|c| ContainerInfo { state: Self::current(c, now), ..c.info.clone() }).collect())
    }

    async fn image_id(&self, image: &str) -> Result<Option<String>, RuntimeError> {
        Ok(self.lock().images.get(image).cloned())
    }

    #[tracing::instrument(name = "PullImage", level = "info", skip_all, fields(runtime = "simulated"))]
    async fn pull_image(&self, image: &str, _auth: Option<&RegistryAuth>) -> Result<String, RuntimeError> {
        use sha2::Digest;
        let id = format!("sha256:{:x}", sha2::Sha256::digest(image.as_bytes()));
        self.lock().images.insert(image.to_string(), id.clone());
        Ok(id)
    }

    async fn list_images(&self) -> Result<Vec<ImageInfo>, RuntimeError> {
        Ok(self.lock().images.iter().map(|(name, id)| ImageInfo { id: id.clone(), names: vec![name.clone()], size_bytes: 0 }).collect())
    }

    #[tracing::instrument(name = "CreateContainer", level = "info", skip_all, fields(runtime = "simulated"))]
    async fn create_container(&self, sandbox_id: &str, sandbox_spec: &SandboxSpec, spec: &ContainerSpec) -> Result<String, RuntimeError> {
        if !sandbox_spec.log_directory.is_empty() && !spec.log_path.is_empty() {
            // The log file, as a runtime makes it; nothing is ever written to it.
            let _ = std::fs::File::create(std::path::Path::new(&sandbox_spec.log_directory).join(&spec.log_path));
        }
        let now = (self.clock)();
        let mut st = self.lock();
        let sandbox = st.sandboxes.get(sandbox_id).ok_or_else(|| not_found("CreateContainer", "sandbox", sandbox_id))?;
        let exit_code = sandbox.annotations.get(crate::hollow::EXIT_CODE_ANNOTATION).and_then(|v| v.trim().parse::<i32>().ok());
        let exits_after = if spec.init { Some((SIMULATED_INIT_RUN, 0)) } else { exit_code.map(|code| (crate::hollow::SIMULATED_RUN, code)) };
        let uid = sandbox.info.uid.clone();
        let image_ref = st.images.get(&spec.image).cloned().unwrap_or_default();
        st.next_id += 1;
        let id = format!("sim-container-{}", st.next_id);
        let label = |k: &str| spec.labels.get(k).cloned().unwrap_or_default();
        let info = ContainerInfo {
            id: id.clone(),
            sandbox_id: sandbox_id.to_string(),
            pod_uid: spec.labels.get(LABEL_POD_UID).cloned().unwrap_or(uid),
            pod_name: label(LABEL_POD_NAME),
            pod_namespace: label(LABEL_POD_NAMESPACE),
            name: spec.labels.get(LABEL_CONTAINER_NAME).cloned().unwrap_or_else(|| spec.name.clone()),
            attempt: spec.attempt,
            image: spec.image.clone(),
            image_ref,
            created_at_ns: now,
            state: ContainerState::Created,
        };
        st.containers.insert(id.clone(), SimContainer { info, exits_after });
        Ok(id)
    }

    #[tracing::instrument(name = "StartContainer", level = "info", skip_all, fields(runtime = "simulated"))]
    async fn start_container(&self, id: &str) -> Result<(), RuntimeError> {
        let now = (self.clock)();
        let mut st = self.lock();
        let c = st.containers.get_mut(id).ok_or_else(|| not_found("StartContainer", "container", id))?;
        if c.info.state != ContainerState::Created {
            return Err(RuntimeError::Call { call: "StartContainer", message: format!("container {id:?} is not in the created state") });
        }
        c.info.state = ContainerState::Running { started_at_ns: now };
        Ok(())
    }

    #[tracing::instrument(name = "StopContainer", level = "info", skip_all, fields(runtime = "simulated"))]
    async fn stop_container(&self, id: &str, _grace: Duration) -> Result<(), RuntimeError> {
        let now = (self.clock)();
        let mut st = self.lock();
        let c = st.containers.get_mut(id).ok_or_else(|| not_found("StopContainer", "container", id))?;
        c.info.state = stopped(Self::current(c, now), now);
        c.exits_after = None;
        Ok(())
    }

    #[tracing::instrument(name = "RemoveContainer", level = "info", skip_all, fields(runtime = "simulated"))]
    async fn remove_container(&self, id: &str) -> Result<(), RuntimeError> {
        self.lock().containers.remove(id);
        Ok(())
    }

    #[tracing::instrument(name = "ExecSync", level = "info", skip_all, fields(runtime = "simulated"))]
    async fn exec_sync(&self, id: &str, _cmd: &[String], _timeout: Duration) -> Result<ExecResult, RuntimeError> {
        let now = (self.clock)();
        let st = self.lock();
        let c = st.containers.get(id).ok_or_else(|| not_found("ExecSync", "container", id))?;
        match Self::current(c, now) {
            ContainerState::Running { .. } => Ok(ExecResult { exit_code: 0, stdout: Vec::new(), stderr: Vec::new() }),
            _ => Err(RuntimeError::Call { call: "ExecSync", message: format!("container {id:?} is not running") }),
        }
    }

    async fn exec_stream(&self, _id: &str, _cmd: &[String], _streams: Streams) -> Result<String, RuntimeError> {
        Err(no_process("Exec"))
    }

    async fn attach_stream(&self, _id: &str, _streams: Streams) -> Result<String, RuntimeError> {
        Err(no_process("Attach"))
    }
}

/// The state of a container the agent stops: a running one exits with SIGTERM's code.
fn stopped(state: ContainerState, now: i64) -> ContainerState {
    match state {
        ContainerState::Running { started_at_ns } => ContainerState::Exited { exit_code: STOPPED_EXIT_CODE, reason: "Error".into(), message: String::new(), started_at_ns, finished_at_ns: now },
        ContainerState::Created => ContainerState::Exited { exit_code: 0, reason: "Completed".into(), message: String::new(), started_at_ns: 0, finished_at_ns: now },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicI64, Ordering};
    use std::sync::Arc;

    const S: i64 = 1_000_000_000;

    async fn runtime() -> (SimulatedRuntime, Arc<AtomicI64>) {
        let now = Arc::new(AtomicI64::new(100 * S));
        let clock = now.clone();
        let rt = SimulatedRuntime::with_clock(Ipv4Addr::new(10, 0, 0, 5), Box::new(move || clock.load(Ordering::SeqCst)));
        rt.update_runtime_config("10.42.3.0/24").await.unwrap();
        (rt, now)
    }

    fn sandbox(uid: &str, annotations: &[(&str, &str)]) -> SandboxSpec {
        SandboxSpec { uid: uid.into(), pod_name: uid.into(), namespace: "ns".into(), annotations: annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(), ..Default::default() }
    }

    fn container(name: &str, init: bool) -> ContainerSpec {
        let labels = [(LABEL_CONTAINER_NAME, name), (LABEL_POD_NAME, "p"), (LABEL_POD_NAMESPACE, "ns")].into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        ContainerSpec { name: name.into(), image: "busybox".into(), labels, init, ..Default::default() }
    }

    #[tokio::test]
    async fn sandboxes_take_the_pod_cidrs_free_addresses() {
        let (rt, _) = runtime().await;
        let a = rt.run_sandbox(&sandbox("a", &[])).await.unwrap();
        let b = rt.run_sandbox(&sandbox("b", &[])).await.unwrap();
        let host = rt.run_sandbox(&SandboxSpec { host_network: true, ..sandbox("h", &[]) }).await.unwrap();
        let ip = |id: &str, list: &[SandboxInfo]| list.iter().find(|s| s.id == id).unwrap().ip.clone().unwrap();
        let list = rt.list_sandboxes().await.unwrap();
        assert_eq!((ip(&a, &list), ip(&b, &list), ip(&host, &list)), ("10.42.3.2".into(), "10.42.3.3".into(), "10.0.0.5".into()));
        rt.remove_sandbox(&a).await.unwrap();
        let c = rt.run_sandbox(&sandbox("c", &[])).await.unwrap();
        assert_eq!(ip(&c, &rt.list_sandboxes().await.unwrap()), "10.42.3.2", "a removed sandbox's address is free again");
        let tiny = SimulatedRuntime::new(Ipv4Addr::LOCALHOST);
        assert!(tiny.run_sandbox(&sandbox("x", &[])).await.is_err(), "no pod CIDR yet");
        assert!(tiny.update_runtime_config("10.9.0.0").await.is_err());
        tiny.update_runtime_config("10.9.0.0/30").await.unwrap();
        tiny.run_sandbox(&sandbox("x", &[])).await.unwrap();
        assert!(tiny.run_sandbox(&sandbox("y", &[])).await.is_err(), "a /30 has one pod address");
    }

    #[tokio::test]
    async fn containers_run_until_stopped_and_init_containers_complete() {
        let (rt, now) = runtime().await;
        assert_eq!(rt.image_id("busybox").await.unwrap(), None);
        let image = rt.pull_image("busybox", None).await.unwrap();
        assert_eq!(rt.image_id("busybox").await.unwrap(), Some(image.clone()));
        let sb = rt.run_sandbox(&sandbox("u1", &[])).await.unwrap();
        let init = rt.create_container(&sb, &sandbox("u1", &[]), &container("init", true)).await.unwrap();
        let app = rt.create_container(&sb, &sandbox("u1", &[]), &container("app", false)).await.unwrap();
        let state = |id: String| {
            let rt = &rt;
            async move { rt.list_containers().await.unwrap().into_iter().find(|c| c.id == id).unwrap() }
        };
        assert_eq!(state(init.clone()).await.state, ContainerState::Created);
        rt.start_container(&init).await.unwrap();
        assert!(rt.start_container(&init).await.is_err(), "started twice");
        assert!(matches!(state(init.clone()).await.state, ContainerState::Running { .. }));
        now.fetch_add(S, Ordering::SeqCst);
        assert_eq!(state(init.clone()).await.state, ContainerState::Exited { exit_code: 0, reason: "Completed".into(), message: String::new(), started_at_ns: 100 * S, finished_at_ns: 100 * S + SIMULATED_INIT_RUN.as_nanos() as i64 });
        rt.start_container(&app).await.unwrap();
        now.fetch_add(3600 * S, Ordering::SeqCst);
        let c = state(app.clone()).await;
        assert!(matches!(c.state, ContainerState::Running { .. }), "an app container runs on");
        assert_eq!((c.pod_uid.as_str(), c.pod_name.as_str(), c.name.as_str(), c.image_ref.as_str()), ("u1", "p", "app", image.as_str()));
        assert_eq!(rt.exec_sync(&app, &["true".into()], Duration::from_secs(1)).await.unwrap().exit_code, 0);
        assert!(rt.exec_stream(&app, &["sh".into()], Streams::default()).await.is_err());
        rt.stop_container(&app, Duration::from_secs(30)).await.unwrap();
        assert!(matches!(state(app.clone()).await.state, ContainerState::Exited { exit_code: 143, .. }));
        assert!(rt.exec_sync(&app, &["true".into()], Duration::from_secs(1)).await.is_err(), "no exec into a stopped container");
        rt.stop_sandbox(&sb).await.unwrap();
        assert!(!rt.list_sandboxes().await.unwrap()[0].ready);
        rt.remove_sandbox(&sb).await.unwrap();
        assert!(rt.list_containers().await.unwrap().is_empty(), "a removed sandbox takes its containers");
    }

    #[tokio::test]
    async fn a_pod_annotated_with_an_exit_code_ends_with_it() {
        let (rt, now) = runtime().await;
        let spec = sandbox("u2", &[(crate::hollow::EXIT_CODE_ANNOTATION, "3")]);
        let sb = rt.run_sandbox(&spec).await.unwrap();
        let id = rt.create_container(&sb, &spec, &container("app", false)).await.unwrap();
        rt.start_container(&id).await.unwrap();
        now.fetch_add(crate::hollow::SIMULATED_RUN.as_nanos() as i64 - 1, Ordering::SeqCst);
        assert!(matches!(rt.list_containers().await.unwrap()[0].state, ContainerState::Running { .. }));
        now.fetch_add(1, Ordering::SeqCst);
        assert!(matches!(&rt.list_containers().await.unwrap()[0].state, ContainerState::Exited { exit_code: 3, reason, .. } if reason == "Error"));
        // Stopping an exited container leaves its exit as it was.
        rt.stop_container(&id, Duration::ZERO).await.unwrap();
        assert!(matches!(rt.list_containers().await.unwrap()[0].state, ContainerState::Exited { exit_code: 3, .. }));
    }
}
