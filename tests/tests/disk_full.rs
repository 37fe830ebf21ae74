//! A replica whose disk fills: one replica's data directory on its own small tmpfs, filled
//! by the test. The replica stops appending (a clear error, a metric), leadership leaves it,
//! the other replicas keep taking writes, and once space returns it catches up.
//!
//! With a majority of voters low, writes fail with a clear error and reads are served.
//!
//! Needs root (to mount the tmpfs). Under CI (`CI` set) it runs; elsewhere a non-root run
//! skips and says so.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use keelson_client::api::ReadConsistency;
use keelson_mvcc::{KeyRange, RangeRequest};
use keelson_tests::{ClusterOptions, TestCluster};

const RESERVE: u64 = 32 << 20;

/// A tmpfs mounted for the test, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size_mib: u64) -> Self {
        std::fs::create_dir_all(at).expect("mount point");
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_mib}m"), "keelson-test-disk"])
            .arg(at)
            .status()
            .expect("run mount");
        assert!(ok.success(), "mount tmpfs at {}", at.display());
        Self(at.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// True as root; otherwise says loudly that the test skips (never under CI, which runs as
/// root).
fn root_or_skip() -> bool {
    let root = Command::new("id").arg("-u").output().map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0").unwrap_or(false);
    if !root {
        assert!(std::env::var_os("CI").is_none(), "CI runs as root; this test needs root to mount a tmpfs");
        eprintln!("SKIPPED: disk-full test needs root (mount a tmpfs); run as root or in CI");
    }
    root
}

/// Fills the file system holding `dir` with `fill`, then gives back `leave` bytes.
fn fill_leaving(fill: &Path, leave: u64) {
    let mut f = std::fs::File::create(fill).expect("fill file");
    let chunk = vec![0u8; 1 << 20];
    let mut written = 0u64;
    loop {
        match f.write(&chunk) {
            Ok(0) => break,
            Ok(n) => written += n as u64,
            Err(_) => break,
        }
    }
    f.set_len(written.saturating_sub(leave)).expect("give space back");
    f.sync_all().ok();
}

fn metric(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

async fn eventually<F: FnMut() -> bool>(what: &str, limit: Duration, mut ok: F) {
    let deadline = Instant::now() + limit;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_whose_disk_fills_stops_appending_hands_over_leadership_and_catches_up_when_space_returns() {
    if !root_or_skip() {
        return;
    }
    let base = tempfile::tempdir().expect("tempdir");
    // Replica index 0 (keelson-1) initializes the cluster and so starts as leader: its disk
    // is the one that fills, so leadership has to move.
    let small = Tmpfs::mount(&base.path().join("keelson-1"), 256);
    let opts = ClusterOptions { base_dir: Some(base.path().to_path_buf()), disk_reserve: Some(RESERVE), ..Default::default() };
    let cluster = TestCluster::start(3, opts).await.expect("cluster");
    let all = cluster.client_all(1);
    all.put(b"/disk/before", b"1").await.expect("write before");

    let full = cluster.running(0).expect("running").replica.clone();
    let full_id = full.id();
    fill_leaving(&small.0.join("fill"), 8 << 20);
    eventually("the replica reports its disk low", Duration::from_secs(10), || {
        metric(&keelson_replica::metrics::render(&full), "keelson_storage_space_low") == Some(1)
    })
    .await;
    // Leadership leaves the full replica.
    eventually("leadership moves off the full replica", Duration::from_secs(20), || {
        let other = cluster.running(1).expect("running").replica.leader();
        other.is_some_and(|(id, _)| id != full_id)
    })
    .await;

    // The others keep taking writes, through any replica (the full one forwards).
    for i in 0..30 {
        let c = cluster.client(i % 3);
        let mut tries = 0;
        loop {
            match c.put(format!("/disk/during/{i:02}").as_bytes(), b"x").await {
                Ok(_) => break,
                Err(e) if tries < 20 => {
                    tries += 1;
                    eprintln!("write {i} through replica {} retried: {e}", i % 3);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("write {i} during the full disk failed: {e}"),
            }
        }
    }
    let text = keelson_replica::metrics::render(&full);
    assert!(metric(&text, "keelson_storage_appends_refused").unwrap_or(0) > 0, "the full replica refused appends:\n{text}");
    assert!(metric(&text, "keelson_storage_free_bytes").expect("free bytes") < RESERVE);
    // Nothing written during the fault reached its log.
    let count = |c: &keelson_client::StoreClient| {
        let c = c.clone();
        async move {
            c.range(
                RangeRequest { range: KeyRange::prefix("/disk/during/"), count_only: true, ..Default::default() },
                ReadConsistency::Serializable,
            )
            .await
            .expect("count")
            .response
            .count
        }
    };
    assert_eq!(count(&cluster.client(0)).await, 0, "the full replica applied nothing new");
    assert_eq!(count(&cluster.client(1)).await, 30);

    // Space returns: the replica appends again and catches up from the log.
    std::fs::remove_file(small.0.join("fill")).expect("free the space");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if count(&cluster.client(0)).await == 30 {
            break;
        }
        assert!(Instant::now() < deadline, "the replica caught up after space returned");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eventually("the low-space metric clears", Duration::from_secs(10), || {
        metric(&keelson_replica::metrics::render(&full), "keelson_storage_space_low") == Some(0)
    })
    .await;
    // And it takes its part again: a write through it, read back linearizably from it.
    cluster.client(0).put(b"/disk/after", b"2").await.expect("write after");
    let r = cluster
        .client(0)
        .range(RangeRequest { range: KeyRange::single("/disk/after"), ..Default::default() }, ReadConsistency::Linearizable)
        .await
        .expect("read after");
    assert_eq!(r.response.kvs.len(), 1);
    cluster.shutdown().await;
    drop(small);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_a_majority_low_on_disk_writes_fail_cleanly_reads_are_served_and_nothing_acknowledged_is_lost() {
    if !root_or_skip() {
        return;
    }
    let base = tempfile::tempdir().expect("tempdir");
    let small: Vec<Tmpfs> = ["keelson-2", "keelson-3"].iter().map(|n| Tmpfs::mount(&base.path().join(n), 256)).collect();
    let opts = ClusterOptions { base_dir: Some(base.path().to_path_buf()), disk_reserve: Some(RESERVE), ..Default::default() };
    let cluster = TestCluster::start(3, opts).await.expect("cluster");
    cluster.client_all(0).put(b"/maj/before", b"1").await.expect("write before");
    let healthy_id = cluster.running(0).expect("running").replica.id();

    for fs in &small {
        fill_leaving(&fs.0.join("fill"), 8 << 20);
    }
    for i in [1, 2] {
        let r = cluster.running(i).expect("running").replica.clone();
        eventually("a filled replica reports its disk low", Duration::from_secs(10), || {
            metric(&keelson_replica::metrics::render(&r), "keelson_storage_space_low") == Some(1)
        })
        .await;
    }
    // Only the healthy replica may lead; a low one hands leadership over to it.
    eventually("the replica with space leads", Duration::from_secs(20), || {
        cluster.running(0).expect("running").replica.leader().is_some_and(|(id, _)| id == healthy_id)
    })
    .await;

    // The first write may be appended before the peers have refused once: it is
    // answered as soon as a majority refuses (its outcome unknown: the entry commits
    // when space returns), not held until then. Later writes are refused at once, with
    // the reason.
    let pending = tokio::spawn({
        let c = cluster.client(0);
        async move { c.put(b"/maj/pending", b"p").await }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut attempt = 0;
    let (refusal, refused_key) = loop {
        assert!(Instant::now() < deadline, "writes were never refused for space");
        attempt += 1;
        let key = format!("/maj/attempt-{attempt}");
        match tokio::time::timeout(Duration::from_secs(2), cluster.client(0).put(key.as_bytes(), b"r")).await {
            Ok(Err(e)) if e.to_string().contains("outcome is unknown") => eprintln!("write appended, then answered: {e}"),
            Ok(Err(e)) if e.to_string().contains("insufficient disk space") => break (e.to_string(), key),
            Ok(Err(e)) => eprintln!("write refused otherwise: {e}"),
            Ok(Ok(_)) => panic!("a write was acknowledged with a majority of voters out of space"),
            Err(_) => eprintln!("write still waiting for a commit"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(refusal.contains("majority"), "{refusal}");
    // Reads are served, linearizably, by every replica.
    for i in 0..3 {
        let r = cluster
            .client(i)
            .range(RangeRequest { range: KeyRange::single("/maj/before"), ..Default::default() }, ReadConsistency::Linearizable)
            .await
            .unwrap_or_else(|e| panic!("linearizable read on replica {i} with a majority low: {e}"));
        assert_eq!(r.response.kvs.len(), 1);
    }

    // The first write raced the refusals: it committed, or was appended and answered
    // "outcome unknown" (its entry commits when space returns), or came after the first
    // refusal and was refused before anything was appended.
    let pending_written = match tokio::time::timeout(Duration::from_secs(30), pending)
        .await
        .expect("the first write is answered while space is still short")
        .expect("task")
    {
        Ok(_) => {
            eprintln!("the first write committed before the peers filled");
            true
        }
        Err(e) if e.to_string().contains("outcome is unknown") => true,
        Err(e) if e.to_string().contains("insufficient disk space") => {
            assert!(e.to_string().contains("majority"), "{e}");
            false
        }
        Err(e) => panic!("the first write's answer: {e}"),
    };

    // Space returns: the first write's entry commits, new writes are taken, and every
    // replica has all that was written.
    for fs in &small {
        std::fs::remove_file(fs.0.join("fill")).expect("free the space");
    }
    let mut tries = 0;
    while let Err(e) = cluster.client(1).put(b"/maj/after", b"a").await {
        tries += 1;
        assert!(tries < 50, "writes resume after space returned: {e}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for i in 0..3 {
        for (key, written) in [("/maj/before", true), ("/maj/pending", pending_written), (refused_key.as_str(), false), ("/maj/after", true)] {
            let r = cluster
                .client(i)
                .range(RangeRequest { range: KeyRange::single(key), ..Default::default() }, ReadConsistency::Linearizable)
                .await
                .expect("read after");
            assert_eq!(r.response.kvs.len(), usize::from(written), "{key} on replica {i}");
        }
    }
    cluster.shutdown().await;
    drop(small);
}

/// Removes a file on drop.
struct RemovedOnDrop(PathBuf);

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A disk that fills to its last byte between two of the guard's checks (another program
/// wrote it full; here, no reserve at all). RocksDB preallocated its log, so appends still
/// fit; the first write that needs new space is a snapshot. It waits for space instead of
/// stopping the replica's Raft core: the replica keeps leading and serving, and writes the
/// snapshot once space returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_whose_disk_fills_to_the_last_byte_keeps_serving_and_writes_its_snapshot_when_space_returns() {
    if !root_or_skip() {
        return;
    }
    let base = tempfile::tempdir().expect("tempdir");
    // keelson-1 initializes the cluster and leads: the worst place for the failure.
    let small = Tmpfs::mount(&base.path().join("keelson-1"), 256);
    const WRITES: usize = 30;
    let opts = ClusterOptions { base_dir: Some(base.path().to_path_buf()), disk_reserve: Some(0), ..Default::default() };
    let cluster = TestCluster::start(3, opts).await.expect("cluster");
    cluster.client_all(1).put(b"/enospc/before", b"1").await.expect("write before");
    fill_leaving(&small.0.join("fill"), 0);
    // If the test fails, the space returns before the cluster stops.
    let _fill = RemovedOnDrop(small.0.join("fill"));
    let full = cluster.running(0).expect("running").replica.clone();
    full.raft().trigger().snapshot().await.expect("ask for a snapshot");
    eventually("the snapshot waits for space", Duration::from_secs(10), || {
        metric(&keelson_replica::metrics::render(&full), "keelson_storage_writes_waiting_for_space") == Some(1)
    })
    .await;
    for i in 0..WRITES {
        let c = cluster.client(1 + i % 2);
        let mut tries = 0;
        loop {
            match tokio::time::timeout(Duration::from_secs(5), c.put(format!("/enospc/during/{i:02}").as_bytes(), b"x")).await {
                Ok(Ok(_)) => break,
                other if tries < 60 => {
                    tries += 1;
                    eprintln!("write {i} retried: {:?}", other.map(|r| r.err().map(|e| e.to_string())));
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                other => panic!("write {i} with one replica's disk full failed: {:?}", other.map(|r| r.err().map(|e| e.to_string()))),
            }
        }
    }
    std::fs::remove_file(small.0.join("fill")).expect("free the space");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = tokio::time::timeout(
            Duration::from_secs(5),
            cluster.client(0).range(
                RangeRequest { range: KeyRange::prefix("/enospc/during/"), count_only: true, ..Default::default() },
                ReadConsistency::Linearizable,
            ),
        )
        .await;
        match r {
            Ok(Ok(r)) if r.response.count == WRITES as i64 => break,
            other => {
                assert!(Instant::now() < deadline, "the replica took its part again after space returned: {:?}", other.map(|r| r.map(|r| r.response.count).map_err(|e| e.to_string())));
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    cluster.client(0).put(b"/enospc/after", b"2").await.expect("a write through the replica after space returned");
    eventually("the snapshot is written once space returns", Duration::from_secs(10), || {
        let text = keelson_replica::metrics::render(&full);
        metric(&text, "keelson_storage_writes_waiting_for_space") == Some(0) && metric(&text, "keelson_storage_space_retries").unwrap_or(0) > 0
    })
    .await;
    assert!(full.snapshot_bytes() > 0, "the replica has a snapshot");
    cluster.shutdown().await;
    drop(small);
}
