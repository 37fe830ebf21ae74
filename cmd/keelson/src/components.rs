//! Wiring of the control-plane components every `keelson server` runs: the API balancer
//! (this server's API first), the scheduler and the controller manager, each elected
//! through its Lease.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use keelson_component::{ApiBalancer, ControlPlaneAccess, ElectionMetrics, ElectionTimings, HealthTimings};
use tokio_util::sync::CancellationToken;

#[derive(Args, Clone, Debug)]
pub struct ComponentArgs {
    /// Lease duration of the scheduler's and controller manager's leader election.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    leader_elect_lease_duration: Duration,
    /// How long a leader keeps acting without renewing its lease.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    leader_elect_renew_deadline: Duration,
    /// How often candidates try to acquire and leaders renew.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    leader_elect_retry_period: Duration,
    /// Run no scheduler or controller manager on this server.
    #[arg(long)]
    no_components: bool,
    /// The pod network: every Node gets a block of it as `spec.podCIDR`. An IPv4 and an
    /// IPv6 CIDR, comma-separated, make the cluster dual-stack: every Node gets a block
    /// of each (`spec.podCIDRs`), the first family primary.
    #[arg(long, default_value = keelson_controllers::nodeipam::allocate::DEFAULT_CLUSTER_CIDR)]
    cluster_cidr: String,
    /// The prefix length of each Node's block of the IPv4 cluster CIDR, or of a
    /// single-stack IPv6 one (the per-family flags below win over it).
    #[arg(long)]
    node_cidr_mask_size: Option<u8>,
    /// The prefix length of each Node's block of the IPv4 cluster CIDR [default: 24].
    #[arg(long)]
    node_cidr_mask_size_ipv4: Option<u8>,
    /// The prefix length of each Node's block of the IPv6 cluster CIDR [default: 64].
    #[arg(long)]
    node_cidr_mask_size_ipv6: Option<u8>,
    /// How often the node lifecycle controller looks at every Node.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    node_monitor_period: Duration,
    /// How long a Node may go without a heartbeat (Lease renewal or Ready condition)
    /// before it is marked Unknown and tainted unreachable (Kubernetes 1.32+: 50s).
    #[arg(long, default_value = "50s", value_parser = parse_duration)]
    node_monitor_grace_period: Duration,
    /// The same for a Node that has never posted a Ready condition.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    node_startup_grace_period: Duration,
}

impl ComponentArgs {
    pub fn timings(&self) -> anyhow::Result<ElectionTimings> {
        let t = ElectionTimings {
            lease_duration: self.leader_elect_lease_duration,
            renew_deadline: self.leader_elect_renew_deadline,
            retry_period: self.leader_elect_retry_period,
        };
        t.validate()?;
        Ok(t)
    }

    /// The controllers' settings from the flags.
    pub fn controllers(&self) -> anyhow::Result<keelson_controllers::ControllerConfig> {
        use keelson_controllers::nodeipam::allocate::{DEFAULT_NODE_CIDR_MASK_SIZE, DEFAULT_NODE_CIDR_MASK_SIZE_V6};
        // An IPv4 CIDR has no ':', and two CIDRs make the cluster dual-stack.
        let single_stack_v6 = !self.cluster_cidr.contains(',') && self.cluster_cidr.contains(':');
        let v4 = self.node_cidr_mask_size_ipv4.or(self.node_cidr_mask_size).unwrap_or(DEFAULT_NODE_CIDR_MASK_SIZE);
        let v6 = self.node_cidr_mask_size_ipv6.or(self.node_cidr_mask_size.filter(|_| single_stack_v6)).unwrap_or(DEFAULT_NODE_CIDR_MASK_SIZE_V6);
        let node_ipam = keelson_controllers::nodeipam::IpamConfig::from_flags(&self.cluster_cidr, v4, v6)?;
        let node_lifecycle = keelson_controllers::nodelifecycle::LifecycleConfig {
            monitor_period: self.node_monitor_period,
            grace_period: self.node_monitor_grace_period,
            startup_grace_period: self.node_startup_grace_period,
        };
        anyhow::ensure!(!node_lifecycle.monitor_period.is_zero(), "--node-monitor-period must be positive");
        Ok(keelson_controllers::ControllerConfig { node_ipam, node_lifecycle, root_ca_pem: String::new() })
    }
}

/// A flag's duration: Go's syntax (`15s`, `500ms`, `1m30s`) or bare seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    keelson_apimachinery::duration::parse_flag(s).map_err(|e| e.to_string())
}

