//! The self-heal workload: a Deployment, a DaemonSet and a Job on real nodes while the
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

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod};
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
            shape: Shape { replicas: 3, job_completions, job_parallelism: 2, job_seconds: 4, toleration_seconds: 2 },
            converge: Duration::from_secs(180),
        }
    }

    pub fn declared(&self) -> Declared {
        Declared { replicas: self.shape.replicas, max_surge: objects::MAX_SURGE, job_completions: self.shape.job_completions }
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
            create::<DaemonSet>(&clients, None, objects::daemonset()).await?;
            create::<Job>(&clients, None, objects::job(&self.shape)).await
        };
        if let Err(e) = declared.await {
            out.violations.push(format!("declaring the workloads failed: {e}"));
        }
        let writer = tokio::spawn(write_acknowledged(clients.clone(), stop.clone()));
        stop.cancelled().await;
        let acked = writer.await.unwrap_or_default();
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

    /// Healed: every node Ready, the Deployment's replicas Ready, one Ready daemon pod
    /// per node, the Job complete, nothing Pending or Terminating.
    fn converged(&self, s: &FinalState) -> bool {
        let deployment = s.pods.iter().filter(|p| p.workload == "deployment" && p.ready && !p.terminating).count() as u32;
        let daemons = s.pods.iter().filter(|p| p.workload == "daemonset" && p.ready && !p.terminating).count();
        let settled = s.pods.iter().all(|p| !p.terminating && p.phase != "Pending");
        s.ready_nodes.len() == s.nodes.len()
            && deployment == self.shape.replicas
            && daemons == s.nodes.len()
            && s.job_complete
            && settled
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

/// The workload's pods, the Nodes and the Job, through the first server that answers.
async fn read_final(clients: &[kube::Client]) -> Option<FinalState> {
    for c in clients {
        let read = async {
            let pods = Api::<Pod>::namespaced(c.clone(), NAMESPACE).list(&ListParams::default().labels(objects::WORKLOAD_LABEL)).await?;
            let nodes = Api::<Node>::all(c.clone()).list(&ListParams::default()).await?;
            let job = Api::<Job>::namespaced(c.clone(), NAMESPACE).get_opt("work").await?;
            Ok::<_, kube::Error>((pods, nodes, job))
        };
        let Ok(Ok((pods, nodes, job))) = tokio::time::timeout(Duration::from_secs(5), read).await else { continue };
        let ready = |n: &Node| {
            n.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        };
        let job_status = job.and_then(|j| j.status);
        return Some(FinalState {
            pods: pods
                .items
                .iter()
                .map(|p| {
                    let s = observe::seen(p, keelson_jepsen::self_heal::SeenKind::Apply, 0, 0);
                    PodFinal { name: s.name, workload: s.workload, node: s.node, phase: s.phase, ready: s.ready, terminating: s.terminating }
                })
                .collect(),
            ready_nodes: nodes.items.iter().filter(|n| ready(n)).filter_map(|n| n.metadata.name.clone()).collect(),
            nodes: nodes.items.iter().filter_map(|n| n.metadata.name.clone()).collect(),
            job_succeeded: job_status.as_ref().and_then(|s| s.succeeded).unwrap_or(0) as u32,
            job_complete: job_status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Complete" && c.status == "True")),
            acknowledged_missing: Vec::new(),
            acknowledged: 0,
        });
    }
    None
}
