//! Netns-mode tests: a real 3-server cluster, each server in its own network namespace.
//! They need root; without it each prints `SKIPPED (needs root)` and returns.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use common::*;
use keelson_chaos::{cleanup_stale, ChaosError, Fault, Harness, Isolation, NemesisFamily, Target};
use keelson_client::StoreClient;
use tokio_util::sync::CancellationToken;

const SECS: fn(u64) -> Duration = Duration::from_secs;

fn skip(test: &str) -> bool {
    if is_root() {
        return false;
    }
    eprintln!("\n\n======== {test}: SKIPPED (needs root: network namespaces and nftables) ========\n\n");
    true
}

/// Waits until the harness sees a leader other than `not`; returns it.
async fn new_leader(h: &Harness, not: usize, timeout: Duration) -> anyhow::Result<usize> {
    let deadline = Instant::now() + timeout;
    loop {
        match h.cluster().leader().await {
            Some(l) if l != not => return Ok(l),
            other if Instant::now() >= deadline => {
                anyhow::bail!("no new leader besides n{not} within {timeout:?} (saw {other:?})")
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn netns_partitions_kills_pauses_and_cleanup() -> anyhow::Result<()> {
    if skip("netns_partitions_kills_pauses_and_cleanup") {
        return Ok(());
    }
    let t0 = Instant::now();
    let tmp = tempfile::tempdir()?;
    let mut h = Harness::start(spec(3, tmp.path(), Isolation::Netns, 11)).await?;
    eprintln!("started in {:.1?}", t0.elapsed());
    assert_eq!(h.cluster().isolation(), Isolation::Netns);
    let run = format!("kc{}", h.cluster().run_id());
    let dir = tmp.path().display().to_string();
    let eps = h.cluster().endpoints();
    assert_eq!(namespaces_mentioning(&run)?.len(), 4, "bridge + 3 server namespaces");
    // `nsenter` execs in place: the recorded pid is the server itself.
    for pid in h.cluster().pids() {
        let exe = std::fs::read_link(format!("/proc/{}/exe", pid.context("running")?))?;
        assert_eq!(exe.file_name(), keelson_bin().file_name(), "{exe:?}");
    }

    // A live run survives another run's stale cleanup.
    cleanup_stale()?;
    assert_eq!(namespaces_mentioning(&run)?.len(), 4);

    // put/get through each endpoint on its own.
    for (i, ep) in eps.iter().enumerate() {
        let c = StoreClient::with_tls(&[ep], h.cluster().tls())?;
        c.put(format!("/each/{i}").as_bytes(), b"v").await.with_context(|| format!("put via {ep}"))?;
        for other in &eps {
            assert_eq!(get_on(h.cluster().tls(), other, &format!("/each/{i}"), SECS(5)).await?.as_deref(), Some("v"));
        }
    }

    // Isolate the leader: the other two elect a new one; the old one cannot commit.
    let old = h.cluster().leader().await.context("a leader")?;
    let ev = h.apply(Fault::IsolateNode(Target::Leader)).await?;
    assert!(ev.ok && ev.what.contains(&format!("n{old}")), "{ev:?}");
    let peer_addrs: Vec<String> =
        (0..3).filter(|&j| j != old).map(|j| h.cluster().endpoints()[j].split(':').next().unwrap().to_string()).collect();
    let rules = h.ruleset(old).await.context("the isolated node has a table")?;
    assert!(peer_addrs.iter().all(|a| rules.contains(a.as_str())), "{rules}");
    let leader = new_leader(&h, old, SECS(15)).await?;
    eprintln!("isolated n{old}; new leader n{leader} after {:.1?}", t0.elapsed());
    let stuck = tokio::time::timeout(SECS(3), StoreClient::with_tls(&[&eps[old]], h.cluster().tls())?.put(b"/isolated", b"lost")).await;
    assert!(!matches!(stuck, Ok(Ok(_))), "a put on the isolated old leader succeeded: {stuck:?}");
    let majority: Vec<String> = (0..3).filter(|&j| j != old).map(|j| eps[j].clone()).collect();
    put_retry(h.cluster().tls(), &majority, "/majority", "yes", SECS(10)).await?;
    h.apply(Fault::HealNetwork).await?;
    assert!(h.ruleset(old).await.is_none(), "heal deletes the table");
    h.cluster().wait_healthy(SECS(20)).await?;
    assert_eq!(get_on(h.cluster().tls(), &eps[old], "/majority", SECS(10)).await?.as_deref(), Some("yes"));
    eprintln!("healed after {:.1?}", t0.elapsed());

    // Kill the leader, a new one takes over, restart it and it catches up.
    let killed = h.cluster().leader().await.context("a leader")?;
    let ev = h.apply(Fault::Kill(Target::Leader)).await?;
    assert!(ev.what.starts_with(&format!("kill n{killed}")), "{ev:?}");
    assert!(h.cluster().pids()[killed].is_none());
    new_leader(&h, killed, SECS(15)).await?;
    put_retry(h.cluster().tls(), &eps, "/while-killed", "1", SECS(10)).await?;
    h.apply(Fault::Restart(killed)).await?;
    h.cluster().wait_healthy(SECS(20)).await?;
    assert_eq!(get_on(h.cluster().tls(), &eps[killed], "/while-killed", SECS(10)).await?.as_deref(), Some("1"));
    eprintln!("kill/restart done after {:.1?}", t0.elapsed());

    // Pause a server (SIGSTOP), write meanwhile, resume it.
    let paused = (h.cluster().leader().await.context("a leader")? + 1) % 3;
    h.apply(Fault::Pause(Target::Node(paused))).await?;
    let pid = h.cluster().pids()[paused].context("paused pid")?;
    assert_eq!(proc_state(pid), Some('T'), "stopped");
    put_retry(h.cluster().tls(), &eps, "/while-paused", "1", SECS(10)).await?;
    h.apply(Fault::Resume(paused)).await?;
    assert_ne!(proc_state(pid), Some('T'));
    h.cluster().wait_healthy(SECS(20)).await?;
    assert_eq!(get_on(h.cluster().tls(), &eps[paused], "/while-paused", SECS(10)).await?.as_deref(), Some("1"));
    eprintln!("pause/resume done after {:.1?}", t0.elapsed());

    // One-way loss from the leader to a follower: rules only on those two, cluster works.
    let from = h.cluster().leader().await.context("a leader")?;
    let to = (from + 1) % 3;
    let third = (from + 2) % 3;
    h.apply(Fault::OneWayLoss { from, to }).await?;
    let to_ip = eps[to].split(':').next().unwrap().to_string();
    let from_ip = eps[from].split(':').next().unwrap().to_string();
    let out = h.ruleset(from).await.context("table on `from`")?;
    assert!(out.contains(&format!("ip daddr {to_ip} drop")) && !out.contains("saddr"), "{out}");
    let inp = h.ruleset(to).await.context("table on `to`")?;
    assert!(inp.contains(&format!("ip saddr {from_ip} drop")) && !inp.contains("daddr"), "{inp}");
    assert!(h.ruleset(third).await.is_none());
    put_retry(h.cluster().tls(), &eps, "/one-way", "1", SECS(15)).await?;
    h.apply(Fault::HealNetwork).await?;
    h.cluster().wait_healthy(SECS(20)).await?;
    eprintln!("one-way loss done after {:.1?}", t0.elapsed());

    // Split and bridge load into nftables and keep a majority.
    h.apply(Fault::SplitHalves).await?;
    assert_eq!(servers_with_rules(&h).await, 3, "every server is cut from someone");
    put_retry(h.cluster().tls(), &eps, "/split", "1", SECS(15)).await?;
    h.apply(Fault::HealNetwork).await?;
    h.apply(Fault::Bridge).await?;
    assert_eq!(servers_with_rules(&h).await, 2, "the bridge node has no rules");
    put_retry(h.cluster().tls(), &eps, "/bridge", "1", SECS(15)).await?;
    h.apply(Fault::HealNetwork).await?;
    h.cluster().wait_healthy(SECS(20)).await?;

    // Latency: works where netem does, else a clear Unsupported.
    let lat = h.apply(Fault::Latency { millis: 50 }).await;
    if h.supports(&Fault::Latency { millis: 50 }) {
        lat?;
        put_retry(h.cluster().tls(), &eps, "/slow", "1", SECS(15)).await?;
        h.apply(Fault::HealNetwork).await?;
        eprintln!("latency (netem) works");
    } else {
        match lat {
            Err(ChaosError::Unsupported(why)) => eprintln!("latency UNSUPPORTED here: {why}"),
            other => anyhow::bail!("expected Unsupported latency, got {other:?}"),
        }
    }
    // isolate, heal, kill, restart, pause, resume, one-way, heal, split, heal, bridge,
    // heal (+ latency and its heal where netem works).
    let expected_ok = if h.supports(&Fault::Latency { millis: 50 }) { 14 } else { 12 };
    ensure!(h.events().iter().filter(|e| e.ok).count() == expected_ok, "events: {:#?}", h.events());
    let log = std::fs::read_to_string(tmp.path().join("nemesis.log"))?;
    assert_eq!(log.lines().count(), h.events().len());

    h.shutdown().await?;
    assert!(namespaces_mentioning(&run)?.is_empty(), "namespaces left: {:?}", namespaces_mentioning(&run)?);
    assert!(processes_mentioning(&dir).is_empty(), "processes left: {:?}", processes_mentioning(&dir));
    assert!(!std::path::Path::new("/sys/class/net").join(format!("{run}h")).exists(), "host veth left");
    eprintln!("netns test done in {:.1?}", t0.elapsed());
    Ok(())
}

/// How many servers currently have a partition table.
async fn servers_with_rules(h: &Harness) -> usize {
    let mut n = 0;
    for i in 0..h.cluster().endpoints().len() {
        n += usize::from(h.ruleset(i).await.is_some());
    }
    n
}

/// A short seeded nemesis over every family while a client writes, then heal, check the
/// cluster works, and drop the harness without `shutdown`: `Drop` must clean up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn netns_nemesis_schedule_then_drop_cleans_up() -> anyhow::Result<()> {
    if skip("netns_nemesis_schedule_then_drop_cleans_up") {
        return Ok(());
    }
    let t0 = Instant::now();
    let tmp = tempfile::tempdir()?;
    let h = Harness::start(spec(3, tmp.path(), Isolation::Auto, 5)).await?;
    let tls = h.cluster().tls().clone();
    assert_eq!(h.cluster().isolation(), Isolation::Netns, "Auto picks Netns as root");
    let run = format!("kc{}", h.cluster().run_id());
    let dir = tmp.path().display().to_string();
    let eps = h.cluster().endpoints();
    let h = Arc::new(tokio::sync::Mutex::new(h));
    let stop = CancellationToken::new();
    let families = vec![
        NemesisFamily::Kill,
        NemesisFamily::Pause,
        NemesisFamily::Partition,
        NemesisFamily::Membership,
        NemesisFamily::Latency,
    ];
    let nemesis =
        tokio::spawn(keelson_chaos::run_nemesis(h.clone(), families, Duration::from_millis(800), 17, stop.clone()));
    let writer = {
        let stop = stop.clone();
        let client = StoreClient::with_tls(&eps, &tls)?;
        tokio::spawn(async move {
            let (mut ok, mut i) = (0u32, 0u32);
            while !stop.is_cancelled() {
                i += 1;
                match tokio::time::timeout(SECS(1), client.put(format!("/w/{i}").as_bytes(), b"x")).await {
                    Ok(Ok(_)) => ok += 1,
                    _ => client.rotate(),
                }
            }
            ok
        })
    };
    tokio::time::sleep(SECS(10)).await;
    stop.cancel();
    let events = nemesis.await?;
    let acked = writer.await?;
    eprintln!("nemesis: {} events, {acked} acknowledged writes", events.len());
    for e in &events {
        eprintln!("  {:>7.3}s {} {}", e.at.as_secs_f64(), if e.ok { "ok  " } else { "FAIL" }, e.what);
    }
    ensure!(events.len() >= 2, "the nemesis did something");
    ensure!(acked > 0, "some writes succeeded under faults");
    {
        let mut g = h.lock().await;
        g.apply(Fault::HealAll).await?;
        g.cluster().wait_healthy(SECS(30)).await?;
    }
    put_retry(&tls, &eps, "/after", "1", SECS(10)).await?;
    let h = Arc::try_unwrap(h).map_err(|_| anyhow::anyhow!("harness still shared"))?.into_inner();
    drop(h);
    assert!(namespaces_mentioning(&run)?.is_empty(), "namespaces left after drop");
    assert!(processes_mentioning(&dir).is_empty(), "processes left after drop: {:?}", processes_mentioning(&dir));
    eprintln!("nemesis test done in {:.1?}", t0.elapsed());
    Ok(())
}
