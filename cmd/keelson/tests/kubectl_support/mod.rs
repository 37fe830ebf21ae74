//! Helpers of the kubectl end-to-end tests: a 3-replica `keelson` cluster in a tempdir,
//! a `Kubectl` runner (exit code, stdout, stderr; per-test HOME and cache directory),
//! background `kubectl get -w` watchers, and small polling utilities.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use keelson_runner::{Cluster, ClusterSpec};
use serde_json::Value;

/// The dispatcher that picks the kubectl matching the server's minor version.
pub const KUBECTL: &str = "/usr/bin/kubectl";
/// Directory of the versioned kubectl binaries (`kubectl.1.27` … `kubectl.1.33`).
pub const KUBECTL_VERSIONS_DIR: &str = "/usr/lib/google-cloud-sdk/bin";

/// Longest a single (non-watch) kubectl invocation may take before the test fails.
const COMMAND_DEADLINE: Duration = Duration::from_secs(90);

/// Tests take this lock shared; the failover test takes it exclusively so that its
/// timing bounds (a new leader within seconds) are not measured on a machine busy
/// with other clusters.
static MACHINE: RwLock<()> = RwLock::new(());

pub fn shared_machine() -> RwLockReadGuard<'static, ()> {
    MACHINE.read().unwrap_or_else(|e| e.into_inner())
}

pub fn exclusive_machine() -> RwLockWriteGuard<'static, ()> {
    MACHINE.write().unwrap_or_else(|e| e.into_inner())
}

/// The fixtures directory (`cmd/keelson/tests/fixtures`).
pub fn fixtures() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map(std::path::PathBuf::from).unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()).join("tests").join("fixtures")
}

/// A fixture's path as a string, for `-f`.
pub fn fixture(name: &str) -> String {
    let p = fixtures().join(name);
    assert!(p.exists(), "fixture {} is missing", p.display());
    p.display().to_string()
}

/// A running 3-replica cluster plus the temporary directories of one test.
pub struct TestCluster {
    pub cluster: Cluster,
    /// Holds the cluster directory and the kubectl HOME; removed on drop.
    pub tmp: tempfile::TempDir,
}

impl TestCluster {
    pub async fn start() -> Self {
        Self::start_with(&[]).await
    }

    /// Servers without the scheduler and controller manager (`--no-components`): for
    /// tests of the API's own output, where controllers acting on what the test creates
    /// would only add objects to count.
    pub async fn start_without_components() -> Self {
        Self::start_with(&["--no-components"]).await
    }

    async fn start_with(extra_args: &[&str]) -> Self {
        assert!(
            Path::new(KUBECTL).exists(),
            "these tests drive the real kubectl, expected at {KUBECTL} (with versioned binaries in {KUBECTL_VERSIONS_DIR}); install kubectl"
        );
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut spec = ClusterSpec::loopback(3, PathBuf::from(env!("CARGO_BIN_EXE_keelson")), tmp.path().join("cluster"));
        spec.server_args = extra_args.iter().map(|s| s.to_string()).collect();
        let cluster = Cluster::start(spec, |m| eprintln!("cluster: {m}")).await.expect("the 3-replica cluster starts");
        let tc = Self { cluster, tmp };
        // `start` returns once the API ports accept connections; the built-in namespaces
        // are created asynchronously, so wait until `default` is there on every replica.
        let k = tc.kubectl();
        for i in 1..=3 {
            let kc = k.context(&format!("keelson-{i}"));
            eventually(Duration::from_secs(30), &format!("keelson-{i} serves namespace default"), || {
                let o = kc.run(&["get", "namespace", "default", "-o", "name"]);
                (o.code == 0 && o.stdout.trim() == "namespace/default").then_some(()).ok_or_else(|| o.to_string())
            });
        }
        tc
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.cluster.kubeconfig_path()
    }

    /// A kubectl (the dispatcher) with a HOME of its own under this test's tempdir.
    pub fn kubectl(&self) -> Kubectl {
        let home = self.tmp.path().join("home");
        std::fs::create_dir_all(&home).expect("kubectl home");
        Kubectl {
            bin: PathBuf::from(KUBECTL),
            kubeconfig: self.kubeconfig(),
            home,
            context: None,
            namespace: None,
            request_timeout: "20s".into(),
        }
    }

