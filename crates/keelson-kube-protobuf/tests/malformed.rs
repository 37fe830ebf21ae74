//! Malformed, hostile and unsupported input: every case returns an error
//! (or, for a cut that happens to fall between two fields, a shorter valid
//! object) and nothing ever panics.

use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
use keelson_kube_protobuf::{
    decode, decode_envelope, decode_object, encode_envelope, is_protobuf_content_type,
    is_supported, supported_kinds, ConvertError, EnvelopeError, ProtobufError,
};
use proptest::prelude::*;
use prost::Message;

const FIXTURES: &[&[u8]] = &[
    include_bytes!("fixtures/deployment.pb"),
    include_bytes!("fixtures/secret-tls.pb"),
    include_bytes!("fixtures/service-nodeport.pb"),
    include_bytes!("fixtures/ingress.pb"),
    include_bytes!("fixtures/cronjob.pb"),
    include_bytes!("fixtures/clusterrole-agg.pb"),
    include_bytes!("fixtures/certificate-approve.pb"),
    include_bytes!("fixtures/debug-node.pb"),
];

fn namespace_named(name: Vec<u8>) -> Vec<u8> {
    // Namespace { metadata (1) { name (1) } } written by hand so that the
    // name can be invalid UTF-8.
    let mut meta = vec![0x0a, name.len() as u8];
    meta.extend(name);
    let mut raw = vec![0x0a, meta.len() as u8];
    raw.extend(meta);
    encode_envelope("v1", "Namespace", &raw)
}

#[test]
fn bad_magic_is_rejected() {
    for body in [
        &b""[..],
        b"k8s",
        b"k8s\x01\x0a\x00",
        b"{\"kind\":\"Pod\"}",
        b"\x00k8s",
    ] {
        assert!(
            matches!(
                decode(body),
                Err(ProtobufError::Envelope(EnvelopeError::BadMagic))
            ),
            "{body:?}"
        );
    }
    let mut json_like = include_bytes!("fixtures/namespace.pb").to_vec();
    json_like[0] = b'K';
    assert!(matches!(
        decode(&json_like),
        Err(ProtobufError::Envelope(EnvelopeError::BadMagic))
    ));
}

#[test]
fn empty_envelope_has_no_type() {
    assert!(matches!(
        decode(b"k8s\0"),
        Err(ProtobufError::Envelope(EnvelopeError::MissingTypeMeta))
    ));
}

#[test]
fn truncated_bodies_fail_without_panicking() {
    for body in FIXTURES {
        let mut failures = 0;
        for cut in 0..body.len() {
            if decode(&body[..cut]).is_err() {
                failures += 1;
            }
        }
        // The typed object is one length-delimited field of the envelope, so
        // every cut before the envelope's last two (empty) fields fails.
        assert!(
            failures >= body.len() - 4,
            "only {failures} of {} cuts failed",
            body.len()
        );
    }
}

/// Offsets in `buf` where a top-level field starts or the message ends.
fn top_level_boundaries(buf: &[u8]) -> Vec<usize> {
    let mut out = vec![0];
    let mut pos = 0;
    let varint = |pos: &mut usize| {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = buf[*pos];
            *pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                break;
            }
        }
        v
    };
    while pos < buf.len() {
        let key = varint(&mut pos);
        match key & 7 {
            0 => {
                varint(&mut pos);
            }
            2 => {
                let len = varint(&mut pos) as usize;
                pos += len;
            }
            1 => pos += 8,
            _ => pos += 4,
        }
        out.push(pos);
    }
    out
}

#[test]
fn truncated_objects_fail_unless_cut_between_fields() {
    for body in FIXTURES {
        let env = decode_envelope(body).unwrap();
        let boundaries = top_level_boundaries(&env.raw);
        for cut in 0..env.raw.len() {
            let result = decode_object(&env.api_version, &env.kind, &env.raw[..cut]);
            match result {
                Err(ProtobufError::MalformedObject { .. }) => {}
                Ok(_) => assert!(
                    boundaries.contains(&cut),
                    "{} cut at {cut} decoded",
                    env.kind
                ),
                Err(other) => panic!("{} cut at {cut}: unexpected {other:?}", env.kind),
            }
        }
    }
}

#[test]
fn unknown_kinds_are_unsupported() {
    for (api_version, kind) in [
        ("v1", "Endpoints"),
        ("apps/v1beta1", "Deployment"),
        ("example.com/v1", "Widget"),
        ("v1", "deployment"),
    ] {
        let err = decode(&encode_envelope(api_version, kind, b"")).unwrap_err();
        match &err {
            ProtobufError::UnsupportedKind {
                api_version: a,
                kind: k,
            } => {
                assert_eq!((a.as_str(), k.as_str()), (api_version, kind));
            }
            other => panic!("{api_version} {kind}: expected UnsupportedKind, got {other:?}"),
        }
        assert!(err.is_unsupported());
        assert!(err.to_string().contains("application/json"), "{err}");
    }
}

#[test]
fn supported_kinds_are_unique_and_decode_empty_objects() {
    let kinds: Vec<_> = supported_kinds().collect();
    let unique: std::collections::BTreeSet<_> = kinds.iter().collect();
    assert_eq!(unique.len(), kinds.len(), "duplicate entries");
    assert!(kinds.len() >= 30, "{kinds:?}");
    for (api_version, kind) in kinds {
        assert!(is_supported(api_version, kind));
        let decoded = decode(&encode_envelope(api_version, kind, b"")).unwrap();
        assert_eq!(
            decoded,
            serde_json::json!({"apiVersion": api_version, "kind": kind})
        );
    }
    assert!(!is_supported("v1", "Endpoints"));
}

