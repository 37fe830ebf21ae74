//! A pod's volumes on the node, as the kubelet's volume manager lays them out:
//! `PODS_DIR/<uid>/volumes/<plugin>/<name>`. ConfigMap, Secret, downward API and
//! projected volumes are written the way the kubelet's atomic writer does — files in a
//! timestamped directory, a `..data` symlink swapped in one rename, and one symlink per
//! key — so a container sees every update at once and never a half-written file.
//! A `persistentVolumeClaim` volume is the directory of the claim's bound local or
//! hostPath PersistentVolume, created when first mounted.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{ConfigMap, KeyToPath, PersistentVolume, PersistentVolumeClaim, Pod, Secret, Volume};
use kube::api::Api;

use crate::runtime::MountSpec;

/// Preparing a volume failed.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    #[error("{what} \"{name}\" not found")]
    NotFound { what: &'static str, name: String },
    #[error("reading {what} \"{name}\": {source}")]
    Api { what: &'static str, name: String, #[source] source: kube::Error },
    /// The claim has no volume yet (the kubelet's words).
    #[error("error processing PVC {0}: PVC is not bound")]
    Unbound(String),
    #[error("volume {volume}: {message}")]
    Io { volume: String, message: String },
    #[error("volume {0} is not supported by this agent")]
    Unsupported(String),
    #[error("container {container} mounts volume \"{volume}\", which the pod does not declare")]
    Undeclared { container: String, volume: String },
}

/// Files of one volume: relative path → (content, mode).
pub type Files = BTreeMap<String, (Vec<u8>, u32)>;

fn select(data: BTreeMap<String, Vec<u8>>, items: Option<&Vec<KeyToPath>>, default_mode: u32) -> Files {
    match items {
        None => data.into_iter().map(|(k, v)| (k, (v, default_mode))).collect(),
        Some(items) => items
            .iter()
            .filter_map(|i| data.get(&i.key).map(|v| (i.path.clone(), (v.clone(), i.mode.map(|m| m as u32).unwrap_or(default_mode)))))
            .collect(),
    }
}

/// The files of a ConfigMap (data and binaryData).
pub fn configmap_files(cm: &ConfigMap, items: Option<&Vec<KeyToPath>>, default_mode: u32) -> Files {
    let mut data: BTreeMap<String, Vec<u8>> = cm.data.clone().unwrap_or_default().into_iter().map(|(k, v)| (k, v.into_bytes())).collect();
    for (k, v) in cm.binary_data.clone().unwrap_or_default() {
        data.insert(k, v.0);
    }
    select(data, items, default_mode)
}

/// The files of a Secret (its decoded data and stringData).
pub fn secret_files(s: &Secret, items: Option<&Vec<KeyToPath>>, default_mode: u32) -> Files {
    let mut data: BTreeMap<String, Vec<u8>> = s.data.clone().unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect();
    for (k, v) in s.string_data.clone().unwrap_or_default() {
        data.insert(k, v.into_bytes());
    }
    select(data, items, default_mode)
}

/// A downward API field of the pod (`metadata.name`, `metadata.labels`, `spec.nodeName`…).
pub fn pod_field(pod: &Pod, path: &str) -> Option<String> {
    let m = &pod.metadata;
    let map = |m: &Option<BTreeMap<String, String>>| m.as_ref().map(|m| m.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect::<Vec<_>>().join("\n")).unwrap_or_default();
    if let Some(key) = path.strip_prefix("metadata.labels['").and_then(|r| r.strip_suffix("']")) {
        return m.labels.as_ref().and_then(|l| l.get(key).cloned());
    }
    if let Some(key) = path.strip_prefix("metadata.annotations['").and_then(|r| r.strip_suffix("']")) {
        return m.annotations.as_ref().and_then(|l| l.get(key).cloned());
    }
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    Some(match path {
        "metadata.name" => m.name.clone()?,
        "metadata.namespace" => m.namespace.clone()?,
        "metadata.uid" => m.uid.clone()?,
        "metadata.labels" => map(&m.labels),
        "metadata.annotations" => map(&m.annotations),
        "spec.nodeName" => spec?.node_name.clone()?,
        "spec.serviceAccountName" => spec?.service_account_name.clone()?,
        "status.hostIP" => status?.host_ip.clone()?,
        "status.podIP" => status?.pod_ip.clone()?,
        "status.hostIPs" => status?.host_ips.as_ref()?.iter().map(|i| i.ip.clone()).collect::<Vec<_>>().join(","),
        "status.podIPs" => status?.pod_ips.as_ref()?.iter().map(|i| i.ip.clone()).collect::<Vec<_>>().join(","),
        _ => return None,
    })
}

/// Writes `files` into `dir` atomically, as the kubelet's atomic writer does.
pub fn write_atomically(dir: &Path, files: &Files) -> std::io::Result<bool> {
    std::fs::create_dir_all(dir)?;
    let data_link = dir.join("..data");
    if let Ok(current) = std::fs::read_link(&data_link) {
        let current = dir.join(current);
        let same = files.iter().all(|(k, (v, _))| std::fs::read(current.join(k)).ok().as_deref() == Some(v.as_slice()))
            && count_files(&current) == files.len();
        if same {
            return Ok(false);
        }
    }
    let stamp = format!("..{}", jiff::Timestamp::now().strftime("%Y_%m_%d_%H_%M_%S.%f"));
    let fresh = dir.join(&stamp);
    std::fs::create_dir_all(&fresh)?;
    for (path, (content, mode)) in files {
        let target = fresh.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&target, content)?;
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(*mode))?;
    }
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    symlink(&stamp, &tmp)?;
    std::fs::rename(&tmp, &data_link)?;
    let mut tops: Vec<String> = files.keys().map(|k| k.split('/').next().unwrap_or(k).to_string()).collect();
    tops.dedup();
    for top in &tops {
        let link = dir.join(top);
        if std::fs::symlink_metadata(&link).is_err() {
            symlink(format!("..data/{top}"), &link)?;
        }
    }
    for entry in std::fs::read_dir(dir)?.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if name.starts_with("..") && name != "..data" && name != stamp {
            let _ = std::fs::remove_dir_all(entry.path());
        } else if !name.starts_with("..") && !tops.contains(&name) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    Ok(true)
}

