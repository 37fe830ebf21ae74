use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use super::*;
use crate::pod::plan::{BackOff, Observed, Plan, Terminal};
use crate::runtime::{ContainerInfo, ContainerState, SandboxInfo};

fn pod(v: serde_json::Value) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}, "spec": v,
        "status": {"conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}))
    .unwrap()
}

fn info(name: &str, attempt: u32, state: ContainerState) -> ContainerInfo {
    ContainerInfo { id: format!("{name}{attempt}"), sandbox_id: "sb".into(), pod_uid: "u1".into(), pod_name: "p".into(), pod_namespace: "ns".into(), name: name.into(), attempt, image: "i".into(), image_ref: "sha256:abc".into(), created_at_ns: attempt as i64, state }
}

fn observed(containers: Vec<ContainerInfo>) -> Observed {
    Observed { sandbox: Some(SandboxInfo { id: "sb".into(), uid: "u1".into(), attempt: 0, ready: true, ip: Some("10.42.0.7".into()), additional_ips: vec!["fd42::7".into()], created_at_ns: 0 }), stale_sandboxes: vec![], containers }
}

fn know() -> Knowledge {
    Knowledge { host_ip: "10.0.0.1".into(), ..Default::default() }
}

fn condition<'a>(s: &'a serde_json::Value, t: &str) -> &'a serde_json::Value {
    s["conditions"].as_array().unwrap().iter().find(|c| c["type"] == t).unwrap()
}

#[test]
fn a_running_pod_is_ready_with_its_ips() {
    let p = pod(json!({"containers": [{"name": "web", "image": "busybox"}]}));
    let s = pod_status(&p, &observed(vec![info("web", 0, ContainerState::Running { started_at_ns: 1_800_000_000_000_000_000 })]), &Plan::default(), &know(), "2026-02-01T00:00:00Z");
    assert_eq!(s["phase"], "Running");
    assert_eq!(s["podIP"], "10.42.0.7");
    assert_eq!(s["podIPs"], json!([{"ip": "10.42.0.7"}, {"ip": "fd42::7"}]), "a dual-stack pod lists its IPv6 address second");
    assert_eq!(s["hostIP"], "10.0.0.1");
    assert_eq!(condition(&s, "Ready")["status"], "True");
    assert_eq!(condition(&s, "PodScheduled")["lastTransitionTime"], "2026-01-01T00:00:00Z", "the scheduler's condition is kept");
    let c = &s["containerStatuses"][0];
    assert_eq!((c["ready"].as_bool(), c["containerID"].as_str()), (Some(true), Some("containerd://web0")));
    assert_eq!(c["state"]["running"]["startedAt"], "2027-01-15T08:00:00Z");
}

#[test]
fn a_dual_stack_node_lists_both_host_ips_and_gives_host_network_pods_both() {
    let dual = Knowledge { host_ip: "10.0.0.1".into(), host_ip6: Some("fd00::1".into()), ..Default::default() };
    let running = || observed(vec![info("web", 0, ContainerState::Running { started_at_ns: 1_800_000_000_000_000_000 })]);
    let p = pod(json!({"containers": [{"name": "web", "image": "busybox"}]}));
    let s = pod_status(&p, &running(), &Plan::default(), &dual, "2026-02-01T00:00:00Z");
    assert_eq!((s["hostIP"].clone(), s["hostIPs"].clone()), (json!("10.0.0.1"), json!([{"ip": "10.0.0.1"}, {"ip": "fd00::1"}])));
    assert_eq!(s["podIPs"], json!([{"ip": "10.42.0.7"}, {"ip": "fd42::7"}]));
    let host = pod(json!({"hostNetwork": true, "containers": [{"name": "web", "image": "busybox"}]}));
    let s = pod_status(&host, &running(), &Plan::default(), &dual, "2026-02-01T00:00:00Z");
    assert_eq!(s["podIPs"], json!([{"ip": "10.0.0.1"}, {"ip": "fd00::1"}]), "a hostNetwork pod has the node's addresses");
    let s = pod_status(&host, &running(), &Plan::default(), &know(), "2026-02-01T00:00:00Z");
    assert_eq!((s["podIPs"].clone(), s["hostIPs"].clone()), (json!([{"ip": "10.0.0.1"}]), json!([{"ip": "10.0.0.1"}])));
}

#[test]
fn a_crash_loop_shows_back_off_and_the_last_termination() {
    let p = pod(json!({"containers": [{"name": "app", "image": "busybox"}]}));
    let crashed = ContainerState::Exited { exit_code: 3, reason: String::new(), message: String::new(), started_at_ns: 1, finished_at_ns: 2 };
    let plan = Plan { backoffs: vec![BackOff { name: "app".into(), delay: Duration::from_secs(20), until_ns: 3 }], ..Default::default() };
    let s = pod_status(&p, &observed(vec![info("app", 2, crashed)]), &plan, &know(), "2026-02-01T00:00:00Z");
    let c = &s["containerStatuses"][0];
    assert_eq!(c["state"]["waiting"]["reason"], "CrashLoopBackOff");
    assert_eq!(c["state"]["waiting"]["message"], "back-off 20s restarting failed container=app pod=p_ns(u1)");
    assert_eq!(c["lastState"]["terminated"]["exitCode"], 3);
    assert_eq!(c["lastState"]["terminated"]["reason"], "Error");
    assert_eq!(c["restartCount"], 2);
    assert_eq!(s["phase"], "Running", "a restarting pod stays Running");
    assert_eq!(condition(&s, "Ready")["message"], "containers with unready status: [app]");
}

