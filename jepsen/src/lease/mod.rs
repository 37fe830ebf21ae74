//! Checker for the lease workload: contenders elected through a Lease append writes
//! fenced on their term's token (see `keelson_component::election`).
//!
//! # Input ([`LeaseHistory`])
//! * every write a contender attempted ([`LeaseWrite`]): contender, the fencing token of
//!   its term, a per-contender sequence number (a write's identity is (contender, seq)),
//!   its outcome ([`WriteOutcome`]: acknowledged with its store revision, refused as
//!   fenced, failed before anything was written, or unknown) and its invoke and
//!   completion times in milliseconds since the start of the run;
//! * the final state ([`StoredWrite`]): every write found stored after the run, with its
//!   revision;
//! * the fault log ([`Fault`]): when each fault began or was healed, and which
//!   contenders (= servers) it hit when that is known;
//! * optionally, when each term began ([`TermStart`], as its contender learned it);
//! * the recovery bound ([`RecoveryBound`]) and when the contenders stopped.
//!
//! # What is checked
//! A fencing token is the store revision at which its term began (the write that made
//! the contender the lease's holder); a fenced write is stored only if the lease has not
//! changed hands since. So:
//! * terms never go back: the stored writes, ordered by revision, have non-decreasing
//!   tokens ([`LeaseViolation::TokenWentBack`]); a token whose writes resume after
//!   another token's is reported as [`LeaseViolation::Interleaved`]; a write stored at
//!   revision r with token T while some term began at a known token T' with
//!   T < T' < r was accepted after the lease changed hands
//!   ([`LeaseViolation::AfterHandover`]); a write is stored after its term began
//!   ([`LeaseViolation::BeforeTerm`]); and once a write of a term was refused as fenced,
//!   no later write of that term is stored ([`LeaseViolation::AcceptedAfterFenced`]);
//! * outcomes: every acknowledged write is stored, at the revision it was acknowledged
//!   with, with the token it was sent with; nothing refused as fenced or failed is
//!   stored; nothing is stored that was never attempted. Unknown outcomes may or may
//!   not be stored;
//! * recovery: for every fault that hit the holder (the contender of the newest term
//!   that had begun, or begun writing, when the fault began), the first write acknowledged after
//!   the fault must come within [`RecoveryBound::bound_ms`]: from a newer term (a
//!   *failover*, timed from the fault to that write's acknowledgement) or from the same
//!   term invoked after the fault (the holder *survived*, e.g. the fault was healed
//!   before its lease ran out). A fault too close to the end of the run to tell is
//!   *inconclusive*.

mod check;

use std::fmt;

use serde::{Deserialize, Serialize};

pub use check::check_lease;

/// How a write ended, as the contender saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum WriteOutcome {
    /// Acknowledged: stored at `revision` (the object's resourceVersion).
    Ok {
        /// Store revision of the write.
        revision: u64,
    },
    /// Refused because the fence no longer held: definitely not stored.
    Fenced,
    /// Definitely not stored: never sent, or refused before anything was written.
    Failed,
    /// May or may not have been stored (timeout, broken connection, 5xx).
    Unknown,
}

/// One attempted write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseWrite {
    /// Who wrote (contender i runs against server i).
    pub contender: usize,
    /// Fencing token of the term the write was made in.
    pub token: i64,
    /// Per-contender sequence number; (contender, seq) names the write.
    pub seq: u64,
    /// How it ended.
    #[serde(flatten)]
    pub outcome: WriteOutcome,
    /// When it was sent, in ms since the start of the run.
    pub invoke_ms: u64,
    /// When its outcome was known, in ms since the start of the run.
    pub complete_ms: u64,
    /// The error, for outcomes other than `Ok`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One write found in the final state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StoredWrite {
    /// Who wrote it (from the stored content).
    pub contender: usize,
    /// The token stored with it.
    pub token: i64,
    /// Its sequence number.
    pub seq: u64,
    /// The store revision it was created at.
    pub revision: u64,
}

impl fmt::Display for StoredWrite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "write c{}#{} (token {}) stored at revision {}", self.contender, self.seq, self.token, self.revision)
    }
}

/// A term as its contender learned it: it became the holder with `token`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TermStart {
    /// The new holder.
    pub contender: usize,
    /// The term's fencing token.
    pub token: i64,
    /// When the contender learned it leads, ms since the start of the run.
    pub began_ms: u64,
}

/// What a fault did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// Servers killed.
    Kill,
    /// Servers paused (SIGSTOP).
    Pause,
    /// A server cut off from all others.
    Isolate,
    /// A split; `hit` is the minority side.
    Partition,
    /// A server removed from the cluster (and added back).
    Remove,
    /// Any other fault (one-way loss, latency, …): whom it hits is not known.
    Other,
    /// The end of a fault (restart, resume, network healed).
    Heal,
}

