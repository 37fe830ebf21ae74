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

use keelson_jepsen::{Function, HistoryWriter, Value};
use tokio_util::sync::CancellationToken;

use crate::kube_api::{self, KubeTarget, Servers};
use crate::register::{client_loop, Outcome, RegisterTarget, RegisterWorkload, WriteOutcome, CAS_MISMATCH};

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

/// The outcome of a failed Kubernetes API call: `fail` when nothing was written (the
/// client moves on unless the server answered), `info` when it may have been.
fn outcome_of(e: &kube::Error) -> Outcome {
    match kube_api::classify(e) {
        WriteOutcome::Fail(m) => Outcome::Fail { error: m, rotate: !kube_api::served(e) },
        WriteOutcome::Info(m) => Outcome::Info(m),
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
            let w = RegisterWorkload { clients: self.clients, keys: self.keys, values: self.values, think: self.think };
            let history = history.clone();
            let stop = stop.clone();
            let servers = Servers::new(clients, c);
            tasks.push(tokio::spawn(async move {
                client_loop(&w, c as u64, KubeRegisters(servers), history, seed ^ (c as u64).wrapping_mul(0x9e37_79b9), stop).await
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

/// Registers as ConfigMaps, through one client per API server.
struct KubeRegisters(Servers);

impl RegisterTarget for KubeRegisters {
    async fn perform(&self, key: &str, f: Function, arg: &Value) -> Outcome {
        perform(&self.0, &configmap_name(key), f, arg).await
    }

    fn rotate(&mut self) {
        self.0.rotate();
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
            let Value::Int(v) = arg else { return Outcome::fail("bad write argument") };
            let cm = kube_api::configmap(name, &v.to_string(), None);
            // Every attempt but the last ended without writing (404 or AlreadyExists).
            for _ in 0..5 {
                match api.replace(name, &Default::default(), &cm).await {
                    Ok(_) => return Outcome::Ok(arg.clone()),
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return outcome_of(&e),
                }
                match api.create(&Default::default(), &cm).await {
                    Ok(_) => return Outcome::Ok(arg.clone()),
                    Err(kube::Error::Api(s)) if s.code == 409 => {}
                    Err(e) => return outcome_of(&e),
                }
            }
            Outcome::fail("gave up: the object kept appearing and disappearing")
        }
        Function::Cas => {
            let Value::List(pair) = arg else { return Outcome::fail("bad cas argument") };
            let (Some(Value::Int(from)), Some(Value::Int(to))) = (pair.first(), pair.get(1)) else {
                return Outcome::fail("bad cas argument");
            };
            let current = match api.get_opt(name).await {
                Ok(c) => c,
                Err(e) => return Outcome::Fail { error: format!("cas read: {e}"), rotate: true },
            };
            let Some(current) = current else { return Outcome::fail(CAS_MISMATCH) };
            if kube_api::value_of(&current) != Some(from.to_string().as_str()) {
                return Outcome::fail(CAS_MISMATCH);
            }
            let Some(rv) = current.metadata.resource_version.clone().filter(|rv| !rv.is_empty()) else {
                return Outcome::fail("object read without a resourceVersion");
            };
            let next = kube_api::configmap(name, &to.to_string(), Some(rv));
            match api.replace(name, &Default::default(), &next).await {
                Ok(_) => Outcome::Ok(arg.clone()),
                Err(kube::Error::Api(s)) if s.code == 409 => Outcome::fail(CAS_CONFLICT),
                Err(e) => outcome_of(&e),
            }
        }
        _ => Outcome::fail("unsupported function"),
    }
}
