//! A tiny blocking HTTP/1.1 server that pretends to be a Kubernetes API
//! server just enough for kubectl to send its request bodies.
//!
//! It answers discovery (`/version`, `/api`, `/apis`, `/api/v1`,
//! `/apis/<group>/<version>`), saves every POST/PUT body to
//! `OUT_DIR/<seq>-<kind>.pb` (protobuf, plus the decoded
//! `<seq>-<kind>.decoded.json`) or `OUT_DIR/<seq>-json.json`, and answers
//! with the JSON that [`keelson_kube_protobuf::decode`] made of it. Created
//! objects are remembered so that commands which read first (`create job
//! --from`, `autoscale`, `drain`, `certificate approve`) get that far;
//! PATCH and DELETE bodies are saved but change nothing. Protobuf bodies
//! it cannot decode get a 415 Status, malformed ones a 400.
//!
//! ```text
//! cargo run -p keelson-kube-protobuf --example capture_server -- 0 /tmp/captures
//! # prints "listening on http://127.0.0.1:PORT"
//! kubectl --server http://127.0.0.1:PORT create deployment web --image=nginx
//! ```
//!
//! Arguments: `PORT` (0 picks a free one), `OUT_DIR`, `MAX_REQUESTS`
//! (default 10000, so a forgotten instance does not linger forever) and
//! optionally `reject-protobuf` to answer every protobuf body with 415.
//! It serves one connection at a time. Plain HTTP on 127.0.0.1 only.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;

use serde_json::{json, Value};

/// `(resource, namespaced, kind)` per group version.
fn resources(group_version: &str) -> Option<Vec<(&'static str, bool, &'static str)>> {
    let list = match group_version {
        "v1" => vec![
            ("namespaces", false, "Namespace"),
            ("configmaps", true, "ConfigMap"),
            ("secrets", true, "Secret"),
            ("services", true, "Service"),
            ("serviceaccounts", true, "ServiceAccount"),
            ("serviceaccounts/token", true, "TokenRequest"),
            ("resourcequotas", true, "ResourceQuota"),
            ("pods", true, "Pod"),
            ("pods/eviction", true, "Eviction"),
            ("nodes", false, "Node"),
        ],
        "apps/v1" => vec![
            ("deployments", true, "Deployment"),
            ("deployments/scale", true, "Scale"),
            ("replicasets", true, "ReplicaSet"),
            ("daemonsets", true, "DaemonSet"),
            ("statefulsets", true, "StatefulSet"),
        ],
        "batch/v1" => vec![("jobs", true, "Job"), ("cronjobs", true, "CronJob")],
        "rbac.authorization.k8s.io/v1" => vec![
            ("roles", true, "Role"),
            ("rolebindings", true, "RoleBinding"),
            ("clusterroles", false, "ClusterRole"),
            ("clusterrolebindings", false, "ClusterRoleBinding"),
        ],
        "policy/v1" => vec![("poddisruptionbudgets", true, "PodDisruptionBudget")],
        "networking.k8s.io/v1" => vec![
            ("ingresses", true, "Ingress"),
            ("ingressclasses", false, "IngressClass"),
            ("networkpolicies", true, "NetworkPolicy"),
        ],
        "scheduling.k8s.io/v1" => vec![("priorityclasses", false, "PriorityClass")],
        "authorization.k8s.io/v1" => vec![
            ("selfsubjectaccessreviews", false, "SelfSubjectAccessReview"),
            ("selfsubjectrulesreviews", false, "SelfSubjectRulesReview"),
        ],
        "authentication.k8s.io/v1" => vec![("selfsubjectreviews", false, "SelfSubjectReview")],
        "certificates.k8s.io/v1" => vec![
            (
                "certificatesigningrequests",
                false,
                "CertificateSigningRequest",
            ),
            (
                "certificatesigningrequests/approval",
                false,
                "CertificateSigningRequest",
            ),
        ],
        "autoscaling/v2" | "autoscaling/v1" => {
            vec![("horizontalpodautoscalers", true, "HorizontalPodAutoscaler")]
        }
        _ => return None,
    };
    Some(list)
}

const GROUP_VERSIONS: &[&str] = &[
    "apps/v1",
    "batch/v1",
    "rbac.authorization.k8s.io/v1",
    "policy/v1",
    "networking.k8s.io/v1",
    "scheduling.k8s.io/v1",
    "authorization.k8s.io/v1",
    "authentication.k8s.io/v1",
    "autoscaling/v2",
    "autoscaling/v1",
    "certificates.k8s.io/v1",
];

