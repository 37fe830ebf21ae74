//! Directives, error cases and properties.

use proptest::prelude::*;
use serde_json::{json, Map, Value};

use super::{apply, builtin_schema, PatchSchema, StrategicMergeError as E};

fn pod_schema() -> PatchSchema {
    builtin_schema("v1", "Pod")
}

fn containers(names: &[&str]) -> Value {
    Value::Array(
        names
            .iter()
            .map(|n| json!({"name": n, "image": format!("{n}:1")}))
            .collect(),
    )
}

fn container_names(v: &Value) -> Vec<String> {
    v["spec"]["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .map(|c| c["name"].as_str().expect("name").to_owned())
        .collect()
}

fn err(original: Value, patch: Value) -> E {
    apply(&original, &patch, &pod_schema()).expect_err("patch must be rejected")
}

#[test]
fn set_element_order_reorders_containers() {
    let original = json!({"spec": {"containers": containers(&["a", "b", "c"])}});
    let patch = json!({"spec": {
        "$setElementOrder/containers": [{"name": "c"}, {"name": "a"}, {"name": "b"}],
        "containers": [{"name": "a", "image": "a:2"}]
    }});
    let out = apply(&original, &patch, &pod_schema()).unwrap();
    assert_eq!(container_names(&out), ["c", "a", "b"]);
    assert_eq!(out["spec"]["containers"][1]["image"], "a:2");
    assert_eq!(out["spec"]["containers"][2]["image"], "b:1");
}

#[test]
fn set_element_order_keeps_server_only_items_in_place() {
    // `s` was injected server-side; the client only knows a, b, new.
    let original = json!({"spec": {"containers": containers(&["a", "s", "b"])}});
    let patch = json!({"spec": {
        "$setElementOrder/containers": [{"name": "b"}, {"name": "a"}, {"name": "new"}],
        "containers": [{"name": "new", "image": "n:1"}]
    }});
    let out = apply(&original, &patch, &pod_schema()).unwrap();
    // b, a, new keep the client's order; `s` goes before the first ordered
    // item that followed it in the original list (`b`), as Kubernetes does.
    assert_eq!(container_names(&out), ["s", "b", "a", "new"]);
}

#[test]
fn set_element_order_without_patch_list() {
    let original = json!({"metadata": {"finalizers": ["a", "b", "c"]},
                          "spec": {"containers": containers(&["x", "y"])}});
    let patch = json!({
        "metadata": {"$setElementOrder/finalizers": ["c", "a", "b"]},
        "spec": {"$setElementOrder/containers": [{"name": "y"}, {"name": "x"}]}
    });
    let out = apply(&original, &patch, &pod_schema()).unwrap();
    assert_eq!(out["metadata"]["finalizers"], json!(["c", "a", "b"]));
    assert_eq!(container_names(&out), ["y", "x"]);
    assert!(out["metadata"]
        .as_object()
        .unwrap()
        .keys()
        .all(|k| !k.starts_with('$')));
}

#[test]
fn set_element_order_on_atomic_list_is_ignored() {
    let original = json!({"spec": {"tolerations": [{"key": "a"}, {"key": "b"}]}});
    let patch = json!({"spec": {"$setElementOrder/tolerations": [{"key": "b"}]}});
    let out = apply(&original, &patch, &pod_schema()).unwrap();
    assert_eq!(out, original);
}

#[test]
fn patch_list_order_wins_without_directive() {
    let original = json!({"spec": {"containers": containers(&["a", "b"])}});
    let patch = json!({"spec": {"containers": [{"name": "b"}, {"name": "a"}]}});
    let out = apply(&original, &patch, &pod_schema()).unwrap();
    assert_eq!(container_names(&out), ["b", "a"]);
}

#[test]
fn delete_from_primitive_list_on_finalizers() {
    let original = json!({"metadata": {"finalizers": ["a", "b", "c"]}});
    let patch = json!({"metadata": {
        "$deleteFromPrimitiveList/finalizers": ["b"],
        "finalizers": ["d"]
    }});
    let out = apply(&original, &patch, &pod_schema()).unwrap();
    // No `$setElementOrder`: the patch's new value comes first.
    assert_eq!(out, json!({"metadata": {"finalizers": ["d", "a", "c"]}}));
    let mut ordered = patch.clone();
    ordered["metadata"]["$setElementOrder/finalizers"] = json!(["a", "c", "d"]);
    let out = apply(&original, &ordered, &pod_schema()).unwrap();
    assert_eq!(out, json!({"metadata": {"finalizers": ["a", "c", "d"]}}));
    // Deleting from a list that is not there is a no-op.
    let out = apply(&json!({}), &patch, &pod_schema()).unwrap();
    assert_eq!(out, json!({"metadata": {"finalizers": ["d"]}}));
}

#[test]
fn retain_keys_drops_unlisted_keys() {
    let original = json!({"spec": {"strategy": {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1}
    }}});
    let patch = json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}});
    let out = apply(&original, &patch, &builtin_schema("apps/v1", "Deployment")).unwrap();
    assert_eq!(out, json!({"spec": {"strategy": {"type": "Recreate"}}}));
}