#[test]
fn init_containers_hold_the_pod_pending_and_finished_pods_complete() {
    let p = pod(json!({"initContainers": [{"name": "setup"}], "containers": [{"name": "app"}], "restartPolicy": "Never"}));
    let s = pod_status(&p, &observed(vec![info("setup", 0, ContainerState::Running { started_at_ns: 1 })]), &Plan::default(), &know(), "t");
    assert_eq!(s["phase"], "Pending");
    assert_eq!(condition(&s, "Initialized")["message"], "containers with incomplete status: [setup]");
    assert_eq!(s["containerStatuses"][0]["state"]["waiting"]["reason"], "PodInitializing");
    let done = ContainerState::Exited { exit_code: 0, reason: String::new(), message: String::new(), started_at_ns: 1, finished_at_ns: 2 };
    let plan = Plan { terminal: Some(Terminal::Succeeded), ..Default::default() };
    let s = pod_status(&p, &observed(vec![info("setup", 0, done.clone()), info("app", 0, done)]), &plan, &know(), "t");
    assert_eq!(s["phase"], "Succeeded");
    assert_eq!(s["containerStatuses"][0]["state"]["terminated"]["reason"], "Completed");
    assert_eq!(condition(&s, "Ready")["reason"], "PodCompleted");
}

#[test]
fn waiting_reasons() {
    let p = pod(json!({"containers": [{"name": "app", "image": "nope", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}));
    let mut k = know();
    k.waiting.insert("app".into(), ("ErrImageNeverPull".into(), "Container image \"nope\" is not present with pull policy of Never".into()));
    let s = pod_status(&p, &observed(vec![]), &Plan::default(), &k, "t");
    assert_eq!(s["containerStatuses"][0]["state"]["waiting"]["reason"], "ErrImageNeverPull");
    assert_eq!(s["phase"], "Pending");
}

#[test]
fn a_ready_condition_changed_behind_the_agents_back_is_written_again() {
    let running = ContainerState::Running { started_at_ns: 1 };
    let mut p = pod(json!({"containers": [{"name": "app"}]}));
    let s = pod_status(&p, &observed(vec![info("app", 0, running.clone())]), &Plan::default(), &know(), "2026-01-01T00:00:05Z");
    assert!(!stored_agrees(&p, &s), "nothing stored yet");
    // The agent's status is stored: it agrees.
    p.status = Some(serde_json::from_value(s.clone()).unwrap());
    assert!(stored_agrees(&p, &s));
    // The node lifecycle controller marks the pod not Ready while the node is unreachable.
    let st = p.status.as_mut().unwrap();
    let ready = st.conditions.as_mut().unwrap().iter_mut().find(|c| c.type_ == "Ready").unwrap();
    ready.status = "False".into();
    ready.reason = Some("NodeNotReady".into());
    assert!(!stored_agrees(&p, &s), "the agent must say Ready again");
    // Written again, Ready's transition time is the moment it comes back, not
    // ContainersReady's (which never changed).
    let again = pod_status(&p, &observed(vec![info("app", 0, running)]), &Plan::default(), &know(), "2026-01-01T00:01:00Z");
    assert_eq!(condition(&again, "Ready")["status"], "True");
    assert_eq!(condition(&again, "Ready")["lastTransitionTime"], "2026-01-01T00:01:00Z");
    assert_eq!(condition(&again, "ContainersReady")["lastTransitionTime"], "2026-01-01T00:00:05Z");
}

#[test]
fn conditions_others_own_are_kept_in_what_the_agent_writes() {
    let mut p = pod(json!({"containers": [{"name": "app"}]}));
    p.status.as_mut().unwrap().conditions.as_mut().unwrap().push(
        serde_json::from_value(json!({"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI", "lastTransitionTime": "2026-01-01T00:00:09Z"})).unwrap(),
    );
    let s = pod_status(&p, &observed(vec![info("app", 0, ContainerState::Running { started_at_ns: 1 })]), &Plan::default(), &know(), "t");
    assert_eq!(condition(&s, "DisruptionTarget")["reason"], "EvictionByEvictionAPI");
    assert_eq!(condition(&s, "PodScheduled")["status"], "True");
    let types: Vec<&str> = s["conditions"].as_array().unwrap().iter().filter_map(|c| c["type"].as_str()).collect();
    assert_eq!(types, ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled", "DisruptionTarget"]);
}
