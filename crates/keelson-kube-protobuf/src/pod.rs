//! `k8s.io/api/core/v1` pod-level types: `PodTemplateSpec`, `PodSpec`,
//! `PodSecurityContext`, scheduling (`Affinity`, `Toleration`,
//! `TopologySpreadConstraint`), DNS and the `Pod` object itself.
//!
//! Conversion failures are [`crate::json::ConvertError`]s; this module adds
//! no error type of its own.

use k8s_pb::api::core::v1 as core;
use serde_json::Value;

use crate::container::{self, container, ephemeral_container, local_object_reference};
use crate::json::{reject_if, Obj, Result};
use crate::meta::{label_selector, object_meta};
use crate::volume::volume;

/// `PodTemplateSpec` (`metadata`, `spec`).
pub fn pod_template_spec(t: &core::PodTemplateSpec) -> Result<Value> {
    let mut o = Obj::new();
    o.message("metadata", &t.metadata, object_meta)?;
    o.message("spec", &t.spec, pod_spec)?;
    Ok(o.build())
}

/// `PodSpec`.
pub fn pod_spec(s: &core::PodSpec) -> Result<Value> {
    reject_if(s.workload_ref.is_some(), "spec.workloadRef")?;
    let mut o = Obj::new();
    o.messages("volumes", &s.volumes, volume)?;
    o.messages("initContainers", &s.init_containers, container)?;
    o.messages("containers", &s.containers, container)?;
    o.messages(
        "ephemeralContainers",
        &s.ephemeral_containers,
        ephemeral_container,
    )?;
    o.string("restartPolicy", &s.restart_policy)
        .int_kept(
            "terminationGracePeriodSeconds",
            s.termination_grace_period_seconds,
        )
        .int_kept("activeDeadlineSeconds", s.active_deadline_seconds)
        .string("dnsPolicy", &s.dns_policy)
        .string_map("nodeSelector", &s.node_selector)
        .string("serviceAccountName", &s.service_account_name)
        .string("serviceAccount", &s.service_account)
        .boolean_kept(
            "automountServiceAccountToken",
            s.automount_service_account_token,
        )
        .string("nodeName", &s.node_name)
        .boolean("hostNetwork", s.host_network)
        .boolean("hostPID", s.host_pid)
        .boolean("hostIPC", s.host_ipc)
        .boolean_kept("shareProcessNamespace", s.share_process_namespace);
    o.message("securityContext", &s.security_context, pod_security_context)?;
    o.messages(
        "imagePullSecrets",
        &s.image_pull_secrets,
        local_object_reference,
    )?;
    o.string("hostname", &s.hostname)
        .string("subdomain", &s.subdomain);
    o.message("affinity", &s.affinity, affinity)?;
    o.string("schedulerName", &s.scheduler_name);
    o.messages("tolerations", &s.tolerations, toleration)?;
    o.messages("hostAliases", &s.host_aliases, |h| {
        Ok(Obj::new()
            .string_kept("ip", &h.ip)
            .strings("hostnames", &h.hostnames)
            .build())
    })?;
    o.string("priorityClassName", &s.priority_class_name)
        .int_kept("priority", s.priority);
    o.message("dnsConfig", &s.dns_config, dns_config)?;
    o.messages("readinessGates", &s.readiness_gates, |g| {
        Ok(Obj::new()
            .string_kept("conditionType", &g.condition_type)
            .build())
    })?;
    o.string_kept("runtimeClassName", &s.runtime_class_name)
        .boolean_kept("enableServiceLinks", s.enable_service_links)
        .string_kept("preemptionPolicy", &s.preemption_policy)
        .quantities("overhead", &s.overhead);
    o.messages(
        "topologySpreadConstraints",
        &s.topology_spread_constraints,
        topology_spread,
    )?;
    o.boolean_kept("setHostnameAsFQDN", s.set_hostname_as_fqdn);
    o.message("os", &s.os, |os| {
        Ok(Obj::new().string_kept("name", &os.name).build())
    })?;
    o.boolean_kept("hostUsers", s.host_users);
    o.messages("schedulingGates", &s.scheduling_gates, |g| {
        Ok(Obj::new().string_kept("name", &g.name).build())
    })?;
    o.messages("resourceClaims", &s.resource_claims, |c| {
        Ok(Obj::new()
            .string_kept("name", &c.name)
            .string_kept("resourceClaimName", &c.resource_claim_name)
            .string_kept("resourceClaimTemplateName", &c.resource_claim_template_name)
            .build())
    })?;
    o.message("resources", &s.resources, container::resource_requirements)?;
    o.string_kept("hostnameOverride", &s.hostname_override);
    Ok(o.build())
}

