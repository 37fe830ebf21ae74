//! The seats of one pool (read-only or mutating) shared by the priority levels, and by the
//! flows within each level. Pure bookkeeping: the caller passes the time and holds the lock.
//!
//! - Each level has seats kept for it: its nominal part of the pool
//!   (`size × shares / Σ shares`) less what it lends (`lendablePercent`), rounded down, so
//!   the kept seats of all levels fit in the pool. Above that a level borrows what the pool
//!   has left beyond the other levels' unused kept seats. So a level can always take its
//!   kept seats, whatever another level floods: the invariant
//!   `Σ max(in use, kept) ≤ size` holds after every take.
//! - Within a level, a flow may hold at most a fair share of what the level can hold now,
//!   split among the flows seen in the last [`FLOW_WINDOW`] (or still holding seats): one
//!   user cannot take its level's seats from the others. A lone flow may take all of them.
//!
//! A request that finds no seat is refused at once (the caller answers 429 with
//! Retry-After), as a priority level whose limit response is `Reject`: Keelson does not
//! queue, so a refused flow counts as seen and its retry a second later finds its share.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::priority::PriorityLevel;

/// How long a flow counts toward its level's fair shares after its last request.
pub const FLOW_WINDOW: Duration = Duration::from_secs(5);

/// How often a level forgets the flows gone quiet for [`FLOW_WINDOW`] (so a flow may count
/// up to this much longer; a take does not walk every flow).
const PRUNE_EVERY: Duration = Duration::from_secs(1);

const LEVELS: usize = PriorityLevel::LIMITED.len();

/// Why a seat was refused (the `reason` label of the rejections metric).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The pool has no seat left for the level.
    ConcurrencyLimit,
    /// The level has seats, but this flow holds its fair share of them.
    FairShare,
}

impl Refusal {
    pub fn label(self) -> &'static str {
        match self {
            Refusal::ConcurrencyLimit => "concurrency-limit",
            Refusal::FairShare => "fair-share",
        }
    }
}

#[derive(Debug)]
struct Flow {
    held: usize,
    seen: Instant,
}

/// The seats of one pool.
#[derive(Debug)]
pub struct SeatLedger {
    size: usize,
    kept: [usize; LEVELS],
    in_use: [usize; LEVELS],
    flows: [HashMap<String, Flow>; LEVELS],
    pruned: [Option<Instant>; LEVELS],
}

impl SeatLedger {
    pub fn new(size: usize) -> Self {
        let total: usize = PriorityLevel::LIMITED.iter().map(|l| l.nominal_shares()).sum();
        let kept = PriorityLevel::LIMITED.map(|l| size * l.nominal_shares() * (100 - l.lendable_percent()) / (100 * total));
        Self { size, kept, in_use: [0; LEVELS], flows: Default::default(), pruned: [None; LEVELS] }
    }

    /// The seats kept for `level`.
    pub fn kept(&self, level: PriorityLevel) -> usize {
        level.index().map_or(0, |i| self.kept[i])
    }

    /// Seats `level` holds now.
    pub fn in_use(&self, level: PriorityLevel) -> usize {
        level.index().map_or(0, |i| self.in_use[i])
    }

    /// Takes a seat of `level` for `flow` at `now`, or says why not. Every seat taken must be
    /// given back with [`SeatLedger::give_back`]. The exempt level takes none.
    pub fn take(&mut self, level: PriorityLevel, flow: &str, now: Instant) -> Result<(), Refusal> {
        let Some(l) = level.index() else { return Ok(()) };
        if self.pruned[l].is_none_or(|at| now.saturating_duration_since(at) >= PRUNE_EVERY) {
            self.flows[l].retain(|_, f| f.held > 0 || now.saturating_duration_since(f.seen) < FLOW_WINDOW);
            self.pruned[l] = Some(now);
        }
        let flows = &mut self.flows[l];
        let entry = match flows.get_mut(flow) {
            Some(entry) => entry,
            None => flows.entry(flow.to_string()).or_insert(Flow { held: 0, seen: now }),
        };
        entry.seen = now;
        let held = entry.held;
        let others: usize = (0..LEVELS).filter(|m| *m != l).map(|m| self.in_use[m].max(self.kept[m])).sum();
        let free = self.size.saturating_sub(others + self.in_use[l]);
        if free == 0 {
            return Err(Refusal::ConcurrencyLimit);
        }
        let could_hold = self.in_use[l] + free;
        let share = could_hold.div_ceil(self.flows[l].len()).max(1);
        if held >= share {
            return Err(Refusal::FairShare);
        }
        self.in_use[l] += 1;
        if let Some(f) = self.flows[l].get_mut(flow) {
            f.held += 1;
        }
        Ok(())
    }

