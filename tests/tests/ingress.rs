//! The ingress controller against a real API cluster, on loopback: Services and
//! EndpointSlices pointing at in-process HTTP backends on 127.0.0.x, an Ingress routing
//! `api.shop.test` and `web.shop.test` over HTTP and HTTPS (the TLS Secret's certificate
//! chosen by SNI), 404 without a rule, 503 without ready endpoints and back, a refused
//! endpoint passed over, certificate rotation by updating the Secret, X-Forwarded-*
//! headers, an Upgrade passed through, Events for a missing Service and Secret, and the
//! controller manager's Ingress status. The component runs as a node would: with a
//! node's identity.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use k8s_openapi::api::core::v1::{Event, Secret};
use k8s_openapi::api::networking::v1::IngressClass;
use k8s_openapi::ByteString;
use keelson_tests::api::ApiCluster;
use keelson_tests::ClusterOptions;
use kube::api::{Api, DynamicObject, PostParams};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// Waits (20 s at most) until `check` gives a value; panics with the last thing seen.
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        match check().await {
            Ok(v) => return v,
            Err(last) if tokio::time::Instant::now() > deadline => panic!("{what}: still {last}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// An HTTP/1.1 backend on `ip`: answers `<name> <path> xff=… proto=… host=…`, and
/// accepts `Upgrade: echo` with 101, then echoes bytes.
async fn backend(name: &'static str, ip: &str, stop: CancellationToken) -> SocketAddr {
    let listener = TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (conn, _) = tokio::select! { _ = stop.cancelled() => return, c = listener.accept() => c.unwrap() };
            let svc = hyper::service::service_fn(move |mut req: http::Request<hyper::body::Incoming>| async move {
                if req.headers().get("upgrade").is_some_and(|u| u == "echo") {
                    let on = hyper::upgrade::on(&mut req);
                    tokio::spawn(async move {
                        let mut io = TokioIo::new(on.await.unwrap());
                        let mut buf = [0u8; 64];
                        while let Ok(n) = io.read(&mut buf).await {
                            if n == 0 || io.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                    });
                    let resp = http::Response::builder().status(101).header("connection", "upgrade").header("upgrade", "echo").body(Full::new(Bytes::new())).unwrap();
                    return Ok::<_, std::convert::Infallible>(resp);
                }
                let h = |k: &str| req.headers().get(k).and_then(|v| v.to_str().ok()).unwrap_or("-").to_string();
                let body = format!("{name} {} xff={} proto={} host={}", req.uri().path(), h("x-forwarded-for"), h("x-forwarded-proto"), h("x-forwarded-host"));
                Ok(http::Response::new(Full::new(Bytes::from(body))))
            });
            tokio::spawn(hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(conn), svc).with_upgrades());
        }
    });
    addr
}

/// Accepts any server certificate (checking signatures), so a test can look at it.
#[derive(Debug)]
struct AnyServer(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyServer {
    fn verify_server_cert(&self, _: &CertificateDer<'_>, _: &[CertificateDer<'_>], _: &ServerName<'_>, _: &[u8], _: UnixTime) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(&self, m: &[u8], c: &CertificateDer<'_>, d: &rustls::DigitallySignedStruct) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(&self, m: &[u8], c: &CertificateDer<'_>, d: &rustls::DigitallySignedStruct) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

struct Reply {
    status: u16,
    body: String,
    version: http::Version,
    /// The certificate the server presented (HTTPS).
    cert: Option<Vec<u8>>,
    location: Option<String>,
}

async fn exchange<IO>(io: IO, h2: bool, host: &str, path: &str) -> Result<(u16, String, http::Version, Option<String>), String>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let req = http::Request::get(path).header("host", host).body(Empty::<Bytes>::new()).unwrap();
    let resp = if h2 {
        let uri: http::Uri = format!("https://{host}{path}").parse().unwrap();
        let req = http::Request::get(uri).body(Empty::<Bytes>::new()).unwrap();
        let (mut send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io)).await.map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        send.send_request(req).await.map_err(|e| e.to_string())?
    } else {
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await.map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        send.send_request(req).await.map_err(|e| e.to_string())?
    };
    let (status, version) = (resp.status().as_u16(), resp.version());
    let location = resp.headers().get("location").and_then(|v| v.to_str().ok()).map(str::to_string);
    let body = resp.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned(), version, location))
}

