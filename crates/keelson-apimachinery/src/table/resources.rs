//! Printers for the non-workload resources: services and networking,
//! nodes, namespaces, config, storage, events, leases, policy and RBAC.

use super::json::*;
use super::time::{format_rfc3339, parse_rfc3339, since, GO_ZERO_UNIX};
use super::ColumnDefinition;
use serde_json::Value;

pub(super) fn service_columns() -> Vec<ColumnDefinition> {
    vec![
        name_col(),
        col("Type", "string", "How the service is exposed (ClusterIP, NodePort, LoadBalancer, ExternalName)."),
        col("Cluster-IP", "string", "The IP address of the service inside the cluster."),
        col("External-IP", "string", "External IPs or load-balancer ingress points of the service."),
        col("Port(s)", "string", "The ports exposed by the service."),
        age_col(),
        wide("Selector", "string", "Route service traffic to pods with labels matching this selector."),
    ]
}

pub(super) fn service_cells(svc: &Value, now_unix: i64) -> Vec<Value> {
    let ty = opt_str(svc, &["spec", "type"]).unwrap_or("ClusterIP");
    let cluster_ip = arr_at(svc, &["spec", "clusterIPs"])
        .first()
        .and_then(Value::as_str)
        .filter(|ip| !ip.is_empty())
        .or_else(|| opt_str(svc, &["spec", "clusterIP"]))
        .unwrap_or("<none>");
    let external_ips: Vec<&str> =
        arr_at(svc, &["spec", "externalIPs"]).iter().filter_map(Value::as_str).collect();
    let external = match ty {
        "ClusterIP" | "NodePort" if external_ips.is_empty() => "<none>".to_string(),
        "ClusterIP" | "NodePort" => external_ips.join(","),
        "LoadBalancer" => {
            let lb = lb_ingress(at(svc, &["status"]).unwrap_or(&Value::Null));
            let mut all: Vec<&str> = lb.split(',').filter(|p| !p.is_empty()).collect();
            all.extend(external_ips.iter().copied());
            if all.is_empty() {
                "<pending>".into()
            } else {
                all.join(",")
            }
        }
        "ExternalName" => str_at(svc, &["spec", "externalName"]).to_string(),
        _ => "<unknown>".into(),
    };
    let ports: Vec<String> = arr_at(svc, &["spec", "ports"])
        .iter()
        .map(|p| {
            let port = int0(p, &["port"]);
            let proto = opt_str(p, &["protocol"]).unwrap_or("TCP");
            match int0(p, &["nodePort"]) {
                np if np > 0 => format!("{port}:{np}/{proto}"),
                _ => format!("{port}/{proto}"),
            }
        })
        .collect();
    let ports = if ports.is_empty() { "<none>".to_string() } else { ports.join(",") };
    vec![
        name_cell(svc),
        s(ty),
        s(cluster_ip),
        s(external),
        s(ports),
        age_cell(svc, now_unix),
        s(format_labels(at(svc, &["spec", "selector"]))),
    ]
}

pub(super) fn node_columns() -> Vec<ColumnDefinition> {
    vec![
        name_col(),
        col("Status", "string", "The status of the node"),
        col("Roles", "string", "The roles of the node"),
        age_col(),
        col("Version", "string", "Kubelet version reported by the node."),
        wide("Internal-IP", "string", "First InternalIP address of the node."),
        wide("External-IP", "string", "First ExternalIP address of the node."),
        wide("OS-Image", "string", "OS image reported by the node."),
        wide("Kernel-Version", "string", "Kernel version reported by the node."),
        wide("Container-Runtime", "string", "Container runtime version reported by the node."),
    ]
}

