//! The lease workload: one contender per server, each running the real
//! `keelson_component::Elector` on the Lease `jepsen/jepsen-lease` through a kube client
//! bound to its own server only (so a fault on a server hits its contender the way it
//! hits a component running inside that server). While it leads, a contender appends
//! writes fenced on its term's token: creates of ConfigMaps `w-<contender>-<seq>` (data:
//! token, contender, seq) every 50–100 ms, each a new name, never retried.
//!
//! Outcomes: acknowledged → `Ok` with the object's resourceVersion (its store revision);
//! a `Fenced` refusal → `Fenced`, and the contender steps down; a request that was never
//! sent or was refused before anything was written (see [`crate::kube_api`]) →
//! `Failed`; a timeout, a 5xx with unknown outcome or a broken connection → `Unknown`.
//! When a term ends, the contender stops at once, but a write it has in flight is left
//! to finish and recorded when it does: a deposed holder's late write, which fencing
//! must refuse (or which was stored before the lease moved).
//!
//! After the run, every ConfigMap of the namespace is listed through whichever server
//! answers: the final state for `keelson_jepsen::lease`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use keelson_component::election::{holder_identity, ElectionConfig, ElectionTimings, Elector, Leadership};
use keelson_component::ElectionMetrics;
use keelson_jepsen::lease::{LeaseWrite, RecoveryBound, StoredWrite, TermStart, WriteOutcome};
use kube::api::{ListParams, PostParams};
use kube::Api;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio_util::sync::CancellationToken;

use crate::kube_api::{self, KubeTarget};
use crate::register::WriteOutcome as Classified;

/// Namespace of the Lease and the writes.
pub const LEASE_NAMESPACE: &str = "jepsen";
/// The Lease the contenders elect through.
pub const LEASE_NAME: &str = "jepsen-lease";
/// Name prefix of the writes.
const WRITE_PREFIX: &str = "w-";

/// The lease workload's parameters.
#[derive(Clone, Debug)]
pub struct LeaseWorkload {
    /// The election's lease duration (whole seconds on the Lease).
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
    /// A holder pauses a random time in `write_every.0..=write_every.1` between writes.
    pub write_every: (Duration, Duration),
    /// A write not answered within this has an unknown outcome. Longer than the
    /// nemesis' pauses, so that a deposed holder's write stuck in a paused server gets
    /// its answer after the resume (it must be refused as fenced, or have been stored
    /// before the lease moved) instead of timing out.
    pub write_timeout: Duration,
    /// Failover must come within lease duration + retry period + this.
    pub slack: Duration,
}

impl Default for LeaseWorkload {
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(3),
            renew_deadline: Duration::from_secs(2),
            retry_period: Duration::from_millis(500),
            write_every: (Duration::from_millis(50), Duration::from_millis(100)),
            write_timeout: Duration::from_secs(8),
            slack: Duration::from_secs(3),
        }
    }
}

/// Who leads at the moment (as the contenders know it), for the targeted nemesis.
#[derive(Clone, Debug, Default)]
pub struct HolderCell(Arc<Mutex<Option<usize>>>);

impl HolderCell {
    pub fn get(&self) -> Option<usize> {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set(&self, c: usize) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(c);
    }

    /// Forgets `c` if it is still the one recorded.
    fn clear(&self, c: usize) {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if *g == Some(c) {
            *g = None;
        }
    }
}

/// What a lease run recorded.
#[derive(Debug, Default)]
pub struct LeaseRun {
    /// Every attempted write.
    pub writes: Vec<LeaseWrite>,
    /// The final state; `None` when it could not be read.
    pub stored: Option<Vec<StoredWrite>>,
    /// When the contenders were told to stop, ms since the epoch.
    pub end_ms: u64,
    /// The terms, as their contenders learned they lead.
    pub terms: Vec<TermStart>,
    /// Problems the checker cannot see (could not start, unreadable objects).
    pub violations: Vec<String>,
}

fn ms_since(epoch: Instant) -> u64 {
    epoch.elapsed().as_millis() as u64
}

/// What every contender's term shares.
struct Shared {
    epoch: Instant,
    writes: Mutex<Vec<LeaseWrite>>,
    holder: HolderCell,
    terms: Mutex<Vec<TermStart>>,
    /// Writes left in flight by terms that ended.
    detached: Mutex<Vec<tokio::task::JoinHandle<WriteOutcome>>>,
    params: LeaseWorkload,
}

impl Shared {
    fn record(&self, w: LeaseWrite) {
        self.writes.lock().unwrap_or_else(|e| e.into_inner()).push(w);
    }
}

impl LeaseWorkload {
    pub fn timings(&self) -> ElectionTimings {
        ElectionTimings { lease_duration: self.lease_duration, renew_deadline: self.renew_deadline, retry_period: self.retry_period }
    }

    /// The failover bound the checker applies.
    pub fn bound(&self) -> RecoveryBound {
        RecoveryBound {
            lease_duration_ms: self.lease_duration.as_millis() as u64,
            retry_period_ms: self.retry_period.as_millis() as u64,
            slack_ms: self.slack.as_millis() as u64,
        }
    }

