//! Restarting members that exit by themselves, as systemd's `Restart=on-failure` (or the
//! kubelet's back-off for a crashing container) would.
//!
//! A server exits when its Raft core stops (a log write failed for space, a corrupt
//! replica); an agent exits on a fatal error. `keelson up` calls [`Cluster::supervise`]
//! every second: a member whose process has exited, and that the runner did not stop or
//! kill itself, is started again after a pause that doubles with each exit in a row
//! ([`RestartPolicy`]), so a member that cannot start does not spin, and one that ran a
//! while starts at once again. The decision is [`RestartPolicy::delay`], pure; the
//! executor is the cluster's own `start_member`.

use std::process::ExitStatus;
use std::time::{Duration, Instant};

use crate::cluster::Cluster;

/// How soon an exited member is started again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RestartPolicy {
    /// The pause after the first exit in a row.
    pub first: Duration,
    /// The longest pause.
    pub max: Duration,
    /// A member that ran this long before it exited counts as healthy: its next pause is
    /// `first` again.
    pub healthy_after: Duration,
}

impl Default for RestartPolicy {
    /// 1 s doubling to 30 s; reset after 60 s of running.
    fn default() -> Self {
        RestartPolicy { first: Duration::from_secs(1), max: Duration::from_secs(30), healthy_after: Duration::from_secs(60) }
    }
}

impl RestartPolicy {
    /// The pause before the restart that follows `exits_in_a_row` exits (1 for the first).
    pub fn delay(&self, exits_in_a_row: u32) -> Duration {
        let doublings = exits_in_a_row.saturating_sub(1).min(31);
        self.first.saturating_mul(1u32 << doublings).min(self.max)
    }

    /// The exits in a row after one more exit, given those before and how long the
    /// member ran this time.
    pub fn count_exit(&self, exits_in_a_row: u32, ran: Duration) -> u32 {
        if ran >= self.healthy_after {
            1
        } else {
            exits_in_a_row.saturating_add(1)
        }
    }
}

/// What [`Cluster::supervise`] saw or did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SuperviseEvent {
    /// Member `name` exited by itself; it is started again in `restart_in`.
    Exited { name: String, status: String, restart_in: Duration },
    /// Member `name` was started again, as `pid`.
    Restarted { name: String, pid: u32 },
    /// Starting member `name` again failed; it is tried again in `retry_in`.
    RestartFailed { name: String, error: String, retry_in: Duration },
}

impl std::fmt::Display for SuperviseEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SuperviseEvent::Exited { name, status, restart_in } => write!(f, "{name} exited ({status}); restarting it in {}", human(*restart_in)),
            SuperviseEvent::Restarted { name, pid } => write!(f, "{name} restarted (pid {pid})"),
            SuperviseEvent::RestartFailed { name, error, retry_in } => write!(f, "restarting {name} failed ({error}); trying again in {}", human(*retry_in)),
        }
    }
}

fn human(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// Per member: exits in a row, when it was last started, and when it is due to start.
#[derive(Clone, Debug)]
struct MemberRestarts {
    exits_in_a_row: u32,
    started: Instant,
    due: Option<Instant>,
}

/// The supervisor's memory between calls of [`Cluster::supervise`].
#[derive(Debug)]
pub struct Supervisor {
    policy: RestartPolicy,
    members: Vec<MemberRestarts>,
}

impl Supervisor {
    /// For `members` members, all started at `now`.
    pub fn new(policy: RestartPolicy, members: usize, now: Instant) -> Self {
        Supervisor { policy, members: vec![MemberRestarts { exits_in_a_row: 0, started: now, due: None }; members] }
    }
}

fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => status.to_string(),
    }
}

impl Cluster {
    /// Member `j`'s process has exited by itself (not stopped or killed by the runner):
    /// its exit status, once.
    fn exited(&mut self, j: usize) -> Option<ExitStatus> {
        let child = self.procs.get_mut(j)?.child.as_mut()?;
        child.try_wait().ok().flatten()
    }

    /// Restarts the members whose process exited by itself, each after its back-off
    /// ([`RestartPolicy`]); call it every second or so. Returns what happened.
    pub fn supervise(&mut self, sup: &mut Supervisor, now: Instant) -> Vec<SuperviseEvent> {
        let mut events = Vec::new();
        for j in 0..self.procs.len().min(sup.members.len()) {
            if sup.members[j].due.is_none() {
                if let Some(status) = self.exited(j) {
                    let m = &mut sup.members[j];
                    m.exits_in_a_row = sup.policy.count_exit(m.exits_in_a_row, now.saturating_duration_since(m.started));
                    let restart_in = sup.policy.delay(m.exits_in_a_row);
                    m.due = Some(now + restart_in);
                    events.push(SuperviseEvent::Exited { name: self.name(j).to_string(), status: describe(status), restart_in });
                }
            }
            let Some(due) = sup.members[j].due else { continue };
            if now < due {
                continue;
            }
            let name = self.name(j).to_string();
            match self.start_member(j) {
                Ok(pid) => {
                    sup.members[j] = MemberRestarts { exits_in_a_row: sup.members[j].exits_in_a_row, started: now, due: None };
                    events.push(SuperviseEvent::Restarted { name, pid });
                }
                Err(e) => {
                    let m = &mut sup.members[j];
                    m.exits_in_a_row = m.exits_in_a_row.saturating_add(1);
                    let retry_in = sup.policy.delay(m.exits_in_a_row);
                    m.due = Some(now + retry_in);
                    events.push(SuperviseEvent::RestartFailed { name, error: e.to_string(), retry_in });
                }
            }
        }
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_doubles_with_each_exit_in_a_row_up_to_the_cap() {
        let p = RestartPolicy::default();
        let pauses: Vec<u64> = (1..=8).map(|n| p.delay(n).as_secs()).collect();
        assert_eq!(pauses, [1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(p.delay(u32::MAX), p.max, "no overflow however many exits");
        assert_eq!(p.delay(0), p.first);
    }

    #[test]
    fn a_member_that_ran_long_enough_starts_again_at_once() {
        let p = RestartPolicy::default();
        assert_eq!(p.count_exit(0, Duration::from_secs(5)), 1);
        assert_eq!(p.count_exit(4, Duration::from_secs(5)), 5, "a crash loop keeps counting");
        assert_eq!(p.count_exit(4, Duration::from_secs(60)), 1, "healthy for a minute: counted afresh");
        assert_eq!(p.delay(p.count_exit(4, Duration::from_secs(61))), p.first);
    }

    #[test]
    fn events_read_as_an_operator_expects() {
        let e = SuperviseEvent::Exited { name: "server-2".into(), status: "exit code 1".into(), restart_in: Duration::from_secs(2) };
        assert_eq!(e.to_string(), "server-2 exited (exit code 1); restarting it in 2 s");
        let e = SuperviseEvent::RestartFailed { name: "node-1".into(), error: "boom".into(), retry_in: Duration::from_millis(1500) };
        assert_eq!(e.to_string(), "restarting node-1 failed (boom); trying again in 1.5 s");
    }
}
