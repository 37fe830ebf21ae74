//! Leader election through a `coordination.k8s.io/v1` Lease, with Kubernetes' rules
//! (client-go's `leaderelection`): candidates trust only locally observed time, a holder
//! renews every retry period and stops acting when it has not renewed within its renew
//! deadline, which is shorter than the lease, so it stops before anyone may take over.
//!
//! On top of Kubernetes: each term comes with a fencing token (the resourceVersion of the
//! write that made this candidate the holder, see the API server's `lease_fence`), and the
//! work of a term gets a kube client whose every request carries it. A write from a term
//! that has ended is refused by the API server in the write's own transaction.
//!
//! The decision of one round ([`decide`]) is a pure function; [`Elector::run`] is the
//! loop around it.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::fence;
use crate::metrics::ElectionMetrics;

/// A round of election could not talk to the API.
#[derive(Debug, thiserror::Error)]
pub enum ElectionError {
    #[error("lease {lease}: {source}")]
    Api { lease: String, #[source] source: kube::Error },
    #[error("lease {lease}: the API server returned a Lease without a usable resourceVersion")]
    NoResourceVersion { lease: String },
    #[error("building the fenced client: {0}")]
    Client(#[from] crate::fence::FenceError),
    #[error("invalid election timings: {0}")]
    Timings(String),
}

/// Kubernetes' leader-election timings (the scheduler's and controller manager's flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ElectionTimings {
    /// How long a lease is valid after its last observed change (`--leader-elect-lease-duration`).
    pub lease_duration: Duration,
    /// How long a holder keeps acting without a successful renewal (`--leader-elect-renew-deadline`).
    pub renew_deadline: Duration,
    /// How often candidates try and holders renew (`--leader-elect-retry-period`).
    pub retry_period: Duration,
}

impl Default for ElectionTimings {
    fn default() -> Self {
        Self { lease_duration: Duration::from_secs(15), renew_deadline: Duration::from_secs(10), retry_period: Duration::from_secs(2) }
    }
}

impl ElectionTimings {
    /// client-go's rule: lease > renew deadline > 1.2 × retry period.
    pub fn validate(&self) -> Result<(), ElectionError> {
        if self.lease_duration <= self.renew_deadline {
            return Err(ElectionError::Timings(format!("the lease duration ({:?}) must be longer than the renew deadline ({:?})", self.lease_duration, self.renew_deadline)));
        }
        if self.renew_deadline.as_secs_f64() <= 1.2 * self.retry_period.as_secs_f64() {
            return Err(ElectionTimings::too_short(self));
        }
        Ok(())
    }

