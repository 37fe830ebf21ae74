//! Which priority level serves a request, and as which flow: API Priority and Fairness'
//! suggested configuration of Kubernetes 1.33 (its FlowSchemas and
//! PriorityLevelConfigurations), built in. The first matching schema wins, in the order of
//! their matching precedence; its distinguisher names the flow (the user, or the
//! namespace) that shares the level's seats fairly with the other flows of the level.
//! Pure: the request's attributes and its user in, a [`Classification`] out.

use keelson_rbac::{Attributes, UserInfo};

/// The priority levels, each with its share of a server's seats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PriorityLevel {
    /// Never limited (system:masters, health probes).
    Exempt,
    System,
    NodeHigh,
    LeaderElection,
    WorkloadHigh,
    WorkloadLow,
    GlobalDefault,
    CatchAll,
}

impl PriorityLevel {
    /// The levels that take seats, in a fixed order ([`PriorityLevel::index`]).
    pub const LIMITED: [PriorityLevel; 7] = [
        PriorityLevel::System,
        PriorityLevel::NodeHigh,
        PriorityLevel::LeaderElection,
        PriorityLevel::WorkloadHigh,
        PriorityLevel::WorkloadLow,
        PriorityLevel::GlobalDefault,
        PriorityLevel::CatchAll,
    ];

    /// The PriorityLevelConfiguration's name (the `priority_level` label).
    pub fn name(self) -> &'static str {
        match self {
            PriorityLevel::Exempt => "exempt",
            PriorityLevel::System => "system",
            PriorityLevel::NodeHigh => "node-high",
            PriorityLevel::LeaderElection => "leader-election",
            PriorityLevel::WorkloadHigh => "workload-high",
            PriorityLevel::WorkloadLow => "workload-low",
            PriorityLevel::GlobalDefault => "global-default",
            PriorityLevel::CatchAll => "catch-all",
        }
    }

    /// `nominalConcurrencyShares`: the level's part of the seats, against the others'.
    pub fn nominal_shares(self) -> usize {
        match self {
            PriorityLevel::Exempt => 0,
            PriorityLevel::System => 30,
            PriorityLevel::NodeHigh => 40,
            PriorityLevel::LeaderElection => 10,
            PriorityLevel::WorkloadHigh => 40,
            PriorityLevel::WorkloadLow => 100,
            PriorityLevel::GlobalDefault => 20,
            PriorityLevel::CatchAll => 5,
        }
    }

    /// `lendablePercent`: how much of its part other levels may use while it is idle;
    /// the rest is kept for it whatever the others do.
    pub fn lendable_percent(self) -> usize {
        match self {
            PriorityLevel::System => 33,
            PriorityLevel::NodeHigh => 25,
            PriorityLevel::WorkloadHigh => 50,
            PriorityLevel::WorkloadLow => 90,
            PriorityLevel::GlobalDefault => 50,
            PriorityLevel::Exempt | PriorityLevel::LeaderElection | PriorityLevel::CatchAll => 0,
        }
    }

    /// Position in [`PriorityLevel::LIMITED`] (None for the exempt level).
    pub fn index(self) -> Option<usize> {
        PriorityLevel::LIMITED.iter().position(|l| *l == self)
    }
}

/// Where one request goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Classification {
    /// The matching FlowSchema's name (the `flow_schema` label).
    pub flow_schema: &'static str,
    pub level: PriorityLevel,
    /// The flow within the level: a user name, or a namespace (`""` when cluster-scoped).
    pub flow: String,
}

const MASTERS: &str = "system:masters";
const NODES: &str = "system:nodes";
const SERVICE_ACCOUNTS: &str = "system:serviceaccounts";
const KUBE_SYSTEM_ACCOUNT: &str = "system:serviceaccount:kube-system:";
const CONTROL_PLANE_USERS: [&str; 2] = ["system:kube-controller-manager", "system:kube-scheduler"];
/// Keelson's node proxy identity: a system component, served with the controllers.
const NODE_PROXIER: &str = "system:kube-proxy";
const PROBE_PATHS: [&str; 3] = ["/healthz", "/readyz", "/livez"];

enum Distinguisher {
    ByUser,
    ByNamespace,
}

