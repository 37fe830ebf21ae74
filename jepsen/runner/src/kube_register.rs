//! The register workload through the Kubernetes API: register `k` is the ConfigMap
//! `jepsen-<k>` in namespace `default`, its value `data.value`.
//!
//! Operations (each client talks to one API server, client `i` starting on server
//! `i mod n`, and moves to the next one after an error that may be the server's):
//! - read: GET (the API server reads linearizably); 404 reads the initial `nil`;
//! - write: PUT without a resourceVersion precondition (the server re-reads and retries
//!   on its own), or POST when the object does not exist yet (and PUT again when another
//!   client created it in between);
//! - cas(old, new): GET, compare `data.value` with `old` here, then PUT with
//!   `metadata.resourceVersion` = the resourceVersion read. The PUT only applies if the
//!   object is still at that resourceVersion, i.e. still holds `old`: the write is
//!   "if value == old then value := new", linearized at the PUT. A value that differs
//!   (or an absent object) fails the cas without writing; a 409 Conflict means the
//!   object moved since the GET and nothing was written: fail.
//!
//! Outcomes (see [`crate::kube_api`] for how a failed call is classified): `ok` when the
//! server acknowledged; `fail` when nothing was written (any read that got no answer,
//! compare mismatches, 409, 404, 503 no leader, connection never made); `info`
//! otherwise (504, other 5xx, broken connections, timeouts). After `info` the process
//! counts as crashed and continues under a new id.

use std::sync::Arc;

use keelson_jepsen::{EventKind, Function, HistoryEvent, HistoryWriter, Value};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio_util::sync::CancellationToken;

use crate::kube_api::{self, KubeTarget, Servers};
use crate::register::{WriteOutcome, CAS_MISMATCH, OP_TIMEOUT};

/// The error of a cas whose conditional PUT got 409 Conflict (served, not applied).
pub const CAS_CONFLICT: &str = "conflict: resourceVersion changed since the read";

/// Name of register `key`'s ConfigMap.
pub fn configmap_name(key: &str) -> String {
    format!("jepsen-{key}")
}

/// A Kubernetes-API register workload's parameters.
#[derive(Clone, Debug)]
pub struct KubeRegisterWorkload {
    pub clients: usize,
    pub keys: usize,
    /// Values are drawn from `0..values`.
    pub values: i64,
    pub think: std::time::Duration,
}

impl Default for KubeRegisterWorkload {
    fn default() -> Self {
        Self { clients: 10, keys: 5, values: 5, think: std::time::Duration::from_millis(10) }
    }
}

enum Outcome {
    Ok(Value),
    Fail { error: String, rotate: bool },
    Info(String),
}

impl Outcome {
    fn from_error(e: &kube::Error) -> Outcome {
        match kube_api::classify(e) {
            WriteOutcome::Fail(m) => Outcome::Fail { error: m, rotate: !kube_api::served(e) },
            WriteOutcome::Info(m) => Outcome::Info(m),
        }
    }
}

fn parse_value(s: Option<&str>) -> Value {
    match s {
        None => Value::Nil,
        Some(s) => s.parse::<i64>().map(Value::Int).unwrap_or_else(|_| Value::str(s)),
    }
}

