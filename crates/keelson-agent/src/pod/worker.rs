//! One pod's worker (the kubelet's pod worker): every second, and whenever the pod
//! changes, it lists what the runtime has for the pod, asks [`plan`] what to do,
//! does it, runs the probes that are due and writes the status if it changed. A deleted
//! pod's containers are stopped within its grace period, its sandbox and volumes
//! removed, and only then is its deletion confirmed.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, ObjectReference, Pod};
use keelson_component::events::{EventRecorder, EventType};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::plan::{plan, Action, KillReason, Observed, ProbeVerdicts};
use super::probe::{self, Kind, Tracker};
use super::status::{pod_status, Knowledge};
use super::{env, resources, volumes};
use crate::metrics::PodWork;
use crate::runtime::{ContainerSpec, ContainerState, Runtime, SandboxSpec, LABEL_CONTAINER_NAME, LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID};

const SYNC_PERIOD: Duration = Duration::from_secs(1);
/// ConfigMap, Secret and token volumes are refreshed this often (the kubelet's sync period).
const VOLUME_REFRESH: Duration = Duration::from_secs(5);

/// What every pod worker of an agent shares.
pub struct PodContext {
    pub client: kube::Client,
    pub runtime: Arc<dyn Runtime>,
    pub events: EventRecorder,
    pub node_name: String,
    pub host_ip: String,
    /// A dual-stack node's IPv6 address (the pod's second hostIP).
    pub host_ip6: Option<String>,
    /// `DATA_DIR/pods`: volumes and termination logs, one folder per pod uid.
    pub pods_dir: PathBuf,
    /// Container logs, one folder per pod (`<ns>_<name>_<uid>`), as the kubelet's.
    pub logs_dir: PathBuf,
    /// The cluster DNS addresses (`--cluster-dns`) ClusterFirst pods are given.
    pub dns_servers: Vec<String>,
    /// The node's own resolv.conf, for `dnsPolicy: Default` and host-network pods.
    pub host_dns: crate::pod::dns::ResolvConf,
    /// Service-account tokens of projected volumes, reused while fresh.
    pub tokens: volumes::TokenCache,
    /// A deliberate bug (tests of the self-heal checker only).
    pub injected_bug: Option<crate::agent::InjectedBug>,
    pub metrics: crate::metrics::AgentMetrics,
}

fn now_ns() -> i64 {
    jiff::Timestamp::now().as_nanosecond() as i64
}

fn now_rfc3339() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The state a worker keeps between syncs: probes, image back-offs, what it reported.
#[derive(Default)]
struct WorkerState {
    probes: HashMap<(String, &'static str), (String, Tracker)>,
    image_waits: HashMap<String, (String, String, i64, Duration)>,
    config_errors: BTreeMap<String, (String, String)>,
    backoff_reported: HashMap<String, u32>,
    volumes: Option<(BTreeMap<String, PathBuf>, i64)>,
    last_status: Option<Value>,
    /// Termination messages of exited containers by container id, read once (an exited
    /// container's message file and log no longer change).
    termination_messages: HashMap<String, String>,
    /// A sync found nothing to start: the pod's start-up is over, and later syncs no longer
    /// continue the trace of the request that created it.
    started_up: bool,
    /// When this worker first saw the pod, until a status of it reported Running
    /// (`kubelet_pod_start_duration_seconds`); `None` after.
    starting_since: Option<std::time::Instant>,
}

struct Verdicts<'a>(&'a WorkerState, &'a Observed);

impl Verdicts<'_> {
    fn failed(&self, container: &str, kind: &'static str) -> bool {
        let current = self.1.latest(container).map(|c| c.id.as_str());
        self.0.probes.get(&(container.to_string(), kind)).is_some_and(|(id, t)| Some(id.as_str()) == current && t.failed)
    }
}

impl ProbeVerdicts for Verdicts<'_> {
    fn liveness_failed(&self, container: &str) -> bool {
        self.failed(container, "liveness")
    }
    fn startup_failed(&self, container: &str) -> bool {
        self.failed(container, "startup")
    }
}

fn reference(pod: &Pod, container: Option<&str>) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: pod.metadata.name.clone(),
        namespace: pod.metadata.namespace.clone(),
        uid: pod.metadata.uid.clone(),
        field_path: container.map(|c| format!("spec.containers{{{c}}}")),
        ..Default::default()
    }
}

