//! Draws a [`ClusterStatus`] as text tables or as one JSON document. Pure: no I/O.

use serde_json::{json, Value};

use super::report::{ClusterStatus, LeaseStatus, NodeStatus, ServerStatus};

/// The text frame: the servers (replica state, lag, API health), the component Leases,
/// the Nodes; then a line for every server that did not answer.
pub fn text(status: &ClusterStatus) -> String {
    let mut out = String::new();
    let leader = status.leader.map(|id| match status.servers.iter().find(|s| s.id == id) {
        Some(s) => format!("{} ({id:x})", s.name),
        None => format!("{id:x}"),
    });
    out += &format!("Leader: {}\n\n", leader.as_deref().unwrap_or("none"));
    let header = ["SERVER", "ID", "ADDRESS", "API", "ROLE", "TERM", "LAST-LOG", "COMMIT", "APPLIED", "LAG", "REVISION"];
    let rows: Vec<Vec<String>> = status.servers.iter().map(|s| server_row(status, s)).collect();
    out += &table(&header, &rows);
    for s in &status.servers {
        if let Err(e) = &s.raft {
            out += &format!("  {}: store unreachable: {e}\n", s.name);
        }
        if let Some(reason) = s.api.reason() {
            out += &format!("  {}: API {}: {reason}\n", s.name, s.api.state());
        }
    }
    out += "\n";
    match &status.leases {
        Ok(leases) => out += &table(&["LEASE", "HOLDER", "TRANSITIONS", "RENEWED"], &leases.iter().map(lease_row).collect::<Vec<_>>()),
        Err(e) => out += &format!("Leases unknown: {e}\n"),
    }
    out += "\n";
    match &status.nodes {
        Ok(nodes) if nodes.is_empty() => out += "No nodes.\n",
        Ok(nodes) => out += &table(&["NODE", "READY", "PODS", "SCHEDULING", "TAINTS"], &nodes.iter().map(node_row).collect::<Vec<_>>()),
        Err(e) => out += &format!("Nodes unknown: {e}\n"),
    }
    out
}

fn server_row(status: &ClusterStatus, s: &ServerStatus) -> Vec<String> {
    let name = if s.voter { s.name.clone() } else { format!("{} (learner)", s.name) };
    let mut row = vec![name, format!("{:x}", s.id), s.addr.clone(), s.api.state().to_string()];
    match &s.raft {
        Ok(r) => {
            let lag = status.lag(s).map(|l| l.applied_behind_last.to_string()).unwrap_or_else(|| "?".into());
            let numbers = [r.term, r.last_log_index, r.committed_index, r.applied_index];
            row.push(r.role.clone());
            row.extend(numbers.iter().map(u64::to_string));
            row.push(lag);
            row.push(r.revision.to_string());
        }
        Err(_) => {
            row.push("DOWN".into());
            row.extend(std::iter::repeat_n("-".to_string(), 6));
        }
    }
    row
}

fn lease_row(l: &LeaseStatus) -> Vec<String> {
    vec![
        l.name.clone(),
        l.holder.clone().unwrap_or_else(|| "<none>".into()),
        l.transitions.to_string(),
        l.renew_time.clone().unwrap_or_else(|| "-".into()),
    ]
}

fn node_row(n: &NodeStatus) -> Vec<String> {
    let scheduling = if n.unschedulable { "SchedulingDisabled" } else { "-" };
    let taints = if n.taints.is_empty() { "-".to_string() } else { n.taints.join(",") };
    vec![n.name.clone(), n.ready.clone(), n.pods.to_string(), scheduling.into(), taints]
}

/// Left-aligned columns two spaces apart, a header line first.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        format!("{}\n", padded.join("  ").trim_end())
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out += &line(row.iter().map(String::as_str).collect());
    }
    out
}

/// The same facts as one JSON document.
pub fn json(status: &ClusterStatus) -> Value {
    let (leases, leases_error) = split(&status.leases, |ls| ls.iter().map(lease_json).collect());
    let (nodes, nodes_error) = split(&status.nodes, |ns| ns.iter().map(node_json).collect());
    json!({
        "leader": status.leader.map(|l| format!("{l:x}")),
        "members": status.servers.iter().map(|s| server_json(status, s)).collect::<Vec<_>>(),
        "leases": leases,
        "leases_error": leases_error,
        "nodes": nodes,
        "nodes_error": nodes_error,
    })
}

/// A section's items, or `null` and why.
fn split<T>(section: &Result<Vec<T>, String>, items: impl Fn(&[T]) -> Vec<Value>) -> (Value, Option<String>) {
    match section {
        Ok(v) => (Value::Array(items(v)), None),
        Err(e) => (Value::Null, Some(e.clone())),
    }
}

