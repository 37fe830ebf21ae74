//! The status a pod's worker reports, as the kubelet's status manager words it: phase,
//! conditions, container states with their reasons, IPs. Pure: a function of
//! the pod, what the runtime shows, the plan's back-offs and the probes' verdicts.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use serde_json::{json, Value};

use super::plan::{Observed, Plan, Terminal};
use crate::runtime::{ContainerInfo, ContainerState};

/// What the worker knows besides the runtime: probe verdicts and failures to start.
#[derive(Clone, Debug, Default)]
pub struct Knowledge {
    /// Containers whose readiness probe passes (or that have none and are running).
    pub ready: BTreeMap<String, bool>,
    /// Containers whose startup probe has passed (or that have none).
    pub started: BTreeMap<String, bool>,
    /// Why a container could not be created: (reason, message), e.g. `ErrImageNeverPull`.
    pub waiting: BTreeMap<String, (String, String)>,
    /// The node's address.
    pub host_ip: String,
    /// A dual-stack node's IPv6 address.
    pub host_ip6: Option<String>,
    /// Termination messages of exited instances, by container id.
    pub messages: BTreeMap<String, String>,
}

fn rfc3339(ns: i64) -> Value {
    if ns <= 0 {
        return Value::Null;
    }
    match jiff::Timestamp::from_nanosecond(ns as i128) {
        Ok(t) => json!(t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()),
        Err(_) => Value::Null,
    }
}

fn container_id(c: &ContainerInfo) -> String {
    format!("containerd://{}", c.id)
}

/// The terminated state of an exited instance, with the kubelet's reasons.
fn terminated(c: &ContainerInfo, know: &Knowledge) -> Value {
    let ContainerState::Exited { exit_code, reason, message, started_at_ns, finished_at_ns } = &c.state else { return Value::Null };
    let reason = if reason == "OOMKilled" {
        "OOMKilled"
    } else if *exit_code == 0 {
        "Completed"
    } else {
        "Error"
    };
    let mut t = json!({"exitCode": exit_code, "reason": reason, "startedAt": rfc3339(*started_at_ns), "finishedAt": rfc3339(*finished_at_ns), "containerID": container_id(c)});
    if let Some(m) = know.messages.get(&c.id).filter(|m| !m.is_empty()) {
        t["message"] = json!(m);
    } else if !message.is_empty() {
        t["message"] = json!(message);
    }
    json!({"terminated": t})
}

fn previous<'a>(observed: &'a Observed, latest: &ContainerInfo) -> Option<&'a ContainerInfo> {
    observed
        .containers
        .iter()
        .filter(|c| c.name == latest.name && c.attempt < latest.attempt && matches!(c.state, ContainerState::Exited { .. }))
        .max_by_key(|c| c.attempt)
}

fn pod_ref(pod: &Pod) -> String {
    format!("{}_{}({})", pod.metadata.name.as_deref().unwrap_or(""), pod.metadata.namespace.as_deref().unwrap_or("default"), pod.metadata.uid.as_deref().unwrap_or(""))
}

/// The status of one container: state, last state, readiness and restart count.
fn container_status(pod: &Pod, c: &Container, observed: &Observed, plan: &Plan, know: &Knowledge, initializing: bool) -> Value {
    let latest = observed.latest(&c.name);
    let waiting = |reason: &str, message: Option<String>| {
        let mut w = json!({"reason": reason});
        if let Some(m) = message {
            w["message"] = json!(m);
        }
        json!({"waiting": w})
    };
    let (state, last, ready, started) = match latest {
        None => {
            let state = match know.waiting.get(&c.name) {
                Some((reason, message)) => waiting(reason, Some(message.clone())),
                None if initializing => waiting("PodInitializing", None),
                None => waiting("ContainerCreating", None),
            };
            (state, json!({}), false, false)
        }
        Some(i) => match &i.state {
            ContainerState::Created | ContainerState::Unknown => (waiting("ContainerCreating", None), previous(observed, i).map(|p| terminated(p, know)).unwrap_or(json!({})), false, false),
            ContainerState::Running { started_at_ns } => {
                let started = know.started.get(&c.name).copied().unwrap_or(true);
                let ready = started && know.ready.get(&c.name).copied().unwrap_or(true);
                (json!({"running": {"startedAt": rfc3339(*started_at_ns)}}), previous(observed, i).map(|p| terminated(p, know)).unwrap_or(json!({})), ready, started)
            }
            ContainerState::Exited { .. } => match plan.backoffs.iter().find(|b| b.name == c.name) {
                Some(b) => {
                    let message = format!("back-off {}s restarting failed container={} pod={}", b.delay.as_secs(), c.name, pod_ref(pod));
                    (waiting("CrashLoopBackOff", Some(message)), terminated(i, know), false, false)
                }
                None => (terminated(i, know), previous(observed, i).map(|p| terminated(p, know)).unwrap_or(json!({})), false, false),
            },
        },
    };
    let mut s = json!({
        "name": c.name, "image": c.image.clone().unwrap_or_default(), "imageID": latest.map(|i| i.image_ref.clone()).unwrap_or_default(),
        "ready": ready, "started": started, "restartCount": latest.map(|i| i.attempt).unwrap_or(0),
        "state": state, "lastState": last,
    });
    if let Some(i) = latest {
        s["containerID"] = json!(container_id(i));
    }
    s
}