fn find_container<'a>(pod: &'a Pod, name: &str) -> Option<(&'a Container, bool)> {
    let spec = pod.spec.as_ref()?;
    spec.init_containers.iter().flatten().find(|c| c.name == name).map(|c| (c, true)).or_else(|| spec.containers.iter().find(|c| c.name == name).map(|c| (c, false)))
}

fn grace_of(pod: &Pod) -> Duration {
    let secs = pod.metadata.deletion_grace_period_seconds.or(pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds)).unwrap_or(30);
    Duration::from_secs(secs.max(0) as u64)
}

impl PodContext {
    fn sandbox_spec(&self, pod: &Pod, attempt: u32) -> SandboxSpec {
        let m = &pod.metadata;
        let spec = pod.spec.as_ref();
        let (name, ns, uid) = (m.name.clone().unwrap_or_default(), m.namespace.clone().unwrap_or_else(|| "default".into()), m.uid.clone().unwrap_or_default());
        let mut labels: BTreeMap<String, String> = m.labels.clone().unwrap_or_default();
        labels.insert(LABEL_POD_UID.into(), uid.clone());
        labels.insert(LABEL_POD_NAME.into(), name.clone());
        labels.insert(LABEL_POD_NAMESPACE.into(), ns.clone());
        let host_network = spec.and_then(|s| s.host_network).unwrap_or(false);
        let port_mappings = spec
            .into_iter()
            .flat_map(|s| s.containers.iter())
            .flat_map(|c| c.ports.iter().flatten())
            .filter(|p| p.host_port.unwrap_or(0) > 0)
            .map(|p| crate::runtime::PortMapping {
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                container_port: p.container_port,
                host_port: p.host_port.unwrap_or(0),
                host_ip: p.host_ip.clone().unwrap_or_default(),
            })
            .collect();
        let dns = crate::pod::dns::pod_dns(pod, &self.dns_servers, "cluster.local", &self.host_dns);
        SandboxSpec {
            hostname: spec.and_then(|s| s.hostname.clone()).unwrap_or_else(|| if host_network { self.node_name.clone() } else { name.clone() }),
            log_directory: self.logs_dir.join(format!("{ns}_{name}_{uid}")).display().to_string(),
            pod_name: name,
            namespace: ns,
            uid,
            attempt,
            host_network,
            labels,
            annotations: m.annotations.clone().unwrap_or_default(),
            dns_servers: dns.servers,
            dns_searches: dns.searches,
            dns_options: dns.options,
            port_mappings,
            cgroup_parent: String::new(),
        }
    }

    async fn observe(&self, uid: &str) -> Result<Observed, crate::runtime::RuntimeError> {
        let mut sandboxes = self.runtime.pod_sandboxes(uid).await?;
        sandboxes.sort_by_key(|s| (s.attempt, s.created_at_ns));
        let sandbox = sandboxes.pop();
        let containers = self.runtime.pod_containers(uid).await?;
        Ok(Observed { sandbox, stale_sandboxes: sandboxes, containers })
    }

    async fn event(&self, pod: &Pod, container: Option<&str>, type_: EventType, reason: &str, message: &str) {
        self.events.publish(&reference(pod, container), type_, reason, message).await;
    }
}

