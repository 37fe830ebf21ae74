//! End-to-end tests of the `keelson-jepsen` binary: verdicts and exit codes.

use std::path::{Path, PathBuf};
use std::process::Command;

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run(args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_keelson-jepsen"))
        .args(args)
        .output()
        .expect("runs");
    Run {
        code: out.status.code().expect("exit code"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    path
}

fn log(lines: &[&str]) -> String {
    lines
        .iter()
        .map(|l| format!("INFO  jepsen.util - {l}\n"))
        .collect()
}

fn check(model: &str, format: &str, path: &Path) -> Run {
    run(&[
        "check",
        "--model",
        model,
        "--format",
        format,
        path.to_str().expect("utf-8"),
    ])
}

#[test]
fn linearizable_log_exits_0() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = file(
        dir.path(),
        "ok.log",
        &log(&[
            "0\t:invoke\t:write\t1",
            "1\t:invoke\t:read\tnil",
            "0\t:ok\t:write\t1",
            "1\t:ok\t:read\t1",
        ]),
    );
    let r = check("cas-register", "jepsen-log", &path);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout
            .starts_with("linearizable: model cas-register, 2 ops"),
        "{}",
        r.stdout
    );
    assert_eq!(r.stdout.lines().count(), 1, "one-line verdict");
}

#[test]
fn violation_exits_1_with_explanation_and_timeline() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = file(
        dir.path(),
        "bad.log",
        &log(&[
            "0\t:invoke\t:write\t1",
            "0\t:ok\t:write\t1",
            "0\t:invoke\t:write\t2",
            "0\t:ok\t:write\t2",
            "1\t:invoke\t:read\tnil",
            "1\t:ok\t:read\t1",
        ]),
    );
    let timeline = dir.path().join("t.html");
    let r = run(&[
        "check",
        "--model",
        "cas-register",
        "--format",
        "jepsen-log",
        path.to_str().expect("utf-8"),
        "--timeline",
        timeline.to_str().expect("utf-8"),
    ]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.starts_with("NOT linearizable"), "{}", r.stdout);
    assert!(
        r.stdout.contains("cannot linearize: #2 p1 read -> 1"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("sub-history"), "{}", r.stdout);
    let html = std::fs::read_to_string(&timeline).expect("timeline written");
    assert!(html.contains("<svg") && html.contains("read → 1"), "{html}");
}

#[test]
fn kv_edn_violation_names_the_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = file(
        dir.path(),
        "kv.edn",
        r#"{:process 0, :type :invoke, :f :append, :key "3", :value "x 0 0 y"}
{:process 0, :type :ok, :f :append, :key "3", :value "x 0 0 y"}
{:process 1, :type :invoke, :f :get, :key "3", :value nil}
{:process 1, :type :ok, :f :get, :key "3", :value ""}
"#,
    );
    let r = check("kv", "jepsen-edn", &path);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("key \"3\" is not linearizable"),
        "{}",
        r.stdout
    );
}

#[test]
fn keelson_jsonl_register_and_watch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = file(
        dir.path(),
        "h.jsonl",
        r#"{"process":3,"type":"invoke","f":"cas","key":"k1","value":[null,2],"time":100}
{"process":3,"type":"ok","f":"cas","key":"k1","value":[null,2],"time":130}
{"process":4,"type":"invoke","f":"read","key":"k1","value":null,"time":140}
{"process":4,"type":"ok","f":"read","key":"k1","value":2,"time":150}
"#,
    );
    let r = check("cas-register", "keelson", &path);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);

    let watch = file(
        dir.path(),
        "w.jsonl",
        r#"{"process":1,"type":"invoke","f":"put","key":"a","value":"x","time":1}
{"process":1,"type":"ok","f":"put","key":"a","value":"x","revision":5,"time":2}
{"process":9,"type":"ok","f":"watch","watcher":1,"key":"a","revision":4,"time":3}
{"process":9,"type":"ok","f":"watch-event","watcher":1,"key":"a","event":"put","value":"x","revision":5,"time":4}
"#,
    );
    let r = check("watch", "keelson", &watch);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.starts_with("watch streams valid"), "{}", r.stdout);

    let gap = file(
        dir.path(),
        "gap.jsonl",
        r#"{"process":1,"type":"invoke","f":"put","key":"a","value":"x","time":1}
{"process":1,"type":"ok","f":"put","key":"a","value":"x","revision":5,"time":2}
{"process":9,"type":"ok","f":"watch","watcher":1,"key":"a","revision":4,"time":3}
{"process":9,"type":"ok","f":"watch-progress","watcher":1,"revision":6,"time":4}
"#,
    );
    let r = check("watch", "keelson", &gap);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("never delivered"), "{}", r.stdout);
}

#[test]
fn unreadable_input_exits_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("missing.log");
    let r = check("cas-register", "jepsen-log", &missing);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("missing.log"), "{}", r.stderr);

    let malformed = file(
        dir.path(),
        "bad.log",
        &log(&["0\t:invoke\t:read\tnil", "1\t:invoke\t:cas\t[1 2"]),
    );
    let r = check("cas-register", "jepsen-log", &malformed);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("bad.log:2:"), "{}", r.stderr);

    let kv_ops = file(
        dir.path(),
        "kv.edn",
        "{:process 0, :type :invoke, :f :get, :key \"1\", :value nil}\n",
    );
    let r = check("cas-register", "jepsen-edn", &kv_ops);
    assert_eq!(r.code, 2, "model mismatch: {}", r.stderr);
    assert!(r.stderr.contains("no function `get`"), "{}", r.stderr);

    let r = check("watch", "jepsen-log", &malformed);
    assert_eq!(r.code, 2);

    let r = run(&["check", "--model", "bogus", "--format", "keelson", "x"]);
    assert_eq!(r.code, 2, "usage errors exit 2");
}

#[test]
fn run_offers_the_kubernetes_api_workloads() {
    let r = run(&["run", "--help"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    for w in ["register", "watch", "store-register", "store-watch", "Kubernetes API"] {
        assert!(r.stdout.contains(w), "{w} missing from:\n{}", r.stdout);
    }
    let r = run(&["run", "--workload", "kube-nope"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("store-register"), "{}", r.stderr);
}
