//! A container's environment, as the kubelet makes it: `envFrom` first, then `env` in
//! order (later entries win), `valueFrom` resolved against ConfigMaps, Secrets, the pod's
//! own fields and the container's resources, and `$(VAR)` references expanded.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret};
use kube::api::Api;

use super::volumes::pod_field;

/// Resolving the environment failed (the kubelet's `CreateContainerConfigError`).
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    #[error("configmap \"{0}\" not found")]
    ConfigMapMissing(String),
    #[error("secret \"{0}\" not found")]
    SecretMissing(String),
    #[error("couldn't find key {key} in {what} {namespace}/{name}")]
    KeyMissing { key: String, what: &'static str, namespace: String, name: String },
    #[error("reading {what} \"{name}\": {source}")]
    Api { what: &'static str, name: String, #[source] source: kube::Error },
    #[error("unsupported field path {0}")]
    Field(String),
}

/// Expands `$(NAME)` from `vars`; `$$` escapes; an unknown reference stays as written.
pub fn expand(input: &str, vars: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(input.len());
    let bytes = input.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'$' && i + 1 < bytes.len() {
            if bytes[i + 1] == b'$' {
                out.push('$');
                i += 2;
                continue;
            }
            if bytes[i + 1] == b'(' {
                if let Some(end) = input[i + 2..].find(')') {
                    let name = &input[i + 2..i + 2 + end];
                    match vars.get(name) {
                        Some(v) => out.push_str(v),
                        None => out.push_str(&input[i..i + 3 + end]),
                    }
                    i += 3 + end;
                    continue;
                }
            }
        }
        let ch = input[i..].chars().next().unwrap_or('\0');
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

/// A container resource as `resourceFieldRef` gives it (limits default to the node's
/// allocatable in the kubelet; here to the request, else 0).
fn resource_field(c: &Container, resource: &str, divisor: Option<&str>) -> Option<String> {
    let (kind, name) = resource.split_once('.')?;
    let r = c.resources.as_ref()?;
    let map = if kind == "limits" { r.limits.as_ref().or(r.requests.as_ref()) } else { r.requests.as_ref() }?;
    let q = map.get(name)?.0.clone();
    match (name, divisor) {
        ("cpu", Some("1m")) => super::resources::cpu_millis(&q).map(|m| m.to_string()),
        ("cpu", _) => super::resources::cpu_millis(&q).map(|m| ((m + 999) / 1000).to_string()),
        ("memory", Some(d)) => Some((super::resources::bytes(&q)? / super::resources::bytes(d)?.max(1)).to_string()),
        ("memory", None) => super::resources::bytes(&q).map(|b| b.to_string()),
        _ => Some(q),
    }
}


/// The environment of container `c` of `pod`, in order.
pub async fn resolve(client: &kube::Client, pod: &Pod, c: &Container) -> Result<Vec<(String, String)>, EnvError> {
    let ns = pod.metadata.namespace.clone().unwrap_or_else(|| "default".into());
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let mut vars: BTreeMap<String, String> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut set = |vars: &mut BTreeMap<String, String>, k: String, v: String| {
        if !vars.contains_key(&k) {
            order.push(k.clone());
        }
        vars.insert(k, v);
    };
    for from in c.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        if let Some(r) = &from.config_map_ref {
            match cms.get_opt(&r.name).await.map_err(|source| EnvError::Api { what: "configmap", name: r.name.clone(), source })? {
                Some(cm) => {
                    for (k, v) in cm.data.unwrap_or_default() {
                        set(&mut vars, format!("{prefix}{k}"), v);
                    }
                }
                None if r.optional == Some(true) => {}
                None => return Err(EnvError::ConfigMapMissing(r.name.clone())),
            }
        }
        if let Some(r) = &from.secret_ref {
            match secrets.get_opt(&r.name).await.map_err(|source| EnvError::Api { what: "secret", name: r.name.clone(), source })? {
                Some(s) => {
                    for (k, v) in s.data.unwrap_or_default() {
                        set(&mut vars, format!("{prefix}{k}"), String::from_utf8_lossy(&v.0).into_owned());
                    }
                }
                None if r.optional == Some(true) => {}
                None => return Err(EnvError::SecretMissing(r.name.clone())),
            }
        }
    }
    for e in c.env.iter().flatten() {
        let value = if let Some(v) = &e.value {
            Some(expand(v, &vars))
        } else if let Some(from) = &e.value_from {
            if let Some(r) = &from.config_map_key_ref {
                let cm = cms.get_opt(&r.name).await.map_err(|source| EnvError::Api { what: "configmap", name: r.name.clone(), source })?;
                match cm.and_then(|cm| cm.data.and_then(|d| d.get(&r.key).cloned())) {
                    Some(v) => Some(v),
                    None if r.optional == Some(true) => None,
                    None => return Err(EnvError::KeyMissing { key: r.key.clone(), what: "configmap", namespace: ns.clone(), name: r.name.clone() }),
                }
            } else if let Some(r) = &from.secret_key_ref {
                let s = secrets.get_opt(&r.name).await.map_err(|source| EnvError::Api { what: "secret", name: r.name.clone(), source })?;
                match s.and_then(|s| s.data.and_then(|d| d.get(&r.key).map(|b| String::from_utf8_lossy(&b.0).into_owned()))) {
                    Some(v) => Some(v),
                    None if r.optional == Some(true) => None,
                    None => return Err(EnvError::KeyMissing { key: r.key.clone(), what: "secret", namespace: ns.clone(), name: r.name.clone() }),
                }
            } else if let Some(f) = &from.field_ref {
                Some(pod_field(pod, &f.field_path).ok_or_else(|| EnvError::Field(f.field_path.clone()))?)
            } else if let Some(r) = &from.resource_field_ref {
                resource_field(c, &r.resource, r.divisor.as_ref().map(|d| d.0.as_str()))
            } else {
                None
            }
        } else {
            Some(String::new())
        };
        if let Some(v) = value {
            set(&mut vars, e.name.clone(), v);
        }
    }
    Ok(order.into_iter().map(|k| {
        let v = vars[&k].clone();
        (k, v)
    }).collect())
}

/// The command and args with `$(VAR)` references expanded from the environment.
pub fn expand_command(c: &Container, env: &[(String, String)]) -> (Vec<String>, Vec<String>) {
    let vars: BTreeMap<String, String> = env.iter().cloned().collect();
    let f = |v: &Option<Vec<String>>| v.iter().flatten().map(|s| expand(s, &vars)).collect();
    (f(&c.command), f(&c.args))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_expand_escapes_stay_and_unknowns_are_kept() {
        let vars: BTreeMap<String, String> = [("A".to_string(), "1".to_string()), ("B".to_string(), "two".to_string())].into();
        assert_eq!(expand("$(A)-$(B)", &vars), "1-two");
        assert_eq!(expand("$$(A)", &vars), "$(A)");
        assert_eq!(expand("$(NOPE) $", &vars), "$(NOPE) $");
        assert_eq!(expand("é$(A)", &vars), "é1");
    }
}
