//! Liveness, readiness and startup probes, as the kubelet's prober runs them: exec (in
//! the container), httpGet, tcpSocket and grpc (the standard health service), with
//! initialDelaySeconds, periodSeconds, timeoutSeconds and the success and failure
//! thresholds. [`Tracker`] is the pure state of one probe; [`run`] performs one attempt.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::runtime::Runtime;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Liveness,
    Readiness,
    Startup,
}

impl Kind {
    pub fn word(self) -> &'static str {
        match self {
            Kind::Liveness => "Liveness",
            Kind::Readiness => "Readiness",
            Kind::Startup => "Startup",
        }
    }
}

/// The state of one probe of one container instance.
#[derive(Clone, Debug)]
pub struct Tracker {
    pub kind: Kind,
    pub probe: Probe,
    successes: i32,
    failures: i32,
    /// The current verdict: readiness starts false, liveness true, startup false.
    pub ok: bool,
    /// The verdict has reached the failure threshold (liveness/startup: restart).
    pub failed: bool,
    next_due_ns: i64,
}

impl Tracker {
    /// A fresh tracker for a container started at `started_ns`.
    pub fn new(kind: Kind, probe: Probe, started_ns: i64) -> Self {
        let delay = probe.initial_delay_seconds.unwrap_or(0).max(0) as i64 * 1_000_000_000;
        Self { kind, ok: kind == Kind::Liveness, failed: false, successes: 0, failures: 0, next_due_ns: started_ns + delay, probe }
    }

    pub fn period(&self) -> Duration {
        Duration::from_secs(self.probe.period_seconds.unwrap_or(10).max(1) as u64)
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.probe.timeout_seconds.unwrap_or(1).max(1) as u64)
    }

    pub fn due(&self, now_ns: i64) -> bool {
        now_ns >= self.next_due_ns
    }

    /// Records one attempt's outcome at `now_ns`; returns whether the verdict changed.
    pub fn record(&mut self, success: bool, now_ns: i64) -> bool {
        self.next_due_ns = now_ns + self.period().as_nanos() as i64;
        let before = (self.ok, self.failed);
        if success {
            self.failures = 0;
            self.successes += 1;
            if self.successes >= self.probe.success_threshold.unwrap_or(1).max(1) {
                self.ok = true;
                self.failed = false;
            }
        } else {
            self.successes = 0;
            self.failures += 1;
            if self.failures >= self.probe.failure_threshold.unwrap_or(3).max(1) {
                self.ok = false;
                self.failed = true;
            }
        }
        before != (self.ok, self.failed)
    }
}

fn port_of(c: &Container, port: &IntOrString) -> Result<u16, String> {
    match port {
        IntOrString::Int(p) => u16::try_from(*p).map_err(|_| format!("invalid port {p}")),
        IntOrString::String(name) => c
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .and_then(|p| u16::try_from(p.container_port).ok())
            .ok_or_else(|| format!("couldn't find port {name} in container {}", c.name)),
    }
}

/// One attempt of `probe` against container `c` (instance `id`) at `pod_ip`. `Err` holds
/// the kubelet's wording of the failure (after "Liveness probe failed: ").
pub async fn run(runtime: &dyn Runtime, c: &Container, id: &str, pod_ip: &str, probe: &Probe, timeout: Duration) -> Result<(), String> {
    if let Some(exec) = &probe.exec {
        let cmd = exec.command.clone().unwrap_or_default();
        let r = runtime.exec_sync(id, &cmd, timeout).await.map_err(|e| e.to_string())?;
        if r.exit_code == 0 {
            return Ok(());
        }
        let out = String::from_utf8_lossy(&[r.stdout, r.stderr].concat()).trim().to_string();
        return Err(if out.is_empty() { format!("command {cmd:?} exited with {}", r.exit_code) } else { out });
    }
    if let Some(tcp) = &probe.tcp_socket {
        let host = tcp.host.clone().unwrap_or_else(|| pod_ip.to_string());
        let port = port_of(c, &tcp.port)?;
        let addr = format!("{host}:{port}");
        return match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(&addr)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(format!("dial tcp {addr}: connect: {}", e.kind().to_string().to_lowercase())),
            Err(_) => Err(format!("dial tcp {addr}: i/o timeout")),
        };
    }
    if let Some(http) = &probe.http_get {
        let host = http.host.clone().unwrap_or_else(|| pod_ip.to_string());
        let port = port_of(c, &http.port)?;
        let path = http.path.clone().unwrap_or_else(|| "/".into());
        let headers: Vec<(String, String)> = http.http_headers.iter().flatten().map(|h| (h.name.clone(), h.value.clone())).collect();
        return http_get(&host, port, &path, &headers, timeout).await;
    }
    if let Some(grpc) = &probe.grpc {
        let port = u16::try_from(grpc.port).map_err(|_| format!("invalid port {}", grpc.port))?;
        return grpc_health(pod_ip, port, grpc.service.as_deref().unwrap_or(""), timeout).await;
    }
    Err("probe has no handler".into())
}

