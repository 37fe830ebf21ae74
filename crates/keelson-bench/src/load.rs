//! Starting the systems under test and driving them.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use keelson_client::api::ReadConsistency;
use keelson_client::{PeerTls, StoreClient};
use keelson_runner::{Cluster, ClusterSpec};
use keelson_mvcc::{KeyRange, RangeRequest};
use rand::Rng;

use crate::report::{print_table, PhaseResult, SystemReport};

#[derive(Args, Clone, Debug)]
pub struct StoreBenchArgs {
    /// Client counts to run each phase with.
    #[arg(long, value_delimiter = ',', default_value = "1,16,64,256")]
    pub clients: Vec<usize>,
    /// Seconds per phase and client count.
    #[arg(long, default_value_t = 10)]
    pub duration_secs: u64,
    /// Value size in bytes.
    #[arg(long, default_value_t = 256)]
    pub value_size: usize,
    /// Number of distinct keys (pre-loaded before the read phases).
    #[arg(long, default_value_t = 10_000)]
    pub keys: usize,
    /// Which phases: any of write, read (linearizable), serializable.
    #[arg(long, value_delimiter = ',', default_value = "write,read,serializable")]
    pub mix: Vec<String>,
    /// Servers of the Keelson cluster the bench starts.
    #[arg(long, default_value_t = 3)]
    pub servers: usize,
    /// Use a running Keelson cluster instead of starting one (comma-separated host:port).
    #[arg(long, value_delimiter = ',')]
    pub endpoints: Vec<String>,
    /// PKI directory of that cluster (ca.crt, admin.crt, admin.key) for its mutual TLS.
    #[arg(long)]
    pub pki_dir: Option<PathBuf>,
    /// Also start a 3-member etcd on loopback (deploy/etcd/etcd-cluster.sh) and run the
    /// same load against it.
    #[arg(long)]
    pub compare_etcd: bool,
    /// Drive a running etcd at these endpoints instead of starting one (implies --compare-etcd).
    #[arg(long, value_delimiter = ',')]
    pub etcd_endpoints: Vec<String>,
    /// Skip Keelson (only with --compare-etcd or --etcd-endpoints).
    #[arg(long)]
    pub etcd_only: bool,
    /// The etcd start script (default: deploy/etcd/etcd-cluster.sh above the current directory).
    #[arg(long)]
    pub etcd_script: Option<PathBuf>,
    /// Run the started etcd without TLS. By default it uses mutual TLS on client and peer
    /// traffic, as Keelson always does (and as a production etcd does), so both systems
    /// pay for encryption.
    #[arg(long)]
    pub etcd_plaintext: bool,
    /// Print one JSON object on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// One benchmark connection.
#[derive(Clone)]
pub(crate) enum Conn {
    Keelson(StoreClient),
    Etcd(Box<etcd_client::KvClient>),
}

impl Conn {
    pub(crate) async fn put(&mut self, key: &[u8], value: &[u8]) -> anyhow::Result<()> {
        match self {
            Conn::Keelson(c) => c.put(key, value).await.map(|_| ()).map_err(Into::into),
            Conn::Etcd(c) => c.put(key, value, None).await.map(|_| ()).map_err(Into::into),
        }
    }

