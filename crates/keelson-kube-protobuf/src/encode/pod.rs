//! Encoders for `v1` `Pod` (spec and status) and the `PodSpec` parts the
//! workload kinds share.
//!
//! Coverage is the commonly used subset of `PodSpec`/`Container`:
//! volumes `emptyDir`, `configMap`, `secret`, `persistentVolumeClaim`,
//! `hostPath`; probes `exec`/`httpGet`/`tcpSocket`; env `value` and
//! `valueFrom` field/configMap/secret refs. Anything else (affinity,
//! container security contexts, lifecycle hooks, other volume sources, …)
//! is refused with [`super::EncodeError::UnsupportedField`].

use k8s_pb::api::core::v1 as core;

use super::fields::{Fields, Result};
use super::meta::object_meta;

/// `Pod` (metadata, spec, status).
pub fn pod(f: &mut Fields<'_>) -> Result<core::Pod> {
    Ok(core::Pod {
        metadata: f.message("metadata", object_meta)?,
        spec: f.message("spec", pod_spec)?,
        status: f.message("status", pod_status)?,
    })
}

/// `PodTemplateSpec` (metadata and spec).
pub fn pod_template(f: &mut Fields<'_>) -> Result<core::PodTemplateSpec> {
    Ok(core::PodTemplateSpec {
        metadata: f.message("metadata", object_meta)?,
        spec: f.message("spec", pod_spec)?,
    })
}

fn local_ref(f: &mut Fields<'_>) -> Result<Option<core::LocalObjectReference>> {
    Ok(f.string("name")?
        .map(|name| core::LocalObjectReference { name: Some(name) }))
}

/// `PodSpec` (the subset described in the module docs).
pub fn pod_spec(f: &mut Fields<'_>) -> Result<core::PodSpec> {
    Ok(core::PodSpec {
        volumes: f.messages("volumes", volume)?,
        init_containers: f.messages("initContainers", container)?,
        containers: f.messages("containers", container)?,
        restart_policy: f.string("restartPolicy")?,
        termination_grace_period_seconds: f.i64("terminationGracePeriodSeconds")?,
        active_deadline_seconds: f.i64("activeDeadlineSeconds")?,
        dns_policy: f.string("dnsPolicy")?,
        node_selector: f.string_map("nodeSelector")?,
        service_account_name: f.string("serviceAccountName")?,
        service_account: f.string("serviceAccount")?,
        automount_service_account_token: f.boolean("automountServiceAccountToken")?,
        node_name: f.string("nodeName")?,
        host_network: f.boolean("hostNetwork")?,
        host_pid: f.boolean("hostPID")?,
        host_ipc: f.boolean("hostIPC")?,
        share_process_namespace: f.boolean("shareProcessNamespace")?,
        security_context: f.message("securityContext", |s| {
            Ok(core::PodSecurityContext {
                run_as_user: s.i64("runAsUser")?,
                run_as_group: s.i64("runAsGroup")?,
                run_as_non_root: s.boolean("runAsNonRoot")?,
                fs_group: s.i64("fsGroup")?,
                fs_group_change_policy: s.string("fsGroupChangePolicy")?,
                ..Default::default()
            })
        })?,
        image_pull_secrets: f.messages("imagePullSecrets", |r| {
            Ok(core::LocalObjectReference {
                name: r.string("name")?,
            })
        })?,
        hostname: f.string("hostname")?,
        subdomain: f.string("subdomain")?,
        scheduler_name: f.string("schedulerName")?,
        tolerations: f.messages("tolerations", |t| {
            Ok(core::Toleration {
                key: t.string("key")?,
                operator: t.string("operator")?,
                value: t.string("value")?,
                effect: t.string("effect")?,
                toleration_seconds: t.i64("tolerationSeconds")?,
            })
        })?,
        priority_class_name: f.string("priorityClassName")?,
        priority: f.i32("priority")?,
        runtime_class_name: f.string("runtimeClassName")?,
        enable_service_links: f.boolean("enableServiceLinks")?,
        preemption_policy: f.string("preemptionPolicy")?,
        set_hostname_as_fqdn: f.boolean("setHostnameAsFQDN")?,
        host_users: f.boolean("hostUsers")?,
        ..Default::default()
    })
}

fn key_to_path(f: &mut Fields<'_>) -> Result<core::KeyToPath> {
    Ok(core::KeyToPath {
        key: f.string("key")?,
        path: f.string("path")?,
        mode: f.i32("mode")?,
    })
}