/// Runs the worker of one pod until it is deleted (confirmed), `removed` (the pod is gone
/// from the API: tear down without writing) or the agent shuts down (containers stay).
pub async fn run(ctx: Arc<PodContext>, mut pod_rx: watch::Receiver<Pod>, removed: CancellationToken, shutdown: CancellationToken) {
    // A pod already running when the worker began (the agent restarted) is no start.
    let was_running = pod_rx.borrow().status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
    let mut state = WorkerState { starting_since: (!was_running).then(std::time::Instant::now), ..Default::default() };
    loop {
        let pod = pod_rx.borrow_and_update().clone();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let span = tracing::info_span!("pod-sync", pod = %format!("{}/{}", pod.metadata.namespace.as_deref().unwrap_or(""), pod.metadata.name.as_deref().unwrap_or("")), trace_id = tracing::field::Empty);
        // Start-up syncs continue the pod's creation trace; later ones are traces of their own.
        let creation = if state.started_up { None } else { keelson_tracecontext::from_annotations(pod.metadata.annotations.as_ref()) };
        keelson_tracecontext::continue_trace(&span, creation);
        let began = std::time::Instant::now();
        if removed.is_cancelled() {
            let _ = tracing::Instrument::instrument(teardown(&ctx, &pod, Duration::from_secs(2)), span).await;
            ctx.metrics.pod_worked(PodWork::Kill, began.elapsed());
            return;
        }
        if pod.metadata.deletion_timestamp.is_some() {
            let done = tracing::Instrument::instrument(terminate(&ctx, &pod), span).await;
            ctx.metrics.pod_worked(PodWork::Kill, began.elapsed());
            if done {
                return;
            }
        } else {
            let synced = tracing::Instrument::instrument(sync(&ctx, &pod, &uid, &mut state), span).await;
            ctx.metrics.pod_worked(PodWork::Sync, began.elapsed());
            match synced {
                // A sandbox or container was just started: the next step needs no wait.
                Ok(true) if !shutdown.is_cancelled() => continue,
                Ok(_) => {}
                Err(e) => tracing::info!(error = %e, "pod sync failed; retrying"),
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = removed.cancelled() => {}
            r = pod_rx.changed() => if r.is_err() { return },
            _ = tokio::time::sleep(SYNC_PERIOD) => {}
        }
    }
}

/// One sync of a live pod; true when it started a sandbox or container.
async fn sync(ctx: &PodContext, pod: &Pod, uid: &str, state: &mut WorkerState) -> Result<bool, crate::runtime::RuntimeError> {
    let Some(spec) = pod.spec.as_ref() else { return Ok(false) };
    let phase_terminal = matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"));
    refresh_volumes(ctx, pod, state).await;
    let mut observed = ctx.observe(uid).await?;
    let p = plan(spec, &observed, &Verdicts(state, &observed), now_ns(), phase_terminal);
    let acted = !p.actions.is_empty();
    state.started_up |= !acted;
    let mut progressed = false;
    for action in &p.actions {
        progressed |= perform(ctx, pod, state, &observed, action).await;
    }
    if acted {
        observed = ctx.observe(uid).await?;
    }
    for b in &p.backoffs {
        let attempt = observed.next_attempt(&b.name);
        if state.backoff_reported.insert(b.name.clone(), attempt) != Some(attempt) {
            let msg = format!("Back-off restarting failed container {} in pod {}_{}({})", b.name, pod.metadata.name.as_deref().unwrap_or(""), pod.metadata.namespace.as_deref().unwrap_or(""), uid);
            ctx.event(pod, Some(&b.name), EventType::Warning, "BackOff", &msg).await;
        }
    }
    run_probes(ctx, pod, state, &observed).await;
    let p = plan(spec, &observed, &Verdicts(state, &observed), now_ns(), phase_terminal);
    report(ctx, pod, state, &observed, &p).await;
    Ok(progressed)
}

/// Rewrites ConfigMap, Secret, downward API and projected volumes of a pod whose
/// containers already run, so updates reach the files (as the kubelet's periodic sync).
async fn refresh_volumes(ctx: &PodContext, pod: &Pod, state: &mut WorkerState) {
    let Some((_, at)) = &state.volumes else { return };
    if now_ns() - at < VOLUME_REFRESH.as_nanos() as i64 {
        return;
    }
    match volumes::prepare(&ctx.client, &ctx.tokens, pod, &ctx.pods_dir).await {
        Ok(v) => state.volumes = Some((v, now_ns())),
        Err(e) => tracing::info!(error = %e, "refreshing volumes"),
    }
}

/// Writes the pod's status when it differs from what was last written.
async fn report(ctx: &PodContext, pod: &Pod, state: &mut WorkerState, observed: &Observed, p: &super::plan::Plan) {
    if matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed")) {
        return;
    }
    let mut know = Knowledge { host_ip: ctx.host_ip.clone(), host_ip6: ctx.host_ip6.clone(), waiting: state.config_errors.clone(), ..Default::default() };
    for (name, (reason, message, _, _)) in &state.image_waits {
        know.waiting.insert(name.clone(), (reason.clone(), message.clone()));
    }
    for ((name, kind), (id, t)) in &state.probes {
        if observed.latest(name).map(|c| c.id.as_str()) != Some(id.as_str()) {
            continue;
        }
        match *kind {
            "readiness" => {
                know.ready.insert(name.clone(), t.ok);
            }
            "startup" => {
                know.started.insert(name.clone(), t.ok);
            }
            _ => {}
        }
    }
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let log_dir = ctx.logs_dir.join(format!("{}_{}_{}", pod.metadata.namespace.as_deref().unwrap_or("default"), pod.metadata.name.as_deref().unwrap_or(""), uid));
    state.termination_messages.retain(|id, _| observed.containers.iter().any(|c| &c.id == id));
    for info in &observed.containers {
        if let ContainerState::Exited { exit_code, .. } = info.state {
            let msg = state.termination_messages.entry(info.id.clone()).or_insert_with(|| {
                let fallback = find_container(pod, &info.name).is_some_and(|(c, _)| c.termination_message_policy.as_deref() == Some("FallbackToLogsOnError"));
                let log = log_dir.join(&info.name).join(format!("{}.log", info.attempt));
                volumes::termination_message(&ctx.pods_dir, &uid, &info.name, info.attempt, Some(&log), fallback, exit_code != 0)
            });
            if !msg.is_empty() {
                know.messages.insert(info.id.clone(), msg.clone());
            }
        }
    }
    for c in pod.spec.iter().flat_map(|s| s.containers.iter()) {
        if c.readiness_probe.is_some() {
            know.ready.entry(c.name.clone()).or_insert(false);
        }
        if c.startup_probe.is_some() {
            know.started.entry(c.name.clone()).or_insert(false);
        }
    }
    let status = pod_status(pod, observed, p, &know, &now_rfc3339());
    if ctx.injected_bug == Some(crate::agent::InjectedBug::StalePodStatus) {
        // The injected bug: what the agent itself last wrote is all it compares with.
        if state.last_status.as_ref().map(without_transition_times) == Some(without_transition_times(&status)) {
            return;
        }
    } else if state.last_status.as_ref() == Some(&status) && super::status::stored_agrees(pod, &status) {
        return;
    }
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), pod.metadata.namespace.as_deref().unwrap_or("default"));
    match api.patch_status(pod.metadata.name.as_deref().unwrap_or(""), &PatchParams::default(), &Patch::Merge(json!({"status": status}))).await {
        Ok(_) => {
            // The first Running status ends the start (a worker that began with the pod
            // running has no start to end).
            if crate::metrics::is_running(&status) {
                if let Some(since) = state.starting_since.take() {
                    ctx.metrics.pod_started(since.elapsed());
                }
            }
            state.last_status = Some(status)
        }
        Err(e) => tracing::info!(error = %e, "writing pod status"),
    }
}

