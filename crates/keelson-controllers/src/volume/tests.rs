use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use serde_json::{json, Value};

use super::binder::*;
use super::provisioner::*;

fn pv(name: &str, size: &str, extra: Value) -> PersistentVolume {
    let mut v = json!({"metadata": {"name": name}, "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"], "storageClassName": "manual",
        "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": format!("/data/{name}")}}, "status": {"phase": "Available"}});
    merge(&mut v, extra);
    serde_json::from_value(v).unwrap()
}

fn pvc(name: &str, size: &str, extra: Value) -> PersistentVolumeClaim {
    let mut v = json!({"metadata": {"name": name, "namespace": "d", "uid": format!("uid-{name}"), "resourceVersion": "7"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "manual", "resources": {"requests": {"storage": size}}}, "status": {"phase": "Pending"}});
    merge(&mut v, extra);
    serde_json::from_value(v).unwrap()
}

fn merge(a: &mut Value, b: Value) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

fn node(name: &str) -> Node {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}, "annotations": {NODE_LOCAL_PATH_DIR: format!("/nodes/{name}/storage")}}})).unwrap()
}

fn class(mode: &str, provisioner: &str) -> StorageClass {
    serde_json::from_value(json!({"metadata": {"name": "manual"}, "provisioner": provisioner, "reclaimPolicy": "Delete", "volumeBindingMode": mode})).unwrap()
}

fn matched(c: &PersistentVolumeClaim, vols: &[PersistentVolume]) -> Option<String> {
    let refs: Vec<&PersistentVolume> = vols.iter().collect();
    best_match(c, &refs, false, None).and_then(|v| v.metadata.name.clone())
}

#[test]
fn the_smallest_volume_that_fits_is_chosen() {
    let vols = [pv("big", "10Gi", json!({})), pv("small", "1Gi", json!({})), pv("exact", "2Gi", json!({})), pv("tiny", "500Mi", json!({}))];
    let cases = [("1Gi", Some("small")), ("1.5Gi", Some("exact")), ("2Gi", Some("exact")), ("2049Mi", Some("big")), ("11Gi", None), ("100Mi", Some("tiny"))];
    for (size, want) in cases {
        assert_eq!(matched(&pvc("c", size, json!({})), &vols).as_deref(), want, "request {size}");
    }
}