pub(super) fn node_cells(node: &Value, now_unix: i64) -> Vec<Value> {
    let mut status: Vec<&str> = Vec::new();
    // A later duplicate condition wins, as in the upstream map-based lookup.
    if let Some(c) = arr_at(node, &["status", "conditions"])
        .iter()
        .rev()
        .find(|c| str_at(c, &["type"]) == "Ready")
    {
        status.push(if str_at(c, &["status"]) == "True" { "Ready" } else { "NotReady" });
    } else {
        status.push("Unknown");
    }
    if bool_at(node, &["spec", "unschedulable"]) == Some(true) {
        status.push("SchedulingDisabled");
    }
    let mut roles: Vec<String> = Vec::new();
    if let Some(labels) = obj_at(node, &["metadata", "labels"]) {
        for (k, v) in labels {
            if let Some(role) = k.strip_prefix("node-role.kubernetes.io/") {
                if !role.is_empty() {
                    roles.push(role.to_string());
                }
            } else if k == "kubernetes.io/role" {
                if let Some(r) = v.as_str().filter(|r| !r.is_empty()) {
                    roles.push(r.to_string());
                }
            }
        }
    }
    roles.sort();
    roles.dedup();
    let roles = if roles.is_empty() { "<none>".to_string() } else { roles.join(",") };
    let address = |ty: &str| {
        arr_at(node, &["status", "addresses"])
            .iter()
            .find(|a| str_at(a, &["type"]) == ty)
            .map(|a| str_at(a, &["address"]))
            .unwrap_or("<none>")
    };
    let info = |f: &str| s(opt_str(node, &["status", "nodeInfo", f]).unwrap_or("<unknown>"));
    vec![
        name_cell(node),
        s(status.join(",")),
        s(roles),
        age_cell(node, now_unix),
        s(str_at(node, &["status", "nodeInfo", "kubeletVersion"])),
        s(address("InternalIP")),
        s(address("ExternalIP")),
        info("osImage"),
        info("kernelVersion"),
        info("containerRuntimeVersion"),
    ]
}

pub(super) fn namespace_columns() -> Vec<ColumnDefinition> {
    vec![name_col(), col("Status", "string", "The status of the namespace"), age_col()]
}

pub(super) fn namespace_cells(ns: &Value, now_unix: i64) -> Vec<Value> {
    let phase = opt_str(ns, &["status", "phase"]).unwrap_or("Active");
    vec![name_cell(ns), s(phase), age_cell(ns, now_unix)]
}

pub(super) fn configmap_columns() -> Vec<ColumnDefinition> {
    vec![name_col(), col("Data", "string", "Number of data and binaryData keys."), age_col()]
}

pub(super) fn configmap_cells(cm: &Value, now_unix: i64) -> Vec<Value> {
    let keys = key_count(cm, &["data"]) + key_count(cm, &["binaryData"]);
    vec![name_cell(cm), n(keys as i64), age_cell(cm, now_unix)]
}

pub(super) fn secret_columns() -> Vec<ColumnDefinition> {
    vec![
        name_col(),
        col("Type", "string", "Used to facilitate programmatic handling of secret data."),
        col("Data", "string", "Number of data keys."),
        age_col(),
    ]
}

pub(super) fn secret_cells(secret: &Value, now_unix: i64) -> Vec<Value> {
    vec![
        name_cell(secret),
        s(str_at(secret, &["type"])),
        n(key_count(secret, &["data"]) as i64),
        age_cell(secret, now_unix),
    ]
}

pub(super) fn serviceaccount_columns() -> Vec<ColumnDefinition> {
    vec![name_col(), col("Secrets", "string", "Number of secrets listed by the service account."), age_col()]
}

pub(super) fn serviceaccount_cells(sa: &Value, now_unix: i64) -> Vec<Value> {
    vec![name_cell(sa), n(arr_at(sa, &["secrets"]).len() as i64), age_cell(sa, now_unix)]
}

/// Up to three entries, then ` + N more...`; `if_empty` for none at all.
fn list_with_more(items: &[String], total: usize, if_empty: &str) -> String {
    const MAX: usize = 3;
    let shown = items.iter().take(MAX).cloned().collect::<Vec<_>>().join(",");
    if total > MAX {
        format!("{shown} + {} more...", total - MAX)
    } else if shown.is_empty() {
        if_empty.to_string()
    } else {
        shown
    }
}

pub(super) fn endpoints_columns() -> Vec<ColumnDefinition> {
    vec![name_col(), col("Endpoints", "string", "Addresses and ports of the endpoints."), age_col()]
}

fn host_port(ip: &str, port: i64) -> String {
    if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    }
}

