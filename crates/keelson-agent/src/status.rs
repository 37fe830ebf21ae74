//! What an agent reports, in the kubelet's words: Node conditions, capacity, addresses
//! and info; a running pod's phase, conditions and container statuses.

use std::net::Ipv4Addr;

use serde_json::{json, Value};

/// The kubelet version a Keelson agent reports.
pub const AGENT_VERSION: &str = "v1.33.0-keelson";

/// What a node has to offer.
#[derive(Clone, Debug)]
pub struct NodeCapacity {
    pub cpu: String,
    pub memory: String,
    pub pods: u32,
    pub ephemeral_storage: String,
}

impl Default for NodeCapacity {
    fn default() -> Self {
        Self { cpu: "4".into(), memory: "16Gi".into(), pods: 110, ephemeral_storage: "100Gi".into() }
    }
}

/// What a node reports about itself besides its conditions.
#[derive(Clone, Debug)]
pub struct NodeFacts {
    pub name: String,
    pub address: Ipv4Addr,
    /// A dual-stack node's IPv6 address, its second InternalIP.
    pub address6: Option<std::net::Ipv6Addr>,
    pub capacity: NodeCapacity,
    pub machine_id: String,
    pub boot_id: String,
    pub kernel_version: String,
    pub os_image: String,
    pub runtime_version: String,
    pub kubelet_port: u16,
    /// Images present: (names, size in bytes).
    pub images: Vec<(Vec<String>, u64)>,
}

impl NodeFacts {
    /// A hollow node's facts: no machine behind it.
    pub fn hollow(name: &str, address: Ipv4Addr, capacity: &NodeCapacity) -> Self {
        Self {
            name: name.into(),
            address,
            address6: None,
            capacity: capacity.clone(),
            machine_id: String::new(),
            boot_id: String::new(),
            kernel_version: String::new(),
            os_image: "Keelson hollow node".into(),
            runtime_version: "hollow://0".into(),
            kubelet_port: 10250,
            images: Vec::new(),
        }
    }
}

/// The node's health as its agent sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeHealth {
    /// Why the node is not ready (the runtime is down, the network is not configured).
    pub not_ready: Option<String>,
    pub memory_pressure: bool,
    pub disk_pressure: bool,
    pub pid_pressure: bool,
}

/// The Node status of a healthy node: Ready and no pressure, as the kubelet words them.
pub fn node_status(name: &str, address: Ipv4Addr, capacity: &NodeCapacity, now: &str) -> Value {
    node_status_of(&NodeFacts::hollow(name, address, capacity), &NodeHealth::default(), now)
}

/// The Node status from the node's facts and health, in the kubelet's words.
pub fn node_status_of(f: &NodeFacts, health: &NodeHealth, now: &str) -> Value {
    let capacity = &f.capacity;
    let resources = json!({"cpu": capacity.cpu, "memory": capacity.memory, "pods": capacity.pods.to_string(), "ephemeral-storage": capacity.ephemeral_storage});
    let condition = |t: &str, s: &str, reason: &str, message: &str| json!({"type": t, "status": s, "reason": reason, "message": message, "lastHeartbeatTime": now, "lastTransitionTime": now});
    let pressure = |t: &str, on: bool, yes: (&str, &str), no: (&str, &str)| {
        if on {
            condition(t, "True", yes.0, yes.1)
        } else {
            condition(t, "False", no.0, no.1)
        }
    };
    let ready = match &health.not_ready {
        None => condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
        Some(why) => condition("Ready", "False", "KubeletNotReady", why),
    };
    // As the kubelet with `--node-ip=<IPv4>,<IPv6>`: an InternalIP of each family, then the hostname.
    let internal = std::iter::once(f.address.to_string()).chain(f.address6.map(|a| a.to_string()));
    let addresses: Vec<Value> = internal.map(|a| json!({"type": "InternalIP", "address": a})).chain([json!({"type": "Hostname", "address": f.name})]).collect();
    let images: Vec<Value> = f.images.iter().map(|(names, size)| json!({"names": names, "sizeBytes": size})).collect();
    json!({
        "capacity": resources,
        "allocatable": resources,
        "conditions": [
            pressure("MemoryPressure", health.memory_pressure, ("KubeletHasInsufficientMemory", "kubelet has insufficient memory available"), ("KubeletHasSufficientMemory", "kubelet has sufficient memory available")),
            pressure("DiskPressure", health.disk_pressure, ("KubeletHasDiskPressure", "kubelet has disk pressure"), ("KubeletHasNoDiskPressure", "kubelet has no disk pressure")),
            pressure("PIDPressure", health.pid_pressure, ("KubeletHasInsufficientPID", "kubelet has insufficient PID available"), ("KubeletHasSufficientPID", "kubelet has sufficient PID available")),
            ready,
        ],
        "addresses": addresses,
        "daemonEndpoints": {"kubeletEndpoint": {"Port": f.kubelet_port}},
        "nodeInfo": {
            "machineID": f.machine_id, "systemUUID": f.machine_id, "bootID": f.boot_id, "kernelVersion": f.kernel_version, "osImage": f.os_image,
            "containerRuntimeVersion": f.runtime_version, "kubeletVersion": AGENT_VERSION, "kubeProxyVersion": "",
            "operatingSystem": "linux", "architecture": "amd64",
        },
        "images": images,
    })
}

