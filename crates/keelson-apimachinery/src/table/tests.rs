//! Row tests for pods and workload controllers.

use super::*;
use serde_json::json;

/// 2026-11-30T08:00:00Z.
pub(super) const NOW: i64 = 1_796_025_600;

/// RFC 3339 text for `secs` seconds before [`NOW`].
pub(super) fn ago(secs: i64) -> String {
    format_rfc3339(NOW - secs)
}

pub(super) fn cells(printer: Printer, obj: &Value) -> Vec<Value> {
    let c = row_cells(printer, obj, NOW);
    assert_eq!(c.len(), columns(printer).len(), "{printer:?} cell count");
    c
}

/// The pod's (Ready, Status, Restarts) cells.
fn pod_summary(pod: &Value) -> (String, String, String) {
    let c = cells(Printer::Pod, pod);
    let text = |i: usize| c[i].as_str().unwrap().to_string();
    (text(1), text(2), text(3))
}

fn summary(ready: &str, status: &str, restarts: &str) -> (String, String, String) {
    (ready.into(), status.into(), restarts.into())
}

fn running(name: &str, ready: bool, restarts: i64) -> Value {
    json!({"name": name, "ready": ready, "restartCount": restarts, "state": {"running": {"startedAt": ago(600)}}})
}

#[test]
fn table_pod_running_ready_full_row() {
    let pod = json!({
        "metadata": {"name": "web-1", "namespace": "default", "creationTimestamp": ago(300)},
        "spec": {"nodeName": "node-a", "containers": [{"name": "app", "image": "nginx"}]},
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.5",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [running("app", true, 0)]
        }
    });
    assert_eq!(
        cells(Printer::Pod, &pod),
        vec![
            json!("web-1"), json!("1/1"), json!("Running"), json!("0"), json!("5m"),
            json!("10.0.0.5"), json!("node-a"), json!("<none>"), json!("<none>")
        ]
    );
    assert_eq!(row_conditions(Printer::Pod, &pod), None);
}

#[test]
fn table_pod_crashloop_with_restart_age() {
    let pod = json!({
        "metadata": {"name": "api", "creationTimestamp": ago(3600)},
        "spec": {"containers": [{"name": "app"}, {"name": "worker"}]},
        "status": {
            "phase": "Running",
            "podIPs": [{"ip": "10.0.0.9"}, {"ip": "fd00::9"}],
            "containerStatuses": [
                running("app", true, 1),
                {
                    "name": "worker", "ready": false, "restartCount": 3,
                    "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
                    "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": ago(90)}}
                }
            ]
        }
    });
    assert_eq!(pod_summary(&pod), summary("1/2", "CrashLoopBackOff", "4 (90s ago)"));
    assert_eq!(cells(Printer::Pod, &pod)[5], json!("10.0.0.9"));
    // Restarts without a known termination time stay a bare count.
    let mut no_time = pod.clone();
    no_time["status"]["containerStatuses"][1]["lastState"] = json!({});
    assert_eq!(pod_summary(&no_time).2, "4");
}

