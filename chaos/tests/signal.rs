//! `cleanup_on_signal`: a process running a harness gets SIGTERM and leaves nothing
//! behind. The test runs itself again as that child process (env `KC_SIGNAL_CHILD`).
//! Works with and without root (Netns or Loopback via `Isolation::Auto`).

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use keelson_chaos::{cleanup_on_signal, Harness, Isolation};
use tokio_util::sync::CancellationToken;

const CHILD_ENV: &str = "KC_SIGNAL_CHILD";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_cleans_up_servers_and_namespaces() -> anyhow::Result<()> {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        // The child: start a cluster, install the handler, wait to be signalled.
        let h = Harness::start(spec(3, std::path::Path::new(&dir), Isolation::Auto, 1)).await?;
        let _handler = cleanup_on_signal(CancellationToken::new());
        println!("READY {}", h.cluster().run_id());
        tokio::time::sleep(Duration::from_secs(60)).await;
        anyhow::bail!("the child was not signalled within 60 s");
    }
    let t0 = Instant::now();
    let tmp = tempfile::tempdir()?;
    let mut child = Command::new(std::env::current_exe()?)
        .args(["--exact", "sigterm_cleans_up_servers_and_namespaces", "--nocapture", "--test-threads", "1"])
        .env(CHILD_ENV, tmp.path())
        .env("KEELSON_BIN", keelson_bin())
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = child.stdout.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(id) = line.split_whitespace().skip_while(|w| *w != "READY").nth(1) {
                let _ = tx.send(id.to_string());
            }
        }
    });
    let run = match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(id) => format!("kc{id}"),
        Err(_) => {
            let _ = child.kill();
            anyhow::bail!("the child never became ready");
        }
    };
    assert_eq!(processes_mentioning(&tmp.path().display().to_string()).len(), 3, "three servers run");
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            anyhow::bail!("the child did not exit after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(143), "exit status after SIGTERM");
    assert!(processes_mentioning(&tmp.path().display().to_string()).is_empty(), "servers left: {:?}", processes_mentioning(&tmp.path().display().to_string()));
    if is_root() {
        assert!(namespaces_mentioning(&run)?.is_empty(), "namespaces left: {:?}", namespaces_mentioning(&run)?);
    }
    eprintln!("signal test done in {:.1?}", t0.elapsed());
    Ok(())
}