/// `status` without its conditions' transition times (for the injected stale-status bug).
fn without_transition_times(status: &Value) -> Value {
    let mut s = status.clone();
    for c in s["conditions"].as_array_mut().into_iter().flatten() {
        if let Some(o) = c.as_object_mut() {
            o.remove("lastTransitionTime");
        }
    }
    s
}

/// Performs one action; true when it started a sandbox or a container.
async fn perform(ctx: &PodContext, pod: &Pod, state: &mut WorkerState, observed: &Observed, action: &Action) -> bool {
    let rt = &ctx.runtime;
    match action {
        Action::CreateSandbox { attempt } => {
            if let Some(old) = &observed.sandbox {
                let _ = rt.stop_sandbox(&old.id).await;
            }
            let spec = ctx.sandbox_spec(pod, *attempt);
            let _ = std::fs::create_dir_all(&spec.log_directory);
            match rt.run_sandbox(&spec).await {
                Ok(id) => {
                    tracing::info!(sandbox = %id, attempt, "sandbox ready");
                    return true;
                }
                Err(e) => ctx.event(pod, None, EventType::Warning, "FailedCreatePodSandBox", &format!("Failed to create pod sandbox: {e}")).await,
            }
        }
        Action::StartContainer { name, init: _, attempt } => match start_container(ctx, pod, state, observed, name, *attempt).await {
            Ok(()) => return true,
            Err(()) => tracing::debug!(container = %name, "container not started this sync"),
        },
        Action::StartCreated { id } => {
            if let Err(e) = rt.start_container(id).await {
                tracing::info!(error = %e, "starting a created container");
            }
        }
        Action::KillContainer { id, name, reason } => {
            let why = match reason {
                KillReason::LivenessFailed => format!("Container {name} failed liveness probe, will be restarted"),
                KillReason::StartupFailed => format!("Container {name} failed startup probe, will be restarted"),
            };
            ctx.event(pod, Some(name), EventType::Normal, "Killing", &why).await;
            if let Some((c, _)) = find_container(pod, name) {
                pre_stop(ctx, c, id).await;
            }
            if let Err(e) = rt.stop_container(id, grace_of(pod)).await {
                tracing::info!(error = %e, "stopping a container");
            }
        }
        Action::StopSandbox { id } => {
            if let Err(e) = rt.stop_sandbox(id).await {
                tracing::info!(error = %e, "stopping a finished pod's sandbox");
            }
        }
        Action::RemoveSandbox { id } => {
            let _ = rt.remove_sandbox(id).await;
        }
        Action::RemoveContainer { id } => {
            let _ = rt.remove_container(id).await;
        }
    }
    false
}