/// `PodSecurityContext`.
pub fn pod_security_context(s: &core::PodSecurityContext) -> Result<Value> {
    let mut o = Obj::new();
    o.message(
        "seLinuxOptions",
        &s.se_linux_options,
        container::se_linux_options,
    )?;
    o.message(
        "windowsOptions",
        &s.windows_options,
        container::windows_options,
    )?;
    o.int_kept("runAsUser", s.run_as_user)
        .int_kept("runAsGroup", s.run_as_group)
        .boolean_kept("runAsNonRoot", s.run_as_non_root)
        .ints("supplementalGroups", &s.supplemental_groups)
        .string_kept("supplementalGroupsPolicy", &s.supplemental_groups_policy)
        .int_kept("fsGroup", s.fs_group);
    o.messages("sysctls", &s.sysctls, |c| {
        Ok(Obj::new()
            .string_kept("name", &c.name)
            .string_kept("value", &c.value)
            .build())
    })?;
    o.string_kept("fsGroupChangePolicy", &s.fs_group_change_policy);
    o.message(
        "seccompProfile",
        &s.seccomp_profile,
        container::seccomp_profile,
    )?;
    o.message(
        "appArmorProfile",
        &s.app_armor_profile,
        container::app_armor_profile,
    )?;
    o.string_kept("seLinuxChangePolicy", &s.se_linux_change_policy);
    Ok(o.build())
}

/// `Affinity` (node, pod and pod anti-affinity).
pub fn affinity(a: &core::Affinity) -> Result<Value> {
    const REQUIRED: &str = "requiredDuringSchedulingIgnoredDuringExecution";
    const PREFERRED: &str = "preferredDuringSchedulingIgnoredDuringExecution";
    let mut o = Obj::new();
    o.message("nodeAffinity", &a.node_affinity, |n| {
        let mut o = Obj::new();
        o.message(
            REQUIRED,
            &n.required_during_scheduling_ignored_during_execution,
            |s| {
                let mut o = Obj::new();
                o.messages(
                    "nodeSelectorTerms",
                    &s.node_selector_terms,
                    node_selector_term,
                )?;
                Ok(o.build())
            },
        )?;
        o.messages(
            PREFERRED,
            &n.preferred_during_scheduling_ignored_during_execution,
            |p| {
                let mut o = Obj::new();
                o.int_kept("weight", p.weight);
                o.message("preference", &p.preference, node_selector_term)?;
                Ok(o.build())
            },
        )?;
        Ok(o.build())
    })?;
    o.message("podAffinity", &a.pod_affinity, |p| {
        let mut o = Obj::new();
        o.messages(
            REQUIRED,
            &p.required_during_scheduling_ignored_during_execution,
            pod_affinity_term,
        )?;
        o.messages(
            PREFERRED,
            &p.preferred_during_scheduling_ignored_during_execution,
            weighted_term,
        )?;
        Ok(o.build())
    })?;
    o.message("podAntiAffinity", &a.pod_anti_affinity, |p| {
        let mut o = Obj::new();
        o.messages(
            REQUIRED,
            &p.required_during_scheduling_ignored_during_execution,
            pod_affinity_term,
        )?;
        o.messages(
            PREFERRED,
            &p.preferred_during_scheduling_ignored_during_execution,
            weighted_term,
        )?;
        Ok(o.build())
    })?;
    Ok(o.build())
}