#[test]
fn retain_keys_rejects_patch_field_not_listed() {
    let patch = json!({"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": {}}}});
    assert_eq!(
        err(json!({}), patch),
        E::FieldNotInRetainKeys {
            path: "spec.strategy".into(),
            field: "rollingUpdate".into()
        }
    );
    let bad = err(json!({}), json!({"spec": {"$retainKeys": [1]}}));
    assert!(matches!(bad, E::RetainKeysInvalid { .. }), "{bad:?}");
    let bad = err(json!({}), json!({"spec": {"$retainKeys": "type"}}));
    assert!(matches!(bad, E::RetainKeysInvalid { .. }), "{bad:?}");
}

#[test]
fn null_deletes_keys() {
    let original = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"x": {"y": 1}}});
    let patch =
        json!({"metadata": {"labels": {"a": null, "zz": null}}, "spec": null, "status": null});
    let out = apply(&original, &patch, &PatchSchema::new()).unwrap();
    assert_eq!(out, json!({"metadata": {"labels": {"b": "2"}}}));
}

#[test]
fn patch_replace_on_list() {
    let original = json!({"spec": {"containers": containers(&["a", "b"])}});
    let patch =
        json!({"spec": {"containers": [{"$patch": "replace"}, {"name": "c", "image": "c:1"}]}});
    let out = apply(&original, &patch, &pod_schema()).unwrap();
    assert_eq!(out["spec"]["containers"], containers(&["c"]));
    let original = json!({"metadata": {"finalizers": ["a", "b"]}});
    let patch = json!({"metadata": {"finalizers": ["c", {"$patch": "replace"}]}});
    let out = apply(&original, &patch, &pod_schema()).unwrap();
    assert_eq!(out["metadata"]["finalizers"], json!(["c"]));
}

#[test]
fn patch_replace_and_delete_on_maps() {
    let original =
        json!({"spec": {"nodeSelector": {"a": "1", "b": "2"}, "affinity": {"x": 1}, "k": 1}});
    let patch = json!({"spec": {
        "nodeSelector": {"$patch": "replace", "c": "3", "d": null},
        "affinity": {"$patch": "delete"},
        "securityContext": {"$patch": "delete"}
    }});
    let out = apply(&original, &patch, &pod_schema()).unwrap();
    assert_eq!(out, json!({"spec": {"nodeSelector": {"c": "3"}, "k": 1}}));
    let out = apply(&original, &json!({"$patch": "delete"}), &pod_schema()).unwrap();
    assert_eq!(out, json!({}));
    let out = apply(
        &original,
        &json!({"$patch": "merge", "k": 2}),
        &PatchSchema::new(),
    )
    .unwrap();
    assert_eq!(out["k"], 2);
    assert_eq!(out["spec"]["k"], 1);
}

#[test]
fn directives_in_new_items_do_not_leak() {
    let original = json!({"spec": {"containers": containers(&["a"])}});
    let patch = json!({"spec": {"containers": [{
        "name": "b",
        "image": "b:1",
        "resources": null,
        "$setElementOrder/env": [{"name": "Y"}, {"name": "X"}],
        "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}],
        "securityContext": {"$patch": "replace", "runAsUser": 1}
    }]}});
    let out = apply(&original, &patch, &pod_schema()).unwrap();
    assert_eq!(
        out["spec"]["containers"][0],
        json!({
            "name": "b", "image": "b:1",
            "env": [{"name": "Y", "value": "2"}, {"name": "X", "value": "1"}],
            "securityContext": {"runAsUser": 1}
        })
    );
}

#[test]
fn dollar_fields_that_are_not_directives_are_data() {
    let original = json!({"spec": {"schema": {"$ref": "#/a"}}});
    let patch = json!({"spec": {"schema": {"$ref": "#/b", "$schema": "s"}}});
    let out = apply(&original, &patch, &PatchSchema::new()).unwrap();
    assert_eq!(
        out,
        json!({"spec": {"schema": {"$ref": "#/b", "$schema": "s"}}})
    );
}

#[test]
fn type_changes_take_the_patch_value() {
    let original = json!({"a": {"b": 1}, "c": [1], "d": "s"});
    let patch = json!({"a": [1, 2], "c": {"x": null, "y": 1}, "d": {"e": true}});
    let out = apply(&original, &patch, &PatchSchema::new()).unwrap();
    assert_eq!(out, json!({"a": [1, 2], "c": {"y": 1}, "d": {"e": true}}));
}

