//! The three PATCH kinds over arbitrary documents: JSON patch, JSON merge patch, and
//! strategic merge patch with the built-in schemas of Pods and Deployments. The input is
//! a selector byte and a JSON array `[document, patch]`. Never a panic; a merge patch
//! computed between two null-free objects turns the first into the second.
#![no_main]

use keelson_apimachinery::patch::{json_patch, merge_patch, strategic};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn has_null(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(items) => items.iter().any(has_null),
        Value::Object(map) => map.values().any(has_null),
        _ => false,
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else { return };
    let Ok(Value::Array(pair)) = keelson_apimachinery::body::parse_json(rest) else { return };
    let [doc, patch] = pair.as_slice() else { return };
    match which % 4 {
        0 => {
            let _ = json_patch::apply(doc, patch);
        }
        1 => {
            let _ = merge_patch::apply(doc, patch);
            if doc.is_object() && patch.is_object() && !has_null(patch) {
                let diff = merge_patch::create(doc, patch);
                assert_eq!(&merge_patch::apply(doc, &diff), patch, "apply(a, create(a, b)) != b");
            }
        }
        2 => {
            let _ = strategic::apply(doc, patch, &strategic::builtin_schema("v1", "Pod"));
        }
        _ => {
            let _ = strategic::apply(doc, patch, &strategic::builtin_schema("apps/v1", "Deployment"));
        }
    }
});