fn count_files(dir: &Path) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            n += count_files(&p);
        } else {
            n += 1;
        }
    }
    n
}

/// Where a pod's volume lives on the node.
pub fn volume_dir(pods_dir: &Path, uid: &str, plugin: &str, name: &str) -> PathBuf {
    pods_dir.join(uid).join("volumes").join(plugin).join(name)
}

/// Prepares every volume of `pod` (writing or refreshing its files) and returns the host
/// path of each by volume name.
pub async fn prepare(client: &kube::Client, tokens: &TokenCache, pod: &Pod, pods_dir: &Path) -> Result<BTreeMap<String, PathBuf>, VolumeError> {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let ns = pod.metadata.namespace.clone().unwrap_or_else(|| "default".into());
    let mut out = BTreeMap::new();
    for v in pod.spec.as_ref().and_then(|s| s.volumes.as_ref()).into_iter().flatten() {
        let path = prepare_one(client, tokens, pod, &ns, &uid, v, pods_dir).await?;
        out.insert(v.name.clone(), path);
    }
    Ok(out)
}

async fn prepare_one(client: &kube::Client, tokens: &TokenCache, pod: &Pod, ns: &str, uid: &str, v: &Volume, pods_dir: &Path) -> Result<PathBuf, VolumeError> {
    let io = |e: std::io::Error| VolumeError::Io { volume: v.name.clone(), message: e.to_string() };
    if let Some(host) = &v.host_path {
        let p = PathBuf::from(&host.path);
        if matches!(host.type_.as_deref(), Some("DirectoryOrCreate")) {
            std::fs::create_dir_all(&p).map_err(io)?;
        }
        return Ok(p);
    }
    if let Some(src) = &v.persistent_volume_claim {
        let claim = fetch::<PersistentVolumeClaim>(client, ns, &src.claim_name, "persistentvolumeclaim")
            .await?
            .ok_or_else(|| VolumeError::NotFound { what: "persistentvolumeclaim", name: src.claim_name.clone() })?;
        let bound = claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
        let Some(pv_name) = claim.spec.as_ref().and_then(|s| s.volume_name.clone()).filter(|n| bound && !n.is_empty()) else {
            return Err(VolumeError::Unbound(format!("{ns}/{}", src.claim_name)));
        };
        let pv = Api::<PersistentVolume>::all(client.clone())
            .get_opt(&pv_name)
            .await
            .map_err(|source| VolumeError::Api { what: "persistentvolume", name: pv_name.clone(), source })?
            .ok_or_else(|| VolumeError::NotFound { what: "persistentvolume", name: pv_name.clone() })?;
        let spec = pv.spec.unwrap_or_default();
        let Some(path) = spec.local.map(|l| l.path).or_else(|| spec.host_path.map(|h| h.path)) else {
            return Err(VolumeError::Unsupported(format!("{} (PersistentVolume {pv_name} is neither local nor hostPath)", v.name)));
        };
        let p = PathBuf::from(path);
        if !p.exists() {
            // local-path-provisioner's setup: the directory, writable by any container user.
            std::fs::create_dir_all(&p).map_err(io)?;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o777)).map_err(io)?;
        }
        return Ok(p);
    }
    if let Some(e) = &v.empty_dir {
        let dir = volume_dir(pods_dir, uid, "kubernetes.io~empty-dir", &v.name);
        std::fs::create_dir_all(&dir).map_err(io)?;
        if e.medium.as_deref() == Some("Memory") && !mounted(&dir) {
            let size = e.size_limit.as_ref().and_then(|q| super::resources::bytes(&q.0));
            mount_tmpfs(&dir, size).map_err(io)?;
        }
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).map_err(io)?;
        return Ok(dir);
    }
    let (plugin, files) = if let Some(cm) = &v.config_map {
        let mode = cm.default_mode.unwrap_or(0o644) as u32;
        match fetch::<ConfigMap>(client, ns, &cm.name, "configmap").await? {
            Some(obj) => ("kubernetes.io~configmap", configmap_files(&obj, cm.items.as_ref(), mode)),
            None if cm.optional == Some(true) => ("kubernetes.io~configmap", Files::new()),
            None => return Err(VolumeError::NotFound { what: "configmap", name: cm.name.clone() }),
        }
    } else if let Some(sec) = &v.secret {
        let name = sec.secret_name.clone().unwrap_or_default();
        let mode = sec.default_mode.unwrap_or(0o644) as u32;
        match fetch::<Secret>(client, ns, &name, "secret").await? {
            Some(obj) => ("kubernetes.io~secret", secret_files(&obj, sec.items.as_ref(), mode)),
            None if sec.optional == Some(true) => ("kubernetes.io~secret", Files::new()),
            None => return Err(VolumeError::NotFound { what: "secret", name }),
        }
    } else if let Some(d) = &v.downward_api {
        let mode = d.default_mode.unwrap_or(0o644) as u32;
        let mut files = Files::new();
        for item in d.items.iter().flatten() {
            if let Some(value) = item.field_ref.as_ref().and_then(|f| pod_field(pod, &f.field_path)) {
                files.insert(item.path.clone(), (value.into_bytes(), item.mode.map(|m| m as u32).unwrap_or(mode)));
            }
        }
        ("kubernetes.io~downward-api", files)
    } else if let Some(p) = &v.projected {
        let mode = p.default_mode.unwrap_or(0o644) as u32;
        let mut files = Files::new();
        for source in p.sources.iter().flatten() {
            if let Some(cm) = &source.config_map {
                match fetch::<ConfigMap>(client, ns, &cm.name, "configmap").await? {
                    Some(obj) => files.extend(configmap_files(&obj, cm.items.as_ref(), mode)),
                    None if cm.optional == Some(true) => {}
                    None => return Err(VolumeError::NotFound { what: "configmap", name: cm.name.clone() }),
                }
            }
            if let Some(sec) = &source.secret {
                match fetch::<Secret>(client, ns, &sec.name, "secret").await? {
                    Some(obj) => files.extend(secret_files(&obj, sec.items.as_ref(), mode)),
                    None if sec.optional == Some(true) => {}
                    None => return Err(VolumeError::NotFound { what: "secret", name: sec.name.clone() }),
                }
            }
            if let Some(d) = &source.downward_api {
                for item in d.items.iter().flatten() {
                    if let Some(value) = item.field_ref.as_ref().and_then(|f| pod_field(pod, &f.field_path)) {
                        files.insert(item.path.clone(), (value.into_bytes(), item.mode.map(|m| m as u32).unwrap_or(mode)));
                    }
                }
            }
            if let Some(t) = &source.service_account_token {
                let token = tokens.token(client, pod, ns, t.expiration_seconds.unwrap_or(3607), t.audience.as_deref()).await?;
                files.insert(t.path.clone(), (token.into_bytes(), 0o600.min(mode)));
            }
        }
        ("kubernetes.io~projected", files)
    } else {
        return Err(VolumeError::Unsupported(v.name.clone()));
    };
    let dir = volume_dir(pods_dir, uid, plugin, &v.name);
    write_atomically(&dir, &files).map_err(io)?;
    Ok(dir)
}

