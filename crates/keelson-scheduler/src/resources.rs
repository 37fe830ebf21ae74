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

pub use keelson_apimachinery::quantity::parse_quantity_milli;

/// Amounts per resource name: cpu in millicores, others in units (rounded up).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resources(pub BTreeMap<String, i64>);

impl Resources {
    /// From a `resources.requests`-like map; malformed quantities count as 0.
    pub fn from_map(m: Option<&BTreeMap<String, Quantity>>) -> Self {
        let mut r = Resources::default();
        for (name, q) in m.into_iter().flatten() {
            let milli = parse_quantity_milli(&q.0).unwrap_or(0);
            let amount = if name == CPU { milli } else { (milli + 999).div_euclid(1000) };
            r.0.insert(name.clone(), amount.clamp(i64::MIN as i128, i64::MAX as i128) as i64);
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
    fn exact_milli_quantities() {
        assert_eq!(parse_quantity_milli("700m"), Some(700));
        assert_eq!(parse_quantity_milli("0.3"), Some(300));
        assert_eq!(parse_quantity_milli("1.5Gi"), Some(1_610_612_736_000));
        assert_eq!(parse_quantity_milli("100n"), Some(1), "rounded up");
        assert_eq!(parse_quantity_milli("2e3"), Some(2_000_000));
        assert_eq!(parse_quantity_milli("1.5.5"), None);
        assert_eq!(parse_quantity_milli("x"), None);
        assert_eq!(parse_quantity_milli("1Zi"), None);
        assert_eq!(parse_quantity_milli("128Mi"), Some(134_217_728_000));
        let r = Resources::from_map(Some(&[("cpu".to_string(), Quantity("700m".into())), ("memory".to_string(), Quantity("0.5Ki".into()))].into()));
        assert_eq!((r.get(CPU), r.get(MEMORY)), (700, 512));
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