/// Makes sure the image is there, as the pull policy says; `Err` after recording why not.
async fn ensure_image(ctx: &PodContext, pod: &Pod, state: &mut WorkerState, c: &Container) -> Result<(), ()> {
    let image = c.image.clone().unwrap_or_default();
    let policy = c.image_pull_policy.clone().unwrap_or_else(|| if image.ends_with(":latest") || !image.rsplit('/').next().unwrap_or("").contains(':') { "Always".into() } else { "IfNotPresent".into() });
    if let Some((_, _, until, _)) = state.image_waits.get(&c.name) {
        if now_ns() < *until {
            return Err(());
        }
    }
    let present = ctx.runtime.image_id(&image).await.ok().flatten().is_some();
    if present && policy != "Always" {
        state.image_waits.remove(&c.name);
        ctx.event(pod, Some(&c.name), EventType::Normal, "Pulled", &format!("Container image \"{image}\" already present on machine")).await;
        return Ok(());
    }
    if policy == "Never" {
        let msg = format!("Container image \"{image}\" is not present with pull policy of Never");
        if state.image_waits.insert(c.name.clone(), ("ErrImageNeverPull".into(), msg.clone(), now_ns() + 10_000_000_000, Duration::from_secs(10))).is_none() {
            ctx.event(pod, Some(&c.name), EventType::Warning, "ErrImageNeverPull", &msg).await;
        }
        return Err(());
    }
    ctx.event(pod, Some(&c.name), EventType::Normal, "Pulling", &format!("Pulling image \"{image}\"")).await;
    let started = std::time::Instant::now();
    match pull(ctx, pod, &image).await {
        Ok(_) => {
            state.image_waits.remove(&c.name);
            let took = started.elapsed().as_secs_f64();
            ctx.event(pod, Some(&c.name), EventType::Normal, "Pulled", &format!("Successfully pulled image \"{image}\" in {took:.3}s ({took:.3}s including waiting)")).await;
            Ok(())
        }
        Err(e) => {
            let delay = match state.image_waits.get(&c.name) {
                Some((_, _, _, d)) => (*d * 2).min(Duration::from_secs(300)),
                None => Duration::from_secs(10),
            };
            let first = !state.image_waits.contains_key(&c.name);
            let reason = if first { "ErrImagePull" } else { "ImagePullBackOff" };
            let msg = if first { format!("failed to pull image \"{image}\": {e}") } else { format!("Back-off pulling image \"{image}\": {e}") };
            state.image_waits.insert(c.name.clone(), (reason.into(), msg, now_ns() + delay.as_nanos() as i64, delay));
            ctx.event(pod, Some(&c.name), EventType::Warning, "Failed", &format!("Failed to pull image \"{image}\": {e}")).await;
            Err(())
        }
    }
}

