//! Images without a registry. [`busybox_archive`] builds a single-layer OCI image archive
//! from the host's static busybox (deterministic: the same busybox gives the same
//! digest), and [`import`] loads OCI/docker archives into a node's containerd, in the
//! `k8s.io` namespace its CRI plugin reads (through `ctr`, containerd's own client).

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::json;
use sha2::{Digest, Sha256};

/// The image a newcomer's first manifest can use.
pub const BUSYBOX_IMAGE: &str = "keelson.local/busybox:stable";
/// The sandbox ("pause") image every pod's sandbox runs.
pub const PAUSE_IMAGE: &str = "keelson.local/pause:3.10";

/// Building or importing an image failed.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, #[source] source: std::io::Error },
    #[error("importing {archive}: {message}")]
    Import { archive: PathBuf, message: String },
}

const APPLETS: &[&str] = &[
    "sh", "ash", "sleep", "httpd", "nc", "wget", "cat", "ls", "echo", "ip", "ifconfig", "hostname", "ps", "id", "env", "true", "false", "mkdir", "rm", "cp", "mv", "touch",
    "grep", "sed", "awk", "head", "tail", "wc", "date", "kill", "nslookup", "ping", "top", "free", "df", "du", "vi", "test", "[", "printf", "uname", "mount", "chmod", "find",
    "xargs", "tee", "dd", "yes", "seq", "sort", "uniq", "tr", "cut", "basename", "dirname", "pwd", "stat", "which", "timeout", "watch", "nslookup", "less", "more", "tar", "gzip",
    "gunzip", "base64", "md5sum", "sha256sum", "hexdump", "ln", "readlink", "realpath", "trap", "usleep", "netstat", "route", "traceroute", "telnet", "fuser", "pidof", "pgrep",
    "pkill", "killall", "nohup", "init",
];

fn digest(bytes: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(bytes))
}

fn header(path: &str, size: u64, mode: u32, kind: tar::EntryType) -> tar::Header {
    let mut h = tar::Header::new_ustar();
    h.set_path(path).expect("short paths");
    h.set_size(size);
    h.set_mode(mode);
    h.set_entry_type(kind);
    h.set_mtime(0);
    h.set_uid(0);
    h.set_gid(0);
    h.set_cksum();
    h
}

/// The root filesystem layer: busybox, its applets as symlinks, /etc, /tmp, /www.
fn layer(busybox: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    for dir in ["bin/", "dev/", "etc/", "proc/", "root/", "sys/", "tmp/", "var/", "www/"] {
        let mode = if dir == "tmp/" { 0o1777 } else { 0o755 };
        b.append(&header(dir, 0, mode, tar::EntryType::Directory), std::io::empty())?;
    }
    b.append(&header("bin/busybox", busybox.len() as u64, 0o755, tar::EntryType::Regular), busybox)?;
    let mut applets: Vec<&str> = APPLETS.to_vec();
    applets.sort_unstable();
    applets.dedup();
    for a in applets {
        let mut h = header(&format!("bin/{a}"), 0, 0o777, tar::EntryType::Symlink);
        h.set_link_name("busybox")?;
        h.set_cksum();
        b.append(&h, std::io::empty())?;
    }
    let files: [(&str, &[u8]); 4] = [
        ("etc/group", b"root:x:0:\nnobody:x:65534:\n"),
        ("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"),
        ("etc/hosts", b"127.0.0.1 localhost\n"),
        ("www/index.html", b"hello from keelson\n"),
    ];
    for (path, content) in files {
        b.append(&header(path, content.len() as u64, 0o644, tar::EntryType::Regular), content)?;
    }
    b.into_inner()
}

