//! Loopback-mode tests: no root needed.

mod common;

use std::time::{Duration, Instant};

use common::*;
use keelson_chaos::{ChaosError, Fault, Harness, Isolation, Target};

const SECS: fn(u64) -> Duration = Duration::from_secs;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loopback_kill_restart_membership_and_unsupported_partitions() -> anyhow::Result<()> {
    let t0 = Instant::now();
    let tmp = tempfile::tempdir()?;
    let mut h = Harness::start(spec(3, tmp.path(), Isolation::Loopback, 3)).await?;
    eprintln!("started in {:.1?}", t0.elapsed());
    assert_eq!(h.cluster().isolation(), Isolation::Loopback);
    assert!(h.cluster().namespaces().is_empty());
    let run = tmp.path().display().to_string();
    let eps = h.cluster().endpoints();
    for (i, ep) in eps.iter().enumerate() {
        assert!(ep.starts_with("127.0.0.1:"), "server {i}: {ep}");
    }
    put_retry(h.cluster().tls(), &eps, "/a", "1", SECS(5)).await?;

    // Network faults are unsupported, loudly, and recorded as failed events.
    for f in [
        Fault::SplitHalves,
        Fault::IsolateNode(Target::Leader),
        Fault::OneWayLoss { from: 0, to: 1 },
        Fault::Latency { millis: 100 },
    ] {
        assert!(!h.supports(&f));
        match h.apply(f.clone()).await {
            Err(ChaosError::Unsupported(why)) => assert!(why.contains("Loopback"), "{why}"),
            other => anyhow::bail!("{f:?}: expected Unsupported, got {other:?}"),
        }
        assert!(!h.events().last().unwrap().ok);
    }
    assert!(h.apply(Fault::HealNetwork).await?.ok, "healing nothing is fine");

    // Kill the leader; the others elect one; restart and catch up.
    let leader = h.cluster().leader().await.expect("a leader");
    let ev = h.apply(Fault::Kill(Target::Leader)).await?;
    assert!(ev.what.starts_with(&format!("kill n{leader}")), "{ev:?}");
    h.cluster().wait_healthy(SECS(15)).await?;
    assert_ne!(h.cluster().leader().await, Some(leader));
    put_retry(h.cluster().tls(), &eps, "/b", "2", SECS(10)).await?;
    h.apply(Fault::Restart(leader)).await?;
    h.cluster().wait_healthy(SECS(15)).await?;
    assert_eq!(get_on(h.cluster().tls(), &eps[leader], "/b", SECS(10)).await?.as_deref(), Some("2"));

    // Membership: remove a follower, wipe it, re-join; then restart everyone in turn.
    let follower = (h.cluster().leader().await.expect("a leader") + 1) % 3;
    let ev = h.apply(Fault::RemoveAndReadd(Target::Node(follower))).await?;
    assert!(ev.what.contains("voter again"), "{ev:?}");
    h.cluster().wait_healthy(SECS(15)).await?;
    assert_eq!(get_on(h.cluster().tls(), &eps[follower], "/b", SECS(10)).await?.as_deref(), Some("2"), "the re-added member has the data");
    h.apply(Fault::RollingRestart).await?;
    put_retry(h.cluster().tls(), &eps, "/c", "3", SECS(10)).await?;
    assert_eq!(h.events().iter().filter(|e| e.ok).count(), 5);

    h.shutdown().await?;
    assert!(processes_mentioning(&run).is_empty(), "processes left: {:?}", processes_mentioning(&run));
    eprintln!("loopback test done in {:.1?}", t0.elapsed());
    Ok(())
}
