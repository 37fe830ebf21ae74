use std::time::Duration;

use k8s_openapi::api::core::v1::PodSpec;
use serde_json::json;

use super::*;
use crate::runtime::{ContainerInfo, ContainerState, SandboxInfo};

const S: i64 = 1_000_000_000;

fn spec(v: serde_json::Value) -> PodSpec {
    serde_json::from_value(v).unwrap()
}

fn sandbox(ready: bool) -> SandboxInfo {
    SandboxInfo { id: "sb".into(), uid: "u".into(), attempt: 0, ready, ip: Some("10.42.0.2".into()), additional_ips: vec![], created_at_ns: 1 }
}

fn container(name: &str, attempt: u32, state: ContainerState) -> ContainerInfo {
    ContainerInfo { id: format!("{name}-{attempt}"), sandbox_id: "sb".into(), pod_uid: "u".into(), pod_name: "p".into(), pod_namespace: "default".into(), name: name.into(), attempt, image: "img".into(), image_ref: "sha256:x".into(), created_at_ns: attempt as i64, state }
}

fn exited(code: i32, started: i64, finished: i64) -> ContainerState {
    ContainerState::Exited { exit_code: code, reason: String::new(), message: String::new(), started_at_ns: started, finished_at_ns: finished }
}

fn observed(ready: bool, containers: Vec<ContainerInfo>) -> Observed {
    Observed { sandbox: Some(sandbox(ready)), stale_sandboxes: vec![], containers }
}

fn one(policy: &str) -> PodSpec {
    spec(json!({"restartPolicy": policy, "containers": [{"name": "app", "image": "img"}]}))
}

#[test]
fn a_new_pod_gets_a_sandbox_then_its_containers() {
    let s = spec(json!({"containers": [{"name": "a"}, {"name": "b"}]}));
    let p = plan(&s, &Observed::default(), &NoProbeFailures, 0, false);
    assert_eq!(p.actions, vec![Action::CreateSandbox { attempt: 0 }]);
    let p = plan(&s, &observed(true, vec![]), &NoProbeFailures, 0, false);
    assert_eq!(p.actions, vec![Action::StartContainer { name: "a".into(), init: false, attempt: 0 }, Action::StartContainer { name: "b".into(), init: false, attempt: 0 }]);
}

#[test]
fn init_containers_run_one_at_a_time_before_the_app() {
    let s = spec(json!({"initContainers": [{"name": "i1"}, {"name": "i2"}], "containers": [{"name": "app"}]}));
    let p = plan(&s, &observed(true, vec![]), &NoProbeFailures, 0, false);
    assert_eq!(p.actions, vec![Action::StartContainer { name: "i1".into(), init: true, attempt: 0 }]);
    let running = observed(true, vec![container("i1", 0, ContainerState::Running { started_at_ns: 1 })]);
    assert!(plan(&s, &running, &NoProbeFailures, 0, false).actions.is_empty(), "wait for i1");
    let done = observed(true, vec![container("i1", 0, exited(0, 1, 2))]);
    assert_eq!(plan(&s, &done, &NoProbeFailures, 0, false).actions, vec![Action::StartContainer { name: "i2".into(), init: true, attempt: 0 }]);
    let both = observed(true, vec![container("i1", 0, exited(0, 1, 2)), container("i2", 0, exited(0, 2, 3))]);
    assert_eq!(plan(&s, &both, &NoProbeFailures, 0, false).actions, vec![Action::StartContainer { name: "app".into(), init: false, attempt: 0 }]);
}

#[test]
fn a_failed_init_container_fails_the_pod_under_never_and_retries_otherwise() {
    let s = spec(json!({"restartPolicy": "Never", "initContainers": [{"name": "i"}], "containers": [{"name": "app"}]}));
    let failed = observed(true, vec![container("i", 0, exited(1, 1, 2))]);
    let p = plan(&s, &failed, &NoProbeFailures, 3 * S, false);
    assert_eq!(p.terminal, Some(Terminal::Failed));
    assert_eq!(p.actions, vec![Action::StopSandbox { id: "sb".into() }]);
    let s = spec(json!({"restartPolicy": "Always", "initContainers": [{"name": "i"}], "containers": [{"name": "app"}]}));
    assert_eq!(plan(&s, &failed, &NoProbeFailures, 3 * S, false).actions, vec![Action::StartContainer { name: "i".into(), init: true, attempt: 1 }]);
}

