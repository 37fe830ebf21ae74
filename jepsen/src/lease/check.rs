//! The checks of [`crate::lease`].

use std::collections::{BTreeMap, HashMap};

use super::{
    FaultKind, FaultRecovery, LeaseCounts, LeaseError, LeaseHistory, LeaseReport, LeaseViolation, LeaseWrite, Recovery,
    StoredWrite, WriteOutcome,
};

/// Checks a lease history (see the [module docs](crate::lease)).
pub fn check_lease(h: &LeaseHistory) -> Result<LeaseReport, LeaseError> {
    let mut sent: HashMap<(usize, u64), &LeaseWrite> = HashMap::new();
    for w in &h.writes {
        if w.complete_ms < w.invoke_ms {
            return Err(LeaseError::Time { contender: w.contender, seq: w.seq });
        }
        if sent.insert((w.contender, w.seq), w).is_some() {
            return Err(LeaseError::DuplicateWrite { contender: w.contender, seq: w.seq });
        }
    }
    let mut stored: HashMap<(usize, u64), &StoredWrite> = HashMap::new();
    for s in &h.stored {
        if stored.insert((s.contender, s.seq), s).is_some() {
            return Err(LeaseError::DuplicateStored { contender: s.contender, seq: s.seq });
        }
    }
    let mut report = LeaseReport { bound_ms: h.bound.bound_ms(), ..Default::default() };
    report.counts = counts(h);
    let v = &mut report.violations;
    check_outcomes(h, &sent, &stored, v, &mut report.counts);
    let mut order: Vec<StoredWrite> = h.stored.clone();
    order.sort_by_key(|s| (s.revision, s.contender, s.seq));
    check_order(&order, v);
    check_handovers(h, &order, v);
    check_after_fenced(h, &sent, &order, v);
    check_recovery(h, &mut report);
    Ok(report)
}

fn counts(h: &LeaseHistory) -> LeaseCounts {
    let mut c = LeaseCounts { writes: h.writes.len(), stored: h.stored.len(), ..Default::default() };
    for w in &h.writes {
        match w.outcome {
            WriteOutcome::Ok { .. } => c.ok += 1,
            WriteOutcome::Fenced => c.fenced += 1,
            WriteOutcome::Failed => c.failed += 1,
            WriteOutcome::Unknown => c.unknown += 1,
        }
    }
    let tokens: std::collections::HashSet<i64> = h.stored.iter().map(|s| s.token).collect();
    let holders: std::collections::HashSet<usize> = h.stored.iter().map(|s| s.contender).collect();
    c.terms = tokens.len();
    c.holders = holders.len();
    c
}

/// Acknowledged writes are stored as acknowledged; refused ones are not; nothing else is.
fn check_outcomes(
    h: &LeaseHistory,
    sent: &HashMap<(usize, u64), &LeaseWrite>,
    stored: &HashMap<(usize, u64), &StoredWrite>,
    v: &mut Vec<LeaseViolation>,
    counts: &mut LeaseCounts,
) {
    for w in &h.writes {
        let WriteOutcome::Ok { revision } = w.outcome else { continue };
        match stored.get(&(w.contender, w.seq)) {
            None => v.push(LeaseViolation::AckedMissing { write: w.clone() }),
            Some(s) if s.revision != revision => v.push(LeaseViolation::AckedRevisionDiffers { write: w.clone(), stored: **s }),
            Some(_) => {}
        }
    }
    let mut by_revision: Vec<&StoredWrite> = h.stored.iter().collect();
    by_revision.sort_by_key(|s| (s.revision, s.contender, s.seq));
    for s in by_revision {
        let Some(w) = sent.get(&(s.contender, s.seq)) else {
            v.push(LeaseViolation::Phantom { stored: *s });
            continue;
        };
        if w.token != s.token {
            v.push(LeaseViolation::TokenDiffers { stored: *s, sent: w.token });
        }
        match w.outcome {
            WriteOutcome::Fenced => v.push(LeaseViolation::FencedStored { stored: *s }),
            WriteOutcome::Failed => v.push(LeaseViolation::FailedStored { stored: *s, error: w.error.clone() }),
            WriteOutcome::Unknown => counts.unknown_stored += 1,
            WriteOutcome::Ok { .. } => {}
        }
    }
}

/// A run of consecutive stored writes (in revision order) with one token.
struct Segment {
    token: i64,
    first: StoredWrite,
    last: StoredWrite,
}

/// Terms never go back, and never interleave; one create per revision; every write
/// after its term began.
fn check_order(order: &[StoredWrite], v: &mut Vec<LeaseViolation>) {
    let mut segments: Vec<Segment> = Vec::new();
    for (i, s) in order.iter().enumerate() {
        if i > 0 && order[i - 1].revision == s.revision {
            v.push(LeaseViolation::SharedRevision { a: order[i - 1], b: *s });
        }
        if s.revision as i128 <= s.token as i128 {
            v.push(LeaseViolation::BeforeTerm { write: *s });
        }
        match segments.last_mut() {
            Some(seg) if seg.token == s.token => seg.last = *s,
            _ => segments.push(Segment { token: s.token, first: *s, last: *s }),
        }
    }
    // Index of the last segment seen for each token.
    let mut last_of: HashMap<i64, usize> = HashMap::new();
    for (j, seg) in segments.iter().enumerate() {
        if j > 0 && seg.token < segments[j - 1].token {
            v.push(LeaseViolation::TokenWentBack { newer: segments[j - 1].last, older: seg.first });
        }
        if let Some(&i) = last_of.get(&seg.token) {
            let (earlier, next) = (&segments[i], &segments[i + 1]);
            v.push(LeaseViolation::Interleaved {
                token: seg.token,
                before: (earlier.first.revision, earlier.last.revision),
                other: next.token,
                between: (next.first.revision, segments[j - 1].last.revision),
                resumed_at: seg.first.revision,
            });
        }
        last_of.insert(seg.token, j);
    }
}