pub(super) fn endpoints_cells(ep: &Value, now_unix: i64) -> Vec<Value> {
    let subsets = arr_at(ep, &["subsets"]);
    let text = if subsets.is_empty() {
        "<none>".to_string()
    } else {
        let mut list = Vec::new();
        for ss in subsets {
            let ips: Vec<&str> = arr_at(ss, &["addresses"]).iter().map(|a| str_at(a, &["ip"])).collect();
            let ports = arr_at(ss, &["ports"]);
            if ports.is_empty() {
                list.extend(ips.iter().map(|ip| ip.to_string()));
            }
            for p in ports {
                list.extend(ips.iter().map(|ip| host_port(ip, int0(p, &["port"]))));
            }
        }
        list_with_more(&list, list.len(), "")
    };
    vec![name_cell(ep), s(text), age_cell(ep, now_unix)]
}

pub(super) fn endpointslice_columns() -> Vec<ColumnDefinition> {
    vec![
        name_col(),
        col("AddressType", "string", "The type of address carried by this slice."),
        col("Ports", "string", "Network ports exposed by each endpoint."),
        col("Endpoints", "string", "Addresses of the endpoints."),
        age_col(),
    ]
}

pub(super) fn endpointslice_cells(eps: &Value, now_unix: i64) -> Vec<Value> {
    let ports: Vec<String> = arr_at(eps, &["ports"])
        .iter()
        .map(|p| match (int_at(p, &["port"]), at(p, &["name"]).and_then(Value::as_str)) {
            (Some(n), _) => n.to_string(),
            (None, Some(name)) => name.to_string(),
            (None, None) => "*".to_string(),
        })
        .collect();
    let addrs: Vec<String> = arr_at(eps, &["endpoints"])
        .iter()
        .flat_map(|e| arr_at(e, &["addresses"]).iter())
        .map(|a| a.as_str().unwrap_or("").to_string())
        .collect();
    vec![
        name_cell(eps),
        s(str_at(eps, &["addressType"])),
        s(list_with_more(&ports, ports.len(), "<unset>")),
        s(list_with_more(&addrs, addrs.len(), "<unset>")),
        age_cell(eps, now_unix),
    ]
}

pub(super) fn event_columns() -> Vec<ColumnDefinition> {
    let mut name = name_col();
    name.priority = 1;
    vec![
        col("Last Seen", "string", "Time since the event was last observed."),
        col("Type", "string", "Type of this event (Normal, Warning)."),
        col("Reason", "string", "Short, machine understandable reason for the event."),
        col("Object", "string", "The object this event is about."),
        wide("Subobject", "string", "Field path within the involved object."),
        wide("Source", "string", "The component reporting this event."),
        col("Message", "string", "A human-readable description of the event."),
        wide("First Seen", "string", "Time since the event was first observed."),
        wide("Count", "string", "The number of times this event has occurred."),
        name,
    ]
}

/// Core `v1` events and `events.k8s.io/v1` events (renamed fields) alike.
pub(super) fn event_cells(ev: &Value, now_unix: i64, events_v1: bool) -> Vec<Value> {
    let f = |core: &'static str, v1: &'static str| if events_v1 { v1 } else { core };
    let ts = |field: &str| at(ev, &[field]).and_then(Value::as_str).filter(|t| !t.is_empty());
    let first_ts = ts(f("firstTimestamp", "deprecatedFirstTimestamp"));
    let first = match first_ts {
        Some(t) => since(Some(t), now_unix),
        None => since(ts("eventTime"), now_unix),
    };
    let mut last = match ts(f("lastTimestamp", "deprecatedLastTimestamp")) {
        Some(t) => since(Some(t), now_unix),
        None => first.clone(),
    };
    let mut count = int0(ev, &[f("count", "deprecatedCount")]);
    if let Some(series) = at(ev, &["series"]) {
        last = since(at(series, &["lastObservedTime"]).and_then(Value::as_str), now_unix);
        count = int0(series, &["count"]);
    } else if count == 0 {
        count = 1;
    }
    let involved = f("involvedObject", "regarding");
    let kind = str_at(ev, &[involved, "kind"]).to_lowercase();
    let target = match opt_str(ev, &[involved, "name"]) {
        Some(name) => format!("{kind}/{name}"),
        None => kind,
    };
    let source = f("source", "deprecatedSource");
    let component = opt_str(ev, &[source, "component"])
        .unwrap_or_else(|| str_at(ev, &["reportingController"]));
    let instance = opt_str(ev, &[source, "host"]).unwrap_or_else(|| str_at(ev, &["reportingInstance"]));
    let source_text = if instance.is_empty() {
        component.to_string()
    } else {
        format!("{component}, {instance}")
    };
    vec![
        s(last),
        s(str_at(ev, &["type"])),
        s(str_at(ev, &["reason"])),
        s(target),
        s(str_at(ev, &[involved, "fieldPath"])),
        s(source_text),
        s(str_at(ev, &[f("message", "note")]).trim()),
        s(first),
        n(count),
        name_cell(ev),
    ]
}