/// The running components of a server.
pub struct RunningComponents {
    shutdown: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// How long stopping components may take (they release their Leases on the way out).
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

impl RunningComponents {
    /// Stops the components and waits (bounded) until they have released their Leases;
    /// call before the API server goes away.
    pub async fn stop(self) {
        self.shutdown.cancel();
        let all = futures::future::join_all(self.tasks);
        if tokio::time::timeout(STOP_TIMEOUT, all).await.is_err() {
            tracing::warn!("components did not stop within {STOP_TIMEOUT:?}");
        }
    }
}

/// Starts the balancer and the components; they stop with [`RunningComponents::stop`]
/// or when `server_shutdown` is cancelled.
pub async fn start(
    args: &ComponentArgs,
    server_name: &str,
    own_api: SocketAddr,
    ca: keelson_pki::ClusterCa,
    metrics: ElectionMetrics,
    server_shutdown: CancellationToken,
) -> anyhow::Result<RunningComponents> {
    let shutdown = server_shutdown.child_token();
    if args.no_components {
        return Ok(RunningComponents { shutdown, tasks: Vec::new() });
    }
    let timings = args.timings()?;
    let controllers = args.controllers()?;
    // The balancer outlives the components: they release their Leases through it.
    let balancer = ApiBalancer::start(vec![own_api], ca.cert_pem(), HealthTimings::default(), server_shutdown).await?;
    let access = ControlPlaneAccess { balancer: balancer.clone(), ca: Arc::new(ca), server_name: server_name.to_string(), timings, metrics };
    // The scheduler's identity may list identity Leases: it learns the other servers.
    let (client, _) = access.client_as(keelson_component::KUBE_SCHEDULER.user, &[]).await?;
    tokio::spawn(keelson_component::discovery::follow_servers(client, balancer, Duration::from_secs(30), shutdown.clone()));
    let tasks = vec![
        tokio::spawn(keelson_scheduler::run(access.clone(), shutdown.clone())),
        tokio::spawn(keelson_controllers::run(access, controllers, shutdown.clone())),
    ];
    Ok(RunningComponents { shutdown, tasks })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    struct Flags {
        #[command(flatten)]
        components: ComponentArgs,
    }

    fn controllers(args: &[&str]) -> anyhow::Result<keelson_controllers::ControllerConfig> {
        use clap::Parser;
        Flags::try_parse_from(std::iter::once("keelson").chain(args.iter().copied()))?.components.controllers()
    }

    #[test]
    fn controller_flags() {
        let defaults = controllers(&[]).unwrap();
        assert_eq!(defaults, keelson_controllers::ControllerConfig::default());
        assert_eq!(defaults.node_lifecycle.grace_period, Duration::from_secs(50));
        assert_eq!(defaults.node_ipam.to_string(), "10.42.0.0/16");
        let c = controllers(&["--cluster-cidr", "10.99.0.0/16", "--node-cidr-mask-size", "26", "--node-monitor-grace-period", "4s", "--node-monitor-period", "500ms"]).unwrap();
        assert_eq!((c.node_ipam.to_string(), c.node_ipam.primary.node_mask), ("10.99.0.0/16".to_string(), 26));
        assert_eq!((c.node_lifecycle.grace_period, c.node_lifecycle.monitor_period), (Duration::from_secs(4), Duration::from_millis(500)));
        assert!(controllers(&["--cluster-cidr", "10.99.0.0"]).is_err());
        assert!(controllers(&["--node-cidr-mask-size", "12"]).is_err(), "wider than the cluster CIDR");
        assert!(controllers(&["--node-monitor-period", "0s"]).is_err());
        let dual = controllers(&["--cluster-cidr", "10.99.0.0/16,fd99::/56", "--node-cidr-mask-size-ipv4", "25"]).unwrap().node_ipam;
        let masks = (dual.primary.node_mask, dual.secondary.map(|r| (r.cluster_cidr.to_string(), r.node_mask)));
        assert_eq!(masks, (25, Some(("fd99::/56".to_string(), 64))));
        // --node-cidr-mask-size is the IPv4 mask, and the IPv6 one of a single-stack IPv6 cluster.
        for (flags, want) in [
            (&["--cluster-cidr", "fd99::/56", "--node-cidr-mask-size", "60"][..], (60, None)),
            (&["--cluster-cidr", "fd99::/56", "--node-cidr-mask-size-ipv6", "62"], (62, None)),
            (&["--cluster-cidr", "10.99.0.0/16,fd99::/56", "--node-cidr-mask-size", "26"], (26, Some(64))),
            (&["--cluster-cidr", "fd99::/56,10.99.0.0/16", "--node-cidr-mask-size", "26", "--node-cidr-mask-size-ipv6", "60"], (60, Some(26))),
            (&["--cluster-cidr", "10.99.0.0/16", "--node-cidr-mask-size", "26", "--node-cidr-mask-size-ipv4", "20"], (20, None)),
        ] {
            let ipam = controllers(flags).unwrap().node_ipam;
            assert_eq!((ipam.primary.node_mask, ipam.secondary.map(|r| r.node_mask)), want, "{flags:?}");
        }
        for (flags, why) in [
            (&["--cluster-cidr", "10.99.0.0/16,10.98.0.0/16"][..], "two of one family"),
            (&["--cluster-cidr", "10.99.0.0/16,fd99::/56,fd98::/56"], "three"),
            (&["--cluster-cidr", "10.99.0.0/16,fd99::56"], "not a CIDR"),
            (&["--cluster-cidr", "10.99.0.0/16,fd99::/47"], "2^17 IPv6 blocks"),
            (&["--cluster-cidr", "10.99.0.0/16,fd99::/56", "--node-cidr-mask-size-ipv6", "127"], "IPv6 blocks of 2 addresses"),
        ] {
            assert!(controllers(flags).is_err(), "{why}: {flags:?}");
        }
        let err = controllers(&["--cluster-cidr", "10.99.0.0/16,10.98.0.0/16"]).unwrap_err().to_string();
        assert!(err.contains("\"10.99.0.0/16,10.98.0.0/16\""), "{err}");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("15s").unwrap(), Duration::from_secs(15));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("12h").unwrap(), Duration::from_secs(12 * 3600));
        assert!(parse_duration("3d").is_err());
        assert!(parse_duration("fast").is_err());
    }
}