/// Pulls `image` with the pod's image pull secrets that match it, each in turn until one
/// works (as kubelet does), anonymously when none match. A secret that cannot be read is
/// left out with a Warning, as kubelet's `FailedToRetrieveImagePullSecret`.
async fn pull(ctx: &PodContext, pod: &Pod, image: &str) -> Result<String, crate::runtime::RuntimeError> {
    let names: Vec<String> = pod.spec.iter().flat_map(|s| s.image_pull_secrets.iter().flatten()).map(|r| r.name.clone()).filter(|n| !n.is_empty()).collect();
    let mut secrets = Vec::new();
    let mut unusable = Vec::new();
    if !names.is_empty() {
        let api: kube::Api<k8s_openapi::api::core::v1::Secret> = kube::Api::namespaced(ctx.client.clone(), pod.metadata.namespace.as_deref().unwrap_or("default"));
        for name in &names {
            match api.get_opt(name).await {
                Ok(Some(s)) => match crate::pod::pull_secrets::credentials_for(image, std::slice::from_ref(&s)) {
                    Ok(_) => secrets.push(s),
                    Err(e) => {
                        tracing::warn!(secret = %name, error = %e, "image pull secret left out");
                        unusable.push(name.clone());
                    }
                },
                Ok(None) | Err(_) => unusable.push(name.clone()),
            }
        }
    }
    if !unusable.is_empty() {
        let msg = format!("Unable to retrieve some image pull secrets ({}); attempting to pull the image may not succeed.", unusable.join(", "));
        ctx.event(pod, None, EventType::Warning, "FailedToRetrieveImagePullSecret", &msg).await;
    }
    let credentials = crate::pod::pull_secrets::credentials_for(image, &secrets).unwrap_or_default();
    if credentials.is_empty() {
        return ctx.runtime.pull_image(image, None).await;
    }
    let mut last = None;
    for auth in &credentials {
        match ctx.runtime.pull_image(image, Some(auth)).await {
            Ok(r) => return Ok(r),
            Err(e) => {
                tracing::debug!(user = %auth.username, error = %e, "pull with these credentials failed");
                last = Some(e);
            }
        }
    }
    Err(last.expect("at least one credential was tried"))
}

