//! Lists served from the watch cache on a 3-server API cluster, and what they keep: a
//! write acknowledged on one server is in the next consistent list on another; a
//! paginated list continued while writes happen is exactly its first page's revision; a
//! watch from a cached list's resourceVersion loses and repeats nothing; selectors and
//! limits on the cache agree with the store's exact read of the same revision. Every test
//! also checks, by `apiserver_cache_list_total`, that the cache served the lists.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use keelson_tests::api::ApiCluster;
use keelson_tests::ClusterOptions;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, VersionMatch, WatchEvent, WatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

const CONFIGMAPS: &str = "core/configmaps";

fn configmap(name: &str, labels: serde_json::Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}, "data": {"v": "0"}})).unwrap()
}

fn rv_of(o: &impl ResourceExt) -> i64 {
    o.resource_version().expect("a resourceVersion").parse().expect("a numeric resourceVersion")
}

/// `apiserver_cache_list_total{resource}` on the client's server (0 when absent).
async fn cache_lists(client: &kube::Client, resource: &str) -> u64 {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client.request_text(req).await.expect("metrics");
    let name = format!("apiserver_cache_list_total{{resource=\"{resource}\"}} ");
    text.lines().find_map(|l| l.strip_prefix(&name)).map(|v| v.trim().parse().expect("a count")).unwrap_or(0)
}

/// A 3-server cluster whose namespace `ns` exists and takes creates on every server.
async fn cluster_with_namespace(ns: &str) -> (ApiCluster, Vec<kube::Client>) {
    let cluster = ApiCluster::start(3, ClusterOptions::default()).await.expect("cluster");
    let mut clients = Vec::new();
    for i in 0..3 {
        clients.push(cluster.kube_client(i).await.unwrap());
    }
    let namespaces: Api<Namespace> = Api::all(clients[0].clone());
    namespaces.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap()).await.expect("namespace");
    for (i, c) in clients.iter().enumerate() {
        let api: Api<ConfigMap> = Api::namespaced(c.clone(), ns);
        let probe = format!("probe-{i}");
        api.create(&PostParams::default(), &configmap(&probe, json!({}))).await.expect("a create on every server");
        api.delete(&probe, &DeleteParams::default()).await.expect("delete the probe");
    }
    (cluster, clients)
}

