//! A container's requests and limits as cgroup settings, the way the kubelet converts
//! them: cpu shares from the request (1024 per core, at least 2), a CFS quota from the
//! limit over a 100 ms period, the memory limit in bytes.

use k8s_openapi::api::core::v1::Container;
use keelson_apimachinery::quantity::parse_quantity_milli;

use crate::runtime::LinuxResources;

pub const CPU_PERIOD_US: i64 = 100_000;
const MIN_SHARES: i64 = 2;

/// Millicores of a cpu quantity.
pub fn cpu_millis(q: &str) -> Option<i64> {
    parse_quantity_milli(q).map(|m| m as i64)
}

/// Bytes of a memory quantity (rounded up).
pub fn bytes(q: &str) -> Option<i64> {
    parse_quantity_milli(q).map(|m| ((m + 999) / 1000) as i64)
}

/// The cgroup settings of `c`.
pub fn linux_resources(c: &Container) -> LinuxResources {
    let r = c.resources.as_ref();
    let get = |kind: &str, name: &str| {
        let m = if kind == "limits" { r.and_then(|r| r.limits.as_ref()) } else { r.and_then(|r| r.requests.as_ref()) };
        m.and_then(|m| m.get(name)).map(|q| q.0.clone())
    };
    let cpu_request = get("requests", "cpu").or_else(|| get("limits", "cpu")).and_then(|q| cpu_millis(&q));
    let cpu_limit = get("limits", "cpu").and_then(|q| cpu_millis(&q));
    let memory_limit = get("limits", "memory").and_then(|q| bytes(&q));
    LinuxResources {
        cpu_shares: cpu_request.map(|m| (m * 1024 / 1000).max(MIN_SHARES)).unwrap_or(MIN_SHARES),
        cpu_quota: cpu_limit.map(|m| (m * CPU_PERIOD_US / 1000).max(1000)).unwrap_or(0),
        cpu_period: if cpu_limit.is_some() { CPU_PERIOD_US } else { 0 },
        memory_limit_bytes: memory_limit.unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn container(resources: serde_json::Value) -> Container {
        serde_json::from_value(json!({"name": "c", "resources": resources})).unwrap()
    }

    #[test]
    fn requests_and_limits_become_cgroup_settings() {
        let c = container(json!({"requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"cpu": "500m", "memory": "128Mi"}}));
        assert_eq!(linux_resources(&c), LinuxResources { cpu_shares: 256, cpu_quota: 50_000, cpu_period: 100_000, memory_limit_bytes: 134_217_728 });
    }

    #[test]
    fn best_effort_gets_minimum_shares_and_no_limits() {
        assert_eq!(linux_resources(&container(json!({}))), LinuxResources { cpu_shares: 2, ..Default::default() });
    }

    #[test]
    fn a_limit_alone_is_also_the_request() {
        let r = linux_resources(&container(json!({"limits": {"cpu": "2"}})));
        assert_eq!((r.cpu_shares, r.cpu_quota), (2048, 200_000));
    }
}