    async fn get(&mut self, key: &[u8], linearizable: bool) -> anyhow::Result<()> {
        match self {
            Conn::Keelson(c) => {
                let consistency = if linearizable { ReadConsistency::Linearizable } else { ReadConsistency::Serializable };
                let r = c.range(RangeRequest { range: KeyRange::single(key), ..Default::default() }, consistency).await?;
                if r.response.kvs.is_empty() {
                    bail!("pre-loaded key missing");
                }
                Ok(())
            }
            Conn::Etcd(c) => {
                let opts = (!linearizable).then(|| etcd_client::GetOptions::new().with_serializable());
                let r = c.get(key, opts).await?;
                if r.kvs().is_empty() {
                    bail!("pre-loaded key missing");
                }
                Ok(())
            }
        }
    }
}

/// Connections, one per client, spread over the endpoints.
pub(crate) async fn connect(system: &str, endpoints: &[String], n: usize, tls: Option<&PeerTls>) -> anyhow::Result<Vec<Conn>> {
    let mut out = Vec::with_capacity(n);
    match system {
        "keelson" => {
            let base = StoreClient::with_transport(endpoints, tls)?;
            for i in 0..n {
                out.push(Conn::Keelson(base.starting_at(i)));
            }
        }
        _ => {
            // One channel per endpoint, shared by the clients assigned to it (as Keelson's
            // client shares one channel per endpoint).
            let mut per_ep = Vec::new();
            for ep in endpoints {
                let (url, opts) = match tls {
                    Some(t) => {
                        let tls = etcd_client::TlsOptions::new()
                            .ca_certificate(etcd_client::Certificate::from_pem(&t.ca_pem))
                            .identity(etcd_client::Identity::from_pem(&t.cert_pem, &t.key_pem));
                        (format!("https://{ep}"), Some(etcd_client::ConnectOptions::new().with_tls(tls)))
                    }
                    None => (format!("http://{ep}"), None),
                };
                let c = etcd_client::Client::connect([url], opts)
                    .await
                    .with_context(|| format!("connecting to etcd at {ep}"))?;
                per_ep.push(c.kv_client());
            }
            for i in 0..n {
                out.push(Conn::Etcd(Box::new(per_ep[i % per_ep.len()].clone())));
            }
        }
    }
    Ok(out)
}

fn key_of(i: usize) -> Vec<u8> {
    format!("/bench/key/{i:08}").into_bytes()
}

async fn preload(system: &str, endpoints: &[String], keys: usize, value: &[u8], tls: Option<&PeerTls>) -> anyhow::Result<()> {
    let conns = connect(system, endpoints, 32, tls).await?;
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for mut c in conns {
        let next = next.clone();
        let value = value.to_vec();
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                if i >= keys {
                    return Ok::<_, anyhow::Error>(());
                }
                let mut tries = 0;
                while let Err(e) = c.put(&key_of(i), &value).await {
                    tries += 1;
                    if tries > 20 {
                        return Err(e);
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Write,
    LinearizableRead,
    SerializableRead,
}

async fn run_phase(system: &str, endpoints: &[String], phase: Phase, clients: usize, args: &StoreBenchArgs, tls: Option<&PeerTls>) -> anyhow::Result<PhaseResult> {
    let conns = connect(system, endpoints, clients, tls).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicU64::new(0));
    let value = vec![b'v'; args.value_size];
    let keys = args.keys.max(1);
    let mut tasks = Vec::new();
    let started = Instant::now();
    for mut c in conns {
        let stop = stop.clone();
        let errors = errors.clone();
        let value = value.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(4096);
            let mut rng = rand::rngs::StdRng::from_entropy();
            while !stop.load(Ordering::Relaxed) {
                let key = key_of(rng.gen_range(0..keys));
                let t = Instant::now();
                let res = match phase {
                    Phase::Write => c.put(&key, &value).await,
                    Phase::LinearizableRead => c.get(&key, true).await,
                    Phase::SerializableRead => c.get(&key, false).await,
                };
                match res {
                    Ok(()) => lat.push(t.elapsed().as_micros().min(u128::from(u32::MAX)) as u32),
                    Err(_) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            lat
        }));
    }
    tokio::time::sleep(Duration::from_secs(args.duration_secs)).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await?);
    }
    let secs = started.elapsed().as_secs_f64();
    Ok(PhaseResult::from_latencies(clients, all, errors.load(Ordering::Relaxed), secs))
}

use rand::SeedableRng;

async fn bench_system(system: &str, endpoints: &[String], args: &StoreBenchArgs, tls: Option<&PeerTls>) -> anyhow::Result<SystemReport> {
    let mut rep = SystemReport::default();
    let value = vec![b'v'; args.value_size];
    eprintln!("bench: {system}: pre-loading {} keys", args.keys);
    preload(system, endpoints, args.keys, &value, tls).await?;
    for &clients in &args.clients {
        for (name, phase) in [
            ("write", Phase::Write),
            ("read", Phase::LinearizableRead),
            ("serializable", Phase::SerializableRead),
        ] {
            if !args.mix.iter().any(|m| m == name) {
                continue;
            }
            eprintln!("bench: {system}: {name} with {clients} clients for {}s", args.duration_secs);
            let r = run_phase(system, endpoints, phase, clients, args, tls).await?;
            eprintln!("bench: {system}: {name} {clients} clients: {:.0} ops/s p50 {:.2} ms p99 {:.2} ms", r.ops_per_s, r.p50_ms, r.p99_ms);
            match phase {
                Phase::Write => rep.writes.push(r),
                Phase::LinearizableRead => rep.linearizable_reads.push(r),
                Phase::SerializableRead => rep.serializable_reads.push(r),
            }
        }
    }
    Ok(rep)
}

/// Starts the script's 3-member etcd in `dir` on free loopback ports, with mutual TLS
/// from a throw-away CA written to `tls_dir` when given. Returns the client endpoints and
/// the client identity.
pub(crate) async fn start_etcd(script: &std::path::Path, dir: &std::path::Path, tls_dir: Option<&std::path::Path>) -> anyhow::Result<(Vec<String>, Option<PeerTls>)> {
    let mut start = tokio::process::Command::new("bash");
    start.arg(script).arg("start").arg(dir).env("ETCD_BASE_PORT", free_etcd_base()?.to_string());
    let tls = match tls_dir {
        Some(t) => {
            let client = write_etcd_tls(t)?;
            start.env("ETCD_TLS_DIR", t);
            Some(client)
        }
        None => None,
    };
    let out = start.output().await?;
    if !out.status.success() {
        bail!("{} start failed: {}", script.display(), String::from_utf8_lossy(&out.stderr));
    }
    let eps: Vec<String> = String::from_utf8_lossy(&out.stdout).split_whitespace().map(str::to_string).collect();
    eprintln!("bench: etcd: {} on {}", if tls.is_some() { "mutual TLS" } else { "plaintext" }, eps.join(","));
    Ok((eps, tls))
}

