//! JSON Merge Patch (RFC 7386): apply a merge patch, and compute the merge
//! patch between two documents.
//!
//! A merge patch is a partial document: object members present in the patch
//! overwrite the target's, `null` members delete, nested objects merge
//! recursively, and anything that is not an object (arrays included)
//! replaces the target wholesale. It cannot set a member to `null` nor edit
//! arrays element-wise; that is what JSON patch and strategic merge patch are
//! for. Merge patches cannot fail, so this module has no error type.
//!
//! Applying is the `json-patch` crate's `merge`; computing a patch
//! ([`create`], Kubernetes' `CreateMergePatch`) is here because that crate
//! only diffs into RFC 6902 operations.

use serde_json::{Map, Value};

/// Applies the merge `patch` to `target` (RFC 7386 `MergePatch`) and returns
/// the result; neither input is modified.
///
/// Contract: if `patch` is an object, the result is an object — `target`'s
/// members (or none, if `target` is not an object) with each patch member
/// `null` removed and each other patch member merged recursively into the
/// corresponding target member (an absent member merges as if `null`).
/// Otherwise the result is a copy of `patch`. Consequently the result never
/// contains a `null` that came from the patch inside an object.
pub fn apply(target: &Value, patch: &Value) -> Value {
    let mut result = target.clone();
    json_patch::merge(&mut result, patch);
    result
}

/// Computes a merge patch that turns `original` into `modified`.
///
/// Contract: when both are objects the patch is an object holding `null`
/// for each member only `original` has, the member itself for each member
/// only `modified` has, a nested patch for members that are objects on both
/// sides and differ, and the new value for other differing members; equal
/// members are omitted, so equal objects yield `{}`. In every other case the
/// patch is `modified` itself. `apply(original, &create(original,
/// modified)) == modified` whenever `modified` contains no `null` inside an
/// object (merge patches cannot express those). Equality is `serde_json`'s:
/// `1` and `1.0` differ, so such a change is kept in the patch.
pub fn create(original: &Value, modified: &Value) -> Value {
    let (Value::Object(original), Value::Object(modified)) = (original, modified) else {
        return modified.clone();
    };
    let mut patch = Map::new();
    for key in original.keys() {
        if !modified.contains_key(key) {
            patch.insert(key.clone(), Value::Null);
        }
    }
    for (key, new) in modified {
        match original.get(key) {
            Some(old) if old == new => {}
            Some(old @ Value::Object(_)) if new.is_object() => {
                patch.insert(key.clone(), create(old, new));
            }
            _ => {
                patch.insert(key.clone(), new.clone());
            }
        }
    }
    Value::Object(patch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn apply_follows_rfc_7386_examples() {
        let cases = [
            (json!({"a": "b"}), json!({"a": "c"}), json!({"a": "c"})),
            (
                json!({"a": "b"}),
                json!({"b": "c"}),
                json!({"a": "b", "b": "c"}),
            ),
            (json!({"a": "b"}), json!({"a": null}), json!({})),
            (
                json!({"a": "b", "b": "c"}),
                json!({"a": null}),
                json!({"b": "c"}),
            ),
            (json!({"a": ["b"]}), json!({"a": "c"}), json!({"a": "c"})),
            (json!({"a": "c"}), json!({"a": ["b"]}), json!({"a": ["b"]})),
            (
                json!({"a": {"b": "c"}}),
                json!({"a": {"b": "d", "c": null}}),
                json!({"a": {"b": "d"}}),
            ),
            (
                json!({"a": [{"b": "c"}]}),
                json!({"a": [1]}),
                json!({"a": [1]}),
            ),
            (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
            (json!({"a": "b"}), json!(["c"]), json!(["c"])),
            (json!({"a": "foo"}), json!(null), json!(null)),
            (json!({"a": "foo"}), json!("bar"), json!("bar")),
            (
                json!({"e": null}),
                json!({"a": 1}),
                json!({"e": null, "a": 1}),
            ),
            (
                json!([1, 2]),
                json!({"a": "b", "c": null}),
                json!({"a": "b"}),
            ),
            (
                json!({}),
                json!({"a": {"bb": {"ccc": null}}}),
                json!({"a": {"bb": {}}}),
            ),
        ];
        for (target, patch, expected) in cases {
            let before = target.clone();
            assert_eq!(apply(&target, &patch), expected, "{target} + {patch}");
            assert_eq!(target, before, "input must not be modified");
        }
    }

    #[test]
    fn create_produces_minimal_patches() {
        let original = json!({
            "metadata": {"name": "web", "labels": {"app": "web", "old": "x"}},
            "spec": {"replicas": 1, "ports": [80]},
            "status": {"ready": true}
        });
        let modified = json!({
            "metadata": {"name": "web", "labels": {"app": "web", "new": "y"}},
            "spec": {"replicas": 3, "ports": [80, 443]}
        });
        let patch = create(&original, &modified);
        assert_eq!(
            patch,
            json!({
                "metadata": {"labels": {"old": null, "new": "y"}},
                "spec": {"replicas": 3, "ports": [80, 443]},
                "status": null
            })
        );
        assert_eq!(apply(&original, &patch), modified);
        assert_eq!(create(&original, &original), json!({}));
        assert_eq!(
            create(&json!({"a": {"b": 1}}), &json!({"a": 2})),
            json!({"a": 2})
        );
        assert_eq!(
            create(&json!({"a": 2}), &json!({"a": {"b": 1}})),
            json!({"a": {"b": 1}})
        );
        assert_eq!(create(&json!({"a": 1}), &json!([1])), json!([1]));
        assert_eq!(create(&json!("x"), &json!({"a": 1})), json!({"a": 1}));
        assert_eq!(
            create(&json!({"a": 1}), &json!({"a": 1.0})),
            json!({"a": 1.0})
        );
    }

    /// Arbitrary JSON; `nulls` controls whether `null` may appear.
    fn json_value(nulls: bool) -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            any::<bool>().prop_map(Value::from),
            (-5i64..5).prop_map(Value::from),
            "[a-c]{0,2}".prop_map(Value::from),
            Just(if nulls { Value::Null } else { Value::from(0) }),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::from),
                prop::collection::btree_map("[a-d]", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn json_object(nulls: bool) -> impl Strategy<Value = Value> {
        prop::collection::btree_map("[a-d]", json_value(nulls), 0..5)
            .prop_map(|m| Value::Object(m.into_iter().collect()))
    }

    proptest! {
        #[test]
        fn create_then_apply_round_trips(a in json_object(true), b in json_object(false)) {
            let patch = create(&a, &b);
            prop_assert_eq!(apply(&a, &patch), b);
        }

        #[test]
        fn applying_a_patch_twice_is_idempotent(a in json_object(true), p in json_object(true)) {
            let once = apply(&a, &p);
            prop_assert_eq!(apply(&once, &p), once);
        }
    }
}