/// One request on a new connection to `addr`; over TLS with SNI `host` when `tls`.
async fn request(addr: SocketAddr, tls: bool, h2: bool, host: &str, path: &str) -> Result<Reply, String> {
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    if !tls {
        let (status, body, version, location) = exchange(tcp, false, host, path).await?;
        return Ok(Reply { status, body, version, cert: None, location });
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServer(provider)))
        .with_no_client_auth();
    cfg.alpn_protocols = if h2 { vec![b"h2".to_vec()] } else { vec![b"http/1.1".to_vec()] };
    let name = ServerName::try_from(host.to_string()).unwrap();
    let stream = tokio_rustls::TlsConnector::from(Arc::new(cfg)).connect(name, tcp).await.map_err(|e| e.to_string())?;
    let cert = stream.get_ref().1.peer_certificates().and_then(|c| c.first()).map(|c| c.to_vec());
    let (status, body, version, location) = exchange(stream, h2, host, path).await?;
    Ok(Reply { status, body, version, cert, location })
}

/// A `kubernetes.io/tls` Secret for both shop hosts, and its certificate (DER).
fn tls_secret() -> (Secret, Vec<u8>) {
    let made = rcgen::generate_simple_self_signed(vec!["api.shop.test".to_string(), "web.shop.test".to_string()]).unwrap();
    let secret = Secret {
        metadata: kube::api::ObjectMeta { name: Some("shop-tls".into()), namespace: Some("shop".into()), ..Default::default() },
        type_: Some("kubernetes.io/tls".into()),
        data: Some([("tls.crt".to_string(), ByteString(made.cert.pem().into_bytes())), ("tls.key".to_string(), ByteString(made.signing_key.serialize_pem().into_bytes()))].into()),
        ..Default::default()
    };
    (secret, made.cert.der().to_vec())
}

fn slice(svc: &str, port_name: &str, port: u16, endpoints: Value) -> Value {
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{svc}-1"), "namespace": "shop", "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4", "endpoints": endpoints, "ports": [{"name": port_name, "port": port, "protocol": "TCP"}]})
}

