use serde_json::{json, Value};

use super::*;

fn t(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).unwrap()
}

fn iso(secs: i64) -> String {
    t(secs).to_string()
}

fn config() -> LifecycleConfig {
    LifecycleConfig { monitor_period: Duration::from_secs(1), grace_period: Duration::from_secs(40), startup_grace_period: Duration::from_secs(60) }
}

/// A Node whose conditions (type, status) beat at `heartbeat`, with `taints`.
fn node(conditions: &[(&str, &str)], heartbeat: i64, taints: Value) -> Node {
    let conditions: Vec<Value> = conditions
        .iter()
        .map(|(ty, st)| json!({"type": ty, "status": st, "reason": "Kubelet", "message": "m", "lastHeartbeatTime": iso(heartbeat), "lastTransitionTime": iso(heartbeat - 100)}))
        .collect();
    serde_json::from_value(json!({"metadata": {"name": "n1", "creationTimestamp": iso(-1000)}, "spec": {"taints": taints}, "status": {"conditions": conditions}})).unwrap()
}

fn healthy() -> Node {
    node(&[("Ready", "True"), ("MemoryPressure", "False"), ("DiskPressure", "False"), ("PIDPressure", "False")], 0, json!(null))
}

fn lease(renew: i64) -> Lease {
    serde_json::from_value(json!({"metadata": {"name": "n1", "namespace": "kube-node-lease"}, "spec": {"holderIdentity": "n1", "renewTime": format!("{}", t(renew).strftime("%Y-%m-%dT%H:%M:%S%.6fZ"))}})).unwrap()
}

fn pod(name: &str, node: &str, ready: &str) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": "default"}, "spec": {"nodeName": node, "containers": []},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": ready}]}}))
    .unwrap()
}

fn health(probe: i64) -> NodeHealth {
    NodeHealth { probe: t(probe), ready_heartbeat: Some(t(0)), ready_transition: Some(t(-100)), lease_renew: None }
}

fn statuses(conditions: &[NodeCondition]) -> Vec<(String, String, Option<String>)> {
    conditions.iter().map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone())).collect()
}

fn taint_keys(taints: &Option<Vec<Taint>>) -> Vec<(String, String, bool)> {
    taints.iter().flatten().map(|t| (t.key.clone(), t.effect.clone(), t.time_added.is_some())).collect()
}

/// (saved probe, saved Ready heartbeat, saved Lease renewal), the Lease renewal now, the probe wanted.
type ObserveCase = (Option<(i64, i64, Option<i64>)>, Option<i64>, i64);

/// (Ready, other conditions, taints before, unschedulable, taints after; `None`: unchanged).
type TaintCase<'a> = (&'a str, &'a [(&'a str, &'a str)], Value, bool, Option<Vec<(&'a str, &'a str)>>);

#[test]
fn the_first_look_and_every_observed_change_reset_the_probe_time() {
    let n = healthy();
    // (saved probe, saved heartbeat, saved lease renew, lease renew now) → probe
    let cases: [ObserveCase; 6] = [
        (None, None, 30),                 // first look: now
        (Some((5, 0, None)), None, 5),    // nothing new: the saved probe
        (Some((5, -10, None)), None, 30), // the Ready heartbeat moved
        (Some((5, 0, Some(1))), Some(2), 30), // the Lease was renewed
        (Some((5, 0, Some(2))), Some(2), 5),  // the same renewal again
        (Some((5, 0, Some(3))), Some(2), 5),  // an older renewTime is not a heartbeat
    ];
    for (i, (saved, renew, want)) in cases.into_iter().enumerate() {
        let saved = saved.map(|(probe, hb, lr)| NodeHealth { probe: t(probe), ready_heartbeat: Some(t(hb)), ready_transition: Some(t(-100)), lease_renew: lr.map(t) });
        let l = renew.map(lease);
        let h = observe(saved.as_ref(), &n, l.as_ref(), t(30));
        assert_eq!(h.probe, t(want), "case {i}");
    }
}

#[test]
fn within_the_grace_period_nothing_changes_and_the_deadline_is_known() {
    let a = reconcile(&healthy(), &health(10), &[&pod("p", "n1", "True")], t(30), &config());
    assert_eq!(a, Actions { recheck_in: Some(Duration::from_secs(20)), ..Default::default() });
    // Exactly at the deadline is still within it.
    let a = reconcile(&healthy(), &health(10), &[], t(50), &config());
    assert_eq!(a.conditions, None);
    assert_eq!(a.recheck_in, Some(Duration::ZERO));
}

#[test]
fn past_the_grace_period_the_kubelet_conditions_go_unknown_and_the_node_is_tainted_unreachable() {
    let pods = [pod("ready", "n1", "True"), pod("already", "n1", "False"), pod("elsewhere", "n2", "True")];
    let refs: Vec<&Pod> = pods.iter().collect();
    let a = reconcile(&healthy(), &health(10), &refs, t(51), &config());
    let conditions = a.conditions.clone().expect("conditions written");
    let unknown = |ty: &str| (ty.to_string(), "Unknown".to_string(), Some("NodeStatusUnknown".to_string()));
    assert_eq!(statuses(&conditions), [unknown("Ready"), unknown("MemoryPressure"), unknown("DiskPressure"), unknown("PIDPressure")]);
    let ready = conditions.iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(ready.message.as_deref(), Some("Kubelet stopped posting node status."));
    assert_eq!(ready.last_transition_time, Some(Time(t(51))));
    assert_eq!(ready.last_heartbeat_time, Some(Time(t(0))), "the heartbeat is the kubelet's last");
    assert_eq!(taint_keys(&a.taints), [(TAINT_UNREACHABLE.into(), "NoExecute".into(), true), (TAINT_UNREACHABLE.into(), "NoSchedule".into(), false)]);
    assert_eq!(a.taints.as_ref().unwrap()[0].time_added, Some(Time(t(51))));
    assert_eq!(a.status_change, Some("NodeNotReady"));
    assert_eq!(a.pods_not_ready, [PodKey { namespace: "default".into(), name: "ready".into() }]);
    assert_eq!(a.recheck_in, None);
}

