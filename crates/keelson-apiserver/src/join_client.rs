//! Joining a cluster with a token: the joiner's side (see [`crate::join`]).
//!
//! 1. Fetch the CA over TLS without verification, and trust it only if its hash is the
//!    one in the token.
//! 2. Post the join request over TLS verified against that CA, with the token's
//!    credential.

use std::sync::Arc;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use keelson_pki::JoinToken;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use serde::de::DeserializeOwned;

use crate::join::{JoinRequest, NodeJoin, ServerJoin};

/// Why joining failed.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    #[error("bad server URL {0:?} (expected https://HOST:PORT)")]
    Url(String),
    #[error("cannot reach {addr}: {message}")]
    Connect { addr: String, message: String },
    #[error("the server's CA does not match the token (token says {expected}, server has {got}); wrong token or wrong server")]
    CaMismatch { expected: String, got: String },
    #[error("the server refused to let us join: {0}")]
    Refused(String),
    #[error("unexpected answer: {0}")]
    Protocol(String),
}

#[derive(Debug)]
pub(crate) struct AcceptAnyServer(pub(crate) Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AcceptAnyServer {
    fn verify_server_cert(&self, _: &CertificateDer<'_>, _: &[CertificateDer<'_>], _: &ServerName<'_>, _: &[u8], _: UnixTime) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(&self, m: &[u8], c: &CertificateDer<'_>, d: &DigitallySignedStruct) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(&self, m: &[u8], c: &CertificateDer<'_>, d: &DigitallySignedStruct) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn host_port(url: &str) -> Result<(String, String), JoinError> {
    let rest = url.strip_prefix("https://").ok_or_else(|| JoinError::Url(url.into()))?;
    let hp = rest.trim_end_matches('/');
    let host = match hp.rsplit_once(':') {
        Some((h, p)) if p.parse::<u16>().is_ok() => h.trim_matches(|c| c == '[' || c == ']').to_string(),
        _ => return Err(JoinError::Url(url.into())),
    };
    Ok((hp.to_string(), host))
}

pub(crate) async fn request(url: &str, cfg: ClientConfig, method: &str, path: &str, bearer: Option<&str>, body: Vec<u8>) -> Result<(u16, Vec<u8>), JoinError> {
    let (addr, host) = host_port(url)?;
    let err = |m: String| JoinError::Connect { addr: addr.clone(), message: m };
    let tcp = tokio::net::TcpStream::connect(&addr).await.map_err(|e| err(e.to_string()))?;
    let name = ServerName::try_from(host.clone()).map_err(|e| err(e.to_string()))?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg)).connect(name, tcp).await.map_err(|e| err(format!("TLS: {e}")))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls)).await.map_err(|e| err(e.to_string()))?;
    tokio::spawn(conn);
    let mut req = hyper::Request::builder().method(method).uri(path).header("host", &host).header("content-type", "application/json");
    if let Some(b) = bearer {
        req = req.header("authorization", format!("Bearer {b}"));
    }
    let resp = sender.send_request(req.body(Full::new(Bytes::from(body))).expect("valid request")).await.map_err(|e| err(e.to_string()))?;
    let status = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.map_err(|e| err(e.to_string()))?.to_bytes();
    Ok((status, bytes.to_vec()))
}

/// Fetches the cluster CA from `url` and checks it against the token.
pub async fn fetch_ca(url: &str, token: &JoinToken) -> Result<String, JoinError> {
    let cfg = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| JoinError::Protocol(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAnyServer(provider())))
        .with_no_client_auth();
    let (status, body) = request(url, cfg, "GET", "/keelson/v1/cacerts", None, Vec::new()).await?;
    if status != 200 {
        return Err(JoinError::Protocol(format!("GET /keelson/v1/cacerts answered {status}")));
    }
    let pem = String::from_utf8(body).map_err(|_| JoinError::Protocol("CA is not text".into()))?;
    let got = keelson_pki::ca_hash(&pem).map_err(|e| JoinError::Protocol(e.to_string()))?;
    if got != token.ca_hash {
        return Err(JoinError::CaMismatch { expected: token.ca_hash.clone(), got });
    }
    Ok(pem)
}

async fn join<T: DeserializeOwned>(url: &str, token: &JoinToken, usage: &str, name: &str) -> Result<T, JoinError> {
    let ca = fetch_ca(url, token).await?;
    let mut roots = RootCertStore::empty();
    for c in rustls_pemfile::certs(&mut ca.as_bytes()).flatten() {
        roots.add(c).map_err(|e| JoinError::Protocol(e.to_string()))?;
    }
    let cfg = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| JoinError::Protocol(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let body = serde_json::to_vec(&JoinRequest { usage: usage.into(), name: name.into() }).expect("serializable");
    let (status, body) = request(url, cfg, "POST", "/keelson/v1/join", Some(&token.credential()), body).await?;
    if status != 200 {
        let msg = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["message"].as_str().map(String::from))
            .unwrap_or_else(|| format!("HTTP {status}"));
        return Err(JoinError::Refused(msg));
    }
    serde_json::from_slice(&body).map_err(|e| JoinError::Protocol(e.to_string()))
}

/// Joins as a server: the cluster's key material and its peers.
pub async fn join_server(url: &str, token: &JoinToken, name: &str) -> Result<ServerJoin, JoinError> {
    join(url, token, "server", name).await
}

/// Joins as a node: a node client certificate.
pub async fn join_node(url: &str, token: &JoinToken, name: &str) -> Result<NodeJoin, JoinError> {
    join(url, token, "node", name).await
}