/// No write of token T is stored at revision r when a term began at a known token T'
/// with T < T' < r: the lease had changed hands.
fn check_handovers(h: &LeaseHistory, order: &[StoredWrite], v: &mut Vec<LeaseViolation>) {
    // Every token seen is the revision at which some term began (and who held it).
    let mut terms: BTreeMap<i64, usize> = BTreeMap::new();
    for (token, contender) in h.writes.iter().map(|w| (w.token, w.contender)).chain(h.stored.iter().map(|s| (s.token, s.contender))) {
        terms.entry(token).or_insert(contender);
    }
    for s in order {
        let Ok(revision) = i64::try_from(s.revision) else { continue };
        let lo = s.token.saturating_add(1);
        if lo >= revision {
            continue;
        }
        if let Some((&handover, &by)) = terms.range(lo..revision).next() {
            v.push(LeaseViolation::AfterHandover { write: *s, handover, by });
        }
    }
}

/// Once a write of a term came back fenced, no write of that term sent later is stored:
/// a fence that moved never comes back.
fn check_after_fenced(h: &LeaseHistory, sent: &HashMap<(usize, u64), &LeaseWrite>, order: &[StoredWrite], v: &mut Vec<LeaseViolation>) {
    // Per token, the earliest refusal: (when, seq).
    let mut refused: HashMap<i64, (u64, u64)> = HashMap::new();
    for w in h.writes.iter().filter(|w| w.outcome == WriteOutcome::Fenced) {
        let e = refused.entry(w.token).or_insert((w.complete_ms, w.seq));
        if w.complete_ms < e.0 {
            *e = (w.complete_ms, w.seq);
        }
    }
    for s in order {
        let Some(w) = sent.get(&(s.contender, s.seq)) else { continue };
        if let Some(&(at, seq)) = refused.get(&w.token) {
            if w.invoke_ms > at {
                v.push(LeaseViolation::AcceptedAfterFenced { write: *s, fenced_seq: seq, fenced_at_ms: at, invoked_ms: w.invoke_ms });
            }
        }
    }
}

/// For every fault that hit the holder: the first acknowledged write after it, and
/// whether it came within the bound.
fn check_recovery(h: &LeaseHistory, report: &mut LeaseReport) {
    let bound = h.bound.bound_ms();
    for fault in h.faults.iter().filter(|f| f.kind != FaultKind::Heal) {
        let f = fault.at_ms;
        // The holder: the newest term that had begun (or begun writing) when the fault began.
        let begun = h.terms.iter().filter(|t| t.began_ms <= f).map(|t| (t.token, t.contender));
        let holder = h.writes.iter().filter(|w| w.invoke_ms <= f).map(|w| (w.token, w.contender)).chain(begun).max_by_key(|(t, _)| *t);
        let Some((token, holder)) = holder.filter(|(_, c)| fault.hit.contains(c)) else {
            report.other_faults += 1;
            continue;
        };
        let acked = |w: &&LeaseWrite| matches!(w.outcome, WriteOutcome::Ok { .. });
        let newer = h.writes.iter().filter(acked).filter(|w| w.token > token).min_by_key(|w| w.complete_ms);
        let same = h.writes.iter().filter(acked).filter(|w| w.token == token && w.invoke_ms >= f).min_by_key(|w| w.complete_ms);
        let first = match (newer, same) {
            (Some(n), Some(s)) if s.complete_ms < n.complete_ms => Some((s, false)),
            (Some(n), _) => Some((n, true)),
            (None, Some(s)) => Some((s, false)),
            (None, None) => None,
        };
        let after = first.map(|(w, _)| w.complete_ms.saturating_sub(f));
        let judged = f + bound <= h.end_ms;
        let recovery = match first {
            Some((w, true)) => Recovery::Failover {
                after_ms: w.complete_ms.saturating_sub(f),
                began_after_ms: h.terms.iter().find(|t| t.token == w.token).map(|t| t.began_ms.saturating_sub(f)),
                token: w.token,
                holder: w.contender,
            },
            Some((w, false)) => Recovery::Survived { after_ms: w.complete_ms.saturating_sub(f) },
            None if judged => Recovery::None,
            None => Recovery::Inconclusive,
        };
        if judged && after.is_none_or(|a| a > bound) {
            report.violations.push(LeaseViolation::NoRecovery {
                at_ms: f,
                what: fault.what.clone(),
                holder,
                token,
                bound_ms: bound,
                first_after_ms: after,
            });
        }
        report.recoveries.push(FaultRecovery { at_ms: f, what: fault.what.clone(), holder, token, recovery });
    }
}