/// (name, resourceVersion) of each item, sorted by name.
fn identities(items: &[ConfigMap]) -> BTreeMap<String, i64> {
    items.iter().map(|o| (o.name_any(), rv_of(o))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_acknowledged_on_one_server_is_in_the_next_consistent_list_on_another() {
    let ns = "fresh";
    let (cluster, clients) = cluster_with_namespace(ns).await;
    let on_a: Api<ConfigMap> = Api::namespaced(clients[0].clone(), ns);
    let on_b: Api<ConfigMap> = Api::namespaced(clients[1].clone(), ns);
    let secrets_on_a: Api<Secret> = Api::namespaced(clients[0].clone(), ns);
    on_b.list(&ListParams::default()).await.expect("a first list starts the cache");
    let served_before = cache_lists(&clients[1], CONFIGMAPS).await;
    for i in 0..20 {
        let created = on_a.create(&PostParams::default(), &configmap(&format!("cm-{i}"), json!({}))).await.expect("create");
        let listed = on_b.list(&ListParams::default()).await.expect("list");
        assert!(listed.items.iter().any(|o| o.name_any() == created.name_any()), "cm-{i} (rv {}) acknowledged on A, missing from B's list at {:?}", rv_of(&created), listed.metadata.resource_version);
        // A write to another resource moves the store's revision but not this resource's
        // events: the list still waits for the cache to reach it (a progress notification).
        let other = secrets_on_a
            .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": format!("s-{i}")}, "stringData": {"k": "v"}})).unwrap())
            .await
            .expect("secret");
        let listed = on_b.list(&ListParams::default()).await.expect("list");
        let at: i64 = listed.metadata.resource_version.as_deref().unwrap().parse().unwrap();
        assert!(at >= rv_of(&other), "a consistent list at {at}, before the store's revision {} at its start", rv_of(&other));
    }
    let served = cache_lists(&clients[1], CONFIGMAPS).await - served_before;
    assert_eq!(served, 40, "every consistent list on B was served from its watch cache");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paginated_list_continued_during_writes_is_its_first_pages_revision() {
    let ns = "paged";
    let (cluster, clients) = cluster_with_namespace(ns).await;
    let writer: Api<ConfigMap> = Api::namespaced(clients[0].clone(), ns);
    for i in 0..30 {
        writer.create(&PostParams::default(), &configmap(&format!("cm-{i:02}"), json!({}))).await.expect("create");
    }
    let on_b: Api<ConfigMap> = Api::namespaced(clients[1].clone(), ns);
    let on_c: Api<ConfigMap> = Api::namespaced(clients[2].clone(), ns);
    on_b.list(&ListParams::default()).await.expect("a first list starts the cache");
    let served_before = cache_lists(&clients[1], CONFIGMAPS).await;
    let first = on_b.list(&ListParams::default().limit(7)).await.expect("first page");
    assert_eq!(cache_lists(&clients[1], CONFIGMAPS).await - served_before, 1, "the first page came from the cache");
    let revision: i64 = first.metadata.resource_version.as_deref().unwrap().parse().unwrap();
    assert_eq!(first.items.len(), 7);
    let mut items = first.items;
    let mut token = first.metadata.continue_.clone().filter(|t| !t.is_empty()).expect("a continue token");
    let mut round = 0;
    loop {
        // Between pages: an update of a listed object, a deletion of one still to come,
        // and a new object sorting inside the list.
        writer.patch(&format!("cm-{round:02}"), &PatchParams::default(), &Patch::Merge(json!({"data": {"v": "changed"}}))).await.expect("update");
        writer.delete(&format!("cm-{:02}", 29 - round), &DeleteParams::default()).await.expect("delete");
        writer.create(&PostParams::default(), &configmap(&format!("cm-{round:02}-new"), json!({}))).await.expect("create");
        round += 1;
        // Continued on another server than the first page's.
        let api = if round % 2 == 0 { &on_b } else { &on_c };
        let page = api.list(&ListParams::default().limit(7).continue_token(&token)).await.expect("continued page");
        assert_eq!(page.metadata.resource_version.as_deref(), Some(revision.to_string().as_str()), "a continued page is at the first page's revision");
        items.extend(page.items);
        match page.metadata.continue_.filter(|t| !t.is_empty()) {
            Some(t) => token = t,
            None => break,
        }
    }
    let got = identities(&items);
    assert_eq!(got.len(), items.len(), "an object listed twice: {:?}", items.iter().map(|o| o.name_any()).collect::<Vec<_>>());
    let expected: BTreeSet<String> = (0..30).map(|i| format!("cm-{i:02}")).collect();
    assert_eq!(got.keys().cloned().collect::<BTreeSet<_>>(), expected, "the list is the 30 objects of its revision, none of the writes after it");
    assert!(got.values().all(|rv| *rv <= revision), "an object newer than the list's revision {revision}: {got:?}");
    let exact = on_c
        .list(&ListParams::default().at(&revision.to_string()).matching(VersionMatch::Exact))
        .await
        .expect("the store's exact read of that revision");
    assert_eq!(got, identities(&exact.items), "the paginated list differs from the store at revision {revision}");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_watch_from_a_cached_lists_resource_version_loses_and_repeats_nothing() {
    let ns = "watched";
    let (cluster, clients) = cluster_with_namespace(ns).await;
    let writer: Api<ConfigMap> = Api::namespaced(clients[0].clone(), ns);
    let on_b: Api<ConfigMap> = Api::namespaced(clients[1].clone(), ns);
    // Objects the writer deletes, one by one, and never creates again.
    for k in 0..15 {
        writer.create(&PostParams::default(), &configmap(&format!("gone-{k:02}"), json!({}))).await.expect("create");
    }
    on_b.list(&ListParams::default()).await.expect("a first list starts the cache");
    // Writes before, during and after the list; the revision of each create and update
    // is noted (a delete answers with the object as it was, not its deletion's revision).
    let (list_now, mut listing) = tokio::sync::mpsc::channel::<()>(1);
    let (listed_tx, mut listed_rx) = tokio::sync::mpsc::channel::<()>(1);
    let writes = tokio::spawn(async move {
        let mut put_revisions = Vec::new();
        for i in 0..60 {
            if i == 20 {
                list_now.send(()).await.unwrap();
            }
            if i == 40 {
                listed_rx.recv().await.unwrap();
            }
            if i % 4 == 3 {
                writer.delete(&format!("gone-{:02}", i / 4), &DeleteParams::default()).await.expect("delete");
                continue;
            }
            let name = format!("cm-{}", i % 9);
            let rv = match writer.create(&PostParams::default(), &configmap(&name, json!({}))).await {
                Ok(o) => rv_of(&o),
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    rv_of(&writer.patch(&name, &PatchParams::default(), &Patch::Merge(json!({"data": {"v": i.to_string()}}))).await.expect("update"))
                }
                Err(e) => panic!("create: {e}"),
            };
            put_revisions.push(rv);
        }
        put_revisions
    });
    listing.recv().await.unwrap();
    let served_before = cache_lists(&clients[1], CONFIGMAPS).await;
    let listed = on_b.list(&ListParams::default()).await.expect("list");
    assert_eq!(cache_lists(&clients[1], CONFIGMAPS).await - served_before, 1, "the list came from the cache");
    listed_tx.send(()).await.unwrap();
    let from: i64 = listed.metadata.resource_version.as_deref().unwrap().parse().unwrap();
    let put_revisions = writes.await.unwrap();
    let last = *put_revisions.last().unwrap();
    assert!(last > from, "writes after the list are what the watch must deliver");
    let puts_after: Vec<i64> = put_revisions.iter().copied().filter(|rv| *rv > from).collect();
    let deletes_after = listed.items.iter().filter(|o| o.name_any().starts_with("gone-")).count();

    // The watch, on the third server, from the list's resourceVersion.
    let on_c: Api<ConfigMap> = Api::namespaced(clients[2].clone(), ns);
    let mut state: BTreeMap<String, i64> = identities(&listed.items);
    let mut seen = Vec::new();
    let stream = on_c.watch(&WatchParams::default().timeout(60), &from.to_string()).await.expect("watch");
    let mut stream = stream.boxed();
    while seen.last().copied().unwrap_or(from) < last {
        let ev = tokio::time::timeout(Duration::from_secs(30), stream.try_next()).await.expect("an event in time").expect("a watch event").expect("the watch goes on");
        let (obj, deleted) = match ev {
            WatchEvent::Added(o) | WatchEvent::Modified(o) => (o, false),
            WatchEvent::Deleted(o) => (o, true),
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Error(e) => panic!("watch error: {e:?}"),
        };
        let rv = rv_of(&obj);
        assert!(rv > from, "an event at {rv}, already in the list at {from}");
        assert!(seen.last().is_none_or(|l| rv > *l), "event {rv} after {seen:?}: repeated or out of order");
        seen.push(rv);
        if deleted {
            state.remove(&obj.name_any());
        } else {
            state.insert(obj.name_any(), rv);
        }
    }
    // Every gone-* object is deleted by the end: those still in the list went after it.
    while state.keys().any(|n| n.starts_with("gone-")) {
        let ev = tokio::time::timeout(Duration::from_secs(30), stream.try_next()).await.expect("an event in time").expect("a watch event").expect("the watch goes on");
        match ev {
            WatchEvent::Deleted(o) => {
                let rv = rv_of(&o);
                assert!(rv > *seen.last().unwrap_or(&from), "deletion at {rv} after {seen:?}: repeated or out of order");
                seen.push(rv);
                state.remove(&o.name_any());
            }
            WatchEvent::Bookmark(_) => {}
            other => panic!("after the last write only deletions may be left, got {other:?}"),
        }
    }
    for rv in &puts_after {
        assert!(seen.contains(rv), "the write at {rv} (after the list at {from}) never came: {seen:?}");
    }
    assert_eq!(seen.len(), puts_after.len() + deletes_after, "the watch delivers exactly the writes after the list: {seen:?}");
    let end = *seen.last().unwrap();
    let exact = on_c.list(&ListParams::default().at(&end.to_string()).matching(VersionMatch::Exact)).await.expect("exact");
    assert_eq!(state, identities(&exact.items), "list + watch events = the store's state at {end}");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn selectors_and_limits_on_the_cache_agree_with_the_store() {
    let (cluster, clients) = cluster_with_namespace("sel-a").await;
    let namespaces: Api<Namespace> = Api::all(clients[0].clone());
    namespaces.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "sel-b"}})).unwrap()).await.expect("namespace");
    for ns in ["sel-a", "sel-b"] {
        let api: Api<ConfigMap> = Api::namespaced(clients[0].clone(), ns);
        for i in 0..12 {
            let app = ["web", "db", "cache"][i % 3];
            let tier = if i % 2 == 0 { "front" } else { "back" };
            api.create(&PostParams::default(), &configmap(&format!("cm-{i:02}"), json!({"app": app, "tier": tier}))).await.expect("create");
        }
    }
    let all: Api<ConfigMap> = Api::all(clients[1].clone());
    all.list(&ListParams::default()).await.expect("a first list starts the cache");
    let cases = [
        ListParams::default().labels("app=web"),
        ListParams::default().labels("app in (web,db),tier!=back"),
        ListParams::default().labels("!missing"),
        ListParams::default().fields("metadata.namespace=sel-b"),
        ListParams::default().fields("metadata.namespace!=sel-b").labels("app=cache"),
        ListParams::default().labels("tier=front").limit(4),
    ];
    for lp in cases {
        let served_before = cache_lists(&clients[1], CONFIGMAPS).await;
        let mut cached = all.list(&lp).await.expect("cached list");
        assert_eq!(cache_lists(&clients[1], CONFIGMAPS).await - served_before, 1, "{lp:?} came from the cache");
        let revision = cached.metadata.resource_version.clone().unwrap();
        let mut items = std::mem::take(&mut cached.items);
        let mut token = cached.metadata.continue_.clone().filter(|t| !t.is_empty());
        if let Some(limit) = lp.limit {
            assert!(items.len() <= limit as usize, "{lp:?}: {} items", items.len());
        }
        while let Some(t) = token {
            let page = all.list(&lp.clone().continue_token(&t)).await.expect("continued");
            items.extend(page.items);
            token = page.metadata.continue_.filter(|t| !t.is_empty());
        }
        let mut exact_lp = lp.clone().at(&revision).matching(VersionMatch::Exact);
        exact_lp.limit = None;
        let exact = all.list(&exact_lp).await.expect("exact");
        let names = |v: &[ConfigMap]| v.iter().map(|o| format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any())).collect::<Vec<_>>();
        assert!(!items.is_empty(), "{lp:?} selects something");
        assert_eq!(names(&items), names(&exact.items), "{lp:?}: cache and store differ at {revision}");
    }
    cluster.shutdown().await;
}