/// Whether `dir` is a mount point (in `/proc/self/mounts`).
fn mounted(dir: &Path) -> bool {
    let d = dir.display().to_string();
    std::fs::read_to_string("/proc/self/mounts").unwrap_or_default().lines().any(|l| l.split(' ').nth(1) == Some(d.as_str()))
}

/// A memory-backed emptyDir: tmpfs, limited to `size` bytes when the volume sets a sizeLimit.
fn mount_tmpfs(dir: &Path, size: Option<i64>) -> std::io::Result<()> {
    let c = |s: &str| std::ffi::CString::new(s).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e));
    let target = c(&dir.display().to_string())?;
    let options = c(&match size {
        Some(b) => format!("mode=0777,size={b}"),
        None => "mode=0777".into(),
    })?;
    let fstype = c("tmpfs")?;
    // SAFETY: mount(2) with NUL-terminated strings that outlive the call.
    let rc = unsafe { libc::mount(fstype.as_ptr(), target.as_ptr(), fstype.as_ptr(), libc::MS_NOSUID | libc::MS_NODEV, options.as_ptr().cast()) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Unmounts every mount under `dir` (memory-backed volumes), deepest first, so the
/// folder can be removed.
pub fn unmount_under(dir: &Path) {
    let prefix = format!("{}/", dir.display());
    let mut points: Vec<String> = std::fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(1).map(String::from))
        .filter(|p| p.starts_with(&prefix))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in points {
        if let Ok(c) = std::ffi::CString::new(p) {
            // SAFETY: umount2(2) on a NUL-terminated path.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
    }
}

/// The host file behind a container's termination message (mounted at its
/// `terminationMessagePath`), created empty and writable.
pub fn termination_log(pods_dir: &Path, uid: &str, container: &str, attempt: u32) -> std::io::Result<PathBuf> {
    let dir = pods_dir.join(uid).join("containers").join(container);
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(format!("{attempt}-termination-log"));
    std::fs::write(&path, b"")?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))?;
    Ok(path)
}