/// The pod's status, to be written to `pods/status`. `now` is an RFC 3339 time; a
/// condition keeps its stored lastTransitionTime while its status does not change.
pub fn pod_status(pod: &Pod, observed: &Observed, plan: &Plan, know: &Knowledge, now: &str) -> Value {
    let Some(spec) = pod.spec.as_ref() else { return json!({}) };
    let old = pod.status.as_ref();
    let inits = spec.init_containers.as_deref().unwrap_or(&[]);
    let incomplete_init: Vec<&str> = inits
        .iter()
        .filter(|c| !matches!(observed.latest(&c.name).map(|i| &i.state), Some(ContainerState::Exited { exit_code: 0, .. })))
        .map(|c| c.name.as_str())
        .collect();
    let initializing = !incomplete_init.is_empty();
    let init_statuses: Vec<Value> = inits.iter().map(|c| container_status(pod, c, observed, plan, know, false)).collect();
    let statuses: Vec<Value> = spec.containers.iter().map(|c| container_status(pod, c, observed, plan, know, initializing)).collect();
    let unready: Vec<&str> = statuses.iter().filter(|s| s["ready"] != true).filter_map(|s| s["name"].as_str()).collect();
    let sandbox_ready = observed.sandbox.as_ref().is_some_and(|s| s.ready);
    let all_started = spec.containers.iter().all(|c| matches!(observed.latest(&c.name).map(|i| &i.state), Some(ContainerState::Running { .. } | ContainerState::Exited { .. })));
    let phase = match plan.terminal {
        Some(Terminal::Succeeded) => "Succeeded",
        Some(Terminal::Failed) => "Failed",
        None if sandbox_ready && !initializing && all_started => "Running",
        None => "Pending",
    };
    let old_condition = |t: &str| old.and_then(|s| s.conditions.as_ref()).and_then(|cs| cs.iter().find(|c| c.type_ == t)).cloned();
    let condition = |t: &str, ok: bool, reason: Option<&str>, message: Option<String>| {
        let status = if ok { "True" } else { "False" };
        let since = old_condition(t).filter(|c| c.status == status).and_then(|c| c.last_transition_time).map(|t| json!(t.0.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()));
        let mut c = json!({"type": t, "status": status, "lastProbeTime": null, "lastTransitionTime": since.unwrap_or(json!(now))});
        if let Some(r) = reason {
            c["reason"] = json!(r);
        }
        if let Some(m) = message {
            c["message"] = json!(m);
        }
        c
    };
    let list = |names: &[&str]| format!("[{}]", names.join(" "));
    let completed = plan.terminal.is_some();
    let containers_ready = if completed {
        condition("ContainersReady", false, Some("PodCompleted"), None)
    } else if unready.is_empty() {
        condition("ContainersReady", true, None, None)
    } else {
        condition("ContainersReady", false, Some("ContainersNotReady"), Some(format!("containers with unready status: {}", list(&unready))))
    };
    let mut ready = containers_ready.clone();
    ready["type"] = json!("Ready");
    // Ready changes on its own (the node lifecycle controller marks it False on an
    // unreachable node): its transition time is its own, not ContainersReady's.
    ready["lastTransitionTime"] = match old_condition("Ready").filter(|c| Some(c.status.as_str()) == ready["status"].as_str()) {
        Some(c) => c.last_transition_time.map(|t| json!(t.0.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())).unwrap_or(json!(now)),
        None => json!(now),
    };
    let initialized = if completed && !initializing {
        condition("Initialized", true, Some("PodCompleted"), None)
    } else if initializing {
        condition("Initialized", false, Some("ContainersNotInitialized"), Some(format!("containers with incomplete status: {}", list(&incomplete_init))))
    } else {
        condition("Initialized", true, None, None)
    };
    let mut conditions = vec![condition("PodReadyToStartContainers", sandbox_ready, None, None), initialized, ready, containers_ready];
    // Conditions others own (PodScheduled, DisruptionTarget, readiness gates' …) are
    // kept as stored: the status is written as a merge patch, which replaces the list.
    let own = ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady"];
    for c in old.and_then(|s| s.conditions.as_ref()).into_iter().flatten().filter(|c| !own.contains(&c.type_.as_str())) {
        conditions.push(serde_json::to_value(c).unwrap_or(Value::Null));
    }
    let pod_ip = observed.sandbox.as_ref().and_then(|s| s.ip.clone()).or_else(|| old.and_then(|s| s.pod_ip.clone()));
    let pod_ip = if spec.host_network == Some(true) { Some(know.host_ip.clone()) } else { pod_ip };
    let start = old.and_then(|s| s.start_time.as_ref()).map(|t| json!(t.0.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())).unwrap_or(json!(now));
    let host_ips: Vec<&String> = std::iter::once(&know.host_ip).chain(know.host_ip6.as_ref()).collect();
    let mut status = json!({
        "phase": phase,
        "conditions": conditions,
        "hostIP": know.host_ip, "hostIPs": host_ips.iter().map(|ip| json!({"ip": ip})).collect::<Vec<_>>(),
        "startTime": start,
        "containerStatuses": statuses,
    });
    // The API server classifies the pod at creation; the agent keeps it.
    if let Some(q) = old.and_then(|s| s.qos_class.as_ref()) {
        status["qosClass"] = json!(q);
    }
    if !inits.is_empty() {
        status["initContainerStatuses"] = json!(init_statuses);
    }
    if let Some(ip) = pod_ip {
        // A dual-stack pod's other address follows its first, as the kubelet lists them
        // (from the sandbox that gave the first, else as stored before).
        let more: Vec<String> = if spec.host_network == Some(true) {
            know.host_ip6.iter().cloned().collect()
        } else if let Some(sandbox) = observed.sandbox.as_ref().filter(|s| s.ip.is_some()) {
            sandbox.additional_ips.clone()
        } else {
            old.and_then(|s| s.pod_ips.as_ref()).into_iter().flatten().skip(1).map(|p| p.ip.clone()).collect()
        };
        status["podIPs"] = json!(std::iter::once(ip.clone()).chain(more).map(|ip| json!({"ip": ip})).collect::<Vec<_>>());
        status["podIP"] = json!(ip);
    }
    status
}

