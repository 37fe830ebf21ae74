//! `keelson bench ingress`: requests/s and latency through keelson-ingress to a busybox
//! httpd backend, side by side in one run with the same backend reached directly and
//! through nginx (Debian's package) configured as the equivalent reverse proxy. All on
//! loopback: the backend, nginx and the bench's own ingress proxy (on a runtime and
//! threads of its own, as the agent runs it) listen on 127.0.0.1.
//!
//! The ingress serves from a route table built by `keelson_ingress::routes::build` out of
//! an Ingress, its Service and an EndpointSlice naming the backend, as it does in a node
//! agent; nginx gets one `proxy_pass` location to the same backend with the same headers
//! set. Each client keeps one HTTP/1.1 connection open (opened again when a server closes
//! it, as busybox httpd does after every answer) and sends one request at a time. Every
//! answer must be 200 with the backend's body, or it counts as an error.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::Bytes;
use clap::Args;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use keelson_ingress::routes::{self, Decision, Inputs};
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::percentile::percentile_ms;

const HOST: &str = "bench.ingress.test";

#[derive(Args, Clone, Debug)]
pub struct IngressBenchArgs {
    /// Concurrent clients per target.
    #[arg(long, default_value_t = 32)]
    pub clients: usize,
    /// Seconds of load per target.
    #[arg(long, default_value_t = 10)]
    pub secs: u64,
    /// Size of the body the backend serves.
    #[arg(long, default_value_t = 1024)]
    pub body_bytes: usize,
    /// Worker threads of the ingress proxy's runtime (nginx gets as many workers).
    #[arg(long, default_value_t = 2)]
    pub proxy_threads: usize,
    /// The nginx binary; without one the nginx column is left out, loudly.
    #[arg(long, default_value = "/usr/sbin/nginx")]
    pub nginx: PathBuf,
    /// The busybox binary whose httpd is the backend.
    #[arg(long, default_value = "/bin/busybox")]
    pub busybox: PathBuf,
    /// Print one JSON object on stdout instead of the summary.
    #[arg(long)]
    pub json: bool,
}

/// One target under load.
#[derive(Debug, serde::Serialize)]
pub struct TargetFigures {
    pub requests: u64,
    pub errors: u64,
    pub requests_per_sec: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// What `--json` prints.
#[derive(Debug, serde::Serialize)]
pub struct IngressReport {
    pub clients: usize,
    pub secs: u64,
    pub body_bytes: usize,
    pub direct: TargetFigures,
    pub ingress: TargetFigures,
    /// `None` when no nginx binary was found.
    pub nginx: Option<TargetFigures>,
    /// ingress requests/s over direct requests/s.
    pub ingress_vs_direct_rps: f64,
    /// ingress requests/s over nginx requests/s.
    pub ingress_vs_nginx_rps: Option<f64>,
}

/// A child process stopped and reaped on drop: first asked with SIGTERM (nginx's master
/// then stops its workers, which a SIGKILL to it would leave running), killed if it is
/// still there after a few seconds.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.0.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if matches!(self.0.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

async fn wait_listening(addr: SocketAddr, what: &str, child: &mut Child) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if TcpStream::connect(addr).await.is_ok() {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            bail!("{what} exited before listening on {addr}: {status}");
        }
        if Instant::now() > deadline {
            bail!("{what} did not listen on {addr} within 10 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn start_backend(busybox: &Path, root: &Path) -> anyhow::Result<(Reaped, SocketAddr)> {
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
    let child = Command::new(busybox)
        .args(["httpd", "-f", "-p", &addr.to_string(), "-h"])
        .arg(root)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {} httpd (the Debian package busybox-static has it)", busybox.display()))?;
    Ok((Reaped(child), addr))
}

/// nginx as the reverse proxy keelson-ingress is: one location, the client's address in
/// X-Forwarded-For and X-Real-IP, the scheme and host forwarded, HTTP/1.1 to the backend.
fn nginx_config(dir: &Path, listen: SocketAddr, backend: SocketAddr, workers: usize) -> String {
    let d = dir.display();
    format!(
        "worker_processes {workers};\npid {d}/nginx.pid;\nerror_log {d}/error.log;\nevents {{ worker_connections 4096; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
         \x20 keepalive_requests 1000000;\n  upstream backend {{ server {backend}; }}\n  server {{\n    listen {listen};\n    server_name {HOST};\n    location / {{\n\
         \x20     proxy_pass http://backend;\n      proxy_http_version 1.1;\n      proxy_set_header Host $host;\n      proxy_set_header X-Forwarded-For $remote_addr;\n\
         \x20     proxy_set_header X-Real-IP $remote_addr;\n      proxy_set_header X-Forwarded-Proto $scheme;\n      proxy_set_header X-Forwarded-Host $host;\n    }}\n  }}\n}}\n"
    )
}

