//! kube-rs against the API: a watcher/reflector over pods stays consistent while the
//! replica it watches through (the Raft leader) is killed; it resumes on another
//! replica from its last resourceVersion, without a re-list, and ends with exactly the
//! cluster's state.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use keelson_tests::api::{ApiCluster, FailoverProxy};
use keelson_tests::ClusterOptions;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::{Api, ResourceExt};
use serde_json::json;

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "w"}},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]}
    }))
    .unwrap()
}

/// Retries a write while the cluster elects a leader (503) — only on errors that mean
/// the write did not happen.
async fn retry<T, F, Fut>(mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match f().await {
            Ok(v) => return v,
            Err(kube::Error::Api(s)) if s.code == 503 && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("write failed: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reflector_survives_failover_of_its_replica() {
    let mut c = ApiCluster::start(3, ClusterOptions::default()).await.unwrap();
    let leader = c.store.leader().await.unwrap();
    let others: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    // The watcher reaches the cluster through a proxy that prefers the leader.
    let proxy = FailoverProxy::start(vec![c.api_addr(leader), c.api_addr(others[0]), c.api_addr(others[1])]).await.unwrap();
    let watch_api: Api<Pod> = Api::namespaced(c.kube_client_for(proxy.addr).await.unwrap(), "default");
    // Writes go through a replica that stays up.
    let write_api: Api<Pod> = Api::namespaced(c.kube_client(others[0]).await.unwrap(), "default");
    // Wait for the default namespace.
    retry(|| { let a = write_api.clone(); async move { a.list(&ListParams::default()).await } }).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while write_api.create(&PostParams::default(), &pod("probe")).await.is_err() {
        assert!(tokio::time::Instant::now() < deadline, "default namespace never appeared");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let (reader, writer) = reflector::store::<Pod>();
    let inits = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(AtomicUsize::new(0));
    let (i2, e2) = (inits.clone(), errors.clone());
    let cfg = watcher::Config::default().timeout(30);
    let stream = watcher(watch_api.clone(), cfg)
        .inspect(move |e| match e {
            Ok(watcher::Event::Init) => {
                i2.fetch_add(1, Ordering::SeqCst);
            }
            Err(_) => {
                e2.fetch_add(1, Ordering::SeqCst);
            }
            _ => {}
        })
        .default_backoff()
        .reflect(writer)
        .applied_objects();
    let drain = tokio::spawn(async move {
        let mut s = std::pin::pin!(stream);
        loop {
            match s.try_next().await {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) => {}
            }
        }
    });
    reader.wait_until_ready().await.unwrap();

    let pp = PatchParams::default();
    for round in 0..3 {
        for i in 0..20 {
            let name = format!("p{round}-{i}");
            retry(|| { let (a, p) = (write_api.clone(), pod(&name)); async move { a.create(&PostParams::default(), &p).await } }).await;
            if i % 3 == 0 {
                let patch = Patch::Merge(json!({"metadata": {"labels": {"round": round.to_string()}}}));
                retry(|| { let (a, n, pp, patch) = (write_api.clone(), name.clone(), pp.clone(), patch.clone()); async move { a.patch(&n, &pp, &patch).await } }).await;
            }
            if i % 5 == 0 {
                retry(|| { let (a, n) = (write_api.clone(), name.clone()); async move { a.delete(&n, &DeleteParams::default()).await } }).await;
            }
            if round == 1 && i == 10 {
                // Kill the watcher's replica (the leader) in the middle of the writes.
                c.kill(leader).await;
            }
        }
    }

    // The reflector must converge on exactly the cluster's state.
    let want: BTreeMap<String, String> = retry(|| { let a = write_api.clone(); async move { a.list(&ListParams::default()).await } })
        .await
        .items
        .into_iter()
        .map(|p| (p.name_any(), p.resource_version().unwrap_or_default()))
        .collect();
    assert_eq!(want.len(), 1 + 3 * 20 - 3 * 4, "probe + created - deleted");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let got: BTreeMap<String, String> =
            reader.state().iter().map(|p| (p.name_any(), p.resource_version().unwrap_or_default())).collect();
        if got == want {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "reflector diverged:\n got {got:?}\nwant {want:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_ne!(proxy.target() % 3, 0, "the proxy moved off the killed replica");
    assert_eq!(inits.load(Ordering::SeqCst), 1, "the watcher resumed from its resourceVersion instead of re-listing");
    drain.abort();
    c.restart(leader).await.unwrap();
    c.shutdown().await;
}

/// Watches started at past resourceVersions see exactly the changes after them, in
/// order: recent ones are served from the watch cache's backlog, older ones (beyond the
/// backlog) from the store; both agree with what was written.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watches_from_past_versions_see_exactly_what_followed() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::WatchParams;

    let c = ApiCluster::start(3, ClusterOptions::default()).await.unwrap();
    let writer: Api<ConfigMap> = Api::namespaced(c.kube_client(0).await.unwrap(), "default");
    retry(|| { let a = writer.clone(); async move { a.list(&ListParams::default()).await } }).await;
    // Start the feed early so it holds recent history.
    let reader: Api<ConfigMap> = Api::namespaced(c.kube_client(1).await.unwrap(), "default");
    let total = keelson_apiserver::watch_cache::BACKLOG + 300;
    let mut rvs = Vec::with_capacity(total);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while reader.watch(&WatchParams::default().timeout(1), "0").await.is_err() {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let created: Vec<(usize, String)> = futures::stream::iter(0..total)
        .map(|i| {
            let w = writer.clone();
            async move {
                let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": format!("cm-{i:05}")}, "data": {"i": i.to_string()}})).unwrap();
                let o = retry(|| { let (w, cm) = (w.clone(), cm.clone()); async move { w.create(&PostParams::default(), &cm).await } }).await;
                (i, o.resource_version().unwrap())
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    for (_, rv) in &created {
        rvs.push(rv.parse::<i64>().unwrap());
    }
    rvs.sort();
    // By revision: what a watcher from each start must see.
    let starts = [rvs[5], rvs[total - 200], rvs[total - 1]];
    for start in starts {
        let mut want: Vec<i64> = rvs.iter().copied().filter(|r| *r > start).collect();
        // One more change after the watch began arrives live.
        let stream = reader.watch(&WatchParams::default().timeout(30), &start.to_string()).await.unwrap();
        let mut stream = std::pin::pin!(stream);
        let live = writer
            .patch("cm-00000", &PatchParams::default(), &Patch::Merge(json!({"data": {"live": start.to_string()}})))
            .await
            .unwrap();
        let live_rv: i64 = live.resource_version().unwrap().parse().unwrap();
        want.push(live_rv);
        rvs.push(live_rv);
        let mut got = Vec::new();
        while got.len() < want.len() {
            let ev = tokio::time::timeout(Duration::from_secs(20), stream.try_next()).await.expect("events keep coming").unwrap();
            match ev {
                Some(kube::api::WatchEvent::Added(o)) | Some(kube::api::WatchEvent::Modified(o)) => got.push(o.resource_version().unwrap().parse::<i64>().unwrap()),
                Some(kube::api::WatchEvent::Bookmark(_)) => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(got, want, "watch from {start}");
    }
    c.shutdown().await;
}

/// After compaction, a watch from a compacted resourceVersion that the server's watch cache
/// does not hold gets a 410 Expired/Gone ERROR event, and a list continuation at a
/// compacted revision a 410 status.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn compacted_versions_answer_410() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::WatchParams;

    let c = ApiCluster::start(3, ClusterOptions::default()).await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(c.kube_client(2).await.unwrap(), "default");
    retry(|| { let a = api.clone(); async move { a.list(&ListParams::default()).await } }).await;
    for i in 0..6 {
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": format!("c{i}")}})).unwrap();
        retry(|| { let (a, cm) = (api.clone(), cm.clone()); async move { a.create(&PostParams::default(), &cm).await } }).await;
    }
    let page = api.list(&ListParams::default().limit(2)).await.unwrap();
    let token = page.metadata.continue_.clone().expect("more pages");
    let old_rv = page.metadata.resource_version.clone().unwrap();
    for i in 0..3 {
        api.patch(&format!("c{i}"), &PatchParams::default(), &Patch::Merge(json!({"data": {"x": "y"}}))).await.unwrap();
    }
    let now = c.store.client(0).status().await.unwrap().revision;
    c.store.client(0).compact(now).await.unwrap();
    // Compaction is a replicated command: wait until the server this client uses applied it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while c.store.client(2).status().await.unwrap().compacted_revision < now {
        assert!(tokio::time::Instant::now() < deadline, "replica 2 never applied the compaction");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The continuation names a compacted revision.
    match api.list(&ListParams::default().limit(2).continue_token(&token)).await {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (410, "Expired"), "{s:?}"),
        other => panic!("expected 410, got {other:?}"),
    }
    // A watch from before the compaction, on a server that has not cached configmaps:
    // server 2's watch cache started with the first list and still holds every change
    // since in its backlog, so there (as kube-apiserver's cacher, whatever etcd compacted)
    // the watch is served from memory, exactly.
    let fresh: Api<ConfigMap> = Api::namespaced(c.kube_client(0).await.unwrap(), "default");
    let stream = fresh.watch(&WatchParams::default().timeout(10), &old_rv).await.unwrap();
    let mut stream = std::pin::pin!(stream);
    match tokio::time::timeout(Duration::from_secs(10), stream.try_next()).await.unwrap().unwrap() {
        Some(kube::api::WatchEvent::Error(e)) => assert_eq!(e.code, 410, "{e:?}"),
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
    c.shutdown().await;
}