#[test]
fn class_access_modes_mode_and_selector_must_match() {
    let vols = [
        pv("other-class", "1Gi", json!({"spec": {"storageClassName": "fast"}})),
        pv("rox", "1Gi", json!({"spec": {"accessModes": ["ReadOnlyMany"]}})),
        pv("block", "1Gi", json!({"spec": {"volumeMode": "Block"}})),
        pv("labelled", "5Gi", json!({"metadata": {"labels": {"tier": "gold"}}})),
        pv("rwo-rwx", "2Gi", json!({"spec": {"accessModes": ["ReadWriteOnce", "ReadWriteMany"]}})),
    ];
    let cases = [
        (pvc("plain", "1Gi", json!({})), Some("rwo-rwx")),
        (pvc("fast", "1Gi", json!({"spec": {"storageClassName": "fast"}})), Some("other-class")),
        (pvc("no-class", "1Gi", json!({"spec": {"storageClassName": ""}})), None),
        (pvc("rwx", "1Gi", json!({"spec": {"accessModes": ["ReadWriteMany"]}})), Some("rwo-rwx")),
        (pvc("rox", "1Gi", json!({"spec": {"accessModes": ["ReadOnlyMany"]}})), Some("rox")),
        (pvc("block", "1Gi", json!({"spec": {"volumeMode": "Block"}})), Some("block")),
        (pvc("gold", "1Gi", json!({"spec": {"selector": {"matchLabels": {"tier": "gold"}}}})), Some("labelled")),
        (pvc("silver", "1Gi", json!({"spec": {"selector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["silver"]}]}}})), None),
    ];
    for (c, want) in cases {
        assert_eq!(matched(&c, &vols).as_deref(), want, "claim {:?}", c.metadata.name);
    }
}

#[test]
fn pre_binding_wins_and_claimed_volumes_are_skipped() {
    let c = pvc("c", "1Gi", json!({}));
    let mine = pv("mine", "5Gi", json!({"spec": {"claimRef": {"namespace": "d", "name": "c"}}}));
    let theirs = pv("theirs", "1Gi", json!({"spec": {"claimRef": {"namespace": "d", "name": "other", "uid": "uid-other"}}}));
    let free = pv("free", "1Gi", json!({}));
    assert_eq!(matched(&c, &[theirs.clone(), free.clone(), mine.clone()]).as_deref(), Some("mine"), "a volume pre-bound to the claim beats a smaller free one");
    assert_eq!(matched(&c, &[theirs.clone(), free.clone()]).as_deref(), Some("free"), "a volume claimed by another is never taken");
    let old_uid = pv("old", "1Gi", json!({"spec": {"claimRef": {"namespace": "d", "name": "c", "uid": "uid-of-an-earlier-c"}}}));
    assert_eq!(matched(&c, &[old_uid]), None, "a volume bound to an earlier claim of the same name is not this one's");
    let released = pv("released", "1Gi", json!({"status": {"phase": "Released"}}));
    assert_eq!(matched(&c, &[released]), None);

    // A claim naming a volume gets that one, if it fits and is free.
    let named = pvc("c", "1Gi", json!({"spec": {"volumeName": "free"}}));
    let refs = [&free, &theirs];
    assert_eq!(reconcile_claim(&named, &refs, None, None), ClaimAction::Bind { volume: "free".into() });
    let wants_theirs = pvc("c", "1Gi", json!({"spec": {"volumeName": "theirs"}}));
    assert!(matches!(reconcile_claim(&wants_theirs, &refs, None, None), ClaimAction::Pending { reason: "FailedBinding", .. }));
    let too_big = pvc("c", "3Gi", json!({"spec": {"volumeName": "free"}}));
    assert!(matches!(reconcile_claim(&too_big, &refs, None, None), ClaimAction::Pending { reason: "VolumeMismatch", message, .. } if message.contains("too small")));
}

#[test]
fn a_binding_race_leaves_the_loser_to_decide_again() {
    // Claim a took the only volume (its claimRef is written); claim b, deciding on the
    // new state, does not get it; a finishes its side.
    let a = pvc("a", "1Gi", json!({}));
    let b = pvc("b", "1Gi", json!({}));
    let taken = pv("only", "1Gi", json!({"spec": {"claimRef": {"namespace": "d", "name": "a", "uid": "uid-a"}}}));
    let refs = [&taken];
    assert_eq!(reconcile_claim(&a, &refs, None, None), ClaimAction::Bind { volume: "only".into() });
    let manual = class("Immediate", "kubernetes.io/no-provisioner");
    assert!(matches!(reconcile_claim(&b, &refs, Some(&manual), None), ClaimAction::Pending { reason: "ExternalProvisioning", .. }));
    // Both sides written: nothing more to do.
    let bound = pvc("a", "1Gi", json!({"metadata": {"annotations": {BIND_COMPLETED: "yes"}}, "spec": {"volumeName": "only"}, "status": {"phase": "Bound"}}));
    assert_eq!(reconcile_claim(&bound, &refs, None, None), ClaimAction::None);
    // A claim that thinks it is bound to a volume another claim holds is Lost.
    let stale = pvc("b", "1Gi", json!({"metadata": {"annotations": {BIND_COMPLETED: "yes"}}, "spec": {"volumeName": "only"}, "status": {"phase": "Bound"}}));
    assert!(matches!(reconcile_claim(&stale, &refs, None, None), ClaimAction::Lost { .. }));
    assert!(matches!(reconcile_claim(&stale, &[], None, None), ClaimAction::Lost { .. }), "its volume deleted");
}

#[test]
fn wait_for_first_consumer_binds_only_on_the_selected_node() {
    let wffc = class("WaitForFirstConsumer", "kubernetes.io/no-provisioner");
    let c = pvc("c", "1Gi", json!({}));
    let on_n2 = pv("on-n2", "1Gi", json!({"spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n2"]}]}]}}}}));
    let refs = [&on_n2];
    match reconcile_claim(&c, &refs, Some(&wffc), None) {
        ClaimAction::Pending { reason, message, warning } => assert_eq!((reason, message.as_str(), warning), ("WaitForFirstConsumer", WAIT_FOR_FIRST_CONSUMER, false)),
        other => panic!("{other:?}"),
    }
    assert_eq!(reconcile_claim(&c, &refs, Some(&wffc), Some(&node("n2"))), ClaimAction::Bind { volume: "on-n2".into() });
    assert!(matches!(reconcile_claim(&c, &refs, Some(&wffc), Some(&node("n1"))), ClaimAction::Pending { reason: "ExternalProvisioning", .. }));
    let immediate = class("Immediate", "kubernetes.io/no-provisioner");
    assert_eq!(reconcile_claim(&c, &refs, Some(&immediate), None), ClaimAction::Bind { volume: "on-n2".into() }, "Immediate binds at once");
}