pub(super) fn lease_columns() -> Vec<ColumnDefinition> {
    vec![name_col(), col("Holder", "string", "Identity of the holder of the lease."), age_col()]
}

pub(super) fn lease_cells(lease: &Value, now_unix: i64) -> Vec<Value> {
    vec![name_cell(lease), s(str_at(lease, &["spec", "holderIdentity"])), age_cell(lease, now_unix)]
}

pub(super) fn ingress_columns() -> Vec<ColumnDefinition> {
    vec![
        name_col(),
        col("Class", "string", "The name of the IngressClass resource that should be used for additional configuration"),
        col("Hosts", "string", "Hosts that incoming requests are matched against before the ingress rule"),
        col("Address", "string", "Address is a list containing ingress points for the load-balancer"),
        col("Ports", "string", "Ports of TLS configurations that open"),
        age_col(),
    ]
}

pub(super) fn ingress_cells(ing: &Value, now_unix: i64) -> Vec<Value> {
    let rules = arr_at(ing, &["spec", "rules"]);
    let (mut hosts, mut more) = (Vec::new(), false);
    for rule in rules {
        more |= hosts.len() == 3;
        if let Some(host) = opt_str(rule, &["host"]).filter(|_| !more) {
            hosts.push(host);
        }
    }
    let hosts = match (hosts.is_empty(), more) {
        (true, _) => "*".to_string(),
        (false, true) => format!("{} + {} more...", hosts.join(","), rules.len() - 3),
        (false, false) => hosts.join(","),
    };
    let ports = if arr_at(ing, &["spec", "tls"]).is_empty() { "80" } else { "80, 443" };
    vec![
        name_cell(ing),
        s(opt_str(ing, &["spec", "ingressClassName"]).unwrap_or("<none>")),
        s(hosts),
        s(lb_ingress(at(ing, &["status"]).unwrap_or(&Value::Null))),
        s(ports),
        age_cell(ing, now_unix),
    ]
}

pub(super) fn ingressclass_columns() -> Vec<ColumnDefinition> {
    vec![
        name_col(),
        col("Controller", "string", "Controller that is responsible for handling this class"),
        col("Parameters", "string", "A reference to a resource with additional parameters"),
        age_col(),
    ]
}

pub(super) fn ingressclass_cells(ic: &Value, now_unix: i64) -> Vec<Value> {
    let params = match at(ic, &["spec", "parameters"]) {
        None => "<none>".to_string(),
        Some(p) => {
            let mut text = str_at(p, &["kind"]).to_string();
            if let Some(group) = at(p, &["apiGroup"]).and_then(Value::as_str) {
                text = format!("{text}.{group}");
            }
            format!("{text}/{}", str_at(p, &["name"]))
        }
    };
    vec![name_cell(ic), s(str_at(ic, &["spec", "controller"])), s(params), age_cell(ic, now_unix)]
}

fn storage_class_of(obj: &Value) -> &str {
    opt_str(obj, &["metadata", "annotations", "volume.beta.kubernetes.io/storage-class"])
        .unwrap_or_else(|| str_at(obj, &["spec", "storageClassName"]))
}

fn quantity(obj: &Value, path: &[&str]) -> String {
    at(obj, path).map_or_else(|| "0".to_string(), int_or_string)
}

