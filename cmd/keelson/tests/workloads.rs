//! The workload controllers end to end on real `keelson server` processes with hollow
//! nodes (whose pods finish with the exit code of their `keelson.io/hollow-exit-code`
//! annotation — simulated): a Job of 3 completions, 2 at a time, completes; a failing
//! Job reaches its backoff limit, another is failed by its pod failure policy; a CronJob
//! firing every minute starts its first Job on schedule (and `kubectl create job
//! --from=cronjob/…` works); a DaemonSet runs one pod on every node, one more on a node
//! that joins, and rolls a new image out; a StatefulSet starts its pods in order with
//! their claims, rolls a new image out and scales down from the highest ordinal; the
//! controller manager's server is killed while a Job runs and the next holder finishes
//! it without a pod made twice. Also: Indexed Jobs with backoffLimitPerIndex fail each
//! index after its own retries (FailedIndexes) or at once past maxFailedIndexes; a Job
//! adopts an orphan its selector matches and releases it once relabeled; a Parallel
//! StatefulSet with maxUnavailable rolls out, and its claims follow the retention policy
//! (whenScaled: Delete removes the claims of removed ordinals, whenDeleted: Delete the
//! rest with the set). Assertions are on stored state, polled with generous overall
//! timeouts.

mod cluster_support;

use std::collections::BTreeMap;
use std::time::Duration;

use cluster_support::{client, eventually, server_of, start_short_elections};
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim, Pod};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

const NODES: usize = 3;

fn job(name: &str, exit_code: i32, completions: i32, parallelism: i32, backoff_limit: i32) -> Job {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"completions": completions, "parallelism": parallelism, "backoffLimit": backoff_limit,
                 "template": {"metadata": {"annotations": {"keelson.io/hollow-exit-code": exit_code.to_string()}},
                              "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "example.com/task:1"}]}}},
    }))
    .unwrap()
}

fn condition(job: &Job, type_: &str) -> Option<(String, String)> {
    let c = job.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_ && c.status == "True")?;
    Some((c.reason.clone().unwrap_or_default(), c.message.clone().unwrap_or_default()))
}

