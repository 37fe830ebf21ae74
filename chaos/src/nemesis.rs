//! The nemesis: a seeded schedule of faults and heals.

use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use crate::{Fault, Harness, NemesisEvent, NemesisFamily, NodeTarget, Target};

/// How a planned fault is undone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HealStep {
    /// `Restart` the server the fault hit.
    Restart,
    /// `Resume` the server the fault hit.
    Resume,
    /// `NodeRestart` the node the fault hit.
    NodeRestart,
    /// `NodeResume` the node the fault hit.
    NodeResume,
    /// `NodeUncordon` the node the fault hit.
    NodeUncordon,
    HealNetwork,
    /// The fault heals itself (membership changes).
    Nothing,
}

/// One fault to inject and how to undo it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub fault: Fault,
    pub heal: HealStep,
}

/// Draws the next fault of `family` for a cluster of `servers`, using `rng`. Kinds that
/// `supported` rejects are skipped; `None` when the family has no supported kind.
///
/// Kill → `Kill(Random | Leader)` (50/50), Pause → `Pause(Random | Leader)`, Partition →
/// one of `IsolateNode(Leader)`, `SplitHalves`, `Bridge`, `OneWayLoss` (random distinct
/// pair), Membership → `RemoveAndReadd(Random)`, Latency → `Latency { 50..=200 ms }`,
/// NodeKill → `NodeKill(Random)`, NodePause → `NodePause(Random)`, NodePartition →
/// `NodeIsolate(Random)` or `NodeSplitFromNodes(Random)`, LeaseKill → `Kill(Holder)`,
/// LeasePartition → `IsolateNode(Holder)`, LeasePause → `Pause(Holder)`, NodeDrain →
/// `NodeDrain(Random)`.
pub fn plan_fault(
    family: NemesisFamily,
    servers: usize,
    rng: &mut impl Rng,
    supported: &dyn Fn(&Fault) -> bool,
) -> Option<Plan> {
    let leader_or_random =
        |rng: &mut dyn rand::RngCore| if rng.gen_bool(0.5) { Target::Random } else { Target::Leader };
    let plan = match family {
        NemesisFamily::Kill => Plan { fault: Fault::Kill(leader_or_random(rng)), heal: HealStep::Restart },
        NemesisFamily::Pause => Plan { fault: Fault::Pause(leader_or_random(rng)), heal: HealStep::Resume },
        NemesisFamily::Partition => {
            let mut kinds = vec![Fault::IsolateNode(Target::Leader), Fault::SplitHalves, Fault::Bridge];
            if servers >= 2 {
                let from = rng.gen_range(0..servers);
                let to = (from + rng.gen_range(1..servers)) % servers;
                kinds.push(Fault::OneWayLoss { from, to });
            }
            kinds.retain(|f| supported(f));
            Plan { fault: kinds.choose(rng)?.clone(), heal: HealStep::HealNetwork }
        }
        NemesisFamily::Membership => Plan { fault: Fault::RemoveAndReadd(Target::Random), heal: HealStep::Nothing },
        NemesisFamily::Latency => {
            Plan { fault: Fault::Latency { millis: rng.gen_range(50..=200) }, heal: HealStep::HealNetwork }
        }
        NemesisFamily::NodeKill => Plan { fault: Fault::NodeKill(NodeTarget::Random), heal: HealStep::NodeRestart },
        NemesisFamily::NodePause => Plan { fault: Fault::NodePause(NodeTarget::Random), heal: HealStep::NodeResume },
        NemesisFamily::NodePartition => {
            let mut kinds = vec![Fault::NodeIsolate(NodeTarget::Random), Fault::NodeSplitFromNodes(NodeTarget::Random)];
            kinds.retain(|f| supported(f));
            Plan { fault: kinds.choose(rng)?.clone(), heal: HealStep::HealNetwork }
        }
        NemesisFamily::LeaseKill => Plan { fault: Fault::Kill(Target::Holder), heal: HealStep::Restart },
        NemesisFamily::LeasePartition => Plan { fault: Fault::IsolateNode(Target::Holder), heal: HealStep::HealNetwork },
        NemesisFamily::NodeDrain => Plan { fault: Fault::NodeDrain(NodeTarget::Random), heal: HealStep::NodeUncordon },
        NemesisFamily::LeasePause => Plan { fault: Fault::Pause(Target::Holder), heal: HealStep::Resume },
    };
    supported(&plan.fault).then_some(plan)
}

