//! Components' Events through the Kubernetes API: `EventRecorder` queues them, folds
//! repeats into one Event's count as Kubernetes' correlator does, starts anew when the
//! stored Event is gone, and writes what was queued when its last clone is dropped.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, ObjectReference};
use keelson_component::events::{EventRecorder, EventType};
use keelson_tests::api::ApiCluster;
use keelson_tests::ClusterOptions;
use kube::api::{Api, DeleteParams, ListParams};

/// The `(message, count)` of the Events about pod `name`, once `want` holds.
async fn wait_events(api: &Api<Event>, name: &str, want: impl Fn(&[(String, i32)]) -> bool) -> Vec<(String, i32)> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut seen: Vec<(String, i32)> = api
            .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
            .await
            .expect("list events")
            .items
            .into_iter()
            .map(|e| (e.message.unwrap_or_default(), e.count.unwrap_or(0)))
            .collect();
        seen.sort();
        if want(&seen) {
            return seen;
        }
        assert!(tokio::time::Instant::now() < deadline, "events of {name}: {seen:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_events_are_folded_into_one_count_and_queued_ones_outlive_the_recorder() {
    let cluster = ApiCluster::start(3, ClusterOptions::default()).await.expect("cluster");
    let client = cluster.kube_client(1).await.expect("client");
    let api: Api<Event> = Api::namespaced(client.clone(), "default");
    let pod = |name: &str| ObjectReference { api_version: Some("v1".into()), kind: Some("Pod".into()), namespace: Some("default".into()), name: Some(name.into()), uid: Some(format!("uid-{name}")), ..Default::default() };
    let recorder = EventRecorder::new(client.clone(), "test-controller", "t_1");

    for _ in 0..3 {
        recorder.publish(&pod("web"), EventType::Warning, "FailedScheduling", "0/3 nodes are available").await;
    }
    recorder.publish(&pod("web"), EventType::Warning, "FailedScheduling", "0/4 nodes are available").await;
    let seen = wait_events(&api, "web", |s| s.len() == 2 && s[0].1 == 3).await;
    assert_eq!(seen, vec![("0/3 nodes are available".to_string(), 3), ("0/4 nodes are available".to_string(), 1)]);
    let folded = api.list(&ListParams::default().fields("involvedObject.name=web")).await.unwrap().items.into_iter().find(|e| e.count == Some(3)).unwrap();
    assert!(folded.last_timestamp.as_ref().unwrap().0 >= folded.first_timestamp.as_ref().unwrap().0, "{folded:?}");
    assert_eq!(folded.reporting_instance.as_deref(), Some("t_1"));

    // The stored Event deleted (as its TTL would): the next repeat is a new Event.
    api.delete(folded.metadata.name.as_deref().unwrap(), &DeleteParams::default()).await.expect("delete");
    recorder.publish(&pod("web"), EventType::Warning, "FailedScheduling", "0/3 nodes are available").await;
    let seen = wait_events(&api, "web", |s| s.len() == 2 && s[0].1 == 1).await;
    assert_eq!(seen[0], ("0/3 nodes are available".to_string(), 1));

    // Queued, then the recorder dropped at once: still written.
    for i in 0..20 {
        recorder.publish(&pod("batch"), EventType::Normal, "SuccessfulCreate", &format!("Created pod: batch-{i}")).await;
    }
    drop(recorder);
    let seen = wait_events(&api, "batch", |s| s.len() == 20).await;
    assert!(seen.iter().all(|(_, n)| *n == 1), "{seen:?}");
    cluster.shutdown().await;
}
