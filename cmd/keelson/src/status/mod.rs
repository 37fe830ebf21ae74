//! `keelson status`: the cluster at a glance. [`gather`] reads the cluster into a
//! [`report::ClusterStatus`]; [`render`] draws it as text or JSON without I/O.

mod gather;
mod render;
mod report;

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::cli_cluster::Target;

#[derive(Args)]
pub struct StatusArgs {
    #[command(flatten)]
    target: Target,
    /// The admin kubeconfig whose contexts (named as the servers) reach each server's API
    /// (default: CLUSTER_DIR/kubeconfig; with --server alone, $KUBECONFIG).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Machine-readable output: one JSON document (with --watch, one per line).
    #[arg(long)]
    json: bool,
    /// Refresh until Ctrl-C: in place on a terminal, else one frame after another.
    #[arg(long)]
    watch: bool,
    /// Time between refreshes with --watch: `2s`, `500ms`, `1m`.
    #[arg(long, default_value = "2s", value_parser = crate::components::parse_duration)]
    interval: Duration,
}

/// What goes before each frame of `--watch` text output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FrameStart {
    /// A terminal: move home and clear, so the frame redraws in place.
    ClearScreen,
    /// A pipe or file: a separator line with the time.
    Separator,
}

const CLEAR_SCREEN: &str = "\x1b[H\x1b[2J";

/// One frame of output: pretty JSON once, a JSON line per frame with --watch, else text.
fn frame(status: &report::ClusterStatus, json: bool, watch: Option<FrameStart>, now: &str) -> String {
    match (json, watch) {
        (true, None) => format!("{:#}\n", render::json(status)),
        (true, Some(_)) => format!("{}\n", render::json(status)),
        (false, None) => render::text(status),
        (false, Some(FrameStart::ClearScreen)) => format!("{CLEAR_SCREEN}keelson status at {now} (Ctrl-C stops)\n\n{}", render::text(status)),
        (false, Some(FrameStart::Separator)) => format!("--- keelson status at {now}\n{}", render::text(status)),
    }
}

pub async fn run(args: StatusArgs) -> anyhow::Result<()> {
    let kubeconfig = args.target.kubeconfig(args.kubeconfig.as_deref());
    if !args.watch {
        let status = gather::gather(&args.target, kubeconfig.as_deref()).await?;
        print!("{}", frame(&status, args.json, None, ""));
        return Ok(());
    }
    let start = if std::io::stdout().is_terminal() { FrameStart::ClearScreen } else { FrameStart::Separator };
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        let gathered = tokio::select! {
            _ = &mut ctrl_c => return Ok(()),
            g = gather::gather(&args.target, kubeconfig.as_deref()) => g,
        };
        let now = jiff::Timestamp::now().round(jiff::Unit::Second).map(|t| t.to_string()).unwrap_or_default();
        let out = match gathered {
            Ok(status) => frame(&status, args.json, Some(start), &now),
            // A frame saying so: the next refresh may find the servers again.
            Err(e) if args.json => format!("{}\n", serde_json::json!({"error": format!("{e:#}")})),
            Err(e) => format!("{}--- keelson status at {now}\nno status: {e:#}\n", if start == FrameStart::ClearScreen { CLEAR_SCREEN } else { "" }),
        };
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(out.as_bytes())?;
        stdout.flush()?;
        drop(stdout);
        tokio::select! {
            _ = &mut ctrl_c => return Ok(()),
            _ = tokio::time::sleep(args.interval) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use report::{ApiHealth, ClusterStatus, ServerStatus};

    fn status() -> ClusterStatus {
        let api = ApiHealth::Down { url: "https://127.0.0.1:6443".into(), reason: "connection refused".into() };
        ClusterStatus {
            leader: None,
            servers: vec![ServerStatus { id: 1, name: "keelson-1".into(), addr: "127.0.0.1:2380".into(), voter: true, raft: Err("refused".into()), api }],
            leases: Ok(vec![]),
            nodes: Ok(vec![]),
        }
    }

    #[test]
    fn watch_frames_clear_a_terminal_and_separate_in_a_pipe() {
        let st = status();
        let tty = frame(&st, false, Some(FrameStart::ClearScreen), "T");
        assert!(tty.starts_with(CLEAR_SCREEN) && tty.contains("keelson status at T"), "{tty:?}");
        let pipe = frame(&st, false, Some(FrameStart::Separator), "T");
        assert!(pipe.starts_with("--- keelson status at T\nLeader: none\n") && !pipe.contains('\x1b'), "{pipe:?}");
        assert_eq!(frame(&st, false, None, "T"), render::text(&st));
    }

    #[test]
    fn json_is_one_line_per_frame_when_watching() {
        let st = status();
        let line = frame(&st, true, Some(FrameStart::Separator), "T");
        assert_eq!(line.lines().count(), 1);
        assert_eq!(serde_json::from_str::<serde_json::Value>(&line).unwrap(), render::json(&st));
        let once = frame(&st, true, None, "T");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&once).unwrap(), render::json(&st));
    }
}