async fn events_of(client: &kube::Client, name: &str) -> Vec<String> {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let mut out: Vec<String> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name))
        .map(|e| format!("{} {}", e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect();
    out.sort();
    out
}

/// The one `controller-revision-hash` the pods selected by `labels` carry.
async fn per_node_hash(pods: &Api<Pod>, labels: &str) -> String {
    let hashes: std::collections::BTreeSet<String> =
        pods.list(&ListParams::default().labels(labels)).await.unwrap().items.into_iter().filter_map(|p| p.metadata.labels?.get("controller-revision-hash").cloned()).collect();
    assert_eq!(hashes.len(), 1, "{hashes:?}");
    hashes.into_iter().next().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_cronjobs_daemonsets_and_statefulsets_converge_on_hollow_nodes() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cluster = start_short_elections(&tmp.path().join("c")).await;
    let admin = client(&cluster, "keelson-1").await;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let hollow = tokio::spawn(keelson_agent::hollow::run(admin.clone(), keelson_agent::hollow::HollowConfig::new("hollow", NODES), shutdown.clone()));

    let jobs: Api<Job> = Api::namespaced(admin.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let pp = PostParams::default();
    jobs.create(&pp, &job("three", 0, 3, 2, 6)).await.unwrap();
    jobs.create(&pp, &job("doomed", 1, 1, 1, 1)).await.unwrap();
    let mut fatal = job("fatal", 42, 1, 1, 6);
    fatal.spec.as_mut().unwrap().pod_failure_policy = Some(serde_json::from_value(json!({"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]})).unwrap());
    jobs.create(&pp, &fatal).await.unwrap();
    let cronjob: CronJob = serde_json::from_value(json!({
        "metadata": {"name": "tick"},
        "spec": {"schedule": "*/1 * * * *", "jobTemplate": {"spec": {"template": {"metadata": {"annotations": {"keelson.io/hollow-exit-code": "0"}},
                 "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "example.com/tick:1"}]}}}}},
    }))
    .unwrap();
    let cronjob_created = jiff::Timestamp::now();
    Api::<CronJob>::namespaced(admin.clone(), "default").create(&pp, &cronjob).await.unwrap();
    let daemonset: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}},
                 "template": {"metadata": {"labels": {"app": "agent"}}, "spec": {"containers": [{"name": "c", "image": "example.com/agent:1"}]}}},
    }))
    .unwrap();
    Api::<DaemonSet>::namespaced(admin.clone(), "default").create(&pp, &daemonset).await.unwrap();
    let statefulset: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "db"},
        "spec": {"replicas": 3, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                 "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "c", "image": "example.com/db:1"}]}},
                 "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]},
    }))
    .unwrap();
    let statefulsets: Api<StatefulSet> = Api::namespaced(admin.clone(), "default");
    statefulsets.create(&pp, &statefulset).await.unwrap();

    // A Job of 3 completions, 2 at a time, completes.
    let three = eventually("job three completes", Duration::from_secs(120), || async {
        let j = jobs.get("three").await.map_err(|e| e.to_string())?;
        condition(&j, "Complete").map(|_| j.clone()).ok_or_else(|| format!("{:?}", j.status))
    })
    .await;
    let status = three.status.clone().unwrap();
    assert_eq!((status.succeeded, status.failed.unwrap_or(0), status.active.unwrap_or(0)), (Some(3), 0, 0), "{status:?}");
    assert_eq!(condition(&three, "Complete").unwrap().0, "CompletionsReached");
    assert!(condition(&three, "SuccessCriteriaMet").is_some());
    assert!(status.start_time.is_some() && status.completion_time.is_some());
    let three_pods = pods.list(&ListParams::default().labels("batch.kubernetes.io/job-name=three")).await.unwrap().items;
    assert_eq!(three_pods.len(), 3, "exactly one pod per completion");
    assert!(three_pods.iter().all(|p| p.metadata.finalizers.as_ref().is_none_or(|f| f.is_empty())), "tracking finalizers are removed");
    assert!(three_pods.iter().all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded")));
    let events = eventually("job three's events", Duration::from_secs(30), || async {
        let ev = events_of(&admin, "three").await;
        (ev.iter().filter(|e| e.starts_with("SuccessfulCreate Created pod: three-")).count() == 3 && ev.iter().any(|e| e == "Completed Job completed")).then_some(ev.clone()).ok_or(format!("{ev:?}"))
    })
    .await;
    assert!(!events.is_empty());

    // A failing Job: two failures with backoffLimit 1, the retry after the 10 s backoff.
    let doomed = eventually("job doomed fails", Duration::from_secs(120), || async {
        let j = jobs.get("doomed").await.map_err(|e| e.to_string())?;
        condition(&j, "Failed").map(|_| j.clone()).ok_or_else(|| format!("{:?}", j.status))
    })
    .await;
    assert_eq!(condition(&doomed, "Failed"), Some(("BackoffLimitExceeded".to_string(), "Job has reached the specified backoff limit".to_string())));
    assert_eq!(doomed.status.as_ref().unwrap().failed, Some(2));
    assert!(doomed.status.as_ref().unwrap().completion_time.is_none());
    eventually("the BackoffLimitExceeded event", Duration::from_secs(30), || async {
        let ev = events_of(&admin, "doomed").await;
        ev.iter().any(|e| e == "BackoffLimitExceeded Job has reached the specified backoff limit").then_some(()).ok_or(format!("{ev:?}"))
    })
    .await;

    // The pod failure policy fails a Job at its first exit code 42, backoffLimit or not.
    let fatal = eventually("job fatal fails by its pod failure policy", Duration::from_secs(60), || async {
        let j = jobs.get("fatal").await.map_err(|e| e.to_string())?;
        condition(&j, "Failed").map(|_| j.clone()).ok_or_else(|| format!("{:?}", j.status))
    })
    .await;
    let (reason, message) = condition(&fatal, "Failed").unwrap();
    assert_eq!(reason, "PodFailurePolicy");
    assert!(message.starts_with("Container c for pod default/fatal-") && message.ends_with("failed with exit code 42 matching FailJob rule at index 0"), "{message}");
    assert_eq!(fatal.status.as_ref().unwrap().failed, Some(1));

    // The DaemonSet: exactly one Running pod on every hollow node.
    let per_node = eventually("one daemon pod per node", Duration::from_secs(90), || async {
        let list = pods.list(&ListParams::default().labels("app=agent")).await.map_err(|e| e.to_string())?.items;
        let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
        for p in list.iter().filter(|p| p.metadata.deletion_timestamp.is_none()) {
            if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") {
                *per_node.entry(p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default()).or_default() += 1;
            }
        }
        (per_node.len() == NODES && per_node.values().all(|n| *n == 1) && list.len() == NODES).then_some(per_node.clone()).ok_or(format!("{per_node:?} of {} pods", list.len()))
    })
    .await;
    assert_eq!(per_node.keys().cloned().collect::<Vec<_>>(), (0..NODES).map(|i| format!("hollow-{i}")).collect::<Vec<_>>());
    let sets: Api<DaemonSet> = Api::namespaced(admin.clone(), "default");
    eventually("the DaemonSet's status", Duration::from_secs(60), || async {
        let s = sets.get("agent").await.map_err(|e| e.to_string())?.status.unwrap_or_default();
        let n = NODES as i32;
        (s.desired_number_scheduled == n && s.current_number_scheduled == n && s.number_ready == n && s.number_available == Some(n) && s.updated_number_scheduled == Some(n) && s.number_misscheduled == 0)
            .then_some(())
            .ok_or(format!("{s:?}"))
    })
    .await;

    let revisions: Api<ControllerRevision> = Api::namespaced(admin.clone(), "default");
    let agent_revisions = revisions.list(&ListParams::default().labels("app=agent")).await.unwrap().items;
    assert_eq!(agent_revisions.len(), 1, "one ControllerRevision for the one template");
    assert_eq!(agent_revisions[0].revision, 1);
    let hash = per_node_hash(&pods, "app=agent").await;
    assert_eq!(agent_revisions[0].metadata.name, Some(format!("agent-{hash}")));
    assert_eq!(agent_revisions[0].metadata.owner_references.as_ref().unwrap()[0].kind, "DaemonSet");

    // A node joins: it gets its daemon pod. A new image rolls out to every node.
    let extra = tokio::spawn(keelson_agent::hollow::run(admin.clone(), keelson_agent::hollow::HollowConfig::new("extra", 1), shutdown.clone()));
    let daemon_pods = |image: &'static str| {
        let pods = pods.clone();
        move || {
            let pods = pods.clone();
            async move {
                let list = pods.list(&ListParams::default().labels("app=agent")).await.map_err(|e| e.to_string())?.items;
                let mut nodes: Vec<String> = list
                    .iter()
                    .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") && p.spec.as_ref().unwrap().containers[0].image.as_deref() == Some(image))
                    .filter_map(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()))
                    .collect();
                nodes.sort();
                let want: Vec<String> = ["extra-0", "hollow-0", "hollow-1", "hollow-2"].map(String::from).to_vec();
                (nodes == want && list.len() == want.len()).then_some(()).ok_or(format!("{image} running on {nodes:?} of {} pods", list.len()))
            }
        }
    };
    eventually("a daemon pod on the node that joined", Duration::from_secs(90), daemon_pods("example.com/agent:1")).await;
    sets.patch("agent", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "example.com/agent:2"}]}}}}))).await.unwrap();
    eventually("agent:2 rolled out to every node", Duration::from_secs(120), daemon_pods("example.com/agent:2")).await;
    eventually("the DaemonSet's rolled-out status", Duration::from_secs(60), || async {
        let s = sets.get("agent").await.map_err(|e| e.to_string())?.status.unwrap_or_default();
        (s.desired_number_scheduled == 4 && s.updated_number_scheduled == Some(4) && s.number_available == Some(4)).then_some(()).ok_or(format!("{s:?}"))
    })
    .await;
    let numbers: Vec<i64> = revisions.list(&ListParams::default().labels("app=agent")).await.unwrap().items.iter().map(|r| r.revision).collect();
    assert_eq!(numbers.iter().copied().collect::<std::collections::BTreeSet<_>>(), [1, 2].into(), "{numbers:?}");

    // The StatefulSet: db-0, db-1, db-2 in order, each with its claim; scaled to 1, the
    // highest ordinals go and the claims stay.
    let db = eventually("three stateful pods running", Duration::from_secs(120), || async {
        let list = pods.list(&ListParams::default().labels("app=db")).await.map_err(|e| e.to_string())?.items;
        let running: Vec<Pod> = list.into_iter().filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")).collect();
        (running.len() == 3).then_some(running.clone()).ok_or(format!("{:?}", running.iter().map(|p| p.metadata.name.clone()).collect::<Vec<_>>()))
    })
    .await;
    let mut by_name: Vec<(String, jiff::Timestamp)> = db.iter().map(|p| (p.metadata.name.clone().unwrap(), p.metadata.creation_timestamp.as_ref().unwrap().0)).collect();
    by_name.sort();
    assert_eq!(by_name.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["db-0", "db-1", "db-2"]);
    assert!(by_name.windows(2).all(|w| w[0].1 <= w[1].1), "created in ordinal order: {by_name:?}");
    assert!(db.iter().all(|p| p.spec.as_ref().unwrap().hostname == p.metadata.name && p.spec.as_ref().unwrap().subdomain.as_deref() == Some("db")));
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(admin.clone(), "default");
    let claim_names = || async { let mut n: Vec<String> = claims.list(&ListParams::default().labels("app=db")).await.unwrap().items.into_iter().filter_map(|c| c.metadata.name).collect(); n.sort(); n };
    assert_eq!(claim_names().await, ["data-db-0", "data-db-1", "data-db-2"]);
    eventually("the StatefulSet's status", Duration::from_secs(60), || async {
        let s = statefulsets.get("db").await.map_err(|e| e.to_string())?.status.unwrap_or_default();
        (s.replicas == 3 && s.ready_replicas == Some(3) && s.updated_replicas == Some(3) && s.current_revision == s.update_revision).then_some(()).ok_or(format!("{s:?}"))
    })
    .await;
    let db_revisions = revisions.list(&ListParams::default().labels("app=db")).await.unwrap().items;
    assert_eq!(db_revisions.iter().filter_map(|r| r.metadata.name.clone()).collect::<Vec<_>>(), vec![per_node_hash(&pods, "app=db").await]);
    // A new image rolls from db-2 down to db-0.
    let before = statefulsets.get("db").await.unwrap().status.unwrap().current_revision.unwrap();
    statefulsets.patch("db", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "example.com/db:2"}]}}}}))).await.unwrap();
    let after = eventually("db:2 rolled out", Duration::from_secs(120), || async {
        let s = statefulsets.get("db").await.map_err(|e| e.to_string())?.status.unwrap_or_default();
        let list = pods.list(&ListParams::default().labels("app=db")).await.map_err(|e| e.to_string())?.items;
        let on_2 = list.iter().filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") && p.spec.as_ref().unwrap().containers[0].image.as_deref() == Some("example.com/db:2")).count();
        (on_2 == 3 && list.len() == 3 && s.current_revision == s.update_revision && s.updated_replicas == Some(3)).then_some(s.current_revision.clone().unwrap()).ok_or(format!("{on_2} on db:2 of {}; {s:?}", list.len()))
    })
    .await;
    assert_ne!(before, after);
    statefulsets.patch("db", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(json!({"spec": {"replicas": 1}}))).await.unwrap();
    eventually("scaled down to db-0", Duration::from_secs(90), || async {
        let list = pods.list(&ListParams::default().labels("app=db")).await.map_err(|e| e.to_string())?.items;
        let left: Vec<String> = list.into_iter().filter_map(|p| p.metadata.name).collect();
        (left == ["db-0"]).then_some(()).ok_or(format!("{left:?}"))
    })
    .await;
    assert_eq!(claim_names().await, ["data-db-0", "data-db-1", "data-db-2"], "claims are kept (Retain)");
    eventually("the StatefulSet's events", Duration::from_secs(30), || async {
        let ev = events_of(&admin, "db").await;
        let ok = ["create Pod db-0 in StatefulSet db successful", "create Claim data-db-2 Pod db-2 in StatefulSet db success", "delete Pod db-2 in StatefulSet db successful", "delete Pod db-1 in StatefulSet db successful"]
            .iter()
            .all(|m| ev.iter().any(|e| e.ends_with(m)));
        ok.then_some(()).ok_or(format!("{ev:?}"))
    })
    .await;

    // The CronJob: its first Job within about 70 s of its creation, named for the minute.
    let first = eventually("the CronJob's first Job", Duration::from_secs(75), || async {
        let list = jobs.list(&ListParams::default()).await.map_err(|e| e.to_string())?.items;
        list.into_iter().find(|j| j.metadata.name.as_deref().is_some_and(|n| n.starts_with("tick-"))).ok_or("none yet".to_string())
    })
    .await;
    let first_name = first.metadata.name.clone().unwrap();
    let minutes: i64 = first_name.strip_prefix("tick-").unwrap().parse().unwrap();
    assert!(minutes * 60 > cronjob_created.as_second() - 60 && minutes * 60 <= jiff::Timestamp::now().as_second(), "{first_name} is for a minute after the CronJob was made");
    let scheduled = first.metadata.annotations.as_ref().unwrap()["batch.kubernetes.io/cronjob-scheduled-timestamp"].clone();
    assert_eq!(scheduled.parse::<jiff::Timestamp>().unwrap().as_second(), minutes * 60, "{scheduled}");
    assert_eq!(first.metadata.owner_references.as_ref().unwrap()[0].kind, "CronJob");
    let made = first.metadata.creation_timestamp.as_ref().unwrap().0;
    assert!(made.as_second() - cronjob_created.as_second() <= 70, "the first Job came {}s after the CronJob", made.as_second() - cronjob_created.as_second());
    let cronjobs: Api<CronJob> = Api::namespaced(admin.clone(), "default");
    eventually("the CronJob's status", Duration::from_secs(60), || async {
        let s = cronjobs.get("tick").await.map_err(|e| e.to_string())?.status.unwrap_or_default();
        (s.last_schedule_time.is_some() && s.last_successful_time.is_some()).then_some(()).ok_or(format!("{s:?}"))
    })
    .await;
    eventually("the CronJob's events", Duration::from_secs(30), || async {
        let ev = events_of(&admin, "tick").await;
        let created = ev.iter().any(|e| e == &format!("SuccessfulCreate Created job {first_name}"));
        let saw = ev.iter().any(|e| e == &format!("SawCompletedJob Saw completed job: {first_name}, condition: Complete"));
        (created && saw).then_some(()).ok_or(format!("{ev:?}"))
    })
    .await;

    // `kubectl create job --from=cronjob/…` makes a Job the controllers run like any other.
    let out = std::process::Command::new("kubectl")
        .arg("--kubeconfig").arg(cluster.kubeconfig_path()).args(["--context", "keelson-1", "create", "job", "manual", "--from=cronjob/tick"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    eventually("the manual Job completes", Duration::from_secs(60), || async {
        let j = jobs.get("manual").await.map_err(|e| e.to_string())?;
        condition(&j, "Complete").map(|_| ()).ok_or_else(|| format!("{:?}", j.status))
    })
    .await;

    per_index_adoption_and_claim_retention(&admin).await;

    // The controller manager's server dies while a Job runs: the next holder finishes it
    // with no pod made twice. Its pods run on a node served through a surviving server.
    let holder = Api::<Lease>::namespaced(admin.clone(), "kube-system").get("kube-controller-manager").await.unwrap().spec.unwrap().holder_identity.unwrap();
    let victim = server_of(&holder).unwrap();
    let survivor = client(&cluster, &format!("keelson-{}", (victim + 1) % 3 + 1)).await;
    let fo_nodes = tokio::spawn(keelson_agent::hollow::run(survivor.clone(), keelson_agent::hollow::HollowConfig::new("fo", 1), shutdown.clone()));
    let survivor_jobs: Api<Job> = Api::namespaced(survivor.clone(), "default");
    let survivor_pods: Api<Pod> = Api::namespaced(survivor.clone(), "default");
    let mut steady = job("steady", 0, 4, 2, 6);
    steady.spec.as_mut().unwrap().template.spec.as_mut().unwrap().node_selector = Some([("kubernetes.io/hostname".to_string(), "fo-0".to_string())].into());
    survivor_jobs.create(&pp, &steady).await.unwrap();
    eventually("job steady's first pods", Duration::from_secs(60), || async {
        let n = survivor_pods.list(&ListParams::default().labels("batch.kubernetes.io/job-name=steady")).await.map_err(|e| e.to_string())?.items.len();
        (n > 0).then_some(()).ok_or(format!("{n} pods"))
    })
    .await;
    let before_kill = survivor_jobs.get("steady").await.unwrap();
    assert!(condition(&before_kill, "Complete").is_none(), "the Job still runs when the server dies");
    cluster.kill(victim).await.unwrap();
    let steady = eventually("job steady completes after the failover", Duration::from_secs(120), || async {
        let j = survivor_jobs.get("steady").await.map_err(|e| e.to_string())?;
        condition(&j, "Complete").map(|_| j.clone()).ok_or_else(|| format!("{:?}", j.status))
    })
    .await;
    assert_eq!(steady.status.as_ref().unwrap().succeeded, Some(4));
    let steady_pods = survivor_pods.list(&ListParams::default().labels("batch.kubernetes.io/job-name=steady")).await.unwrap().items;
    assert_eq!(steady_pods.len(), 4, "one pod per completion across the failover: {:?}", steady_pods.iter().map(|p| p.metadata.name.clone()).collect::<Vec<_>>());

    shutdown.cancel();
    let _ = hollow.await;
    let _ = extra.await;
    let _ = fo_nodes.await;
    cluster.stop(Duration::from_secs(10)).await.unwrap();
}

fn indexed_job(name: &str, completions: i32, parallelism: i32, limit_per_index: i32, max_failed: Option<i32>) -> Job {
    let mut j = job(name, 1, completions, parallelism, 0);
    let spec = j.spec.as_mut().unwrap();
    spec.backoff_limit = None;
    spec.completion_mode = Some("Indexed".into());
    spec.backoff_limit_per_index = Some(limit_per_index);
    spec.max_failed_indexes = max_failed;
    j
}

/// backoffLimitPerIndex and maxFailedIndexes, adoption and release, a StatefulSet with
/// maxUnavailable and claims that follow their retention policy.
async fn per_index_adoption_and_claim_retention(admin: &kube::Client) {
    let jobs: Api<Job> = Api::namespaced(admin.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let pp = PostParams::default();
    let pm = kube::api::PatchParams::default();
    // Every pod fails: each of the 2 indexes fails twice (one retry each), then the Job
    // fails with FailedIndexes; with maxFailedIndexes 0 the first failed index fails it.
    jobs.create(&pp, &indexed_job("perindex", 2, 2, 1, None)).await.unwrap();
    jobs.create(&pp, &indexed_job("capped", 3, 1, 0, Some(0))).await.unwrap();
    let failed_job = |name: &'static str| {
        let jobs = jobs.clone();
        move || {
            let jobs = jobs.clone();
            async move {
                let j = jobs.get(name).await.map_err(|e| e.to_string())?;
                condition(&j, "Failed").map(|_| j.clone()).ok_or_else(|| format!("{:?}", j.status))
            }
        }
    };
    let perindex = eventually("job perindex fails with failed indexes", Duration::from_secs(120), failed_job("perindex")).await;
    assert_eq!(condition(&perindex, "Failed"), Some(("FailedIndexes".to_string(), "Job has failed indexes".to_string())));
    let status = perindex.status.clone().unwrap();
    assert_eq!((status.failed_indexes.as_deref(), status.failed, status.succeeded), (Some("0,1"), Some(4), Some(0)), "{status:?}");
    assert_eq!(perindex.spec.as_ref().unwrap().backoff_limit, Some(i32::MAX), "no Job-wide limit beside the per-index ones");
    let mut counts: Vec<(String, String)> = pods
        .list(&ListParams::default().labels("batch.kubernetes.io/job-name=perindex"))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|p| {
            let a = p.metadata.annotations.unwrap_or_default();
            (a["batch.kubernetes.io/job-completion-index"].clone(), a["batch.kubernetes.io/job-index-failure-count"].clone())
        })
        .collect();
    counts.sort();
    assert_eq!(counts, [("0", "0"), ("0", "1"), ("1", "0"), ("1", "1")].map(|(a, b)| (a.to_string(), b.to_string())), "each index: a first pod and one retry");
    let capped = eventually("job capped fails past maxFailedIndexes", Duration::from_secs(90), failed_job("capped")).await;
    assert_eq!(condition(&capped, "Failed").unwrap().0, "MaxFailedIndexesExceeded");
    assert_eq!(capped.status.as_ref().unwrap().failed_indexes.as_deref(), Some("0"));
    eventually("the failed-indexes events", Duration::from_secs(30), || async {
        let (a, b) = (events_of(admin, "perindex").await, events_of(admin, "capped").await);
        let ok = a.iter().any(|e| e == "FailedIndexes Job has failed indexes") && b.iter().any(|e| e == "MaxFailedIndexesExceeded Job has exceeded the specified maximum number of failed indexes");
        ok.then_some(()).ok_or(format!("{a:?} {b:?}"))
    })
    .await;

    // An orphan the Job's selector matches is adopted (and tracked); relabeled, released.
    let orphan: Pod = serde_json::from_value(json!({
        "metadata": {"name": "orphan", "labels": {"app": "adoptee"}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "example.com/task:1"}]},
    }))
    .unwrap();
    pods.create(&pp, &orphan).await.unwrap();
    let phase = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
    eventually("the orphan runs", Duration::from_secs(60), || async {
        let p = pods.get("orphan").await.map_err(|e| e.to_string())?;
        (phase(&p) == "Running").then_some(()).ok_or(phase(&p))
    })
    .await;
    let adopter: Job = serde_json::from_value(json!({
        "metadata": {"name": "adopter"},
        "spec": {"completions": 1, "parallelism": 1, "manualSelector": true, "selector": {"matchLabels": {"app": "adoptee"}},
                 "template": {"metadata": {"labels": {"app": "adoptee"}}, "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "example.com/task:1"}]}}},
    }))
    .unwrap();
    let adopter_uid = jobs.create(&pp, &adopter).await.unwrap().metadata.uid.unwrap();
    let controlled_by_adopter = |p: &Pod| p.metadata.owner_references.iter().flatten().any(|o| o.controller == Some(true) && o.uid == adopter_uid);
    let tracked = |p: &Pod| p.metadata.finalizers.iter().flatten().any(|f| f == "batch.kubernetes.io/job-tracking");
    eventually("the orphan is adopted", Duration::from_secs(60), || async {
        let p = pods.get("orphan").await.map_err(|e| e.to_string())?;
        let active = jobs.get("adopter").await.map_err(|e| e.to_string())?.status.and_then(|s| s.active);
        (controlled_by_adopter(&p) && tracked(&p) && active == Some(1)).then_some(()).ok_or(format!("{:?} {:?}; active {active:?}", p.metadata.owner_references, p.metadata.finalizers))
    })
    .await;
    pods.patch("orphan", &pm, &kube::api::Patch::Merge(json!({"metadata": {"labels": {"app": "released"}}}))).await.unwrap();
    eventually("the relabeled pod is released and replaced", Duration::from_secs(60), || async {
        let p = pods.get("orphan").await.map_err(|e| e.to_string())?;
        let replacement = pods.list(&ListParams::default().labels("app=adoptee")).await.map_err(|e| e.to_string())?.items.into_iter().any(|p| controlled_by_adopter(&p));
        (!controlled_by_adopter(&p) && !tracked(&p) && replacement).then_some(()).ok_or(format!("{:?} {:?}; replaced {replacement}", p.metadata.owner_references, p.metadata.finalizers))
    })
    .await;
    jobs.delete("adopter", &kube::api::DeleteParams::background()).await.unwrap();
    pods.delete("orphan", &kube::api::DeleteParams::default()).await.unwrap();

    // A Parallel StatefulSet with maxUnavailable 2 rolls out; its claims are owned by the
    // set (whenDeleted: Delete), those of removed ordinals go on scale-down (whenScaled).
    let kv: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "kv"},
        "spec": {"replicas": 3, "serviceName": "kv", "podManagementPolicy": "Parallel", "selector": {"matchLabels": {"app": "kv"}},
                 "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 2}},
                 "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete", "whenScaled": "Delete"},
                 "template": {"metadata": {"labels": {"app": "kv"}}, "spec": {"containers": [{"name": "c", "image": "example.com/kv:1"}]}},
                 "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]},
    }))
    .unwrap();
    let sets: Api<StatefulSet> = Api::namespaced(admin.clone(), "default");
    let kv_uid = sets.create(&pp, &kv).await.unwrap().metadata.uid.unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(admin.clone(), "default");
    let kv_pods_on = |image: &'static str, n: usize| {
        let (pods, sets) = (pods.clone(), sets.clone());
        move || {
            let (pods, sets) = (pods.clone(), sets.clone());
            async move {
                let list = pods.list(&ListParams::default().labels("app=kv")).await.map_err(|e| e.to_string())?.items;
                let on = list.iter().filter(|p| phase(p) == "Running" && p.spec.as_ref().unwrap().containers[0].image.as_deref() == Some(image)).count();
                let s = sets.get("kv").await.map_err(|e| e.to_string())?.status.unwrap_or_default();
                (on == n && list.len() == n && s.current_revision == s.update_revision && s.ready_replicas == Some(n as i32)).then_some(()).ok_or(format!("{on} of {} on {image}; {s:?}", list.len()))
            }
        }
    };
    eventually("kv's three pods", Duration::from_secs(120), kv_pods_on("example.com/kv:1", 3)).await;
    let kv_claims = || async {
        let mut c: Vec<(String, Vec<String>)> = claims
            .list(&ListParams::default().labels("app=kv"))
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .map(|c| (c.metadata.name.unwrap_or_default(), c.metadata.owner_references.unwrap_or_default().into_iter().map(|o| format!("{}/{}", o.kind, o.uid)).collect()))
            .collect();
        c.sort();
        c
    };
    let owned_by_set = vec![format!("StatefulSet/{kv_uid}")];
    eventually("kv's claims are owned by the set", Duration::from_secs(60), || async {
        let c = kv_claims().await;
        let want: Vec<(String, Vec<String>)> = (0..3).map(|o| (format!("data-kv-{o}"), owned_by_set.clone())).collect();
        (c == want).then_some(()).ok_or(format!("{c:?}"))
    })
    .await;
    sets.patch("kv", &pm, &kube::api::Patch::Merge(json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "example.com/kv:2"}]}}}}))).await.unwrap();
    eventually("kv:2 rolled out", Duration::from_secs(120), kv_pods_on("example.com/kv:2", 3)).await;
    sets.patch("kv", &pm, &kube::api::Patch::Merge(json!({"spec": {"replicas": 1}}))).await.unwrap();
    eventually("scaled to kv-0, with only its claim left", Duration::from_secs(120), || async {
        let left: Vec<String> = pods.list(&ListParams::default().labels("app=kv")).await.map_err(|e| e.to_string())?.items.into_iter().filter_map(|p| p.metadata.name).collect();
        let c = kv_claims().await;
        (left == ["kv-0"] && c == [("data-kv-0".to_string(), owned_by_set.clone())]).then_some(()).ok_or(format!("{left:?} {c:?}"))
    })
    .await;
    sets.delete("kv", &kube::api::DeleteParams::background()).await.unwrap();
    eventually("the set's last claim goes with it", Duration::from_secs(120), || async {
        let c = kv_claims().await;
        c.is_empty().then_some(()).ok_or(format!("{c:?}"))
    })
    .await;
}
