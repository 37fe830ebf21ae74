//! `metrics.k8s.io/v1beta1` from the agents' Summary API, as metrics-server computes it:
//! NodeMetrics and PodMetrics (CPU in nanocores, memory as the working set) from one
//! node's `/stats/summary`. Pure; the HTTP side (`http::metrics_api`) asks the agents.
//!
//! The CPU figure is the agent's `usageNanoCores`, the rate over its last sampling
//! window, so [`WINDOW`] is the agent's sampling interval. A node or pod without a rate
//! yet (one sample only) is left out, as metrics-server leaves it out.

use serde_json::{json, Value};

/// The group version served.
pub const GROUP: &str = "metrics.k8s.io";
pub const VERSION: &str = "v1beta1";

/// The window a rate covers: the agents' sampling interval (`keelson_agent::stats::SAMPLE_INTERVAL`).
pub const WINDOW: &str = "10s";

/// A CPU quantity from nanocores, in Kubernetes' canonical form (`250m`, `1234567n`, `2`).
pub fn cpu_quantity(nano_cores: u64) -> String {
    if nano_cores == 0 {
        "0".into()
    } else if nano_cores % 1_000_000_000 == 0 {
        (nano_cores / 1_000_000_000).to_string()
    } else if nano_cores % 1_000_000 == 0 {
        format!("{}m", nano_cores / 1_000_000)
    } else if nano_cores % 1_000 == 0 {
        format!("{}u", nano_cores / 1_000)
    } else {
        format!("{nano_cores}n")
    }
}

/// A memory quantity from bytes, in Kubernetes' canonical binary form (`2Mi`, `1234Ki`,
/// or plain bytes when not a multiple of 1 Ki).
pub fn memory_quantity(bytes: u64) -> String {
    if bytes == 0 {
        return "0".into();
    }
    let mut value = bytes;
    let mut suffix = "";
    for s in ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"] {
        if value % 1024 != 0 {
            break;
        }
        value /= 1024;
        suffix = s;
    }
    format!("{value}{suffix}")
}

fn usage(stats: &Value) -> Option<Value> {
    let cpu = stats["cpu"]["usageNanoCores"].as_u64()?;
    let memory = stats["memory"]["workingSetBytes"].as_u64()?;
    Some(json!({"cpu": cpu_quantity(cpu), "memory": memory_quantity(memory)}))
}

fn labels(obj: &Value) -> Value {
    obj.pointer("/metadata/labels").cloned().unwrap_or_else(|| json!({}))
}

/// The NodeMetrics of `node` (the Node object) from its agent's summary; `None` without
/// a CPU rate or working set. `now` is the creation timestamp.
pub fn node_metrics(node: &Value, summary: &Value, now: &str) -> Option<Value> {
    let stats = &summary["node"];
    let usage = usage(stats)?;
    Some(json!({
        "kind": "NodeMetrics",
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "metadata": {"name": node.pointer("/metadata/name")?, "creationTimestamp": now, "labels": labels(node)},
        "timestamp": stats["cpu"]["time"],
        "window": WINDOW,
        "usage": usage,
    }))
}

/// The PodMetrics of `pod` (the Pod object) from its node's summary: the summary's pod of
/// the same namespace, name (and uid when both have one), with every container's usage;
/// `None` when the pod is not there or a container has no rate yet.
pub fn pod_metrics(pod: &Value, summary: &Value, now: &str) -> Option<Value> {
    let name = pod.pointer("/metadata/name")?.as_str()?;
    let namespace = pod.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("default");
    let uid = pod.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or("");
    let stats = summary["pods"].as_array()?.iter().find(|p| {
        let r = &p["podRef"];
        let their_uid = r["uid"].as_str().unwrap_or("");
        r["name"] == name && r["namespace"] == namespace && (uid.is_empty() || their_uid.is_empty() || their_uid == uid)
    })?;
    let containers: Vec<Value> = stats["containers"]
        .as_array()?
        .iter()
        .map(|c| Some(json!({"name": c["name"], "usage": usage(c)?})))
        .collect::<Option<_>>()?;
    if containers.is_empty() {
        return None;
    }
    let timestamp = stats["cpu"]["time"].clone();
    Some(json!({
        "kind": "PodMetrics",
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": now, "labels": labels(pod)},
        "timestamp": timestamp,
        "window": WINDOW,
        "containers": containers,
    }))
}