/// The priority level and flow of a request by `user` (None: a public request made without
/// credentials).
pub fn classify(attrs: &Attributes, user: Option<&UserInfo>) -> Classification {
    let (schema, level, by) = schema_of(attrs, user);
    let flow = match by {
        Distinguisher::ByUser => user.map_or("system:anonymous", |u| u.name.as_str()).to_string(),
        Distinguisher::ByNamespace => match attrs {
            Attributes::Resource(a) => a.namespace.clone().unwrap_or_default(),
            Attributes::NonResource(_) => String::new(),
        },
    };
    Classification { flow_schema: schema, level, flow }
}

fn schema_of(attrs: &Attributes, user: Option<&UserInfo>) -> (&'static str, PriorityLevel, Distinguisher) {
    use Distinguisher::*;
    use PriorityLevel::*;
    let in_group = |g: &str| user.is_some_and(|u| u.groups.iter().any(|x| x == g));
    let name = user.map_or("", |u| u.name.as_str());
    if in_group(MASTERS) {
        return ("exempt", Exempt, ByUser);
    }
    if let Attributes::NonResource(a) = attrs {
        if PROBE_PATHS.iter().any(|p| a.path == *p || a.path.strip_prefix(p).is_some_and(|rest| rest.starts_with('/'))) {
            return ("probes", Exempt, ByUser);
        }
    }
    let resource = match attrs {
        Attributes::Resource(a) => Some(a),
        Attributes::NonResource(_) => None,
    };
    let is = |group: &str, resources: &[&str]| resource.is_some_and(|a| a.api_group == group && resources.contains(&a.resource.as_str()));
    let verb_in = |verbs: &[&str]| resource.is_some_and(|a| verbs.contains(&a.verb.as_str()));
    let kube_system_account = name.starts_with(KUBE_SYSTEM_ACCOUNT);
    if (CONTROL_PLANE_USERS.contains(&name) || kube_system_account)
        && verb_in(&["get", "create", "update"])
        && (is("coordination.k8s.io", &["leases"]) || (is("", &["endpoints", "configmaps"]) && resource.is_some_and(|a| a.namespace.as_deref() == Some("kube-system"))))
    {
        return ("system-leader-election", LeaderElection, ByUser);
    }
    if in_group(NODES) {
        if is("", &["nodes"]) || is("coordination.k8s.io", &["leases"]) {
            return ("system-node-high", NodeHigh, ByUser);
        }
        return ("system-nodes", System, ByUser);
    }
    if name == "system:kube-controller-manager" {
        return ("kube-controller-manager", WorkloadHigh, ByNamespace);
    }
    if name == "system:kube-scheduler" {
        return ("kube-scheduler", WorkloadHigh, ByNamespace);
    }
    if name == NODE_PROXIER {
        return ("kube-proxy", WorkloadHigh, ByUser);
    }
    if kube_system_account {
        return ("kube-system-service-accounts", WorkloadHigh, ByNamespace);
    }
    if in_group(SERVICE_ACCOUNTS) {
        return ("service-accounts", WorkloadLow, ByUser);
    }
    if user.is_some() {
        return ("global-default", GlobalDefault, ByUser);
    }
    ("catch-all", CatchAll, ByUser)
}

