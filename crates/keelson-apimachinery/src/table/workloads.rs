//! Printers for pods and the workload controllers (apps, batch, core RCs).

use super::json::*;
use super::time::{human_age, since, Timestamp};
use super::ColumnDefinition;
use serde_json::{json, Value};

pub(super) fn pod_columns() -> Vec<ColumnDefinition> {
    vec![
        name_col(),
        col("Ready", "string", "The aggregate readiness state of this pod for accepting traffic."),
        col("Status", "string", "The aggregate status of the containers in this pod."),
        col("Restarts", "string", "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."),
        age_col(),
        wide("IP", "string", "IP address allocated to the pod."),
        wide("Node", "string", "Node the pod is scheduled onto."),
        wide("Nominated Node", "string", "Node nominated for the pod by preemption."),
        wide("Readiness Gates", "string", "Readiness gates whose conditions are true, of all gates."),
    ]
}

fn later(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    a.max(b)
}

fn last_termination(cs: &Value) -> Option<Timestamp> {
    timestamp_at(cs, &["lastState", "terminated", "finishedAt"])
}

fn has_true_condition(pod: &Value, type_: &str) -> bool {
    arr_at(pod, &["status", "conditions"])
        .iter()
        .any(|c| str_at(c, &["type"]) == type_ && str_at(c, &["status"]) == "True")
}

/// Text for a terminated state without a reason: `Signal:9` / `ExitCode:1`.
fn exit_text(term: &Value) -> String {
    match int0(term, &["signal"]) {
        0 => format!("ExitCode:{}", int0(term, &["exitCode"])),
        sig => format!("Signal:{sig}"),
    }
}

struct PodSummary {
    ready: usize,
    total: usize,
    reason: String,
    restarts: String,
}