    /// `https://127.0.0.1:PORT` of server `i` (0-based).
    pub fn api_url(&self, i: usize) -> String {
        format!("https://{}", self.cluster.manifest().members[i].api_addr)
    }

    /// Context name of server `i` (0-based).
    pub fn context_name(&self, i: usize) -> String {
        self.cluster.manifest().members[i].name.clone()
    }

    pub async fn stop(self) {
        let TestCluster { cluster, tmp } = self;
        cluster.stop(Duration::from_secs(10)).await.expect("cluster stops");
        drop(tmp);
    }
}

/// What one kubectl run printed.
#[derive(Clone, Debug)]
pub struct Output {
    pub args: Vec<String>,
    /// Exit code; -1 if killed by a signal or by the deadline.
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    pub fn success(&self) -> bool {
        self.code == 0
    }
}

impl std::fmt::Display for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`kubectl {}` exited {}\n--- stdout ---\n{}\n--- stderr ---\n{}", self.args.join(" "), self.code, self.stdout, self.stderr)
    }
}

/// Runs kubectl against a test cluster.
#[derive(Clone, Debug)]
pub struct Kubectl {
    pub bin: PathBuf,
    pub kubeconfig: PathBuf,
    pub home: PathBuf,
    pub context: Option<String>,
    pub namespace: Option<String>,
    pub request_timeout: String,
}

impl Kubectl {
    /// The same kubectl, talking to the replica of context `name`.
    pub fn context(&self, name: &str) -> Kubectl {
        Kubectl { context: Some(name.to_string()), ..self.clone() }
    }

    /// The same kubectl, defaulting to namespace `ns`.
    pub fn namespace(&self, ns: &str) -> Kubectl {
        Kubectl { namespace: Some(ns.to_string()), ..self.clone() }
    }

    /// A specific kubectl binary (`version("1.27")` → `kubectl.1.27`, or a path).
    pub fn version(&self, v: &str) -> Kubectl {
        let bin = if v.contains('/') { PathBuf::from(v) } else { Path::new(KUBECTL_VERSIONS_DIR).join(format!("kubectl.{v}")) };
        assert!(bin.exists(), "{} is not installed", bin.display());
        Kubectl { bin, ..self.clone() }
    }

    pub fn with_kubeconfig(&self, path: &Path) -> Kubectl {
        Kubectl { kubeconfig: path.to_path_buf(), context: None, ..self.clone() }
    }