#[test]
fn restart_policies_decide_what_an_exit_means() {
    let ok = observed(true, vec![container("app", 0, exited(0, S, 2 * S))]);
    let bad = observed(true, vec![container("app", 0, exited(2, S, 2 * S))]);
    let now = 3 * S;
    assert_eq!(plan(&one("Always"), &ok, &NoProbeFailures, now, false).actions, vec![Action::StartContainer { name: "app".into(), init: false, attempt: 1 }]);
    assert_eq!(plan(&one("OnFailure"), &ok, &NoProbeFailures, now, false).terminal, Some(Terminal::Succeeded));
    assert_eq!(plan(&one("OnFailure"), &bad, &NoProbeFailures, now, false).actions, vec![Action::StartContainer { name: "app".into(), init: false, attempt: 1 }]);
    assert_eq!(plan(&one("Never"), &bad, &NoProbeFailures, now, false).terminal, Some(Terminal::Failed));
    assert_eq!(plan(&one("Never"), &ok, &NoProbeFailures, now, false).terminal, Some(Terminal::Succeeded));
}

#[test]
fn crash_loops_back_off_ten_seconds_doubling_to_five_minutes() {
    assert_eq!(restart_delay(1, Duration::ZERO), Duration::ZERO, "the first restart is immediate");
    assert_eq!(restart_delay(2, Duration::ZERO), Duration::from_secs(10));
    assert_eq!(restart_delay(3, Duration::ZERO), Duration::from_secs(20));
    assert_eq!(restart_delay(7, Duration::ZERO), Duration::from_secs(300));
    assert_eq!(restart_delay(40, Duration::ZERO), Duration::from_secs(300));
    assert_eq!(restart_delay(9, Duration::from_secs(601)), Duration::ZERO, "ten minutes of running resets it");
    let crashed = observed(true, vec![container("app", 0, exited(1, S, 2 * S)), container("app", 1, exited(1, 3 * S, 4 * S))]);
    let p = plan(&one("Always"), &crashed, &NoProbeFailures, 5 * S, false);
    assert_eq!(p.backoffs, vec![BackOff { name: "app".into(), delay: Duration::from_secs(10), until_ns: 14 * S }]);
    assert_eq!(p.actions, vec![Action::RemoveContainer { id: "app-0".into() }], "only the old instance is removed while waiting");
    let p = plan(&one("Always"), &crashed, &NoProbeFailures, 14 * S, false);
    assert!(p.actions.contains(&Action::StartContainer { name: "app".into(), init: false, attempt: 2 }));
}

struct Failing(&'static str);

impl ProbeVerdicts for Failing {
    fn liveness_failed(&self, c: &str) -> bool {
        self.0 == "liveness" && c == "app"
    }
    fn startup_failed(&self, c: &str) -> bool {
        self.0 == "startup" && c == "app"
    }
}

#[test]
fn failed_liveness_or_startup_probes_kill_the_container() {
    let running = observed(true, vec![container("app", 0, ContainerState::Running { started_at_ns: S })]);
    for (which, reason) in [("liveness", KillReason::LivenessFailed), ("startup", KillReason::StartupFailed)] {
        let p = plan(&one("Always"), &running, &Failing(which), 2 * S, false);
        assert_eq!(p.actions, vec![Action::KillContainer { id: "app-0".into(), name: "app".into(), reason }]);
    }
    assert!(plan(&one("Always"), &running, &NoProbeFailures, 2 * S, false).actions.is_empty());
}

#[test]
fn a_dead_sandbox_is_replaced_unless_the_pod_is_done() {
    let dead = observed(false, vec![container("app", 0, ContainerState::Running { started_at_ns: S })]);
    assert_eq!(plan(&one("Always"), &dead, &NoProbeFailures, 0, false).actions, vec![Action::CreateSandbox { attempt: 1 }]);
    let finished = observed(false, vec![container("app", 0, exited(0, S, 2 * S))]);
    let p = plan(&one("Never"), &finished, &NoProbeFailures, 0, false);
    assert!(p.actions.is_empty(), "a finished pod's stopped sandbox stays stopped: {:?}", p.actions);
    assert_eq!(p.terminal, Some(Terminal::Succeeded));
    assert!(plan(&one("Always"), &Observed::default(), &NoProbeFailures, 0, true).actions.is_empty(), "a stored terminal phase is final");
}
