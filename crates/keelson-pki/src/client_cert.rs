//! Client certificates with any number of groups.
//!
//! Kubernetes takes a client certificate's user from the subject's CN and its groups from
//! every O attribute of the subject. rcgen keeps one value per attribute type, so this
//! module writes the certificate itself: the TBSCertificate is built as DER (with
//! `yasna`) and signed with the CA's key. The subject is one RDN per attribute, the groups
//! first in the order given and the CN last, as kubeadm and `openssl req -subj
//! "/O=…/O=…/CN=…"` write it.
//!
//! A certificate carries the same extensions as the cluster's other client certificates:
//! key usage digitalSignature + keyEncipherment (critical), extended key usage clientAuth,
//! and the authority key identifier of the CA (its subject key identifier).

use rcgen::{KeyPair, PublicKeyData, SigningKey};
use time::{Duration, OffsetDateTime};
use x509_parser::extensions::ParsedExtension;
use yasna::models::{GeneralizedTime, ObjectIdentifier, UTCTime};
use yasna::{DERWriter, Tag};

use crate::IssuedCert;

/// Why a client certificate could not be issued.
#[derive(Debug, thiserror::Error)]
pub enum ClientCertError {
    /// The CA certificate could not be parsed.
    #[error("CA certificate: {0}")]
    CaCertificate(String),
    /// The CA key's algorithm has no signature algorithm identifier here.
    #[error("CA key algorithm {0} is not supported for client certificates")]
    UnsupportedAlgorithm(String),
    /// The system's random number generator failed.
    #[error("no random serial number: the system random generator failed")]
    Random,
    /// Generating the new key or signing failed.
    #[error("client certificate: {0}")]
    Crypto(#[from] rcgen::Error),
}

const OID_COMMON_NAME: &[u64] = &[2, 5, 4, 3];
const OID_ORGANIZATION: &[u64] = &[2, 5, 4, 10];
const OID_KEY_USAGE: &[u64] = &[2, 5, 29, 15];
const OID_EXT_KEY_USAGE: &[u64] = &[2, 5, 29, 37];
const OID_AUTHORITY_KEY_ID: &[u64] = &[2, 5, 29, 35];
const OID_CLIENT_AUTH: &[u64] = &[1, 3, 6, 1, 5, 5, 7, 3, 2];

/// How a signature algorithm is named in a certificate: its OID, and whether the
/// parameters are an explicit NULL (RSA) or absent (ECDSA, EdDSA).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct AlgorithmId {
    oid: &'static [u64],
    null_params: bool,
}

/// The signature algorithm identifier for a CA key of algorithm `alg`.
fn algorithm_id(alg: &'static rcgen::SignatureAlgorithm) -> Result<AlgorithmId, ClientCertError> {
    let table: [(&rcgen::SignatureAlgorithm, &'static [u64], bool); 6] = [
        (&rcgen::PKCS_ECDSA_P256_SHA256, &[1, 2, 840, 10045, 4, 3, 2], false),
        (&rcgen::PKCS_ECDSA_P384_SHA384, &[1, 2, 840, 10045, 4, 3, 3], false),
        (&rcgen::PKCS_ED25519, &[1, 3, 101, 112], false),
        (&rcgen::PKCS_RSA_SHA256, &[1, 2, 840, 113549, 1, 1, 11], true),
        (&rcgen::PKCS_RSA_SHA384, &[1, 2, 840, 113549, 1, 1, 12], true),
        (&rcgen::PKCS_RSA_SHA512, &[1, 2, 840, 113549, 1, 1, 13], true),
    ];
    table
        .iter()
        .find(|(a, _, _)| *a == alg)
        .map(|&(_, oid, null_params)| AlgorithmId { oid, null_params })
        .ok_or_else(|| ClientCertError::UnsupportedAlgorithm(format!("{alg:?}")))
}

/// Everything a client certificate's TBSCertificate says, already decided: the pure
/// input of [`tbs_der`].
#[derive(Clone, Debug)]
struct TbsFields<'a> {
    /// Positive serial number, big-endian.
    serial: Vec<u8>,
    signature: AlgorithmId,
    /// The CA certificate's subject, DER as it appears in the CA certificate.
    issuer_der: &'a [u8],
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
    user: &'a str,
    groups: &'a [&'a str],
    /// The subject's SubjectPublicKeyInfo, DER.
    spki_der: &'a [u8],
    /// The CA's subject key identifier, for the authority key identifier extension.
    authority_key_id: Option<&'a [u8]>,
}

