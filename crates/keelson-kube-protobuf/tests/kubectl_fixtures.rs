//! Decodes protobuf bodies captured from kubectl 1.33 (see
//! `tests/fixtures/README.md`) and compares them with the JSON kubectl
//! itself prints for the same command.

use std::collections::BTreeSet;

use base64::Engine as _;
use keelson_kube_protobuf::{decode, decode_envelope};
use serde_json::Value;

/// kubectl's `--dry-run=client -o json` output normalised the documented
/// way: `null`s dropped (kubectl prints `"creationTimestamp": null`) and the
/// top-level `status` removed (this crate does not translate it).
fn normalise_kubectl(mut v: Value) -> Value {
    fn drop_nulls(v: &mut Value) {
        match v {
            Value::Object(map) => {
                map.retain(|_, x| !x.is_null());
                map.values_mut().for_each(drop_nulls);
            }
            Value::Array(items) => items.iter_mut().for_each(drop_nulls),
            _ => {}
        }
    }
    if let Value::Object(map) = &mut v {
        map.remove("status");
    }
    drop_nulls(&mut v);
    v
}

fn assert_json_eq(name: &str, got: &Value, want: &Value) {
    if got != want {
        panic!(
            "{name}: decoded JSON differs\n--- decoded\n{}\n--- expected\n{}",
            serde_json::to_string_pretty(got).unwrap(),
            serde_json::to_string_pretty(want).unwrap()
        );
    }
}

/// Every string and object key in a JSON value.
fn json_strings(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::String(s) => {
            out.insert(s.clone());
        }
        Value::Array(items) => items.iter().for_each(|i| json_strings(i, out)),
        Value::Object(map) => {
            for (k, x) in map {
                out.insert(k.clone());
                json_strings(x, out);
            }
        }
        _ => {}
    }
}

fn read_varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *buf.get(*pos)?;
        *pos += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Some(value);
        }
    }
    None
}

/// Splits a protobuf message into its length-delimited payloads, or `None`
/// if `buf` is not a well-formed message.
fn length_delimited_fields(buf: &[u8]) -> Option<Vec<&[u8]>> {
    let mut fields = Vec::new();
    let mut pos = 0;
    while pos < buf.len() {
        let key = read_varint(buf, &mut pos)?;
        if key >> 3 == 0 {
            return None;
        }
        match key & 7 {
            0 => {
                read_varint(buf, &mut pos)?;
            }
            1 => pos += 8,
            5 => pos += 4,
            2 => {
                let len = usize::try_from(read_varint(buf, &mut pos)?).ok()?;
                let end = pos.checked_add(len)?;
                fields.push(buf.get(pos..end)?);
                pos = end;
            }
            _ => return None,
        }
    }
    (pos == buf.len()).then_some(fields)
}

fn looks_like_text(bytes: &[u8]) -> bool {
    std::str::from_utf8(bytes).is_ok_and(|s| s.chars().all(|c| !c.is_control() || c == '\n'))
}

/// Every non-empty string/bytes leaf of a protobuf message, found by
/// structure alone (no schema): a length-delimited payload that reads as
/// text is a leaf, one that parses as a message is descended into, anything
/// else is a bytes leaf.
fn protobuf_leaves(buf: &[u8], out: &mut Vec<Vec<u8>>) {
    for payload in length_delimited_fields(buf).unwrap_or_default() {
        if payload.is_empty() {
            continue;
        }
        if looks_like_text(payload) {
            out.push(payload.to_vec());
        } else if length_delimited_fields(payload).is_some() {
            protobuf_leaves(payload, out);
        } else {
            out.push(payload.to_vec());
        }
    }
}

/// No string or bytes value on the wire may be missing from the JSON: it
/// must appear as a JSON string or key, verbatim or base64-encoded.
fn assert_no_string_dropped(name: &str, body: &[u8], decoded: &Value) {
    let raw = decode_envelope(body).unwrap().raw;
    let mut leaves = Vec::new();
    protobuf_leaves(&raw, &mut leaves);
    let mut strings = BTreeSet::new();
    json_strings(decoded, &mut strings);
    for leaf in leaves {
        let b64 = base64::engine::general_purpose::STANDARD.encode(&leaf);
        let text = String::from_utf8_lossy(&leaf).into_owned();
        assert!(
            strings.contains(&text) || strings.contains(&b64),
            "{name}: wire value {text:?} does not appear in the decoded JSON"
        );
    }
}