impl KubeRegisterWorkload {
    /// Runs `self.clients` clients until `stop`. Returns how many operations were invoked
    /// (0 when the API could not be reached at all: the error is logged).
    pub async fn run(&self, target: &KubeTarget, history: Arc<HistoryWriter>, seed: u64, stop: CancellationToken) -> u64 {
        let configs = match kube_api::api_configs(target).await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("jepsen: kube-register: {e}");
                return 0;
            }
        };
        if let Err(e) = kube_api::wait_for_namespace(&configs, std::time::Duration::from_secs(60)).await {
            eprintln!("jepsen: kube-register: {e}");
            return 0;
        }
        let mut tasks = Vec::new();
        for c in 0..self.clients {
            let clients = match kube_api::clients(&configs) {
                Ok(cl) => cl,
                Err(e) => {
                    eprintln!("jepsen: kube-register: {e}");
                    return 0;
                }
            };
            let w = self.clone();
            let history = history.clone();
            let stop = stop.clone();
            let servers = Servers::new(clients, c);
            tasks.push(tokio::spawn(async move {
                w.client_loop(c as u64, servers, history, seed ^ (c as u64).wrapping_mul(0x9e37_79b9), stop).await
            }));
        }
        let mut total = 0;
        for t in tasks {
            total += t.await.unwrap_or(0);
        }
        let _ = history.flush();
        total
    }

    async fn client_loop(&self, first_process: u64, mut servers: Servers, history: Arc<HistoryWriter>, seed: u64, stop: CancellationToken) -> u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut process = first_process;
        let mut invoked = 0;
        while !stop.is_cancelled() {
            let key = format!("{}", rng.gen_range(0..self.keys));
            let (f, arg) = match rng.gen_range(0..3) {
                0 => (Function::Read, Value::Nil),
                1 => (Function::Write, Value::Int(rng.gen_range(0..self.values))),
                _ => (Function::Cas, Value::pair(Value::Int(rng.gen_range(0..self.values)), Value::Int(rng.gen_range(0..self.values)))),
            };
            if history.invoke(process, f, Some(&key), arg.clone()).is_err() {
                return invoked;
            }
            invoked += 1;
            let outcome = match tokio::time::timeout(OP_TIMEOUT, perform(&servers, &configmap_name(&key), f, &arg)).await {
                Ok(o) => o,
                Err(_) => Outcome::Info("timed out".into()),
            };
            let (kind, value, error, rotate) = match outcome {
                Outcome::Ok(v) => (EventKind::Ok, v, None, false),
                Outcome::Fail { error, rotate } => (EventKind::Fail, arg.clone(), Some(error), rotate),
                Outcome::Info(e) => (EventKind::Info, arg.clone(), Some(e), true),
            };
            let mut event = HistoryEvent::new(process, kind, f, value).with_key(key.clone());
            event.error = error;
            if history.record_now(event).is_err() {
                return invoked;
            }
            if kind == EventKind::Info {
                // A crashed process never comes back: continue as a new one.
                process += self.clients as u64;
            }
            if rotate {
                servers.rotate();
            }
            if !self.think.is_zero() {
                tokio::time::sleep(self.think).await;
            }
        }
        invoked
    }
}

async fn perform(servers: &Servers, name: &str, f: Function, arg: &Value) -> Outcome {
    let api = servers.configmaps();
    match f {
        Function::Read => match api.get_opt(name).await {
            Ok(cm) => Outcome::Ok(parse_value(cm.as_ref().and_then(kube_api::value_of))),
            // A read that got no answer changed nothing.
            Err(e) => Outcome::Fail { error: format!("read: {e}"), rotate: true },
        },
        Function::Write => {
            let Value::Int(v) = arg else { return Outcome::Fail { error: "bad write argument".into(), rotate: false } };
            let cm = kube_api::configmap(name, &v.to_string(), None);
            // Every attempt but the last ended without writing (404 or AlreadyExists).
            for _ in 0..5 {
                match api.replace(name, &Default::default(), &cm).await {
                    Ok(_) => return Outcome::Ok(arg.clone()),
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Outcome::from_error(&e),
                }
                match api.create(&Default::default(), &cm).await {
                    Ok(_) => return Outcome::Ok(arg.clone()),
                    Err(kube::Error::Api(s)) if s.code == 409 => {}
                    Err(e) => return Outcome::from_error(&e),
                }
            }
            Outcome::Fail { error: "gave up: the object kept appearing and disappearing".into(), rotate: false }
        }
        Function::Cas => {
            let Value::List(pair) = arg else { return Outcome::Fail { error: "bad cas argument".into(), rotate: false } };
            let (Some(Value::Int(from)), Some(Value::Int(to))) = (pair.first(), pair.get(1)) else {
                return Outcome::Fail { error: "bad cas argument".into(), rotate: false };
            };
            let current = match api.get_opt(name).await {
                Ok(c) => c,
                Err(e) => return Outcome::Fail { error: format!("cas read: {e}"), rotate: true },
            };
            let Some(current) = current else { return Outcome::Fail { error: CAS_MISMATCH.into(), rotate: false } };
            if kube_api::value_of(&current) != Some(from.to_string().as_str()) {
                return Outcome::Fail { error: CAS_MISMATCH.into(), rotate: false };
            }
            let Some(rv) = current.metadata.resource_version.clone().filter(|rv| !rv.is_empty()) else {
                return Outcome::Fail { error: "object read without a resourceVersion".into(), rotate: false };
            };
            let next = kube_api::configmap(name, &to.to_string(), Some(rv));
            match api.replace(name, &Default::default(), &next).await {
                Ok(_) => Outcome::Ok(arg.clone()),
                Err(kube::Error::Api(s)) if s.code == 409 => Outcome::Fail { error: CAS_CONFLICT.into(), rotate: false },
                Err(e) => Outcome::from_error(&e),
            }
        }
        _ => Outcome::Fail { error: "unsupported function".into(), rotate: false },
    }
}