async fn apply(client: &kube::Client, obj: Value) {
    let tm: kube::api::TypeMeta = serde_json::from_value(obj.clone()).unwrap();
    let plural = match tm.kind.as_str() { "EndpointSlice" => "endpointslices", "Service" => "services", "Ingress" => "ingresses", "Namespace" => "namespaces", k => panic!("{k}") };
    let (group, version) = tm.api_version.split_once('/').unwrap_or(("", &tm.api_version));
    let ar = kube::api::ApiResource { group: group.into(), version: version.into(), api_version: tm.api_version.clone(), kind: tm.kind.clone(), plural: plural.into() };
    let api: Api<DynamicObject> = match obj["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    let name = obj["metadata"]["name"].as_str().unwrap().to_string();
    let mut o: DynamicObject = serde_json::from_value(obj).unwrap();
    match api.get_opt(&name).await.unwrap() {
        None => {
            api.create(&PostParams::default(), &o).await.unwrap();
        }
        Some(cur) => {
            o.metadata.resource_version = cur.metadata.resource_version;
            api.replace(&name, &PostParams::default(), &o).await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ingress_routes_hosts_and_paths_over_http_and_https_from_the_api() {
    let c = ApiCluster::start(1, ClusterOptions::default()).await.expect("cluster");
    let admin = c.kube_client(0).await.expect("admin client");
    let stop = CancellationToken::new();
    let api_addr = backend("api", "127.0.0.2", stop.clone()).await;
    let web_addr = backend("web", "127.0.0.3", stop.clone()).await;

    // The built-in IngressClass, made at API server start, is the default one.
    let class = eventually("the keelson IngressClass", || async {
        Api::<IngressClass>::all(admin.clone()).get_opt("keelson").await.map_err(|e| e.to_string())?.ok_or_else(|| "absent".to_string())
    })
    .await;
    assert_eq!(class.spec.and_then(|s| s.controller).as_deref(), Some("keelson.io/ingress"));
    assert_eq!(class.metadata.annotations.unwrap_or_default().get("ingressclass.kubernetes.io/is-default-class").map(String::as_str), Some("true"));

    apply(&admin, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}})).await;
    apply(&admin, json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "api", "namespace": "shop"}, "spec": {"ports": [{"name": "http", "port": 80, "targetPort": api_addr.port()}]}})).await;
    apply(&admin, json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "shop"}, "spec": {"ports": [{"name": "web", "port": 8080, "targetPort": web_addr.port()}]}})).await;
    let api_ready = |ready: bool| json!([{"addresses": ["127.0.0.2"], "conditions": {"ready": ready}}]);
    apply(&admin, slice("api", "http", api_addr.port(), api_ready(true))).await;
    apply(&admin, slice("web", "web", web_addr.port(), json!([{"addresses": ["127.0.0.3"], "conditions": {"ready": true}}]))).await;
    let (secret, cert1) = tls_secret();
    Api::<Secret>::namespaced(admin.clone(), "shop").create(&PostParams::default(), &secret).await.unwrap();
    let to = |svc: &str, port: Value| json!({"service": {"name": svc, "port": port}});
    apply(&admin, json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "shop", "namespace": "shop"}, "spec": {
        "ingressClassName": "keelson",
        "tls": [{"hosts": ["api.shop.test", "web.shop.test"], "secretName": "shop-tls"}],
        "rules": [
            {"host": "api.shop.test", "http": {"paths": [
                {"path": "/", "pathType": "Prefix", "backend": to("api", json!({"number": 80}))},
                {"path": "/docs", "pathType": "Prefix", "backend": to("web", json!({"name": "web"}))}]}},
            {"host": "web.shop.test", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": to("web", json!({"name": "web"}))}]}}]}})).await;
    // No class (the default one applies), a Service and a Secret that do not exist.
    apply(&admin, json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "broken", "namespace": "shop"}, "spec": {
        "tls": [{"hosts": ["broken.shop.test"], "secretName": "absent"}],
        "rules": [{"host": "broken.shop.test", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": to("gone", json!({"number": 80}))}]}}]}})).await;

    // The ingress component, with a node's identity, on loopback ports.
    let node = c.kube_client_as(0, "system:node:n1", &["system:nodes", "system:authenticated"]).await.unwrap();
    let cfg = keelson_ingress::IngressConfig { http: Some("127.0.0.1:0".parse().unwrap()), https: Some("127.0.0.1:0".parse().unwrap()), class: "keelson".into(), instance: "n1".into() };
    let (bound, task) = keelson_ingress::start(node, cfg, stop.clone()).await.expect("ingress");
    let (http, https) = (bound.http.unwrap(), bound.https.unwrap());

    // Routing by host and path over HTTP, with the forwarded headers.
    let r = eventually("api over HTTP", || async {
        let r = request(http, false, false, "api.shop.test", "/v1/items").await?;
        if r.status == 200 { Ok(r) } else { Err(format!("{} {}", r.status, r.body)) }
    })
    .await;
    assert_eq!(r.body, "api /v1/items xff=127.0.0.1 proto=http host=api.shop.test");
    assert_eq!(request(http, false, false, "web.shop.test", "/").await.unwrap().body, "web / xff=127.0.0.1 proto=http host=web.shop.test");
    assert_eq!(request(http, false, false, "api.shop.test", "/docs/intro").await.unwrap().body.split(' ').next(), Some("web"));
    assert_eq!(request(http, false, false, "api.shop.test", "/docsx").await.unwrap().body.split(' ').next(), Some("api"), "a prefix is element-wise");
    let none = request(http, false, false, "unknown.test", "/").await.unwrap();
    assert_eq!((none.status, none.body.as_str()), (404, "default backend - 404\n"));

    // HTTPS: the Secret's certificate by SNI, HTTP/1.1 and HTTP/2 by ALPN; the default
    // certificate for other names.
    let r = request(https, true, false, "web.shop.test", "/x").await.unwrap();
    assert_eq!((r.status, r.body.as_str()), (200, "web /x xff=127.0.0.1 proto=https host=web.shop.test"));
    assert_eq!(r.cert.as_deref(), Some(cert1.as_slice()), "the Secret's certificate for web.shop.test");
    let r = request(https, true, true, "api.shop.test", "/h2").await.unwrap();
    assert_eq!((r.status, r.version), (200, http::Version::HTTP_2));
    assert!(r.body.starts_with("api /h2 "), "{}", r.body);
    assert_eq!(r.cert.as_deref(), Some(cert1.as_slice()));
    let other = request(https, true, false, "unknown.test", "/").await.unwrap();
    assert!(other.cert.is_some() && other.cert.as_deref() != Some(cert1.as_slice()), "the default certificate for an unknown name");
    assert_eq!(other.status, 404);

    // A missing Service answers 503; the missing Service and Secret are Events.
    let broken = request(http, false, false, "broken.shop.test", "/").await.unwrap();
    assert_eq!((broken.status, broken.body.as_str()), (503, "503 Service Unavailable: shop/gone has no ready endpoints\n"));
    let events: Api<Event> = Api::namespaced(admin.clone(), "shop");
    let reasons = eventually("Events on the broken Ingress", || async {
        let list = events.list(&Default::default()).await.map_err(|e| e.to_string())?;
        let mut r: Vec<(String, String)> = list.items.iter().filter(|e| e.involved_object.name.as_deref() == Some("broken")).map(|e| (e.reason.clone().unwrap_or_default(), e.message.clone().unwrap_or_default())).collect();
        r.sort();
        if r.len() >= 2 { Ok(r) } else { Err(format!("{r:?}")) }
    })
    .await;
    assert_eq!(reasons, [
        ("SecretNotFound".to_string(), "TLS Secret shop/absent does not exist; its hosts get the default certificate".to_string()),
        ("ServiceNotFound".to_string(), "Service shop/gone does not exist, so its paths answer 503".to_string()),
    ]);

    // No ready endpoint: 503; ready again: served again.
    apply(&admin, slice("api", "http", api_addr.port(), api_ready(false))).await;
    eventually("503 without ready endpoints", || async {
        let r = request(http, false, false, "api.shop.test", "/").await?;
        if r.status == 503 && r.body.contains("shop/api:80 has no ready endpoints") { Ok(()) } else { Err(format!("{} {}", r.status, r.body)) }
    })
    .await;
    // A refused endpoint beside the ready one is passed over, every time.
    apply(&admin, slice("api", "http", api_addr.port(), json!([{"addresses": ["127.0.0.2", "127.0.0.9"], "conditions": {"ready": true}}]))).await;
    eventually("served again", || async {
        let r = request(http, false, false, "api.shop.test", "/").await?;
        if r.status == 200 { Ok(()) } else { Err(format!("{} {}", r.status, r.body)) }
    })
    .await;
    for i in 0..6 {
        let r = request(http, false, false, "api.shop.test", "/again").await.unwrap();
        assert_eq!(r.status, 200, "request {i} with a refused endpoint: {}", r.body);
    }

    // An Upgrade is passed through, and the bytes after it.
    let mut ws = TcpStream::connect(http).await.unwrap();
    ws.write_all(b"GET /ws HTTP/1.1\r\nHost: web.shop.test\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n").await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        assert_eq!(ws.read(&mut b).await.unwrap(), 1, "connection closed in the response head: {}", String::from_utf8_lossy(&head));
        head.push(b[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 101"), "{}", String::from_utf8_lossy(&head));
    ws.write_all(b"ping through").await.unwrap();
    let mut echoed = [0u8; 12];
    ws.read_exact(&mut echoed).await.unwrap();
    assert_eq!(&echoed, b"ping through");

    // Rotation: a new connection gets the updated Secret's certificate.
    let (mut rotated, cert2) = tls_secret();
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), "shop");
    rotated.metadata.resource_version = secrets.get("shop-tls").await.unwrap().metadata.resource_version;
    secrets.replace("shop-tls", &PostParams::default(), &rotated).await.unwrap();
    eventually("the rotated certificate", || async {
        let r = request(https, true, false, "api.shop.test", "/").await?;
        if r.cert.as_deref() == Some(cert2.as_slice()) && r.status == 200 { Ok(()) } else { Err(format!("{} with the old certificate: {}", r.status, r.cert.as_deref() == Some(cert1.as_slice()))) }
    })
    .await;

    // Redirect to HTTPS by annotation, for the TLS hosts.
    let ings: Api<k8s_openapi::api::networking::v1::Ingress> = Api::namespaced(admin.clone(), "shop");
    let mut shop = ings.get("shop").await.unwrap();
    shop.metadata.annotations.get_or_insert_with(Default::default).insert("ingress.kubernetes.io/ssl-redirect".into(), "true".into());
    ings.replace("shop", &PostParams::default(), &shop).await.unwrap();
    let r = eventually("a redirect to HTTPS", || async {
        let r = request(http, false, false, "api.shop.test", "/a?b=c").await?;
        if r.status == 308 { Ok(r) } else { Err(format!("{}", r.status)) }
    })
    .await;
    assert_eq!(r.location, Some(format!("https://api.shop.test:{}/a?b=c", https.port())));

    // Status: the controller manager gives the ingress' LoadBalancer Service the Ready
    // nodes that announce ingress ports (as an agent does once its listeners are bound),
    // and our Ingresses that Service's addresses.
    let access = c.control_plane_access(0, stop.clone()).await.unwrap();
    let controllers = tokio::spawn(keelson_controllers::run(access, Default::default(), stop.clone()));
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(admin.clone());
    let n1: k8s_openapi::api::core::v1::Node = serde_json::from_value(json!({"metadata": {"name": "n1", "annotations": {
        keelson_ingress::HTTP_PORT_ANNOTATION: http.port().to_string(), keelson_ingress::HTTPS_PORT_ANNOTATION: https.port().to_string()}}})).unwrap();
    let mut n1 = nodes.create(&PostParams::default(), &n1).await.unwrap();
    n1.status = serde_json::from_value(json!({"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}], "conditions": [{"type": "Ready", "status": "True"}]})).unwrap();
    nodes.replace_status("n1", &PostParams::default(), &n1).await.unwrap();
    let status_ips = |i: &k8s_openapi::api::networking::v1::Ingress| -> Vec<String> {
        i.status.iter().flat_map(|s| s.load_balancer.iter()).flat_map(|l| l.ingress.iter().flatten()).filter_map(|a| a.ip.clone()).collect()
    };
    for name in ["shop", "broken"] {
        eventually(&format!("the status of Ingress {name}"), || async {
            let i = ings.get(name).await.map_err(|e| e.to_string())?;
            if status_ips(&i) == ["127.0.0.1"] { Ok(()) } else { Err(format!("{:?}", status_ips(&i))) }
        })
        .await;
    }

    stop.cancel();
    tokio::time::timeout(Duration::from_secs(10), task).await.expect("the ingress stops").unwrap();
    tokio::time::timeout(Duration::from_secs(10), controllers).await.expect("the controllers stop").unwrap();
    c.shutdown().await;
}