fn oid(components: &[u64]) -> ObjectIdentifier {
    ObjectIdentifier::from_slice(components)
}

fn write_algorithm(w: DERWriter, alg: AlgorithmId) {
    w.write_sequence(|w| {
        w.next().write_oid(&oid(alg.oid));
        if alg.null_params {
            w.next().write_null();
        }
    });
}

/// A certificate time: UTCTime through 2049, GeneralizedTime after (RFC 5280 4.1.2.5).
fn write_time(w: DERWriter, t: OffsetDateTime) {
    let t = t.replace_nanosecond(0).expect("0 is a valid nanosecond");
    match UTCTime::from_datetime_opt(t) {
        Some(utc) => w.write_utctime(&utc),
        None => w.write_generalized_time(&GeneralizedTime::from_datetime(t)),
    }
}

/// One attribute in its own RDN: `SET { SEQUENCE { type, UTF8String value } }`.
fn write_rdn(w: DERWriter, attribute: &[u64], value: &str) {
    w.write_set(|w| {
        w.next().write_sequence(|w| {
            w.next().write_oid(&oid(attribute));
            w.next().write_utf8_string(value);
        })
    });
}

/// An extension whose value is the DER that `value` writes.
fn write_extension(w: DERWriter, id: &[u64], critical: bool, value: impl FnOnce(DERWriter)) {
    w.write_sequence(|w| {
        w.next().write_oid(&oid(id));
        if critical {
            w.next().write_bool(true);
        }
        w.next().write_bytes(&yasna::construct_der(value));
    });
}

/// The DER of the TBSCertificate (RFC 5280 4.1) that `f` describes.
fn tbs_der(f: &TbsFields<'_>) -> Vec<u8> {
    yasna::construct_der(|w| {
        w.write_sequence(|w| {
            // version v3
            w.next().write_tagged(Tag::context(0), |w| w.write_u8(2));
            w.next().write_bigint_bytes(&f.serial, true);
            write_algorithm(w.next(), f.signature);
            w.next().write_der(f.issuer_der);
            w.next().write_sequence(|w| {
                write_time(w.next(), f.not_before);
                write_time(w.next(), f.not_after);
            });
            w.next().write_sequence(|w| {
                for g in f.groups {
                    write_rdn(w.next(), OID_ORGANIZATION, g);
                }
                write_rdn(w.next(), OID_COMMON_NAME, f.user);
            });
            w.next().write_der(f.spki_der);
            w.next().write_tagged(Tag::context(3), |w| {
                w.write_sequence(|w| {
                    if let Some(id) = f.authority_key_id {
                        write_extension(w.next(), OID_AUTHORITY_KEY_ID, false, |w| {
                            w.write_sequence(|w| w.next().write_tagged_implicit(Tag::context(0), |w| w.write_bytes(id)))
                        });
                    }
                    // digitalSignature (bit 0) and keyEncipherment (bit 2): 101 in three bits.
                    write_extension(w.next(), OID_KEY_USAGE, true, |w| w.write_bitvec_bytes(&[0b1010_0000], 3));
                    write_extension(w.next(), OID_EXT_KEY_USAGE, false, |w| {
                        w.write_sequence(|w| w.next().write_oid(&oid(OID_CLIENT_AUTH)))
                    });
                })
            });
        })
    })
}

/// `Certificate ::= SEQUENCE { tbsCertificate, signatureAlgorithm, signatureValue }`.
fn certificate_der(tbs: &[u8], alg: AlgorithmId, signature: &[u8]) -> Vec<u8> {
    yasna::construct_der(|w| {
        w.write_sequence(|w| {
            w.next().write_der(tbs);
            write_algorithm(w.next(), alg);
            w.next().write_bitvec_bytes(signature, signature.len() * 8);
        })
    })
}

/// A random positive 128-bit serial number.
fn random_serial() -> Result<Vec<u8>, ClientCertError> {
    use ring::rand::SecureRandom;
    let mut serial = vec![0u8; 16];
    ring::rand::SystemRandom::new().fill(&mut serial).map_err(|_| ClientCertError::Random)?;
    // Top bit clear (positive), next bit set (always 16 bytes, never zero).
    serial[0] = (serial[0] & 0x7f) | 0x40;
    Ok(serial)
}

