//! Hand-made lease histories for the lease checker: valid ones, and ones that must be
//! judged invalid.

use keelson_jepsen::lease::{
    check_lease, FailoverStats, Fault, FaultKind, LeaseError, LeaseHistory, LeaseViolation, LeaseWrite, Recovery, RecoveryBound,
    StoredWrite, TermStart, WriteOutcome,
};

const BOUND: RecoveryBound = RecoveryBound { lease_duration_ms: 3000, retry_period_ms: 500, slack_ms: 2000 };

/// A history under construction: writes, what is stored, faults.
struct H {
    h: LeaseHistory,
    seq: Vec<u64>,
}

impl H {
    fn new() -> Self {
        H { h: LeaseHistory { writes: vec![], stored: vec![], faults: vec![], terms: vec![], bound: BOUND, end_ms: 60_000 }, seq: vec![0; 5] }
    }

    fn next_seq(&mut self, c: usize) -> u64 {
        self.seq[c] += 1;
        self.seq[c]
    }

    /// A write by `c` in term `token`, sent at `at` ms, done 20 ms later; returns its seq.
    fn write(&mut self, c: usize, token: i64, at: u64, outcome: WriteOutcome) -> u64 {
        let seq = self.next_seq(c);
        let error = (!matches!(outcome, WriteOutcome::Ok { .. })).then(|| "some error".to_string());
        self.h.writes.push(LeaseWrite { contender: c, token, seq, outcome, invoke_ms: at, complete_ms: at + 20, error });
        seq
    }

    /// An acknowledged write at `revision`, stored there.
    fn ok(&mut self, c: usize, token: i64, at: u64, revision: u64) -> &mut Self {
        let seq = self.write(c, token, at, WriteOutcome::Ok { revision });
        self.store(c, token, seq, revision)
    }

    /// `n` acknowledged writes of one term, 100 ms and one revision apart.
    fn term(&mut self, c: usize, token: i64, n: u64, from_ms: u64, from_rev: u64) -> &mut Self {
        for i in 0..n {
            self.ok(c, token, from_ms + 100 * i, from_rev + i);
        }
        self
    }

    fn store(&mut self, c: usize, token: i64, seq: u64, revision: u64) -> &mut Self {
        self.h.stored.push(StoredWrite { contender: c, token, seq, revision });
        self
    }

    fn fault(&mut self, at_ms: u64, kind: FaultKind, hit: &[usize], what: &str) -> &mut Self {
        self.h.faults.push(Fault { at_ms, kind, hit: hit.to_vec(), what: what.into() });
        self
    }

    fn check(&self) -> keelson_jepsen::LeaseReport {
        check_lease(&self.h).expect("well-formed")
    }
}

fn kinds(r: &keelson_jepsen::LeaseReport) -> Vec<&'static str> {
    r.violations
        .iter()
        .map(|v| match v {
            LeaseViolation::TokenWentBack { .. } => "went-back",
            LeaseViolation::Interleaved { .. } => "interleaved",
            LeaseViolation::AfterHandover { .. } => "after-handover",
            LeaseViolation::BeforeTerm { .. } => "before-term",
            LeaseViolation::AcceptedAfterFenced { .. } => "after-fenced",
            LeaseViolation::AckedMissing { .. } => "acked-missing",
            LeaseViolation::AckedRevisionDiffers { .. } => "acked-revision",
            LeaseViolation::TokenDiffers { .. } => "token-differs",
            LeaseViolation::FencedStored { .. } => "fenced-stored",
            LeaseViolation::FailedStored { .. } => "failed-stored",
            LeaseViolation::Phantom { .. } => "phantom",
            LeaseViolation::SharedRevision { .. } => "shared-revision",
            LeaseViolation::NoRecovery { .. } => "no-recovery",
        })
        .collect()
}