    fn command(&self, args: &[&str], request_timeout: Option<&str>) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()))
            .env("HOME", &self.home)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("LANG", "C.UTF-8")
            .arg(format!("--cache-dir={}", self.home.join(".kube").join("cache").display()));
        if let Some(t) = request_timeout {
            cmd.arg(format!("--request-timeout={t}"));
        }
        if let Some(c) = &self.context {
            cmd.arg(format!("--context={c}"));
        }
        if let Some(n) = &self.namespace {
            cmd.arg(format!("--namespace={n}"));
        }
        cmd.args(args);
        cmd
    }

    fn describe_args(&self, args: &[&str]) -> Vec<String> {
        let mut v = Vec::new();
        if self.bin != Path::new(KUBECTL) {
            v.push(format!("[{}]", self.bin.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default()));
        }
        if let Some(c) = &self.context {
            v.push(format!("--context={c}"));
        }
        if let Some(n) = &self.namespace {
            v.push(format!("-n={n}"));
        }
        v.extend(args.iter().map(|s| s.to_string()));
        v
    }

    /// Runs kubectl with `args`; never panics on a failing command.
    pub fn run(&self, args: &[&str]) -> Output {
        self.run_with_stdin(args, None)
    }

    /// Runs kubectl with `stdin` fed to it (for `-f -`).
    pub fn run_stdin(&self, args: &[&str], stdin: &str) -> Output {
        self.run_with_stdin(args, Some(stdin))
    }

    fn run_with_stdin(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut cmd = self.command(args, Some(&self.request_timeout));
        cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() }).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("running {}: {e}", self.bin.display()));
        if let Some(input) = stdin {
            let mut w = child.stdin.take().expect("stdin");
            let input = input.to_string();
            std::thread::spawn(move || {
                let _ = w.write_all(input.as_bytes());
            });
        }
        let out = child.stdout.take().expect("stdout");
        let err = child.stderr.take().expect("stderr");
        let read = |mut r: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let _ = r.read_to_end(&mut buf);
                String::from_utf8_lossy(&buf).into_owned()
            })
        };
        let out_t = read(Box::new(out));
        let err_t = read(Box::new(err));
        let deadline = Instant::now() + COMMAND_DEADLINE;
        let mut timed_out = false;
        let status = loop {
            if let Some(s) = child.try_wait().expect("wait for kubectl") {
                break Some(s);
            }
            if Instant::now() >= deadline {
                timed_out = true;
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let stdout = out_t.join().expect("stdout reader");
        let mut stderr = err_t.join().expect("stderr reader");
        if timed_out {
            stderr.push_str(&format!("\n[test harness: killed after {COMMAND_DEADLINE:?}]"));
        }
        let o = Output { args: self.describe_args(args), code: status.and_then(|s| s.code()).unwrap_or(-1), stdout, stderr };
        eprintln!("$ kubectl {}  → {}", o.args.join(" "), o.code);
        o
    }

    /// Runs kubectl and returns stdout; panics with the whole output if it fails.
    pub fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(o.success(), "expected success:\n{o}");
        o.stdout
    }

    pub fn ok_stdin(&self, args: &[&str], stdin: &str) -> String {
        let o = self.run_stdin(args, stdin);
        assert!(o.success(), "expected success:\n{o}");
        o.stdout
    }

    /// Runs kubectl, expecting it to fail; returns the output.
    pub fn fails(&self, args: &[&str]) -> Output {
        let o = self.run(args);
        assert!(!o.success(), "expected failure:\n{o}");
        o
    }

    pub fn fails_stdin(&self, args: &[&str], stdin: &str) -> Output {
        let o = self.run_stdin(args, stdin);
        assert!(!o.success(), "expected failure:\n{o}");
        o
    }

    /// `kubectl ARGS -o json`, parsed.
    pub fn json(&self, args: &[&str]) -> Value {
        let mut a = args.to_vec();
        a.extend(["-o", "json"]);
        let out = self.ok(&a);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("`kubectl {}` printed no JSON ({e}):\n{out}", a.join(" ")))
    }

    /// `kubectl get ARGS -o name`, as a sorted list.
    pub fn names(&self, args: &[&str]) -> Vec<String> {
        let mut a = vec!["get"];
        a.extend_from_slice(args);
        a.extend(["-o", "name"]);
        let mut v: Vec<String> = self.ok(&a).lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect();
        v.sort();
        v
    }

    /// Starts `kubectl ARGS` in the background (for `get -w`); lines are collected.
    pub fn spawn(&self, args: &[&str]) -> Background {
        // No request timeout: a watch lasts as long as the test needs it.
        let mut cmd = self.command(args, None);
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("running {}: {e}", self.bin.display()));
        let lines = Arc::new(Mutex::new(Vec::<String>::new()));
        let errs = Arc::new(Mutex::new(String::new()));
        let out = child.stdout.take().expect("stdout");
        let err = child.stderr.take().expect("stderr");
        {
            let lines = lines.clone();
            std::thread::spawn(move || {
                for l in BufReader::new(out).lines() {
                    let Ok(l) = l else { break };
                    eprintln!("  [watch] {l}");
                    lines.lock().unwrap().push(l);
                }
            });
        }
        {
            let errs = errs.clone();
            std::thread::spawn(move || {
                let mut s = String::new();
                let _ = BufReader::new(err).read_to_string(&mut s);
                errs.lock().unwrap().push_str(&s);
            });
        }
        eprintln!("$ kubectl {} &", self.describe_args(args).join(" "));
        Background { child, lines, stderr: errs, args: self.describe_args(args) }
    }
}

/// A kubectl running in the background; killed on drop.
pub struct Background {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<String>>,
    args: Vec<String>,
}

