use super::*;
use x509_parser::prelude::*;

fn parse(pem: &str) -> Vec<u8> {
    let (_, p) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).expect("pem");
    p.contents
}

#[test]
fn client_certificate_carries_user_and_groups_and_chains_to_the_ca() {
    let ca = ClusterCa::generate("test").unwrap();
    let c = ca.issue_client("alice", &["dev"]).unwrap();
    let der = parse(&c.cert_pem);
    let (_, cert) = X509Certificate::from_der(&der).unwrap();
    let cn: Vec<_> = cert.subject().iter_common_name().map(|a| a.as_str().unwrap().to_string()).collect();
    let o: Vec<_> = cert.subject().iter_organization().map(|a| a.as_str().unwrap().to_string()).collect();
    assert_eq!(cn, ["alice"]);
    assert_eq!(o, ["dev"]);
    let ca_der = parse(ca.cert_pem());
    let (_, ca_cert) = X509Certificate::from_der(&ca_der).unwrap();
    assert_eq!(cert.issuer(), ca_cert.subject());
    cert.verify_signature(Some(ca_cert.public_key())).expect("signed by the CA");
    assert!(ca_cert.is_ca());
}

#[test]
fn serving_certificate_has_dns_and_ip_names() {
    let ca = ClusterCa::generate("test").unwrap();
    let c = ca.issue_serving("keelson-1", &["localhost".into(), "127.0.0.1".into(), "localhost".into()]).unwrap();
    let der = parse(&c.cert_pem);
    let (_, cert) = X509Certificate::from_der(&der).unwrap();
    let san = cert.subject_alternative_name().unwrap().unwrap();
    let names: Vec<String> = san.value.general_names.iter().map(|n| format!("{n:?}")).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.iter().any(|n| n.contains("localhost")));
    assert!(names.iter().any(|n| n.contains("127")));
}

#[test]
fn ca_survives_save_and_load() {
    let dir = tempfile::tempdir().unwrap();
    let a = ClusterCa::load_or_create(dir.path(), "t").unwrap();
    let b = ClusterCa::load_or_create(dir.path(), "t").unwrap();
    assert_eq!(a.cert_pem(), b.cert_pem());
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.path().join("ca.key")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    // A certificate issued by the loaded CA verifies against the original.
    let c = b.issue_client("x", &[]).unwrap();
    let der = parse(&c.cert_pem);
    let (_, cert) = X509Certificate::from_der(&der).unwrap();
    let ca_der = parse(a.cert_pem());
    let (_, ca_cert) = X509Certificate::from_der(&ca_der).unwrap();
    cert.verify_signature(Some(ca_cert.public_key())).unwrap();
}

#[test]
fn kubeconfig_has_a_context_per_endpoint() {
    let ca = ClusterCa::generate("t").unwrap();
    let admin = ca.issue_client(ADMIN_USER, &[ADMIN_GROUP]).unwrap();
    let ctx = |n: &str, p: u16| KubeconfigContext { name: n.into(), server: format!("https://127.0.0.1:{p}") };
    let k = kubeconfig(&[ctx("keelson-1", 1), ctx("keelson-2", 2)], ca.cert_pem(), "admin", &admin);
    assert!(k.contains("current-context: \"keelson-1\""));
    assert_eq!(k.matches("certificate-authority-data").count(), 2);
    assert!(k.contains("server: \"https://127.0.0.1:2\""));
}

#[test]
fn expiry_is_read_from_the_certificate() {
    let ca = ClusterCa::generate("t").unwrap();
    let short = ca.issue_serving_valid_for("s", &["localhost".into()], Duration::hours(2)).unwrap();
    let (exp, cn) = certificate_expiry(&short.cert_pem).unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    assert!((exp - now - 7200).abs() < 5, "{exp} vs {now}");
    assert_eq!(cn, "s");
    assert!(certificate_expiry("garbage").is_err());
}
