//! The `keelson agent` processes on this machine, read from `/proc`: what the benches on
//! real nodes report of the agents' memory and CPU.

/// One agent process.
#[derive(Clone, Debug)]
pub(crate) struct AgentProcess {
    /// Its `--name` (the node), when given on the command line.
    pub(crate) node: Option<String>,
    pub(crate) rss_bytes: u64,
    pub(crate) cpu_seconds: f64,
}

/// Every `keelson agent` process running now.
pub(crate) fn agent_processes() -> Vec<AgentProcess> {
    let ticks = 100.0; // USER_HZ on Linux
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = cmd.split(|b| *b == 0).collect();
        let is_agent = args.len() > 1 && args[0].ends_with(b"keelson") && args[1] == b"agent";
        if !is_agent {
            continue;
        }
        let node = args.windows(2).find(|w| w[0] == b"--name").map(|w| String::from_utf8_lossy(w[1]).to_string());
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let rss_kb: u64 = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok()).unwrap_or(0);
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        let f: Vec<&str> = after.split_whitespace().collect();
        let cpu = f.get(11).and_then(|u| u.parse::<f64>().ok()).unwrap_or(0.0) + f.get(12).and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0);
        out.push(AgentProcess { node, rss_bytes: rss_kb * 1024, cpu_seconds: cpu / ticks });
    }
    out
}

/// The agent serving node `node`.
pub(crate) fn agent_of(node: &str) -> Option<AgentProcess> {
    agent_processes().into_iter().find(|a| a.node.as_deref() == Some(node))
}