#[cfg(test)]
mod tests {
    use super::*;
    use keelson_rbac::{NonResourceAttributes, ResourceAttributes};

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo { name: name.into(), groups: groups.iter().map(|g| g.to_string()).collect(), ..Default::default() }
    }

    fn res(verb: &str, group: &str, resource: &str, namespace: Option<&str>) -> Attributes {
        let mut a = ResourceAttributes::new(verb, group, resource);
        a.namespace = namespace.map(str::to_string);
        Attributes::Resource(a)
    }

    #[test]
    fn requests_land_on_the_levels_of_kubernetes_suggested_configuration() {
        let node = user("system:node:n1", &[NODES, "system:authenticated"]);
        let scheduler = user("system:kube-scheduler", &["system:authenticated"]);
        let kcm = user("system:kube-controller-manager", &["system:authenticated"]);
        let admin = user("admin", &[MASTERS, "system:authenticated"]);
        let sa = user("system:serviceaccount:shop:web", &[SERVICE_ACCOUNTS, "system:serviceaccounts:shop", "system:authenticated"]);
        let dns = user("system:serviceaccount:kube-system:coredns", &[SERVICE_ACCOUNTS, "system:authenticated"]);
        let alice = user("alice", &["dev", "system:authenticated"]);
        let proxier = user(NODE_PROXIER, &["system:authenticated"]);
        let cases: Vec<(Attributes, Option<&UserInfo>, (&str, PriorityLevel, &str))> = vec![
            (res("delete", "", "pods", Some("shop")), Some(&admin), ("exempt", PriorityLevel::Exempt, "admin")),
            (Attributes::NonResource(NonResourceAttributes::new("get", "/readyz")), None, ("probes", PriorityLevel::Exempt, "system:anonymous")),
            (Attributes::NonResource(NonResourceAttributes::new("get", "/livez/ping")), Some(&alice), ("probes", PriorityLevel::Exempt, "alice")),
            (Attributes::NonResource(NonResourceAttributes::new("get", "/readyzz")), Some(&alice), ("global-default", PriorityLevel::GlobalDefault, "alice")),
            (res("update", "coordination.k8s.io", "leases", Some("kube-system")), Some(&scheduler), ("system-leader-election", PriorityLevel::LeaderElection, "system:kube-scheduler")),
            (res("get", "coordination.k8s.io", "leases", Some("kube-system")), Some(&kcm), ("system-leader-election", PriorityLevel::LeaderElection, "system:kube-controller-manager")),
            (res("update", "", "configmaps", Some("kube-system")), Some(&dns), ("system-leader-election", PriorityLevel::LeaderElection, "system:serviceaccount:kube-system:coredns")),
            (res("create", "", "pods", Some("shop")), Some(&kcm), ("kube-controller-manager", PriorityLevel::WorkloadHigh, "shop")),
            (res("create", "", "pods", Some("kube-system")), Some(&scheduler), ("kube-scheduler", PriorityLevel::WorkloadHigh, "kube-system")),
            (res("list", "", "nodes", None), Some(&scheduler), ("kube-scheduler", PriorityLevel::WorkloadHigh, "")),
            (res("delete", "coordination.k8s.io", "leases", Some("kube-system")), Some(&scheduler), ("kube-scheduler", PriorityLevel::WorkloadHigh, "kube-system")),
            (res("patch", "", "nodes", None), Some(&node), ("system-node-high", PriorityLevel::NodeHigh, "system:node:n1")),
            (res("update", "coordination.k8s.io", "leases", Some("kube-node-lease")), Some(&node), ("system-node-high", PriorityLevel::NodeHigh, "system:node:n1")),
            (res("patch", "", "pods", Some("shop")), Some(&node), ("system-nodes", PriorityLevel::System, "system:node:n1")),
            (res("list", "discovery.k8s.io", "endpointslices", None), Some(&proxier), ("kube-proxy", PriorityLevel::WorkloadHigh, NODE_PROXIER)),
            (res("list", "", "services", None), Some(&dns), ("kube-system-service-accounts", PriorityLevel::WorkloadHigh, "")),
            (res("get", "", "configmaps", Some("shop")), Some(&sa), ("service-accounts", PriorityLevel::WorkloadLow, "system:serviceaccount:shop:web")),
            (res("create", "", "configmaps", Some("shop")), Some(&alice), ("global-default", PriorityLevel::GlobalDefault, "alice")),
            (res("create", "", "configmaps", Some("kube-system")), Some(&alice), ("global-default", PriorityLevel::GlobalDefault, "alice")),
            (Attributes::NonResource(NonResourceAttributes::new("get", "/cacerts")), None, ("catch-all", PriorityLevel::CatchAll, "system:anonymous")),
        ];
        for (attrs, who, (schema, level, flow)) in cases {
            let got = classify(&attrs, who);
            assert_eq!((got.flow_schema, got.level, got.flow.as_str()), (schema, level, flow), "{attrs:?} by {:?}", who.map(|u| &u.name));
        }
    }

    #[test]
    fn levels_carry_kubernetes_shares_and_only_exempt_has_no_seats() {
        let total: usize = PriorityLevel::LIMITED.iter().map(|l| l.nominal_shares()).sum();
        assert_eq!(total, 245);
        assert_eq!(PriorityLevel::Exempt.index(), None);
        for (i, l) in PriorityLevel::LIMITED.iter().enumerate() {
            assert_eq!(l.index(), Some(i));
            assert!(l.lendable_percent() < 100 && l.nominal_shares() > 0, "{l:?}");
        }
        assert_eq!(PriorityLevel::WorkloadLow.name(), "workload-low");
    }
}