/// c0 leads from revision 5, is killed at 2 s; c1 takes over at revision 40 and writes
/// from 5 s on. Refused and failed writes are not stored, unknown ones either way.
fn failover_history() -> H {
    let mut h = H::new();
    h.term(0, 5, 10, 1000, 6);
    // In flight when the server died: unknown, one stored, one not.
    let s = h.write(0, 5, 1950, WriteOutcome::Unknown);
    h.store(0, 5, s, 16);
    h.write(0, 5, 1980, WriteOutcome::Unknown);
    h.write(0, 5, 2100, WriteOutcome::Failed);
    h.fault(2000, FaultKind::Kill, &[0], "kill n0");
    h.fault(5000, FaultKind::Heal, &[0], "restart n0");
    h.term(1, 40, 10, 5000, 41);
    // The deposed holder, back, is refused.
    h.write(0, 5, 5600, WriteOutcome::Fenced);
    h
}

#[test]
fn a_clean_failover_is_valid_and_timed() {
    let h = failover_history();
    let r = h.check();
    assert!(r.is_valid(), "{r}");
    assert_eq!(r.counts.writes, 24);
    assert_eq!((r.counts.ok, r.counts.fenced, r.counts.failed, r.counts.unknown, r.counts.unknown_stored), (20, 1, 1, 2, 1));
    assert_eq!((r.counts.stored, r.counts.terms, r.counts.holders), (21, 2, 2));
    assert_eq!(r.recoveries.len(), 1);
    // The fault at 2000, c1's first write acknowledged at 5020.
    assert_eq!(r.recoveries[0].recovery, Recovery::Failover { after_ms: 3020, began_after_ms: None, token: 40, holder: 1 });
    assert_eq!((r.recoveries[0].holder, r.recoveries[0].token), (0, 5));
    let s = r.failover_stats();
    assert_eq!((s.p50_ms(), s.max_ms(), s.holder_hits, s.bound_ms), (Some(3020), Some(3020), 1, 5500));
    assert!(r.summary().starts_with("lease: valid"), "{}", r.summary());
}

#[test]
fn a_term_going_back_is_invalid() {
    let mut h = H::new();
    h.term(0, 5, 3, 1000, 6).term(1, 20, 3, 2000, 21);
    // A write of c0's old term stored after c1's.
    h.ok(0, 5, 2500, 30);
    let r = h.check();
    assert!(!r.is_valid());
    let k = kinds(&r);
    assert!(k.contains(&"went-back") && k.contains(&"after-handover"), "{r}");
    let text = r.to_string();
    assert!(text.contains("terms went back"), "{text}");
    assert!(text.contains("the lease changed hands at revision 20"), "{text}");
}

#[test]
fn alternating_holders_are_reported_as_interleaved() {
    let mut h = H::new();
    h.term(0, 5, 2, 1000, 6).term(1, 8, 2, 1300, 9).term(0, 5, 1, 1600, 11);
    let r = h.check();
    assert!(kinds(&r).contains(&"interleaved"), "{r}");
    let Some(LeaseViolation::Interleaved { token, before, other, between, resumed_at }) =
        r.violations.iter().find(|v| matches!(v, LeaseViolation::Interleaved { .. }))
    else {
        unreachable!()
    };
    assert_eq!((*token, *before, *other, *between, *resumed_at), (5, (6, 7), 8, (9, 10), 11));
    assert!(r.to_string().contains("two holders interleaved"), "{r}");
}

#[test]
fn a_stale_write_is_caught_even_before_the_new_holder_writes() {
    let mut h = H::new();
    h.term(0, 5, 3, 1000, 6);
    // c1's term began at revision 20; its only write failed. c0's write at 25 is stale.
    h.write(1, 20, 2000, WriteOutcome::Failed);
    h.ok(0, 5, 2100, 25);
    let r = h.check();
    assert_eq!(kinds(&r), vec!["after-handover"], "{r}");
}

#[test]
fn an_acknowledged_write_missing_or_elsewhere_is_invalid() {
    let mut h = H::new();
    h.term(0, 5, 3, 1000, 6);
    h.write(0, 5, 1400, WriteOutcome::Ok { revision: 9 });
    let r = h.check();
    assert_eq!(kinds(&r), vec!["acked-missing"], "{r}");
    assert!(r.to_string().contains("acknowledged write lost: c0#4"), "{r}");

    let mut h = H::new();
    h.term(0, 5, 2, 1000, 6);
    let seq = h.write(0, 5, 1400, WriteOutcome::Ok { revision: 8 });
    h.store(0, 5, seq, 9);
    assert_eq!(kinds(&h.check()), vec!["acked-revision"]);
}