    fn too_short(&self) -> ElectionError {
        ElectionError::Timings(format!("the renew deadline ({:?}) must be longer than 1.2 × the retry period ({:?})", self.renew_deadline, self.retry_period))
    }
}

/// What one election contends for and as whom.
#[derive(Clone, Debug)]
pub struct ElectionConfig {
    pub namespace: String,
    pub name: String,
    /// `holderIdentity`: `<server name>_<uuid>`, new at every start.
    pub identity: String,
    /// The component (`kube-scheduler`, …): Events' reporting controller, metrics label.
    pub component: String,
    pub timings: ElectionTimings,
    /// Release the lease when shut down (holder emptied, duration 1 s), so a successor
    /// takes over at once instead of after a whole lease.
    pub release_on_cancel: bool,
}

impl ElectionConfig {
    pub fn lease(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// The holder identity for a server: `<server name>_<uuid>`.
pub fn holder_identity(server: &str) -> String {
    format!("{server}_{}", uuid::Uuid::new_v4())
}

/// What a candidate last saw of the lease: when its record last changed, by its own clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observation {
    pub resource_version: String,
    pub holder: String,
    pub duration: Duration,
    pub seen_at: Instant,
}

impl Observation {
    /// The observation after reading `lease` at `now`: unchanged if its resourceVersion
    /// is the one seen before (the clock only starts again when the record changes).
    pub fn after_read(previous: Option<&Observation>, lease: &Lease, now: Instant, default_duration: Duration) -> Observation {
        let rv = lease.metadata.resource_version.clone().unwrap_or_default();
        match previous {
            Some(p) if p.resource_version == rv => p.clone(),
            _ => {
                let spec = lease.spec.as_ref();
                Observation {
                    resource_version: rv,
                    holder: spec.and_then(|s| s.holder_identity.clone()).unwrap_or_default(),
                    duration: spec
                        .and_then(|s| s.lease_duration_seconds)
                        .map(|s| Duration::from_secs(s.max(0) as u64))
                        .unwrap_or(default_duration),
                    seen_at: now,
                }
            }
        }
    }
}

/// One round's decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// There is no Lease: create it with us as holder.
    Create,
    /// Write the lease as ours; `takeover` when the holder changes to us.
    Claim { takeover: bool },
    /// Another holder's lease is valid (by our clock) until `until`.
    HeldBy { holder: String, until: Instant },
    /// We hold it but do not know our fencing token (the answer to the write that made us
    /// holder was lost): release it, and acquire it anew in a later round.
    Reacquire,
}

/// The decision of one round, from what was observed of the lease (`None`: absent).
pub fn decide(me: &str, observed: Option<&Observation>, now: Instant, know_token: bool) -> Attempt {
    let Some(o) = observed else { return Attempt::Create };
    if o.holder == me {
        return if know_token { Attempt::Claim { takeover: false } } else { Attempt::Reacquire };
    }
    let until = o.seen_at + o.duration;
    if !o.holder.is_empty() && until > now {
        return Attempt::HeldBy { holder: o.holder.clone(), until };
    }
    Attempt::Claim { takeover: true }
}

/// One term of leadership, handed to the work: a client whose every request is fenced on
/// this term's token, and the token cancelled when the term ends.
#[derive(Clone)]
pub struct Leadership {
    pub token: i64,
    /// Requests through this client carry `Keelson-Fence: <lease>:<token>`.
    pub client: kube::Client,
    /// Cancelled when the term ends: lost, stepped down or shut down.
    pub ended: CancellationToken,
    pub identity: String,
    /// Where the term's work reports requests it was denied.
    pub denials: std::sync::Arc<crate::denied::DenialReporter>,
    /// The process's metrics (the term's work queues report to them).
    pub metrics: ElectionMetrics,
}

impl Leadership {
    /// Ends the term from inside the work (a write came back fenced: another holder has
    /// the lease). The elector stops renewing and contends again.
    pub fn step_down(&self) {
        self.ended.cancel();
    }
}

/// What an elector is doing, for status output.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ElectionStatus {
    pub leading: bool,
    pub token: Option<i64>,
    /// The holder last observed (ours or another's).
    pub holder: String,
}

/// Why a term ended.
#[derive(Debug, PartialEq, Eq)]
enum TermEnd {
    Shutdown,
    SteppedDown,
    WorkEnded,
    Lost,
}

/// Contends for one Lease and runs work while holding it.
pub struct Elector {
    client: kube::Client,
    fenced_config: kube::Config,
    cfg: ElectionConfig,
    metrics: ElectionMetrics,
    status: watch::Sender<ElectionStatus>,
    observed: Option<Observation>,
    token: Option<i64>,
}

impl Elector {
    /// `client` makes the election's own requests; `config` is the same connection, from
    /// which each term's fenced client is built.
    pub fn new(client: kube::Client, config: kube::Config, cfg: ElectionConfig, metrics: ElectionMetrics) -> Result<Self, ElectionError> {
        cfg.timings.validate()?;
        Ok(Self { client, fenced_config: config, cfg, metrics, status: watch::channel(ElectionStatus::default()).0, observed: None, token: None })
    }

    /// Follows what the elector is doing.
    pub fn status(&self) -> watch::Receiver<ElectionStatus> {
        self.status.subscribe()
    }

    fn api(&self) -> Api<Lease> {
        Api::namespaced(self.client.clone(), &self.cfg.namespace)
    }

    fn api_error(&self, source: kube::Error) -> ElectionError {
        ElectionError::Api { lease: self.cfg.lease(), source }
    }

    fn spec(&self, previous: Option<&LeaseSpec>, takeover: bool) -> LeaseSpec {
        let now = MicroTime(jiff::Timestamp::now());
        let transitions = previous.and_then(|s| s.lease_transitions).unwrap_or(0);
        LeaseSpec {
            holder_identity: Some(self.cfg.identity.clone()),
            lease_duration_seconds: Some(self.cfg.timings.lease_duration.as_secs().max(1) as i32),
            acquire_time: if takeover { Some(now.clone()) } else { previous.and_then(|s| s.acquire_time.clone()).or(Some(now.clone())) },
            renew_time: Some(now),
            // client-go counts every change of holder, releases included.
            lease_transitions: Some(if takeover && previous.is_some() { transitions + 1 } else { transitions }),
            ..Default::default()
        }
    }