    /// Gives back a seat taken by [`SeatLedger::take`].
    pub fn give_back(&mut self, level: PriorityLevel, flow: &str) {
        let Some(l) = level.index() else { return };
        self.in_use[l] = self.in_use[l].saturating_sub(1);
        if let Some(f) = self.flows[l].get_mut(flow) {
            f.held = f.held.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use PriorityLevel::*;

    fn fill(ledger: &mut SeatLedger, level: PriorityLevel, flow: &str, now: Instant) -> (usize, Refusal) {
        let mut n = 0;
        loop {
            match ledger.take(level, flow, now) {
                Ok(()) => n += 1,
                Err(why) => return (n, why),
            }
        }
    }

    #[test]
    fn kept_seats_follow_shares_less_what_each_level_lends_and_fit_the_pool() {
        let ledger = SeatLedger::new(200);
        let kept: Vec<usize> = PriorityLevel::LIMITED.iter().map(|l| ledger.kept(*l)).collect();
        // 200 × shares × (100 − lendable) / (100 × 245), rounded down.
        assert_eq!(kept, vec![16, 24, 8, 16, 8, 8, 4]);
        assert!(kept.iter().sum::<usize>() <= 200);
        for size in [0, 1, 7, 50, 400, 1000] {
            let l = SeatLedger::new(size);
            assert!(PriorityLevel::LIMITED.iter().map(|x| l.kept(*x)).sum::<usize>() <= size, "{size}");
        }
        assert_eq!(SeatLedger::new(1).kept(System), 0, "a one-seat pool keeps nothing: it is shared as it comes");
    }

    #[test]
    fn a_flooding_level_borrows_all_but_the_others_kept_seats_and_they_still_get_theirs() {
        let now = Instant::now();
        let mut ledger = SeatLedger::new(200);
        let (taken, why) = fill(&mut ledger, GlobalDefault, "flooder", now);
        assert_eq!((taken, why), (200 - (16 + 24 + 8 + 16 + 8 + 4), Refusal::ConcurrencyLimit));
        // Each other level still gets exactly what is kept for it, and no more.
        for level in [System, NodeHigh, LeaderElection, WorkloadHigh, WorkloadLow, CatchAll] {
            let (got, why) = fill(&mut ledger, level, "component", now);
            assert_eq!((got, why), (ledger.kept(level), Refusal::ConcurrencyLimit), "{level:?}");
        }
        // A seat given back by the flooder goes to whoever asks first.
        ledger.give_back(GlobalDefault, "flooder");
        assert_eq!(ledger.take(NodeHigh, "component", now), Ok(()));
        assert_eq!(ledger.take(GlobalDefault, "flooder", now), Err(Refusal::ConcurrencyLimit));
        assert_eq!(ledger.in_use(NodeHigh), 25);
    }

    #[test]
    fn flows_of_one_level_share_it_fairly_and_a_lone_flow_takes_it_all() {
        let t0 = Instant::now();
        let mut ledger = SeatLedger::new(200);
        // Alone, a flow may take everything its level can hold.
        let (alone, _) = fill(&mut ledger, GlobalDefault, "alice", t0);
        assert_eq!(alone, 124);
        for _ in 0..alone {
            ledger.give_back(GlobalDefault, "alice");
        }
        // With bob seen, alice stops at half; bob still gets his half.
        assert_eq!(ledger.take(GlobalDefault, "bob", t0), Ok(()));
        ledger.give_back(GlobalDefault, "bob");
        let (alice, why) = fill(&mut ledger, GlobalDefault, "alice", t0);
        assert_eq!((alice, why), (62, Refusal::FairShare));
        let (bob, _) = fill(&mut ledger, GlobalDefault, "bob", t0);
        assert_eq!(bob, 62);
        // A third flow seen: the others are over their new share and take nothing more as
        // they give seats back, until carol has hers.
        for _ in 0..20 {
            ledger.give_back(GlobalDefault, "alice");
        }
        assert_eq!(ledger.take(GlobalDefault, "carol", t0), Ok(()));
        assert_eq!(ledger.take(GlobalDefault, "alice", t0), Err(Refusal::FairShare));
        let (carol, _) = fill(&mut ledger, GlobalDefault, "carol", t0);
        assert_eq!(carol + 1, 20, "carol takes the seats alice gave back");
        // Once bob and carol have been quiet for the window and hold nothing, alice is alone.
        for _ in 0..62 {
            ledger.give_back(GlobalDefault, "bob");
        }
        for _ in 0..20 {
            ledger.give_back(GlobalDefault, "carol");
        }
        let later = t0 + FLOW_WINDOW;
        let (more, _) = fill(&mut ledger, GlobalDefault, "alice", later);
        assert_eq!(more + 42, 124);
    }

    #[test]
    fn exempt_takes_no_seat_and_an_empty_pool_refuses_everyone_else() {
        let now = Instant::now();
        let mut ledger = SeatLedger::new(0);
        assert_eq!(ledger.take(Exempt, "admin", now), Ok(()));
        assert_eq!(ledger.take(System, "node", now), Err(Refusal::ConcurrencyLimit));
        let mut one = SeatLedger::new(1);
        assert_eq!(one.take(GlobalDefault, "alice", now), Ok(()));
        assert_eq!(one.take(System, "node", now), Err(Refusal::ConcurrencyLimit), "one seat, taken");
        one.give_back(GlobalDefault, "alice");
        assert_eq!(one.take(System, "node", now), Ok(()));
    }

    proptest::proptest! {
        /// Whatever the order of takes and give-backs over levels, flows and time, every
        /// level can still take its kept seats: `Σ max(in use, kept) ≤ size`; and no flow
        /// of a level holds more than the level does.
        #[test]
        fn kept_seats_stay_takeable_under_any_traffic(
            size in 0usize..64,
            steps in proptest::collection::vec((0usize..LEVELS, 0usize..5, proptest::bool::ANY, 0u64..3000), 1..400),
        ) {
            let mut ledger = SeatLedger::new(size);
            let mut held: HashMap<(usize, usize), usize> = HashMap::new();
            let mut now = Instant::now();
            for (level, flow, take, advance_ms) in steps {
                now += Duration::from_millis(advance_ms);
                let (lvl, name) = (PriorityLevel::LIMITED[level], format!("flow-{flow}"));
                let count = held.entry((level, flow)).or_default();
                if take {
                    if ledger.take(lvl, &name, now).is_ok() {
                        *count += 1;
                    }
                } else if *count > 0 {
                    ledger.give_back(lvl, &name);
                    *count -= 1;
                }
                let claimed: usize = PriorityLevel::LIMITED.iter().map(|l| ledger.in_use(*l).max(ledger.kept(*l))).sum();
                proptest::prop_assert!(claimed <= size, "claimed {} of {}", claimed, size);
                for (i, l) in PriorityLevel::LIMITED.iter().enumerate() {
                    let by_flows: usize = held.iter().filter(|((m, _), _)| *m == i).map(|(_, n)| n).sum();
                    proptest::prop_assert_eq!(ledger.in_use(*l), by_flows);
                }
            }
        }
    }
}