/// Whether `family` has any kind `supported` accepts (for a cluster of `servers`).
pub(crate) fn family_usable(family: NemesisFamily, servers: usize, supported: &dyn Fn(&Fault) -> bool) -> bool {
    let kinds = match family {
        NemesisFamily::Kill => vec![Fault::Kill(Target::Random)],
        NemesisFamily::Pause => vec![Fault::Pause(Target::Random)],
        NemesisFamily::Partition => vec![
            Fault::IsolateNode(Target::Leader),
            Fault::SplitHalves,
            Fault::Bridge,
            Fault::OneWayLoss { from: 0, to: 1.min(servers.saturating_sub(1)) },
        ],
        NemesisFamily::Membership => vec![Fault::RemoveAndReadd(Target::Random)],
        NemesisFamily::Latency => vec![Fault::Latency { millis: 100 }],
        NemesisFamily::NodeKill => vec![Fault::NodeKill(NodeTarget::Random)],
        NemesisFamily::NodePause => vec![Fault::NodePause(NodeTarget::Random)],
        NemesisFamily::NodePartition => {
            vec![Fault::NodeIsolate(NodeTarget::Random), Fault::NodeSplitFromNodes(NodeTarget::Random)]
        }
        NemesisFamily::LeaseKill => vec![Fault::Kill(Target::Holder)],
        NemesisFamily::LeasePartition => vec![Fault::IsolateNode(Target::Holder)],
        NemesisFamily::NodeDrain => vec![Fault::NodeDrain(NodeTarget::Random)],
        NemesisFamily::LeasePause => vec![Fault::Pause(Target::Holder)],
    };
    kinds.iter().any(supported)
}

/// Sleeps `d`; true if `stop` was cancelled meanwhile.
async fn sleep_or_stop(d: Duration, stop: &CancellationToken) -> bool {
    tokio::select! {
        _ = stop.cancelled() => true,
        _ = tokio::time::sleep(d) => false,
    }
}

/// A schedule: every `interval`, alternately injects a fault drawn (seeded by `seed`)
/// from `families` and heals it, until `stop` is cancelled (cancel it after your time
/// limit). A fault still in place when `stop` fires is healed before returning. Returns
/// the events it caused, failures included (`ok: false`). The harness is locked only
/// while a fault or heal is applied. Families without any kind the harness supports
/// (e.g. Partition in Loopback mode, Latency without netem) are reported loudly on stderr
/// once and never drawn; with none left, nothing is injected. The schedule is a function
/// of `seed`, the usable families and the cluster size (Random targets use the harness's
/// own seeded RNG).
pub async fn run_nemesis(
    harness: Arc<Mutex<Harness>>,
    families: Vec<NemesisFamily>,
    interval: Duration,
    seed: u64,
    stop: CancellationToken,
) -> Vec<NemesisEvent> {
    run_nemesis_retargeted(harness, families, interval, seed, stop, |f| f).await
}

