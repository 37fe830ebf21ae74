//! The objects the self-heal workload declares, as Kubernetes JSON.

use serde_json::{json, Value};

/// The namespace of everything the workload creates.
pub const NAMESPACE: &str = "self-heal";
/// The label naming which workload a pod belongs to.
pub const WORKLOAD_LABEL: &str = "keelson.io/self-heal";
/// The built-in image every pod runs.
const IMAGE: &str = "keelson.local/busybox:stable";

/// What the workloads look like.
#[derive(Clone, Debug)]
pub struct Shape {
    pub replicas: u32,
    pub statefulset_replicas: u32,
    pub job_completions: u32,
    pub job_parallelism: u32,
    /// Seconds each Job pod works.
    pub job_seconds: u32,
    /// tolerationSeconds of the not-ready and unreachable NoExecute taints (Kubernetes'
    /// default is 300; runs use a few seconds).
    pub toleration_seconds: i64,
}

fn tolerations(seconds: i64) -> Value {
    json!([
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}
    ])
}

fn labels(workload: &str) -> Value {
    json!({ WORKLOAD_LABEL: workload, "app": format!("self-heal-{workload}") })
}

/// The Deployment `web`: busybox httpd, Ready by an HTTP probe.
pub fn deployment(s: &Shape) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": NAMESPACE},
        "spec": {
            "replicas": s.replicas,
            "selector": {"matchLabels": {"app": "self-heal-deployment"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": labels("deployment")},
                "spec": {
                    "terminationGracePeriodSeconds": 2,
                    "tolerations": tolerations(s.toleration_seconds),
                    "containers": [{
                        "name": "web", "image": IMAGE, "imagePullPolicy": "Never",
                        "command": ["httpd", "-f", "-p", "8080", "-h", "/www"],
                        "readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1, "failureThreshold": 1}
                    }]
                }
            }
        }
    })
}

/// The maxSurge [`deployment`] declares.
pub const MAX_SURGE: u32 = 1;

/// The Service `web` in front of [`deployment`].
pub fn service() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": NAMESPACE},
        "spec": {"selector": {"app": "self-heal-deployment"}, "ports": [{"port": 8080, "targetPort": 8080}]}
    })
}

/// What each in-cluster client prints per call of the Service: answered or not.
pub const CALL_OK: &str = "call ok";
pub const CALL_FAILED: &str = "call failed";

/// The DaemonSet `ds`: on every node, a client calling the Service `web` twice a second
/// (by its short name, through the cluster DNS and the node's proxy), printing each
/// outcome. Each call gets 2 s (`timeout`: busybox `wget -T` crashes).
pub fn daemonset() -> Value {
    let script = format!(
        "while true; do if timeout 2 wget -q -O /dev/null http://web:8080/; then echo '{CALL_OK}'; else echo '{CALL_FAILED}'; fi; sleep 0.5; done"
    );
    json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "ds", "namespace": NAMESPACE},
        "spec": {
            "selector": {"matchLabels": {"app": "self-heal-daemonset"}},
            "template": {
                "metadata": {"labels": labels("daemonset")},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "client", "image": IMAGE, "imagePullPolicy": "Never", "command": ["sh", "-c", script]}]
                }
            }
        }
    })
}

/// The headless Service `db` and the StatefulSet `db`: identities `db-0…` each with a
/// claim `data-db-N` of the default (local-path) class, so an identity can only come back
/// on the node that holds its volume.
pub fn statefulset(s: &Shape) -> (Value, Value) {
    let headless = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "db", "namespace": NAMESPACE},
        "spec": {"clusterIP": "None", "selector": {"app": "self-heal-statefulset"}, "ports": [{"port": 5432}]}
    });
    let set = json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": NAMESPACE},
        "spec": {
            "serviceName": "db",
            "replicas": s.statefulset_replicas,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": "self-heal-statefulset"}},
            "template": {
                "metadata": {"labels": labels("statefulset")},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "tolerations": tolerations(s.toleration_seconds),
                    "containers": [{
                        "name": "db", "image": IMAGE, "imagePullPolicy": "Never",
                        "command": ["sh", "-c", "echo $(hostname) >> /data/boots; sleep 100000"],
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}]
                    }]
                }
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "16Mi"}}}
            }]
        }
    });
    (headless, set)
}

/// The Job `work`: `job_completions` pods that each work `job_seconds`, `job_parallelism`
/// at a time.
pub fn job(s: &Shape) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "work", "namespace": NAMESPACE},
        "spec": {
            "completions": s.job_completions,
            "parallelism": s.job_parallelism,
            "backoffLimit": 1000,
            "template": {
                "metadata": {"labels": labels("job")},
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 1,
                    "tolerations": tolerations(s.toleration_seconds),
                    "containers": [{
                        "name": "work", "image": IMAGE, "imagePullPolicy": "Never",
                        "command": ["sleep", s.job_seconds.to_string()]
                    }]
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pod_template_carries_its_workload_label_and_the_short_tolerations() {
        let s = Shape { replicas: 3, statefulset_replicas: 2, job_completions: 8, job_parallelism: 2, job_seconds: 4, toleration_seconds: 2 };
        let (_, set) = statefulset(&s);
        for (obj, w) in [(deployment(&s), "deployment"), (daemonset(), "daemonset"), (job(&s), "job"), (set, "statefulset")] {
            let t = &obj["spec"]["template"];
            assert_eq!(t["metadata"]["labels"][WORKLOAD_LABEL], w);
            let sel = obj["spec"]["selector"]["matchLabels"]["app"].as_str();
            assert!(sel.is_none() || sel == t["metadata"]["labels"]["app"].as_str(), "{obj}");
            if w != "daemonset" {
                assert_eq!(t["spec"]["tolerations"][1]["tolerationSeconds"], 2);
            }
        }
        assert_eq!(deployment(&s)["spec"]["strategy"]["rollingUpdate"]["maxSurge"], MAX_SURGE);
        assert_eq!(job(&s)["spec"]["completions"], 8);
        assert_eq!(service()["spec"]["selector"]["app"], deployment(&s)["spec"]["template"]["metadata"]["labels"]["app"]);
        assert!(daemonset()["spec"]["template"]["spec"]["containers"][0]["command"][2].as_str().unwrap().contains("http://web:8080/"));
    }
}