async fn start_container(ctx: &PodContext, pod: &Pod, state: &mut WorkerState, observed: &Observed, name: &str, attempt: u32) -> Result<(), ()> {
    let Some((c, init)) = find_container(pod, name) else { return Err(()) };
    let Some(sandbox) = observed.sandbox.as_ref() else { return Err(()) };
    ensure_image(ctx, pod, state, c).await?;
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let fresh = state.volumes.as_ref().is_some_and(|(_, at)| now_ns() - at < VOLUME_REFRESH.as_nanos() as i64);
    if !fresh {
        match volumes::prepare(&ctx.client, &ctx.tokens, pod, &ctx.pods_dir).await {
            Ok(v) => state.volumes = Some((v, now_ns())),
            Err(e) => {
                ctx.event(pod, None, EventType::Warning, "FailedMount", &format!("MountVolume.SetUp failed: {e}")).await;
                return Err(());
            }
        }
    }
    let vols = state.volumes.as_ref().map(|(v, _)| v.clone()).unwrap_or_default();
    let config_error = |state: &mut WorkerState, msg: String| {
        state.config_errors.insert(name.to_string(), ("CreateContainerConfigError".into(), msg));
    };
    let env = match env::resolve(&ctx.client, pod, c).await {
        Ok(e) => e,
        Err(e) => {
            let msg = e.to_string();
            if state.config_errors.get(name).map(|(_, m)| m) != Some(&msg) {
                ctx.event(pod, Some(name), EventType::Warning, "Failed", &format!("Error: {msg}")).await;
            }
            config_error(state, msg);
            return Err(());
        }
    };
    let mounts = match volumes::mounts(c, &vols) {
        Ok(mut m) => {
            let path = c.termination_message_path.clone().unwrap_or_else(|| "/dev/termination-log".into());
            if let Ok(host) = volumes::termination_log(&ctx.pods_dir, &uid, name, attempt) {
                m.push(crate::runtime::MountSpec { container_path: path, host_path: host.display().to_string(), read_only: false });
            }
            m
        }
        Err(e) => {
            config_error(state, e.to_string());
            return Err(());
        }
    };
    state.config_errors.remove(name);
    let (command, args) = env::expand_command(c, &env);
    let sb = ctx.sandbox_spec(pod, sandbox.attempt);
    let mut labels = BTreeMap::new();
    labels.insert(LABEL_POD_UID.to_string(), uid.clone());
    labels.insert(LABEL_POD_NAME.to_string(), pod.metadata.name.clone().unwrap_or_default());
    labels.insert(LABEL_POD_NAMESPACE.to_string(), pod.metadata.namespace.clone().unwrap_or_default());
    labels.insert(LABEL_CONTAINER_NAME.to_string(), name.to_string());
    let sc = c.security_context.as_ref();
    let spec = ContainerSpec {
        name: name.to_string(),
        attempt,
        image: c.image.clone().unwrap_or_default(),
        command,
        args,
        working_dir: c.working_dir.clone().unwrap_or_default(),
        env,
        mounts,
        labels,
        annotations: [("io.kubernetes.container.restartCount".to_string(), attempt.to_string())].into(),
        log_path: format!("{name}/{attempt}.log"),
        resources: resources::linux_resources(c),
        run_as_user: sc.and_then(|s| s.run_as_user).or(pod.spec.as_ref().and_then(|s| s.security_context.as_ref()).and_then(|s| s.run_as_user)),
        privileged: sc.and_then(|s| s.privileged).unwrap_or(false),
        tty: c.tty.unwrap_or(false),
        stdin: c.stdin.unwrap_or(false),
        stdin_once: c.stdin_once.unwrap_or(false),
        init,
    };
    let _ = std::fs::create_dir_all(PathBuf::from(&sb.log_directory).join(name));
    let id = match ctx.runtime.create_container(&sandbox.id, &sb, &spec).await {
        Ok(id) => id,
        Err(e) => {
            state.config_errors.insert(name.to_string(), ("CreateContainerError".into(), e.to_string()));
            ctx.event(pod, Some(name), EventType::Warning, "Failed", &format!("Error: {e}")).await;
            return Err(());
        }
    };
    ctx.event(pod, Some(name), EventType::Normal, "Created", &format!("Created container: {name}")).await;
    if let Err(e) = ctx.runtime.start_container(&id).await {
        ctx.event(pod, Some(name), EventType::Warning, "Failed", &format!("Error: {e}")).await;
        return Err(());
    }
    ctx.event(pod, Some(name), EventType::Normal, "Started", &format!("Started container {name}")).await;
    if let Some(cmd) = c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()).and_then(|h| h.exec.as_ref()).and_then(|e| e.command.clone()) {
        match ctx.runtime.exec_sync(&id, &cmd, Duration::from_secs(30)).await {
            Ok(r) if r.exit_code == 0 => {}
            outcome => {
                let why = match outcome {
                    Ok(r) => format!("command '{}' exited with {}: {}", cmd.join(" "), r.exit_code, String::from_utf8_lossy(&r.stderr).trim()),
                    Err(e) => e.to_string(),
                };
                ctx.event(pod, Some(name), EventType::Warning, "FailedPostStartHook", &format!("PostStartHook failed: {why}")).await;
                let _ = ctx.runtime.stop_container(&id, grace_of(pod)).await;
            }
        }
    }
    Ok(())
}

async fn pre_stop(ctx: &PodContext, c: &Container, id: &str) {
    if let Some(cmd) = c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref()).and_then(|h| h.exec.as_ref()).and_then(|e| e.command.clone()) {
        let _ = ctx.runtime.exec_sync(id, &cmd, Duration::from_secs(30)).await;
    }
}

