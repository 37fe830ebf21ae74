//! Watches served by any replica: ordered, exactly once, gap-free against range reads,
//! resumable on another replica, compaction reported distinctly.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::{Stream, StreamExt};
use keelson_client::api::{ReadConsistency, WatchCreate, WatchResponse, WatchResponseKind};
use keelson_client::{ClientError, StoreClient};
use keelson_mvcc::{Event, EventKind, KeyRange, RangeRequest, Revision};
use keelson_tests::{ClusterOptions, TestCluster};

fn create(prefix: &str, start: Revision) -> WatchCreate {
    WatchCreate { watch_id: 7, range: KeyRange::prefix(prefix), start_revision: start, prev_kv: true, progress_notify: false }
}

/// Collects events until `until` revision has been seen (or the stream ends).
async fn collect_until(
    stream: &mut (impl Stream<Item = Result<WatchResponse, ClientError>> + Unpin),
    until: Revision,
    out: &mut Vec<Event>,
) -> Result<(), String> {
    while out.last().map(|e| e.kv.mod_revision).unwrap_or(0) < until {
        match tokio::time::timeout(Duration::from_secs(20), stream.next()).await {
            Err(_) => return Err(format!("timed out at {:?} waiting for {until}", out.last().map(|e| e.kv.mod_revision))),
            Ok(None) => return Err("stream ended".into()),
            Ok(Some(Err(e))) => return Err(e.to_string()),
            Ok(Some(Ok(resp))) => match resp.kind {
                WatchResponseKind::Events(evs) => out.extend(evs),
                WatchResponseKind::Created { .. } | WatchResponseKind::Progress => {}
                other => return Err(format!("unexpected {other:?}")),
            },
        }
    }
    Ok(())
}

/// Applies events to a map, as a watcher's cache would.
fn replay(events: &[Event], upto: Revision) -> BTreeMap<Vec<u8>, (Vec<u8>, Revision)> {
    let mut m = BTreeMap::new();
    for e in events.iter().filter(|e| e.kv.mod_revision <= upto) {
        match e.kind {
            EventKind::Put => {
                m.insert(e.kv.key.clone(), (e.kv.value.clone(), e.kv.mod_revision));
            }
            EventKind::Delete => {
                m.remove(&e.kv.key);
            }
        }
    }
    m
}

async fn range_at(c: &StoreClient, prefix: &str, revision: Revision) -> BTreeMap<Vec<u8>, (Vec<u8>, Revision)> {
    let r = c
        .range(RangeRequest { range: KeyRange::prefix(prefix), revision, ..Default::default() }, ReadConsistency::Linearizable)
        .await
        .expect("range");
    r.response.kvs.into_iter().map(|kv| (kv.key, (kv.value, kv.mod_revision))).collect()
}

/// Writes puts and deletes over a few keys through every replica; returns the last revision.
async fn churn(cluster: &TestCluster, prefix: &str, n: usize) -> Revision {
    let mut last = 0;
    for i in 0..n {
        let c = cluster.client(i % cluster.len());
        let key = format!("{prefix}{}", i % 7);
        let r = if i % 5 == 4 {
            c.delete(KeyRange::single(key)).await.expect("delete")
        } else {
            c.put(key.as_bytes(), format!("v{i}").as_bytes()).await.expect("put")
        };
        last = r.header.revision;
    }
    last
}