/// `Volume` with one of the supported sources inline.
fn volume(f: &mut Fields<'_>) -> Result<core::Volume> {
    let source = core::VolumeSource {
        empty_dir: f.message("emptyDir", |e| {
            Ok(core::EmptyDirVolumeSource {
                medium: e.string("medium")?,
                size_limit: e.quantity("sizeLimit")?,
            })
        })?,
        config_map: f.message("configMap", |c| {
            Ok(core::ConfigMapVolumeSource {
                local_object_reference: local_ref(c)?,
                items: c.messages("items", key_to_path)?,
                default_mode: c.i32("defaultMode")?,
                optional: c.boolean("optional")?,
            })
        })?,
        secret: f.message("secret", |s| {
            Ok(core::SecretVolumeSource {
                secret_name: s.string("secretName")?,
                items: s.messages("items", key_to_path)?,
                default_mode: s.i32("defaultMode")?,
                optional: s.boolean("optional")?,
            })
        })?,
        persistent_volume_claim: f.message("persistentVolumeClaim", |p| {
            Ok(core::PersistentVolumeClaimVolumeSource {
                claim_name: p.string("claimName")?,
                read_only: p.boolean("readOnly")?,
            })
        })?,
        host_path: f.message("hostPath", |h| {
            Ok(core::HostPathVolumeSource {
                path: h.string("path")?,
                r#type: h.string("type")?,
            })
        })?,
        ..Default::default()
    };
    Ok(core::Volume {
        name: f.string("name")?,
        volume_source: Some(source),
    })
}

fn resources(f: &mut Fields<'_>) -> Result<core::ResourceRequirements> {
    Ok(core::ResourceRequirements {
        limits: f.quantities("limits")?,
        requests: f.quantities("requests")?,
        claims: Vec::new(),
    })
}

fn probe(f: &mut Fields<'_>) -> Result<core::Probe> {
    let handler = core::ProbeHandler {
        exec: f.message("exec", |e| {
            Ok(core::ExecAction {
                command: e.strings("command")?,
            })
        })?,
        http_get: f.message("httpGet", |h| {
            Ok(core::HttpGetAction {
                path: h.string("path")?,
                port: h.int_or_string("port")?,
                host: h.string("host")?,
                scheme: h.string("scheme")?,
                http_headers: h.messages("httpHeaders", |x| {
                    Ok(core::HttpHeader {
                        name: x.string("name")?,
                        value: x.string("value")?,
                    })
                })?,
            })
        })?,
        tcp_socket: f.message("tcpSocket", |t| {
            Ok(core::TcpSocketAction {
                port: t.int_or_string("port")?,
                host: t.string("host")?,
            })
        })?,
        grpc: None,
    };
    Ok(core::Probe {
        handler: Some(handler),
        initial_delay_seconds: f.i32("initialDelaySeconds")?,
        timeout_seconds: f.i32("timeoutSeconds")?,
        period_seconds: f.i32("periodSeconds")?,
        success_threshold: f.i32("successThreshold")?,
        failure_threshold: f.i32("failureThreshold")?,
        termination_grace_period_seconds: f.i64("terminationGracePeriodSeconds")?,
    })
}

fn env_var(f: &mut Fields<'_>) -> Result<core::EnvVar> {
    Ok(core::EnvVar {
        name: f.string("name")?,
        value: f.string("value")?,
        value_from: f.message("valueFrom", |v| {
            Ok(core::EnvVarSource {
                field_ref: v.message("fieldRef", |r| {
                    Ok(core::ObjectFieldSelector {
                        api_version: r.string("apiVersion")?,
                        field_path: r.string("fieldPath")?,
                    })
                })?,
                config_map_key_ref: v.message("configMapKeyRef", |r| {
                    Ok(core::ConfigMapKeySelector {
                        local_object_reference: local_ref(r)?,
                        key: r.string("key")?,
                        optional: r.boolean("optional")?,
                    })
                })?,
                secret_key_ref: v.message("secretKeyRef", |r| {
                    Ok(core::SecretKeySelector {
                        local_object_reference: local_ref(r)?,
                        key: r.string("key")?,
                        optional: r.boolean("optional")?,
                    })
                })?,
                ..Default::default()
            })
        })?,
    })
}

