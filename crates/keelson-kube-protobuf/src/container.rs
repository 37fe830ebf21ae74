//! `k8s.io/api/core/v1` container types: `Container` (and the identical
//! `EphemeralContainerCommon`), ports, environment, resources, volume
//! mounts, probes, lifecycle hooks and the container `SecurityContext`.
//!
//! Conversion failures are [`crate::json::ConvertError`]s; this module adds
//! no error type of its own.

use k8s_pb::api::core::v1 as core;
use serde_json::Value;

use crate::json::{Obj, Result};

/// Converts the fields shared by `Container` and `EphemeralContainerCommon`
/// (two generated Rust types with the same field names).
macro_rules! container_fields {
    ($c:expr) => {{
        let c = $c;
        let mut o = Obj::new();
        o.string_kept("name", &c.name)
            .string("image", &c.image)
            .strings("command", &c.command)
            .strings("args", &c.args)
            .string("workingDir", &c.working_dir);
        o.messages("ports", &c.ports, container_port)?;
        o.messages("envFrom", &c.env_from, env_from_source)?;
        o.messages("env", &c.env, env_var)?;
        o.message("resources", &c.resources, resource_requirements)?;
        o.messages("resizePolicy", &c.resize_policy, resize_policy)?;
        o.string_kept("restartPolicy", &c.restart_policy);
        o.messages("restartPolicyRules", &c.restart_policy_rules, restart_rule)?;
        o.messages("volumeMounts", &c.volume_mounts, volume_mount)?;
        o.messages("volumeDevices", &c.volume_devices, volume_device)?;
        o.message("livenessProbe", &c.liveness_probe, probe)?;
        o.message("readinessProbe", &c.readiness_probe, probe)?;
        o.message("startupProbe", &c.startup_probe, probe)?;
        o.message("lifecycle", &c.lifecycle, lifecycle)?;
        o.string("terminationMessagePath", &c.termination_message_path)
            .string("terminationMessagePolicy", &c.termination_message_policy)
            .string("imagePullPolicy", &c.image_pull_policy);
        o.message("securityContext", &c.security_context, security_context)?;
        o.boolean("stdin", c.stdin)
            .boolean("stdinOnce", c.stdin_once)
            .boolean("tty", c.tty);
        o
    }};
}

/// `Container`.
pub fn container(c: &core::Container) -> Result<Value> {
    Ok(container_fields!(c).build())
}

/// `EphemeralContainer`: the inlined common container fields plus
/// `targetContainerName`.
pub fn ephemeral_container(c: &core::EphemeralContainer) -> Result<Value> {
    let mut o = match &c.ephemeral_container_common {
        Some(common) => container_fields!(common),
        None => Obj::new(),
    };
    o.string("targetContainerName", &c.target_container_name);
    Ok(o.build())
}

/// `ContainerPort`; `containerPort` is required and kept even when 0.
pub fn container_port(p: &core::ContainerPort) -> Result<Value> {
    Ok(Obj::new()
        .string("name", &p.name)
        .int("hostPort", p.host_port)
        .int_kept("containerPort", p.container_port)
        .string("protocol", &p.protocol)
        .string("hostIP", &p.host_ip)
        .build())
}

/// `EnvVar` with optional `valueFrom`.
pub fn env_var(e: &core::EnvVar) -> Result<Value> {
    let mut o = Obj::new();
    o.string_kept("name", &e.name).string("value", &e.value);
    o.message("valueFrom", &e.value_from, env_var_source)?;
    Ok(o.build())
}

/// `EnvVarSource`: field, resource field, ConfigMap key, Secret key or
/// file key reference.
pub fn env_var_source(s: &core::EnvVarSource) -> Result<Value> {
    let mut o = Obj::new();
    o.message("fieldRef", &s.field_ref, object_field_selector)?;
    o.message(
        "resourceFieldRef",
        &s.resource_field_ref,
        resource_field_selector,
    )?;
    o.message("configMapKeyRef", &s.config_map_key_ref, |k| {
        let mut o = Obj::new();
        o.inline(local_object_reference_opt(&k.local_object_reference));
        Ok(o.string_kept("key", &k.key)
            .boolean_kept("optional", k.optional)
            .build())
    })?;
    o.message("secretKeyRef", &s.secret_key_ref, |k| {
        let mut o = Obj::new();
        o.inline(local_object_reference_opt(&k.local_object_reference));
        Ok(o.string_kept("key", &k.key)
            .boolean_kept("optional", k.optional)
            .build())
    })?;
    o.message("fileKeyRef", &s.file_key_ref, |k| {
        Ok(Obj::new()
            .string_kept("volumeName", &k.volume_name)
            .string_kept("path", &k.path)
            .string_kept("key", &k.key)
            .boolean_kept("optional", k.optional)
            .build())
    })?;
    Ok(o.build())
}

