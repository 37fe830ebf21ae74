//! The self-heal workload: a Deployment behind a Service, a DaemonSet of clients calling
//! it, a StatefulSet with a claim per identity and a Job on real nodes while the
//! nemesis kills, freezes and cuts off nodes and kills the servers holding the component
//! Leases; a watch of the pods on every server records what happened, and once the
//! cluster is healed and has converged the checker (`keelson_jepsen::self_heal`) judges
//! it.
//!
//! Alongside, a writer creates a ConfigMap every 250 ms through the servers in turn;
//! every one the API acknowledged must be there at the end.

mod nemesis;
mod objects;
mod observe;

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Endpoints, Namespace, Node, PersistentVolumeClaim, Pod, Service};
use keelson_jepsen::self_heal::{Declared, FinalState, PodFinal, PodSeen};
use kube::api::{ListParams, PostParams};
use kube::Api;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use crate::kube_api::{self, KubeTarget};
pub use nemesis::{follow_holders, node_faults, retarget, Holders};
pub use objects::Shape;
use objects::NAMESPACE;

/// Parameters of the workload.
#[derive(Clone, Debug)]
pub struct SelfHealWorkload {
    pub shape: Shape,
    /// How long to wait, after the heal, for the cluster to converge.
    pub converge: Duration,
}

impl SelfHealWorkload {
    /// The workload for a run of `time_limit`: 3 replicas; a Job of 4 s pods, 2 at a
    /// time, enough of them to last about half the run.
    pub fn for_run(time_limit: Duration) -> Self {
        let job_completions = ((time_limit.as_secs() / 4) as u32).clamp(4, 60);
        SelfHealWorkload {
            shape: Shape { replicas: 3, statefulset_replicas: 2, job_completions, job_parallelism: 2, job_seconds: 4, toleration_seconds: 2 },
            converge: Duration::from_secs(180),
        }
    }

    pub fn declared(&self) -> Declared {
        Declared {
            replicas: self.shape.replicas,
            max_surge: objects::MAX_SURGE,
            job_completions: self.shape.job_completions,
            statefulset_replicas: self.shape.statefulset_replicas,
        }
    }
}

/// What a run of the workload recorded.
#[derive(Debug, Default)]
pub struct SelfHealRun {
    pub pods: Vec<PodSeen>,
    pub final_state: FinalState,
    pub end_ms: u64,
    /// Problems that kept the workload from running as declared.
    pub violations: Vec<String>,
    pub notes: Vec<String>,
}

/// Creates `obj` (JSON) through the servers in turn until one accepts it or says it exists.
async fn create<K>(clients: &[kube::Client], namespace: Option<&str>, obj: serde_json::Value) -> Result<(), String>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope> + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
    K::DynamicType: Default,
{
    let typed: K = serde_json::from_value(obj).map_err(|e| format!("a workload object does not decode: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = String::new();
    for i in 0.. {
        let api: Api<K> = Api::namespaced(clients[i % clients.len()].clone(), namespace.unwrap_or(NAMESPACE));
        match tokio::time::timeout(Duration::from_secs(5), api.create(&PostParams::default(), &typed)).await {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(kube::Error::Api(s))) if s.code == 409 => return Ok(()),
            Ok(Err(e)) => last = e.to_string(),
            Err(_) => last = "timed out".into(),
        }
        if Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    Err(last)
}

async fn create_namespace(clients: &[kube::Client]) -> Result<(), String> {
    let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": NAMESPACE}})).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(60);
    for i in 0.. {
        let api: Api<Namespace> = Api::all(clients[i % clients.len()].clone());
        match api.create(&PostParams::default(), &ns).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => return Ok(()),
            Err(e) if Instant::now() >= deadline => return Err(e.to_string()),
            Err(_) => tokio::time::sleep(Duration::from_millis(300)).await,
        }
    }
    unreachable!("the loop returns")
}

/// Creates a ConfigMap `ack-<n>` every 250 ms until `stop`; returns the acknowledged names.
async fn write_acknowledged(clients: Vec<kube::Client>, stop: CancellationToken) -> Vec<String> {
    let mut acked = Vec::new();
    let mut at = 0usize;
    for n in 0u64.. {
        let name = format!("ack-{n}");
        let cm = ConfigMap { metadata: kube::api::ObjectMeta { name: Some(name.clone()), ..Default::default() }, ..Default::default() };
        let api: Api<ConfigMap> = Api::namespaced(clients[at % clients.len()].clone(), NAMESPACE);
        match tokio::time::timeout(Duration::from_secs(5), api.create(&PostParams::default(), &cm)).await {
            Ok(Ok(_)) => acked.push(name),
            _ => at += 1,
        }
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
        }
    }
    acked
}

