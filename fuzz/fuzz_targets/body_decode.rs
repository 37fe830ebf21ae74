//! Request bodies as the API server decodes them: JSON, YAML, and the Kubernetes
//! protobuf envelope. Never a panic or a stack overflow; a decoded body is never nested
//! deeper than the bound, and re-encodes to JSON that decodes again.
#![no_main]

use keelson_apimachinery::body::{depth_exceeds, parse_json, parse_yaml, MAX_DEPTH};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for decoded in [parse_json(data), parse_yaml(data)] {
        let Ok(value) = decoded else { continue };
        assert!(!depth_exceeds(&value, MAX_DEPTH), "a body deeper than {MAX_DEPTH} levels was accepted");
        let again = serde_json::to_vec(&value).expect("a decoded body encodes");
        parse_json(&again).expect("a decoded body, encoded as JSON, decodes again");
    }
});