/// `ObjectFieldSelector` (downward API `fieldRef`).
pub fn object_field_selector(f: &core::ObjectFieldSelector) -> Result<Value> {
    Ok(Obj::new()
        .string("apiVersion", &f.api_version)
        .string_kept("fieldPath", &f.field_path)
        .build())
}

/// `ResourceFieldSelector` (downward API `resourceFieldRef`).
pub fn resource_field_selector(f: &core::ResourceFieldSelector) -> Result<Value> {
    Ok(Obj::new()
        .string("containerName", &f.container_name)
        .string_kept("resource", &f.resource)
        .quantity("divisor", &f.divisor)
        .build())
}

/// `LocalObjectReference` (`{"name": …}`).
pub fn local_object_reference(r: &core::LocalObjectReference) -> Result<Value> {
    Ok(Obj::new().string("name", &r.name).build())
}

/// An inlined, possibly absent `LocalObjectReference`.
pub(crate) fn local_object_reference_opt(r: &Option<core::LocalObjectReference>) -> Value {
    Obj::new()
        .string("name", &r.as_ref().and_then(|r| r.name.clone()))
        .build()
}

/// `EnvFromSource` (`prefix`, `configMapRef`, `secretRef`).
pub fn env_from_source(e: &core::EnvFromSource) -> Result<Value> {
    let mut o = Obj::new();
    o.string("prefix", &e.prefix);
    o.message("configMapRef", &e.config_map_ref, |r| {
        let mut o = Obj::new();
        o.inline(local_object_reference_opt(&r.local_object_reference));
        Ok(o.boolean_kept("optional", r.optional).build())
    })?;
    o.message("secretRef", &e.secret_ref, |r| {
        let mut o = Obj::new();
        o.inline(local_object_reference_opt(&r.local_object_reference));
        Ok(o.boolean_kept("optional", r.optional).build())
    })?;
    Ok(o.build())
}

/// `ResourceRequirements` (`limits`, `requests` as quantity strings,
/// `claims`).
pub fn resource_requirements(r: &core::ResourceRequirements) -> Result<Value> {
    let mut o = Obj::new();
    o.quantities("limits", &r.limits)
        .quantities("requests", &r.requests);
    o.messages("claims", &r.claims, |c| {
        Ok(Obj::new()
            .string_kept("name", &c.name)
            .string("request", &c.request)
            .build())
    })?;
    Ok(o.build())
}

fn resize_policy(p: &core::ContainerResizePolicy) -> Result<Value> {
    Ok(Obj::new()
        .string_kept("resourceName", &p.resource_name)
        .string_kept("restartPolicy", &p.restart_policy)
        .build())
}

fn restart_rule(r: &core::ContainerRestartRule) -> Result<Value> {
    let mut o = Obj::new();
    o.string("action", &r.action);
    o.message("exitCodes", &r.exit_codes, |e| {
        Ok(Obj::new()
            .string("operator", &e.operator)
            .ints("values", &e.values)
            .build())
    })?;
    Ok(o.build())
}

/// `VolumeMount`; `name` and `mountPath` are required.
pub fn volume_mount(m: &core::VolumeMount) -> Result<Value> {
    Ok(Obj::new()
        .string_kept("name", &m.name)
        .boolean("readOnly", m.read_only)
        .string_kept("recursiveReadOnly", &m.recursive_read_only)
        .string_kept("mountPath", &m.mount_path)
        .string("subPath", &m.sub_path)
        .string_kept("mountPropagation", &m.mount_propagation)
        .string("subPathExpr", &m.sub_path_expr)
        .build())
}

fn volume_device(d: &core::VolumeDevice) -> Result<Value> {
    Ok(Obj::new()
        .string_kept("name", &d.name)
        .string_kept("devicePath", &d.device_path)
        .build())
}

/// `Probe`: the inlined handler plus timing thresholds.
pub fn probe(p: &core::Probe) -> Result<Value> {
    let mut o = Obj::new();
    if let Some(h) = &p.handler {
        o.message("exec", &h.exec, exec_action)?;
        o.message("httpGet", &h.http_get, http_get_action)?;
        o.message("tcpSocket", &h.tcp_socket, tcp_socket_action)?;
        o.message("grpc", &h.grpc, |g| {
            Ok(Obj::new()
                .int_kept("port", g.port)
                .string_kept("service", &g.service)
                .build())
        })?;
    }
    o.int("initialDelaySeconds", p.initial_delay_seconds)
        .int("timeoutSeconds", p.timeout_seconds)
        .int("periodSeconds", p.period_seconds)
        .int("successThreshold", p.success_threshold)
        .int("failureThreshold", p.failure_threshold)
        .int_kept(
            "terminationGracePeriodSeconds",
            p.termination_grace_period_seconds,
        );
    Ok(o.build())
}