/// Issues a client certificate for `user` in `groups` (each its own O, in order), signed
/// by the CA (`ca_cert_pem`, `ca_key`), valid from an hour ago for `validity`, with a
/// fresh key pair.
pub(crate) fn issue(ca_cert_pem: &str, ca_key: &KeyPair, user: &str, groups: &[&str], validity: Duration) -> Result<IssuedCert, ClientCertError> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(ca_cert_pem.as_bytes()).map_err(|e| ClientCertError::CaCertificate(e.to_string()))?;
    let (_, ca) = x509_parser::parse_x509_certificate(&pem.contents).map_err(|e| ClientCertError::CaCertificate(e.to_string()))?;
    let authority_key_id = ca.iter_extensions().find_map(|ext| match ext.parsed_extension() {
        ParsedExtension::SubjectKeyIdentifier(id) => Some(id.0),
        _ => None,
    });
    let signature = algorithm_id(ca_key.algorithm())?;
    let key = KeyPair::generate()?;
    let spki = key.subject_public_key_info();
    let now = OffsetDateTime::now_utc();
    let fields = TbsFields {
        serial: random_serial()?,
        signature,
        issuer_der: ca.tbs_certificate.subject.as_raw(),
        not_before: now - Duration::hours(1),
        not_after: now + validity,
        user,
        groups,
        spki_der: &spki,
        authority_key_id,
    };
    let tbs = tbs_der(&fields);
    let sig = ca_key.sign(&tbs)?;
    let der = certificate_der(&tbs, signature, &sig);
    Ok(IssuedCert { cert_pem: pem_encode("CERTIFICATE", &der), key_pem: key.serialize_pem() })
}