fn server_json(status: &ClusterStatus, s: &ServerStatus) -> Value {
    let api = json!({
        "state": s.api.state(), "healthy": s.api.is_ready(), "url": s.api.url(), "reason": s.api.reason(),
    });
    let mut v = json!({"id": format!("{:x}", s.id), "name": s.name, "addr": s.addr, "voter": s.voter, "api": api});
    let fields = match &s.raft {
        Ok(r) => json!({
            "reachable": true, "role": r.role, "term": r.term, "leader": r.leader.map(|l| format!("{l:x}")),
            "last_log_index": r.last_log_index, "committed_index": r.committed_index,
            "applied_index": r.applied_index, "snapshot_index": r.snapshot_index, "purged_index": r.purged_index,
            "lag": status.lag(s).map(|l| json!({
                "applied_behind_commit": l.applied_behind_commit,
                "applied_behind_last": l.applied_behind_last,
                "log_behind_last": l.log_behind_last,
            })),
            "revision": r.revision, "compacted_revision": r.compacted_revision,
        }),
        Err(e) => json!({"reachable": false, "error": e}),
    };
    if let (Value::Object(into), Value::Object(from)) = (&mut v, fields) {
        into.extend(from);
    }
    v
}

fn lease_json(l: &LeaseStatus) -> Value {
    json!({"name": l.name, "holder": l.holder, "transitions": l.transitions, "renewTime": l.renew_time})
}

fn node_json(n: &NodeStatus) -> Value {
    json!({"name": n.name, "ready": n.ready, "pods": n.pods, "unschedulable": n.unschedulable, "taints": n.taints})
}

#[cfg(test)]
mod tests {
    use super::super::report::ApiHealth;
    use super::*;
    use keelson_client::api::MemberStatus;

    fn replica(id: u64, role: &str, last: u64, commit: u64, applied: u64) -> MemberStatus {
        MemberStatus {
            id,
            name: format!("keelson-{id}"),
            addr: format!("127.0.0.1:{}", 2379 + id),
            role: role.into(),
            term: 4,
            leader: Some(1),
            last_log_index: last,
            committed_index: commit,
            applied_index: applied,
            snapshot_index: 0,
            purged_index: 0,
            revision: 77,
            compacted_revision: 0,
            members: vec![],
            log_format: 2,
            cluster_log_format: 2,
        }
    }

    fn server(id: u64, raft: Result<MemberStatus, String>, api: ApiHealth) -> ServerStatus {
        ServerStatus { id, name: format!("keelson-{id}"), addr: format!("127.0.0.1:{}", 2379 + id), voter: true, raft, api }
    }

    fn ready(id: u64) -> ApiHealth {
        ApiHealth::Ready { url: format!("https://127.0.0.1:{}", 6442 + id) }
    }

    /// Three servers: the leader, a follower 5 entries behind in applying, and one down.
    fn one_down() -> ClusterStatus {
        ClusterStatus {
            leader: Some(1),
            servers: vec![
                server(1, Ok(replica(1, "leader", 120, 118, 118)), ready(1)),
                server(2, Ok(replica(2, "follower", 119, 118, 115)), ready(2)),
                server(3, Err("no answer within 2s".into()), ApiHealth::Down { url: "https://127.0.0.1:6445".into(), reason: "no answer within 3s".into() }),
            ],
            leases: Ok(vec![
                LeaseStatus { name: "kube-scheduler".into(), holder: Some("keelson-1_ab".into()), transitions: 1, renew_time: Some("2026-12-02T04:00:00Z".into()) },
                LeaseStatus { name: "kube-controller-manager".into(), holder: None, transitions: 0, renew_time: None },
            ]),
            nodes: Ok(vec![
                NodeStatus { name: "hollow-0".into(), ready: "True".into(), pods: 3, unschedulable: false, taints: vec![] },
                NodeStatus {
                    name: "hollow-1".into(),
                    ready: "False".into(),
                    pods: 0,
                    unschedulable: true,
                    taints: vec!["node.kubernetes.io/not-ready:NoSchedule".into()],
                },
            ]),
        }
    }