/// A finished container's termination message: its file (at most 4 KiB, as the kubelet
/// reads), else with `FallbackToLogsOnError` after a failure the end of its log.
pub fn termination_message(pods_dir: &Path, uid: &str, container: &str, attempt: u32, log: Option<&Path>, fallback_to_logs: bool, failed: bool) -> String {
    let file = pods_dir.join(uid).join("containers").join(container).join(format!("{attempt}-termination-log"));
    let mut msg = std::fs::read(&file).unwrap_or_default();
    msg.truncate(4096);
    if msg.is_empty() && fallback_to_logs && failed {
        if let Some(text) = log.and_then(|p| std::fs::read_to_string(p).ok()) {
            let (lines, _) = crate::kubelet_api::logs::parse(&text);
            let start = lines.len().saturating_sub(80);
            let tail = crate::kubelet_api::logs::render(&lines[start..], false);
            let bytes = tail.as_bytes();
            msg = bytes[bytes.len().saturating_sub(2048)..].to_vec();
        }
    }
    String::from_utf8_lossy(&msg).into_owned()
}

async fn fetch<K>(client: &kube::Client, ns: &str, name: &str, what: &'static str) -> Result<Option<K>, VolumeError>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    Api::<K>::namespaced(client.clone(), ns).get_opt(name).await.map_err(|source| VolumeError::Api { what, name: name.into(), source })
}

