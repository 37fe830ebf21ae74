//! The register workload: independent compare-and-set registers (one store key each),
//! read, written and cas'ed by concurrent clients.
//!
//! Outcome classification (what the checker may assume):
//! - `ok`: the store acknowledged it;
//! - `fail`: it definitely did not happen (a cas whose compare failed; a request refused
//!   before any leader appended it; a read that got no answer: reads change nothing);
//! - `info`: unknown (timeout, connection lost mid-call, "outcome unknown" errors). The
//!   process is then considered crashed and continues under a new process id.

use std::sync::Arc;
use std::time::Duration;

use keelson_client::api::{ReadConsistency, StoreError};
use keelson_client::{ClientError, PeerTls, StoreClient};
use keelson_jepsen::{EventKind, Function, HistoryEvent, HistoryWriter, Value};
use keelson_mvcc::{Compare, CompareOp, CompareTarget, KeyRange, Op, PutRequest, RangeRequest, TxnRequest};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio_util::sync::CancellationToken;

/// Store key prefix of the registers.
pub const REGISTER_PREFIX: &str = "/jepsen/register/";

/// The error recorded for a cas whose compare did not hold (a served request).
pub const CAS_MISMATCH: &str = "compare failed";

/// Per-operation deadline; past it the outcome is unknown.
pub(crate) const OP_TIMEOUT: Duration = Duration::from_secs(5);

/// A register workload's parameters.
#[derive(Clone, Debug)]
pub struct RegisterWorkload {
    pub clients: usize,
    pub keys: usize,
    /// Values are drawn from `0..values`.
    pub values: i64,
    /// Pause between a client's operations.
    pub think: Duration,
}

impl Default for RegisterWorkload {
    fn default() -> Self {
        Self { clients: 10, keys: 5, values: 5, think: Duration::from_millis(10) }
    }
}

/// What one register operation came to, in either workload.
pub(crate) enum Outcome {
    /// Acknowledged, with the value read or written.
    Ok(Value),
    /// Definitely not applied; `rotate`: the server may be at fault, so the client moves
    /// to the next one.
    Fail { error: String, rotate: bool },
    /// May or may not have been applied.
    Info(String),
}

impl Outcome {
    /// A failure after which the client stays on its server.
    pub(crate) fn fail(error: impl Into<String>) -> Self {
        Outcome::Fail { error: error.into(), rotate: false }
    }
}

/// How a failed write is recorded.
pub(crate) enum WriteOutcome {
    /// Definitely not applied.
    Fail(String),
    /// Outcome unknown.
    Info(String),
}

impl From<WriteOutcome> for Outcome {
    fn from(w: WriteOutcome) -> Self {
        match w {
            WriteOutcome::Fail(m) => Outcome::Fail { error: m, rotate: true },
            WriteOutcome::Info(m) => Outcome::Info(m),
        }
    }
}

/// Whether a failed write may have been applied.
pub(crate) fn classify_write_error(e: &ClientError) -> WriteOutcome {
    match e {
        // Refused before it was appended anywhere.
        ClientError::Store(StoreError::NoLeader(m)) => WriteOutcome::Fail(format!("no leader: {m}")),
        ClientError::Store(StoreError::NotLeader { .. }) => WriteOutcome::Fail("not leader".into()),
        ClientError::Store(StoreError::InvalidRequest(m)) => WriteOutcome::Fail(m.clone()),
        // A connection that was never made carried nothing.
        ClientError::Transport { status, .. } if keelson_client::never_sent(status) => {
            WriteOutcome::Fail(format!("not sent: {}", status.message()))
        }
        other => WriteOutcome::Info(other.to_string()),
    }
}

fn parse_value(v: &[u8]) -> Value {
    std::str::from_utf8(v).ok().and_then(|s| s.parse::<i64>().ok()).map(Value::Int).unwrap_or(Value::str(String::from_utf8_lossy(v)))
}

impl RegisterWorkload {
    /// Runs `self.clients` clients until `stop`; client `i` starts on endpoint `i mod n`
    /// and moves to the next replica after an error. `tls`: the identity the store port
    /// requires (mutual TLS), `None` for plaintext. Returns how many operations were
    /// invoked.
    pub async fn run(
        &self,
        endpoints: &[String],
        tls: Option<&PeerTls>,
        history: Arc<HistoryWriter>,
        seed: u64,
        stop: CancellationToken,
    ) -> u64 {
        let mut tasks = Vec::new();
        for c in 0..self.clients {
            let client = match StoreClient::with_transport(endpoints, tls) {
                Ok(cl) => cl.starting_at(c),
                Err(e) => {
                    tracing::error!(error = %e, "bad endpoints");
                    return 0;
                }
            };
            let w = self.clone();
            let history = history.clone();
            let stop = stop.clone();
            tasks.push(tokio::spawn(async move {
                client_loop(&w, c as u64, StoreRegisters(client), history, seed ^ (c as u64 * 0x9e37), stop).await
            }));
        }
        let mut total = 0;
        for t in tasks {
            total += t.await.unwrap_or(0);
        }
        let _ = history.flush();
        total
    }
}