/// The READY / STATUS / RESTARTS logic of the Kubernetes pod printer.
fn summarize_pod(pod: &Value, now_unix: i64) -> PodSummary {
    let init_specs = arr_at(pod, &["spec", "initContainers"]);
    let is_sidecar = |name: &str| {
        init_specs
            .iter()
            .any(|c| str_at(c, &["name"]) == name && str_at(c, &["restartPolicy"]) == "Always")
    };
    let sidecars = init_specs.iter().filter(|c| str_at(c, &["restartPolicy"]) == "Always").count();
    let total = arr_at(pod, &["spec", "containers"]).len() + sidecars;

    let phase = opt_str(pod, &["status", "phase"]).unwrap_or("Pending");
    let mut reason = opt_str(pod, &["status", "reason"]).unwrap_or(phase).to_string();
    let gated = arr_at(pod, &["status", "conditions"]).iter().any(|c| {
        str_at(c, &["type"]) == "PodScheduled" && str_at(c, &["reason"]) == "SchedulingGated"
    });
    if gated {
        reason = "SchedulingGated".into();
    }

    let mut ready = 0;
    let mut restarts = 0i64;
    let mut sidecar_restarts = 0i64;
    let mut last_restart: Option<Timestamp> = None;
    let mut last_sidecar_restart: Option<Timestamp> = None;
    let mut initializing = false;
    for (i, cs) in arr_at(pod, &["status", "initContainerStatuses"]).iter().enumerate() {
        let count = int0(cs, &["restartCount"]);
        restarts += count;
        last_restart = later(last_restart, last_termination(cs));
        let sidecar = is_sidecar(str_at(cs, &["name"]));
        if sidecar {
            sidecar_restarts += count;
            last_sidecar_restart = later(last_sidecar_restart, last_termination(cs));
        }
        let terminated = at(cs, &["state", "terminated"]);
        if terminated.is_some_and(|t| int0(t, &["exitCode"]) == 0) {
            continue;
        }
        if sidecar && bool_at(cs, &["started"]) == Some(true) {
            if bool_at(cs, &["ready"]) == Some(true) {
                ready += 1;
            }
            continue;
        }
        let waiting = opt_str(cs, &["state", "waiting", "reason"]).filter(|r| *r != "PodInitializing");
        reason = match (terminated, waiting) {
            (Some(t), _) => match opt_str(t, &["reason"]) {
                Some(r) => format!("Init:{r}"),
                None => format!("Init:{}", exit_text(t)),
            },
            (None, Some(w)) => format!("Init:{w}"),
            (None, None) => format!("Init:{i}/{}", init_specs.len()),
        };
        initializing = true;
        break;
    }

    if !initializing || has_true_condition(pod, "Initialized") {
        restarts = sidecar_restarts;
        last_restart = last_sidecar_restart;
        let mut has_running = false;
        for cs in arr_at(pod, &["status", "containerStatuses"]).iter().rev() {
            restarts += int0(cs, &["restartCount"]);
            last_restart = later(last_restart, last_termination(cs));
            let terminated = at(cs, &["state", "terminated"]);
            if let Some(w) = opt_str(cs, &["state", "waiting", "reason"]) {
                reason = w.to_string();
            } else if let Some(t) = terminated {
                reason = opt_str(t, &["reason"]).map_or_else(|| exit_text(t), str::to_string);
            } else if bool_at(cs, &["ready"]) == Some(true) && at(cs, &["state", "running"]).is_some() {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            reason = if has_true_condition(pod, "Ready") { "Running" } else { "NotReady" }.into();
        }
    }

    if deleting(pod) && str_at(pod, &["status", "reason"]) == "NodeLost" {
        reason = "Unknown".into();
    } else if deleting(pod) && phase != "Succeeded" && phase != "Failed" {
        reason = "Terminating".into();
    }

    let restarts = match last_restart {
        Some(t) if restarts != 0 => {
            format!("{restarts} ({} ago)", human_age(t.seconds_since(now_unix)))
        }
        _ => restarts.to_string(),
    };
    PodSummary { ready, total, reason, restarts }
}

pub(super) fn pod_cells(pod: &Value, now_unix: i64) -> Vec<Value> {
    let sum = summarize_pod(pod, now_unix);
    let ip = arr_at(pod, &["status", "podIPs"])
        .first()
        .and_then(|p| opt_str(p, &["ip"]))
        .or_else(|| opt_str(pod, &["status", "podIP"]))
        .unwrap_or("<none>");
    let gates = arr_at(pod, &["spec", "readinessGates"]);
    let gates_cell = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let conditions = arr_at(pod, &["status", "conditions"]);
        let true_count = gates
            .iter()
            .filter(|g| {
                let wanted = str_at(g, &["conditionType"]);
                conditions
                    .iter()
                    .find(|c| str_at(c, &["type"]) == wanted)
                    .is_some_and(|c| str_at(c, &["status"]) == "True")
            })
            .count();
        format!("{true_count}/{}", gates.len())
    };
    vec![
        name_cell(pod),
        s(format!("{}/{}", sum.ready, sum.total)),
        s(sum.reason),
        s(sum.restarts),
        age_cell(pod, now_unix),
        s(ip),
        s(opt_str(pod, &["spec", "nodeName"]).unwrap_or("<none>")),
        s(opt_str(pod, &["status", "nominatedNodeName"]).unwrap_or("<none>")),
        s(gates_cell),
    ]
}

/// Row conditions the server attaches to finished pods.
pub(super) fn pod_conditions(pod: &Value) -> Option<Value> {
    let (reason, message) = match str_at(pod, &["status", "phase"]) {
        "Succeeded" => ("Succeeded", "The pod has completed successfully."),
        "Failed" => ("Failed", "The pod failed."),
        _ => return None,
    };
    Some(json!([{"type": "Completed", "status": "True", "reason": reason, "message": message}]))
}

/// `spec.replicas`, which the API server defaults to 1.
fn desired(obj: &Value) -> i64 {
    int_at(obj, &["spec", "replicas"]).unwrap_or(1)
}

fn template_containers<'a>(obj: &'a Value, template: &[&str]) -> &'a [Value] {
    let mut path: Vec<&str> = template.to_vec();
    path.extend(["spec", "containers"]);
    arr_at(obj, &path)
}

pub(super) fn deployment_columns() -> Vec<ColumnDefinition> {
    let [c, i] = containers_cols();
    vec![
        name_col(),
        col("Ready", "string", "Number of the pod with ready state"),
        col("Up-to-date", "string", "Total number of pods targeted by this deployment that have the desired template."),
        col("Available", "string", "Total number of available pods targeted by this deployment."),
        age_col(),
        c,
        i,
        selector_col(),
    ]
}