#[test]
fn a_fenced_failed_or_never_sent_write_that_is_stored_is_invalid() {
    let mut h = H::new();
    h.term(0, 5, 2, 1000, 6);
    let seq = h.write(0, 5, 1300, WriteOutcome::Fenced);
    h.store(0, 5, seq, 8);
    let r = h.check();
    assert!(kinds(&r).contains(&"fenced-stored"), "{r}");
    assert!(r.to_string().contains("refused as fenced"), "{r}");

    let mut h = H::new();
    h.term(0, 5, 2, 1000, 6);
    let seq = h.write(0, 5, 1300, WriteOutcome::Failed);
    h.store(0, 5, seq, 8);
    assert_eq!(kinds(&h.check()), vec!["failed-stored"]);

    let mut h = H::new();
    h.term(0, 5, 2, 1000, 6).store(2, 5, 77, 8);
    assert_eq!(kinds(&h.check()), vec!["phantom"]);

    // Stored with another token than sent.
    let mut h = H::new();
    h.term(0, 5, 1, 1000, 6);
    let seq = h.write(0, 5, 1300, WriteOutcome::Unknown);
    h.store(0, 6, seq, 8);
    assert_eq!(kinds(&h.check()), vec!["token-differs"]);
}

#[test]
fn a_write_sent_after_its_term_was_fenced_must_not_be_stored() {
    let mut h = H::new();
    h.term(0, 5, 2, 1000, 6);
    h.write(0, 5, 1300, WriteOutcome::Fenced);
    let seq = h.write(0, 5, 1400, WriteOutcome::Unknown);
    h.store(0, 5, seq, 9);
    let r = h.check();
    assert_eq!(kinds(&r), vec!["after-fenced"], "{r}");
}

#[test]
fn writes_stored_before_their_term_or_at_one_revision_are_invalid() {
    let mut h = H::new();
    h.ok(0, 10, 1000, 10);
    assert_eq!(kinds(&h.check()), vec!["before-term"]);
    let mut h = H::new();
    h.ok(0, 5, 1000, 6);
    let seq = h.write(0, 5, 1100, WriteOutcome::Unknown);
    h.store(0, 5, seq, 6);
    assert!(kinds(&h.check()).contains(&"shared-revision"));
}

#[test]
fn no_write_within_the_bound_after_the_holder_was_hit_is_invalid() {
    // Nothing after the kill.
    let mut h = H::new();
    h.term(0, 5, 5, 1000, 6).fault(2000, FaultKind::Pause, &[0], "pause n0");
    let r = h.check();
    assert_eq!(kinds(&r), vec!["no-recovery"], "{r}");
    assert_eq!(r.failover_stats().unrecovered, 1);
    assert!(r.to_string().contains("no write was acknowledged after it"), "{r}");

    // A failover, but too late.
    let mut h = H::new();
    h.term(0, 5, 5, 1000, 6).fault(2000, FaultKind::Isolate, &[0], "isolate n0").term(2, 30, 3, 9000, 31);
    let r = h.check();
    assert_eq!(kinds(&r), vec!["no-recovery"], "{r}");
    assert_eq!(r.failover_stats().max_ms(), Some(7020));
    assert!(r.to_string().contains("only 7020 ms later"), "{r}");
}

#[test]
fn a_holder_that_goes_on_after_the_heal_survived() {
    let mut h = H::new();
    h.term(0, 5, 5, 1000, 6).fault(1450, FaultKind::Kill, &[0], "kill n0").fault(2500, FaultKind::Heal, &[0], "restart n0");
    // Sent before the fault, acknowledged after it: no evidence of recovery.
    h.ok(0, 5, 1440, 11);
    h.term(0, 5, 1, 4000, 12);
    let r = h.check();
    assert!(r.is_valid(), "{r}");
    assert_eq!(r.recoveries[0].recovery, Recovery::Survived { after_ms: 2570 });
    assert_eq!(r.failover_stats().survived, 1);
}