fn exec_action(e: &core::ExecAction) -> Result<Value> {
    Ok(Obj::new().strings("command", &e.command).build())
}

fn http_get_action(h: &core::HttpGetAction) -> Result<Value> {
    let mut o = Obj::new();
    o.string("path", &h.path);
    o.int_or_string_kept("port", &h.port)?;
    o.string("host", &h.host).string("scheme", &h.scheme);
    o.messages("httpHeaders", &h.http_headers, |hd| {
        Ok(Obj::new()
            .string_kept("name", &hd.name)
            .string_kept("value", &hd.value)
            .build())
    })?;
    Ok(o.build())
}

fn tcp_socket_action(t: &core::TcpSocketAction) -> Result<Value> {
    let mut o = Obj::new();
    o.int_or_string_kept("port", &t.port)?;
    Ok(o.string("host", &t.host).build())
}

/// `Lifecycle` (`postStart`, `preStop` handlers).
pub fn lifecycle(l: &core::Lifecycle) -> Result<Value> {
    let mut o = Obj::new();
    o.message("postStart", &l.post_start, lifecycle_handler)?;
    o.message("preStop", &l.pre_stop, lifecycle_handler)?;
    Ok(o.build())
}

fn lifecycle_handler(h: &core::LifecycleHandler) -> Result<Value> {
    let mut o = Obj::new();
    o.message("exec", &h.exec, exec_action)?;
    o.message("httpGet", &h.http_get, http_get_action)?;
    o.message("tcpSocket", &h.tcp_socket, tcp_socket_action)?;
    o.message("sleep", &h.sleep, |s| {
        Ok(Obj::new().int_kept("seconds", s.seconds).build())
    })?;
    Ok(o.build())
}

/// The container-level `SecurityContext`.
pub fn security_context(s: &core::SecurityContext) -> Result<Value> {
    let mut o = Obj::new();
    o.message("capabilities", &s.capabilities, |c| {
        Ok(Obj::new()
            .strings("add", &c.add)
            .strings("drop", &c.drop)
            .build())
    })?;
    o.boolean_kept("privileged", s.privileged);
    o.message("seLinuxOptions", &s.se_linux_options, se_linux_options)?;
    o.message("windowsOptions", &s.windows_options, windows_options)?;
    o.int_kept("runAsUser", s.run_as_user)
        .int_kept("runAsGroup", s.run_as_group)
        .boolean_kept("runAsNonRoot", s.run_as_non_root)
        .boolean_kept("readOnlyRootFilesystem", s.read_only_root_filesystem)
        .boolean_kept("allowPrivilegeEscalation", s.allow_privilege_escalation)
        .string_kept("procMount", &s.proc_mount);
    o.message("seccompProfile", &s.seccomp_profile, seccomp_profile)?;
    o.message("appArmorProfile", &s.app_armor_profile, app_armor_profile)?;
    Ok(o.build())
}

/// `SELinuxOptions`.
pub fn se_linux_options(s: &core::SeLinuxOptions) -> Result<Value> {
    Ok(Obj::new()
        .string("user", &s.user)
        .string("role", &s.role)
        .string("type", &s.r#type)
        .string("level", &s.level)
        .build())
}

/// `WindowsSecurityContextOptions`.
pub fn windows_options(w: &core::WindowsSecurityContextOptions) -> Result<Value> {
    Ok(Obj::new()
        .string_kept("gmsaCredentialSpecName", &w.gmsa_credential_spec_name)
        .string_kept("gmsaCredentialSpec", &w.gmsa_credential_spec)
        .string_kept("runAsUserName", &w.run_as_user_name)
        .boolean_kept("hostProcess", w.host_process)
        .build())
}

/// `SeccompProfile`; `type` is required.
pub fn seccomp_profile(s: &core::SeccompProfile) -> Result<Value> {
    Ok(Obj::new()
        .string_kept("type", &s.r#type)
        .string_kept("localhostProfile", &s.localhost_profile)
        .build())
}

/// `AppArmorProfile`; `type` is required.
pub fn app_armor_profile(s: &core::AppArmorProfile) -> Result<Value> {
    Ok(Obj::new()
        .string_kept("type", &s.r#type)
        .string_kept("localhostProfile", &s.localhost_profile)
        .build())
}