/// Writes an OCI image archive (oci-layout, index.json, blobs; also a docker-archive
/// manifest.json) of busybox at `busybox` as image `reference` with `cmd`.
pub fn busybox_archive(busybox: &Path, reference: &str, entrypoint: &[&str], cmd: &[&str], out: &Path) -> Result<String, ImageError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ImageError::Io { path: path.clone(), source }
    };
    let bin = std::fs::read(busybox).map_err(io(busybox))?;
    let layer = layer(&bin).map_err(io(out))?;
    let layer_digest = digest(&layer);
    let config = serde_json::to_vec(&json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/bin"], "Entrypoint": if entrypoint.is_empty() { json!(null) } else { json!(entrypoint) }, "Cmd": cmd, "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        "history": [{"created_by": "keelson image build (busybox-static)"}],
    }))
    .expect("serializable");
    let config_digest = digest(&config);
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_digest, "size": layer.len()}],
    }))
    .expect("serializable");
    let manifest_digest = digest(&manifest);
    let tag = reference.rsplit_once(':').map(|(_, t)| t).unwrap_or("latest");
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest_digest, "size": manifest.len(),
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {"io.containerd.image.name": reference, "org.opencontainers.image.ref.name": tag}}],
    }))
    .expect("serializable");
    let hex = |d: &str| d.trim_start_matches("sha256:").to_string();
    let docker = serde_json::to_vec(&json!([{"Config": format!("blobs/sha256/{}", hex(&config_digest)), "RepoTags": [reference], "Layers": [format!("blobs/sha256/{}", hex(&layer_digest))]}])).expect("serializable");
    let mut b = tar::Builder::new(Vec::new());
    let mut put = |path: &str, content: &[u8], kind: tar::EntryType| b.append(&header(path, content.len() as u64, if kind == tar::EntryType::Directory { 0o755 } else { 0o644 }, kind), content);
    put("blobs/", &[], tar::EntryType::Directory).map_err(io(out))?;
    put("blobs/sha256/", &[], tar::EntryType::Directory).map_err(io(out))?;
    for (d, content) in [(&config_digest, &config), (&layer_digest, &layer), (&manifest_digest, &manifest)] {
        put(&format!("blobs/sha256/{}", hex(d)), content, tar::EntryType::Regular).map_err(io(out))?;
    }
    put("index.json", &index, tar::EntryType::Regular).map_err(io(out))?;
    put("manifest.json", &docker, tar::EntryType::Regular).map_err(io(out))?;
    put("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#, tar::EntryType::Regular).map_err(io(out))?;
    let bytes = b.into_inner().map_err(io(out))?;
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent).map_err(io(parent))?;
    }
    let mut f = std::fs::File::create(out).map_err(io(out))?;
    f.write_all(&bytes).map_err(io(out))?;
    Ok(manifest_digest)
}

/// Imports `archive` into the containerd at `socket` (namespace `k8s.io`).
pub async fn import(socket: &Path, archive: &Path) -> Result<(), ImageError> {
    let out = tokio::process::Command::new("ctr")
        .arg("--address")
        .arg(socket)
        .args(["--namespace", "k8s.io", "images", "import", "--no-unpack=false"])
        .arg(archive)
        .output()
        .await
        .map_err(|e| ImageError::Import { archive: archive.into(), message: format!("running ctr: {e}") })?;
    if !out.status.success() {
        return Err(ImageError::Import { archive: archive.into(), message: String::from_utf8_lossy(&out.stderr).trim().to_string() });
    }
    Ok(())
}

/// Every `.tar` archive in `dir` (the node's air-gap images), in name order.
pub fn archives_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir).into_iter().flatten().flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "tar")).collect();
    v.sort();
    v
}

/// Writes the built-in images (busybox and pause) into `dir` if they are not there.
pub fn ensure_builtin_archives(busybox: &Path, dir: &Path) -> Result<Vec<PathBuf>, ImageError> {
    let wanted = [
        (dir.join("keelson-busybox.tar"), BUSYBOX_IMAGE, &[][..], &["sh"][..]),
        (dir.join("keelson-pause.tar"), PAUSE_IMAGE, &["/bin/sleep"][..], &["2147483647"][..]),
    ];
    let mut out = Vec::new();
    for (path, reference, entrypoint, cmd) in wanted {
        if !path.exists() {
            busybox_archive(busybox, reference, entrypoint, cmd, &path)?;
        }
        out.push(path);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archives_are_deterministic_oci_layouts() {
        let tmp = tempfile::tempdir().unwrap();
        let fake = tmp.path().join("busybox");
        std::fs::write(&fake, b"\x7fELF not really busybox").unwrap();
        let a = busybox_archive(&fake, "example.local/x:1", &[], &["sh"], &tmp.path().join("a.tar")).unwrap();
        let b = busybox_archive(&fake, "example.local/x:1", &[], &["sh"], &tmp.path().join("b.tar")).unwrap();
        assert_eq!(a, b, "same input, same digest");
        assert_eq!(std::fs::read(tmp.path().join("a.tar")).unwrap(), std::fs::read(tmp.path().join("b.tar")).unwrap());
        let mut ar = tar::Archive::new(std::fs::File::open(tmp.path().join("a.tar")).unwrap());
        let mut names = Vec::new();
        let mut index = String::new();
        for e in ar.entries().unwrap() {
            let mut e = e.unwrap();
            let name = e.path().unwrap().display().to_string();
            if name == "index.json" {
                std::io::Read::read_to_string(&mut e, &mut index).unwrap();
            }
            names.push(name);
        }
        assert!(names.contains(&"oci-layout".to_string()) && names.contains(&format!("blobs/sha256/{}", a.trim_start_matches("sha256:"))));
        let index: serde_json::Value = serde_json::from_str(&index).unwrap();
        assert_eq!(index["manifests"][0]["annotations"]["io.containerd.image.name"], "example.local/x:1");
        assert_eq!(index["manifests"][0]["digest"], a);
    }
}