/// `NodeSelectorTerm` (`matchExpressions`, `matchFields`).
pub fn node_selector_term(t: &core::NodeSelectorTerm) -> Result<Value> {
    let mut o = Obj::new();
    o.messages(
        "matchExpressions",
        &t.match_expressions,
        node_selector_requirement,
    )?;
    o.messages("matchFields", &t.match_fields, node_selector_requirement)?;
    Ok(o.build())
}

fn node_selector_requirement(r: &core::NodeSelectorRequirement) -> Result<Value> {
    Ok(Obj::new()
        .string_kept("key", &r.key)
        .string_kept("operator", &r.operator)
        .strings("values", &r.values)
        .build())
}

fn pod_affinity_term(t: &core::PodAffinityTerm) -> Result<Value> {
    let mut o = Obj::new();
    o.message("labelSelector", &t.label_selector, label_selector)?;
    o.strings("namespaces", &t.namespaces)
        .string_kept("topologyKey", &t.topology_key);
    o.message("namespaceSelector", &t.namespace_selector, label_selector)?;
    o.strings("matchLabelKeys", &t.match_label_keys)
        .strings("mismatchLabelKeys", &t.mismatch_label_keys);
    Ok(o.build())
}

fn weighted_term(w: &core::WeightedPodAffinityTerm) -> Result<Value> {
    let mut o = Obj::new();
    o.int_kept("weight", w.weight);
    o.message("podAffinityTerm", &w.pod_affinity_term, pod_affinity_term)?;
    Ok(o.build())
}

/// `Toleration`.
pub fn toleration(t: &core::Toleration) -> Result<Value> {
    Ok(Obj::new()
        .string("key", &t.key)
        .string("operator", &t.operator)
        .string("value", &t.value)
        .string("effect", &t.effect)
        .int_kept("tolerationSeconds", t.toleration_seconds)
        .build())
}

fn dns_config(d: &core::PodDnsConfig) -> Result<Value> {
    let mut o = Obj::new();
    o.strings("nameservers", &d.nameservers)
        .strings("searches", &d.searches);
    o.messages("options", &d.options, |opt| {
        Ok(Obj::new()
            .string("name", &opt.name)
            .string_kept("value", &opt.value)
            .build())
    })?;
    Ok(o.build())
}

fn topology_spread(t: &core::TopologySpreadConstraint) -> Result<Value> {
    let mut o = Obj::new();
    o.int_kept("maxSkew", t.max_skew)
        .string_kept("topologyKey", &t.topology_key)
        .string_kept("whenUnsatisfiable", &t.when_unsatisfiable);
    o.message("labelSelector", &t.label_selector, label_selector)?;
    o.int_kept("minDomains", t.min_domains)
        .string_kept("nodeAffinityPolicy", &t.node_affinity_policy)
        .string_kept("nodeTaintsPolicy", &t.node_taints_policy)
        .strings("matchLabelKeys", &t.match_label_keys);
    Ok(o.build())
}