/// Whether the pod's stored status already says what `status` says in what others may
/// change behind the agent's back: the phase, each condition's status (the node lifecycle
/// controller marks Ready False on a node it stopped hearing from) and each container's
/// readiness and restart count. A status the agent wrote earlier and still computes must
/// be written again when this is false, as the kubelet's status manager reconciles.
pub fn stored_agrees(pod: &Pod, status: &Value) -> bool {
    let Some(stored) = pod.status.as_ref() else { return false };
    if stored.phase.as_deref() != status["phase"].as_str() {
        return false;
    }
    let conditions = stored.conditions.as_deref().unwrap_or(&[]);
    let conditions_agree = status["conditions"].as_array().into_iter().flatten().all(|c| {
        conditions.iter().any(|s| Some(s.type_.as_str()) == c["type"].as_str() && Some(s.status.as_str()) == c["status"].as_str())
    });
    let containers = stored.container_statuses.as_deref().unwrap_or(&[]);
    let containers_agree = status["containerStatuses"].as_array().into_iter().flatten().all(|c| {
        containers.iter().any(|s| {
            Some(s.name.as_str()) == c["name"].as_str() && Some(s.ready) == c["ready"].as_bool() && Some(s.restart_count as i64) == c["restartCount"].as_i64()
        })
    });
    conditions_agree && containers_agree
}

#[cfg(test)]
#[path = "status_tests.rs"]
mod tests;