/// One entry of the fault log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fault {
    /// When it began, in ms since the start of the run.
    pub at_ms: u64,
    /// What it did.
    pub kind: FaultKind,
    /// The contenders (servers) it hit, when known.
    #[serde(default)]
    pub hit: Vec<usize>,
    /// The nemesis' own description.
    #[serde(default)]
    pub what: String,
}

/// How long a failover may take: the lease duration (how long candidates wait after
/// they last saw the lease change), plus a retry period (how often they look), plus a
/// slack for observation delay and the store's own recovery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryBound {
    /// The lease duration, ms.
    pub lease_duration_ms: u64,
    /// The retry period, ms.
    pub retry_period_ms: u64,
    /// Extra allowance, ms.
    pub slack_ms: u64,
}

impl RecoveryBound {
    /// lease duration + retry period + slack.
    pub fn bound_ms(&self) -> u64 {
        self.lease_duration_ms + self.retry_period_ms + self.slack_ms
    }
}

/// Everything the checker looks at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseHistory {
    /// Every attempted write.
    pub writes: Vec<LeaseWrite>,
    /// The final state.
    pub stored: Vec<StoredWrite>,
    /// The fault log, in time order.
    pub faults: Vec<Fault>,
    /// When terms began (may be empty: terms are then known from their writes).
    #[serde(default)]
    pub terms: Vec<TermStart>,
    /// The recovery bound.
    pub bound: RecoveryBound,
    /// When the contenders stopped, ms since the start of the run.
    pub end_ms: u64,
}

/// Malformed input (as opposed to a violation).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaseError {
    /// Two attempted writes share (contender, seq).
    #[error("write c{contender}#{seq} was recorded twice")]
    DuplicateWrite {
        /// Contender.
        contender: usize,
        /// Sequence number.
        seq: u64,
    },
    /// Two stored writes share (contender, seq).
    #[error("write c{contender}#{seq} appears twice in the final state")]
    DuplicateStored {
        /// Contender.
        contender: usize,
        /// Sequence number.
        seq: u64,
    },
    /// A write completed before it was invoked.
    #[error("write c{contender}#{seq} completed before it was invoked")]
    Time {
        /// Contender.
        contender: usize,
        /// Sequence number.
        seq: u64,
    },
}

/// One violation of the lease guarantees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseViolation {
    /// In revision order, a write of an older term follows one of a newer term.
    TokenWentBack {
        /// The newer term's write (lower revision).
        newer: StoredWrite,
        /// The older term's write stored after it.
        older: StoredWrite,
    },
    /// Two holders interleaved: `token`'s writes stop, `other`'s are stored, then
    /// `token`'s resume.
    Interleaved {
        /// The token whose writes resumed.
        token: i64,
        /// Revisions of its writes before the other holder's.
        before: (u64, u64),
        /// The other holder's token.
        other: i64,
        /// Revisions of the other holder's writes in between.
        between: (u64, u64),
        /// Revision at which `token`'s writes resumed.
        resumed_at: u64,
    },
    /// Stored after the lease changed hands at `handover` (a later term's token).
    AfterHandover {
        /// The stale write.
        write: StoredWrite,
        /// Token (revision) of the later term.
        handover: i64,
        /// Its holder.
        by: usize,
    },
    /// Stored at or before the revision its term began.
    BeforeTerm {
        /// The write.
        write: StoredWrite,
    },
    /// Stored although it was sent after a write of the same term came back fenced.
    AcceptedAfterFenced {
        /// The write.
        write: StoredWrite,
        /// Sequence number of the fenced write.
        fenced_seq: u64,
        /// When the refusal arrived, ms.
        fenced_at_ms: u64,
        /// When the stored write was sent, ms.
        invoked_ms: u64,
    },
    /// Acknowledged but absent from the final state.
    AckedMissing {
        /// The write.
        write: LeaseWrite,
    },
    /// Acknowledged at one revision, stored at another.
    AckedRevisionDiffers {
        /// The write as recorded.
        write: LeaseWrite,
        /// Where it is stored.
        stored: StoredWrite,
    },
    /// Stored with another token than it was sent with.
    TokenDiffers {
        /// What is stored.
        stored: StoredWrite,
        /// The token it was sent with.
        sent: i64,
    },
    /// Refused as fenced, yet stored.
    FencedStored {
        /// What is stored.
        stored: StoredWrite,
    },
    /// Failed before being written (or never sent), yet stored.
    FailedStored {
        /// What is stored.
        stored: StoredWrite,
        /// The recorded error.
        error: Option<String>,
    },
    /// Stored but never attempted.
    Phantom {
        /// What is stored.
        stored: StoredWrite,
    },
    /// Two writes stored at one revision (each create is its own transaction).
    SharedRevision {
        /// One.
        a: StoredWrite,
        /// The other.
        b: StoredWrite,
    },
    /// After a fault hit the holder, no write was acknowledged within the bound.
    NoRecovery {
        /// When the fault began, ms.
        at_ms: u64,
        /// The fault.
        what: String,
        /// The holder it hit.
        holder: usize,
        /// The holder's token.
        token: i64,
        /// The bound, ms.
        bound_ms: u64,
        /// How long after the fault the first write was acknowledged, if ever.
        first_after_ms: Option<u64>,
    },
}

