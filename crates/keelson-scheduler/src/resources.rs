//! Resource quantities and what a pod asks for, as the scheduler counts them: cpu in
//! millicores, everything else in whole units (bytes for memory and ephemeral storage),
//! a pod's request being the larger of its containers' sum and its largest init
//! container (sidecar init containers, `restartPolicy: Always`, add to both), plus its
//! overhead.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
pub const PODS: &str = "pods";

/// The value of a Kubernetes quantity (`100m`, `1.5Gi`, `2e3`), or `None` if malformed.
pub fn parse_quantity(q: &str) -> Option<f64> {
    let q = q.trim();
    let split = q.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-')).unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    let n: f64 = num.parse().ok()?;
    let mult = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        s if s.starts_with(['e', 'E']) => 10f64.powi(s[1..].parse().ok()?),
        _ => return None,
    };
    Some(n * mult)
}

/// Amounts per resource name: cpu in millicores, others in units (rounded up).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resources(pub BTreeMap<String, i64>);

impl Resources {
    /// From a `resources.requests`-like map; malformed quantities count as 0.
    pub fn from_map(m: Option<&BTreeMap<String, Quantity>>) -> Self {
        let mut r = Resources::default();
        for (name, q) in m.into_iter().flatten() {
            let v = parse_quantity(&q.0).unwrap_or(0.0);
            let amount = if name == CPU { (v * 1000.0).ceil() } else { v.ceil() };
            r.0.insert(name.clone(), amount as i64);
        }
        r
    }

    pub fn get(&self, name: &str) -> i64 {
        self.0.get(name).copied().unwrap_or(0)
    }

    pub fn add(&mut self, other: &Resources) {
        for (k, v) in &other.0 {
            *self.0.entry(k.clone()).or_default() += v;
        }
    }

    pub fn max_with(&mut self, other: &Resources) {
        for (k, v) in &other.0 {
            let e = self.0.entry(k.clone()).or_default();
            *e = (*e).max(*v);
        }
    }
}

fn container_requests(c: &Container) -> Resources {
    let res = c.resources.as_ref();
    // Requests default to limits when only limits are given.
    let mut r = Resources::from_map(res.and_then(|r| r.limits.as_ref()));
    for (k, v) in Resources::from_map(res.and_then(|r| r.requests.as_ref())).0 {
        r.0.insert(k, v);
    }
    r
}

/// What `pod` requests of a node (without the pod count itself).
pub fn pod_requests(pod: &Pod) -> Resources {
    let Some(spec) = pod.spec.as_ref() else { return Resources::default() };
    let mut total = Resources::default();
    for c in &spec.containers {
        total.add(&container_requests(c));
    }
    // Init containers run one after another; sidecars keep running beside the rest.
    let mut sidecars = Resources::default();
    let mut init_peak = Resources::default();
    for c in spec.init_containers.iter().flatten() {
        let r = container_requests(c);
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars.add(&r);
            init_peak.max_with(&sidecars);
        } else {
            let mut peak = sidecars.clone();
            peak.add(&r);
            init_peak.max_with(&peak);
        }
    }
    total.add(&sidecars);
    total.max_with(&init_peak);
    total.add(&Resources::from_map(spec.overhead.as_ref()));
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn quantities() {
        assert_eq!(parse_quantity("100m"), Some(0.1));
        assert_eq!(parse_quantity("2"), Some(2.0));
        assert_eq!(parse_quantity("1.5Gi"), Some(1.5 * 1024.0 * 1024.0 * 1024.0));
        assert_eq!(parse_quantity("128Mi"), Some(134_217_728.0));
        assert_eq!(parse_quantity("1k"), Some(1000.0));
        assert_eq!(parse_quantity("2e3"), Some(2000.0));
        assert_eq!(parse_quantity("abc"), None);
        assert_eq!(parse_quantity("1Zi"), None);
    }

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap()
    }

    #[test]
    fn requests_sum_containers_and_take_the_init_peak() {
        let p = pod(json!({
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}},
                {"name": "b", "resources": {"limits": {"cpu": "200m"}}},
            ],
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "500m"}}}],
            "overhead": {"cpu": "10m"},
        }));
        let r = pod_requests(&p);
        assert_eq!(r.get(CPU), 510, "init peak 500m beats the 300m sum, plus overhead");
        assert_eq!(r.get(MEMORY), 64 * 1024 * 1024);
    }

    #[test]
    fn sidecar_init_containers_add_to_the_running_pod() {
        let p = pod(json!({
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "100m"}}}],
            "initContainers": [
                {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "50m"}}},
                {"name": "migrate", "resources": {"requests": {"cpu": "120m"}}},
            ],
        }));
        // Running: 100m + 50m sidecar; init peak: 50m sidecar + 120m = 170m.
        assert_eq!(pod_requests(&p).get(CPU), 170);
    }
}