pub(super) fn deployment_cells(d: &Value, now_unix: i64) -> Vec<Value> {
    let [names, images] = container_cells(template_containers(d, &["spec", "template"]));
    let selector = selector_string(at(d, &["spec", "selector"])).unwrap_or_else(|()| "<invalid>".into());
    vec![
        name_cell(d),
        s(format!("{}/{}", int0(d, &["status", "readyReplicas"]), desired(d))),
        n(int0(d, &["status", "updatedReplicas"])),
        n(int0(d, &["status", "availableReplicas"])),
        age_cell(d, now_unix),
        names,
        images,
        s(selector),
    ]
}

fn replica_columns(what: &str) -> Vec<ColumnDefinition> {
    let [c, i] = containers_cols();
    vec![
        name_col(),
        col("Desired", "integer", &format!("Number of desired pods of this {what}.")),
        col("Current", "integer", &format!("Number of pods currently created by this {what}.")),
        col("Ready", "integer", &format!("Number of ready pods of this {what}.")),
        age_col(),
        c,
        i,
        selector_col(),
    ]
}

pub(super) fn replicaset_columns() -> Vec<ColumnDefinition> {
    replica_columns("replica set")
}

pub(super) fn replicaset_cells(rs: &Value, now_unix: i64) -> Vec<Value> {
    let [names, images] = container_cells(template_containers(rs, &["spec", "template"]));
    vec![
        name_cell(rs),
        n(desired(rs)),
        n(int0(rs, &["status", "replicas"])),
        n(int0(rs, &["status", "readyReplicas"])),
        age_cell(rs, now_unix),
        names,
        images,
        s(format_label_selector(at(rs, &["spec", "selector"]))),
    ]
}

pub(super) fn replicationcontroller_columns() -> Vec<ColumnDefinition> {
    replica_columns("replication controller")
}

pub(super) fn replicationcontroller_cells(rc: &Value, now_unix: i64) -> Vec<Value> {
    let [names, images] = container_cells(template_containers(rc, &["spec", "template"]));
    vec![
        name_cell(rc),
        n(desired(rc)),
        n(int0(rc, &["status", "replicas"])),
        n(int0(rc, &["status", "readyReplicas"])),
        age_cell(rc, now_unix),
        names,
        images,
        s(format_labels(at(rc, &["spec", "selector"]))),
    ]
}

pub(super) fn statefulset_columns() -> Vec<ColumnDefinition> {
    let [c, i] = containers_cols();
    vec![name_col(), col("Ready", "string", "Number of the pod with ready state"), age_col(), c, i]
}

pub(super) fn statefulset_cells(ss: &Value, now_unix: i64) -> Vec<Value> {
    let [names, images] = container_cells(template_containers(ss, &["spec", "template"]));
    vec![
        name_cell(ss),
        s(format!("{}/{}", int0(ss, &["status", "readyReplicas"]), desired(ss))),
        age_cell(ss, now_unix),
        names,
        images,
    ]
}

pub(super) fn daemonset_columns() -> Vec<ColumnDefinition> {
    let [c, i] = containers_cols();
    vec![
        name_col(),
        col("Desired", "integer", "Number of nodes that should be running the daemon pod."),
        col("Current", "integer", "Number of nodes running at least one daemon pod that should."),
        col("Ready", "integer", "Number of nodes with a ready daemon pod."),
        col("Up-to-date", "integer", "Number of nodes running the updated daemon pod."),
        col("Available", "integer", "Number of nodes with an available daemon pod."),
        col("Node Selector", "string", "Node selector of the pod template."),
        age_col(),
        c,
        i,
        selector_col(),
    ]
}