pub(super) fn pv_columns() -> Vec<ColumnDefinition> {
    vec![
        name_col(),
        col("Capacity", "string", "Storage capacity of the volume."),
        col("Access Modes", "string", "Ways the volume can be mounted."),
        col("Reclaim Policy", "string", "What happens to the volume when released from its claim."),
        col("Status", "string", "Phase of the volume."),
        col("Claim", "string", "The claim bound to this volume."),
        col("StorageClass", "string", "StorageClass of the pv"),
        col("VolumeAttributesClass", "string", "VolumeAttributesClass of the pv"),
        col("Reason", "string", "Reason the volume is in its phase."),
        age_col(),
        wide("VolumeMode", "string", "Filesystem or Block."),
    ]
}

pub(super) fn pv_cells(pv: &Value, now_unix: i64) -> Vec<Value> {
    let claim = match at(pv, &["spec", "claimRef"]) {
        Some(c) => format!("{}/{}", str_at(c, &["namespace"]), str_at(c, &["name"])),
        None => String::new(),
    };
    let phase = if deleting(pv) { "Terminating" } else { str_at(pv, &["status", "phase"]) };
    vec![
        name_cell(pv),
        s(quantity(pv, &["spec", "capacity", "storage"])),
        s(access_modes(arr_at(pv, &["spec", "accessModes"]))),
        s(str_at(pv, &["spec", "persistentVolumeReclaimPolicy"])),
        s(phase),
        s(claim),
        s(storage_class_of(pv)),
        s(opt_str(pv, &["spec", "volumeAttributesClassName"]).unwrap_or("<unset>")),
        s(str_at(pv, &["status", "reason"])),
        age_cell(pv, now_unix),
        s(opt_str(pv, &["spec", "volumeMode"]).unwrap_or("<unset>")),
    ]
}

pub(super) fn pvc_columns() -> Vec<ColumnDefinition> {
    vec![
        name_col(),
        col("Status", "string", "Phase of the claim."),
        col("Volume", "string", "The volume bound to this claim."),
        col("Capacity", "string", "Actual capacity of the bound volume."),
        col("Access Modes", "string", "Access modes of the bound volume."),
        col("StorageClass", "string", "StorageClass of the pvc"),
        col("VolumeAttributesClass", "string", "VolumeAttributesClass of the pvc"),
        age_col(),
        wide("VolumeMode", "string", "Filesystem or Block."),
    ]
}

pub(super) fn pvc_cells(pvc: &Value, now_unix: i64) -> Vec<Value> {
    let volume = str_at(pvc, &["spec", "volumeName"]);
    let (capacity, modes) = if volume.is_empty() {
        (String::new(), String::new())
    } else {
        (
            quantity(pvc, &["status", "capacity", "storage"]),
            access_modes(arr_at(pvc, &["status", "accessModes"])),
        )
    };
    let phase = if deleting(pvc) { "Terminating" } else { str_at(pvc, &["status", "phase"]) };
    vec![
        name_cell(pvc),
        s(phase),
        s(volume),
        s(capacity),
        s(modes),
        s(storage_class_of(pvc)),
        s(opt_str(pvc, &["spec", "volumeAttributesClassName"]).unwrap_or("<unset>")),
        age_cell(pvc, now_unix),
        s(opt_str(pvc, &["spec", "volumeMode"]).unwrap_or("<unset>")),
    ]
}

pub(super) fn storageclass_columns() -> Vec<ColumnDefinition> {
    vec![
        name_col(),
        col("Provisioner", "string", "The volume plugin used to provision volumes."),
        col("ReclaimPolicy", "string", "Reclaim policy of volumes provisioned by this class."),
        col("VolumeBindingMode", "string", "When volumes are provisioned and bound."),
        col("AllowVolumeExpansion", "string", "Whether volumes of this class may be expanded."),
        age_col(),
    ]
}

pub(super) fn storageclass_cells(sc: &Value, now_unix: i64) -> Vec<Value> {
    let is_default = ["storageclass.kubernetes.io/is-default-class", "storageclass.beta.kubernetes.io/is-default-class"]
        .iter()
        .any(|a| str_at(sc, &["metadata", "annotations", a]) == "true");
    let mut name = str_at(sc, &["metadata", "name"]).to_string();
    if is_default {
        name.push_str(" (default)");
    }
    vec![
        s(name),
        s(str_at(sc, &["provisioner"])),
        s(opt_str(sc, &["reclaimPolicy"]).unwrap_or("Delete")),
        s(opt_str(sc, &["volumeBindingMode"]).unwrap_or("Immediate")),
        Value::Bool(bool_at(sc, &["allowVolumeExpansion"]).unwrap_or(false)),
        age_cell(sc, now_unix),
    ]
}

