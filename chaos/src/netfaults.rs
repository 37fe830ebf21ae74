//! The nemesis's network faults inside the runner's member namespaces: nftables
//! partitions and netem latency. Every call is bounded ([`CMD_TIMEOUT`]).

use keelson_runner::cmd::{run_async, CMD_TIMEOUT};
use keelson_runner::topology::bridge_ns;

use crate::partition::NFT_TABLE;
use crate::ChaosError;

fn argv(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| w.to_string()).collect()
}

/// Whether `tc … netem` works (tried on `lo` of the bridge namespace); `Err` holds why not.
pub(crate) async fn probe_netem(run_id: &str) -> Result<(), String> {
    let br = bridge_ns(run_id);
    let add = argv(&["ip", "netns", "exec", &br, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"]);
    match run_async(add, None, CMD_TIMEOUT).await {
        Ok(_) => {
            let del = argv(&["ip", "netns", "exec", &br, "tc", "qdisc", "del", "dev", "lo", "root"]);
            let _ = run_async(del, None, CMD_TIMEOUT).await;
            Ok(())
        }
        Err(e) => Err(e.to_string()),
    }
}

/// Loads `ruleset` (see [`crate::partition::render_ruleset`]) into namespace `ns`.
pub(crate) async fn load_ruleset(ns: &str, ruleset: &str) -> Result<(), ChaosError> {
    run_async(argv(&["ip", "netns", "exec", ns, "nft", "-f", "-"]), Some(ruleset.to_string()), CMD_TIMEOUT)
        .await
        .map(|_| ())
        .map_err(ChaosError::from)
}

/// The table as `nft list` shows it in `ns`, or `None` when there is none.
pub(crate) async fn list_ruleset(ns: &str) -> Option<String> {
    run_async(argv(&["ip", "netns", "exec", ns, "nft", "list", "table", "inet", NFT_TABLE]), None, CMD_TIMEOUT)
        .await
        .ok()
}

/// Delays every packet leaving `eth0` of `ns` by `millis`.
pub(crate) async fn set_latency(ns: &str, millis: u32) -> Result<(), ChaosError> {
    let delay = format!("{millis}ms");
    run_async(
        argv(&["ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", "eth0", "root", "netem", "delay", &delay]),
        None,
        CMD_TIMEOUT,
    )
    .await
    .map(|_| ())
    .map_err(ChaosError::from)
}

/// Removes the root qdisc of `eth0` in `ns` (no error when there is none).
pub(crate) async fn clear_latency(ns: &str) -> Result<(), ChaosError> {
    match run_async(argv(&["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", "eth0", "root"]), None, CMD_TIMEOUT)
        .await
    {
        Err(keelson_runner::RunnerError::Command { stderr, .. })
            if stderr.contains("handle of zero")
                || stderr.contains("No such file")
                || stderr.contains("Invalid handle") =>
        {
            Ok(())
        }
        other => other.map(|_| ()).map_err(ChaosError::from),
    }
}