pub(super) fn daemonset_cells(ds: &Value, now_unix: i64) -> Vec<Value> {
    let [names, images] = container_cells(template_containers(ds, &["spec", "template"]));
    let st = |f: &str| n(int0(ds, &["status", f]));
    vec![
        name_cell(ds),
        st("desiredNumberScheduled"),
        st("currentNumberScheduled"),
        st("numberReady"),
        st("updatedNumberScheduled"),
        st("numberAvailable"),
        s(format_labels(at(ds, &["spec", "template", "spec", "nodeSelector"]))),
        age_cell(ds, now_unix),
        names,
        images,
        s(format_label_selector(at(ds, &["spec", "selector"]))),
    ]
}

pub(super) fn job_columns() -> Vec<ColumnDefinition> {
    let [c, i] = containers_cols();
    vec![
        name_col(),
        col("Status", "string", "Status of the job."),
        col("Completions", "string", "The number of pods which reached phase Succeeded, of the completions wanted."),
        col("Duration", "string", "Time required to complete the job."),
        age_col(),
        c,
        i,
        selector_col(),
    ]
}

/// Whether the first condition of `type_` has status True.
fn job_condition(job: &Value, type_: &str) -> bool {
    arr_at(job, &["status", "conditions"])
        .iter()
        .find(|c| str_at(c, &["type"]) == type_)
        .is_some_and(|c| str_at(c, &["status"]) == "True")
}

pub(super) fn job_cells(job: &Value, now_unix: i64) -> Vec<Value> {
    let succeeded = int0(job, &["status", "succeeded"]);
    let completions = match int_at(job, &["spec", "completions"]) {
        Some(c) => format!("{succeeded}/{c}"),
        None => match int0(job, &["spec", "parallelism"]) {
            p if p > 1 => format!("{succeeded}/1 of {p}"),
            _ => format!("{succeeded}/1"),
        },
    };
    let start = timestamp_at(job, &["status", "startTime"]);
    let duration = match (start, timestamp_at(job, &["status", "completionTime"])) {
        (None, _) => String::new(),
        (Some(st), None) => human_age(st.seconds_since(now_unix)),
        (Some(st), Some(done)) => human_age(st.seconds_until(&done)),
    };
    let status = if job_condition(job, "Complete") {
        "Complete"
    } else if job_condition(job, "Failed") {
        "Failed"
    } else if deleting(job) {
        "Terminating"
    } else if job_condition(job, "Suspended") {
        "Suspended"
    } else if job_condition(job, "FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    };
    let [names, images] = container_cells(template_containers(job, &["spec", "template"]));
    vec![
        name_cell(job),
        s(status),
        s(completions),
        s(duration),
        age_cell(job, now_unix),
        names,
        images,
        s(format_label_selector(at(job, &["spec", "selector"]))),
    ]
}

pub(super) fn cronjob_columns() -> Vec<ColumnDefinition> {
    let [c, i] = containers_cols();
    vec![
        name_col(),
        col("Schedule", "string", "The schedule in Cron format."),
        col("Timezone", "string", "The time zone name for the given schedule."),
        col("Suspend", "boolean", "Whether subsequent executions are suspended."),
        col("Active", "integer", "Number of currently running jobs."),
        col("Last Schedule", "string", "Time since the job was last successfully scheduled."),
        age_col(),
        c,
        i,
        selector_col(),
    ]
}

pub(super) fn cronjob_cells(cj: &Value, now_unix: i64) -> Vec<Value> {
    let suspend = match bool_at(cj, &["spec", "suspend"]) {
        Some(true) => "True",
        Some(false) => "False",
        None => "<unset>",
    };
    let last = match at(cj, &["status", "lastScheduleTime"]).and_then(Value::as_str) {
        Some(t) => since(Some(t), now_unix),
        None => "<none>".into(),
    };
    let tmpl = ["spec", "jobTemplate", "spec", "template"];
    let [names, images] = container_cells(template_containers(cj, &tmpl));
    vec![
        name_cell(cj),
        s(str_at(cj, &["spec", "schedule"])),
        s(at(cj, &["spec", "timeZone"]).and_then(Value::as_str).unwrap_or("<none>")),
        s(suspend),
        n(arr_at(cj, &["status", "active"]).len() as i64),
        s(last),
        age_cell(cj, now_unix),
        names,
        images,
        s(format_label_selector(at(cj, &["spec", "jobTemplate", "spec", "selector"]))),
    ]
}