impl fmt::Display for LeaseViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use LeaseViolation::*;
        match self {
            TokenWentBack { newer, older } => write!(
                f,
                "terms went back: {older} follows {newer}; a write of token {} was accepted after the holder of token {} had written",
                older.token, newer.token
            ),
            Interleaved { token, before, other, between, resumed_at } => write!(
                f,
                "two holders interleaved: token {token} wrote at revisions {}..={}, token {other} at {}..={}, then token {token} again at {resumed_at}",
                before.0, before.1, between.0, between.1
            ),
            AfterHandover { write, handover, by } => write!(
                f,
                "stale write accepted: {write}, but the lease changed hands at revision {handover} (c{by}'s term) after token {} was issued",
                write.token
            ),
            BeforeTerm { write } => write!(f, "{write}: not after revision {}, where its term began", write.token),
            AcceptedAfterFenced { write, fenced_seq, fenced_at_ms, invoked_ms } => write!(
                f,
                "{write}, though it was sent at {invoked_ms} ms, after write c{}#{fenced_seq} of the same term was refused as fenced at {fenced_at_ms} ms",
                write.contender
            ),
            AckedMissing { write } => write!(
                f,
                "acknowledged write lost: c{}#{} (token {}) was acknowledged at revision {} but is not stored",
                write.contender,
                write.seq,
                write.token,
                match write.outcome {
                    WriteOutcome::Ok { revision } => revision,
                    _ => 0,
                }
            ),
            AckedRevisionDiffers { write, stored } => write!(
                f,
                "c{}#{} was acknowledged at revision {} but is stored at revision {}",
                write.contender,
                write.seq,
                match write.outcome {
                    WriteOutcome::Ok { revision } => revision,
                    _ => 0,
                },
                stored.revision
            ),
            TokenDiffers { stored, sent } => write!(f, "{stored}, but it was sent with token {sent}"),
            FencedStored { stored } => write!(f, "{stored}, but it was refused as fenced"),
            FailedStored { stored, error } => {
                write!(f, "{stored}, but it failed before being written ({})", error.as_deref().unwrap_or("no error recorded"))
            }
            Phantom { stored } => write!(f, "{stored}, but no contender ever sent it"),
            SharedRevision { a, b } => write!(f, "{a} and {b}: two creates at one revision"),
            NoRecovery { at_ms, what, holder, token, bound_ms, first_after_ms } => write!(
                f,
                "no recovery: {what} at {at_ms} ms hit holder c{holder} (token {token}); {} (bound {bound_ms} ms)",
                match first_after_ms {
                    Some(ms) => format!("the first write after it was acknowledged only {ms} ms later"),
                    None => "no write was acknowledged after it".to_string(),
                }
            ),
        }
    }
}

/// How the lease recovered from a fault that hit its holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    /// A newer term's write was acknowledged `after_ms` after the fault.
    Failover {
        /// Failover time, ms.
        after_ms: u64,
        /// When that term began, ms after the fault (if term starts were recorded).
        began_after_ms: Option<u64>,
        /// The new term's token.
        token: i64,
        /// Its holder.
        holder: usize,
    },
    /// The holder went on writing in its term, `after_ms` after the fault.
    Survived {
        /// Time to its first acknowledged write sent after the fault, ms.
        after_ms: u64,
    },
    /// Nothing was acknowledged within the bound (a violation).
    None,
    /// The run ended before the bound had passed.
    Inconclusive,
}

/// One fault that hit the holder, and what followed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultRecovery {
    /// When the fault began, ms.
    pub at_ms: u64,
    /// The fault.
    pub what: String,
    /// The holder it hit.
    pub holder: usize,
    /// The holder's token.
    pub token: i64,
    /// What followed.
    pub recovery: Recovery,
}

