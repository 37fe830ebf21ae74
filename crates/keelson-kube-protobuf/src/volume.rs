//! `k8s.io/api/core/v1` volume types: `Volume` with its in-tree sources
//! (`hostPath`, `emptyDir`, `secret`, `configMap`, `persistentVolumeClaim`,
//! `projected`, `downwardAPI`, `nfs`, `csi`, `ephemeral`, `image`) and
//! `PersistentVolumeClaim`/`PersistentVolumeClaimSpec`.
//!
//! The deprecated cloud and legacy network volume sources (`gcePersistentDisk`,
//! `awsElasticBlockStore`, `gitRepo`, `iscsi`, `rbd`, `cephfs`, …) are not
//! translated: a volume using one fails with
//! [`crate::json::ConvertError::UnsupportedField`] rather than being dropped.
//! This module adds no error type of its own.

use k8s_pb::api::core::v1 as core;
use serde_json::Value;

use crate::container::{
    local_object_reference_opt, object_field_selector, resource_field_selector,
};
use crate::json::{reject_if, Obj, Result};
use crate::meta::{label_selector, object_meta};

/// `Volume`: `name` plus the inlined `VolumeSource`.
pub fn volume(v: &core::Volume) -> Result<Value> {
    let mut o = Obj::new();
    o.string_kept("name", &v.name);
    if let Some(src) = &v.volume_source {
        o.inline(volume_source(src)?);
    }
    Ok(o.build())
}

/// Names of the `VolumeSource` members that are not translated.
fn unsupported_source(s: &core::VolumeSource) -> Option<&'static str> {
    let legacy = [
        (s.gce_persistent_disk.is_some(), "gcePersistentDisk"),
        (s.aws_elastic_block_store.is_some(), "awsElasticBlockStore"),
        (s.git_repo.is_some(), "gitRepo"),
        (s.iscsi.is_some(), "iscsi"),
        (s.glusterfs.is_some(), "glusterfs"),
        (s.rbd.is_some(), "rbd"),
        (s.flex_volume.is_some(), "flexVolume"),
        (s.cinder.is_some(), "cinder"),
        (s.cephfs.is_some(), "cephfs"),
        (s.flocker.is_some(), "flocker"),
        (s.fc.is_some(), "fc"),
        (s.azure_file.is_some(), "azureFile"),
        (s.vsphere_volume.is_some(), "vsphereVolume"),
        (s.quobyte.is_some(), "quobyte"),
        (s.azure_disk.is_some(), "azureDisk"),
        (s.photon_persistent_disk.is_some(), "photonPersistentDisk"),
        (s.portworx_volume.is_some(), "portworxVolume"),
        (s.scale_io.is_some(), "scaleIO"),
        (s.storageos.is_some(), "storageos"),
    ];
    legacy
        .into_iter()
        .find(|(present, _)| *present)
        .map(|(_, name)| name)
}