macro_rules! against_kubectl_json {
    ($($test:ident => $file:literal,)*) => {$(
        #[test]
        fn $test() {
            let body = include_bytes!(concat!("fixtures/", $file, ".pb"));
            let kubectl: Value =
                serde_json::from_str(include_str!(concat!("fixtures/", $file, ".kubectl.json"))).unwrap();
            let decoded = decode(body).unwrap();
            assert_json_eq($file, &decoded, &normalise_kubectl(kubectl));
            assert_no_string_dropped($file, body, &decoded);
        }
    )*};
}

macro_rules! against_expected_json {
    ($($test:ident => $file:literal,)*) => {$(
        #[test]
        fn $test() {
            let body = include_bytes!(concat!("fixtures/", $file, ".pb"));
            let expected: Value =
                serde_json::from_str(include_str!(concat!("fixtures/", $file, ".expected.json"))).unwrap();
            let decoded = decode(body).unwrap();
            assert_json_eq($file, &decoded, &expected);
            assert_no_string_dropped($file, body, &decoded);
        }
    )*};
}

against_kubectl_json! {
    create_deployment => "deployment",
    create_deployment_multiple_images => "deployment-multi",
    create_configmap => "configmap",
    create_configmap_binary => "configmap-binary",
    create_service_clusterip => "service-clusterip",
    create_service_clusterip_none => "service-clusterip-none",
    create_service_nodeport => "service-nodeport",
    create_service_loadbalancer => "service-loadbalancer",
    create_service_externalname => "service-externalname",
    create_namespace => "namespace",
    create_secret_generic => "secret-generic",
    create_secret_generic_binary => "secret-generic-bin",
    create_secret_tls => "secret-tls",
    create_secret_docker_registry => "secret-docker",
    create_serviceaccount => "serviceaccount",
    create_job => "job",
    create_job_from_cronjob => "job-from-cronjob",
    create_cronjob => "cronjob",
    create_role => "role",
    create_role_subresource => "role-subres",
    create_rolebinding => "rolebinding",
    create_clusterrole => "clusterrole",
    create_clusterrole_aggregation => "clusterrole-agg",
    create_clusterrolebinding => "clusterrolebinding",
    create_pdb_min_available => "pdb",
    create_pdb_max_unavailable_percent => "pdb-pct",
    create_ingress => "ingress",
    create_ingress_default_backend => "ingress-default",
    create_quota => "quota",
    create_priorityclass => "priorityclass",
    create_priorityclass_zero_value => "priorityclass-zero",
    autoscale_deployment => "autoscale",
}

against_expected_json! {
    create_token => "token",
    auth_can_i => "auth-can-i",
    auth_can_i_list => "auth-can-i-list",
    auth_whoami => "auth-whoami",
    debug_node_pod => "debug-node",
    certificate_approve => "certificate-approve",
}

#[test]
fn binary_data_is_base64_of_the_original_bytes() {
    let decoded = decode(include_bytes!("fixtures/configmap-binary.pb")).unwrap();
    let blob = decoded["binaryData"]["blob"].as_str().unwrap();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(blob)
        .unwrap();
    assert_eq!(bytes.len(), 64);
    // Valid UTF-8 files go to `data`, the rest to `binaryData`.
    assert_eq!(decoded["data"]["text"], "hello\nworld\n");
}

#[test]
fn int_or_string_target_ports_keep_their_json_type() {
    let nodeport = decode(include_bytes!("fixtures/service-nodeport.pb")).unwrap();
    assert_eq!(nodeport["spec"]["ports"][0]["targetPort"], "http");
    assert_eq!(nodeport["spec"]["ports"][0]["nodePort"], 30080);
    let clusterip = decode(include_bytes!("fixtures/service-clusterip.pb")).unwrap();
    assert_eq!(clusterip["spec"]["ports"][0]["targetPort"], 8080);
}

#[test]
fn the_string_check_catches_a_dropped_field() {
    // Guard for the guard: removing a field from a decoded object must make
    // `assert_no_string_dropped` fail.
    let body = include_bytes!("fixtures/deployment.pb");
    let mut decoded = decode(body).unwrap();
    decoded["spec"]["template"]["spec"]["containers"][0]
        .as_object_mut()
        .unwrap()
        .remove("image");
    let result =
        std::panic::catch_unwind(|| assert_no_string_dropped("deployment", body, &decoded));
    assert!(
        result.is_err(),
        "dropping spec.template.spec.containers[0].image went unnoticed"
    );
}
