//! What the status page shows, as plain data: one [`Observation`] of the cluster, the
//! [`changes`] between two of them (the timeline's entries) and the [`Timeline`] that
//! keeps the recent ones. Pure: the sampler in [`super::sample`] does the I/O.

use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;

/// How many timeline entries a server keeps (the oldest go first).
pub const TIMELINE_LEN: usize = 200;

/// The cluster as one server saw it at one moment.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Observation {
    /// RFC 3339 (microseconds), when the sample was taken.
    pub time: String,
    /// The leader's name, by the highest term any answering replica reports.
    pub leader: Option<String>,
    pub term: u64,
    pub members: Vec<MemberView>,
    /// The control-plane components' Leases (`kube-scheduler`, `kube-controller-manager`).
    pub leases: Vec<LeaseView>,
    /// The Nodes' Ready condition by name; `None` when they could not be read.
    pub nodes: Option<BTreeMap<String, String>>,
}

/// One Raft member: its replica as it reports itself and its API's `/readyz`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct MemberView {
    pub id: String,
    pub name: String,
    /// The store (Raft) address.
    pub addr: String,
    pub voter: bool,
    /// The replica answered its status.
    pub reachable: bool,
    /// Why the replica did not answer.
    pub error: Option<String>,
    pub role: Option<String>,
    pub term: Option<u64>,
    pub applied_index: Option<u64>,
    pub last_log_index: Option<u64>,
    /// The leader's commit index minus this replica's applied index.
    pub lag: Option<u64>,
    pub api: ApiView,
}

/// A server's API as its `/readyz` answered.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ApiView {
    /// `ready`, `not-ready`, `down`, or `unknown` (no identity Lease names its address).
    pub state: String,
    pub address: Option<String>,
    pub reason: Option<String>,
}

/// A component's Lease.
pub use crate::component_leases::ComponentLease as LeaseView;

/// One line of the timeline.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TimelineEntry {
    pub time: String,
    /// `leader`, `member`, `api`, `lease` or `node`.
    pub kind: &'static str,
    /// The server, Lease or Node it is about.
    pub subject: String,
    /// Whether it is a fault (something stopped working) rather than a recovery or a
    /// change of hands.
    pub fault: bool,
    pub message: String,
}

/// The recent entries, newest last.
#[derive(Debug, Default)]
pub struct Timeline {
    entries: VecDeque<TimelineEntry>,
}

impl Timeline {
    pub fn push(&mut self, entry: TimelineEntry) {
        if self.entries.len() == TIMELINE_LEN {
            self.entries.pop_front();
        }
        self.entries.push_back(entry);
    }

    pub fn entries(&self) -> impl DoubleEndedIterator<Item = &TimelineEntry> {
        self.entries.iter()
    }
}

