//! What to do next for one pod, as the kubelet's `computePodActions`: a pure function of
//! the pod's spec, what the runtime shows for it, the probes' verdicts and the time.
//! The worker performs the actions and asks again; nothing here remembers anything, so
//! an agent restarted at any moment continues from what the runtime shows.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, PodSpec};

use crate::runtime::{ContainerInfo, ContainerState, SandboxInfo};

/// The first restart of a crashed container is immediate; later ones wait 10 s doubling
/// to 300 s (the kubelet's CrashLoopBackOff); a container that ran 10 minutes starts over.
pub const BACKOFF_INITIAL: Duration = Duration::from_secs(10);
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);
pub const BACKOFF_RESET_AFTER: Duration = Duration::from_secs(600);

/// What the runtime shows of one pod: its newest sandbox and every container of it.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    pub sandbox: Option<SandboxInfo>,
    /// Older sandboxes of the pod, to be removed.
    pub stale_sandboxes: Vec<SandboxInfo>,
    pub containers: Vec<ContainerInfo>,
}

impl Observed {
    /// The newest instance of container `name` in the current sandbox.
    pub fn latest(&self, name: &str) -> Option<&ContainerInfo> {
        let sandbox = self.sandbox.as_ref()?;
        self.containers.iter().filter(|c| c.name == name && c.sandbox_id == sandbox.id).max_by_key(|c| (c.attempt, c.created_at_ns))
    }

    /// The next attempt number for container `name` (one past every instance seen).
    pub fn next_attempt(&self, name: &str) -> u32 {
        self.containers.iter().filter(|c| c.name == name).map(|c| c.attempt + 1).max().unwrap_or(0)
    }
}

/// Why a running container is being stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KillReason {
    LivenessFailed,
    StartupFailed,
}

/// One step for the worker.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Kill what is left of the current sandbox (if any) and make a new one.
    CreateSandbox { attempt: u32 },
    /// Create and start a container (`init` for an init container).
    StartContainer { name: String, init: bool, attempt: u32 },
    /// Start a container that was created but never started.
    StartCreated { id: String },
    KillContainer { id: String, name: String, reason: KillReason },
    /// A terminal pod's sandbox is stopped (its containers' records stay).
    StopSandbox { id: String },
    RemoveSandbox { id: String },
    /// An older, exited instance of a container (the kubelet keeps only the newest).
    RemoveContainer { id: String },
}

/// A container waiting to be restarted.
#[derive(Clone, Debug, PartialEq)]
pub struct BackOff {
    pub name: String,
    pub delay: Duration,
    pub until_ns: i64,
}

/// What to do now, and what waits.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub actions: Vec<Action>,
    pub backoffs: Vec<BackOff>,
    /// The pod is done (every container finished under its restart policy).
    pub terminal: Option<Terminal>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Terminal {
    Succeeded,
    Failed,
}

/// The probes' verdict per container, as the worker tracks it.
pub trait ProbeVerdicts {
    /// The liveness probe has failed `failureThreshold` times in a row.
    fn liveness_failed(&self, container: &str) -> bool;
    /// The startup probe has failed `failureThreshold` times in a row.
    fn startup_failed(&self, container: &str) -> bool;
}

/// No probe has failed (a pod without probes).
pub struct NoProbeFailures;

impl ProbeVerdicts for NoProbeFailures {
    fn liveness_failed(&self, _: &str) -> bool {
        false
    }
    fn startup_failed(&self, _: &str) -> bool {
        false
    }
}

/// The wait before starting attempt `attempt` of a container whose last run lasted `ran`.
pub fn restart_delay(attempt: u32, ran: Duration) -> Duration {
    if attempt <= 1 || ran >= BACKOFF_RESET_AFTER {
        return Duration::ZERO;
    }
    let doublings = (attempt - 2).min(10);
    (BACKOFF_INITIAL * 2u32.pow(doublings)).min(BACKOFF_MAX)
}

fn restart_policy(spec: &PodSpec) -> &str {
    spec.restart_policy.as_deref().unwrap_or("Always")
}

/// Whether an exited container is restarted under `policy`.
fn restarts(policy: &str, exit_code: i32) -> bool {
    match policy {
        "Never" => false,
        "OnFailure" => exit_code != 0,
        _ => true,
    }
}

/// Start (now or after a back-off) the next instance of `c`, whose latest one exited.
fn restart_or_wait(plan: &mut Plan, c: &Container, init: bool, observed: &Observed, exited: &ContainerInfo, now_ns: i64) {
    let ContainerState::Exited { started_at_ns, finished_at_ns, .. } = exited.state else { return };
    let attempt = observed.next_attempt(&c.name);
    let ran = Duration::from_nanos((finished_at_ns - started_at_ns).max(0) as u64);
    let delay = restart_delay(attempt, ran);
    let until_ns = finished_at_ns.saturating_add(delay.as_nanos() as i64);
    if now_ns >= until_ns {
        plan.actions.push(Action::StartContainer { name: c.name.clone(), init, attempt });
    } else {
        plan.backoffs.push(BackOff { name: c.name.clone(), delay, until_ns });
    }
}