/// `VolumeSource` as the keys it contributes to its `Volume`.
pub fn volume_source(s: &core::VolumeSource) -> Result<Value> {
    if let Some(name) = unsupported_source(s) {
        reject_if(true, &format!("spec.volumes[].{name}"))?;
    }
    let mut o = Obj::new();
    o.message("hostPath", &s.host_path, |h| {
        Ok(Obj::new()
            .string_kept("path", &h.path)
            .string_kept("type", &h.r#type)
            .build())
    })?;
    o.message("emptyDir", &s.empty_dir, |e| {
        Ok(Obj::new()
            .string("medium", &e.medium)
            .quantity("sizeLimit", &e.size_limit)
            .build())
    })?;
    o.message("secret", &s.secret, |v| {
        let mut o = Obj::new();
        o.string("secretName", &v.secret_name);
        o.messages("items", &v.items, key_to_path)?;
        Ok(o.int_kept("defaultMode", v.default_mode)
            .boolean_kept("optional", v.optional)
            .build())
    })?;
    o.message("nfs", &s.nfs, |n| {
        Ok(Obj::new()
            .string_kept("server", &n.server)
            .string_kept("path", &n.path)
            .boolean("readOnly", n.read_only)
            .build())
    })?;
    o.message("persistentVolumeClaim", &s.persistent_volume_claim, |p| {
        Ok(Obj::new()
            .string_kept("claimName", &p.claim_name)
            .boolean("readOnly", p.read_only)
            .build())
    })?;
    o.message("downwardAPI", &s.downward_api, |d| {
        let mut o = Obj::new();
        o.messages("items", &d.items, downward_api_file)?;
        Ok(o.int_kept("defaultMode", d.default_mode).build())
    })?;
    o.message("configMap", &s.config_map, |c| {
        let mut o = Obj::new();
        o.inline(local_object_reference_opt(&c.local_object_reference));
        o.messages("items", &c.items, key_to_path)?;
        Ok(o.int_kept("defaultMode", c.default_mode)
            .boolean_kept("optional", c.optional)
            .build())
    })?;
    o.message("projected", &s.projected, |p| {
        let mut o = Obj::new();
        o.messages("sources", &p.sources, volume_projection)?;
        Ok(o.int_kept("defaultMode", p.default_mode).build())
    })?;
    o.message("csi", &s.csi, |c| {
        let mut o = Obj::new();
        o.string_kept("driver", &c.driver)
            .boolean_kept("readOnly", c.read_only)
            .string_kept("fsType", &c.fs_type)
            .string_map("volumeAttributes", &c.volume_attributes);
        o.message("nodePublishSecretRef", &c.node_publish_secret_ref, |r| {
            Ok(Obj::new().string("name", &r.name).build())
        })?;
        Ok(o.build())
    })?;
    o.message("ephemeral", &s.ephemeral, |e| {
        let mut o = Obj::new();
        o.message("volumeClaimTemplate", &e.volume_claim_template, |t| {
            let mut o = Obj::new();
            o.message("metadata", &t.metadata, object_meta)?;
            o.message("spec", &t.spec, persistent_volume_claim_spec)?;
            Ok(o.build())
        })?;
        Ok(o.build())
    })?;
    o.message("image", &s.image, |i| {
        Ok(Obj::new()
            .string("reference", &i.reference)
            .string("pullPolicy", &i.pull_policy)
            .build())
    })?;
    Ok(o.build())
}

fn key_to_path(k: &core::KeyToPath) -> Result<Value> {
    Ok(Obj::new()
        .string_kept("key", &k.key)
        .string_kept("path", &k.path)
        .int_kept("mode", k.mode)
        .build())
}

fn downward_api_file(f: &core::DownwardAPIVolumeFile) -> Result<Value> {
    let mut o = Obj::new();
    o.string_kept("path", &f.path);
    o.message("fieldRef", &f.field_ref, object_field_selector)?;
    o.message(
        "resourceFieldRef",
        &f.resource_field_ref,
        resource_field_selector,
    )?;
    Ok(o.int_kept("mode", f.mode).build())
}

fn volume_projection(p: &core::VolumeProjection) -> Result<Value> {
    let mut o = Obj::new();
    o.message("secret", &p.secret, |s| {
        let mut o = Obj::new();
        o.inline(local_object_reference_opt(&s.local_object_reference));
        o.messages("items", &s.items, key_to_path)?;
        Ok(o.boolean_kept("optional", s.optional).build())
    })?;
    o.message("downwardAPI", &p.downward_api, |d| {
        let mut o = Obj::new();
        o.messages("items", &d.items, downward_api_file)?;
        Ok(o.build())
    })?;
    o.message("configMap", &p.config_map, |c| {
        let mut o = Obj::new();
        o.inline(local_object_reference_opt(&c.local_object_reference));
        o.messages("items", &c.items, key_to_path)?;
        Ok(o.boolean_kept("optional", c.optional).build())
    })?;
    o.message("serviceAccountToken", &p.service_account_token, |t| {
        Ok(Obj::new()
            .string("audience", &t.audience)
            .int_kept("expirationSeconds", t.expiration_seconds)
            .string_kept("path", &t.path)
            .build())
    })?;
    o.message("clusterTrustBundle", &p.cluster_trust_bundle, |b| {
        let mut o = Obj::new();
        o.string_kept("name", &b.name)
            .string_kept("signerName", &b.signer_name);
        o.message("labelSelector", &b.label_selector, label_selector)?;
        Ok(o.boolean_kept("optional", b.optional)
            .string_kept("path", &b.path)
            .build())
    })?;
    o.message("podCertificate", &p.pod_certificate, |c| {
        Ok(Obj::new()
            .string("signerName", &c.signer_name)
            .string("keyType", &c.key_type)
            .int_kept("maxExpirationSeconds", c.max_expiration_seconds)
            .string("credentialBundlePath", &c.credential_bundle_path)
            .string("keyPath", &c.key_path)
            .string("certificateChainPath", &c.certificate_chain_path)
            .string_map("userAnnotations", &c.user_annotations)
            .build())
    })?;
    Ok(o.build())
}

/// `PersistentVolumeClaimSpec`.
pub fn persistent_volume_claim_spec(s: &core::PersistentVolumeClaimSpec) -> Result<Value> {
    let mut o = Obj::new();
    o.strings("accessModes", &s.access_modes);
    o.message("selector", &s.selector, label_selector)?;
    o.message("resources", &s.resources, |r| {
        Ok(Obj::new()
            .quantities("limits", &r.limits)
            .quantities("requests", &r.requests)
            .build())
    })?;
    o.string("volumeName", &s.volume_name)
        .string_kept("storageClassName", &s.storage_class_name)
        .string_kept("volumeMode", &s.volume_mode);
    o.message("dataSource", &s.data_source, |r| {
        Ok(Obj::new()
            .string_kept("apiGroup", &r.api_group)
            .string_kept("kind", &r.kind)
            .string_kept("name", &r.name)
            .build())
    })?;
    o.message("dataSourceRef", &s.data_source_ref, |r| {
        Ok(Obj::new()
            .string_kept("apiGroup", &r.api_group)
            .string_kept("kind", &r.kind)
            .string_kept("name", &r.name)
            .string_kept("namespace", &r.namespace)
            .build())
    })?;
    o.string_kept("volumeAttributesClassName", &s.volume_attributes_class_name);
    Ok(o.build())
}

/// `PersistentVolumeClaim` body (`metadata`, `spec`; `status` is not
/// translated), as found in StatefulSet `volumeClaimTemplates`.
pub fn persistent_volume_claim(p: &core::PersistentVolumeClaim) -> Result<Value> {
    let mut o = Obj::new();
    o.message("metadata", &p.metadata, object_meta)?;
    o.message("spec", &p.spec, persistent_volume_claim_spec)?;
    Ok(o.build())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::ConvertError;
    use serde_json::json;

    fn s(v: &str) -> Option<String> {
        Some(v.to_owned())
    }

    fn named(name: &str, src: core::VolumeSource) -> core::Volume {
        core::Volume {
            name: s(name),
            volume_source: Some(src),
        }
    }

    #[test]
    fn common_sources() {
        let vols = [
            named(
                "tmp",
                core::VolumeSource {
                    empty_dir: Some(core::EmptyDirVolumeSource {
                        medium: s(""),
                        size_limit: None,
                    }),
                    ..Default::default()
                },
            ),
            named(
                "host",
                core::VolumeSource {
                    host_path: Some(core::HostPathVolumeSource {
                        path: s("/var/log"),
                        r#type: s(""),
                    }),
                    ..Default::default()
                },
            ),
            named(
                "cfg",
                core::VolumeSource {
                    config_map: Some(core::ConfigMapVolumeSource {
                        local_object_reference: Some(core::LocalObjectReference { name: s("app") }),
                        items: vec![core::KeyToPath {
                            key: s("a"),
                            path: s("a.txt"),
                            mode: None,
                        }],
                        default_mode: Some(0o644),
                        optional: None,
                    }),
                    ..Default::default()
                },
            ),
            named(
                "sec",
                core::VolumeSource {
                    secret: Some(core::SecretVolumeSource {
                        secret_name: s("tls"),
                        optional: Some(false),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ),
            named(
                "data",
                core::VolumeSource {
                    persistent_volume_claim: Some(core::PersistentVolumeClaimVolumeSource {
                        claim_name: s("pvc"),
                        read_only: Some(false),
                    }),
                    ..Default::default()
                },
            ),
        ];
        let got: Vec<Value> = vols.iter().map(|v| volume(v).unwrap()).collect();
        assert_eq!(
            Value::Array(got),
            json!([
                {"name": "tmp", "emptyDir": {}},
                {"name": "host", "hostPath": {"path": "/var/log", "type": ""}},
                {"name": "cfg", "configMap": {"name": "app", "items": [{"key": "a", "path": "a.txt"}], "defaultMode": 420}},
                {"name": "sec", "secret": {"secretName": "tls", "optional": false}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "pvc"}}
            ])
        );
    }

    #[test]
    fn legacy_sources_are_rejected() {
        let v = named(
            "old",
            core::VolumeSource {
                git_repo: Some(Default::default()),
                ..Default::default()
            },
        );
        match volume(&v) {
            Err(ConvertError::UnsupportedField(f)) => assert_eq!(f, "spec.volumes[].gitRepo"),
            other => panic!("expected UnsupportedField, got {other:?}"),
        }
    }

    #[test]
    fn ephemeral_claim_template() {
        let v = named(
            "scratch",
            core::VolumeSource {
                ephemeral: Some(core::EphemeralVolumeSource {
                    volume_claim_template: Some(core::PersistentVolumeClaimTemplate {
                        metadata: None,
                        spec: Some(core::PersistentVolumeClaimSpec {
                            access_modes: vec!["ReadWriteOnce".into()],
                            resources: Some(core::VolumeResourceRequirements {
                                requests: [(
                                    "storage".to_owned(),
                                    k8s_pb::apimachinery::pkg::api::resource::Quantity {
                                        string: s("1Gi"),
                                    },
                                )]
                                .into(),
                                limits: Default::default(),
                            }),
                            volume_name: s(""),
                            storage_class_name: s("fast"),
                            ..Default::default()
                        }),
                    }),
                }),
                ..Default::default()
            },
        );
        assert_eq!(
            volume(&v).unwrap(),
            json!({"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {
                "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                "storageClassName": "fast"}}}})
        );
    }
}