/// `Container` (the subset described in the module docs).
pub fn container(f: &mut Fields<'_>) -> Result<core::Container> {
    Ok(core::Container {
        name: f.string("name")?,
        image: f.string("image")?,
        command: f.strings("command")?,
        args: f.strings("args")?,
        working_dir: f.string("workingDir")?,
        ports: f.messages("ports", |p| {
            Ok(core::ContainerPort {
                name: p.string("name")?,
                host_port: p.i32("hostPort")?,
                container_port: p.i32("containerPort")?,
                protocol: p.string("protocol")?,
                host_ip: p.string("hostIP")?,
            })
        })?,
        env: f.messages("env", env_var)?,
        resources: f.message("resources", resources)?,
        restart_policy: f.string("restartPolicy")?,
        volume_mounts: f.messages("volumeMounts", |m| {
            Ok(core::VolumeMount {
                name: m.string("name")?,
                read_only: m.boolean("readOnly")?,
                recursive_read_only: m.string("recursiveReadOnly")?,
                mount_path: m.string("mountPath")?,
                sub_path: m.string("subPath")?,
                mount_propagation: m.string("mountPropagation")?,
                sub_path_expr: m.string("subPathExpr")?,
            })
        })?,
        liveness_probe: f.message("livenessProbe", probe)?,
        readiness_probe: f.message("readinessProbe", probe)?,
        startup_probe: f.message("startupProbe", probe)?,
        termination_message_path: f.string("terminationMessagePath")?,
        termination_message_policy: f.string("terminationMessagePolicy")?,
        image_pull_policy: f.string("imagePullPolicy")?,
        stdin: f.boolean("stdin")?,
        stdin_once: f.boolean("stdinOnce")?,
        tty: f.boolean("tty")?,
        ..Default::default()
    })
}

fn container_state(f: &mut Fields<'_>) -> Result<core::ContainerState> {
    Ok(core::ContainerState {
        waiting: f.message("waiting", |w| {
            Ok(core::ContainerStateWaiting {
                reason: w.string("reason")?,
                message: w.string("message")?,
            })
        })?,
        running: f.message("running", |r| {
            Ok(core::ContainerStateRunning {
                started_at: r.time("startedAt")?,
            })
        })?,
        terminated: f.message("terminated", |t| {
            Ok(core::ContainerStateTerminated {
                exit_code: t.i32("exitCode")?,
                signal: t.i32("signal")?,
                reason: t.string("reason")?,
                message: t.string("message")?,
                started_at: t.time("startedAt")?,
                finished_at: t.time("finishedAt")?,
                container_id: t.string("containerID")?,
            })
        })?,
    })
}

fn container_status(f: &mut Fields<'_>) -> Result<core::ContainerStatus> {
    Ok(core::ContainerStatus {
        name: f.string("name")?,
        state: f.message("state", container_state)?,
        last_state: f.message("lastState", container_state)?,
        ready: f.boolean("ready")?,
        restart_count: f.i32("restartCount")?,
        image: f.string("image")?,
        image_id: f.string("imageID")?,
        container_id: f.string("containerID")?,
        started: f.boolean("started")?,
        allocated_resources: f.quantities("allocatedResources")?,
        resources: f.message("resources", resources)?,
        stop_signal: f.string("stopSignal")?,
        ..Default::default()
    })
}

/// `PodStatus` (conditions, container statuses, IPs, QoS class, …).
pub fn pod_status(f: &mut Fields<'_>) -> Result<core::PodStatus> {
    Ok(core::PodStatus {
        observed_generation: f.i64("observedGeneration")?,
        phase: f.string("phase")?,
        conditions: f.messages("conditions", |c| {
            Ok(core::PodCondition {
                r#type: c.string("type")?,
                observed_generation: c.i64("observedGeneration")?,
                status: c.string("status")?,
                last_probe_time: c.time("lastProbeTime")?,
                last_transition_time: c.time("lastTransitionTime")?,
                reason: c.string("reason")?,
                message: c.string("message")?,
            })
        })?,
        message: f.string("message")?,
        reason: f.string("reason")?,
        nominated_node_name: f.string("nominatedNodeName")?,
        host_ip: f.string("hostIP")?,
        host_ips: f.messages("hostIPs", |i| {
            Ok(core::HostIp {
                ip: i.string("ip")?,
            })
        })?,
        pod_ip: f.string("podIP")?,
        pod_ips: f.messages("podIPs", |i| {
            Ok(core::PodIp {
                ip: i.string("ip")?,
            })
        })?,
        start_time: f.time("startTime")?,
        init_container_statuses: f.messages("initContainerStatuses", container_status)?,
        container_statuses: f.messages("containerStatuses", container_status)?,
        qos_class: f.string("qosClass")?,
        ephemeral_container_statuses: f.messages("ephemeralContainerStatuses", container_status)?,
        resize: f.string("resize")?,
        ..Default::default()
    })
}
