//! Kubernetes protobuf request bodies (`application/vnd.kubernetes.protobuf`): the
//! `k8s\0` envelope, and the message of every supported kind (the first byte picks the
//! kind, the rest is its message). Never a panic; what decodes is a JSON object naming
//! its apiVersion and kind.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(value) = keelson_kube_protobuf::decode(data) {
        assert!(value.is_object(), "a decoded protobuf body is an object, not {value}");
        serde_json::to_vec(&value).expect("a decoded body encodes");
    }
    let kinds: Vec<_> = keelson_kube_protobuf::supported_kinds().collect();
    let Some((&pick, raw)) = data.split_first() else { return };
    let (api_version, kind) = kinds[pick as usize % kinds.len()];
    if let Ok(value) = keelson_kube_protobuf::decode_object(api_version, kind, raw) {
        assert_eq!(value["apiVersion"], api_version);
        assert_eq!(value["kind"], kind);
    }
});