#[test]
fn faults_that_miss_the_holder_or_come_at_the_end_are_not_judged() {
    let mut h = H::new();
    h.term(0, 5, 5, 1000, 6)
        .fault(500, FaultKind::Kill, &[0], "before anyone wrote")
        .fault(1200, FaultKind::Kill, &[1], "kill n1")
        .fault(1300, FaultKind::Other, &[], "one-way loss")
        .fault(58_000, FaultKind::Kill, &[0], "kill n0");
    let r = h.check();
    assert!(r.is_valid(), "{r}");
    assert_eq!(r.other_faults, 3);
    assert_eq!(r.recoveries.len(), 1);
    assert_eq!(r.recoveries[0].recovery, Recovery::Inconclusive);
    assert_eq!(r.failover_stats().inconclusive, 1);
}

#[test]
fn a_term_that_began_before_the_fault_makes_its_contender_the_holder() {
    let mut h = H::new();
    h.term(0, 5, 5, 1000, 6);
    // c1 took over at revision 20 (1900 ms) but had not written when its server died.
    h.h.terms = vec![TermStart { contender: 0, token: 5, began_ms: 900 }, TermStart { contender: 1, token: 20, began_ms: 1900 }];
    h.fault(2000, FaultKind::Kill, &[1], "kill n1");
    h.h.terms.push(TermStart { contender: 2, token: 30, began_ms: 5500 });
    h.term(2, 30, 3, 5500, 31);
    let r = h.check();
    assert!(r.is_valid(), "{r}");
    assert_eq!((r.recoveries[0].holder, r.recoveries[0].token), (1, 20));
    assert_eq!(r.recoveries[0].recovery, Recovery::Failover { after_ms: 3520, began_after_ms: Some(3500), token: 30, holder: 2 });
    assert!(r.to_string().contains("its term began after 3500 ms"), "{r}");
    // Without the term starts, c0 looks like the holder and the kill of n1 missed it.
    h.h.terms.clear();
    assert_eq!(h.check().other_faults, 1);
}

#[test]
fn failover_figures_are_nearest_rank() {
    let s = FailoverStats { holder_hits: 4, failovers_ms: vec![3000, 3500, 4200, 5000], ..Default::default() };
    assert_eq!((s.p50_ms(), s.max_ms()), (Some(3500), Some(5000)));
    let s = FailoverStats { failovers_ms: vec![3000, 3500, 4200], ..Default::default() };
    assert_eq!(s.p50_ms(), Some(3500));
    assert_eq!(FailoverStats::default().p50_ms(), None);
    // Two failovers in one history.
    let mut h = failover_history();
    h.fault(7000, FaultKind::Partition, &[1, 2], "split majority [n0] | minority [n1, n2]");
    h.term(0, 80, 3, 11_000, 81);
    let s = h.check().failover_stats();
    assert_eq!(s.failovers_ms, vec![3020, 4020]);
    assert_eq!((s.p50_ms(), s.max_ms()), (Some(3020), Some(4020)));
}

#[test]
fn malformed_input_is_an_error_not_a_verdict() {
    let mut h = H::new();
    h.term(0, 5, 1, 1000, 6);
    let dup = h.h.writes[0].clone();
    h.h.writes.push(dup);
    assert_eq!(check_lease(&h.h), Err(LeaseError::DuplicateWrite { contender: 0, seq: 1 }));
    let mut h = H::new();
    h.term(0, 5, 1, 1000, 6);
    let s = h.h.stored[0];
    h.h.stored.push(s);
    assert_eq!(check_lease(&h.h), Err(LeaseError::DuplicateStored { contender: 0, seq: 1 }));
    let mut h = H::new();
    h.term(0, 5, 1, 1000, 6);
    h.h.writes[0].complete_ms = 10;
    assert!(matches!(check_lease(&h.h), Err(LeaseError::Time { .. })));
}

#[test]
fn histories_round_trip_through_json() {
    let h = failover_history();
    let text = serde_json::to_string(&h.h).expect("serialize");
    assert!(text.contains(r#""outcome":"ok","revision":6"#), "{text}");
    assert!(text.contains(r#""outcome":"fenced""#), "{text}");
    let back: LeaseHistory = serde_json::from_str(&text).expect("parse");
    assert_eq!(back, h.h);
}