#[test]
fn errors_for_malformed_patches() {
    let pod = json!({"spec": {"containers": containers(&["a"])}});
    assert_eq!(
        apply(&pod, &json!([1]), &pod_schema()),
        Err(E::PatchNotObject { found: "list" })
    );
    assert_eq!(
        err(pod.clone(), json!({"spec": {"$patch": "explode"}})),
        E::UnknownPatchDirective {
            path: "spec".into(),
            value: "\"explode\"".into()
        }
    );
    let e = err(
        pod.clone(),
        json!({"spec": {"containers": [{"$patch": 3, "name": "a"}]}}),
    );
    assert!(matches!(e, E::UnknownPatchDirective { .. }), "{e:?}");
    assert_eq!(
        err(
            pod.clone(),
            json!({"spec": {"containers": [{"image": "x"}]}})
        ),
        E::MissingMergeKey {
            path: "spec.containers".into(),
            key: "name".into(),
            item: r#"{"image":"x"}"#.into()
        }
    );
    let e = err(
        pod.clone(),
        json!({"spec": {"containers": [{"$patch": "delete"}]}}),
    );
    assert!(matches!(e, E::MissingMergeKey { .. }), "{e:?}");
    let e = err(pod.clone(), json!({"spec": {"containers": ["a"]}}));
    assert!(matches!(e, E::ListItemNotObject { .. }), "{e:?}");
    let e = err(
        pod.clone(),
        json!({"spec": {"containers": [{"$patch": "merge"}]}}),
    );
    assert!(matches!(e, E::UnsupportedListDirective { .. }), "{e:?}");
    let e = err(
        pod.clone(),
        json!({"metadata": {"finalizers": [{"$patch": "delete"}]}}),
    );
    assert!(matches!(e, E::UnsupportedListDirective { .. }), "{e:?}");
    assert_eq!(
        err(
            pod.clone(),
            json!({"spec": {"$setElementOrder/containers": {"name": "a"}}})
        ),
        E::SetElementOrderNotList {
            path: "spec".into(),
            field: "containers".into(),
            found: "object"
        }
    );
    let e = err(
        pod.clone(),
        json!({"spec": {"$setElementOrder/containers": [{"image": "x"}]}}),
    );
    assert!(matches!(e, E::MissingMergeKey { .. }), "{e:?}");
    let e = err(
        pod.clone(),
        json!({"metadata": {"$deleteFromPrimitiveList/finalizers": "a"}}),
    );
    assert!(
        matches!(e, E::DeleteFromPrimitiveListInvalid { .. }),
        "{e:?}"
    );
    let e = err(
        pod,
        json!({"metadata": {"$deleteFromPrimitiveList/finalizers": [{"a": 1}]}}),
    );
    assert!(
        matches!(e, E::DeleteFromPrimitiveListInvalid { .. }),
        "{e:?}"
    );
}

#[test]
fn error_messages_are_readable() {
    let e = err(json!({}), json!({"$patch": "nope"}));
    assert_eq!(
        e.to_string(),
        "(root): unknown $patch directive value \"nope\" (expected \"replace\", \"delete\" or \"merge\")"
    );
    let e = err(
        json!({"spec": {"containers": []}}),
        json!({"spec": {"containers": [{}]}}),
    );
    assert_eq!(
        e.to_string(),
        "spec.containers: list item {} has no merge key \"name\""
    );
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-5i64..5).prop_map(Value::from),
        "[a-c]{0,2}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-d]", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn arb_object() -> impl Strategy<Value = Value> {
    prop::collection::btree_map("[a-d]", arb_json(), 0..4)
        .prop_map(|m| Value::Object(m.into_iter().collect()))
}

/// A keyed list of items `{"name": .., "v": ..}` at `items`.
fn arb_keyed() -> impl Strategy<Value = Value> {
    prop::collection::vec(("[a-e]", arb_json()), 0..5).prop_map(|items| {
        let list: Vec<Value> = items
            .into_iter()
            .map(|(n, v)| json!({"name": n, "v": v}))
            .collect();
        json!({"items": list})
    })
}

proptest! {
    #[test]
    fn empty_patch_is_identity(original in arb_object()) {
        prop_assert_eq!(apply(&original, &json!({}), &PatchSchema::new()).unwrap(), original);
    }

    #[test]
    fn applying_twice_changes_nothing(original in arb_object(), patch in arb_object()) {
        let once = apply(&original, &patch, &PatchSchema::new()).unwrap();
        let twice = apply(&once, &patch, &PatchSchema::new()).unwrap();
        prop_assert_eq!(once, twice);
    }

    #[test]
    fn keyed_merge_keeps_every_name_once(original in arb_keyed(), patch in arb_keyed()) {
        let schema = PatchSchema::new().merge_by_key("items", "name");
        let out = apply(&original, &patch, &schema).unwrap();
        let mut expected: Vec<&str> = original["items"].as_array().unwrap().iter()
            .chain(patch["items"].as_array().unwrap())
            .map(|i| i["name"].as_str().unwrap())
            .collect();
        expected.sort_unstable();
        expected.dedup();
        let mut got: Vec<&str> = out["items"].as_array().unwrap().iter()
            .map(|i| i["name"].as_str().unwrap())
            .collect();
        got.sort_unstable();
        // Original names are distinct-or-not; merged output has each patch name
        // once and keeps original duplicates, so compare the sets.
        got.dedup();
        prop_assert_eq!(got, expected);
        let again = apply(&out, &patch, &schema).unwrap();
        prop_assert_eq!(again, out);
    }
}
