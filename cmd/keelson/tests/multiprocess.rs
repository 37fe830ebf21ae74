//! Tests that run the real `keelson` binary as separate processes: durability under
//! repeated `kill -9`, `keelson up` with resume, `keelson status --json`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use keelson_client::api::ReadConsistency;
use keelson_runner::{Cluster, ClusterSpec};
use keelson_mvcc::{KeyRange, RangeRequest};

fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_keelson"))
}

async fn start(servers: usize, dir: PathBuf, extra: &[&str]) -> Cluster {
    let mut spec = ClusterSpec::loopback(servers, binary(), dir);
    spec.server_args = extra.iter().map(|s| s.to_string()).collect();
    Cluster::start(spec, |m| eprintln!("cluster: {m}")).await.expect("cluster starts")
}

/// Under concurrent writes, replicas (the leader every other time) are killed with
/// SIGKILL and restarted, repeatedly. Every write that was acknowledged must be readable
/// afterwards, with the acknowledged value.
async fn durability_under_kill_9(servers: usize) {
    let tmp = tempfile::tempdir().expect("tmp");
    // Small snapshot interval so restarts also go through snapshots and purged logs.
    let mut cluster = start(servers, tmp.path().join("c"), &["--snapshot-every", "300", "--keep-logs", "50"]).await;
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..8 {
        let client = cluster.client().starting_at(w);
        let stop = stop.clone();
        writers.push(tokio::spawn(async move {
            let mut acked: BTreeMap<String, String> = BTreeMap::new();
            let mut attempts = 0u64;
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("/durable/{w}/{i:06}");
                let value = format!("value-{w}-{i}");
                attempts += 1;
                match tokio::time::timeout(Duration::from_secs(3), client.put(key.as_bytes(), value.as_bytes())).await {
                    Ok(Ok(_)) => {
                        acked.insert(key, value);
                    }
                    // Unknown outcome or refused: not acknowledged, so nothing is promised.
                    Ok(Err(_)) | Err(_) => {
                        client.rotate();
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
                i += 1;
            }
            (acked, attempts)
        }));
    }
    for round in 0..6 {
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let victim = if round % 2 == 0 {
            cluster.leader().await.unwrap_or(round % servers)
        } else {
            (round * 7 + 1) % servers
        };
        eprintln!("round {round}: kill -9 server {victim}");
        cluster.kill(victim).await.expect("kill");
        tokio::time::sleep(Duration::from_millis(800)).await;
        cluster.restart(victim).await.expect("restart");
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, Ordering::Relaxed);
    let mut acked = BTreeMap::new();
    let mut attempts = 0;
    for w in writers {
        let (a, n) = w.await.expect("writer");
        acked.extend(a);
        attempts += n;
    }
    eprintln!("{} of {attempts} writes acknowledged", acked.len());
    assert!(acked.len() > 100, "too few acknowledged writes to mean anything: {}", acked.len());
    cluster.wait_healthy(Duration::from_secs(60)).await.expect("cluster recovers");
    // Check on every replica, linearizably.
    for i in 0..servers {
        let c = cluster.client().starting_at(i);
        let r = c
            .range(RangeRequest { range: KeyRange::prefix("/durable/"), ..Default::default() }, ReadConsistency::Linearizable)
            .await
            .expect("read back");
        let present: BTreeMap<String, String> = r
            .response
            .kvs
            .into_iter()
            .map(|kv| (String::from_utf8(kv.key).expect("utf8"), String::from_utf8(kv.value).expect("utf8")))
            .collect();
        let lost: Vec<_> = acked.iter().filter(|(k, v)| present.get(*k) != Some(*v)).take(5).collect();
        assert!(lost.is_empty(), "replica {i}: acknowledged writes lost or wrong, e.g. {lost:?}");
    }
    cluster.stop(Duration::from_secs(10)).await.expect("stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_replicas_lose_no_acknowledged_write_under_repeated_kill_9() {
    durability_under_kill_9(3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn five_replicas_lose_no_acknowledged_write_under_repeated_kill_9() {
    durability_under_kill_9(5).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn keelson_up_writes_cluster_json_stops_cleanly_and_resumes() {
    use std::io::{BufRead, BufReader};
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("up");
    let spawn_up = || {
        std::process::Command::new(binary())
            .args(["up", "--servers", "3", "--base-port", "0", "--data-dir"])
            .arg(&dir)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("keelson up")
    };
    // What `up` printed after the cluster was ready.
    let later_lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let wait_ready = |child: &mut std::process::Child| {
        let out = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(out).lines();
        for line in lines.by_ref() {
            let line = line.expect("line");
            eprintln!("up: {line}");
            if line.starts_with("Cluster ready") {
                // Keep draining in the background so `up` never blocks on a full pipe.
                let later = later_lines.clone();
                std::thread::spawn(move || {
                    for line in lines.map_while(Result::ok) {
                        eprintln!("up: {line}");
                        later.lock().unwrap().push(line);
                    }
                });
                return;
            }
        }
        panic!("keelson up exited before the cluster was ready");
    };
    let status_json = |dir: &PathBuf| -> serde_json::Value {
        let out = std::process::Command::new(binary()).arg("status").arg("--json").arg("--cluster-dir").arg(dir).output().expect("status");
        assert!(out.status.success(), "status failed: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("status --json is JSON")
    };

    let mut up = spawn_up();
    wait_ready(&mut up);
    let manifest: keelson_runner::Manifest =
        serde_json::from_slice(&std::fs::read(dir.join("cluster.json")).expect("cluster.json")).expect("manifest");
    assert_eq!(manifest.servers().count(), 3);
    assert!(manifest.servers().all(|s| s.running && s.pid.is_some()));
    let st = status_json(&dir);
    let members = st["members"].as_array().expect("members");
    assert_eq!(members.len(), 3);
    assert!(st["leader"].is_string());
    assert_eq!(members.iter().filter(|m| m["role"] == "leader").count(), 1);
    let put = std::process::Command::new(binary())
        .args(["kv", "put", "--cluster-dir"])
        .arg(&dir)
        .args(["/up/key", "kept"])
        .output()
        .expect("put");
    assert!(put.status.success());

    // With the first server listed in cluster.json stopped (SIGSTOP: it accepts
    // connections and never answers), `kv put --cluster-dir` moves on to the others; if
    // the stopped server led, a put succeeds once the others have elected a leader.
    let first = manifest.servers().next().and_then(|s| s.pid).expect("first server's pid");
    // SAFETY: kill(2) on a server this test's `keelson up` started.
    unsafe { libc::kill(first as i32, libc::SIGSTOP) };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut last = String::new();
    let moved_on = loop {
        let mut child = std::process::Command::new(binary())
            .args(["kv", "put", "--cluster-dir"])
            .arg(&dir)
            .args(["/up/first-down", "ok"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("put");
        let attempt_end = std::time::Instant::now() + Duration::from_secs(15);
        let status = loop {
            if let Some(st) = child.try_wait().expect("wait") {
                break Some(st);
            }
            if std::time::Instant::now() > attempt_end {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut err = String::new();
        use std::io::Read;
        let _ = child.stderr.take().map(|mut e| e.read_to_string(&mut err));
        match status {
            Some(st) if st.success() => break true,
            Some(_) => last = err,
            None => last = "a put did not finish within 15 s".into(),
        }
        if std::time::Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    unsafe { libc::kill(first as i32, libc::SIGCONT) };
    assert!(moved_on, "kv put --cluster-dir never got past the stopped first server: {last}");

    // A server that dies by itself (kill -9 from outside, as a crash would) is started
    // again by `up`, which says so; it comes back on its data and serves.
    let second = manifest.servers().nth(1).expect("second server");
    unsafe { libc::kill(second.pid.expect("pid") as i32, libc::SIGKILL) };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let (restarted_pid, after_restart) = loop {
        let now: keelson_runner::Manifest = serde_json::from_slice(&std::fs::read(dir.join("cluster.json")).expect("cluster.json")).expect("manifest");
        let entry = now.servers().nth(1).expect("second server").clone();
        if let Some(pid) = entry.pid.filter(|p| Some(*p) != second.pid) {
            break (pid, now);
        }
        assert!(std::time::Instant::now() < deadline, "keelson up did not restart {} within 60 s: {:?}", second.name, later_lines.lock().unwrap());
        std::thread::sleep(Duration::from_millis(200));
    };
    let said = later_lines.lock().unwrap().clone();
    assert!(said.iter().any(|l| l.contains(&format!("{} exited (killed by signal 9); restarting it in 1 s", second.name))), "{said:?}");
    assert!(said.iter().any(|l| l.contains(&format!("{} restarted (pid {restarted_pid})", second.name))), "{said:?}");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let st = status_json(&dir);
        let healthy = st["members"].as_array().into_iter().flatten().filter(|m| m["reachable"] == true).count();
        if healthy == 3 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the restarted server never answered again: {st}");
        std::thread::sleep(Duration::from_millis(300));
    }

    // SIGTERM stops every server.
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(up.id() as i32, libc::SIGTERM) };
    let code = up.wait().expect("wait");
    assert!(code.success(), "keelson up exited with {code}");
    for s in manifest.servers().chain(after_restart.servers()) {
        let alive = unsafe { libc::kill(s.pid.expect("pid") as i32, 0) } == 0;
        assert!(!alive, "{} still running after keelson up stopped", s.name);
    }

    // Running it again resumes the same cluster with its data.
    let mut up = spawn_up();
    wait_ready(&mut up);
    let st2 = status_json(&dir);
    let ids = |v: &serde_json::Value| {
        let mut ids: Vec<String> = v["members"].as_array().expect("members").iter().map(|m| m["id"].to_string()).collect();
        ids.sort();
        ids
    };
    assert_eq!(ids(&st), ids(&st2), "resumed cluster has other members");
    let get = std::process::Command::new(binary()).args(["kv", "get", "--cluster-dir"]).arg(&dir).arg("/up/key").output().expect("get");
    assert!(String::from_utf8_lossy(&get.stdout).contains("/up/key = kept"), "data lost across resume: {}", String::from_utf8_lossy(&get.stdout));
    unsafe { libc::kill(up.id() as i32, libc::SIGTERM) };
    assert!(up.wait().expect("wait").success());
}

/// A tmpfs mounted for a test, unmounted (lazily) on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &std::path::Path, size_mib: u64) -> Self {
        std::fs::create_dir_all(at).expect("mount point");
        let ok = std::process::Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={size_mib}m"), "keelson-test-disk"]).arg(at).status().expect("mount");
        assert!(ok.success(), "mount a tmpfs at {}", at.display());
        Tmpfs(at.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// With no reserve, a server's disk is filled to its last byte under a write load. Once
/// RocksDB's preallocated log is used up a write of its fails: the server stops (its Raft
/// core stops and it exits, or RocksDB aborts it), and `keelson up`'s supervisor starts
/// it again, with its back-off, for as long as the disk stays full. The other two keep
/// taking writes; once space returns the restarted server catches up with every
/// acknowledged write.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_server_whose_disk_fills_to_the_last_byte_is_restarted_until_space_returns_and_loses_nothing() {
    if !keelson_runner::cmd::is_root() {
        assert!(std::env::var_os("CI").is_none(), "CI runs as root; this test needs root to mount a tmpfs");
        eprintln!("SKIPPED: the full-disk restart test needs root (to mount a tmpfs); run as root or in CI");
        return;
    }
    use keelson_runner::{RestartPolicy, SuperviseEvent, Supervisor};
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("c");
    let disk = Tmpfs::mount(&dir.join("keelson-3"), 160);
    let mut cluster = start(3, dir.clone(), &["--storage-reserve", "0"]).await;
    let policy = RestartPolicy { first: Duration::from_millis(200), max: Duration::from_secs(2), healthy_after: Duration::from_secs(60) };
    let mut sup = Supervisor::new(policy, 3, std::time::Instant::now());
    let mut events: Vec<SuperviseEvent> = Vec::new();
    let exits = |events: &[SuperviseEvent]| events.iter().filter(|e| matches!(e, SuperviseEvent::Exited { name, .. } if name == "keelson-3")).count();

    let fill = disk.0.join("fill");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&fill).expect("fill file");
        let chunk = vec![0u8; 1 << 20];
        while matches!(f.write(&chunk), Ok(n) if n > 0) {}
        let _ = f.sync_all();
    }
    let client = cluster.client();
    let value = vec![b'v'; 64 << 10];
    let mut acked: Vec<String> = Vec::new();
    let mut i = 0usize;
    while exits(&events) == 0 {
        let key = format!("/full-disk/{i:05}");
        match tokio::time::timeout(Duration::from_secs(5), client.put(key.as_bytes(), &value)).await {
            Ok(Ok(_)) => acked.push(key),
            _ => client.rotate(),
        }
        events.extend(cluster.supervise(&mut sup, std::time::Instant::now()));
        i += 1;
        assert!(i < 20_000, "20,000 writes of 64 KiB to a full disk and keelson-3 still runs");
    }
    eprintln!("keelson-3 stopped after {} acknowledged writes: {events:?}", acked.len());
    // While the disk stays full the supervisor keeps trying, and the others take writes.
    let until = std::time::Instant::now() + Duration::from_secs(4);
    while std::time::Instant::now() < until {
        let key = format!("/full-disk/{i:05}");
        if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(5), client.put(key.as_bytes(), b"small")).await {
            acked.push(key);
        } else {
            client.rotate();
        }
        i += 1;
        events.extend(cluster.supervise(&mut sup, std::time::Instant::now()));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(events.iter().any(|e| matches!(e, SuperviseEvent::Restarted { name, .. } if name == "keelson-3")), "{events:?}");

    std::fs::remove_file(&fill).expect("free the space");
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        events.extend(cluster.supervise(&mut sup, std::time::Instant::now()));
        if cluster.is_running(2) && cluster.wait_healthy(Duration::from_secs(2)).await.is_ok() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "keelson-3 never came back once space returned: {events:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let r = cluster
        .client()
        .starting_at(2)
        .range(RangeRequest { range: KeyRange::prefix("/full-disk/"), keys_only: true, ..Default::default() }, ReadConsistency::Linearizable)
        .await
        .expect("read back");
    let present: std::collections::BTreeSet<String> = r.response.kvs.into_iter().map(|kv| String::from_utf8(kv.key).expect("utf8")).collect();
    let lost: Vec<&String> = acked.iter().filter(|k| !present.contains(*k)).take(5).collect();
    assert!(lost.is_empty(), "acknowledged writes lost, e.g. {lost:?} ({} acknowledged)", acked.len());
    eprintln!("keelson-3 exited {} times while its disk was full; {} writes acknowledged, none lost", exits(&events), acked.len());
    cluster.stop(Duration::from_secs(10)).await.expect("stop");
    drop(disk);
}