/// A `<Kind>List` of metrics items.
pub fn list(kind: &str, items: Vec<Value>) -> Value {
    json!({"kind": format!("{kind}List"), "apiVersion": format!("{GROUP}/{VERSION}"), "metadata": {}, "items": items})
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A summary as `keelson agent` answered `/stats/summary` (trimmed: one pod of two
    /// containers with rates, one just started without).
    const SUMMARY: &str = r#"{"node":{"nodeName":"n1","startTime":"2026-01-05T08:00:00Z",
        "cpu":{"time":"2026-01-05T09:10:20Z","usageNanoCores":1234567890,"usageCoreNanoSeconds":987654321000},
        "memory":{"time":"2026-01-05T09:10:20Z","availableBytes":6442450944,"usageBytes":7516192768,"workingSetBytes":2147483648},
        "fs":{"time":"2026-01-05T09:10:20Z","availableBytes":1000,"capacityBytes":4000,"usedBytes":3000,"inodesFree":10,"inodes":20,"inodesUsed":10}},
      "pods":[
        {"podRef":{"name":"busy","namespace":"default","uid":"u-busy"},"startTime":"2026-01-05T09:00:00Z",
         "containers":[
           {"name":"spin","startTime":"2026-01-05T09:00:00Z","cpu":{"time":"2026-01-05T09:10:19Z","usageNanoCores":998877665,"usageCoreNanoSeconds":600000000000},
            "memory":{"time":"2026-01-05T09:10:19Z","usageBytes":1052672,"workingSetBytes":524288,"rssBytes":200704}},
           {"name":"side","startTime":"2026-01-05T09:00:00Z","cpu":{"time":"2026-01-05T09:10:19Z","usageNanoCores":2000000,"usageCoreNanoSeconds":1000000},
            "memory":{"time":"2026-01-05T09:10:19Z","workingSetBytes":1000}}],
         "cpu":{"time":"2026-01-05T09:10:19Z","usageNanoCores":1000877665,"usageCoreNanoSeconds":600001000000},
         "memory":{"time":"2026-01-05T09:10:19Z","workingSetBytes":525288}},
        {"podRef":{"name":"new","namespace":"kube-system","uid":"u-new"},"startTime":"2026-01-05T09:10:15Z",
         "containers":[{"name":"c","startTime":"2026-01-05T09:10:15Z","cpu":{"time":"2026-01-05T09:10:19Z","usageCoreNanoSeconds":5000},
            "memory":{"time":"2026-01-05T09:10:19Z","workingSetBytes":4096}}],
         "cpu":{"time":"2026-01-05T09:10:19Z","usageCoreNanoSeconds":5000},"memory":{"time":"2026-01-05T09:10:19Z","workingSetBytes":4096}}]}"#;

    #[test]
    fn quantities_are_canonical() {
        assert_eq!(cpu_quantity(998_877_665), "998877665n");
        assert_eq!(cpu_quantity(250_000_000), "250m");
        assert_eq!(cpu_quantity(2_000_000_000), "2");
        assert_eq!(cpu_quantity(1_500), "1500n");
        assert_eq!(cpu_quantity(15_000), "15u");
        assert_eq!(cpu_quantity(0), "0");
        assert_eq!(memory_quantity(524_288), "512Ki");
        assert_eq!(memory_quantity(2_147_483_648), "2Gi");
        assert_eq!(memory_quantity(3 * 1024 + 1024 * 1024), "1027Ki");
        assert_eq!(memory_quantity(1000), "1000");
    }

    #[test]
    fn node_metrics_from_a_summary() {
        let summary: Value = serde_json::from_str(SUMMARY).unwrap();
        let node = json!({"metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}}});
        let m = node_metrics(&node, &summary, "2026-01-05T09:10:21Z").unwrap();
        assert_eq!(m["kind"], "NodeMetrics");
        assert_eq!(m["apiVersion"], "metrics.k8s.io/v1beta1");
        assert_eq!(m["metadata"]["labels"]["kubernetes.io/hostname"], "n1");
        assert_eq!(m["timestamp"], "2026-01-05T09:10:20Z");
        assert_eq!(m["window"], "10s");
        assert_eq!(m["usage"], json!({"cpu": "1234567890n", "memory": "2Gi"}));
        // The agent's first sample has no rate yet: the node is left out.
        let mut first = summary.clone();
        first["node"]["cpu"].as_object_mut().unwrap().remove("usageNanoCores");
        assert!(node_metrics(&node, &first, "now").is_none());
    }

    #[test]
    fn pod_metrics_from_a_summary() {
        let summary: Value = serde_json::from_str(SUMMARY).unwrap();
        let pod = json!({"metadata": {"name": "busy", "namespace": "default", "uid": "u-busy", "labels": {"app": "spin"}}});
        let m = pod_metrics(&pod, &summary, "now").unwrap();
        assert_eq!(m["kind"], "PodMetrics");
        assert_eq!(m["metadata"]["namespace"], "default");
        assert_eq!(m["metadata"]["labels"]["app"], "spin");
        assert_eq!(m["timestamp"], "2026-01-05T09:10:19Z");
        assert_eq!(
            m["containers"],
            json!([{"name": "spin", "usage": {"cpu": "998877665n", "memory": "512Ki"}}, {"name": "side", "usage": {"cpu": "2m", "memory": "1000"}}])
        );
        // Another pod of the same name (a new uid) is not this one.
        let other = json!({"metadata": {"name": "busy", "namespace": "default", "uid": "u-2"}});
        assert!(pod_metrics(&other, &summary, "now").is_none());
        // A container without a rate leaves its pod out; an absent pod is absent.
        let new = json!({"metadata": {"name": "new", "namespace": "kube-system", "uid": "u-new"}});
        assert!(pod_metrics(&new, &summary, "now").is_none());
        assert!(pod_metrics(&json!({"metadata": {"name": "gone", "namespace": "default"}}), &summary, "now").is_none());
        assert_eq!(list("PodMetrics", vec![m])["kind"], "PodMetricsList");
    }
}