fn group_list() -> Value {
    let groups: Vec<Value> = GROUP_VERSIONS
        .iter()
        .map(|gv| {
            let (group, version) = gv.split_once('/').expect("group/version");
            let v = json!({"groupVersion": gv, "version": version});
            json!({"name": group, "versions": [v.clone()], "preferredVersion": v})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

fn resource_list(group_version: &str) -> Option<Value> {
    let list: Vec<Value> = resources(group_version)?
        .into_iter()
        .map(|(name, namespaced, kind)| {
            let singular = kind.to_ascii_lowercase();
            let mut r = json!({"name": name, "singularName": singular, "namespaced": namespaced,
                "kind": kind, "verbs": ["create", "get", "list", "update", "delete"]});
            if name == "serviceaccounts/token" {
                r["group"] = json!("authentication.k8s.io");
                r["version"] = json!("v1");
                r["verbs"] = json!(["create"]);
            }
            if name == "deployments/scale" {
                r["group"] = json!("autoscaling");
                r["version"] = json!("v1");
            }
            if name == "pods/eviction" {
                r["group"] = json!("policy");
                r["version"] = json!("v1");
                r["verbs"] = json!(["create"]);
            }
            r
        })
        .collect();
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1",
        "groupVersion": group_version, "resources": list}))
}

struct Request {
    method: String,
    path: String,
    content_type: String,
    body: Vec<u8>,
}

fn read_request(stream: &TcpStream) -> std::io::Result<Option<Request>> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let path = parts.next().unwrap_or_default().to_owned();
    let (mut length, mut content_type) = (0usize, String::new());
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            let value = value.trim();
            match name.trim().to_ascii_lowercase().as_str() {
                "content-length" => length = value.parse().unwrap_or(0),
                "content-type" => content_type = value.to_owned(),
                _ => {}
            }
        }
    }
    let mut body = vec![0; length.min(16 << 20)];
    if method == "PATCH" {
        // Remember the patch type with the body, for inspection.
        content_type = format!("{content_type} (patch)");
    }
    reader.read_exact(&mut body)?;
    Ok(Some(Request {
        method,
        path,
        content_type,
        body,
    }))
}

fn respond(mut stream: &TcpStream, status: u16, body: &Value) -> std::io::Result<()> {
    let reason = match status {
        200 => "OK",
        201 => "Created",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "Unsupported Media Type",
    };
    let text = body.to_string();
    write!(
        stream,
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    )?;
    stream.flush()
}

fn status(code: u16, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "code": code})
}

/// Where a resource path points (after `/api/v1/` or `/apis/<g>/<v>/`).
struct Target<'a> {
    namespace: Option<&'a str>,
    name: Option<&'a str>,
    subresource: Option<&'a str>,
}

fn parse_target(path: &str) -> Option<Target<'_>> {
    let rest = path.strip_prefix("/api/v1/").or_else(|| {
        path.strip_prefix("/apis/")
            .and_then(|p| p.splitn(3, '/').nth(2))
    })?;
    let mut parts: Vec<&str> = rest.split('/').filter(|p| !p.is_empty()).collect();
    let mut namespace = None;
    if parts.len() >= 3 && parts[0] == "namespaces" {
        namespace = Some(parts[1]);
        parts.drain(..2);
    }
    parts.first()?; // the resource name itself
    Some(Target {
        namespace,
        name: parts.get(1).copied(),
        subresource: parts.get(2).copied(),
    })
}

/// A fake API server that remembers what it was sent.
struct Server {
    out: PathBuf,
    reject_protobuf: bool,
    objects: BTreeMap<String, Value>,
}

impl Server {
    /// Decodes a request body into JSON, saving the raw bytes under `out`.
    fn body_json(&self, req: &Request, seq: usize) -> Result<Value, (u16, Value)> {
        if !keelson_kube_protobuf::is_protobuf_content_type(&req.content_type) {
            let _ = std::fs::write(self.out.join(format!("{seq:03}-json.json")), &req.body);
            return serde_json::from_slice(&req.body)
                .map_err(|e| (400, status(400, &e.to_string())));
        }
        if self.reject_protobuf {
            return Err((415, status(415, "protobuf rejected (reject-protobuf mode)")));
        }
        let kind = keelson_kube_protobuf::decode_envelope(&req.body)
            .map(|e| e.kind.to_ascii_lowercase())
            .unwrap_or_else(|_| "invalid".to_owned());
        let _ = std::fs::write(self.out.join(format!("{seq:03}-{kind}.pb")), &req.body);
        let value = keelson_kube_protobuf::decode(&req.body).map_err(|e| {
            let code = if e.is_unsupported() { 415 } else { 400 };
            (code, status(code, &e.to_string()))
        })?;
        let pretty = serde_json::to_string_pretty(&value).unwrap_or_default();
        let _ = std::fs::write(
            self.out.join(format!("{seq:03}-{kind}.decoded.json")),
            pretty,
        );
        Ok(value)
    }

    fn handle(&mut self, req: &Request, seq: usize) -> (u16, Value) {
        match self.try_handle(req, seq) {
            Ok(answer) | Err(answer) => answer,
        }
    }