/// Whether the pod is done: an init container failed under restartPolicy Never, or every
/// container exited and its policy does not restart it.
pub fn terminal(spec: &PodSpec, observed: &Observed) -> Option<Terminal> {
    let policy = restart_policy(spec);
    observed.sandbox.as_ref()?;
    if policy == "Never" {
        for c in spec.init_containers.iter().flatten() {
            if let Some(ContainerInfo { state: ContainerState::Exited { exit_code, .. }, .. }) = observed.latest(&c.name) {
                if *exit_code != 0 {
                    return Some(Terminal::Failed);
                }
            }
        }
    }
    let mut failed = false;
    for c in &spec.containers {
        match observed.latest(&c.name).map(|i| &i.state) {
            Some(ContainerState::Exited { exit_code, .. }) if !restarts(policy, *exit_code) => failed |= *exit_code != 0,
            _ => return None,
        }
    }
    if spec.containers.is_empty() {
        return None;
    }
    Some(if failed { Terminal::Failed } else { Terminal::Succeeded })
}

/// The next steps for a pod that is not being deleted. `phase_terminal` is true when the
/// stored status already says Succeeded or Failed: such a pod is never started again.
pub fn plan(spec: &PodSpec, observed: &Observed, probes: &dyn ProbeVerdicts, now_ns: i64, phase_terminal: bool) -> Plan {
    let mut plan = Plan::default();
    for old in &observed.stale_sandboxes {
        if !old.ready {
            plan.actions.push(Action::RemoveSandbox { id: old.id.clone() });
        }
    }
    let policy = restart_policy(spec);
    plan.terminal = terminal(spec, observed);
    if plan.terminal.is_some() || phase_terminal {
        if let Some(s) = observed.sandbox.as_ref().filter(|s| s.ready) {
            plan.actions.push(Action::StopSandbox { id: s.id.clone() });
        }
        return plan;
    }
    match &observed.sandbox {
        Some(s) if s.ready => {}
        Some(s) => {
            plan.actions.push(Action::CreateSandbox { attempt: s.attempt + 1 });
            return plan;
        }
        None => {
            plan.actions.push(Action::CreateSandbox { attempt: 0 });
            return plan;
        }
    }
    // Older instances of each container are removed once a newer one exists.
    for c in &observed.containers {
        if let Some(latest) = observed.latest(&c.name) {
            if latest.id != c.id && matches!(c.state, ContainerState::Exited { .. }) {
                plan.actions.push(Action::RemoveContainer { id: c.id.clone() });
            }
        }
    }
    // Init containers, one at a time, in order.
    for c in spec.init_containers.iter().flatten() {
        match observed.latest(&c.name) {
            None => {
                plan.actions.push(Action::StartContainer { name: c.name.clone(), init: true, attempt: observed.next_attempt(&c.name) });
                return plan;
            }
            Some(i) => match &i.state {
                ContainerState::Exited { exit_code: 0, .. } => continue,
                ContainerState::Exited { .. } => {
                    restart_or_wait(&mut plan, c, true, observed, i, now_ns);
                    return plan;
                }
                ContainerState::Created => {
                    plan.actions.push(Action::StartCreated { id: i.id.clone() });
                    return plan;
                }
                ContainerState::Running { .. } | ContainerState::Unknown => return plan,
            },
        }
    }
    for c in &spec.containers {
        match observed.latest(&c.name) {
            None => plan.actions.push(Action::StartContainer { name: c.name.clone(), init: false, attempt: observed.next_attempt(&c.name) }),
            Some(i) => match &i.state {
                ContainerState::Created => plan.actions.push(Action::StartCreated { id: i.id.clone() }),
                ContainerState::Running { .. } => {
                    let reason = if probes.startup_failed(&c.name) {
                        Some(KillReason::StartupFailed)
                    } else if probes.liveness_failed(&c.name) {
                        Some(KillReason::LivenessFailed)
                    } else {
                        None
                    };
                    if let Some(reason) = reason {
                        plan.actions.push(Action::KillContainer { id: i.id.clone(), name: c.name.clone(), reason });
                    }
                }
                ContainerState::Exited { exit_code, .. } => {
                    if restarts(policy, *exit_code) {
                        restart_or_wait(&mut plan, c, false, observed, i, now_ns);
                    }
                }
                ContainerState::Unknown => {}
            },
        }
    }
    plan
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