impl Background {
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits until a line at index >= `from` satisfies `pred`; returns its index and text.
    pub fn wait_line(&mut self, from: usize, timeout: Duration, what: &str, pred: impl Fn(&str) -> bool) -> (usize, String) {
        let deadline = Instant::now() + timeout;
        loop {
            {
                let lines = self.lines.lock().unwrap();
                if let Some((i, l)) = lines.iter().enumerate().skip(from).find(|(_, l)| pred(l)) {
                    return (i, l.clone());
                }
            }
            let exited = self.child.try_wait().ok().flatten();
            if Instant::now() >= deadline || exited.is_some() {
                // Give the readers a moment to drain.
                std::thread::sleep(Duration::from_millis(200));
                panic!(
                    "`kubectl {}`: no line {what} within {timeout:?} (exited: {exited:?})\n--- lines ---\n{}\n--- stderr ---\n{}",
                    self.args.join(" "),
                    self.lines().join("\n"),
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Retries `f` until it returns `Ok` or `timeout` passes; panics with the last error.
pub fn eventually<T>(timeout: Duration, what: &str, mut f: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        match f() {
            Ok(v) => return v,
            Err(e) if Instant::now() >= deadline => panic!("{what}: not true within {timeout:?}; last attempt:\n{e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// Whitespace-separated columns of a table header, with the multi-word kubectl headers
/// (`NOMINATED NODE`, `READINESS GATES`, `LAST SEEN`) kept together.
pub fn header_columns(line: &str) -> Vec<String> {
    line.split("  ").map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect()
}

/// The row of a table whose first column is `name`, split on whitespace.
pub fn row<'a>(table: &'a str, name: &str) -> Option<Vec<&'a str>> {
    table.lines().map(|l| l.split_whitespace().collect::<Vec<_>>()).find(|cols| cols.first() == Some(&name))
}

/// A JSON value at `pointer`, as a string (panics with the object if absent).
pub fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or_else(|| panic!("{pointer} is not a string in:\n{v:#}"))
}

/// A resourceVersion (opaque in Kubernetes; a store revision in Keelson) as a number.
pub fn rv_of(v: &Value) -> u64 {
    str_at(v, "/metadata/resourceVersion").parse().unwrap_or_else(|_| panic!("resourceVersion is not numeric in:\n{v:#}"))
}

/// A kubeconfig for the server at `url` whose user has only a bogus bearer token (no
/// client certificate): the server must answer 401.
pub fn bogus_token_kubeconfig(dir: &Path, url: &str) -> PathBuf {
    let path = dir.join("bogus-token.kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: keelson\n  cluster:\n    server: {url}\n    insecure-skip-tls-verify: true\nusers:\n- name: nobody\n  user:\n    token: not-a-valid-token\ncontexts:\n- name: nobody\n  context:\n    cluster: keelson\n    user: nobody\ncurrent-context: nobody\n"
    );
    std::fs::write(&path, text).expect("write kubeconfig");
    path
}

/// Checks of details (message wording, extra fields) that do not stop a test's flow:
/// failures are collected and reported together by `finish`, so one run of a test shows
/// every deviation rather than only the first.
#[derive(Default)]
pub struct Soft {
    failures: Vec<String>,
}

impl Soft {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn check(&mut self, ok: bool, msg: impl FnOnce() -> String) {
        if !ok {
            let m = msg();
            eprintln!("CHECK FAILED: {m}");
            self.failures.push(m);
        }
    }

    pub fn contains(&mut self, haystack: &str, needle: &str, context: &str) {
        self.check(haystack.contains(needle), || format!("{context}: expected to find {needle:?} in:\n{haystack}"));
    }

    pub fn eq<T: PartialEq + std::fmt::Debug>(&mut self, got: T, want: T, context: &str) {
        self.check(got == want, || format!("{context}: got {got:?}, want {want:?}"));
    }

    /// Panics listing every failed check.
    pub fn finish(self) {
        if !self.failures.is_empty() {
            panic!("{} check(s) failed:\n\n{}", self.failures.len(), self.failures.join("\n\n"));
        }
    }
}