    fn try_handle(&mut self, req: &Request, seq: usize) -> Result<(u16, Value), (u16, Value)> {
        let path = req
            .path
            .split('?')
            .next()
            .unwrap_or_default()
            .trim_end_matches('/');
        let discovery = match path {
            "/version" => Some(json!({"major": "1", "minor": "33", "gitVersion": "v1.33.0"})),
            "/api" => Some(json!({"kind": "APIVersions", "versions": ["v1"]})),
            "/apis" => Some(group_list()),
            "/api/v1" => resource_list("v1"),
            p => p.strip_prefix("/apis/").and_then(resource_list),
        };
        if let (Some(v), "GET") = (discovery, req.method.as_str()) {
            return Ok((200, v));
        }
        let not_found = || (404, status(404, "not found"));
        let target = parse_target(path).ok_or_else(not_found)?;
        match (req.method.as_str(), target.name, target.subresource) {
            ("GET", Some(_), _) => self
                .objects
                .get(path)
                .cloned()
                .map(|v| (200, v))
                .ok_or_else(not_found),
            ("GET", None, _) => {
                // A cluster-wide list (`/api/v1/pods`) also matches
                // namespaced keys (`/api/v1/namespaces/x/pods/p`).
                let (head, resource) = path.rsplit_once('/').unwrap_or(("", path));
                let in_collection = |key: &str| {
                    let Some((collection, name)) = key.rsplit_once('/') else {
                        return false;
                    };
                    if collection == path {
                        return !name.is_empty();
                    }
                    target.namespace.is_none()
                        && collection.strip_prefix(head).is_some_and(|rest| {
                            rest.starts_with("/namespaces/")
                                && rest.ends_with(&format!("/{resource}"))
                                && rest.matches('/').count() == 3
                        })
                };
                let items: Vec<Value> = self
                    .objects
                    .iter()
                    .filter(|(k, _)| in_collection(k))
                    .map(|(_, v)| v.clone())
                    .collect();
                // Typed clients want `PodList`, not `List`.
                let first = items.first();
                let kind = first
                    .and_then(|i| i["kind"].as_str())
                    .map(|k| format!("{k}List"));
                let api_version = first.and_then(|i| i["apiVersion"].as_str()).unwrap_or("v1");
                Ok((
                    200,
                    json!({"kind": kind.unwrap_or_else(|| "List".to_owned()),
                    "apiVersion": api_version, "metadata": {}, "items": items}),
                ))
            }
            ("POST", None, _) => {
                let mut object = self.body_json(req, seq)?;
                let name = object["metadata"]["name"]
                    .as_str()
                    .unwrap_or("generated")
                    .to_owned();
                object["metadata"]["name"] = json!(name);
                if let Some(ns) = target.namespace {
                    object["metadata"]["namespace"] = json!(ns);
                }
                object["metadata"]["uid"] = json!(format!("uid-{seq}"));
                object["metadata"]["resourceVersion"] = json!(seq.to_string());
                self.objects
                    .insert(format!("{path}/{name}"), object.clone());
                Ok((201, object))
            }
            ("POST", Some(_), Some("token")) => {
                let mut object = self.body_json(req, seq)?;
                object["status"] =
                    json!({"token": "fake-token", "expirationTimestamp": "2030-01-01T00:00:00Z"});
                Ok((201, object))
            }
            ("POST", Some(_), _) => Ok((201, self.body_json(req, seq)?)),
            ("PUT", Some(_), sub) => {
                let object = self.body_json(req, seq)?;
                let key = if sub.is_some() {
                    path.rsplit_once('/').map(|p| p.0).unwrap_or(path)
                } else {
                    path
                };
                self.objects.insert(key.to_owned(), object.clone());
                Ok((200, object))
            }
            ("PATCH", Some(_), _) => {
                let _ = std::fs::write(self.out.join(format!("{seq:03}-patch.txt")), &req.body);
                self.objects
                    .get(path)
                    .cloned()
                    .map(|v| (200, v))
                    .ok_or_else(not_found)
            }
            ("DELETE", Some(_), _) => {
                let _ = std::fs::write(self.out.join(format!("{seq:03}-delete.txt")), &req.body);
                let gone = self.objects.remove(path).ok_or_else(not_found)?;
                Ok((200, gone))
            }
            _ => Err((405, status(405, "method not allowed"))),
        }
    }
}

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let port: u16 = args.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let out = PathBuf::from(args.next().unwrap_or_else(|| "captures".to_owned()));
    let max_requests: usize = args.next().and_then(|p| p.parse().ok()).unwrap_or(10_000);
    // Answer every protobuf body with 415, to watch the client fall back.
    let reject_protobuf = args.next().is_some_and(|a| a == "reject-protobuf");
    std::fs::create_dir_all(&out)?;
    let mut server = Server {
        out,
        reject_protobuf,
        objects: BTreeMap::new(),
    };
    let listener = TcpListener::bind(("127.0.0.1", port))?;
    println!("listening on http://{}", listener.local_addr()?);
    for (seq, stream) in listener.incoming().enumerate().take(max_requests) {
        let stream = stream?;
        let Some(req) = read_request(&stream)? else {
            continue;
        };
        let (code, body) = server.handle(&req, seq);
        eprintln!(
            "{} {} [{}] -> {code}",
            req.method, req.path, req.content_type
        );
        respond(&stream, code, &body)?;
    }
    Ok(())
}