#[test]
fn table_pod_completed_failed_and_creating() {
    let done = json!({
        "metadata": {"name": "once"},
        "spec": {"containers": [{"name": "c"}]},
        "status": {"phase": "Succeeded", "containerStatuses": [
            {"name": "c", "ready": false, "restartCount": 0,
             "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
        ]}
    });
    assert_eq!(pod_summary(&done), summary("0/1", "Completed", "0"));
    let cond = row_conditions(Printer::Pod, &done).unwrap();
    assert_eq!(cond[0]["type"], "Completed");
    assert_eq!(cond[0]["reason"], "Succeeded");

    let failed = json!({
        "spec": {"containers": [{"name": "c"}]},
        "status": {"phase": "Failed", "containerStatuses": [
            {"name": "c", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}
        ]}
    });
    assert_eq!(pod_summary(&failed).1, "Error");
    assert_eq!(row_conditions(Printer::Pod, &failed).unwrap()[0]["reason"], "Failed");

    let killed = json!({
        "spec": {"containers": [{"name": "c"}]},
        "status": {"phase": "Failed", "containerStatuses": [
            {"name": "c", "state": {"terminated": {"exitCode": 137, "signal": 9}}}
        ]}
    });
    assert_eq!(pod_summary(&killed).1, "Signal:9");
    let mut exit = killed.clone();
    exit["status"]["containerStatuses"][0]["state"]["terminated"] = json!({"exitCode": 2});
    assert_eq!(pod_summary(&exit).1, "ExitCode:2");

    let creating = json!({
        "spec": {"containers": [{"name": "c"}]},
        "status": {"phase": "Pending", "containerStatuses": [
            {"name": "c", "ready": false, "state": {"waiting": {"reason": "ContainerCreating"}}}
        ]}
    });
    assert_eq!(pod_summary(&creating), summary("0/1", "ContainerCreating", "0"));
}

#[test]
fn table_pod_terminating_unknown_and_pending_default() {
    let mut pod = json!({
        "metadata": {"name": "p", "deletionTimestamp": ago(5)},
        "spec": {"containers": [{"name": "c"}]},
        "status": {"phase": "Running", "containerStatuses": [running("c", true, 0)]}
    });
    assert_eq!(pod_summary(&pod), summary("1/1", "Terminating", "0"));
    pod["status"]["reason"] = json!("NodeLost");
    assert_eq!(pod_summary(&pod).1, "Unknown");
    // A finished pod being deleted keeps its final status.
    let finished = json!({
        "metadata": {"deletionTimestamp": ago(5)},
        "spec": {"containers": [{"name": "c"}]},
        "status": {"phase": "Succeeded", "containerStatuses": [
            {"name": "c", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
        ]}
    });
    assert_eq!(pod_summary(&finished).1, "Completed");
    let bare = json!({"metadata": {"name": "new"}, "spec": {"containers": [{"name": "c"}]}});
    assert_eq!(pod_summary(&bare), summary("0/1", "Pending", "0"));
    let evicted = json!({"status": {"phase": "Failed", "reason": "Evicted"}});
    assert_eq!(pod_summary(&evicted).1, "Evicted");
}

#[test]
fn table_pod_init_containers() {
    let base = |init_statuses: Value| {
        json!({
            "spec": {
                "initContainers": [{"name": "setup"}, {"name": "migrate"}],
                "containers": [{"name": "app"}]
            },
            "status": {
                "phase": "Pending",
                "initContainerStatuses": init_statuses,
                "containerStatuses": [{"name": "app", "state": {"waiting": {"reason": "PodInitializing"}}}]
            }
        })
    };
    let done = json!({"terminated": {"exitCode": 0, "reason": "Completed"}});
    let pod = base(json!([
        {"name": "setup", "state": done},
        {"name": "migrate", "state": {"running": {}}}
    ]));
    assert_eq!(pod_summary(&pod), summary("0/1", "Init:1/2", "0"));
    let pod = base(json!([
        {"name": "setup", "state": {"waiting": {"reason": "PodInitializing"}}},
        {"name": "migrate", "state": {"waiting": {}}}
    ]));
    assert_eq!(pod_summary(&pod).1, "Init:0/2");
    let pod = base(json!([
        {"name": "setup", "state": done},
        {"name": "migrate", "restartCount": 2, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
         "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(30)}}}
    ]));
    assert_eq!(pod_summary(&pod), summary("0/1", "Init:CrashLoopBackOff", "2 (30s ago)"));
    let pod = base(json!([{"name": "setup", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]));
    assert_eq!(pod_summary(&pod).1, "Init:Error");
    let pod = base(json!([{"name": "setup", "state": {"terminated": {"exitCode": 3}}}]));
    assert_eq!(pod_summary(&pod).1, "Init:ExitCode:3");
    let pod = base(json!([{"name": "setup", "state": {"terminated": {"exitCode": 3, "signal": 15}}}]));
    assert_eq!(pod_summary(&pod).1, "Init:Signal:15");
    // All init containers done: the app container's state decides.
    let pod = base(json!([{"name": "setup", "state": done}, {"name": "migrate", "state": done}]));
    assert_eq!(pod_summary(&pod).1, "PodInitializing");
}

#[test]
fn table_pod_sidecars_gates_and_completed_with_running() {
    let pod = json!({
        "spec": {
            "initContainers": [{"name": "proxy", "restartPolicy": "Always"}],
            "containers": [{"name": "app"}],
            "readinessGates": [{"conditionType": "example.com/lb"}, {"conditionType": "example.com/dns"}]
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "Initialized", "status": "True"},
                {"type": "example.com/lb", "status": "True"},
                {"type": "example.com/dns", "status": "False"}
            ],
            "initContainerStatuses": [
                {"name": "proxy", "started": true, "ready": true, "restartCount": 1,
                 "state": {"running": {}}, "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(200)}}}
            ],
            "containerStatuses": [running("app", true, 0)]
        }
    });
    assert_eq!(pod_summary(&pod), summary("2/2", "Running", "1 (3m20s ago)"));
    assert_eq!(cells(Printer::Pod, &pod)[8], json!("1/2"));

    let pod = json!({
        "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
        "status": {"phase": "Running", "containerStatuses": [
            {"name": "a", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
            running("b", true, 0)
        ]}
    });
    assert_eq!(pod_summary(&pod), summary("1/2", "NotReady", "0"));
    let mut ready = pod.clone();
    ready["status"]["conditions"] = json!([{"type": "Ready", "status": "True"}]);
    assert_eq!(pod_summary(&ready).1, "Running");

    let gated = json!({"status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}
    ]}});
    assert_eq!(pod_summary(&gated).1, "SchedulingGated");
}

#[test]
fn table_deployment_replicaset_statefulset_daemonset_rows() {
    let template = json!({"spec": {"containers": [
        {"name": "nginx", "image": "nginx:1.25"}, {"name": "sidecar", "image": "envoy:1"}
    ]}});
    let dep = json!({
        "metadata": {"name": "web", "creationTimestamp": ago(600)},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": template},
        "status": {"replicas": 3, "readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}
    });
    assert_eq!(
        cells(Printer::Deployment, &dep),
        vec![
            json!("web"), json!("2/3"), json!(3), json!(2), json!("10m"),
            json!("nginx,sidecar"), json!("nginx:1.25,envoy:1"), json!("app=web")
        ]
    );
    assert_eq!(cells(Printer::Deployment, &json!({}))[1], json!("0/1"));

    let rs = json!({
        "metadata": {"name": "web-5d4f", "creationTimestamp": ago(7200)},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web", "pod-template-hash": "5d4f"}}, "template": template},
        "status": {"replicas": 2, "readyReplicas": 1}
    });
    assert_eq!(
        cells(Printer::ReplicaSet, &rs),
        vec![
            json!("web-5d4f"), json!(2), json!(2), json!(1), json!("120m"),
            json!("nginx,sidecar"), json!("nginx:1.25,envoy:1"), json!("app=web,pod-template-hash=5d4f")
        ]
    );

    let sts = json!({
        "metadata": {"name": "db", "creationTimestamp": ago(86_400 * 3)},
        "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "pg", "image": "postgres:16"}]}}},
        "status": {"readyReplicas": 3}
    });
    assert_eq!(
        cells(Printer::StatefulSet, &sts),
        vec![json!("db"), json!("3/3"), json!("3d"), json!("pg"), json!("postgres:16")]
    );

    let ds = json!({
        "metadata": {"name": "agent", "creationTimestamp": ago(50)},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {"spec": {"nodeSelector": {"kubernetes.io/os": "linux"},
                                  "containers": [{"name": "a", "image": "agent:2"}]}}
        },
        "status": {"desiredNumberScheduled": 4, "currentNumberScheduled": 4, "numberReady": 3,
                   "updatedNumberScheduled": 4, "numberAvailable": 3}
    });
    assert_eq!(
        cells(Printer::DaemonSet, &ds),
        vec![
            json!("agent"), json!(4), json!(4), json!(3), json!(4), json!(3),
            json!("kubernetes.io/os=linux"), json!("50s"), json!("a"), json!("agent:2"), json!("app=agent")
        ]
    );
}

#[test]
fn table_job_rows() {
    let job = |conditions: Value, spec: Value, status_extra: Value| {
        let mut status = json!({"conditions": conditions});
        if let (Some(s), Some(extra)) = (status.as_object_mut(), status_extra.as_object()) {
            s.extend(extra.clone());
        }
        json!({
            "metadata": {"name": "pi", "creationTimestamp": ago(700)},
            "spec": spec,
            "status": status
        })
    };
    let complete = job(
        json!([{"type": "Complete", "status": "True"}]),
        json!({"completions": 1, "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u1"}},
               "template": {"spec": {"containers": [{"name": "pi", "image": "perl:5.34"}]}}}),
        json!({"succeeded": 1, "startTime": ago(600), "completionTime": ago(540)}),
    );
    assert_eq!(
        cells(Printer::Job, &complete),
        vec![
            json!("pi"), json!("Complete"), json!("1/1"), json!("60s"), json!("11m"),
            json!("pi"), json!("perl:5.34"), json!("batch.kubernetes.io/controller-uid=u1")
        ]
    );
    let running = job(json!([]), json!({"completions": 3}), json!({"succeeded": 1, "startTime": ago(125)}));
    let c = cells(Printer::Job, &running);
    assert_eq!((&c[1], &c[2], &c[3]), (&json!("Running"), &json!("1/3"), &json!("2m5s")));
    let failed = job(
        json!([{"type": "FailureTarget", "status": "True"}, {"type": "Failed", "status": "True"}]),
        json!({"parallelism": 4}),
        json!({}),
    );
    let c = cells(Printer::Job, &failed);
    assert_eq!((&c[1], &c[2], &c[3]), (&json!("Failed"), &json!("0/1 of 4"), &json!("")));
    let suspended = job(json!([{"type": "Suspended", "status": "True"}]), json!({"parallelism": 1}), json!({}));
    assert_eq!(cells(Printer::Job, &suspended)[1..3], [json!("Suspended"), json!("0/1")]);
    let not_really = job(json!([{"type": "Complete", "status": "False"}]), json!({}), json!({}));
    assert_eq!(cells(Printer::Job, &not_really)[1], json!("Running"));
    let mut deleting = not_really.clone();
    deleting["metadata"]["deletionTimestamp"] = json!(ago(1));
    assert_eq!(cells(Printer::Job, &deleting)[1], json!("Terminating"));
}