#[test]
fn local_path_claims_are_provisioned_once_a_node_is_selected() {
    let local = class("WaitForFirstConsumer", LOCAL_PATH_PROVISIONER);
    let c = pvc("data", "2Gi", json!({}));
    assert!(matches!(reconcile_claim(&c, &[], Some(&local), None), ClaimAction::Pending { reason: "WaitForFirstConsumer", .. }));
    assert_eq!(reconcile_claim(&c, &[], Some(&local), Some(&node("n1"))), ClaimAction::Provision { node: Some("n1".into()) });
    let immediate = class("Immediate", LOCAL_PATH_PROVISIONER);
    assert_eq!(reconcile_claim(&c, &[], Some(&immediate), None), ClaimAction::Provision { node: None });
    assert!(matches!(reconcile_claim(&pvc("x", "1Gi", json!({"spec": {"storageClassName": "gone"}})), &[], None, None), ClaimAction::Pending { reason: "ProvisioningFailed", warning: true, .. }));
    assert!(matches!(reconcile_claim(&pvc("x", "1Gi", json!({"spec": {"storageClassName": ""}})), &[], None, None), ClaimAction::Pending { reason: "FailedBinding", .. }));

    // The provisioned volume: named for the claim, on the node, pre-bound to the claim.
    let made = provision(&c, &local, Some(&node("n1"))).unwrap();
    assert_eq!(made.metadata.name.as_deref(), Some("pvc-uid-data"));
    assert!(provisioned_here(&made));
    let spec = made.spec.clone().unwrap();
    assert_eq!(spec.host_path.unwrap().path, "/nodes/n1/storage/pvc-uid-data_d_data");
    assert_eq!(spec.capacity.unwrap()["storage"].0, "2Gi");
    assert_eq!(spec.persistent_volume_reclaim_policy.as_deref(), Some("Delete"));
    assert_eq!(spec.storage_class_name.as_deref(), Some("manual"));
    let r = spec.claim_ref.unwrap();
    assert_eq!((r.namespace.as_deref(), r.name.as_deref(), r.uid.as_deref()), (Some("d"), Some("data"), Some("uid-data")));
    assert!(reachable_from(&made, &node("n1")) && !reachable_from(&made, &node("n2")));
    // Once it exists, the claim binds to it instead of provisioning again.
    assert_eq!(reconcile_claim(&c, &[&made], Some(&local), Some(&node("n1"))), ClaimAction::Bind { volume: "pvc-uid-data".into() });

    assert_eq!(provision(&c, &local, None).unwrap_err(), ProvisionError::NoNode);
    let rwx = pvc("shared", "1Gi", json!({"spec": {"accessModes": ["ReadWriteMany"]}}));
    assert_eq!(provision(&rwx, &local, Some(&node("n1"))).unwrap_err(), ProvisionError::AccessMode);
    let bare: Node = serde_json::from_value(json!({"metadata": {"name": "n9"}})).unwrap();
    assert_eq!(directory(&c, &node_dir(Some(&bare))), format!("{DEFAULT_LOCAL_PATH_DIR}/pvc-uid-data_d_data"));
}

