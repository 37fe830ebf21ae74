//! The self-heal workload's side of the nemesis: `Kill(Holder)` aimed at a component
//! Lease's holder, and the fault log the checker reads.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use keelson_chaos::{Fault, NemesisEvent, Target};
use keelson_jepsen::self_heal::{NodeFault, NodeFaultKind};
use kube::Api;
use tokio_util::sync::CancellationToken;

/// The components whose holders `lease-kill` hits, in turn.
pub const COMPONENT_LEASES: [&str; 2] = ["kube-controller-manager", "kube-scheduler"];

/// The server index holding each of [`COMPONENT_LEASES`], as last read.
#[derive(Clone, Default)]
pub struct Holders(Arc<Mutex<[Option<usize>; 2]>>);

impl Holders {
    fn get(&self, i: usize) -> Option<usize> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())[i]
    }
}

/// Reads the component Leases every 500 ms through whichever server answers, until
/// `stop`; `servers` are the server names in index order (holders are `<server>_<uuid>`).
pub async fn follow_holders(clients: Vec<kube::Client>, servers: Vec<String>, holders: Holders, stop: CancellationToken) {
    let mut at = 0usize;
    loop {
        for (i, name) in COMPONENT_LEASES.iter().enumerate() {
            let api: Api<Lease> = Api::namespaced(clients[at % clients.len()].clone(), "kube-system");
            match tokio::time::timeout(Duration::from_secs(2), api.get_opt(name)).await {
                Ok(Ok(Some(lease))) => {
                    let holder = lease.spec.and_then(|s| s.holder_identity).unwrap_or_default();
                    let server = holder.split_once('_').map(|(s, _)| s).and_then(|s| servers.iter().position(|n| n == s));
                    holders.0.lock().unwrap_or_else(|e| e.into_inner())[i] = server;
                }
                _ => at += 1,
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
}

/// A retarget for `keelson_chaos::run_nemesis_retargeted`: `Kill(Holder)`,
/// `Pause(Holder)` and `IsolateNode(Holder)` hit the holders of [`COMPONENT_LEASES`] in turn (left unresolved,
/// and so failing, while that Lease has no holder).
pub fn retarget(holders: Holders) -> impl Fn(Fault) -> Fault {
    let turn = AtomicUsize::new(0);
    move |f| {
        let holder = || holders.get(turn.fetch_add(1, Ordering::Relaxed) % COMPONENT_LEASES.len());
        match f {
            Fault::Kill(Target::Holder) => holder().map(|s| Fault::Kill(Target::Node(s))).unwrap_or(f),
            Fault::IsolateNode(Target::Holder) => holder().map(|s| Fault::IsolateNode(Target::Node(s))).unwrap_or(f),
            Fault::Pause(Target::Holder) => holder().map(|s| Fault::Pause(Target::Node(s))).unwrap_or(f),
            other => other,
        }
    }
}

/// The name right after `prefix` up to a space (`"power off node-2 (…)"` → `node-2`).
fn name_after<'a>(what: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = what.strip_prefix(prefix)?;
    Some(rest.split(' ').next().unwrap_or(rest))
}

/// The checker's faults from the nemesis events (times moved by `offset`, from the
/// harness's start to the run's epoch), each with the heal that ended it.
pub fn node_faults(events: &[NemesisEvent], offset: Duration) -> Vec<NodeFault> {
    let mut faults: Vec<NodeFault> = Vec::new();
    let end_open = |faults: &mut Vec<NodeFault>, at: u64, pick: &dyn Fn(&NodeFault) -> bool| {
        for f in faults.iter_mut().filter(|f| f.end_ms.is_none() && pick(f)) {
            f.end_ms = Some(at);
        }
    };
    for e in events.iter().filter(|e| e.ok) {
        let at = (offset + e.at).as_millis() as u64;
        let w = e.what.as_str();
        let start = |node: &str, kind| NodeFault { start_ms: at, end_ms: None, node: node.to_string(), kind, what: w.to_string() };
        if let Some(n) = name_after(w, "power off ") {
            faults.push(start(n, NodeFaultKind::PowerOff));
        } else if let Some(n) = name_after(w, "freeze ") {
            faults.push(start(n, NodeFaultKind::Freeze));
        } else if let Some(n) = w.strip_prefix("isolate ").and_then(|r| r.strip_suffix(" from the servers")) {
            faults.push(start(n, NodeFaultKind::CutFromServers));
        } else if let Some(n) = w.strip_prefix("isolate ").and_then(|r| r.strip_suffix(" from the other nodes")) {
            faults.push(start(n, NodeFaultKind::CutFromNodes));
        } else if let Some(n) = name_after(w, "kill ") {
            faults.push(start(n, NodeFaultKind::ServerKill));
        } else if let Some(n) = name_after(w, "pause ") {
            faults.push(start(n, NodeFaultKind::ServerPaused));
        } else if let Some(n) = w.strip_prefix("isolate ").and_then(|r| r.strip_suffix(" from every other server")) {
            faults.push(start(n, NodeFaultKind::ServerIsolated));
        } else if let Some(n) = name_after(w, "drain ") {
            faults.push(start(n, NodeFaultKind::Drain));
        } else if let Some(n) = name_after(w, "restart ").or_else(|| name_after(w, "resume ")).or_else(|| name_after(w, "uncordon ")) {
            end_open(&mut faults, at, &|f| f.node == n);
        } else if w.starts_with("heal network") {
            end_open(&mut faults, at, &|f| matches!(f.kind, NodeFaultKind::CutFromServers | NodeFaultKind::CutFromNodes));
        } else if w.starts_with("heal all") {
            end_open(&mut faults, at, &|_| true);
        }
    }
    faults
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(at_ms: u64, what: &str) -> NemesisEvent {
        NemesisEvent { at: Duration::from_millis(at_ms), wall: String::new(), what: what.into(), ok: true }
    }

    #[test]
    fn nemesis_events_become_faults_ended_by_their_heals() {
        let events = [
            ev(1_000, "power off node-2 (agent pid 7, 12 more processes killed)"),
            ev(5_000, "restart node-2 (pid 9)"),
            ev(6_000, "freeze node-1 (the agent and 4 more processes)"),
            ev(9_000, "resume node-1 (pid 3)"),
            ev(10_000, "isolate node-3 from the servers"),
            ev(12_000, "heal network (1 cut(s) removed)"),
            ev(13_000, "isolate node-1 from the other nodes"),
            ev(14_000, "kill n1 (pid 44)"),
            ev(15_000, "isolate n2 from every other server"),
            ev(16_000, "drain node-3 (2 pods evicted)"),
            ev(17_000, "pause n0 (pid 5)"),
            ev(18_000, "uncordon node-3"),
            ev(20_000, "heal all (…)"),
            NemesisEvent { ok: false, ..ev(21_000, "power off a random node FAILED: no eligible node") },
        ];
        let f = node_faults(&events, Duration::from_millis(100));
        let got: Vec<_> = f.iter().map(|f| (f.node.as_str(), f.kind, f.start_ms, f.end_ms)).collect();
        assert_eq!(
            got,
            vec![
                ("node-2", NodeFaultKind::PowerOff, 1_100, Some(5_100)),
                ("node-1", NodeFaultKind::Freeze, 6_100, Some(9_100)),
                ("node-3", NodeFaultKind::CutFromServers, 10_100, Some(12_100)),
                ("node-1", NodeFaultKind::CutFromNodes, 13_100, Some(20_100)),
                ("n1", NodeFaultKind::ServerKill, 14_100, Some(20_100)),
                ("n2", NodeFaultKind::ServerIsolated, 15_100, Some(20_100)),
                ("node-3", NodeFaultKind::Drain, 16_100, Some(18_100)),
                ("n0", NodeFaultKind::ServerPaused, 17_100, Some(20_100)),
            ]
        );
    }

    #[test]
    fn holder_kills_alternate_between_the_components() {
        let holders = Holders::default();
        *holders.0.lock().unwrap() = [Some(2), Some(0)];
        let r = retarget(holders.clone());
        assert_eq!(r(Fault::Kill(Target::Holder)), Fault::Kill(Target::Node(2)));
        assert_eq!(r(Fault::Kill(Target::Holder)), Fault::Kill(Target::Node(0)));
        assert_eq!(r(Fault::IsolateNode(Target::Holder)), Fault::IsolateNode(Target::Node(2)));
        assert_eq!(r(Fault::Pause(Target::Holder)), Fault::Pause(Target::Node(0)));
        assert_eq!(r(Fault::Kill(Target::Random)), Fault::Kill(Target::Random));
        *holders.0.lock().unwrap() = [None, None];
        assert_eq!(r(Fault::Kill(Target::Holder)), Fault::Kill(Target::Holder));
    }
}