#[test]
fn table_cronjob_and_replicationcontroller_rows() {
    let cj = json!({
        "metadata": {"name": "backup", "creationTimestamp": ago(86_400 * 45)},
        "spec": {"schedule": "*/5 * * * *", "suspend": false,
                 "jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "b", "image": "busybox"}]}}}}},
        "status": {"active": [{"name": "backup-1"}, {"name": "backup-2"}], "lastScheduleTime": ago(60)}
    });
    assert_eq!(
        cells(Printer::CronJob, &cj),
        vec![
            json!("backup"), json!("*/5 * * * *"), json!("<none>"), json!("False"), json!(2),
            json!("60s"), json!("45d"), json!("b"), json!("busybox"), json!("<none>")
        ]
    );
    let fresh = json!({"spec": {"schedule": "@daily", "timeZone": "Europe/Paris", "suspend": true}});
    let c = cells(Printer::CronJob, &fresh);
    assert_eq!(c[2..6], [json!("Europe/Paris"), json!("True"), json!(0), json!("<none>")]);
    assert_eq!(cells(Printer::CronJob, &json!({}))[3], json!("<unset>"));

    let rc = json!({
        "metadata": {"name": "legacy"},
        "spec": {"replicas": 2, "selector": {"app": "legacy"}},
        "status": {"replicas": 2, "readyReplicas": 2}
    });
    let c = cells(Printer::ReplicationController, &rc);
    assert_eq!(c[..5], [json!("legacy"), json!(2), json!(2), json!(2), json!("<unknown>")]);
    assert_eq!(c[7], json!("app=legacy"));
}