    fn line_of<'a>(text: &'a str, start: &str) -> &'a str {
        text.lines().find(|l| l.starts_with(start)).unwrap_or_else(|| panic!("no line {start:?} in\n{text}"))
    }

    fn cells(line: &str) -> Vec<&str> {
        line.split_whitespace().collect()
    }

    #[test]
    fn text_shows_servers_lag_health_and_the_one_down() {
        let t = text(&one_down());
        assert!(t.starts_with("Leader: keelson-1 (1)\n"), "{t}");
        assert_eq!(cells(line_of(&t, "SERVER")), ["SERVER", "ID", "ADDRESS", "API", "ROLE", "TERM", "LAST-LOG", "COMMIT", "APPLIED", "LAG", "REVISION"]);
        assert_eq!(cells(line_of(&t, "keelson-1 ")), ["keelson-1", "1", "127.0.0.1:2380", "ready", "leader", "4", "120", "118", "118", "2", "77"]);
        assert_eq!(cells(line_of(&t, "keelson-2 ")), ["keelson-2", "2", "127.0.0.1:2381", "ready", "follower", "4", "119", "118", "115", "5", "77"]);
        assert_eq!(cells(line_of(&t, "keelson-3 ")), ["keelson-3", "3", "127.0.0.1:2382", "down", "DOWN", "-", "-", "-", "-", "-", "-"]);
        assert!(t.contains("  keelson-3: store unreachable: no answer within 2s\n"), "{t}");
        assert!(t.contains("  keelson-3: API down: no answer within 3s\n"), "{t}");
        // Columns line up: every server row starts its API cell where the header does.
        let col = line_of(&t, "SERVER").find("API").unwrap();
        assert_eq!(&line_of(&t, "keelson-3 ")[col..col + 4], "down");
    }

    #[test]
    fn text_shows_lease_holders_or_none_and_nodes() {
        let t = text(&one_down());
        assert_eq!(cells(line_of(&t, "kube-scheduler")), ["kube-scheduler", "keelson-1_ab", "1", "2026-12-02T04:00:00Z"]);
        assert_eq!(cells(line_of(&t, "kube-controller-manager")), ["kube-controller-manager", "<none>", "0", "-"]);
        assert_eq!(cells(line_of(&t, "hollow-0")), ["hollow-0", "True", "3", "-", "-"]);
        assert_eq!(cells(line_of(&t, "hollow-1")), ["hollow-1", "False", "0", "SchedulingDisabled", "node.kubernetes.io/not-ready:NoSchedule"]);
    }

    #[test]
    fn without_a_leader_lag_is_unknown() {
        let mut st = one_down();
        st.leader = None;
        st.servers.remove(0);
        st.leases = Err("reading Lease kube-scheduler: no answer within 5s".into());
        st.nodes = Err("no server's API is ready".into());
        let t = text(&st);
        assert!(t.starts_with("Leader: none\n"), "{t}");
        assert_eq!(cells(line_of(&t, "keelson-2 "))[9], "?");
        assert!(t.contains("Leases unknown: reading Lease kube-scheduler"), "{t}");
        assert!(t.contains("Nodes unknown: no server's API is ready"), "{t}");
        let j = json(&st);
        assert!(j["members"][0]["lag"].is_null());
        assert!(j["leases"].is_null() && j["leases_error"].is_string());
        assert!(j["nodes"].is_null() && j["nodes_error"] == "no server's API is ready");
    }

    #[test]
    fn json_has_the_same_facts() {
        let j = json(&one_down());
        assert_eq!(j["leader"], "1");
        let m = j["members"].as_array().unwrap();
        assert_eq!(m.len(), 3);
        assert_eq!(m[0]["role"], "leader");
        assert_eq!(m[0]["api"], json!({"state": "ready", "healthy": true, "url": "https://127.0.0.1:6443", "reason": null}));
        assert_eq!(m[1]["lag"], json!({"applied_behind_commit": 3, "applied_behind_last": 5, "log_behind_last": 1}));
        assert_eq!(m[1]["applied_index"], 115);
        assert_eq!(m[2]["reachable"], false);
        assert_eq!(m[2]["error"], "no answer within 2s");
        assert_eq!(m[2]["api"]["state"], "down");
        assert_eq!(m[2]["api"]["healthy"], false);
        assert_eq!(j["leases"][0], json!({"name": "kube-scheduler", "holder": "keelson-1_ab", "transitions": 1, "renewTime": "2026-12-02T04:00:00Z"}));
        assert!(j["leases"][1]["holder"].is_null());
        assert_eq!(j["nodes"][1], json!({"name": "hollow-1", "ready": "False", "pods": 0, "unschedulable": true, "taints": ["node.kubernetes.io/not-ready:NoSchedule"]}));
        assert!(j["nodes_error"].is_null());
    }

    #[test]
    fn a_server_not_ready_or_unchecked_says_why() {
        let mut st = one_down();
        st.servers[1].api = ApiHealth::NotReady { url: "https://127.0.0.1:6444".into(), reason: "503 [-]etcd failed".into() };
        st.servers[0].api = ApiHealth::Unknown { reason: "the kubeconfig has no context keelson-1".into() };
        let t = text(&st);
        assert!(t.contains("  keelson-2: API not-ready: 503 [-]etcd failed\n"), "{t}");
        assert!(t.contains("  keelson-1: API unknown: the kubeconfig has no context keelson-1\n"), "{t}");
        let j = json(&st);
        assert_eq!(j["members"][0]["api"]["url"], Value::Null);
        assert_eq!(j["members"][1]["api"]["state"], "not-ready");
    }
}