/// The entries that say how `next` differs from `prev` (`None`: the first sample this
/// server takes, which says who leads).
pub fn changes(prev: Option<&Observation>, next: &Observation) -> Vec<TimelineEntry> {
    let mut out = Vec::new();
    let entry = |kind, subject: &str, fault, message: String| TimelineEntry { time: next.time.clone(), kind, subject: subject.to_string(), fault, message };
    let (prev_leader, prev_term) = prev.map_or((None, 0), |p| (p.leader.as_deref(), p.term));
    if prev.is_none() || next.leader.as_deref() != prev_leader || next.term != prev_term {
        match &next.leader {
            Some(l) => out.push(entry("leader", l, false, format!("{l} leads term {}", next.term))),
            None => out.push(entry("leader", "", true, format!("no leader (last term seen {})", next.term))),
        }
    }
    let Some(prev) = prev else { return out };
    for m in &next.members {
        let Some(was) = prev.members.iter().find(|p| p.name == m.name) else {
            out.push(entry("member", &m.name, false, format!("{} joined as a {}", m.name, if m.voter { "voter" } else { "learner" })));
            continue;
        };
        if was.reachable != m.reachable {
            out.push(match m.reachable {
                false => entry("member", &m.name, true, format!("{}'s replica stopped answering: {}", m.name, m.error.as_deref().unwrap_or("no answer"))),
                true => entry("member", &m.name, false, format!("{}'s replica answers again", m.name)),
            });
        }
        if was.api.state != m.api.state {
            let reason = m.api.reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default();
            out.push(entry("api", &m.name, m.api.state != "ready", format!("{}'s API is {}{reason}", m.name, m.api.state)));
        }
    }
    for was in &prev.members {
        if !next.members.iter().any(|m| m.name == was.name) {
            out.push(entry("member", &was.name, false, format!("{} left the cluster", was.name)));
        }
    }
    for l in &next.leases {
        let before = prev.leases.iter().find(|p| p.name == l.name).and_then(|p| p.holder.as_deref());
        if before != l.holder.as_deref() {
            let message = match (&l.holder, before) {
                (Some(h), Some(b)) => format!("{} moved from {b} to {h}", l.name),
                (Some(h), None) => format!("{} is held by {h}", l.name),
                (None, _) => format!("{} is not held", l.name),
            };
            out.push(entry("lease", &l.name, l.holder.is_none(), message));
        }
    }
    if let (Some(before), Some(now)) = (&prev.nodes, &next.nodes) {
        for (name, ready) in now {
            match before.get(name) {
                None => out.push(entry("node", name, false, format!("{name} registered (Ready {ready})"))),
                Some(was) if was != ready => out.push(entry("node", name, ready != "True", format!("{name} is Ready {ready} (was {was})"))),
                Some(_) => {}
            }
        }
        for name in before.keys().filter(|n| !now.contains_key(*n)) {
            out.push(entry("node", name, false, format!("{name} was deleted")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, reachable: bool, api: &str) -> MemberView {
        MemberView {
            name: name.into(),
            voter: true,
            reachable,
            error: (!reachable).then(|| "connection refused".into()),
            api: ApiView { state: api.into(), reason: (api != "ready").then(|| "dial tcp: connection refused".into()), ..Default::default() },
            ..Default::default()
        }
    }

    fn obs(time: &str, leader: Option<&str>, term: u64, members: Vec<MemberView>) -> Observation {
        Observation {
            time: time.into(),
            leader: leader.map(String::from),
            term,
            members,
            leases: vec![LeaseView { name: "kube-scheduler".into(), holder: Some("keelson-0_1".into()), ..Default::default() }],
            nodes: Some(BTreeMap::from([("n1".to_string(), "True".to_string())])),
        }
    }

    fn messages(entries: &[TimelineEntry]) -> Vec<(&str, bool, &str)> {
        entries.iter().map(|e| (e.kind, e.fault, e.message.as_str())).collect()
    }

    #[test]
    fn the_first_sample_says_who_leads_and_nothing_else() {
        let first = obs("t0", Some("keelson-1"), 3, vec![member("keelson-0", true, "ready"), member("keelson-1", true, "ready")]);
        assert_eq!(messages(&changes(None, &first)), [("leader", false, "keelson-1 leads term 3")]);
        let same = Observation { time: "t1".into(), ..first.clone() };
        assert!(changes(Some(&first), &same).is_empty());
    }

    #[test]
    fn a_killed_leader_reads_as_faults_then_a_new_term() {
        let whole = obs("t0", Some("keelson-1"), 3, vec![member("keelson-0", true, "ready"), member("keelson-1", true, "ready"), member("keelson-2", true, "ready")]);
        let mut killed = obs("t1", Some("keelson-2"), 4, vec![member("keelson-0", true, "ready"), member("keelson-1", false, "down"), member("keelson-2", true, "ready")]);
        killed.leases[0].holder = Some("keelson-2_9".into());
        assert_eq!(
            messages(&changes(Some(&whole), &killed)),
            [
                ("leader", false, "keelson-2 leads term 4"),
                ("member", true, "keelson-1's replica stopped answering: connection refused"),
                ("api", true, "keelson-1's API is down: dial tcp: connection refused"),
                ("lease", false, "kube-scheduler moved from keelson-0_1 to keelson-2_9"),
            ]
        );
        let back = obs("t2", Some("keelson-2"), 4, vec![member("keelson-0", true, "ready"), member("keelson-1", true, "ready"), member("keelson-2", true, "ready")]);
        let back = Observation { leases: killed.leases.clone(), ..back };
        assert_eq!(messages(&changes(Some(&killed), &back)), [("member", false, "keelson-1's replica answers again"), ("api", false, "keelson-1's API is ready")]);
    }

    #[test]
    fn losing_the_quorum_is_a_fault() {
        let whole = obs("t0", Some("keelson-1"), 3, vec![member("keelson-0", true, "ready")]);
        let lost = obs("t1", None, 3, vec![member("keelson-0", true, "not-ready")]);
        let got = changes(Some(&whole), &lost);
        assert_eq!(messages(&got), [("leader", true, "no leader (last term seen 3)"), ("api", true, "keelson-0's API is not-ready: dial tcp: connection refused")]);
        assert!(got.iter().all(|e| e.time == "t1"));
    }

    #[test]
    fn members_nodes_and_leases_coming_and_going() {
        let before = obs("t0", Some("a"), 1, vec![member("a", true, "ready"), member("b", true, "ready")]);
        let mut after = obs("t1", Some("a"), 1, vec![member("a", true, "ready"), member("c", true, "ready")]);
        after.nodes = Some(BTreeMap::from([("n1".to_string(), "Unknown".to_string()), ("n2".to_string(), "False".to_string())]));
        after.leases[0].holder = None;
        assert_eq!(
            messages(&changes(Some(&before), &after)),
            [
                ("member", false, "c joined as a voter"),
                ("member", false, "b left the cluster"),
                ("lease", true, "kube-scheduler is not held"),
                ("node", true, "n1 is Ready Unknown (was True)"),
                ("node", false, "n2 registered (Ready False)"),
            ]
        );
        // Nodes that could not be read say nothing about the nodes.
        let unread = Observation { nodes: None, time: "t2".into(), ..after.clone() };
        assert!(changes(Some(&after), &unread).is_empty());
    }

    #[test]
    fn the_timeline_keeps_the_newest() {
        let mut t = Timeline::default();
        for i in 0..TIMELINE_LEN + 5 {
            t.push(TimelineEntry { time: i.to_string(), kind: "leader", subject: String::new(), fault: false, message: String::new() });
        }
        let times: Vec<_> = t.entries().map(|e| e.time.clone()).collect();
        assert_eq!(times.len(), TIMELINE_LEN);
        assert_eq!(times.first().map(String::as_str), Some("5"));
        assert_eq!(times.last().map(String::as_str), Some((TIMELINE_LEN + 4).to_string().as_str()));
    }
}