/// Bound service-account tokens the agent holds, one per (pod, account, audience,
/// lifetime), each reused until 80 % of its lifetime has passed, as the kubelet's token
/// manager does, so a volume refresh does not ask the API for a new token every time.
#[derive(Default)]
pub struct TokenCache(std::sync::Mutex<HashMap<TokenKey, (String, std::time::Instant, std::time::Duration)>>);

type TokenKey = (String, String, Option<String>, i64);

impl TokenCache {
    /// A token for `pod`'s service account: the cached one while it is fresh, else a new
    /// one from the TokenRequest API.
    pub async fn token(&self, client: &kube::Client, pod: &Pod, ns: &str, seconds: i64, audience: Option<&str>) -> Result<String, VolumeError> {
        let sa = pod.spec.as_ref().and_then(|s| s.service_account_name.clone()).unwrap_or_else(|| "default".into());
        let key = (pod.metadata.uid.clone().unwrap_or_default(), sa.clone(), audience.map(str::to_string), seconds);
        if let Some(token) = self.fresh(&key, std::time::Instant::now()) {
            return Ok(token);
        }
        let lifetime = seconds.max(600);
        let body = serde_json::json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": lifetime, "audiences": audience.map(|a| vec![a]).unwrap_or_default(),
                     "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": pod.metadata.name, "uid": pod.metadata.uid}}});
        let req = http::Request::post(format!("/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token"))
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&body).unwrap_or_default())
            .map_err(|e| VolumeError::Io { volume: "token".into(), message: e.to_string() })?;
        let v: serde_json::Value = client.request(req).await.map_err(|source| VolumeError::Api { what: "serviceaccount token", name: sa.clone(), source })?;
        let token = v["status"]["token"].as_str().unwrap_or_default().to_string();
        self.keep(key, token.clone(), std::time::Duration::from_secs(lifetime as u64), std::time::Instant::now());
        Ok(token)
    }

    /// The cached token of `key` if at `now` it has lived under 80 % of its lifetime (when
    /// the kubelet, too, asks for a new one).
    fn fresh(&self, key: &TokenKey, now: std::time::Instant) -> Option<String> {
        let m = self.0.lock().expect("token cache lock");
        let (token, at, lifetime) = m.get(key)?;
        (now.saturating_duration_since(*at) < lifetime.mul_f64(0.8)).then(|| token.clone())
    }

    /// Caches `token`, got at `now`, and drops the tokens expired by then.
    fn keep(&self, key: TokenKey, token: String, lifetime: std::time::Duration, now: std::time::Instant) {
        let mut m = self.0.lock().expect("token cache lock");
        m.retain(|_, (_, at, life)| now.saturating_duration_since(*at) < *life);
        m.insert(key, (token, now, lifetime));
    }
}