/// The status of a pod whose containers all run and are ready.
pub fn running_pod_status(pod: &k8s_openapi::api::core::v1::Pod, host_ip: Ipv4Addr, pod_ip: Ipv4Addr, now: &str) -> Value {
    let spec = pod.spec.as_ref();
    let containers: Vec<Value> = spec
        .map(|s| s.containers.as_slice())
        .unwrap_or(&[])
        .iter()
        .map(|c| {
            json!({
                "name": c.name, "image": c.image, "imageID": "", "ready": true, "started": true, "restartCount": 0,
                "containerID": format!("hollow://{}", c.name), "state": {"running": {"startedAt": now}},
            })
        })
        .collect();
    let condition = |t: &str| json!({"type": t, "status": "True", "lastProbeTime": null, "lastTransitionTime": now});
    json!({
        "phase": "Running",
        "hostIP": host_ip.to_string(),
        "hostIPs": [{"ip": host_ip.to_string()}],
        "podIP": pod_ip.to_string(),
        "podIPs": [{"ip": pod_ip.to_string()}],
        "startTime": now,
        "conditions": [condition("PodReadyToStartContainers"), condition("Initialized"), condition("Ready"), condition("ContainersReady"), condition("PodScheduled")],
        "containerStatuses": containers,
    })
}

/// The status of a pod whose containers all exited with `exit_code`, as the kubelet
/// reports a pod that will not restart: Succeeded for 0, Failed otherwise, each container
/// terminated (`Completed` or `Error`) and the pod no longer ready.
pub fn terminated_pod_status(pod: &k8s_openapi::api::core::v1::Pod, exit_code: i32, started: &str, now: &str) -> Value {
    let (phase, reason, ready_reason) = if exit_code == 0 { ("Succeeded", "Completed", "PodCompleted") } else { ("Failed", "Error", "PodFailed") };
    let containers: Vec<Value> = pod
        .spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or(&[])
        .iter()
        .map(|c| {
            json!({
                "name": c.name, "image": c.image, "imageID": "", "ready": false, "started": false, "restartCount": 0,
                "containerID": format!("hollow://{}", c.name),
                "state": {"terminated": {"exitCode": exit_code, "reason": reason, "startedAt": started, "finishedAt": now, "containerID": format!("hollow://{}", c.name)}},
            })
        })
        .collect();
    let condition = |t: &str, s: &str, r: Option<&str>| json!({"type": t, "status": s, "reason": r, "lastProbeTime": null, "lastTransitionTime": now});
    json!({
        "phase": phase,
        "conditions": [
            condition("PodReadyToStartContainers", "False", None), condition("Initialized", "True", None),
            condition("Ready", "False", Some(ready_reason)), condition("ContainersReady", "False", Some(ready_reason)), condition("PodScheduled", "True", None),
        ],
        "containerStatuses": containers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_is_ready_without_pressure_and_offers_its_capacity() {
        let s = node_status("n1", Ipv4Addr::new(192, 0, 2, 1), &NodeCapacity::default(), "2026-01-01T00:00:00Z");
        let ready = s["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap();
        assert_eq!((ready["status"].as_str(), ready["reason"].as_str()), (Some("True"), Some("KubeletReady")));
        assert_eq!(s["allocatable"]["pods"], "110");
        assert_eq!(s["addresses"][0]["address"], "192.0.2.1");
        assert_eq!(s["nodeInfo"]["kubeletVersion"], AGENT_VERSION);
    }

    #[test]
    fn a_dual_stack_node_has_an_internal_ip_of_each_family_then_its_hostname() {
        let mut f = NodeFacts::hollow("n1", Ipv4Addr::new(192, 0, 2, 1), &NodeCapacity::default());
        f.address6 = Some("fd00::1".parse().unwrap());
        let s = node_status_of(&f, &NodeHealth::default(), "2026-01-01T00:00:00Z");
        let want = json!([{"type": "InternalIP", "address": "192.0.2.1"}, {"type": "InternalIP", "address": "fd00::1"}, {"type": "Hostname", "address": "n1"}]);
        assert_eq!(s["addresses"], want);
    }

    #[test]
    fn running_pods_are_ready_with_one_status_per_container() {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}})).unwrap();
        let s = running_pod_status(&pod, Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(198, 51, 100, 7), "2026-01-01T00:00:00Z");
        assert_eq!(s["phase"], "Running");
        assert_eq!(s["podIP"], "198.51.100.7");
        assert_eq!(s["containerStatuses"].as_array().unwrap().len(), 2);
        assert!(s["conditions"].as_array().unwrap().iter().any(|c| c["type"] == "Ready" && c["status"] == "True"));
    }

    #[test]
    fn terminated_pods_succeed_on_zero_and_fail_otherwise() {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a", "image": "x"}]}})).unwrap();
        let ok = terminated_pod_status(&pod, 0, "2026-01-01T00:00:00Z", "2026-01-01T00:00:01Z");
        assert_eq!(ok["phase"], "Succeeded");
        assert_eq!(ok["containerStatuses"][0]["state"]["terminated"]["reason"], "Completed");
        let failed = terminated_pod_status(&pod, 3, "2026-01-01T00:00:00Z", "2026-01-01T00:00:01Z");
        assert_eq!(failed["phase"], "Failed");
        assert_eq!(failed["containerStatuses"][0]["state"]["terminated"]["exitCode"], 3);
        assert!(failed["conditions"].as_array().unwrap().iter().any(|c| c["type"] == "Ready" && c["status"] == "False"));
    }
}