/// Counts of a checked history.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeaseCounts {
    /// Attempted writes.
    pub writes: usize,
    /// Acknowledged.
    pub ok: usize,
    /// Refused as fenced.
    pub fenced: usize,
    /// Failed before being written.
    pub failed: usize,
    /// Unknown outcome.
    pub unknown: usize,
    /// Unknown outcome, found stored.
    pub unknown_stored: usize,
    /// Writes in the final state.
    pub stored: usize,
    /// Distinct tokens among them.
    pub terms: usize,
    /// Distinct contenders among them.
    pub holders: usize,
}

/// Failover figures over the faults that hit the holder.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FailoverStats {
    /// Faults that hit the holder.
    pub holder_hits: usize,
    /// Failover times, ms, ascending.
    pub failovers_ms: Vec<u64>,
    /// Faults the holder survived.
    pub survived: usize,
    /// Faults without recovery within the bound.
    pub unrecovered: usize,
    /// Faults too close to the end to tell.
    pub inconclusive: usize,
    /// The bound, ms.
    pub bound_ms: u64,
}

impl FailoverStats {
    /// Median failover time (nearest rank), ms.
    pub fn p50_ms(&self) -> Option<u64> {
        let n = self.failovers_ms.len();
        (n > 0).then(|| self.failovers_ms[n.div_ceil(2) - 1])
    }

    /// Longest failover time, ms.
    pub fn max_ms(&self) -> Option<u64> {
        self.failovers_ms.last().copied()
    }
}

impl fmt::Display for FailoverStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} fault(s) hit the holder: {} failover(s)", self.holder_hits, self.failovers_ms.len())?;
        if let (Some(p50), Some(max)) = (self.p50_ms(), self.max_ms()) {
            write!(f, " (p50 {p50} ms, max {max} ms)")?;
        }
        write!(f, ", {} survived", self.survived)?;
        if self.unrecovered > 0 {
            write!(f, ", {} NOT recovered", self.unrecovered)?;
        }
        if self.inconclusive > 0 {
            write!(f, ", {} inconclusive", self.inconclusive)?;
        }
        write!(f, "; bound {} ms", self.bound_ms)
    }
}

/// The verdict.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaseReport {
    /// Every violation found.
    pub violations: Vec<LeaseViolation>,
    /// Every fault that hit the holder, in time order.
    pub recoveries: Vec<FaultRecovery>,
    /// Faults that did not hit the holder (or whose targets are unknown).
    pub other_faults: usize,
    /// Counts.
    pub counts: LeaseCounts,
    /// The recovery bound, ms.
    pub bound_ms: u64,
}

impl LeaseReport {
    /// No violation.
    pub fn is_valid(&self) -> bool {
        self.violations.is_empty()
    }

    /// Failover figures.
    pub fn failover_stats(&self) -> FailoverStats {
        let mut s = FailoverStats { holder_hits: self.recoveries.len(), bound_ms: self.bound_ms, ..Default::default() };
        for r in &self.recoveries {
            match r.recovery {
                Recovery::Failover { after_ms, .. } => s.failovers_ms.push(after_ms),
                Recovery::Survived { .. } => s.survived += 1,
                Recovery::None => s.unrecovered += 1,
                Recovery::Inconclusive => s.inconclusive += 1,
            }
        }
        s.failovers_ms.sort_unstable();
        s
    }

    /// One line: verdict and counts.
    pub fn summary(&self) -> String {
        let c = &self.counts;
        format!(
            "lease: {}: {} writes (ok {}, fenced {}, failed {}, unknown {} of which {} stored); {} stored in {} term(s) by {} holder(s); {}; {} other fault(s)",
            if self.is_valid() { "valid" } else { "INVALID" },
            c.writes,
            c.ok,
            c.fenced,
            c.failed,
            c.unknown,
            c.unknown_stored,
            c.stored,
            c.terms,
            c.holders,
            self.failover_stats(),
            self.other_faults,
        )
    }
}

impl fmt::Display for LeaseReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.summary())?;
        for v in &self.violations {
            writeln!(f, "  {v}")?;
        }
        for r in &self.recoveries {
            let what = match r.recovery {
                Recovery::Failover { after_ms, began_after_ms, token, holder } => {
                    let began = began_after_ms.map(|b| format!(" (its term began after {b} ms)")).unwrap_or_default();
                    format!("failover to c{holder} (token {token}) after {after_ms} ms{began}")
                }
                Recovery::Survived { after_ms } => format!("the holder went on in its term, writing again after {after_ms} ms"),
                Recovery::None => "no recovery within the bound".to_string(),
                Recovery::Inconclusive => "the run ended too soon to tell".to_string(),
            };
            writeln!(f, "  fault at {} ms ({}) hit holder c{} (token {}): {what}", r.at_ms, r.what, r.holder, r.token)?;
        }
        Ok(())
    }
}
