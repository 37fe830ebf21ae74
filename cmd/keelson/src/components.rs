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
}

/// `15s`, `500ms`, `2m`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s.find(|c: char| !c.is_ascii_digit() && c != '.').map(|i| s.split_at(i)).unwrap_or((s, "s"));
    let v: f64 = num.parse().map_err(|_| format!("invalid duration {s:?}: expected e.g. 15s, 500ms, 2m"))?;
    let secs = match unit {
        "ms" => v / 1000.0,
        "s" => v,
        "m" => v * 60.0,
        _ => return Err(format!("invalid duration {s:?}: units are ms, s and m")),
    };
    Ok(Duration::from_secs_f64(secs))
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
    // The balancer outlives the components: they release their Leases through it.
    let balancer = ApiBalancer::start(vec![own_api], ca.cert_pem(), HealthTimings::default(), server_shutdown).await?;
    let access = ControlPlaneAccess { balancer: balancer.clone(), ca: Arc::new(ca), server_name: server_name.to_string(), timings, metrics };
    // The scheduler's identity may list identity Leases: it learns the other servers.
    let (client, _) = access.client_as(keelson_component::KUBE_SCHEDULER.user, &[]).await?;
    tokio::spawn(keelson_component::discovery::follow_servers(client, balancer, Duration::from_secs(30), shutdown.clone()));
    let tasks = vec![
        tokio::spawn(keelson_scheduler::run(access.clone(), shutdown.clone())),
        tokio::spawn(keelson_controllers::run(access, shutdown.clone())),
    ];
    Ok(RunningComponents { shutdown, tasks })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("15s").unwrap(), Duration::from_secs(15));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert!(parse_duration("3h").is_err());
        assert!(parse_duration("fast").is_err());
    }
}