/// `Pod` body (without `apiVersion`/`kind`); `status` is not translated.
pub fn pod(p: &core::Pod) -> Result<Value> {
    let mut o = Obj::new();
    o.message("metadata", &p.metadata, object_meta)?;
    o.message("spec", &p.spec, pod_spec)?;
    Ok(o.build())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
    use serde_json::json;

    fn s(v: &str) -> Option<String> {
        Some(v.to_owned())
    }

    #[test]
    fn gogo_zero_values_are_dropped_but_pointers_kept() {
        let spec = core::PodSpec {
            containers: vec![core::Container {
                name: s("c"),
                image: s(""),
                working_dir: s(""),
                resources: Some(core::ResourceRequirements::default()),
                termination_message_path: s(""),
                image_pull_policy: s(""),
                stdin: Some(false),
                tty: Some(false),
                ..Default::default()
            }],
            restart_policy: s(""),
            dns_policy: s(""),
            host_network: Some(false),
            termination_grace_period_seconds: Some(0),
            automount_service_account_token: Some(false),
            ..Default::default()
        };
        assert_eq!(
            pod_spec(&spec).unwrap(),
            json!({"containers": [{"name": "c", "resources": {}}],
                   "terminationGracePeriodSeconds": 0, "automountServiceAccountToken": false})
        );
    }

    #[test]
    fn containers_env_probes_and_security() {
        let c = core::Container {
            name: s("app"),
            image: s("nginx"),
            ports: vec![core::ContainerPort {
                name: s("http"),
                container_port: Some(80),
                protocol: s("TCP"),
                host_port: Some(0),
                host_ip: s(""),
            }],
            env: vec![
                core::EnvVar {
                    name: s("EMPTY"),
                    value: s(""),
                    value_from: None,
                },
                core::EnvVar {
                    name: s("FROM_CM"),
                    value: s(""),
                    value_from: Some(core::EnvVarSource {
                        config_map_key_ref: Some(core::ConfigMapKeySelector {
                            local_object_reference: Some(core::LocalObjectReference {
                                name: s("cm"),
                            }),
                            key: s("k"),
                            optional: Some(true),
                        }),
                        ..Default::default()
                    }),
                },
            ],
            readiness_probe: Some(core::Probe {
                handler: Some(core::ProbeHandler {
                    http_get: Some(core::HttpGetAction {
                        path: s("/healthz"),
                        port: Some(IntOrString {
                            r#type: Some(1),
                            int_val: Some(0),
                            str_val: s("http"),
                        }),
                        host: s(""),
                        scheme: s("HTTP"),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                period_seconds: Some(10),
                timeout_seconds: Some(0),
                ..Default::default()
            }),
            security_context: Some(core::SecurityContext {
                run_as_user: Some(0),
                capabilities: Some(core::Capabilities {
                    add: vec![],
                    drop: vec!["ALL".into()],
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            container(&c).unwrap(),
            json!({
                "name": "app", "image": "nginx",
                "ports": [{"name": "http", "containerPort": 80, "protocol": "TCP"}],
                "env": [{"name": "EMPTY"},
                        {"name": "FROM_CM", "valueFrom": {"configMapKeyRef":
                            {"name": "cm", "key": "k", "optional": true}}}],
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http", "scheme": "HTTP"},
                                   "periodSeconds": 10},
                "securityContext": {"runAsUser": 0, "capabilities": {"drop": ["ALL"]}}
            })
        );
    }

    #[test]
    fn scheduling_fields() {
        let spec = core::PodSpec {
            node_selector: [("disk".to_owned(), "ssd".to_owned())].into(),
            tolerations: vec![core::Toleration {
                key: s("k"),
                operator: s("Exists"),
                value: s(""),
                effect: s("NoSchedule"),
                toleration_seconds: None,
            }],
            affinity: Some(core::Affinity {
                node_affinity: Some(core::NodeAffinity {
                    required_during_scheduling_ignored_during_execution: Some(core::NodeSelector {
                        node_selector_terms: vec![core::NodeSelectorTerm {
                            match_expressions: vec![core::NodeSelectorRequirement {
                                key: s("zone"),
                                operator: s("In"),
                                values: vec!["a".into()],
                            }],
                            match_fields: vec![],
                        }],
                    }),
                    preferred_during_scheduling_ignored_during_execution: vec![],
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            pod_spec(&spec).unwrap(),
            json!({
                "nodeSelector": {"disk": "ssd"},
                "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                    {"nodeSelectorTerms": [{"matchExpressions":
                        [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}
            })
        );
    }

    #[test]
    fn alpha_workload_ref_is_rejected() {
        let spec = core::PodSpec {
            workload_ref: Some(Default::default()),
            ..Default::default()
        };
        assert!(pod_spec(&spec).is_err());
    }
}