/// PEM armor with 64-character lines.
fn pem_encode(label: &str, der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, UnixTime};
    use x509_parser::prelude::*;

    use crate::{ClusterCa, LEAF_VALIDITY};

    fn der(pem: &str) -> Vec<u8> {
        x509_parser::pem::parse_x509_pem(pem.as_bytes()).expect("PEM").1.contents
    }

    /// What the API server does with a client certificate: rustls's WebPKI verifier
    /// with the cluster CA as the only root.
    fn rustls_verifies(ca_pem: &str, cert_pem: &str) -> Result<(), rustls::Error> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(CertificateDer::from(der(ca_pem))).expect("CA root");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .expect("verifier");
        verifier.verify_client_cert(&CertificateDer::from(der(cert_pem)), &[], UnixTime::now()).map(|_| ())
    }

    fn names(cert: &X509Certificate<'_>) -> (Vec<String>, Vec<String>) {
        let s = |a: &AttributeTypeAndValue<'_>| a.as_str().expect("string").to_string();
        (cert.subject().iter_common_name().map(s).collect(), cert.subject().iter_organization().map(s).collect())
    }

    #[test]
    fn every_group_is_its_own_o_attribute_in_order_and_rustls_accepts_the_certificate() {
        let ca = ClusterCa::generate("t").expect("CA");
        let groups = ["dev", "ops", "system:authenticated"];
        let c = ca.issue_client("alice", &groups).expect("client certificate");
        let d = der(&c.cert_pem);
        let (rest, cert) = X509Certificate::from_der(&d).expect("a well-formed certificate");
        assert!(rest.is_empty());
        assert_eq!(names(&cert), (vec!["alice".to_string()], groups.map(String::from).to_vec()));
        // One attribute per RDN: three O RDNs, then the CN.
        let rdns: Vec<Vec<String>> =
            cert.subject().iter().map(|rdn| rdn.iter().map(|a| a.attr_type().to_id_string()).collect()).collect();
        assert_eq!(rdns, [["2.5.4.10"], ["2.5.4.10"], ["2.5.4.10"], ["2.5.4.3"]]);
        assert_eq!(cert.version(), X509Version::V3);

        // Signed by the CA, named after it, with the CA's key identifier.
        let ca_der = der(ca.cert_pem());
        let (_, ca_cert) = X509Certificate::from_der(&ca_der).expect("CA certificate");
        assert_eq!(cert.issuer().as_raw(), ca_cert.subject().as_raw());
        cert.verify_signature(Some(ca_cert.public_key())).expect("signed by the CA key");
        let ca_ski = ca_cert.iter_extensions().find_map(|e| match e.parsed_extension() {
            ParsedExtension::SubjectKeyIdentifier(id) => Some(id.0.to_vec()),
            _ => None,
        });
        let aki = cert.iter_extensions().find_map(|e| match e.parsed_extension() {
            ParsedExtension::AuthorityKeyIdentifier(a) => a.key_identifier.as_ref().map(|k| k.0.to_vec()),
            _ => None,
        });
        assert!(ca_ski.is_some());
        assert_eq!(aki, ca_ski);

        // The usages of a client certificate, and nothing that makes it a CA.
        let ku = cert.key_usage().expect("key usage").expect("present");
        assert!(ku.critical && ku.value.digital_signature() && ku.value.key_encipherment() && !ku.value.key_cert_sign());
        let eku = cert.extended_key_usage().expect("eku").expect("present");
        assert!(eku.value.client_auth && !eku.value.server_auth);
        assert!(!cert.is_ca());

        // Valid from an hour ago for a year; the serial is positive and random.
        let now = ::time::OffsetDateTime::now_utc().unix_timestamp();
        let v = cert.validity();
        assert!((v.not_before.timestamp() - (now - 3600)).abs() < 5, "{:?}", v.not_before);
        assert!((v.not_after.timestamp() - (now + LEAF_VALIDITY.whole_seconds())).abs() < 5, "{:?}", v.not_after);
        let again = ca.issue_client("alice", &groups).expect("again");
        let d2 = der(&again.cert_pem);
        let (_, cert2) = X509Certificate::from_der(&d2).expect("certificate");
        assert!(cert.tbs_certificate.serial.bits() > 64);
        assert_ne!(cert.tbs_certificate.serial, cert2.tbs_certificate.serial);
        assert_ne!(c.key_pem, again.key_pem, "each certificate has its own key");

        rustls_verifies(ca.cert_pem(), &c.cert_pem).expect("rustls accepts the certificate as a client of the CA");
    }

    #[test]
    fn no_group_and_one_group_still_work() {
        let ca = ClusterCa::generate("t").expect("CA");
        for groups in [&[][..], &["system:masters"][..]] {
            let c = ca.issue_client("admin", groups).expect("client certificate");
            let d = der(&c.cert_pem);
            let (_, cert) = X509Certificate::from_der(&d).expect("certificate");
            assert_eq!(names(&cert), (vec!["admin".to_string()], groups.iter().map(|g| g.to_string()).collect()));
            rustls_verifies(ca.cert_pem(), &c.cert_pem).expect("rustls accepts it");
            // The key is the certificate's: rustls pairs them.
            let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(c.key_pem.as_bytes()).expect("key");
            let signer = rustls::crypto::ring::default_provider().key_provider.load_private_key(key).expect("signing key");
            rustls::sign::CertifiedKey::new(vec![CertificateDer::from(d)], signer).keys_match().expect("key matches the certificate");
        }
    }

    #[test]
    fn a_certificate_of_another_ca_is_refused_by_rustls() {
        let (ca, other) = (ClusterCa::generate("t").expect("CA"), ClusterCa::generate("other").expect("CA"));
        let c = other.issue_client("mallory", &["system:masters", "dev"]).expect("client certificate");
        assert!(rustls_verifies(ca.cert_pem(), &c.cert_pem).is_err());
        rustls_verifies(other.cert_pem(), &c.cert_pem).expect("its own CA accepts it");
    }

    #[test]
    fn cas_with_p384_and_ed25519_keys_sign_with_their_own_algorithm() {
        for alg in [&rcgen::PKCS_ECDSA_P384_SHA384, &rcgen::PKCS_ED25519] {
            let key = rcgen::KeyPair::generate_for(alg).expect("CA key");
            let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
            params.distinguished_name.push(rcgen::DnType::CommonName, "ca");
            params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::DigitalSignature];
            let ca_cert = params.self_signed(&key).expect("CA certificate");
            let ca = ClusterCa::from_pem(&ca_cert.pem(), &key.serialize_pem()).expect("CA");
            let c = ca.issue_client("bob", &["a", "b"]).expect("client certificate");
            let d = der(&c.cert_pem);
            let (_, cert) = X509Certificate::from_der(&d).expect("certificate");
            let want = super::algorithm_id(alg).expect("known algorithm").oid.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(".");
            assert_eq!(cert.signature_algorithm.algorithm.to_id_string(), want);
            rustls_verifies(ca.cert_pem(), &c.cert_pem).unwrap_or_else(|e| panic!("{alg:?}: {e}"));
        }
    }

    #[test]
    fn certificate_times_switch_to_generalized_time_after_2049() {
        let t = |year| ::time::Date::from_calendar_date(year, ::time::Month::June, 1).expect("date").midnight().assume_utc();
        let utc = yasna::construct_der(|w| super::write_time(w, t(2049)));
        let generalized = yasna::construct_der(|w| super::write_time(w, t(2050)));
        assert_eq!((utc[0], generalized[0]), (0x17, 0x18), "UTCTime is tag 23, GeneralizedTime tag 24");
        assert_eq!(&generalized[2..], b"20500601000000Z");
    }
}