/// [`run_nemesis`], with each planned fault passed through `retarget` before it is
/// applied (a workload may aim "leader" faults at what it considers the leader, e.g. a
/// lease holder's server); the seeded schedule is the same.
pub async fn run_nemesis_retargeted(
    harness: Arc<Mutex<Harness>>,
    families: Vec<NemesisFamily>,
    interval: Duration,
    seed: u64,
    stop: CancellationToken,
    retarget: impl Fn(Fault) -> Fault,
) -> Vec<NemesisEvent> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut events = Vec::new();
    let usable = {
        let h = harness.lock().await;
        let usable: Vec<NemesisFamily> =
            families.iter().copied().filter(|f| family_usable(*f, h.cluster().server_count(), &|x| h.supports(x))).collect();
        for f in families.iter().filter(|f| !usable.contains(f)) {
            eprintln!("[keelson-chaos] WARNING: nemesis family {f:?} has no fault this harness supports ({:?} mode): it is SKIPPED", h.cluster().isolation());
        }
        if usable.is_empty() {
            eprintln!("[keelson-chaos] WARNING: no usable nemesis family: the nemesis injects NOTHING");
        }
        usable
    };
    loop {
        if sleep_or_stop(interval, &stop).await {
            break;
        }
        let Some(family) = usable.choose(&mut rng).copied() else {
            stop.cancelled().await;
            break;
        };
        let plan = {
            let h = harness.lock().await;
            plan_fault(family, h.cluster().server_count(), &mut rng, &|f| h.supports(f))
        };
        let Some(plan) = plan else {
            eprintln!(
                "[keelson-chaos] WARNING: nemesis family {family:?}: no supported fault, nothing injected this round"
            );
            continue;
        };
        let (ok, target) = {
            let mut h = harness.lock().await;
            match h.apply_tracked(retarget(plan.fault.clone())).await {
                Ok((ev, t)) => {
                    events.push(ev);
                    (true, t)
                }
                Err(_) => {
                    events.extend(h.events().last().cloned());
                    (false, None)
                }
            }
        };
        let heal = match plan.heal {
            HealStep::Restart if ok => target.map(Fault::Restart),
            HealStep::Resume if ok => target.map(Fault::Resume),
            HealStep::NodeRestart if ok => target.map(Fault::NodeRestart),
            HealStep::NodeResume if ok => target.map(Fault::NodeResume),
            HealStep::NodeUncordon if ok => target.map(Fault::NodeUncordon),
            // A partition that failed half-way may still have cut something.
            HealStep::HealNetwork => Some(Fault::HealNetwork),
            _ => None,
        };
        let Some(heal) = heal else { continue };
        let stopped = sleep_or_stop(interval, &stop).await;
        {
            let mut h = harness.lock().await;
            let _ = h.apply(heal).await;
            events.extend(h.events().last().cloned());
        }
        if stopped {
            break;
        }
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(_: &Fault) -> bool {
        true
    }

    fn draw(family: NemesisFamily, seed: u64, k: usize, supported: &dyn Fn(&Fault) -> bool) -> Vec<Option<Plan>> {
        let mut rng = StdRng::seed_from_u64(seed);
        (0..k).map(|_| plan_fault(family, 5, &mut rng, supported)).collect()
    }

    #[test]
    fn same_seed_same_schedule() {
        for fam in [NemesisFamily::Kill, NemesisFamily::Pause, NemesisFamily::Partition, NemesisFamily::Latency] {
            assert_eq!(draw(fam, 42, 50, &all), draw(fam, 42, 50, &all));
        }
        assert_ne!(draw(NemesisFamily::Partition, 1, 50, &all), draw(NemesisFamily::Partition, 2, 50, &all));
    }

    #[test]
    fn kill_and_pause_target_leader_or_random_and_heal_the_same_node() {
        let kills = draw(NemesisFamily::Kill, 7, 100, &all);
        assert!(kills.contains(&Some(Plan { fault: Fault::Kill(Target::Leader), heal: HealStep::Restart })));
        assert!(kills.contains(&Some(Plan { fault: Fault::Kill(Target::Random), heal: HealStep::Restart })));
        assert!(kills.iter().all(|p| matches!(
            p,
            Some(Plan { fault: Fault::Kill(Target::Leader | Target::Random), heal: HealStep::Restart })
        )));
        let pauses = draw(NemesisFamily::Pause, 7, 100, &all);
        assert!(pauses.iter().all(|p| matches!(p, Some(Plan { fault: Fault::Pause(_), heal: HealStep::Resume }))));
    }

    #[test]
    fn partition_draws_every_supported_kind() {
        let plans = draw(NemesisFamily::Partition, 3, 200, &all);
        let kind = |p: &Plan| std::mem::discriminant(&p.fault);
        let kinds: std::collections::HashSet<_> = plans.iter().flatten().map(kind).collect();
        assert_eq!(kinds.len(), 4);
        for p in plans.iter().flatten() {
            assert_eq!(p.heal, HealStep::HealNetwork);
            if let Fault::OneWayLoss { from, to } = p.fault {
                assert!(from != to && from < 5 && to < 5);
            }
            if let Fault::IsolateNode(t) = p.fault {
                assert_eq!(t, Target::Leader);
            }
        }
        // Only one-way loss supported: only one-way loss drawn.
        let only = |f: &Fault| matches!(f, Fault::OneWayLoss { .. });
        assert!(draw(NemesisFamily::Partition, 3, 50, &only)
            .iter()
            .all(|p| matches!(p, Some(Plan { fault: Fault::OneWayLoss { .. }, .. }))));
    }

    #[test]
    fn unsupported_families_plan_nothing() {
        let loopback = |f: &Fault| {
            !matches!(
                f,
                Fault::IsolateNode(_)
                    | Fault::SplitHalves
                    | Fault::Bridge
                    | Fault::OneWayLoss { .. }
                    | Fault::Latency { .. }
            )
        };
        assert!(draw(NemesisFamily::Partition, 5, 20, &loopback).iter().all(Option::is_none));
        assert!(draw(NemesisFamily::Latency, 5, 20, &loopback).iter().all(Option::is_none));
        assert!(draw(NemesisFamily::Kill, 5, 20, &loopback).iter().all(Option::is_some));
        assert!(!family_usable(NemesisFamily::Partition, 5, &loopback));
        assert!(!family_usable(NemesisFamily::Latency, 5, &loopback));
        assert!(family_usable(NemesisFamily::Membership, 5, &loopback));
        assert!(family_usable(NemesisFamily::Partition, 5, &all));
    }

    #[test]
    fn latency_and_membership_plans() {
        for p in draw(NemesisFamily::Latency, 9, 100, &all) {
            let p = p.expect("supported");
            assert!(matches!(p.fault, Fault::Latency { millis } if (50..=200).contains(&millis)));
            assert_eq!(p.heal, HealStep::HealNetwork);
        }
        assert_eq!(
            draw(NemesisFamily::Membership, 9, 1, &all)[0],
            Some(Plan { fault: Fault::RemoveAndReadd(Target::Random), heal: HealStep::Nothing })
        );
    }

    #[test]
    fn node_families_hit_random_nodes_and_heal_the_same_node() {
        for p in draw(NemesisFamily::NodeKill, 4, 20, &all) {
            assert_eq!(p, Some(Plan { fault: Fault::NodeKill(NodeTarget::Random), heal: HealStep::NodeRestart }));
        }
        for p in draw(NemesisFamily::NodePause, 4, 20, &all) {
            assert_eq!(p, Some(Plan { fault: Fault::NodePause(NodeTarget::Random), heal: HealStep::NodeResume }));
        }
        let parts = draw(NemesisFamily::NodePartition, 4, 100, &all);
        assert!(parts.iter().flatten().all(|p| p.heal == HealStep::HealNetwork));
        assert!(parts.iter().flatten().any(|p| p.fault == Fault::NodeIsolate(NodeTarget::Random)));
        assert!(parts.iter().flatten().any(|p| p.fault == Fault::NodeSplitFromNodes(NodeTarget::Random)));
        // One node: it can only be cut from the servers.
        let one_node = |f: &Fault| !matches!(f, Fault::NodeSplitFromNodes(_));
        assert!(draw(NemesisFamily::NodePartition, 4, 20, &one_node)
            .iter()
            .all(|p| p.as_ref().is_some_and(|p| p.fault == Fault::NodeIsolate(NodeTarget::Random))));
        assert_eq!(
            draw(NemesisFamily::LeaseKill, 4, 1, &all)[0],
            Some(Plan { fault: Fault::Kill(Target::Holder), heal: HealStep::Restart })
        );
        assert_eq!(
            draw(NemesisFamily::LeasePartition, 4, 1, &all)[0],
            Some(Plan { fault: Fault::IsolateNode(Target::Holder), heal: HealStep::HealNetwork })
        );
        assert_eq!(
            draw(NemesisFamily::LeasePause, 4, 1, &all)[0],
            Some(Plan { fault: Fault::Pause(Target::Holder), heal: HealStep::Resume })
        );
        assert_eq!(
            draw(NemesisFamily::NodeDrain, 4, 1, &all)[0],
            Some(Plan { fault: Fault::NodeDrain(NodeTarget::Random), heal: HealStep::NodeUncordon })
        );
        let no_nodes = |f: &Fault| {
            !matches!(f, Fault::NodeKill(_) | Fault::NodePause(_) | Fault::NodeIsolate(_) | Fault::NodeSplitFromNodes(_))
        };
        assert!(!family_usable(NemesisFamily::NodeKill, 3, &no_nodes));
        assert!(!family_usable(NemesisFamily::NodePartition, 3, &no_nodes));
    }
}