#[test]
fn volumes_are_released_then_reclaimed() {
    let c = pvc("data", "1Gi", json!({"spec": {"volumeName": "pvc-uid-data"}}));
    let local = class("WaitForFirstConsumer", LOCAL_PATH_PROVISIONER);
    let made = provision(&c, &local, Some(&node("n1"))).unwrap();
    let with_phase = |v: &PersistentVolume, p: &str| {
        let mut v = v.clone();
        v.status = Some(k8s_openapi::api::core::v1::PersistentVolumeStatus { phase: Some(p.into()), ..Default::default() });
        v
    };
    assert_eq!(reconcile_volume(&with_phase(&made, "Pending"), Some(&c)), VolumeAction::Phase { phase: "Bound", message: None });
    assert_eq!(reconcile_volume(&with_phase(&made, "Bound"), Some(&c)), VolumeAction::None);
    let unbound = pvc("data", "1Gi", json!({}));
    assert_eq!(reconcile_volume(&with_phase(&made, "Pending"), Some(&unbound)), VolumeAction::SyncClaim { namespace: "d".into(), name: "data".into() });
    // Delete: Released, then deleted.
    assert_eq!(reconcile_volume(&with_phase(&made, "Bound"), None), VolumeAction::Phase { phase: "Released", message: None });
    assert_eq!(reconcile_volume(&with_phase(&made, "Released"), None), VolumeAction::Delete);
    let newer = pvc("data", "1Gi", json!({"metadata": {"uid": "uid-second"}}));
    assert_eq!(reconcile_volume(&with_phase(&made, "Bound"), Some(&newer)), VolumeAction::Phase { phase: "Released", message: None }, "a new claim of the same name is another claim");
    // Retain: Released and kept.
    let mut kept = with_phase(&made, "Bound");
    kept.spec.as_mut().unwrap().persistent_volume_reclaim_policy = Some("Retain".into());
    assert_eq!(reconcile_volume(&kept, None), VolumeAction::Phase { phase: "Released", message: None });
    assert_eq!(reconcile_volume(&with_phase(&kept, "Released"), None), VolumeAction::None);
    // Delete on a volume no provisioner here made: Failed, as Kubernetes without a deleter.
    let static_pv = pv("static", "1Gi", json!({"spec": {"persistentVolumeReclaimPolicy": "Delete", "claimRef": {"namespace": "d", "name": "gone", "uid": "uid-gone"}}, "status": {"phase": "Bound"}}));
    assert!(matches!(reconcile_volume(&static_pv, None), VolumeAction::Phase { phase: "Failed", .. }));
    // Unclaimed and user-pre-bound volumes are Available.
    assert_eq!(reconcile_volume(&pv("free", "1Gi", json!({"status": {"phase": "Pending"}})), None), VolumeAction::Phase { phase: "Available", message: None });
    assert_eq!(reconcile_volume(&pv("pre", "1Gi", json!({"spec": {"claimRef": {"namespace": "d", "name": "later"}}})), None), VolumeAction::None);
}

#[test]
fn the_default_class_is_local_path() {
    let sc = default_class();
    assert_eq!(sc.metadata.name.as_deref(), Some(LOCAL_PATH_CLASS));
    assert_eq!(sc.metadata.annotations.unwrap()["storageclass.kubernetes.io/is-default-class"], "true");
    assert_eq!((sc.provisioner.as_str(), sc.volume_binding_mode.as_deref(), sc.reclaim_policy.as_deref()), (LOCAL_PATH_PROVISIONER, Some("WaitForFirstConsumer"), Some("Delete")));
}

#[test]
fn a_claim_made_before_the_default_class_gets_it_later() {
    let default = |name: &str, created: &str| -> StorageClass {
        serde_json::from_value(json!({"metadata": {"name": name, "creationTimestamp": created, "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}}, "provisioner": "p"})).unwrap()
    };
    let plain: StorageClass = serde_json::from_value(json!({"metadata": {"name": "plain"}, "provisioner": "p"})).unwrap();
    let (old, new) = (default("old", "2026-01-01T00:00:00Z"), default("new", "2026-02-01T00:00:00Z"));
    let classes = [&plain, &old, &new];
    let mut none = pvc("c", "1Gi", json!({}));
    none.spec.as_mut().unwrap().storage_class_name = None;
    assert_eq!(retroactive_default_class(&none, &classes).as_deref(), Some("new"));
    assert_eq!(retroactive_default_class(&none, &[&plain]), None, "no default class yet");
    assert_eq!(retroactive_default_class(&pvc("c", "1Gi", json!({"spec": {"storageClassName": ""}})), &classes), None, "\"\" asks for no class");
    assert_eq!(retroactive_default_class(&pvc("c", "1Gi", json!({})), &classes), None, "it names one");
    let mut bound = none.clone();
    bound.spec.as_mut().unwrap().volume_name = Some("pv".into());
    assert_eq!(retroactive_default_class(&bound, &classes), None, "a bound claim keeps what it has");
}