/// A base port for the etcd script (members use base+10·i and base+10·i+1, i = 1..3)
/// whose six ports are free now, so benches running side by side do not collide.
fn free_etcd_base() -> anyhow::Result<u16> {
    for _ in 0..200 {
        let base = rand::thread_rng().gen_range(20_000u16..50_000);
        let ports = (1..=3u16).flat_map(|i| [base + 10 * i, base + 10 * i + 1]);
        let bound: Vec<_> = ports.map(|p| std::net::TcpListener::bind(("127.0.0.1", p))).collect();
        if bound.iter().all(Result::is_ok) {
            return Ok(base);
        }
    }
    bail!("no free loopback ports for etcd")
}

pub(crate) fn find_etcd_script(explicit: &Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(p) = explicit {
        return Ok(p.clone());
    }
    let mut dir = std::env::current_dir()?;
    loop {
        let p = dir.join("deploy/etcd/etcd-cluster.sh");
        if p.exists() {
            return Ok(p);
        }
        if !dir.pop() {
            bail!("deploy/etcd/etcd-cluster.sh not found above the current directory; pass --etcd-script");
        }
    }
}

/// A throw-away CA with a server certificate for the etcd members (127.0.0.1, both
/// server and client auth, for client and peer traffic) and a client certificate, saved
/// in `dir` as the etcd start script expects; returns the client's identity.
pub(crate) fn write_etcd_tls(dir: &std::path::Path) -> anyhow::Result<PeerTls> {
    let ca = keelson_pki::ClusterCa::generate("etcd-bench")?;
    let names = ["127.0.0.1".to_string(), "localhost".to_string()];
    ca.issue_serving("etcd", &names)?.save(dir, "server")?;
    let client = ca.issue_client("bench", &[])?;
    client.save(dir, "client")?;
    std::fs::write(dir.join("ca.crt"), ca.cert_pem())?;
    Ok(PeerTls::new(ca.cert_pem(), client.cert_pem, client.key_pem))
}

/// Runs the bench as `keelson bench store` does.
pub async fn run_store_bench(args: StoreBenchArgs) -> anyhow::Result<()> {
    for m in &args.mix {
        if !["write", "read", "serializable"].contains(&m.as_str()) {
            bail!("unknown --mix phase {m:?}: use write, read, serializable");
        }
    }
    if args.clients.is_empty() || args.clients.contains(&0) {
        bail!("--clients needs positive counts");
    }
    let tmp = tempfile::tempdir()?;
    let mut keelson_tls = false;
    let keelson = if args.etcd_only {
        None
    } else {
        let mut cluster = None;
        let mut tls = match &args.pki_dir {
            Some(dir) => keelson_client::tls::admin_tls(dir)?,
            None => None,
        };
        let endpoints = if args.endpoints.is_empty() {
            let spec = ClusterSpec::loopback(args.servers, std::env::current_exe()?, tmp.path().join("keelson"));
            let c = Cluster::start(spec, |m| eprintln!("bench: keelson: {m}")).await?;
            let eps = c.endpoints();
            tls = Some(c.tls().clone());
            cluster = Some(c);
            eps
        } else {
            args.endpoints.clone()
        };
        keelson_tls = tls.is_some();
        let res = bench_system("keelson", &endpoints, &args, tls.as_ref()).await;
        if let Some(c) = cluster {
            c.stop(Duration::from_secs(10)).await?;
        }
        Some(res?)
    };

    let mut etcd = None;
    if !args.etcd_endpoints.is_empty() {
        etcd = Some(bench_system("etcd", &args.etcd_endpoints, &args, None).await?);
    } else if args.compare_etcd || args.etcd_only {
        let script = find_etcd_script(&args.etcd_script)?;
        let dir = tmp.path().join("etcd");
        let tls_dir = (!args.etcd_plaintext).then(|| tmp.path().join("etcd-tls"));
        let (eps, etcd_tls) = start_etcd(&script, &dir, tls_dir.as_deref()).await?;
        let res = bench_system("etcd", &eps, &args, etcd_tls.as_ref()).await;
        let _ = tokio::process::Command::new("bash").arg(&script).arg("stop").arg(&dir).output().await;
        etcd = Some(res?);
    }

    let params = serde_json::json!({
        "servers": args.servers, "clients": args.clients, "duration_secs": args.duration_secs,
        "value_size": args.value_size, "keys": args.keys, "mix": args.mix,
        "keelson_tls": keelson_tls, "etcd_tls": !args.etcd_plaintext && args.etcd_endpoints.is_empty(),
    });
    if args.json {
        let mut obj = serde_json::Map::new();
        if let Some(k) = &keelson {
            obj.insert("keelson".into(), k.to_json(&params));
        }
        if let Some(e) = &etcd {
            obj.insert("etcd".into(), e.to_json(&params));
        }
        println!("{}", serde_json::Value::Object(obj));
    } else {
        let mut systems = Vec::new();
        if let Some(k) = &keelson {
            systems.push(("keelson", k));
        }
        if let Some(e) = &etcd {
            systems.push(("etcd", e));
        }
        print_table(&systems);
    }
    Ok(())
}