    /// Runs one contender per server until `stop`, then reads the final state. Times are
    /// ms since `epoch`; `holder` follows who leads.
    pub async fn run(&self, target: &KubeTarget, epoch: Instant, seed: u64, holder: HolderCell, stop: CancellationToken) -> LeaseRun {
        let mut run = LeaseRun::default();
        if let Err(e) = self.timings().validate() {
            run.violations.push(format!("lease workload: {e}"));
            return run;
        }
        let configs = match kube_api::api_configs(target).await {
            Ok(c) => c,
            Err(e) => {
                run.violations.push(format!("lease workload could not start: {e}"));
                return run;
            }
        };
        if let Err(e) = setup(&configs).await {
            run.violations.push(format!("lease workload could not start: {e}"));
            return run;
        }
        let shared = Arc::new(Shared {
            epoch,
            writes: Mutex::new(Vec::new()),
            holder,
            terms: Mutex::new(Vec::new()),
            detached: Mutex::new(Vec::new()),
            params: self.clone(),
        });
        let mut contenders = Vec::new();
        for (c, config) in configs.iter().enumerate() {
            let client = match kube::Client::try_from(config.clone()) {
                Ok(cl) => cl,
                Err(e) => {
                    run.violations.push(format!("contender {c}: building its client: {e}"));
                    continue;
                }
            };
            let cfg = ElectionConfig {
                namespace: LEASE_NAMESPACE.into(),
                name: LEASE_NAME.into(),
                identity: holder_identity(&format!("c{c}")),
                component: "jepsen-lease".into(),
                timings: self.timings(),
                release_on_cancel: true,
            };
            let elector = match Elector::new(client, config.clone(), cfg, ElectionMetrics::default()) {
                Ok(e) => e,
                Err(e) => {
                    run.violations.push(format!("contender {c}: {e}"));
                    continue;
                }
            };
            let shared = shared.clone();
            let seqs = Arc::new(AtomicU64::new(0));
            let seed = seed ^ (c as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            contenders.push(tokio::spawn(elector.run(stop.clone(), move |leadership| {
                let (shared, seqs) = (shared.clone(), seqs.clone());
                async move { hold(c, leadership, shared, seqs, seed).await }
            })));
        }
        stop.cancelled().await;
        run.end_ms = ms_since(epoch);
        for t in contenders {
            // An elector stuck in a request to a server that never answers is left behind.
            let abort = t.abort_handle();
            if tokio::time::timeout(Duration::from_secs(10), t).await.is_err() {
                abort.abort();
            }
        }
        // Writes left in flight by ended terms finish within their timeout.
        let detached = std::mem::take(&mut *shared.detached.lock().unwrap_or_else(|e| e.into_inner()));
        for w in detached {
            let abort = w.abort_handle();
            if tokio::time::timeout(self.write_timeout + Duration::from_secs(2), w).await.is_err() {
                abort.abort();
                run.violations.push("a write outlived its own timeout; its outcome is not recorded".into());
            }
        }
        run.writes = std::mem::take(&mut *shared.writes.lock().unwrap_or_else(|e| e.into_inner()));
        run.writes.sort_by_key(|w| (w.invoke_ms, w.contender, w.seq));
        run.terms = std::mem::take(&mut *shared.terms.lock().unwrap_or_else(|e| e.into_inner()));
        run.terms.sort_by_key(|t| t.began_ms);
        match final_state(&configs).await {
            Ok((stored, problems)) => {
                run.stored = Some(stored);
                run.violations.extend(problems);
            }
            Err(e) => run.violations.push(format!("the final state could not be read: {e}")),
        }
        run
    }
}

/// Waits for the API and creates the namespace.
async fn setup(configs: &[kube::Config]) -> Result<(), String> {
    kube_api::wait_for_namespace(configs, Duration::from_secs(60)).await?;
    let clients = kube_api::clients(configs)?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let ns = Namespace { metadata: ObjectMeta { name: Some(LEASE_NAMESPACE.into()), ..Default::default() }, ..Default::default() };
    let mut i = 0usize;
    loop {
        let api: Api<Namespace> = Api::all(clients[i % clients.len()].clone());
        let last = match tokio::time::timeout(Duration::from_secs(5), api.create(&PostParams::default(), &ns)).await {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(kube::Error::Api(s))) if s.code == 409 => return Ok(()),
            Ok(Err(e)) => e.to_string(),
            Err(_) => "timed out".into(),
        };
        if Instant::now() >= deadline {
            return Err(format!("creating namespace {LEASE_NAMESPACE}: {last}"));
        }
        i += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn write_object(contender: usize, seq: u64, token: i64) -> ConfigMap {
    let data: BTreeMap<String, String> =
        [("token", token.to_string()), ("contender", contender.to_string()), ("seq", seq.to_string())].into_iter().map(|(k, v)| (k.into(), v)).collect();
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(format!("{WRITE_PREFIX}{contender}-{seq}")),
            namespace: Some(LEASE_NAMESPACE.into()),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    }
}

/// One fenced create, recorded with its outcome; its own timeout bounds it.
async fn write_one(api: Api<ConfigMap>, c: usize, token: i64, seq: u64, shared: Arc<Shared>) -> WriteOutcome {
    let timeout = shared.params.write_timeout;
    let obj = write_object(c, seq, token);
    let invoke_ms = ms_since(shared.epoch);
    let result = tokio::time::timeout(timeout, api.create(&PostParams::default(), &obj)).await;
    let (outcome, error) = match result {
        Ok(Ok(created)) => match kube_api::revision_of(&created.metadata) {
            Some(revision) => (WriteOutcome::Ok { revision }, None),
            None => (WriteOutcome::Unknown, Some("acknowledged without a usable resourceVersion".to_string())),
        },
        Ok(Err(e)) if keelson_component::fence::is_fenced(&e) => (WriteOutcome::Fenced, Some(e.to_string())),
        Ok(Err(e)) => match kube_api::classify(&e) {
            Classified::Fail(m) => (WriteOutcome::Failed, Some(m)),
            Classified::Info(m) => (WriteOutcome::Unknown, Some(m)),
        },
        Err(_) => (WriteOutcome::Unknown, Some(format!("timed out after {timeout:?}"))),
    };
    shared.record(LeaseWrite { contender: c, token, seq, outcome, invoke_ms, complete_ms: ms_since(shared.epoch), error });
    outcome
}

/// One term of contender `c`: append fenced writes until the term ends. A write still
/// in flight when the term ends is left to finish by itself (a deposed holder's late
/// write: it must come back fenced, or have been stored before the lease moved); the
/// term returns at once.
async fn hold(c: usize, leadership: Leadership, shared: Arc<Shared>, seqs: Arc<AtomicU64>, seed: u64) {
    let token = leadership.token;
    let began_ms = ms_since(shared.epoch);
    shared.terms.lock().unwrap_or_else(|e| e.into_inner()).push(TermStart { contender: c, token, began_ms });
    shared.holder.set(c);
    let p = &shared.params;
    let api: Api<ConfigMap> = Api::namespaced(leadership.client.clone(), LEASE_NAMESPACE);
    let mut rng = StdRng::seed_from_u64(seed ^ token as u64);
    while !leadership.ended.is_cancelled() {
        let seq = seqs.fetch_add(1, Ordering::Relaxed) + 1;
        let mut write = tokio::spawn(write_one(api.clone(), c, token, seq, shared.clone()));
        let outcome = tokio::select! {
            biased;
            _ = leadership.ended.cancelled() => {
                shared.detached.lock().unwrap_or_else(|e| e.into_inner()).push(write);
                break;
            }
            r = &mut write => r.unwrap_or(WriteOutcome::Unknown),
        };
        if outcome == WriteOutcome::Fenced {
            // Another holder has the lease: stop acting at once.
            leadership.step_down();
            break;
        }
        let pause = rng.gen_range(p.write_every.0..=p.write_every.1.max(p.write_every.0));
        tokio::select! {
            _ = leadership.ended.cancelled() => break,
            _ = tokio::time::sleep(pause) => {}
        }
    }
    shared.holder.clear(c);
}

/// Every write in the namespace, listed (linearizably) through the first server that
/// answers; plus problems with objects that cannot be read as writes.
async fn final_state(configs: &[kube::Config]) -> Result<(Vec<StoredWrite>, Vec<String>), String> {
    let clients = kube_api::clients(configs)?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut i = 0usize;
    let list = loop {
        let api: Api<ConfigMap> = Api::namespaced(clients[i % clients.len()].clone(), LEASE_NAMESPACE);
        let last = match tokio::time::timeout(Duration::from_secs(10), api.list(&ListParams::default())).await {
            Ok(Ok(list)) => break list,
            Ok(Err(e)) => e.to_string(),
            Err(_) => "timed out".to_string(),
        };
        if Instant::now() >= deadline {
            return Err(last);
        }
        i += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let mut stored = Vec::new();
    let mut problems = Vec::new();
    for cm in &list.items {
        let name = cm.metadata.name.clone().unwrap_or_default();
        if !name.starts_with(WRITE_PREFIX) {
            continue;
        }
        match stored_write(cm) {
            Some(s) if name == format!("{WRITE_PREFIX}{}-{}", s.contender, s.seq) => stored.push(s),
            Some(s) => problems.push(format!("stored object {name} holds the data of write c{}#{}", s.contender, s.seq)),
            None => problems.push(format!("stored object {name} is not a readable write: {:?} at {:?}", cm.data, cm.metadata.resource_version)),
        }
    }
    Ok((stored, problems))
}

fn stored_write(cm: &ConfigMap) -> Option<StoredWrite> {
    let data = cm.data.as_ref()?;
    Some(StoredWrite {
        contender: data.get("contender")?.parse().ok()?,
        token: data.get("token")?.parse().ok()?,
        seq: data.get("seq")?.parse().ok()?,
        revision: kube_api::revision_of(&cm.metadata)?,
    })
}