/// The mounts of one container, from its volumeMounts and the prepared volumes.
pub fn mounts(container: &k8s_openapi::api::core::v1::Container, volumes: &BTreeMap<String, PathBuf>) -> Result<Vec<MountSpec>, VolumeError> {
    let mut out = Vec::new();
    for m in container.volume_mounts.iter().flatten() {
        let Some(base) = volumes.get(&m.name) else {
            return Err(VolumeError::Undeclared { container: container.name.clone(), volume: m.name.clone() });
        };
        let host = match m.sub_path.as_deref().filter(|s| !s.is_empty()) {
            Some(sub) => base.join(sub),
            None => base.clone(),
        };
        out.push(MountSpec { container_path: m.mount_path.clone(), host_path: host.display().to_string(), read_only: m.read_only.unwrap_or(false) });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_token_is_reused_until_80_percent_of_its_lifetime_and_expired_ones_are_dropped() {
        use std::time::{Duration, Instant};
        let cache = TokenCache::default();
        let t0 = Instant::now();
        let key = |uid: &str| (uid.to_string(), "default".to_string(), None, 3607);
        cache.keep(key("a"), "tok-a".into(), Duration::from_secs(1000), t0);
        assert_eq!(cache.fresh(&key("a"), t0 + Duration::from_secs(799)).as_deref(), Some("tok-a"));
        assert_eq!(cache.fresh(&key("a"), t0 + Duration::from_secs(800)), None, "renewed at 80 %");
        assert_eq!(cache.fresh(&key("b"), t0), None, "another pod's key");
        // Keeping a token after another's expiry drops the expired one.
        cache.keep(key("b"), "tok-b".into(), Duration::from_secs(1000), t0 + Duration::from_secs(1001));
        let m = cache.0.lock().unwrap();
        assert_eq!(m.keys().map(|k| k.0.as_str()).collect::<Vec<_>>(), vec!["b"]);
    }

    #[test]
    fn atomic_writes_swap_the_data_link_and_keep_per_key_links() {
        let tmp = tempfile::tempdir().unwrap();
        let mut files = Files::new();
        files.insert("a".into(), (b"1".to_vec(), 0o644));
        files.insert("b".into(), (b"2".to_vec(), 0o600));
        assert!(write_atomically(tmp.path(), &files).unwrap());
        assert_eq!(std::fs::read(tmp.path().join("a")).unwrap(), b"1");
        assert!(!write_atomically(tmp.path(), &files).unwrap(), "unchanged content is not rewritten");
        files.insert("a".into(), (b"changed".to_vec(), 0o644));
        files.remove("b");
        assert!(write_atomically(tmp.path(), &files).unwrap());
        assert_eq!(std::fs::read(tmp.path().join("a")).unwrap(), b"changed");
        assert!(std::fs::symlink_metadata(tmp.path().join("b")).is_err(), "a removed key disappears");
        let stamps = std::fs::read_dir(tmp.path()).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().starts_with("..2")).count();
        assert_eq!(stamps, 1, "old generations are removed");
    }

    #[test]
    fn configmap_items_select_keys_and_paths() {
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "c"}, "data": {"x": "1", "y": "2"}})).unwrap();
        let items: Vec<KeyToPath> = serde_json::from_value(json!([{"key": "y", "path": "dir/why", "mode": 0o400}])).unwrap();
        let f = configmap_files(&cm, Some(&items), 0o644);
        assert_eq!(f.len(), 1);
        assert_eq!(f["dir/why"], (b"2".to_vec(), 0o400));
        assert_eq!(configmap_files(&cm, None, 0o644).len(), 2);
    }

    #[test]
    fn downward_fields_of_the_pod() {
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "ns", "labels": {"app": "web", "tier": "a"}},
            "spec": {"nodeName": "n1", "containers": []}, "status": {"podIP": "10.42.0.9"}})).unwrap();
        assert_eq!(pod_field(&pod, "metadata.name").as_deref(), Some("p"));
        assert_eq!(pod_field(&pod, "metadata.labels").as_deref(), Some("app=\"web\"\ntier=\"a\""));
        assert_eq!(pod_field(&pod, "metadata.labels['app']").as_deref(), Some("web"));
        assert_eq!(pod_field(&pod, "spec.nodeName").as_deref(), Some("n1"));
        assert_eq!(pod_field(&pod, "status.podIP").as_deref(), Some("10.42.0.9"));
        assert_eq!(pod_field(&pod, "spec.nope"), None);
    }
}