/// Every 20 s, restarts the Deployment's rollout (a new template annotation, as `kubectl
/// rollout restart` does), so faults also hit rollouts in progress; returns how many were
/// started.
async fn roll_out_repeatedly(clients: Vec<kube::Client>, stop: CancellationToken) -> u32 {
    let mut started = 0;
    for n in 0usize.. {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(Duration::from_secs(20)) => {}
        }
        let api: Api<Deployment> = Api::namespaced(clients[n % clients.len()].clone(), NAMESPACE);
        let patch = serde_json::json!({"spec": {"template": {"metadata": {"annotations": {"keelson.io/rollout": n.to_string()}}}}});
        let (params, patch) = (kube::api::PatchParams::default(), kube::api::Patch::Merge(patch));
        if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(5), api.patch("web", &params, &patch)).await {
            started += 1;
        }
    }
    started
}

impl SelfHealWorkload {
    /// Declares the workloads, records until `stop`, then waits (≤ `converge`) for the
    /// healed cluster to converge and reads its final state.
    pub async fn run(&self, target: &KubeTarget, epoch: Instant, stop: CancellationToken) -> SelfHealRun {
        let mut out = SelfHealRun::default();
        let clients = match kube_api::api_configs(target).await.and_then(|c| kube_api::clients(&c)) {
            Ok(c) => c,
            Err(e) => {
                out.violations.push(format!("no API client: {e}"));
                return out;
            }
        };
        let recorded = observe::Recorded::default();
        let stop_watch = CancellationToken::new();
        let watchers: Vec<_> = clients
            .iter()
            .enumerate()
            .map(|(i, c)| tokio::spawn(observe::watch_pods(c.clone(), i, epoch, recorded.clone(), stop_watch.clone())))
            .collect();
        let declared = async {
            create_namespace(&clients).await?;
            create::<Deployment>(&clients, None, objects::deployment(&self.shape)).await?;
            create::<Service>(&clients, None, objects::service()).await?;
            let (headless, set) = objects::statefulset(&self.shape);
            create::<Service>(&clients, None, headless).await?;
            create::<StatefulSet>(&clients, None, set).await?;
            create::<DaemonSet>(&clients, None, objects::daemonset()).await?;
            create::<Job>(&clients, None, objects::job(&self.shape)).await
        };
        if let Err(e) = declared.await {
            out.violations.push(format!("declaring the workloads failed: {e}"));
        }
        let writer = tokio::spawn(write_acknowledged(clients.clone(), stop.clone()));
        let rollouts = tokio::spawn(roll_out_repeatedly(clients.clone(), stop.clone()));
        stop.cancelled().await;
        let acked = writer.await.unwrap_or_default();
        match rollouts.await {
            Ok(n) => out.notes.push(format!("{n} rollouts of the Deployment started during the run")),
            Err(e) => out.violations.push(format!("the rollout task failed: {e}")),
        }
        let converged = Instant::now();
        let final_state = loop {
            let state = read_final(&clients).await;
            let done = state.as_ref().is_some_and(|s| self.converged(s));
            if done || converged.elapsed() >= self.converge {
                if !done {
                    out.notes.push(format!("the cluster had not converged {:?} after healing", self.converge));
                }
                break state;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        };
        out.notes.push(format!("converged (or gave up) {:.1} s after healing", converged.elapsed().as_secs_f64()));
        let mut final_state = final_state.unwrap_or_default();
        let stored = list_names::<ConfigMap>(&clients).await;
        final_state.acknowledged = acked.len();
        final_state.acknowledged_missing = match stored {
            Some(s) => acked.into_iter().filter(|a| !s.contains(a)).collect(),
            None => {
                out.violations.push("the ConfigMaps could not be listed after healing".into());
                Vec::new()
            }
        };
        // Let the watches deliver the last changes.
        tokio::time::sleep(Duration::from_secs(2)).await;
        stop_watch.cancel();
        for w in watchers {
            let _ = w.await;
        }
        out.pods = recorded.take();
        out.end_ms = epoch.elapsed().as_millis() as u64;
        out.final_state = final_state;
        out
    }

    /// Healed: the final state passes the checker's after-healing judgement (the writes
    /// acknowledged are compared once, after the wait).
    fn converged(&self, s: &FinalState) -> bool {
        keelson_jepsen::self_heal::after_healing(&self.declared(), s).is_empty()
    }
}

async fn list_names<K>(clients: &[kube::Client]) -> Option<Vec<String>>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope> + Clone + DeserializeOwned + std::fmt::Debug,
    K::DynamicType: Default,
{
    for c in clients {
        let api: Api<K> = Api::namespaced(c.clone(), NAMESPACE);
        if let Ok(Ok(l)) = tokio::time::timeout(Duration::from_secs(5), api.list(&ListParams::default())).await {
            return Some(l.items.iter().filter_map(|o| o.meta().name.clone()).collect());
        }
    }
    None
}

/// The workload's pods, the Nodes, the Job, the claims, the Service's Endpoints and the
/// clients' call counts, through the first server that answers.
async fn read_final(clients: &[kube::Client]) -> Option<FinalState> {
    for c in clients {
        let read = async {
            let pods = Api::<Pod>::namespaced(c.clone(), NAMESPACE).list(&ListParams::default().labels(objects::WORKLOAD_LABEL)).await?;
            let nodes = Api::<Node>::all(c.clone()).list(&ListParams::default()).await?;
            let job = Api::<Job>::namespaced(c.clone(), NAMESPACE).get_opt("work").await?;
            let claims = Api::<PersistentVolumeClaim>::namespaced(c.clone(), NAMESPACE).list(&ListParams::default()).await?;
            let endpoints = Api::<Endpoints>::namespaced(c.clone(), NAMESPACE).get_opt("web").await?;
            Ok::<_, kube::Error>((pods, nodes, job, claims, endpoints))
        };
        let Ok(Ok((pods, nodes, job, claims, endpoints))) = tokio::time::timeout(Duration::from_secs(5), read).await else { continue };
        let ready = |n: &Node| {
            n.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        };
        let job_status = job.and_then(|j| j.status);
        let (calls_ok, calls_failed) = client_calls(c, &pods.items).await;
        return Some(FinalState {
            pods: pods.items.iter().map(pod_final).collect(),
            ready_nodes: nodes.items.iter().filter(|n| ready(n)).filter_map(|n| n.metadata.name.clone()).collect(),
            nodes: nodes.items.iter().filter_map(|n| n.metadata.name.clone()).collect(),
            job_succeeded: job_status.as_ref().and_then(|s| s.succeeded).unwrap_or(0) as u32,
            job_complete: job_status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Complete" && c.status == "True")),
            acknowledged_missing: Vec::new(),
            acknowledged: 0,
            bound_claims: claims
                .items
                .iter()
                .filter(|c| c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"))
                .filter_map(|c| c.metadata.name.clone())
                .collect(),
            service_endpoints: endpoints
                .and_then(|e| e.subsets)
                .into_iter()
                .flatten()
                .flat_map(|s| s.addresses.unwrap_or_default())
                .map(|a| a.ip)
                .collect(),
            client_calls_ok: calls_ok,
            client_calls_failed: calls_failed,
        });
    }
    None
}

fn pod_final(p: &Pod) -> PodFinal {
    let s = observe::seen(p, keelson_jepsen::self_heal::SeenKind::Apply, 0, 0);
    let claims = p
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| v.persistent_volume_claim.as_ref().map(|c| c.claim_name.clone()))
        .collect();
    let ip = p.status.as_ref().and_then(|s| s.pod_ip.clone());
    PodFinal { name: s.name, workload: s.workload, node: s.node, phase: s.phase, ready: s.ready, terminating: s.terminating, ip, claims }
}

/// The calls the clients (the DaemonSet's pods still there) answered and did not, from
/// their logs.
async fn client_calls(client: &kube::Client, pods: &[Pod]) -> (u64, u64) {
    let api: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let (mut ok, mut failed) = (0, 0);
    let daemons = pods.iter().filter(|p| p.metadata.labels.as_ref().and_then(|l| l.get(objects::WORKLOAD_LABEL)).map(String::as_str) == Some("daemonset"));
    for p in daemons {
        let Some(name) = p.metadata.name.as_deref() else { continue };
        let Ok(Ok(log)) = tokio::time::timeout(Duration::from_secs(10), api.logs(name, &Default::default())).await else { continue };
        ok += log.lines().filter(|l| *l == objects::CALL_OK).count() as u64;
        failed += log.lines().filter(|l| *l == objects::CALL_FAILED).count() as u64;
    }
    (ok, failed)
}