    fn rv_of(&self, lease: &Lease) -> Result<i64, ElectionError> {
        lease.metadata.resource_version.as_deref().and_then(|r| r.parse().ok()).ok_or(ElectionError::NoResourceVersion { lease: self.cfg.lease() })
    }

    /// One round: read the lease, decide, write. `Ok(true)` when we hold it afterwards.
    async fn try_acquire_or_renew(&mut self) -> Result<bool, ElectionError> {
        let api = self.api();
        let current = api.get_opt(&self.cfg.name).await.map_err(|e| self.api_error(e))?;
        let now = Instant::now();
        self.observed = current.as_ref().map(|l| Observation::after_read(self.observed.as_ref(), l, now, self.cfg.timings.lease_duration));
        let holder = self.observed.as_ref().map(|o| o.holder.clone()).unwrap_or_default();
        self.status.send_modify(|s| s.holder = holder.clone());
        match decide(&self.cfg.identity, self.observed.as_ref(), now, self.token.is_some()) {
            Attempt::HeldBy { .. } => Ok(false),
            Attempt::Create => {
                let lease = Lease {
                    metadata: ObjectMeta { name: Some(self.cfg.name.clone()), namespace: Some(self.cfg.namespace.clone()), ..Default::default() },
                    spec: Some(self.spec(None, true)),
                };
                match api.create(&PostParams::default(), &lease).await {
                    Ok(created) => self.won(&created, true),
                    Err(e) if is_conflict(&e) => Ok(false),
                    Err(e) => Err(self.api_error(e)),
                }
            }
            Attempt::Claim { takeover } => {
                let mut lease = current.expect("a claim follows a read lease");
                lease.spec = Some(self.spec(lease.spec.as_ref(), takeover));
                lease.metadata.managed_fields = None;
                match api.replace(&self.cfg.name, &PostParams::default(), &lease).await {
                    Ok(written) => self.won(&written, takeover),
                    Err(e) if is_conflict(&e) => Ok(false),
                    Err(e) => Err(self.api_error(e)),
                }
            }
            Attempt::Reacquire => {
                tracing::info!(lease = %self.cfg.lease(), "holding the lease without knowing its fencing token; releasing it to acquire it anew");
                self.release_current(current.expect("read")).await?;
                Ok(false)
            }
        }
    }

    fn won(&mut self, lease: &Lease, takeover: bool) -> Result<bool, ElectionError> {
        let rv = self.rv_of(lease)?;
        if takeover {
            self.token = Some(rv);
        }
        self.observed = Some(Observation::after_read(None, lease, Instant::now(), self.cfg.timings.lease_duration));
        Ok(true)
    }

