//! The audit log: one JSON line per mutating request (who, what, when, result), in a
//! file rotated by size (`PATH` → `PATH.1` → … → `PATH.N`, the oldest dropped).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::Serialize;

/// One audited request.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
    /// RFC 3339 time the request was answered.
    pub time: String,
    pub user: String,
    pub groups: Vec<String>,
    /// The user the request was made as, when impersonating.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub impersonated_user: Option<String>,
    pub verb: String,
    pub request_uri: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    pub code: u16,
    pub source: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub user_agent: String,
    /// kubectl's `Kubectl-Command` header, when present.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub command: String,
}

struct Writer {
    file: File,
    size: u64,
}

/// A size-rotated JSON-lines audit log.
pub struct AuditLog {
    path: PathBuf,
    max_bytes: u64,
    backups: usize,
    writer: Mutex<Writer>,
}

impl AuditLog {
    pub fn open(path: &Path, max_bytes: u64, backups: usize) -> std::io::Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let size = file.metadata()?.len();
        Ok(Self { path: path.to_path_buf(), max_bytes: max_bytes.max(1024), backups, writer: Mutex::new(Writer { file, size }) })
    }

    fn backup(&self, n: usize) -> PathBuf {
        let mut p = self.path.clone().into_os_string();
        p.push(format!(".{n}"));
        p.into()
    }

    fn rotate(&self, w: &mut Writer) -> std::io::Result<()> {
        if self.backups == 0 {
            w.file = OpenOptions::new().create(true).write(true).truncate(true).open(&self.path)?;
        } else {
            let _ = std::fs::remove_file(self.backup(self.backups));
            for n in (1..self.backups).rev() {
                let _ = std::fs::rename(self.backup(n), self.backup(n + 1));
            }
            std::fs::rename(&self.path, self.backup(1))?;
            w.file = OpenOptions::new().create(true).append(true).open(&self.path)?;
        }
        w.size = 0;
        Ok(())
    }

    /// Appends one entry; failures are logged, never returned to the request.
    pub fn record(&self, entry: &AuditEntry) {
        let mut line = serde_json::to_vec(entry).expect("audit entries serialize");
        line.push(b'\n');
        let mut w = self.writer.lock().expect("audit lock");
        if w.size > 0 && w.size + line.len() as u64 > self.max_bytes {
            if let Err(e) = self.rotate(&mut w) {
                tracing::warn!(error = %e, path = %self.path.display(), "audit log rotation failed");
            }
        }
        match w.file.write_all(&line) {
            Ok(()) => w.size += line.len() as u64,
            Err(e) => tracing::warn!(error = %e, path = %self.path.display(), "audit log write failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(i: usize) -> AuditEntry {
        AuditEntry {
            time: "2026-11-30T08:00:00Z".into(),
            user: "alice".into(),
            groups: vec!["dev".into()],
            impersonated_user: None,
            verb: "create".into(),
            request_uri: format!("/api/v1/namespaces/default/configmaps?i={i}"),
            resource: "configmaps".into(),
            namespace: "default".into(),
            name: format!("c{i}"),
            code: 201,
            source: "127.0.0.1:5000".into(),
            user_agent: String::new(),
            command: String::new(),
        }
    }

    #[test]
    fn rotates_by_size_and_keeps_n_backups() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let log = AuditLog::open(&path, 1024, 2).unwrap();
        for i in 0..100 {
            log.record(&entry(i));
        }
        assert!(std::fs::metadata(&path).unwrap().len() <= 1024);
        assert!(dir.path().join("audit.log.1").exists() && dir.path().join("audit.log.2").exists());
        assert!(!dir.path().join("audit.log.3").exists());
        let last = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = last.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.last().unwrap()["name"], "c99");
        assert_eq!(lines.last().unwrap()["requestUri"], "/api/v1/namespaces/default/configmaps?i=99");
        let older = std::fs::read_to_string(dir.path().join("audit.log.1")).unwrap();
        let first_of_current: serde_json::Value = serde_json::from_str(last.lines().next().unwrap()).unwrap();
        let last_of_older: serde_json::Value = serde_json::from_str(older.lines().last().unwrap()).unwrap();
        let n = |v: &serde_json::Value| v["name"].as_str().unwrap()[1..].parse::<usize>().unwrap();
        assert_eq!(n(&last_of_older) + 1, n(&first_of_current), "nothing lost at the rotation boundary");
    }
}
