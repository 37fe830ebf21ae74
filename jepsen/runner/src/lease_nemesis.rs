//! The lease workload's nemesis and fault log.
//!
//! The schedule is `keelson_chaos::run_nemesis`'s (same seeded draws of families and
//! faults, same alternation of fault and heal), with one difference: a fault aimed at
//! the leader (`Kill(Leader)`, `Pause(Leader)`, `IsolateNode(Leader)`) hits the server
//! of the lease's holder, as Jepsen's targeted nemeses do, so failovers happen and can be
//! timed. Random targets stay random. Without a known holder the Raft leader is hit.
//!
//! [`fault_log`] turns the nemesis events into the checker's [`Fault`]s, with the
//! servers each one hit (from the event's description).

use std::sync::Arc;
use std::time::Duration;

use keelson_chaos::{Fault as ChaosFault, Harness, NemesisEvent, NemesisFamily, Target};
use keelson_jepsen::lease::{Fault, FaultKind};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use crate::lease::HolderCell;

fn retarget(fault: ChaosFault, holder: Option<usize>) -> ChaosFault {
    let Some(i) = holder else { return fault };
    match fault {
        ChaosFault::Kill(Target::Leader) => ChaosFault::Kill(Target::Node(i)),
        ChaosFault::Pause(Target::Leader) => ChaosFault::Pause(Target::Node(i)),
        ChaosFault::IsolateNode(Target::Leader) => ChaosFault::IsolateNode(Target::Node(i)),
        other => other,
    }
}

/// `keelson_chaos::run_nemesis`, with leader targets meaning the lease holder's server.
pub async fn run_targeted_nemesis(
    harness: Arc<Mutex<Harness>>,
    families: Vec<NemesisFamily>,
    interval: Duration,
    seed: u64,
    stop: CancellationToken,
    holder: HolderCell,
) -> Vec<NemesisEvent> {
    keelson_chaos::run_nemesis_retargeted(harness, families, interval, seed, stop, move |f| retarget(f, holder.get())).await
}

/// The server named right after `prefix` (`"kill n2 (pid 7)"`, `"kill "` → 2).
fn node_after(what: &str, prefix: &str) -> Option<usize> {
    let rest = what.strip_prefix(prefix)?.strip_prefix('n')?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Servers of a list like `[n0, n2]`.
fn node_list(s: &str) -> Vec<usize> {
    let inner = s.trim().trim_start_matches('[');
    let inner = &inner[..inner.find(']').unwrap_or(inner.len())];
    inner.split(',').filter_map(|n| n.trim().strip_prefix('n')?.parse().ok()).collect()
}

/// One nemesis event as the checker's fault (`None` for failed ones); times are moved
/// by `offset` (from the harness's start to the run's epoch).
pub fn fault_of(e: &NemesisEvent, offset: Duration) -> Option<Fault> {
    if !e.ok {
        return None;
    }
    let at_ms = (offset + e.at).as_millis() as u64;
    let w = e.what.as_str();
    let one = |kind, prefix| node_after(w, prefix).map(|i| (kind, vec![i]));
    let (kind, hit) = if w.starts_with("heal") {
        (FaultKind::Heal, Vec::new())
    } else if let Some(k) = one(FaultKind::Heal, "restart ").or_else(|| one(FaultKind::Heal, "resume ")) {
        k
    } else if let Some(k) = one(FaultKind::Kill, "kill ")
        .or_else(|| one(FaultKind::Pause, "pause "))
        .or_else(|| one(FaultKind::Isolate, "isolate "))
        .or_else(|| one(FaultKind::Remove, "remove and re-add "))
    {
        k
    } else if let Some(minority) = w.strip_prefix("split ").and_then(|r| r.split_once("minority ")).map(|(_, m)| m) {
        (FaultKind::Partition, node_list(minority))
    } else {
        (FaultKind::Other, Vec::new())
    };
    Some(Fault { at_ms, kind, hit, what: e.what.clone() })
}

/// The checker's fault log.
pub fn fault_log(events: &[NemesisEvent], offset: Duration) -> Vec<Fault> {
    events.iter().filter_map(|e| fault_of(e, offset)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(what: &str) -> NemesisEvent {
        NemesisEvent { at: Duration::from_millis(1500), wall: String::new(), what: what.into(), ok: true }
    }

    fn kind_hit(what: &str) -> (FaultKind, Vec<usize>) {
        let f = fault_of(&ev(what), Duration::from_millis(10)).expect("ok event");
        assert_eq!(f.at_ms, 1510);
        (f.kind, f.hit)
    }

    #[test]
    fn nemesis_descriptions_name_the_servers_hit() {
        assert_eq!(kind_hit("kill n1 (pid 4242)"), (FaultKind::Kill, vec![1]));
        assert_eq!(kind_hit("pause n12 (pid 7)"), (FaultKind::Pause, vec![12]));
        assert_eq!(kind_hit("isolate n0 from every other server"), (FaultKind::Isolate, vec![0]));
        assert_eq!(kind_hit("split majority [n0, n2] | minority [n1]"), (FaultKind::Partition, vec![1]));
        assert_eq!(kind_hit("split majority [n0, n1, n2] | minority [n3, n4]"), (FaultKind::Partition, vec![3, 4]));
        assert_eq!(kind_hit("remove and re-add n2 (member id 1 -> 2, voter again)"), (FaultKind::Remove, vec![2]));
        assert_eq!(kind_hit("restart n1 (pid 99)"), (FaultKind::Heal, vec![1]));
        assert_eq!(kind_hit("resume n1 (pid 99)"), (FaultKind::Heal, vec![1]));
        assert_eq!(kind_hit("heal network (2 cut(s) removed)").0, FaultKind::Heal);
        assert_eq!(kind_hit("one-way loss: packets n0 -> n1 dropped"), (FaultKind::Other, vec![]));
        assert_eq!(kind_hit("bridge [n0] <-> n1 <-> [n2] (halves cut from each other)"), (FaultKind::Other, vec![]));
        let failed = NemesisEvent { ok: false, ..ev("kill leader FAILED: no leader") };
        assert_eq!(fault_of(&failed, Duration::ZERO), None);
    }

    #[test]
    fn leader_targets_move_to_the_holder() {
        assert_eq!(retarget(ChaosFault::Kill(Target::Leader), Some(2)), ChaosFault::Kill(Target::Node(2)));
        assert_eq!(retarget(ChaosFault::Pause(Target::Leader), Some(0)), ChaosFault::Pause(Target::Node(0)));
        assert_eq!(retarget(ChaosFault::IsolateNode(Target::Leader), Some(1)), ChaosFault::IsolateNode(Target::Node(1)));
        assert_eq!(retarget(ChaosFault::Kill(Target::Random), Some(1)), ChaosFault::Kill(Target::Random));
        assert_eq!(retarget(ChaosFault::Kill(Target::Leader), None), ChaosFault::Kill(Target::Leader));
        assert_eq!(retarget(ChaosFault::SplitHalves, Some(1)), ChaosFault::SplitHalves);
    }
}
