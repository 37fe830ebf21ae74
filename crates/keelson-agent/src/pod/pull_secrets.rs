//! Registry credentials from a pod's `imagePullSecrets`, matched to an image as kubelet's
//! keyring does. Secrets of type `kubernetes.io/dockerconfigjson` (`.dockerconfigjson`,
//! `{"auths": {…}}`, what `kubectl create secret docker-registry` makes) and the older
//! `kubernetes.io/dockercfg` (`.dockercfg`) are read. A key matches an image when its host
//! matches the image's registry (exactly, or by `*` globs per DNS label) and its path, if
//! any, is a prefix of the image's repository; Docker Hub's legacy keys
//! (`https://index.docker.io/v1/`) stand for `docker.io`. Matches are ordered most
//! specific first, and the pull tries each in turn (kubelet does the same); no match pulls
//! anonymously. The server address passed on is the entry's own `serveraddress` (usually
//! none, as with kubelet: containerd then uses the credentials for the host it resolves).
//! Pure.

use base64::Engine;
use k8s_openapi::api::core::v1::Secret;
use serde::Deserialize;

use crate::runtime::RegistryAuth;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PullSecretError {
    #[error("image pull secret {secret:?} is of type {type_:?}, not kubernetes.io/dockerconfigjson or kubernetes.io/dockercfg")]
    WrongType { secret: String, type_: String },
    #[error("image pull secret {secret:?} has no {key} key")]
    MissingKey { secret: String, key: &'static str },
    #[error("image pull secret {secret:?}: {key} is not a Docker config: {reason}")]
    Unreadable { secret: String, key: &'static str, reason: String },
}

#[derive(Deserialize)]
struct DockerConfigJson {
    #[serde(default)]
    auths: std::collections::BTreeMap<String, DockerAuth>,
}

#[derive(Deserialize, Default)]
struct DockerAuth {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    auth: String,
    #[serde(default, rename = "identitytoken")]
    identity_token: String,
    #[serde(default, rename = "registrytoken")]
    registry_token: String,
    #[serde(default, rename = "serveraddress")]
    server_address: String,
}

/// The registry host and repository path of an image reference, as the Docker
/// reference grammar normalizes it: `busybox` is `docker.io/library/busybox`.
pub fn registry_and_repository(image: &str) -> (String, String) {
    let name = image.split('@').next().unwrap_or(image);
    // A tag is after the last ':' that follows the last '/'.
    let name = match (name.rfind(':'), name.rfind('/')) {
        (Some(colon), slash) if slash.is_none_or(|s| colon > s) => &name[..colon],
        _ => name,
    };
    match name.split_once('/') {
        Some((first, rest)) if first.contains('.') || first.contains(':') || first == "localhost" => (first.to_string(), rest.to_string()),
        Some(_) => ("docker.io".into(), name.to_string()),
        None => ("docker.io".into(), format!("library/{name}")),
    }
}

/// A config key's host and path (`https://r.example.com:5000/team` → `r.example.com:5000`,
/// `team`), Docker Hub's legacy names as `docker.io`.
fn key_host_and_path(key: &str) -> (String, String) {
    let rest = key.split_once("://").map_or(key, |(_, r)| r);
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let host = match host {
        "index.docker.io" | "registry-1.docker.io" | "registry.hub.docker.com" => "docker.io",
        h => h,
    };
    let path = path.trim_end_matches('/');
    let path = if host == "docker.io" && (path == "v1" || path == "v2") { "" } else { path };
    (host.to_ascii_lowercase(), path.to_string())
}

/// Whether `pattern` (DNS labels, each possibly with `*` globs, and a port) matches `host`.
fn host_matches(pattern: &str, host: &str) -> bool {
    let split = |h: &str| -> (Vec<String>, Option<String>) {
        let (name, port) = match h.rsplit_once(':') {
            Some((n, p)) if p.chars().all(|c| c.is_ascii_digit()) => (n, Some(p.to_string())),
            _ => (h, None),
        };
        (name.split('.').map(str::to_ascii_lowercase).collect(), port)
    };
    let ((p_labels, p_port), (h_labels, h_port)) = (split(pattern), split(host));
    p_port == h_port && p_labels.len() == h_labels.len() && p_labels.iter().zip(&h_labels).all(|(p, h)| glob(p, h))
}

/// `*` matches any run of characters within one label.
fn glob(pattern: &str, s: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == s,
        Some((head, tail)) => s.strip_prefix(head).is_some_and(|rest| (0..=rest.len()).any(|i| rest.is_char_boundary(i) && glob(tail, &rest[i..]))),
    }
}

/// The credentials of `secrets` for `image`, most specific key first.
pub fn credentials_for(image: &str, secrets: &[Secret]) -> Result<Vec<RegistryAuth>, PullSecretError> {
    let (registry, repository) = registry_and_repository(image);
    let mut matched: Vec<(usize, RegistryAuth)> = Vec::new();
    for secret in secrets {
        for (key, auth) in entries(secret)? {
            let (host, path) = key_host_and_path(&key);
            let path_ok = path.is_empty() || repository == path || repository.starts_with(&format!("{path}/"));
            if host_matches(&host, &registry) && path_ok {
                let (mut username, mut password) = (auth.username, auth.password);
                if username.is_empty() && !auth.auth.is_empty() {
                    // `auth` is base64 of "user:password".
                    if let Some((u, p)) = base64::engine::general_purpose::STANDARD.decode(auth.auth.trim()).ok().and_then(|b| String::from_utf8(b).ok()).and_then(|s| s.split_once(':').map(|(u, p)| (u.to_string(), p.to_string()))) {
                        (username, password) = (u, p);
                    }
                }
                let specificity = host.len() - host.matches('*').count() * 2 + path.len() * 4;
                matched.push((specificity, RegistryAuth { username, password, server_address: auth.server_address, identity_token: auth.identity_token, registry_token: auth.registry_token }));
            }
        }
    }
    // Stable: among equals, the pod's order of secrets and the config's order of keys.
    matched.sort_by(|a, b| b.0.cmp(&a.0));
    Ok(matched.into_iter().map(|(_, a)| a).collect())
}

fn entries(secret: &Secret) -> Result<Vec<(String, DockerAuth)>, PullSecretError> {
    let name = secret.metadata.name.clone().unwrap_or_default();
    let type_ = secret.type_.clone().unwrap_or_default();
    let data = |key: &'static str| -> Result<Vec<u8>, PullSecretError> {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|b| b.0.clone())
            .or_else(|| secret.string_data.as_ref().and_then(|d| d.get(key)).map(|s| s.clone().into_bytes()))
            .ok_or(PullSecretError::MissingKey { secret: name.clone(), key })
    };
    let unreadable = |key: &'static str, e: serde_json::Error| PullSecretError::Unreadable { secret: name.clone(), key, reason: e.to_string() };
    match type_.as_str() {
        "kubernetes.io/dockerconfigjson" => {
            let cfg: DockerConfigJson = serde_json::from_slice(&data(".dockerconfigjson")?).map_err(|e| unreadable(".dockerconfigjson", e))?;
            Ok(cfg.auths.into_iter().collect())
        }
        "kubernetes.io/dockercfg" => {
            let cfg: std::collections::BTreeMap<String, DockerAuth> = serde_json::from_slice(&data(".dockercfg")?).map_err(|e| unreadable(".dockercfg", e))?;
            Ok(cfg.into_iter().collect())
        }
        _ => Err(PullSecretError::WrongType { secret: name, type_ }),
    }
}

#[cfg(test)]
#[path = "pull_secrets_tests.rs"]
mod tests;