    /// Empties the holder (duration 1 s) if we still hold the lease.
    async fn release_current(&mut self, mut lease: Lease) -> Result<(), ElectionError> {
        if lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref()) != Some(self.cfg.identity.as_str()) {
            return Ok(());
        }
        let now = MicroTime(jiff::Timestamp::now());
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = Some(String::new());
            spec.lease_duration_seconds = Some(1);
            spec.renew_time = Some(now.clone());
            spec.acquire_time = Some(now);
        }
        lease.metadata.managed_fields = None;
        self.api().replace(&self.cfg.name, &PostParams::default(), &lease).await.map_err(|e| self.api_error(e))?;
        self.token = None;
        Ok(())
    }

    async fn release(&mut self) {
        let lease = match self.api().get_opt(&self.cfg.name).await {
            Ok(Some(l)) => l,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(lease = %self.cfg.lease(), error = %e, "could not read the lease to release it");
                return;
            }
        };
        match self.release_current(lease).await {
            Ok(()) => tracing::info!(lease = %self.cfg.lease(), "released the lease"),
            Err(e) => tracing::warn!(lease = %self.cfg.lease(), error = %e, "could not release the lease"),
        }
    }

    /// Contends until `shutdown`; while holding the lease runs `work` with the term's
    /// [`Leadership`], and waits for it to return before contending again (so two terms
    /// of this elector never act at once). Work that returns by itself ends its term and
    /// the lease is released for another candidate.
    pub async fn run<W, F>(mut self, shutdown: CancellationToken, mut work: W)
    where
        W: FnMut(Leadership) -> F,
        F: Future<Output = ()> + Send + 'static,
    {
        let timings = self.cfg.timings;
        let recorder = crate::events::EventRecorder::new(self.client.clone(), &self.cfg.component, &self.cfg.identity);
        let election_denials = crate::denied::DenialReporter::new(recorder.clone(), &self.cfg.component, &self.cfg.namespace, &self.cfg.name);
        loop {
            // Candidate: try every retry period until we hold the lease.
            loop {
                match self.try_acquire_or_renew().await {
                    Ok(true) => break,
                    Ok(false) => {}
                    Err(ElectionError::Api { source, .. }) if crate::denied::forbidden(&source).is_some() => {
                        election_denials.check(&source).await;
                    }
                    Err(e) => tracing::debug!(error = %e, "leader election round failed"),
                }
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(jittered(timings.retry_period)) => {}
                }
            }
            let token = self.token.expect("holding the lease means knowing its token");
            let fenced = match fence::fenced_client(&self.fenced_config, &self.cfg.namespace, &self.cfg.name, token) {
                Ok(c) => c,
                Err(e) => {
                    tracing::error!(error = %e, "cannot build the fenced client");
                    return;
                }
            };
            tracing::info!(lease = %self.cfg.lease(), identity = %self.cfg.identity, token, "successfully acquired lease");
            self.metrics.set_leading(&self.cfg.component, true);
            self.status.send_modify(|s| {
                s.leading = true;
                s.token = Some(token);
                s.holder = self.cfg.identity.clone();
            });
            recorder.lease_event(&self.cfg.namespace, &self.cfg.name, "LeaderElection", &format!("{} became leader", self.cfg.identity)).await;
            // Not a child of `shutdown`: the loop below tells a shutdown from a step-down.
            let ended = CancellationToken::new();
            let denials = std::sync::Arc::new(crate::denied::DenialReporter::new(recorder.clone(), &self.cfg.component, &self.cfg.namespace, &self.cfg.name));
            let mut term = tokio::spawn(work(Leadership { token, client: fenced, ended: ended.clone(), identity: self.cfg.identity.clone(), denials, metrics: self.metrics.clone() }));
            let mut last_renew = Instant::now();
            let why = loop {
                tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => break TermEnd::Shutdown,
                    _ = ended.cancelled() => break TermEnd::SteppedDown,
                    _ = &mut term => break TermEnd::WorkEnded,
                    _ = tokio::time::sleep(timings.retry_period) => {}
                }
                let deadline = last_renew + timings.renew_deadline;
                let started = Instant::now();
                match tokio::time::timeout_at(deadline, self.try_acquire_or_renew()).await {
                    Ok(Ok(true)) => {
                        self.metrics.observe_renew(&self.cfg.component, started.elapsed());
                        last_renew = Instant::now();
                    }
                    Ok(Ok(false)) => break TermEnd::Lost,
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "failed to renew the lease");
                        if Instant::now() >= deadline {
                            break TermEnd::Lost;
                        }
                    }
                    Err(_) => break TermEnd::Lost,
                }
            };
            ended.cancel();
            if why != TermEnd::WorkEnded {
                let _ = term.await;
            }
            self.metrics.set_leading(&self.cfg.component, false);
            self.status.send_modify(|s| s.leading = false);
            match why {
                TermEnd::Lost => tracing::warn!(lease = %self.cfg.lease(), "leaderelection lost: could not renew within the renew deadline"),
                TermEnd::SteppedDown => tracing::warn!(lease = %self.cfg.lease(), "stepped down: a write of this term was fenced"),
                TermEnd::WorkEnded => tracing::warn!(lease = %self.cfg.lease(), "the leader's work ended by itself; releasing the lease"),
                TermEnd::Shutdown => {}
            }
            if why == TermEnd::Shutdown {
                if self.cfg.release_on_cancel {
                    self.release().await;
                }
                return;
            }
            if why == TermEnd::WorkEnded {
                self.release().await;
            }
            recorder.lease_event(&self.cfg.namespace, &self.cfg.name, "LeaderElection", &format!("{} stopped leading", self.cfg.identity)).await;
        }
    }
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// client-go's jitter: the retry period stretched by up to 20%.
fn jittered(d: Duration) -> Duration {
    use rand::Rng;
    d.mul_f64(1.0 + rand::thread_rng().gen_range(0.0..0.2))
}

#[cfg(test)]
#[path = "election_tests.rs"]
mod tests;