#[test]
fn an_unknown_node_is_left_as_it_is_once_marked_but_ready_pods_on_it_are_still_marked() {
    let taints = json!([{"key": TAINT_UNREACHABLE, "effect": "NoExecute", "timeAdded": iso(51)}, {"key": TAINT_UNREACHABLE, "effect": "NoSchedule"}]);
    let n = node(&[("Ready", "Unknown"), ("MemoryPressure", "Unknown"), ("DiskPressure", "Unknown"), ("PIDPressure", "Unknown")], 0, taints);
    let p = pod("late", "n1", "True");
    let a = reconcile(&n, &health(10), &[&p], t(90), &config());
    assert_eq!((a.conditions, a.taints, a.status_change), (None, None, None));
    assert_eq!(a.pods_not_ready.len(), 1);
}

#[test]
fn taints_follow_the_ready_condition_and_leave_others_alone() {
    let other = json!({"key": "dedicated", "value": "gpu", "effect": "NoSchedule"});
    let unreachable = json!([{"key": TAINT_UNREACHABLE, "effect": "NoExecute", "timeAdded": iso(51)}, {"key": TAINT_UNREACHABLE, "effect": "NoSchedule"}, other]);
    // (Ready, other conditions, taints before, unschedulable) → taints after (None: unchanged)
    let cases: Vec<TaintCase<'_>> = vec![
        ("True", &[], unreachable.clone(), false, Some(vec![("dedicated", "NoSchedule")])),
        ("False", &[], unreachable.clone(), false, Some(vec![("dedicated", "NoSchedule"), (TAINT_NOT_READY, "NoExecute"), (TAINT_NOT_READY, "NoSchedule")])),
        ("Unknown", &[], unreachable.clone(), false, None),
        ("True", &[("MemoryPressure", "True"), ("DiskPressure", "False")], json!(null), false, Some(vec![(TAINT_MEMORY_PRESSURE, "NoSchedule")])),
        ("True", &[("PIDPressure", "True"), ("NetworkUnavailable", "True")], json!(null), true, Some(vec![(TAINT_PID_PRESSURE, "NoSchedule"), (TAINT_NETWORK_UNAVAILABLE, "NoSchedule"), (TAINT_UNSCHEDULABLE, "NoSchedule")])),
        ("True", &[], json!([other]), false, None),
    ];
    for (i, (ready, more, before, unschedulable, want)) in cases.into_iter().enumerate() {
        let mut conditions = vec![("Ready", ready)];
        conditions.extend_from_slice(more);
        let mut n = node(&conditions, 0, before);
        n.spec.as_mut().unwrap().unschedulable = Some(unschedulable);
        let a = reconcile(&n, &health(0), &[], t(1), &config());
        let got = a.taints.as_ref().map(|ts| ts.iter().map(|t| (t.key.clone(), t.effect.clone())).collect::<Vec<_>>());
        let want = want.map(|w| w.into_iter().map(|(k, e)| (k.to_string(), e.to_string())).collect::<Vec<_>>());
        assert_eq!(got, want, "case {i}");
    }
}

#[test]
fn the_taint_time_of_a_kept_taint_is_not_moved() {
    let taints = json!([{"key": TAINT_NOT_READY, "effect": "NoExecute", "timeAdded": iso(5)}]);
    let n = node(&[("Ready", "False")], 0, taints);
    let a = reconcile(&n, &health(0), &[], t(20), &config());
    let ts = a.taints.expect("the NoSchedule taint is added");
    assert_eq!(ts[0].time_added, Some(Time(t(5))));
    assert_eq!((ts[1].key.as_str(), ts[1].effect.as_str()), (TAINT_NOT_READY, "NoSchedule"));
    assert_eq!(a.pods_not_ready, Vec::<PodKey>::new(), "a kubelet that reports NotReady marks its own pods");
    assert_eq!(a.status_change, None, "the kubelet made that change, not the controller");
}

#[test]
fn a_node_that_never_posted_ready_gets_the_startup_grace_period_and_the_never_updated_wording() {
    let n: Node = serde_json::from_value(json!({"metadata": {"name": "n1", "creationTimestamp": iso(-5)}})).unwrap();
    let h = NodeHealth { probe: t(0), ready_heartbeat: None, ready_transition: None, lease_renew: None };
    assert_eq!(reconcile(&n, &h, &[], t(59), &config()).conditions, None, "inside the startup grace period");
    let a = reconcile(&n, &h, &[], t(61), &config());
    let conditions = a.conditions.unwrap();
    assert_eq!(conditions.len(), 4);
    assert!(conditions.iter().all(|c| c.status == "Unknown" && c.reason.as_deref() == Some("NodeStatusNeverUpdated") && c.message.as_deref() == Some("Kubelet never posted node status.")));
    assert_eq!(conditions[0].last_heartbeat_time, Some(Time(t(-5))), "the creation time stands in for a heartbeat");
    assert_eq!(a.status_change, None, "it was never Ready");
    assert_eq!(taint_keys(&a.taints).len(), 2);
}