fn start_nginx(nginx: &Path, dir: &Path, backend: SocketAddr, workers: usize) -> anyhow::Result<(Reaped, SocketAddr)> {
    let listen: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
    std::fs::create_dir_all(dir)?;
    let conf = dir.join("nginx.conf");
    std::fs::write(&conf, nginx_config(dir, listen, backend, workers))?;
    let child = Command::new(nginx)
        .arg("-p")
        .arg(dir)
        .arg("-c")
        .arg(&conf)
        .args(["-g", "daemon off;"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", nginx.display()))?;
    Ok((Reaped(child), listen))
}

/// The objects an agent's ingress would see for one Service behind one Ingress host.
fn route_objects(backend: SocketAddr) -> (Ingress, Service, EndpointSlice) {
    let ingress = serde_json::from_value(json!({
        "metadata": {"name": "bench", "namespace": "bench", "uid": "bench-ingress"},
        "spec": {"ingressClassName": keelson_ingress::CLASS, "rules": [{"host": HOST, "http": {"paths": [
            {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}
    }))
    .expect("a valid Ingress");
    let service = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "bench"},
        "spec": {"ports": [{"port": 80, "targetPort": backend.port()}]}
    }))
    .expect("a valid Service");
    let slice = serde_json::from_value(json!({
        "metadata": {"name": "web-1", "namespace": "bench", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [backend.ip().to_string()], "conditions": {"ready": true}}],
        "ports": [{"port": backend.port(), "protocol": "TCP"}]
    }))
    .expect("a valid EndpointSlice");
    (ingress, service, slice)
}

/// The bench's ingress proxy, on a runtime of its own; stops when dropped.
struct IngressProxy {
    addr: SocketAddr,
    stop: CancellationToken,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for IngressProxy {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn start_ingress(backend: SocketAddr, threads: usize) -> anyhow::Result<IngressProxy> {
    let (ingress, service, slice) = route_objects(backend);
    let inputs = Inputs { ingresses: vec![&ingress], classes: vec![], services: vec![&service], slices: vec![&slice] };
    let (table, problems) = routes::build(&inputs, keelson_ingress::CLASS);
    if !problems.is_empty() {
        bail!("the bench's Ingress did not resolve: {problems:?}");
    }
    match table.route(HOST, "/index.html", false) {
        Decision::Proxy(b) if b.endpoints == [backend] => {}
        other => bail!("the bench's route table does not send {HOST} to {backend}: {other:?}"),
    }
    let shared = Arc::new(keelson_ingress::proxy::Shared { table: RwLock::new(Arc::new(table)), https_port: None });
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let stop = CancellationToken::new();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(threads.max(1)).thread_name("bench-ingress").enable_all().build()?;
    let token = stop.clone();
    let thread = std::thread::spawn(move || {
        rt.block_on(async move {
            match TcpListener::from_std(listener) {
                Ok(l) => keelson_ingress::proxy::serve_http(l, shared, token).await,
                Err(e) => tracing::error!(error = %e, "the bench's ingress could not listen"),
            }
        });
    });
    Ok(IngressProxy { addr, stop, thread: Some(thread) })
}

/// Why one request did not count.
#[derive(Debug, thiserror::Error)]
enum RequestFailure {
    #[error("connecting: {0}")]
    Connect(std::io::Error),
    #[error("HTTP: {0}")]
    Http(hyper::Error),
    #[error("answered {0} instead of 200 with the backend's body")]
    Answer(String),
}

type Sender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

async fn connect(addr: SocketAddr) -> Result<Sender, RequestFailure> {
    let stream = TcpStream::connect(addr).await.map_err(RequestFailure::Connect)?;
    let _ = stream.set_nodelay(true);
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(RequestFailure::Http)?;
    tokio::spawn(conn);
    Ok(sender)
}

async fn one_request(sender: &mut Option<Sender>, addr: SocketAddr, want: &Bytes) -> Result<(), RequestFailure> {
    if sender.as_ref().is_none_or(|s| s.is_closed()) {
        *sender = Some(connect(addr).await?);
    }
    let s = sender.as_mut().expect("connected above");
    s.ready().await.map_err(RequestFailure::Http)?;
    let req = hyper::Request::get("/index.html").header(hyper::header::HOST, HOST).body(Empty::new()).expect("a valid request");
    let resp = match s.send_request(req).await {
        Ok(r) => r,
        Err(e) => {
            *sender = None;
            return Err(RequestFailure::Http(e));
        }
    };
    let status = resp.status();
    let body = resp.into_body().collect().await.map_err(RequestFailure::Http)?.to_bytes();
    if status != hyper::StatusCode::OK || body != *want {
        return Err(RequestFailure::Answer(format!("{status} with {} bytes", body.len())));
    }
    Ok(())
}

async fn load(addr: SocketAddr, clients: usize, secs: u64, want: Bytes) -> (TargetFigures, Option<String>) {
    let until = Instant::now() + Duration::from_secs(secs);
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let want = want.clone();
            tokio::spawn(async move {
                let (mut lat, mut errors, mut first_error) = (Vec::new(), 0u64, None);
                let mut sender = None;
                while Instant::now() < until {
                    let t = Instant::now();
                    match one_request(&mut sender, addr, &want).await {
                        Ok(()) => lat.push(t.elapsed()),
                        Err(e) => {
                            errors += 1;
                            first_error.get_or_insert_with(|| e.to_string());
                            sender = None;
                        }
                    }
                }
                (lat, errors, first_error)
            })
        })
        .collect();
    let (mut all, mut errors, mut first_error) = (Vec::new(), 0, None);
    for t in tasks {
        if let Ok((lat, e, fe)) = t.await {
            all.extend(lat);
            errors += e;
            first_error = first_error.or(fe);
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    all.sort();
    let figures = TargetFigures {
        requests: all.len() as u64,
        errors,
        requests_per_sec: all.len() as f64 / elapsed,
        p50_ms: percentile_ms(&all, 0.50),
        p99_ms: percentile_ms(&all, 0.99),
    };
    (figures, first_error)
}

fn say(json: bool, line: &str) {
    if !json {
        println!("{line}");
    } else {
        eprintln!("{line}");
    }
}

fn row(name: &str, f: &TargetFigures) -> String {
    format!("{name:<8} {:>10.0} req/s  p50 {:>7.2} ms  p99 {:>7.2} ms  ({} requests, {} errors)", f.requests_per_sec, f.p50_ms, f.p99_ms, f.requests, f.errors)
}

pub async fn run_ingress_bench(args: IngressBenchArgs) -> anyhow::Result<()> {
    let report = bench(&args).await?;
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!("{}", row("direct", &report.direct));
        println!("{}", row("ingress", &report.ingress));
        match &report.nginx {
            Some(n) => println!("{}", row("nginx", n)),
            None => println!("nginx    not measured: no nginx binary at {}", args.nginx.display()),
        }
        println!("ingress/direct requests/s: {:.2}", report.ingress_vs_direct_rps);
        if let Some(r) = report.ingress_vs_nginx_rps {
            println!("ingress/nginx requests/s: {r:.2}");
        }
    }
    Ok(())
}

pub async fn bench(args: &IngressBenchArgs) -> anyhow::Result<IngressReport> {
    let dir = tempfile::tempdir()?;
    let www = dir.path().join("www");
    std::fs::create_dir_all(&www)?;
    let body: Bytes = (0..args.body_bytes).map(|i| b"abcdefghijklmnopqrstuvwxyz0123456789\n"[i % 37]).collect::<Vec<u8>>().into();
    std::fs::write(www.join("index.html"), &body)?;
    let (mut backend, backend_addr) = start_backend(&args.busybox, &www)?;
    wait_listening(backend_addr, "busybox httpd", &mut backend.0).await?;
    let ingress = start_ingress(backend_addr, args.proxy_threads)?;
    let nginx = if args.nginx.exists() {
        let (mut child, addr) = start_nginx(&args.nginx, &dir.path().join("nginx"), backend_addr, args.proxy_threads)?;
        wait_listening(addr, "nginx", &mut child.0).await?;
        Some((child, addr))
    } else {
        say(args.json, &format!("WARNING: no nginx at {} (the Debian package nginx): the nginx column is left out", args.nginx.display()));
        None
    };
    let run = |name: &'static str, addr: SocketAddr| {
        let body = body.clone();
        async move {
            say(args.json, &format!("{name}: {} clients for {} s against {addr}", args.clients, args.secs));
            let (f, first_error) = load(addr, args.clients, args.secs, body).await;
            if let Some(e) = first_error {
                say(args.json, &format!("{name}: first error: {e}"));
            }
            f
        }
    };
    let direct = run("direct", backend_addr).await;
    let through_ingress = run("ingress", ingress.addr).await;
    let through_nginx = match &nginx {
        Some((_, addr)) => Some(run("nginx", *addr).await),
        None => None,
    };
    drop(ingress);
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    Ok(IngressReport {
        clients: args.clients,
        secs: args.secs,
        body_bytes: args.body_bytes,
        ingress_vs_direct_rps: ratio(through_ingress.requests_per_sec, direct.requests_per_sec),
        ingress_vs_nginx_rps: through_nginx.as_ref().map(|n| ratio(through_ingress.requests_per_sec, n.requests_per_sec)),
        direct,
        ingress: through_ingress,
        nginx: through_nginx,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nginx_gets_one_location_to_the_backend_with_the_ingress_headers() {
        let conf = nginx_config(Path::new("/tmp/x"), "127.0.0.1:8080".parse().unwrap(), "127.0.0.1:9090".parse().unwrap(), 2);
        assert!(conf.contains("worker_processes 2;"));
        assert!(conf.contains("listen 127.0.0.1:8080;"));
        assert!(conf.contains("upstream backend { server 127.0.0.1:9090; }"));
        for h in ["X-Forwarded-For $remote_addr", "X-Real-IP $remote_addr", "X-Forwarded-Proto $scheme", "X-Forwarded-Host $host"] {
            assert!(conf.contains(h), "{h} in {conf}");
        }
    }

    #[test]
    fn the_route_objects_resolve_to_the_backend() {
        let backend: SocketAddr = "127.0.0.1:4321".parse().unwrap();
        let (i, s, e) = route_objects(backend);
        let (table, problems) = routes::build(&Inputs { ingresses: vec![&i], classes: vec![], services: vec![&s], slices: vec![&e] }, keelson_ingress::CLASS);
        assert!(problems.is_empty(), "{problems:?}");
        assert!(matches!(table.route(HOST, "/index.html", false), Decision::Proxy(b) if b.endpoints == [backend]));
        assert!(!matches!(table.route("other.test", "/", false), Decision::Proxy(_)));
    }
}