pub(super) fn pdb_columns() -> Vec<ColumnDefinition> {
    vec![
        name_col(),
        col("Min Available", "string", "The minimum number of pods that must be available."),
        col("Max Unavailable", "string", "The maximum number of pods that may be unavailable."),
        col("Allowed Disruptions", "integer", "Calculated number of pods that may be disrupted at this time."),
        age_col(),
    ]
}

pub(super) fn pdb_cells(pdb: &Value, now_unix: i64) -> Vec<Value> {
    let bound = |f: &str| at(pdb, &["spec", f]).map_or_else(|| "N/A".to_string(), int_or_string);
    vec![
        name_cell(pdb),
        s(bound("minAvailable")),
        s(bound("maxUnavailable")),
        n(int0(pdb, &["status", "disruptionsAllowed"])),
        age_cell(pdb, now_unix),
    ]
}

/// Roles, cluster roles and CRDs use the server's default table: the name
/// and the creation time as a UTC RFC 3339 date.
pub(super) fn created_at_columns() -> Vec<ColumnDefinition> {
    vec![name_col(), col("Created At", "date", "Time the object was created (metadata.creationTimestamp).")]
}

pub(super) fn created_at_cells(obj: &Value) -> Vec<Value> {
    let unix = at(obj, &["metadata", "creationTimestamp"])
        .and_then(Value::as_str)
        .and_then(parse_rfc3339)
        .map_or(GO_ZERO_UNIX, |t| t.unix);
    vec![name_cell(obj), s(format_rfc3339(unix))]
}

pub(super) fn rolebinding_columns() -> Vec<ColumnDefinition> {
    vec![
        name_col(),
        col("Role", "string", "The role this binding grants (Kind/name)."),
        age_col(),
        wide("Users", "string", "Users in the binding"),
        wide("Groups", "string", "Groups in the binding"),
        wide("ServiceAccounts", "string", "ServiceAccounts in the binding"),
    ]
}

pub(super) fn rolebinding_cells(rb: &Value, now_unix: i64) -> Vec<Value> {
    let (mut users, mut groups, mut sas) = (Vec::new(), Vec::new(), Vec::new());
    for subj in arr_at(rb, &["subjects"]) {
        let name = str_at(subj, &["name"]);
        match str_at(subj, &["kind"]) {
            "User" => users.push(name.to_string()),
            "Group" => groups.push(name.to_string()),
            "ServiceAccount" => sas.push(format!("{}/{name}", str_at(subj, &["namespace"]))),
            _ => {}
        }
    }
    let role = format!("{}/{}", str_at(rb, &["roleRef", "kind"]), str_at(rb, &["roleRef", "name"]));
    vec![
        name_cell(rb),
        s(role),
        age_cell(rb, now_unix),
        s(users.join(", ")),
        s(groups.join(", ")),
        s(sas.join(", ")),
    ]
}

pub(super) fn priorityclass_columns() -> Vec<ColumnDefinition> {
    vec![
        name_col(),
        col("Value", "integer", "The priority value pods of this class receive."),
        col("Global-Default", "boolean", "Whether this is the default priority class."),
        age_col(),
        col("PreemptionPolicy", "string", "Policy for preempting lower-priority pods."),
    ]
}

pub(super) fn priorityclass_cells(pc: &Value, now_unix: i64) -> Vec<Value> {
    vec![
        name_cell(pc),
        n(int0(pc, &["value"])),
        Value::Bool(bool_at(pc, &["globalDefault"]).unwrap_or(false)),
        age_cell(pc, now_unix),
        s(opt_str(pc, &["preemptionPolicy"]).unwrap_or("PreemptLowerPriority")),
    ]
}

pub(super) fn generic_columns() -> Vec<ColumnDefinition> {
    vec![name_col(), age_col()]
}

pub(super) fn generic_cells(obj: &Value, now_unix: i64) -> Vec<Value> {
    vec![name_cell(obj), age_cell(obj, now_unix)]
}