#[test]
fn invalid_utf8_in_a_string_is_malformed() {
    let err = decode(&namespace_named(vec![b'a', 0xff, 0xfe])).unwrap_err();
    assert!(
        matches!(err, ProtobufError::MalformedObject { .. }),
        "{err:?}"
    );
    assert!(!err.is_unsupported());
    let ok = decode(&namespace_named(b"dev".to_vec())).unwrap();
    assert_eq!(ok["metadata"]["name"], "dev");
}

#[test]
fn payload_of_another_kind_does_not_panic() {
    let deployment = decode_envelope(include_bytes!("fixtures/deployment.pb"))
        .unwrap()
        .raw;
    for (api_version, kind) in supported_kinds() {
        let _ = decode_object(api_version, kind, &deployment);
    }
}

#[test]
fn foreign_embedded_content_type_is_unsupported() {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some("v1".into()),
            kind: Some("Namespace".into()),
        }),
        raw: Some(br#"{"metadata":{"name":"x"}}"#.to_vec()),
        content_encoding: None,
        content_type: Some("application/json".into()),
    };
    let mut body = b"k8s\0".to_vec();
    unknown.encode(&mut body).unwrap();
    let err = decode(&body).unwrap_err();
    assert!(matches!(err, ProtobufError::UnsupportedContentType(ref t) if t == "application/json"));
    assert!(err.is_unsupported());
}

#[test]
fn values_without_json_form_are_conversion_errors() {
    let ns = core::Namespace {
        metadata: Some(meta::ObjectMeta {
            name: Some("x".into()),
            creation_timestamp: Some(meta::Time {
                seconds: Some(i64::MAX),
                nanos: Some(0),
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let err = decode(&encode_envelope("v1", "Namespace", &ns.encode_to_vec())).unwrap_err();
    match &err {
        ProtobufError::Convert {
            source: ConvertError::TimeOutOfRange { field, .. },
            ..
        } => {
            assert_eq!(field, "creationTimestamp")
        }
        other => panic!("expected TimeOutOfRange, got {other:?}"),
    }
    assert!(!err.is_unsupported());

    let svc = core::Service {
        spec: Some(core::ServiceSpec {
            ports: vec![core::ServicePort {
                port: Some(80),
                target_port: Some(k8s_pb::apimachinery::pkg::util::intstr::IntOrString {
                    r#type: Some(9),
                    int_val: None,
                    str_val: None,
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    let err = decode(&encode_envelope("v1", "Service", &svc.encode_to_vec())).unwrap_err();
    assert!(matches!(
        err,
        ProtobufError::Convert {
            source: ConvertError::InvalidIntOrString { value: 9, .. },
            ..
        }
    ));
}

#[test]
fn untranslated_fields_are_reported_not_dropped() {
    let pod = core::Pod {
        spec: Some(core::PodSpec {
            volumes: vec![core::Volume {
                name: Some("repo".into()),
                volume_source: Some(core::VolumeSource {
                    git_repo: Some(core::GitRepoVolumeSource {
                        repository: Some("https://example.com/r.git".into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    let err = decode(&encode_envelope("v1", "Pod", &pod.encode_to_vec())).unwrap_err();
    assert!(err.is_unsupported(), "{err:?}");
    assert!(err.to_string().contains("gitRepo"), "{err}");
}

#[test]
fn content_type_header_matching() {
    assert!(is_protobuf_content_type(
        "application/vnd.kubernetes.protobuf"
    ));
    assert!(is_protobuf_content_type(
        "Application/Vnd.Kubernetes.Protobuf; charset=utf-8"
    ));
    assert!(!is_protobuf_content_type("application/json"));
    assert!(is_protobuf_content_type(
        "application/vnd.kubernetes.protobuf;stream=watch"
    ));
    assert!(!is_protobuf_content_type(
        "application/vnd.kubernetes.protobuf-x"
    ));
    assert!(!is_protobuf_content_type(""));
}

proptest! {
    #[test]
    fn random_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode(&body);
    }

    #[test]
    fn random_bytes_after_magic_never_panic(rest in proptest::collection::vec(any::<u8>(), 0..512)) {
        let mut body = b"k8s\0".to_vec();
        body.extend(rest);
        let _ = decode(&body);
    }

    #[test]
    fn random_objects_of_every_kind_never_panic(
        raw in proptest::collection::vec(any::<u8>(), 0..256),
        index in 0usize..64,
    ) {
        let kinds: Vec<_> = supported_kinds().collect();
        let (api_version, kind) = kinds[index % kinds.len()];
        match decode(&encode_envelope(api_version, kind, &raw)) {
            Ok(v) => prop_assert_eq!(&v["kind"], kind),
            Err(ProtobufError::MalformedObject { .. } | ProtobufError::Convert { .. }) => {}
            Err(other) => prop_assert!(false, "unexpected error {:?}", other),
        }
    }

    #[test]
    fn mutated_fixtures_never_panic(
        which in 0usize..8,
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
    ) {
        let mut body = FIXTURES[which % FIXTURES.len()].to_vec();
        for (at, byte) in edits {
            let i = at.index(body.len());
            body[i] = byte;
        }
        let _ = decode(&body);
    }
}