/// Runs every probe that is due, for the running containers.
async fn run_probes(ctx: &PodContext, pod: &Pod, state: &mut WorkerState, observed: &Observed) {
    let Some(spec) = pod.spec.as_ref() else { return };
    let pod_ip = observed.sandbox.as_ref().and_then(|s| s.ip.clone()).unwrap_or_else(|| ctx.host_ip.clone());
    let now = now_ns();
    for c in &spec.containers {
        let Some(info) = observed.latest(&c.name) else { continue };
        let ContainerState::Running { started_at_ns } = info.state else { continue };
        let kinds: [(&'static str, Kind, Option<&k8s_openapi::api::core::v1::Probe>); 3] =
            [("startup", Kind::Startup, c.startup_probe.as_ref()), ("liveness", Kind::Liveness, c.liveness_probe.as_ref()), ("readiness", Kind::Readiness, c.readiness_probe.as_ref())];
        for (key, kind, probe) in kinds {
            let Some(probe) = probe else { continue };
            let slot = (c.name.clone(), key);
            if state.probes.get(&slot).map(|(id, _)| id != &info.id).unwrap_or(true) {
                state.probes.insert(slot.clone(), (info.id.clone(), Tracker::new(kind, probe.clone(), started_at_ns)));
            }
            if kind != Kind::Startup {
                let started = state.probes.get(&(c.name.clone(), "startup")).map(|(id, t)| id == &info.id && t.ok).unwrap_or(true);
                if !started {
                    continue;
                }
            } else if state.probes[&slot].1.ok {
                continue;
            }
            let (due, timeout) = {
                let t = &state.probes[&slot].1;
                (t.due(now), t.timeout())
            };
            if !due {
                continue;
            }
            // A span per probe run: inside the sync's span, so a start-up sync's first
            // probes are part of the pod's creation trace.
            let handler = if probe.exec.is_some() { "exec" } else if probe.tcp_socket.is_some() { "tcpSocket" } else if probe.http_get.is_some() { "httpGet" } else { "grpc" };
            let span = tracing::info_span!("probe", container = %c.name, probe = key, handler, result = tracing::field::Empty);
            let outcome = tracing::Instrument::instrument(probe::run(ctx.runtime.as_ref(), c, &info.id, &pod_ip, probe, timeout), span.clone()).await;
            span.record("result", if outcome.is_ok() { "success" } else { "failure" });
            let t = &mut state.probes.get_mut(&slot).expect("inserted above").1;
            t.record(outcome.is_ok(), now_ns());
            if let Err(msg) = outcome {
                ctx.event(pod, Some(&c.name), EventType::Warning, "Unhealthy", &format!("{} probe failed: {msg}", kind.word())).await;
            }
        }
    }
}

/// Stops everything of a deleted pod within its grace period, removes it, and confirms
/// the deletion. Returns whether the pod is gone.
async fn terminate(ctx: &PodContext, pod: &Pod) -> bool {
    let grace = grace_of(pod);
    if let Err(e) = teardown(ctx, pod, grace).await {
        tracing::info!(error = %e, "stopping a deleted pod; retrying");
        return false;
    }
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), pod.metadata.namespace.as_deref().unwrap_or("default"));
    let dp = DeleteParams { grace_period_seconds: Some(0), preconditions: Some(Preconditions { uid: pod.metadata.uid.clone(), resource_version: None }), ..Default::default() };
    match api.delete(pod.metadata.name.as_deref().unwrap_or(""), &dp).await {
        Ok(_) => true,
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => true,
        Err(e) => {
            tracing::info!(error = %e, "confirming a pod's deletion; retrying");
            false
        }
    }
}

/// Stops and removes every container and sandbox of `pod`, and its volumes.
async fn teardown(ctx: &PodContext, pod: &Pod, grace: Duration) -> Result<(), crate::runtime::RuntimeError> {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let observed = ctx.observe(&uid).await?;
    let running: Vec<_> = observed.containers.iter().filter(|c| matches!(c.state, ContainerState::Running { .. } | ContainerState::Created)).collect();
    let stops = running.iter().map(|c| async {
        if let Some((spec, _)) = find_container(pod, &c.name) {
            ctx.event(pod, Some(&c.name), EventType::Normal, "Killing", &format!("Stopping container {}", c.name)).await;
            pre_stop(ctx, spec, &c.id).await;
        }
        ctx.runtime.stop_container(&c.id, grace).await
    });
    for r in futures::future::join_all(stops).await {
        r?;
    }
    for c in &observed.containers {
        ctx.runtime.remove_container(&c.id).await?;
    }
    for s in observed.sandbox.iter().chain(observed.stale_sandboxes.iter()) {
        ctx.runtime.stop_sandbox(&s.id).await?;
        ctx.runtime.remove_sandbox(&s.id).await?;
    }
    volumes::unmount_under(&ctx.pods_dir.join(&uid));
    let _ = std::fs::remove_dir_all(ctx.pods_dir.join(&uid));
    Ok(())
}