fn assert_ordered_unique_gap_free(events: &[Event], from: Revision, to: Revision) {
    let mut revs: Vec<Revision> = events.iter().map(|e| e.kv.mod_revision).collect();
    assert!(revs.windows(2).all(|w| w[0] <= w[1]), "events out of order: {revs:?}");
    revs.dedup();
    // Every write in this test touches the watched prefix, and deletes of absent keys do
    // not create revisions, so every revision in [from, to] carries exactly one event.
    assert_eq!(revs, (from..=to).collect::<Vec<_>>(), "gap or duplicate in watched revisions");
    assert_eq!(events.iter().filter(|e| e.kv.mod_revision <= to).count() as i64, to - from + 1, "duplicate events");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watch_is_ordered_exactly_once_and_agrees_with_range_reads() {
    let cluster = TestCluster::start(3, ClusterOptions::default()).await.expect("cluster");
    // A watcher on replica 2 from the first revision, while writes go through all replicas.
    let (_tx, mut stream) = cluster.client(2).watch(create("/w/", 1)).await.expect("watch");
    let last = churn(&cluster, "/w/", 150).await;
    let mut events = Vec::new();
    collect_until(&mut stream, last, &mut events).await.expect("collect");
    assert_ordered_unique_gap_free(&events, 1, last);
    // The state rebuilt from the events equals a range read at several revisions, on
    // another replica.
    for at in [last / 3, last / 2, last] {
        assert_eq!(replay(&events, at), range_at(&cluster.client(1), "/w/", at).await, "mismatch at revision {at}");
    }
    // prev_kv is the key's previous value.
    let mut current: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for e in &events {
        assert_eq!(e.prev_kv.as_ref().map(|p| p.value.clone()), current.get(&e.kv.key).cloned(), "prev_kv of {e:?}");
        match e.kind {
            EventKind::Put => current.insert(e.kv.key.clone(), e.kv.value.clone()),
            EventKind::Delete => current.remove(&e.kv.key),
        };
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watch_resumes_on_another_replica_without_loss_or_duplicate() {
    let mut cluster = TestCluster::start(3, ClusterOptions::default()).await.expect("cluster");
    let first = churn(&cluster, "/r/", 40).await;
    let (_tx, mut stream) = cluster.client(0).watch(create("/r/", 1)).await.expect("watch");
    let mut events = Vec::new();
    collect_until(&mut stream, first, &mut events).await.expect("first part");
    // Replica 0 goes away mid-stream (it may be the leader).
    cluster.kill(0).await;
    let resume_from = events.last().expect("events").kv.mod_revision + 1;
    let second = churn_on(&cluster, &[1, 2], "/r/", 40).await;
    let (_tx2, mut stream2) = cluster.client(1).watch(create("/r/", resume_from)).await.expect("resume");
    collect_until(&mut stream2, second, &mut events).await.expect("second part");
    assert_ordered_unique_gap_free(&events, 1, second);
    assert_eq!(replay(&events, second), range_at(&cluster.client(2), "/r/", second).await);
    cluster.shutdown().await;
}

async fn churn_on(cluster: &TestCluster, replicas: &[usize], prefix: &str, n: usize) -> Revision {
    let mut last = 0;
    for i in 0..n {
        let c = cluster.client(replicas[i % replicas.len()]);
        last = c.put(format!("{prefix}{}", i % 7).as_bytes(), format!("w{i}").as_bytes()).await.expect("put").header.revision;
    }
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watch_from_a_compacted_revision_gets_a_compacted_error() {
    let cluster = TestCluster::start(3, ClusterOptions::default()).await.expect("cluster");
    let last = churn(&cluster, "/c/", 30).await;
    let c = cluster.client(1);
    c.compact(20).await.expect("compact");
    // Reads before the compaction point are refused distinctly; at or after it they work.
    let err = c
        .range(RangeRequest { range: KeyRange::prefix("/c/"), revision: 10, ..Default::default() }, ReadConsistency::Linearizable)
        .await
        .expect_err("compacted read");
    assert!(matches!(err, ClientError::Store(keelson_client::api::StoreError::Compacted { compacted: 20 })), "{err:?}");
    assert!(!range_at(&c, "/c/", 20).await.is_empty());
    // Every replica applied the same compaction. A follower applies it a moment after the
    // leader acknowledged it, and a watch is served from what its replica applied: a
    // linearizable read on each replica first waits that replica up to the compaction.
    for i in 0..3 {
        let err = cluster
            .client(i)
            .range(RangeRequest { range: KeyRange::prefix("/c/"), revision: 10, ..Default::default() }, ReadConsistency::Linearizable)
            .await
            .expect_err("compacted read");
        assert!(matches!(err, ClientError::Store(keelson_client::api::StoreError::Compacted { compacted: 20 })), "replica {i}: {err:?}");
        let (_tx, mut s) = cluster.client(i).watch(create("/c/", 5)).await.expect("watch");
        let mut saw = None;
        while let Some(Ok(resp)) = s.next().await {
            match resp.kind {
                WatchResponseKind::Compacted { compacted } => {
                    saw = Some(compacted);
                    break;
                }
                WatchResponseKind::Created { .. } => {}
                other => panic!("replica {i}: expected Compacted, got {other:?}"),
            }
        }
        assert_eq!(saw, Some(20), "replica {i}");
    }
    // Watching from just after the compaction works and replays the rest.
    let (_tx, mut s) = cluster.client(2).watch(create("/c/", 21)).await.expect("watch");
    let mut events = Vec::new();
    collect_until(&mut s, last, &mut events).await.expect("collect");
    assert_ordered_unique_gap_free(&events, 21, last);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watch_from_now_is_linearizable_and_sends_progress_on_request() {
    let cluster = TestCluster::start(3, ClusterOptions::default()).await.expect("cluster");
    let before = cluster.client(0).put(b"/n/a", b"1").await.expect("put").header.revision;
    // Without prev_kv, events must not carry the previous value.
    let (tx, mut s) =
        cluster.client(2).watch(WatchCreate { prev_kv: false, ..create("/n/", 0) }).await.expect("watch");
    let start = match s.next().await {
        Some(Ok(WatchResponse { kind: WatchResponseKind::Created { start_revision }, .. })) => start_revision,
        other => panic!("expected Created, got {other:?}"),
    };
    assert!(start > before, "a watch from now started at {start}, before the acknowledged write at {before}");
    let after = cluster.client(1).put(b"/n/a", b"2").await.expect("put").header.revision;
    let mut events = Vec::new();
    collect_until(&mut s, after, &mut events).await.expect("collect");
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].kv.key, b"/n/a");
    assert_eq!(events[0].kv.value, b"2");
    assert_eq!(events[0].prev_kv, None, "prev_kv sent though not requested");
    tx.send(keelson_client::api::WatchRequest::Progress).await.expect("progress request");
    match tokio::time::timeout(Duration::from_secs(10), s.next()).await {
        Ok(Some(Ok(WatchResponse { kind: WatchResponseKind::Progress, header, .. }))) => {
            assert!(header.revision >= after, "bookmark at {} behind delivered revision {after}", header.revision)
        }
        other => panic!("expected a progress notification, got {other:?}"),
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_watcher_that_stops_reading_is_cut_off_and_resumes_without_loss() {
    let opts = ClusterOptions { slow_watcher_timeout: Duration::from_millis(500), ..Default::default() };
    let cluster = TestCluster::start(3, opts).await.expect("cluster");
    let (_tx, mut s) = cluster.client(1).watch(create("/slow/", 1)).await.expect("watch");
    match s.next().await {
        Some(Ok(WatchResponse { kind: WatchResponseKind::Created { .. }, .. })) => {}
        other => panic!("expected Created, got {other:?}"),
    }
    // Stop reading while far more than the stream's buffers hold is written.
    let big = vec![b'x'; 16 * 1024];
    let c = cluster.client(0);
    let mut last = 0;
    for i in 0..600 {
        last = c.put(format!("/slow/{}", i % 10).as_bytes(), &big).await.expect("put").header.revision;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let slow = cluster.running(1).expect("running").replica.stats().watches_canceled_slow.get();
    assert!(slow >= 1, "the slow watcher was not canceled");
    // Drain what was queued: the stream ends with an error before everything arrived.
    let mut events = Vec::new();
    let mut ended_with_error = false;
    while let Ok(Some(item)) = tokio::time::timeout(Duration::from_secs(10), s.next()).await {
        match item {
            Ok(WatchResponse { kind: WatchResponseKind::Events(evs), .. }) => events.extend(evs),
            Ok(other) => panic!("unexpected {other:?}"),
            Err(e) => {
                assert!(e.to_string().contains("resume from revision"), "{e}");
                ended_with_error = true;
                break;
            }
        }
    }
    assert!(ended_with_error, "stream did not end with a resumable error");
    let seen = events.last().map(|e| e.kv.mod_revision).unwrap_or(0);
    assert!(seen < last, "the slow watcher received everything; the test did not overflow it");
    // Resuming from the last revision seen, on another replica, fills in the rest.
    let (_tx2, mut s2) = cluster.client(2).watch(create("/slow/", seen + 1)).await.expect("resume");
    collect_until(&mut s2, last, &mut events).await.expect("resume collect");
    assert_ordered_unique_gap_free(&events, 1, last);
    cluster.shutdown().await;
}