/// Where a register client sends its operations: the store API ([`StoreRegisters`]) or
/// the Kubernetes API (`crate::kube_register`).
pub(crate) trait RegisterTarget {
    /// Performs `f` with `arg` on register `key` (the history's key, e.g. `"3"`).
    fn perform(&self, key: &str, f: Function, arg: &Value) -> impl std::future::Future<Output = Outcome> + Send;
    /// Moves on to the next server.
    fn rotate(&mut self);
}

/// One client of a register workload (store or Kubernetes API): draws operations on
/// `w.keys` registers with values from `0..w.values`, records each invoke and
/// completion, and runs until `stop`. After `info` the process counts as crashed and
/// continues under a new id (`+ w.clients`); after `info`, or a failure that may be the
/// server's, the client moves to the next server. Returns how many operations it invoked.
pub(crate) async fn client_loop<T: RegisterTarget>(
    w: &RegisterWorkload,
    first_process: u64,
    mut target: T,
    history: Arc<HistoryWriter>,
    seed: u64,
    stop: CancellationToken,
) -> u64 {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut process = first_process;
    let mut invoked = 0;
    while !stop.is_cancelled() {
        let key = format!("{}", rng.gen_range(0..w.keys));
        let (f, arg) = match rng.gen_range(0..3) {
            0 => (Function::Read, Value::Nil),
            1 => (Function::Write, Value::Int(rng.gen_range(0..w.values))),
            _ => (Function::Cas, Value::pair(Value::Int(rng.gen_range(0..w.values)), Value::Int(rng.gen_range(0..w.values)))),
        };
        if history.invoke(process, f, Some(&key), arg.clone()).is_err() {
            return invoked;
        }
        invoked += 1;
        let outcome = match tokio::time::timeout(OP_TIMEOUT, target.perform(&key, f, &arg)).await {
            Ok(o) => o,
            Err(_) => Outcome::Info("timed out".into()),
        };
        let (kind, value, error, rotate) = match outcome {
            Outcome::Ok(v) => (EventKind::Ok, v, None, false),
            Outcome::Fail { error, rotate } => (EventKind::Fail, arg.clone(), Some(error), rotate),
            Outcome::Info(e) => (EventKind::Info, arg.clone(), Some(e), true),
        };
        let mut event = HistoryEvent::new(process, kind, f, value).with_key(key);
        event.error = error;
        if history.record_now(event).is_err() {
            return invoked;
        }
        if kind == EventKind::Info {
            // A crashed process never comes back: continue as a new one.
            process += w.clients as u64;
        }
        if rotate {
            target.rotate();
        }
        if !w.think.is_zero() {
            tokio::time::sleep(w.think).await;
        }
    }
    invoked
}

/// Registers as store keys `REGISTER_PREFIX<key>`, through one [`StoreClient`]. Every
/// failure moves the client to the next replica.
struct StoreRegisters(StoreClient);

impl RegisterTarget for StoreRegisters {
    async fn perform(&self, key: &str, f: Function, arg: &Value) -> Outcome {
        let client = &self.0;
        let key = format!("{REGISTER_PREFIX}{key}");
        let fail = |error: String| Outcome::Fail { error, rotate: true };
        match f {
            Function::Read => {
                let req = RangeRequest { range: KeyRange::single(key.as_str()), ..Default::default() };
                match client.range(req, ReadConsistency::Linearizable).await {
                    Ok(r) => Outcome::Ok(r.response.kvs.first().map(|kv| parse_value(&kv.value)).unwrap_or(Value::Nil)),
                    // A read that got no answer changed nothing.
                    Err(e) => fail(e.to_string()),
                }
            }
            Function::Write => {
                let Value::Int(v) = arg else { return fail("bad write argument".into()) };
                match client.put(key.as_bytes(), v.to_string().as_bytes()).await {
                    Ok(_) => Outcome::Ok(arg.clone()),
                    Err(e) => classify_write_error(&e).into(),
                }
            }
            Function::Cas => {
                let Value::List(pair) = arg else { return fail("bad cas argument".into()) };
                let (Some(Value::Int(from)), Some(Value::Int(to))) = (pair.first(), pair.get(1)) else {
                    return fail("bad cas argument".into());
                };
                let txn = TxnRequest {
                    compare: vec![Compare {
                        key: key.as_bytes().to_vec(),
                        op: CompareOp::Equal,
                        target: CompareTarget::Value(from.to_string().into_bytes()),
                    }],
                    success: vec![Op::Put(PutRequest { key: key.as_bytes().to_vec(), value: to.to_string().into_bytes(), prev_kv: false })],
                    failure: vec![],
                };
                match client.txn(txn).await {
                    Ok(r) if r.response.succeeded => Outcome::Ok(arg.clone()),
                    Ok(_) => fail(CAS_MISMATCH.into()),
                    Err(e) => classify_write_error(&e).into(),
                }
            }
            _ => fail("unsupported function".into()),
        }
    }

    fn rotate(&mut self) {
        self.0.rotate();
    }
}
