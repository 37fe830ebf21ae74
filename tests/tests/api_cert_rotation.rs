//! The API serving certificate is reissued before it expires, without a restart: new
//! connections get the new certificate, requests keep working throughout.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use keelson_tests::api::{ApiCluster, ApiOptions};
use keelson_tests::ClusterOptions;
use kube::api::{Api, ListParams};

/// The certificate the server at `addr` presents to a new connection, with its expiry.
async fn served_cert(ca_pem: &str, addr: std::net::SocketAddr) -> (Vec<u8>, i64) {
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pemfile::certs(&mut ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg)).connect(rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap(), tcp).await.unwrap();
    let der = tls.get_ref().1.peer_certificates().unwrap()[0].to_vec();
    let pem = format!("-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n", {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(&der)
    });
    let (exp, _) = keelson_pki::certificate_expiry(&pem).unwrap();
    (der, exp)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn serving_certificate_rotates_before_expiry() {
    // Certificates valid for 2 hours, renewed when less than 3 hours are left: every
    // check renews. A real server uses 365 days and 30 days.
    let api = ApiOptions { serving_validity: Some(Duration::from_secs(7200)), rotation: Some((Duration::from_secs(3 * 3600), Duration::from_millis(300))), ..Default::default() };
    let c = ApiCluster::start_with(1, ClusterOptions::default(), api).await.unwrap();
    let client = c.kube_client(0).await.unwrap();
    let ns: Api<Namespace> = Api::all(client);
    let (first, first_exp) = served_cert(c.ca_pem(), c.api_addr(0)).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let (second, second_exp) = loop {
        // Requests keep being served while certificates change.
        ns.list(&ListParams::default()).await.expect("requests keep working");
        let (der, exp) = served_cert(c.ca_pem(), c.api_addr(0)).await;
        if der != first {
            break (der, exp);
        }
        assert!(tokio::time::Instant::now() < deadline, "the certificate was never rotated");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_ne!(first, second);
    assert!(second_exp >= first_exp, "the new certificate expires later ({second_exp} vs {first_exp})");
    c.shutdown().await;
}