async fn http_get(host: &str, port: u16, path: &str, headers: &[(String, String)], timeout: Duration) -> Result<(), String> {
    let url = format!("http://{host}:{port}{path}");
    let attempt = async {
        let tcp = tokio::net::TcpStream::connect((host, port)).await.map_err(|e| format!("Get \"{url}\": dial tcp {host}:{port}: connect: {}", e.kind().to_string().to_lowercase()))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp)).await.map_err(|e| format!("Get \"{url}\": {e}"))?;
        tokio::spawn(conn);
        let mut req = http::Request::get(path).header("host", format!("{host}:{port}")).header("user-agent", "kube-probe/1.33");
        for (k, v) in headers {
            req = req.header(k, v);
        }
        let req = req.body(http_body_util::Empty::<bytes::Bytes>::new()).map_err(|e| e.to_string())?;
        let resp = sender.send_request(req).await.map_err(|e| format!("Get \"{url}\": {e}"))?;
        let code = resp.status().as_u16();
        if (200..400).contains(&code) {
            Ok(())
        } else {
            Err(format!("HTTP probe failed with statuscode: {code}"))
        }
    };
    match tokio::time::timeout(timeout, attempt).await {
        Ok(r) => r,
        Err(_) => Err(format!("Get \"{url}\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)")),
    }
}

/// `grpc.health.v1.Health/Check` over HTTP/2 without TLS, encoded by hand (one string field).
async fn grpc_health(host: &str, port: u16, service: &str, timeout: Duration) -> Result<(), String> {
    let addr = format!("{host}:{port}");
    let attempt = async {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}")).map_err(|e| e.to_string())?.connect().await.map_err(|e| format!("failed to connect service {addr:?} within {}s: {e}", timeout.as_secs()))?;
        let mut grpc = tonic::client::Grpc::new(channel);
        grpc.ready().await.map_err(|e| e.to_string())?;
        let path = http::uri::PathAndQuery::from_static("/grpc.health.v1.Health/Check");
        let resp: tonic::Response<HealthResponse> = grpc
            .unary(tonic::Request::new(HealthRequest { service: service.to_string() }), path, tonic_prost::ProstCodec::default())
            .await
            .map_err(|s| format!("rpc error: code = {:?} desc = {}", s.code(), s.message()))?;
        match resp.into_inner().status {
            1 => Ok(()),
            s => Err(format!("service unhealthy (responded with \"{}\")", match s { 2 => "NOT_SERVING", 3 => "SERVICE_UNKNOWN", _ => "UNKNOWN" })),
        }
    };
    match tokio::time::timeout(timeout, attempt).await {
        Ok(r) => r,
        Err(_) => Err(format!("timeout: health rpc did not complete within {}s", timeout.as_secs())),
    }
}

#[derive(Clone, PartialEq, prost::Message)]
struct HealthRequest {
    #[prost(string, tag = "1")]
    service: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct HealthResponse {
    #[prost(int32, tag = "1")]
    status: i32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn probe(v: serde_json::Value) -> Probe {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn thresholds_decide_the_verdict() {
        let mut t = Tracker::new(Kind::Liveness, probe(json!({"exec": {"command": ["true"]}, "failureThreshold": 2, "periodSeconds": 5})), 0);
        assert!(t.ok && !t.failed && t.due(0));
        assert!(!t.record(false, 0), "one failure is below the threshold");
        assert!(!t.due(4_000_000_000) && t.due(5_000_000_000), "the next attempt waits a period");
        assert!(t.record(false, 5_000_000_000));
        assert!(t.failed && !t.ok);
        assert!(t.record(true, 10_000_000_000), "a success restores it");
    }

    #[test]
    fn readiness_starts_unready_and_waits_its_initial_delay() {
        let mut t = Tracker::new(Kind::Readiness, probe(json!({"tcpSocket": {"port": 80}, "initialDelaySeconds": 3, "successThreshold": 2})), 1_000_000_000);
        assert!(!t.ok && !t.due(3_999_999_999) && t.due(4_000_000_000));
        t.record(true, 4_000_000_000);
        assert!(!t.ok, "two successes are needed");
        t.record(true, 14_000_000_000);
        assert!(t.ok);
    }

    #[tokio::test]
    async fn tcp_and_http_probes_against_a_local_listener() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = listener.accept().await.unwrap();
                tokio::spawn(async move {
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    let mut buf = [0u8; 1024];
                    let n = s.read(&mut buf).await.unwrap_or(0);
                    let req = String::from_utf8_lossy(&buf[..n]).to_string();
                    let code = if req.starts_with("GET /healthz") { "200 OK" } else { "500 Internal Server Error" };
                    let _ = s.write_all(format!("HTTP/1.1 {code}\r\ncontent-length: 0\r\n\r\n").as_bytes()).await;
                });
            }
        });
        assert_eq!(http_get("127.0.0.1", port, "/healthz", &[], Duration::from_secs(2)).await, Ok(()));
        assert_eq!(http_get("127.0.0.1", port, "/bad", &[], Duration::from_secs(2)).await, Err("HTTP probe failed with statuscode: 500".into()));
        let c: Container = serde_json::from_value(json!({"name": "c", "ports": [{"name": "web", "containerPort": port}]})).unwrap();
        assert_eq!(port_of(&c, &IntOrString::String("web".into())), Ok(port));
        assert!(port_of(&c, &IntOrString::String("nope".into())).is_err());
    }
}
